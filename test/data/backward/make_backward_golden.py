#!/usr/bin/python3
"""Golden cases of the backward calls (attention_backward, attention_heads_backward,
attention_varlen_backward): the gradients dQ, dK, dV and dBIAS of a scalar loss, computed by
PyTorch's autograd in float64.

Needs Debian's python3-torch (1.13); run with /usr/bin/python3 from any directory. It writes
the cases listed at the end of this script, as <name>.txt next to it. Each case is seeded from
its own name (zlib.crc32), so adding a case never changes another.

THE FORWARD is built from explicit float64 torch ops, step by step as MultiHead.hpp and
docs/semantics.md state it, exactly as make_multihead_golden.py's explicit() does: scale,
soft-cap (s = c tanh(s / c)), ALiBi (-slope_h |i + offset - j|), bias, then -inf for the bool
mask, causal (top-left offset 0, bottom-right offset T_k - T_q, T_k being the sequence's key
length under KEY_LENGTHS or varlen), window, and key padding; then the row softmax. Query head h
reads K/V head h / (H / H_kv) (GQA). A row that sees no key has zero weights, a zero OUT row
and LSE = -inf; the softmax is built so that autograd gives such a row exact zero gradients,
not NaN (its logits are replaced by zeros before the softmax and its weights multiplied by 0).

THE LOSS is L = sum(OUT * D_OUT) + sum(SCORES * D_SCORES), the second term only in cases that
have D_SCORES (a loss on the weights themselves). D_OUT = dL/dOUT and D_SCORES = dL/dSCORES
are random; D_SCORES holds standard normal values where a key is visible and values of
magnitude ~1e8 (finite, nonzero) where it is masked, including whole rows that see no key:
the masked weights are constant zeros, so those entries have no effect on any gradient (the
golden gradients below are exactly what autograd gives, which never reads them into a
result), and a library that leaked them would be off by orders of magnitude. torch.autograd
then gives DQ, DK, DV and, when the case wants it, D_BIAS in the bias's own broadcast shape
(summed over the axes it broadcasts). With GQA, DK and DV of a K/V head sum over its query
heads.

THE CROSS-CHECK: wherever SDPA can express the case (no soft-cap), the script also computes
the gradients through PyTorch's own F._scaled_dot_product_attention (1.13) and its autograd,
and asserts that they agree with the explicit ones to 1e-10 (|a - b| <= 1e-10 (1 + |b|)):
  - natively, on the whole tensors, when only plain attention, a bool mask or is_causal
    (top-left, or T_q == T_k) is involved and no row is fully masked (SDPA gives NaN there);
  - otherwise one (sequence, head) at a time over the rows that see some key (a fully masked
    row contributes nothing to any gradient and its DQ row is zero), with one combined float
    mask: ALiBi term + bias, -inf where masked; the bias slice keeps its autograd link, so the
    check covers D_BIAS too.
GQA goes to SDPA as K/V repeated per query head (autograd sums the copies); an explicit scale
as Q scaled by scale * sqrt(d_k) (SDPA 1.13 always divides by sqrt(d_k)).

FILE FORMAT (text, whitespace-separated tokens; one case per file). It extends the multi-head
forward golden format (test/data/multihead/make_multihead_golden.py):

    eigen_attention_backward_golden 1
    mode single|heads|varlen         single: B = H = H_kv = 1, checked through the Eigen
                                     front door attention_backward(); heads: through
                                     attention_heads_backward(); varlen: attention_varlen_backward()
    causal 0|1
    align top_left|bottom_right
    scale default|<number>           default = 1/sqrt(d_k)
    window <left> <right>            -1 = unbounded side (both -1: no window)
    softcap <number>                 0 = off
    then arrays, each a line "<NAME> <rank> <n_0> ... <n_rank-1>" followed by the
    n_0*...*n_rank-1 elements in row-major (C) order, one innermost row per line,
    numbers with 17 significant digits, "-inf" where infinite:
      optional inputs (absent = not used), in this order when present (heads mode only,
      except ALIBI and the CU_SEQLENS, which varlen uses):
        MASK 4 b h T_q T_k        0/1 (1 = may attend); b is 1 or B, h is 1 or H
        BIAS 4 b h T_q T_k        additive bias, same broadcast rules
        KEY_LENGTHS 1 B           integers in [0, T_k]
        ALIBI 1 H                 one slope per query head
        CU_SEQLENS_Q 1 n+1        varlen only: offsets into the packed query rows
        CU_SEQLENS_K 1 n+1        varlen only: offsets into the packed key rows
      the forward's inputs and outputs (always, always in the BHTD layout):
        Q 4 B H T_q d_k
        K 4 B H_kv T_k d_k
        V 4 B H_kv T_k d_v
        OUT 4 B H T_q d_v
        LSE 4 B H T_q 1           -inf for a row that sees no key (its OUT row is 0)
      the upstream gradients:
        D_OUT 4 B H T_q d_v       dL/dOUT
        D_SCORES 4 B H T_q T_k    optional (single and heads modes): dL/dSCORES
      the gradients:
        DQ 4 B H T_q d_k
        DK 4 B H_kv T_k d_k
        DV 4 B H_kv T_k d_v
        D_BIAS 4 b h T_q T_k      optional (only with BIAS): dL/dBIAS, BIAS's shape
    end

In varlen mode B = 1 and T_q, T_k are the packed totals: sequence s owns query rows
[CU_SEQLENS_Q[s], CU_SEQLENS_Q[s+1]) and key rows [CU_SEQLENS_K[s], CU_SEQLENS_K[s+1]), and is
attended on its own (its own T_q, T_k and alignment offset).
"""
import math
import os
import zlib

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
DT = torch.float64
NEG_INF = float("-inf")
MASKED_D_SCORES = 1e8  # magnitude of D_SCORES where the key is masked
SDPA_TOL = 1e-10


