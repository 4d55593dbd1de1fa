#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Golden cases of the backward calls (attention_backward, attention_heads_backward,
attention_varlen_backward): the gradients dQ, dK, dV and dBIAS of a scalar loss, computed by
PyTorch's autograd in float64.

Needs Debian's python3-torch (1.13); run with /usr/bin/python3 from any directory. It writes
the cases listed at the end of this script, as <name>.txt next to it. Each case is seeded from
its own name (zlib.crc32), so adding a case never changes another.

THE FORWARD is built from explicit float64 torch ops, step by step as MultiHead.hpp and
docs/semantics.md state it, with make_multihead_golden.py's logits() (imported: this script
also takes its seeding, inputs, SDPA argument conventions and file writing from there): scale,
soft-cap (s = c tanh(s / c)), ALiBi (-slope_h |i + offset - j|), bias, then -inf for the bool
mask, causal (top-left offset 0, bottom-right offset T_k - T_q, T_k being the sequence's key
length under KEY_LENGTHS or varlen), window, and key padding; then the row softmax. Query head h
reads K/V head h / (H / H_kv) (GQA). A row that sees no key has zero weights, a zero OUT row
and LSE = -inf; the softmax is built so that autograd gives such a row exact zero gradients,
not NaN (its logits are replaced by zeros before the softmax and its weights multiplied by 0).
With attention sinks (SINKS, Masks::sinks: one logit per query head, a leaf tensor with
requires_grad) the softmax is make_multihead_golden.py's with_sink(): the sink is one more
column of the row's softmax, dropped before V, so the LSE includes it, every row has a finite
LSE (sink_h for a row that sees no key) and autograd also gives dL/dsinks; the weights and the
LSE are checked against the closed form L_i = log(exp(sink_h) + sum_j exp(s_ij)) there.

THE LOSS is L = sum(OUT * D_OUT) + sum(SCORES * D_SCORES) + sum(LSE * D_LSE), the second
term only in cases that have D_SCORES (a loss on the weights themselves), the third only in
cases that have D_LSE (dL/dLSE, BackwardTerms::d_lse: a z-loss, or a loss through the
normaliser) and only over the rows whose LSE is finite. D_OUT = dL/dOUT and D_SCORES = dL/dSCORES
are random; D_SCORES holds standard normal values where a key is visible and values of
magnitude ~1e8 (finite, nonzero) where it is masked, including whole rows that see no key:
the masked weights are constant zeros, so those entries have no effect on any gradient (the
golden gradients below are exactly what autograd gives, which never reads them into a
result), and a library that leaked them would be off by orders of magnitude. torch.autograd
then gives DQ, DK, DV and, when the case wants it, D_BIAS in the bias's own broadcast shape
(summed over the axes it broadcasts), and with SINKS D_SINKS (dL/dsinks, BackwardTerms::d_sinks:
summed over the batch and the rows). With GQA, DK and DV of a K/V head sum over its query
heads. D_LSE is random (standard normal) or z-loss style (2 z LSE, z = 0.25) on the rows with a
finite LSE; on a row that sees no key and no sink (LSE = -inf) it is ~1e8 like the masked
D_SCORES, which must have no effect (the script checks that zeroing those entries changes no
gradient bit).

THE CROSS-CHECK: wherever SDPA can express the case (no soft-cap), the script also computes
the gradients through PyTorch's own F._scaled_dot_product_attention (1.13) and its autograd,
and asserts that they agree with the explicit ones to 1e-10 (|a - b| <= 1e-10 (1 + |b|)):
  - natively, on the whole tensors, when only plain attention, a bool mask or is_causal
    (top-left, or T_q == T_k) is involved and no row is fully masked (SDPA gives NaN there);
  - otherwise one (sequence, head) at a time over the rows that see some key (a fully masked
    row contributes nothing to any gradient and its DQ row is zero), with one combined float
    mask: ALiBi term + bias, -inf where masked; the bias slice keeps its autograd link, so the
    check covers D_BIAS too. With sinks, every row, and the sink as one more key (zero K and V
    rows) whose float-mask column is the sink logit, a slice of the sinks' leaf tensor, so that
    the check covers D_SINKS too. With D_LSE the loss takes each row's LSE from SDPA's weights,
    LSE_i = z_ij - log w_ij at the row's largest weight j (the sink column's z being the sink),
    so that SDPA's own backward gives that term's gradient too.
