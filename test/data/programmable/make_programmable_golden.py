#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Golden cases of programmable attention (Masks::score_mod, mask_mod; docs/programmable.md)
for functors that no built-in option covers, computed by PyTorch in float64 with autograd.

Needs Debian's python3-torch (1.13); run with /usr/bin/python3 from any directory. It writes the
cases listed at the end of this script, as <name>.txt next to it. Each case is seeded from its
own name, so adding a case never changes another.

Each case is one multi-head call [B, H, T, d] (top-left, default scale 1/sqrt(d_k)) whose mask
and logit modification are written here as dense torch tensors, step by step as the library
states them: s = scale Q K^T; s = s + bias_table[h, q - k + T - 1] (relative_bias only);
s = -inf where the mask hides the key; row softmax; OUT = P V; LSE = logsumexp(s). The backward
is torch.autograd on L = sum(OUT * D_OUT), giving dQ, dK, dV and, for relative_bias, the table's
gradient D_TABLE. The script also checks OUT against F._scaled_dot_product_attention with the
same dense float mask (the modification added, -inf where hidden) to 1e-12.

The cases:
  documents      packed documents (DOC_STARTS), causal inside each: q sees k when both lie in
                 one document and k <= q
  prefix_lm      per sequence b a prefix of PREFIX[b] tokens every query sees, causal after it
  relative_bias  a learned table TABLE [H, 2T - 1] added at q - k, causal; D_TABLE its gradient

FILE FORMAT (text, whitespace-separated tokens; one case per file):

    eigen_attention_programmable_golden 1
    case documents|prefix_lm|relative_bias
    then arrays "<NAME> <rank> <n_0> ... <n_rank-1>" followed by their row-major elements, numbers
    with 17 significant digits, "-inf" where infinite, up to "end":
      DOC_STARTS 1 n            documents: the first position of each document (DOC_STARTS[0] = 0)
      PREFIX 1 B                prefix_lm: each sequence's prefix length
      TABLE 2 H 2T-1            relative_bias: the table, entry [h, q - k + T - 1]
      Q 4 B H T d_k, K 4 B H T d_k, V 4 B H T d_v, D_OUT 4 B H T d_v
      OUT 4 B H T d_v, LSE 4 B H T 1, DQ 4 B H T d_k, DK 4 B H T d_k, DV 4 B H T d_v
      D_TABLE 2 H 2T-1          relative_bias only
"""
import hashlib
import math
import os

import torch

torch.set_default_dtype(torch.float64)
HERE = os.path.dirname(os.path.abspath(__file__))


def seeded(name):
    g = torch.Generator()
    g.manual_seed(int(hashlib.sha256(name.encode()).hexdigest()[:12], 16))
    return g


def fmt(x):
    x = float(x)
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return "%.17g" % x


def write_array(out, name, t):
    t = t.detach()
    out.write("%s %d %s\n" % (name, t.dim(), " ".join(str(n) for n in t.shape)))
    rows = t.reshape(-1, t.shape[-1]) if t.dim() > 0 else t.reshape(1, 1)
    for row in rows:
        out.write(" ".join(fmt(x) for x in row.tolist()) + "\n")


def attention(q, k, v, add, visible):
    """The explicit steps: logits, + add, -inf where hidden, softmax, P V, LSE."""
    d = q.shape[-1]
    s = (q @ k.transpose(-1, -2)) / math.sqrt(d) + add
    s = s.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    p = torch.exp(s - lse)
    return p @ v, lse


def case(name, B, H, T, dk, dv, visible_fn, table=False, extra=None):
    g = seeded(name)
    q = torch.randn(B, H, T, dk, generator=g).requires_grad_()
    k = torch.randn(B, H, T, dk, generator=g).requires_grad_()
    v = torch.randn(B, H, T, dv, generator=g).requires_grad_()
    d_out = torch.randn(B, H, T, dv, generator=g)
    qi = torch.arange(T).view(T, 1)
    ki = torch.arange(T).view(1, T)
    visible = torch.stack([torch.stack([visible_fn(b, h, qi, ki) for h in range(H)]) for b in range(B)])
    tab = None
    if table:
        tab = (0.5 * torch.randn(H, 2 * T - 1, generator=g)).requires_grad_()
        add = tab[:, (qi - ki + T - 1)].unsqueeze(0).expand(B, H, T, T)
    else:
        add = torch.zeros(B, H, T, T)
    out, lse = attention(q, k, v, add, visible)
    # SDPA with the same dense float mask agrees.
    float_mask = add.detach().masked_fill(~visible, float("-inf"))
    sdpa, _ = torch.nn.functional._scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), float_mask)
    assert torch.allclose(sdpa, out.detach(), atol=1e-12, rtol=0), name
    (out * d_out).sum().backward()
    with open(os.path.join(HERE, name + ".txt"), "w") as f:
        f.write("eigen_attention_programmable_golden 1\ncase %s\n" % name)
        for n, t in (extra or []):
            write_array(f, n, t)
        if table:
            write_array(f, "TABLE", tab)
        for n, t in (("Q", q), ("K", k), ("V", v), ("D_OUT", d_out), ("OUT", out), ("LSE", lse),
                     ("DQ", q.grad), ("DK", k.grad), ("DV", v.grad)):
            write_array(f, n, t)
        if table:
            write_array(f, "D_TABLE", tab.grad)
        f.write("end\n")


# documents: 4 packed documents of 11, 1, 18 and 10 tokens, causal inside each.
starts = [0, 11, 12, 30]
T = 40


def doc_of(x):
    return sum(1 for s in starts if s <= x) - 1


doc = torch.tensor([doc_of(x) for x in range(T)])
case("documents", 1, 2, T, 8, 6, lambda b, h, qi, ki: (doc[qi.view(-1)].view(-1, 1) == doc[ki.view(-1)].view(1, -1)) & (ki <= qi),
     extra=[("DOC_STARTS", torch.tensor(starts, dtype=torch.float64))])

# prefix_lm: two sequences, prefixes of 5 and 9 tokens.
prefix = [5, 9]
case("prefix_lm", 2, 2, 24, 8, 8, lambda b, h, qi, ki: (ki < prefix[b]) | (ki <= qi),
     extra=[("PREFIX", torch.tensor(prefix, dtype=torch.float64))])

# relative_bias: a learned table per head, causal.
case("relative_bias", 1, 2, 30, 8, 5, lambda b, h, qi, ki: ki <= qi, table=True)