# ----------------------------------------------------------------------------- the forward

def logits(q, k, causal=False, align="top_left", scale=None, window=(-1, -1), softcap=0.0,
           mask=None, bias=None, key_lengths=None, alibi=None):
    """Steps 1-5 of the semantics table (make_multihead_golden.py's explicit()), differentiable.
    Returns the masked logits s (-inf where masked), `visible`, and the additive term
    (ALiBi + bias) for the SDPA check."""
    B, H, Tq, dk = q.shape
    Hkv, Tk = k.shape[1], k.shape[2]
    assert H % Hkv == 0
    kr = k.repeat_interleave(H // Hkv, dim=1)  # query head h reads kv head h // (H / H_kv)
    sc = 1.0 / math.sqrt(dk) if scale is None else scale
    s = sc * (q @ kr.transpose(-1, -2))                        # 1. scaled logits
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)                  # 2. soft-cap
    additive = torch.zeros(B, H, Tq, Tk, dtype=DT)
    visible = torch.ones(B, H, Tq, Tk, dtype=torch.bool)
    i = torch.arange(Tq).unsqueeze(1)
    j = torch.arange(Tk).unsqueeze(0)
    for b in range(B):
        length = Tk if key_lengths is None else key_lengths[b]
        offset = 0 if align == "top_left" else length - Tq
        pos = i + offset
        if alibi is not None:                                  # 3. ALiBi
            dist = (pos - j).abs().to(DT)
            additive[b] -= torch.tensor(alibi, dtype=DT).view(H, 1, 1) * dist
        vis = j < length                                       # 5. key padding
        if causal:
            vis = vis & (j <= pos)
        if window[0] >= 0:
            vis = vis & (j >= pos - window[0])
        if window[1] >= 0:
            vis = vis & (j <= pos + window[1])
        visible[b] &= vis
    if bias is not None:                                       # 4. bias
        additive = additive + bias
    if mask is not None:
        visible &= mask
    s = (s + additive).masked_fill(~visible, NEG_INF)
    return s, visible, additive