GQA goes to SDPA as K/V repeated per query head (autograd sums the copies); an explicit scale
as Q scaled by scale * sqrt(d_k) (SDPA 1.13 always divides by sqrt(d_k)).

FILE FORMAT: the multi-head forward golden format (see make_multihead_golden.py: the options
lines, the arrays, the optional inputs and the varlen packing are the same; this script writes
its files with that script's write_case()), with these differences:

    eigen_attention_backward_golden 1
    mode single|heads|varlen         single: B = H = H_kv = 1, checked through the Eigen
                                     front door attention_backward(); heads: through
                                     attention_heads_backward(); varlen: attention_varlen_backward()
    ... the options lines ...
      the optional inputs MASK, BIAS and KEY_LENGTHS in heads mode only (ALIBI: heads and varlen;
      SINKS 1 H: every mode)
      Q, K, V, OUT and LSE as there (no SCORES, AVG_SCORES), then
      the upstream gradients:
        D_OUT 4 B H T_q d_v       dL/dOUT
        D_SCORES 4 B H T_q T_k    optional (single and heads modes): dL/dSCORES
        D_LSE 4 B H T_q 1         optional: dL/dLSE (BackwardTerms::d_lse)
      the gradients:
        DQ 4 B H T_q d_k
        DK 4 B H_kv T_k d_k
        DV 4 B H_kv T_k d_v
        D_BIAS 4 b h T_q T_k      optional (only with BIAS): dL/dBIAS, BIAS's shape
        D_SINKS 1 H               with SINKS (and only then): dL/dsinks (BackwardTerms::d_sinks)
    end
"""
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "multihead"))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import make_multihead_golden as mh  # noqa: E402  (writes nothing when imported)

DT = mh.DT
MASKED_D_SCORES = 1e8  # magnitude of D_SCORES where the key is masked (and of D_LSE on dead rows)
SDPA_TOL = 1e-10
Z_LOSS = 0.25  # z of the z-loss style D_LSE = 2 z LSE


# ----------------------------------------------------------------------------- the forward

def forward(q, k, v, name="", **opt):
    """OUT, LSE, SCORES and `visible`, NaN-free under autograd for rows that see no key
    (opt: mh.logits()'s options and `sinks`, None or a leaf tensor). The LSE is differentiable
    (for D_LSE) on the rows where it is finite."""
    s, visible, _ = mh.logits(q, k, **opt)
    H, Hkv = q.shape[1], k.shape[1]
    vr = v.repeat_interleave(H // Hkv, dim=1)
    if opt.get("sinks") is not None:                            # 6.-7. with the sink column
        lse, w = mh.with_sink(s, opt["sinks"])
        mh.check_sink_formula(name, s, opt["sinks"], lse, w)
        return w @ vr, lse, w, visible                          # 8.
    dead = ~visible.any(dim=-1, keepdim=True)                   # rows that see no key
    safe = torch.where(dead, torch.zeros_like(s), s)            # no -inf-only row in softmax
    lse = torch.logsumexp(safe, dim=-1, keepdim=True).masked_fill(dead, mh.NEG_INF)  # 7.
    w = torch.softmax(safe, dim=-1) * (~dead).to(DT)            # 6. zeros for those rows
    return w @ vr, lse, w, visible                              # 8.


def loss(out, w, d_out, d_scores, lse=None, d_lse=None):
    """sum(OUT D_OUT) [+ sum(SCORES D_SCORES)] [+ sum(LSE D_LSE) over the rows whose LSE is
    finite]."""
    L = (out * d_out).sum()
    if d_scores is not None:
        L = L + (w * d_scores).sum()
    if d_lse is not None:
        live = torch.isfinite(lse.detach())
        L = L + torch.where(live, lse, torch.zeros_like(lse)).mul(
            torch.where(live, d_lse, torch.zeros_like(d_lse))).sum()
    return L


def grads(L, q, k, v, bias, retain_graph=False, sinks=None):
    leaves = [q, k, v] + [x for x in (bias, sinks) if x is not None]
    if not L.requires_grad:  # nothing reaches the loss (every row sees no key)
        return [torch.zeros_like(x) for x in leaves]
    g = torch.autograd.grad(L, leaves, allow_unused=True, retain_graph=retain_graph)
    return [torch.zeros_like(x) if gx is None else gx for x, gx in zip(leaves, g)]


# ----------------------------------------------------------------------------- the SDPA check

def sdpa_lse(z, w, j):
    """LSE_i = z_ij - log w_ij at the given key j of each row (z: the row's final logits, w:
    SDPA's weights, both [n, T]; j: [n]): the row's LSE through SDPA's weights, so that autograd
    takes dLSE/dz from SDPA's backward."""
    return z.gather(-1, j.view(-1, 1)) - torch.log(w.gather(-1, j.view(-1, 1)))


def sdpa_grads(name, q, k, v, d_out, d_scores, bias, opt, d_lse=None):
    """The gradients through F._scaled_dot_product_attention; None when SDPA cannot express
    the case (soft-cap). Returns (grads, how); with sinks, the sinks' gradient last."""
    if opt.get("softcap", 0.0) > 0:
        return None, "explicit only (soft-cap)"
    B, H, Tq, dk = q.shape
    Tk = k.shape[2]
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    bl = bias.detach().clone().requires_grad_(True) if bias is not None else None
    sinks = opt.get("sinks")
    sl = torch.as_tensor(sinks, dtype=DT).detach().clone().requires_grad_(True) \
        if sinks is not None else None
    ql, kl, vl = leaves
    qs, kr, vr = mh.sdpa_inputs(ql, kl, vl, opt.get("scale"))
    causal, mask = opt.get("causal", False), opt.get("mask")
    _, visible, _ = mh.logits(q.detach(), k.detach(), **opt)
    any_dead = bool((~visible.any(dim=-1)).any())
    # Natively only without a bias (its gradient is checked per head below), without a row
    # that sees no key (SDPA gives NaN there), without sinks and without D_LSE.
    native = (bias is None and not any_dead and mh.sdpa_native(Tq, Tk, opt) and sinks is None
              and d_lse is None)
    if native:
        attn_mask = None if mask is None else mask.expand(B, H, Tq, Tk).contiguous()
        o, w = F._scaled_dot_product_attention(qs, kr, vr, attn_mask, 0.0, True, causal)
        L = loss(o, w, d_out, d_scores)
        how = "SDPA native"
    else:
        # One (sequence, head) at a time, over the rows that see some key, with the combined
        # float mask; the bias slice keeps its autograd link.
        nob = {key: val for key, val in opt.items() if key != "bias"}
        _, _, additive = mh.logits(q.detach(), k.detach(), **nob)  # ALiBi term alone
        L = torch.zeros((), dtype=DT)
        for b in range(B):
            for h in range(H):
                # the rows that see some key; with a sink, every row (it sees the sink)
                live = (visible[b, h].any(dim=-1) | (sl is not None)).nonzero().flatten()
                if live.numel() == 0:
                    continue
                n = live.numel()
                fm = additive[b, h][live].clone()
                if bl is not None:
                    fm = fm + bl[b if bl.shape[0] > 1 else 0, h if bl.shape[1] > 1 else 0][live]
                fm = fm.masked_fill(~visible[b, h][live], mh.NEG_INF)
                qh, kh, vh = qs[b, h][live], kr[b, h], vr[b, h]
                if sl is not None:  # the sink as one more key (sdpa_sink_key), sl[h] its logit
                    kh = torch.cat([kh, torch.zeros(1, dk, dtype=DT)])
                    vh = torch.cat([vh, torch.zeros(1, vh.shape[1], dtype=DT)])
                    fm = torch.cat([fm, sl[h].expand(n, 1)], dim=-1)
                tk = kh.shape[0]
                o, w = F._scaled_dot_product_attention(
                    qh.view(1, 1, n, dk), kh.view(1, 1, tk, dk), vh.view(1, 1, tk, -1),
                    fm.view(1, 1, n, tk), 0.0, True, False)
                assert not torch.isnan(o).any() and not torch.isnan(w).any(), name
                L = L + (o[0, 0] * d_out[b, h][live]).sum()
                if d_scores is not None:
                    L = L + (w[0, 0, :, :Tk] * d_scores[b, h][live]).sum()
                if d_lse is not None:
                    # SDPA's logits (its scale is 1/sqrt(d_k)), and the LSE through its weights
                    z = (qh @ kh.transpose(0, 1)) / dk ** 0.5 + fm
                    j = w[0, 0].detach().argmax(dim=-1)
                    lse = sdpa_lse(z, w[0, 0], j)
                    L = L + (lse * d_lse[b, h][live]).sum()
        how = "SDPA float mask per head" + (" + sink key" if sl is not None else "") + \
            (" + LSE from SDPA's weights" if d_lse is not None else "")
    return grads(L, ql, kl, vl, bl, sinks=sl), how


def assert_close(name, what, a, b):
    assert a.shape == b.shape, f"{name}: {what} shapes {a.shape} {b.shape}"
    assert not torch.isnan(a).any() and not torch.isnan(b).any(), f"{name}: {what} has NaN"
    excess = ((a - b).abs() / (1 + b.abs())).max().item() if a.numel() else 0.0
    assert excess <= SDPA_TOL, f"{name}: {what}: SDPA and explicit differ by {excess:.3e}"
    return excess


# ----------------------------------------------------------------------------- the case kinds

def make_d_scores(visible):
    """Standard normal where visible, ~1e8 (either sign, never 0) where masked."""
    ds = torch.randn(*visible.shape, dtype=DT)
    big = (1.0 + torch.rand(*visible.shape, dtype=DT)) * MASKED_D_SCORES
    big = torch.where(torch.rand(*visible.shape) < 0.5, -big, big)
    return torch.where(visible, ds, big)


def make_d_lse(lse, kind):
    """dL/dLSE [..., T_q, 1] of kind "random" (standard normal) or "zloss" (2 z LSE) on the rows
    with a finite LSE; ~1e8 (either sign, never 0) on the rows with LSE = -inf (no key, no
    sink), which must have no effect. Drawn after everything else of the case."""
    lse = lse.detach()
    live = torch.isfinite(lse)
    if kind == "random":
        d = torch.randn(*lse.shape, dtype=DT)
    else:
        assert kind == "zloss", kind
        d = 2 * Z_LOSS * torch.where(live, lse, torch.zeros_like(lse))
    big = (1.0 + torch.rand(*lse.shape, dtype=DT)) * MASKED_D_SCORES
    big = torch.where(torch.rand(*lse.shape) < 0.5, -big, big)
    return torch.where(live, d, big)


def dead_rows_zeroed(d_lse):
    """D_LSE with its entries on rows whose LSE is -inf (~1e8) set to 0."""
    return torch.where(d_lse.abs() < MASKED_D_SCORES, d_lse, torch.zeros_like(d_lse))


CASES = []


def heads_case(name, B, H, Hkv, Tq, Tk, dk, dv, causal=False, align="top_left", scale=None,
               window=(-1, -1), softcap=0.0, mask=None, bias=None, key_lengths=None, alibi=False,
               mag=1.0, dead_row=False, d_scores=False, d_out_zero=False, d_bias=True,
               mode="heads", chunk=0, sinks=False, d_lse=None):
    """mask / bias: None or the broadcast shape "1x1", "Bx1", "BxH", "1xH". mode "single"
    (B = H = H_kv = 1, no Masks but the sink) is checked through the Eigen front door. sinks:
    one sink logit per query head (their gradient D_SINKS); d_lse: None, "random" or "zloss"
    (make_d_lse)."""
    if mode == "single":
        assert B == H == Hkv == 1 and mask is None and bias is None and key_lengths is None
        assert not alibi
    q, k, v, m, bi, slopes = mh.heads_inputs(name, B, H, Hkv, Tq, Tk, dk, dv, mask, bias, alibi,
                                             mag, dead_row)
    for t in (q, k, v):
        t.requires_grad_(True)
    if bi is not None:
        bi.requires_grad_(d_bias)
    sk = torch.tensor(mh.sink_logits(H), dtype=DT, requires_grad=True) if sinks else None
    opt = dict(causal=causal, align=align, scale=scale, window=window, softcap=softcap, mask=m,
               bias=bi, key_lengths=key_lengths, alibi=slopes, chunk=chunk, sinks=sk)
    out, lse, w, visible = forward(q, k, v, name=name, **opt)
    d_o = torch.zeros(B, H, Tq, dv, dtype=DT) if d_out_zero else mh.rand(B, H, Tq, dv)
    d_s = make_d_scores(visible) if d_scores else None
    d_l = make_d_lse(lse, d_lse) if d_lse else None
    twice = d_s is not None or d_l is not None
    gq, gk, gv, *gr = grads(loss(out, w, d_o, d_s, lse, d_l), q, k, v, bi if d_bias else None,
                            retain_graph=twice, sinks=sk)
    gb = gr[:1] if bi is not None and d_bias else []
    gs = gr[-1] if sk is not None else None
    if twice:  # the masked entries of D_SCORES and D_LSE have no effect: zeroed, same gradients
        zeroed = None if d_s is None else torch.where(visible, d_s, torch.zeros_like(d_s))
        d_l0 = None if d_l is None else dead_rows_zeroed(d_l)
        again = grads(loss(out, w, d_o, zeroed, lse, d_l0), q, k, v, bi if d_bias else None,
                      sinks=sk)
        assert all(torch.equal(a, b) for a, b in zip(again, [gq, gk, gv] + gr)), name
    for what, t in (("DQ", gq), ("DK", gk), ("DV", gv)) + ((("D_BIAS", gb[0]),) if gb else ()) \
            + ((("D_SINKS", gs),) if gs is not None else ()):
        assert torch.isfinite(t).all(), f"{name}: {what} not finite"
    # The weights of a row that sees no key are constant zeros: its DQ row is exactly zero.
    dead = ~visible.any(dim=-1)
    assert (gq[dead] == 0).all(), name

    ref, how = sdpa_grads(name, q, k, v, d_o, d_s, bi, opt, d_l)
    if ref is not None:
        names = ("DQ", "DK", "DV") + (("D_BIAS",) if gb else ()) \
            + (("D_SINKS",) if gs is not None else ())
        ex = max(assert_close(name, n, a, b) for n, a, b in zip(names, ref, [gq, gk, gv] + gr))
        how += f" (max excess {ex:.1e})"

    mh.write_case(HERE, name, "backward", mode, opt,
                  (("Q", q), ("K", k), ("V", v), ("OUT", out), ("LSE", lse), ("D_OUT", d_o),
                   ("D_SCORES", d_s), ("D_LSE", d_l), ("DQ", gq), ("DK", gk), ("DV", gv),
                   ("D_BIAS", gb[0] if gb else None), ("D_SINKS", gs)))
    CASES.append((name, mode, how))


def single_case(name, Tq, Tk, dk, dv, **kw):
    heads_case(name, 1, 1, 1, Tq, Tk, dk, dv, mode="single", **kw)


def varlen_case(name, H, Hkv, q_lens, k_lens, dk, dv, causal=False, align="top_left", scale=None,
                window=(-1, -1), softcap=0.0, alibi=False, chunk=0, sinks=False, d_lse=None):
    q, k, v, slopes, cq, ck, rows = mh.varlen_inputs(name, H, Hkv, q_lens, k_lens, dk, dv, alibi)
    for t in (q, k, v):
        t.requires_grad_(True)
    tq = sum(q_lens)
    d_o = mh.rand(1, H, tq, dv)
    sk = torch.tensor(mh.sink_logits(H), dtype=DT, requires_grad=True) if sinks else None
    opt = dict(causal=causal, align=align, scale=scale, window=window, softcap=softcap,
               alibi=slopes, chunk=chunk, sinks=sk)
    out = torch.zeros(1, H, tq, dv, dtype=DT)
    lse = torch.full((1, H, tq, 1), mh.NEG_INF, dtype=DT)
    parts = []  # per sequence: its rows, OUT, LSE and weights (with their autograd links)
    for (rq, rk), lq, lk in zip(rows, q_lens, k_lens):
        if lq == 0:
            continue
        qs, ks, vs = q[:, :, rq], k[:, :, rk], v[:, :, rk]  # views: autograd reaches q, k, v
        o, l, w, _ = forward(qs, ks, vs, name=name, **opt)
        out[:, :, rq] = o.detach()
        lse[:, :, rq] = l.detach()
        parts.append((rq, rk, lk, qs, ks, vs, o, l, w))
    # D_LSE is drawn once the whole LSE is known (after D_OUT, so that a case without it draws
    # what it drew before).
    d_l = make_d_lse(lse, d_lse) if d_lse else None
    L = torch.zeros((), dtype=DT)
    hows, excess = set(), 0.0
    for rq, rk, lk, qs, ks, vs, o, l, w in parts:
        part_d_lse = None if d_l is None else d_l[:, :, rq]
        L = L + loss(o, w, d_o[:, :, rq], None, l, part_d_lse)
        if lk == 0 and sk is None:
            hows.add("no keys")
            continue
        # The SDPA check, sequence by sequence.
        ref, how = sdpa_grads(name, qs.detach(), ks.detach(), vs.detach(), d_o[:, :, rq], None,
                              None, opt, part_d_lse)
        hows.add(how + (" (a sequence without keys)" if lk == 0 else ""))
        if ref is not None:
            mine = grads(loss(o, w, d_o[:, :, rq], None, l, part_d_lse), qs, ks, vs, None,
                         retain_graph=True, sinks=sk)
            excess = max([excess] + [assert_close(name, n, a, b)
                                     for n, a, b in zip(("DQ", "DK", "DV", "D_SINKS"), ref, mine)])
    gq, gk, gv, *gr = grads(L, q, k, v, None, retain_graph=d_l is not None, sinks=sk)
    if d_l is not None:  # D_LSE's entries on rows with LSE = -inf have no effect
        L0 = sum((loss(o, w, d_o[:, :, rq], None, l, dead_rows_zeroed(d_l[:, :, rq]))
                  for rq, _, _, _, _, _, o, l, w in parts), torch.zeros((), dtype=DT))
        again = grads(L0, q, k, v, None, sinks=sk)
        assert all(torch.equal(a, b) for a, b in zip(again, [gq, gk, gv] + gr)), name
    gs = gr[0] if sk is not None else None
    assert torch.isfinite(gq).all() and torch.isfinite(gk).all() and torch.isfinite(gv).all()
    assert gs is None or torch.isfinite(gs).all()
    how = ", ".join(sorted(hows))
    if "SDPA" in how:
        how += f" (max excess {excess:.1e})"
    mh.write_case(HERE, name, "backward", "varlen", opt,
                  (("CU_SEQLENS_Q", torch.tensor(cq)), ("CU_SEQLENS_K", torch.tensor(ck)),
                   ("Q", q), ("K", k), ("V", v), ("OUT", out), ("LSE", lse), ("D_OUT", d_o),
                   ("D_LSE", d_l), ("DQ", gq), ("DK", gk), ("DV", gv), ("D_SINKS", gs)))
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
# chunked-local attention (Options::chunk_size): Llama 4's causal chunks through the front door,
# with GQA and d_scores, with key lengths, packed sequences
single_case("single_chunk_causal", 11, 11, 4, 3, causal=True, chunk=4)
heads_case("chunk_causal_gqa_d_scores", 2, 4, 2, 9, 9, 4, 3, causal=True, chunk=3, d_scores=True)
heads_case("chunk_bottom_right_key_lengths", 2, 2, 1, 5, 10, 4, 3, causal=True,
           align="bottom_right", key_lengths=[10, 6], chunk=4, alibi=True)
varlen_case("varlen_chunk_causal", 2, 2, [6, 3, 0], [6, 7, 2], 4, 3, causal=True, chunk=3)
# DeepSeek's non-absorbed head: d_k = 192, d_v = 128
single_case("single_dk192_dv128_causal", 6, 8, 192, 128, causal=True, align="bottom_right")
# attention sinks (Masks::sinks, their gradient D_SINKS) and dL/dLSE (BackwardTerms::d_lse):
# through the front door, causal bottom-right with T_q > T_k (the first rows see only the
# sink); GQA with D_SCORES and key lengths; D_LSE alone as a z-loss (its ~1e8 on the rows that
# see no key have no effect); packed sequences, one without keys (its rows see only the sink)
single_case("single_sinks_d_lse_causal", 7, 5, 4, 3, causal=True, align="bottom_right",
            sinks=True, d_lse="random")
heads_case("sinks_gqa_d_scores_d_lse", 2, 4, 2, 6, 7, 4, 3, causal=True, key_lengths=[7, 3],
           d_scores=True, sinks=True, d_lse="random")
heads_case("d_lse_zloss_causal_bottom_right", 2, 4, 2, 6, 4, 4, 3, causal=True,
           align="bottom_right", d_lse="zloss")  # rows 0 and 1 see no key
varlen_case("varlen_sinks_d_lse", 4, 2, [4, 3, 0, 5], [6, 0, 2, 3], 4, 3, causal=True,
            align="bottom_right", sinks=True, d_lse="random")

if __name__ == "__main__":
    for name, mode, how in CASES:
        print(f"{name:42s} {mode:7s} {how}")
    total = sum(os.path.getsize(os.path.join(HERE, n + ".txt")) for n, _, _ in CASES)
    print(f"{len(CASES)} cases, {total} bytes")