def forward(q, k, v, **opt):
    """OUT, LSE, SCORES and `visible`, NaN-free under autograd for rows that see no key."""
    s, visible, _ = logits(q, k, **opt)
    H, Hkv = q.shape[1], k.shape[1]
    vr = v.repeat_interleave(H // Hkv, dim=1)
    lse = torch.logsumexp(s.detach(), dim=-1, keepdim=True)   # 7. (-inf: no visible key)
    dead = ~visible.any(dim=-1, keepdim=True)                   # rows that see no key
    safe = torch.where(dead, torch.zeros_like(s), s)            # no -inf-only row in softmax
    w = torch.softmax(safe, dim=-1) * (~dead).to(DT)            # 6. zeros for those rows
    return w @ vr, lse, w, visible                              # 8.


def loss(out, w, d_out, d_scores):
    L = (out * d_out).sum()
    if d_scores is not None:
        L = L + (w * d_scores).sum()
    return L


def grads(L, q, k, v, bias, retain_graph=False):
    leaves = [q, k, v] + ([bias] if bias is not None else [])
    if not L.requires_grad:  # nothing reaches the loss (every row sees no key)
        return [torch.zeros_like(x) for x in leaves]
    g = torch.autograd.grad(L, leaves, allow_unused=True, retain_graph=retain_graph)
    return [torch.zeros_like(x) if gx is None else gx for x, gx in zip(leaves, g)]


# ----------------------------------------------------------------------------- the SDPA check

def sdpa_grads(name, q, k, v, d_out, d_scores, bias, opt):
    """The gradients through F._scaled_dot_product_attention; None when SDPA cannot express
    the case (soft-cap). Returns (grads, how)."""
    if opt.get("softcap", 0.0) > 0:
        return None, "explicit only (soft-cap)"
    B, H, Tq, dk = q.shape
    Hkv, Tk = k.shape[1], k.shape[2]
    g = H // Hkv
    scale = opt.get("scale")
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    bl = bias.detach().clone().requires_grad_(True) if bias is not None else None
    ql, kl, vl = leaves
    qs = ql if scale is None else ql * (scale * math.sqrt(dk))
    kr = kl.repeat_interleave(g, dim=1)
    vr = vl.repeat_interleave(g, dim=1)
    causal, align = opt.get("causal", False), opt.get("align", "top_left")
    mask = opt.get("mask")
    _, visible, _ = logits(q.detach(), k.detach(), **opt)
    any_dead = bool((~visible.any(dim=-1)).any())
    native = (opt.get("alibi") is None and opt.get("window", (-1, -1)) == (-1, -1)
              and opt.get("key_lengths") is None and bias is None and not any_dead
              and not (causal and mask is not None)
              and not (causal and align == "bottom_right" and Tq != Tk))
    if native:
        attn_mask = None if mask is None else mask.expand(B, H, Tq, Tk).contiguous()
        o, w = F._scaled_dot_product_attention(qs, kr, vr, attn_mask, 0.0, True, causal)
        L = loss(o, w, d_out, d_scores)
        how = "SDPA native"
    else:
        # One (sequence, head) at a time, over the rows that see some key, with the combined
        # float mask; the bias slice keeps its autograd link.
        nob = {key: val for key, val in opt.items() if key != "bias"}
        _, _, additive = logits(q.detach(), k.detach(), **nob)  # ALiBi term alone
        L = torch.zeros((), dtype=DT)
        for b in range(B):
            for h in range(H):
                live = visible[b, h].any(dim=-1).nonzero().flatten()
                if live.numel() == 0:
                    continue
                fm = additive[b, h][live].clone()
                if bl is not None:
                    fm = fm + bl[b if bl.shape[0] > 1 else 0, h if bl.shape[1] > 1 else 0][live]
                fm = fm.masked_fill(~visible[b, h][live], NEG_INF)
                o, w = F._scaled_dot_product_attention(
                    qs[b, h][live].view(1, 1, -1, dk), kr[b, h].view(1, 1, Tk, dk),
                    vr[b, h].view(1, 1, Tk, -1), fm.view(1, 1, -1, Tk), 0.0, True, False)
                assert not torch.isnan(o).any() and not torch.isnan(w).any(), name
                L = L + (o[0, 0] * d_out[b, h][live]).sum()
                if d_scores is not None:
                    L = L + (w[0, 0] * d_scores[b, h][live]).sum()
        how = "SDPA float mask per head"
    return grads(L, ql, kl, vl, bl), how


def assert_close(name, what, a, b):
    assert a.shape == b.shape, f"{name}: {what} shapes {a.shape} {b.shape}"
    assert not torch.isnan(a).any() and not torch.isnan(b).any(), f"{name}: {what} has NaN"
    excess = ((a - b).abs() / (1 + b.abs())).max().item() if a.numel() else 0.0
    assert excess <= SDPA_TOL, f"{name}: {what}: SDPA and explicit differ by {excess:.3e}"
    return excess


# ----------------------------------------------------------------------------- writing

def fmt(x):
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.17g}"


def write_array(f, name, t, integer=False):
    t = torch.as_tensor(t).detach()
    dims = list(t.shape)
    f.write(f"{name} {len(dims)} {' '.join(str(d) for d in dims)}\n")
    if t.numel() == 0:
        return
    for row in t.reshape(-1, dims[-1]).tolist():
        if integer:
            f.write(" ".join(str(int(x)) for x in row) + "\n")
        else:
            f.write(" ".join(fmt(float(x)) for x in row) + "\n")


def write_header(f, mode, opt):
    scale, window = opt.get("scale"), opt.get("window", (-1, -1))
    f.write("eigen_attention_backward_golden 1\n")
    f.write(f"mode {mode}\ncausal {int(opt.get('causal', False))}\n")
    f.write(f"align {opt.get('align', 'top_left')}\n")
    f.write("scale default\n" if scale is None else f"scale {fmt(scale)}\n")
    f.write(f"window {window[0]} {window[1]}\n")
    f.write(f"softcap {fmt(opt.get('softcap', 0.0))}\n")


def rand(*shape, mag=1.0):
    return torch.randn(*shape, dtype=DT) * mag


def alibi_slopes(H):
    # The ALiBi paper's geometric slopes 2^(-8 (h+1) / H): exact in float.
    return [2.0 ** (-8.0 * (h + 1) / H) for h in range(H)]


def make_d_scores(visible):
    """Standard normal where visible, ~1e8 (either sign, never 0) where masked."""
    ds = torch.randn(*visible.shape, dtype=DT)
    big = (1.0 + torch.rand(*visible.shape, dtype=DT)) * MASKED_D_SCORES
    big = torch.where(torch.rand(*visible.shape) < 0.5, -big, big)
    return torch.where(visible, ds, big)


CASES = []


def heads_case(name, B, H, Hkv, Tq, Tk, dk, dv, causal=False, align="top_left", scale=None,
               window=(-1, -1), softcap=0.0, mask=None, bias=None, key_lengths=None, alibi=False,
               mag=1.0, dead_row=False, d_scores=False, d_out_zero=False, d_bias=True,
               mode="heads"):
    """mask / bias: None or the broadcast shape "1x1", "Bx1", "BxH", "1xH". mode "single"
    (B = H = H_kv = 1, no Masks) is checked through the Eigen front door."""
    if mode == "single":
        assert B == H == Hkv == 1 and mask is None and bias is None and key_lengths is None
        assert not alibi
    torch.manual_seed(zlib.crc32(name.encode()))
    q = rand(B, H, Tq, dk, mag=mag).requires_grad_(True)
    k = rand(B, Hkv, Tk, dk, mag=mag).requires_grad_(True)
    v = rand(B, Hkv, Tk, dv).requires_grad_(True)

    def bshape(spec):
        b, h = spec.split("x")
        return (B if b == "B" else 1, H if h == "H" else 1, Tq, Tk)

    m = None
    if mask is not None:
        m = torch.rand(*bshape(mask)) < 0.7
        if dead_row:
            m[..., Tq // 2, :] = False  # one fully masked query row everywhere
    bi = None
    if bias is not None:
        bi = rand(*bshape(bias)).requires_grad_(d_bias)
    slopes = alibi_slopes(H) if alibi else None
    opt = dict(causal=causal, align=align, scale=scale, window=window, softcap=softcap, mask=m,
               bias=bi, key_lengths=key_lengths, alibi=slopes)
    out, lse, w, visible = forward(q, k, v, **opt)
    d_o = torch.zeros(B, H, Tq, dv, dtype=DT) if d_out_zero else rand(B, H, Tq, dv)
    d_s = make_d_scores(visible) if d_scores else None
    gq, gk, gv, *gb = grads(loss(out, w, d_o, d_s), q, k, v, bi if d_bias else None,
                            retain_graph=d_s is not None)
    if d_s is not None:  # the masked entries of D_SCORES have no effect: zeroed, same gradients
        zeroed = torch.where(visible, d_s, torch.zeros_like(d_s))
        again = grads(loss(out, w, d_o, zeroed), q, k, v, bi if d_bias else None)
        assert all(torch.equal(a, b) for a, b in zip(again, [gq, gk, gv] + gb)), name
    for what, t in (("DQ", gq), ("DK", gk), ("DV", gv)) + ((("D_BIAS", gb[0]),) if gb else ()):
        assert torch.isfinite(t).all(), f"{name}: {what} not finite"
    # The weights of a row that sees no key are constant zeros: its DQ row is exactly zero.
    dead = ~visible.any(dim=-1)
    assert (gq[dead] == 0).all(), name

    ref, how = sdpa_grads(name, q, k, v, d_o, d_s, bi, opt)
    if ref is not None:
        ex = max(assert_close(name, n, a, b)
                 for n, a, b in zip(("DQ", "DK", "DV", "D_BIAS"), ref, [gq, gk, gv] + gb))
        how += f" (max excess {ex:.1e})"

    with open(os.path.join(HERE, name + ".txt"), "w") as f:
        write_header(f, mode, opt)
        if m is not None:
            write_array(f, "MASK", m.to(torch.int64), integer=True)
        if bi is not None:
            write_array(f, "BIAS", bi)
        if key_lengths is not None:
            write_array(f, "KEY_LENGTHS", torch.tensor(key_lengths), integer=True)
        if slopes is not None:
            write_array(f, "ALIBI", torch.tensor(slopes, dtype=DT))
        for n, t in (("Q", q), ("K", k), ("V", v), ("OUT", out), ("LSE", lse), ("D_OUT", d_o)):
            write_array(f, n, t)
        if d_s is not None:
            write_array(f, "D_SCORES", d_s)
        for n, t in (("DQ", gq), ("DK", gk), ("DV", gv)):
            write_array(f, n, t)
        if gb:
            write_array(f, "D_BIAS", gb[0])
        f.write("end\n")
    CASES.append((name, mode, how))


def single_case(name, Tq, Tk, dk, dv, **kw):
    heads_case(name, 1, 1, 1, Tq, Tk, dk, dv, mode="single", **kw)


def varlen_case(name, H, Hkv, q_lens, k_lens, dk, dv, causal=False, align="top_left", scale=None,
                window=(-1, -1), softcap=0.0, alibi=False):
    torch.manual_seed(zlib.crc32(name.encode()))
    tq, tk = sum(q_lens), sum(k_lens)
    q = rand(1, H, tq, dk).requires_grad_(True)
    k = rand(1, Hkv, tk, dk).requires_grad_(True)
    v = rand(1, Hkv, tk, dv).requires_grad_(True)
    d_o = rand(1, H, tq, dv)
    slopes = alibi_slopes(H) if alibi else None
    opt = dict(causal=causal, align=align, scale=scale, window=window, softcap=softcap,
               alibi=slopes)
    out = torch.zeros(1, H, tq, dv, dtype=DT)
    lse = torch.full((1, H, tq, 1), NEG_INF, dtype=DT)
    L = torch.zeros((), dtype=DT)
    cq, ck = [0], [0]
    hows, excess = set(), 0.0
    for lq, lk in zip(q_lens, k_lens):
        cq.append(cq[-1] + lq)
        ck.append(ck[-1] + lk)
        rq, rk = slice(cq[-2], cq[-1]), slice(ck[-2], ck[-1])
        qs, ks, vs = q[:, :, rq], k[:, :, rk], v[:, :, rk]  # views: autograd reaches q, k, v
        if lq == 0:
            continue
        o, l, w, _ = forward(qs, ks, vs, **opt)
        L = L + loss(o, w, d_o[:, :, rq], None)
        out[:, :, rq] = o.detach()
        lse[:, :, rq] = l
        if lk == 0:
            hows.add("no keys")
            continue
        # The SDPA check, sequence by sequence.
        ref, how = sdpa_grads(name, qs.detach(), ks.detach(), vs.detach(), d_o[:, :, rq], None,
                              None, opt)
        hows.add(how)
        if ref is not None:
            mine = grads(loss(o, w, d_o[:, :, rq], None), qs, ks, vs, None, retain_graph=True)
            excess = max([excess] + [assert_close(name, n, a, b)
                                     for n, a, b in zip(("DQ", "DK", "DV"), ref, mine)])
    gq, gk, gv = grads(L, q, k, v, None)
    assert torch.isfinite(gq).all() and torch.isfinite(gk).all() and torch.isfinite(gv).all()
    how = ", ".join(sorted(hows))
    if "SDPA" in how:
        how += f" (max excess {excess:.1e})"
    with open(os.path.join(HERE, name + ".txt"), "w") as f:
        write_header(f, "varlen", opt)
        if slopes is not None:
            write_array(f, "ALIBI", torch.tensor(slopes, dtype=DT))
        write_array(f, "CU_SEQLENS_Q", torch.tensor(cq), integer=True)
        write_array(f, "CU_SEQLENS_K", torch.tensor(ck), integer=True)
        for n, t in (("Q", q), ("K", k), ("V", v), ("OUT", out), ("LSE", lse), ("D_OUT", d_o),
                     ("DQ", gq), ("DK", gk), ("DV", gv)):
            write_array(f, n, t)
        f.write("end\n")
    CASES.append((name, "varlen", how))


# ----------------------------------------------------------------------------- the cases

# One head through the Eigen front door (B = H = H_kv = 1).
single_case("single_plain", 5, 7, 6, 4)
single_case("single_causal_top_left_square", 7, 7, 5, 3, causal=True)
single_case("single_causal_bottom_right", 4, 9, 5, 3, causal=True, align="bottom_right")
single_case("single_causal_top_left_more_queries", 9, 5, 4, 3, causal=True)  # no dead row
single_case("single_causal_bottom_right_more_queries", 8, 5, 4, 3, causal=True,
            align="bottom_right")  # the first 3 query rows see no key
single_case("single_scale", 6, 6, 7, 4, scale=0.3)
single_case("single_dv_differs", 6, 8, 3, 8)
single_case("single_one_token", 1, 1, 4, 3)
single_case("single_softcap", 7, 9, 6, 4, softcap=2.0, mag=3.0)
single_case("single_window", 10, 10, 4, 3, window=(2, 1))
single_case("single_window_bottom_right_dead_rows", 6, 4, 4, 3, align="bottom_right",
            window=(1, 0))  # rows 0 and 1 see no key
single_case("single_d_scores", 8, 5, 4, 3, causal=True, align="bottom_right", d_scores=True)
single_case("single_d_scores_d_out_zero", 7, 7, 5, 3, causal=True, d_scores=True,
            d_out_zero=True)
single_case("single_large_logits", 6, 8, 8, 4, mag=6.0)  # logits of magnitude ~100
# Multi-head: GQA and MQA
heads_case("gqa_4_2", 2, 4, 2, 5, 6, 4, 3)
heads_case("mqa_4_1", 1, 4, 1, 6, 7, 5, 3, causal=True, align="bottom_right")
# a boolean mask per head, with one fully masked row
heads_case("mask_per_head_dead_row", 2, 2, 1, 6, 7, 4, 3, mask="BxH", dead_row=True)
# biases with their gradients, three broadcasts
heads_case("bias_2d_d_bias", 2, 2, 2, 5, 6, 4, 3, bias="1x1")
heads_case("bias_per_head_d_bias", 2, 2, 1, 5, 6, 4, 3, bias="BxH")
heads_case("bias_per_batch_d_bias", 2, 2, 2, 5, 6, 4, 3, bias="Bx1", causal=True)
# ALiBi, key lengths, windows, soft-cap
heads_case("alibi_causal_bottom_right", 1, 4, 2, 4, 7, 4, 3, alibi=True, causal=True,
           align="bottom_right")
heads_case("key_lengths", 3, 2, 1, 4, 6, 4, 3, key_lengths=[6, 0, 3])
heads_case("window_causal", 2, 2, 2, 6, 8, 4, 3, causal=True, align="bottom_right",
           window=(2, -1))
heads_case("softcap_alibi_bias", 2, 2, 1, 5, 6, 4, 3, softcap=2.0, alibi=True, bias="1xH",
           mag=2.5)
# d_scores with a boolean mask (a fully masked row) and GQA
heads_case("d_scores_mask_gqa", 2, 4, 2, 5, 6, 4, 3, mask="Bx1", dead_row=True, d_scores=True)
# everything at once
heads_case("combo_all", 2, 2, 1, 5, 7, 4, 3, causal=True, align="bottom_right", scale=0.4,
           window=(3, -1), softcap=3.0, mask="BxH", bias="Bx1", key_lengths=[7, 4], alibi=True,
           mag=1.5, d_scores=True)
# packed variable-length batches: an empty sequence (keys, no queries), GQA, causal
# bottom-right with more queries than keys (dead rows); one with a sequence without keys
varlen_case("varlen_causal_bottom_right_gqa", 4, 2, [4, 0, 6], [6, 3, 4], 4, 3, causal=True,
            align="bottom_right")
varlen_case("varlen_window_softcap_alibi", 2, 1, [3, 4, 2], [5, 0, 6], 4, 3, window=(1, 1),
            softcap=3.0, alibi=True, scale=0.5)

if __name__ == "__main__":
    for name, mode, how in CASES:
        print(f"{name:42s} {mode:7s} {how}")
    total = sum(os.path.getsize(os.path.join(HERE, n + ".txt")) for n, _, _ in CASES)
    print(f"{len(CASES)} cases, {total} bytes")
