#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Golden cases of the multi-head calls (attention_heads, attention_heads_decomposed,
attention_varlen), computed by PyTorch in float64.

Needs Debian's python3-torch (1.13); run with /usr/bin/python3 from any directory. It writes
the cases listed at the end of this script, as <name>.txt next to it. Each case is seeded from
its own name, so adding a case never changes another.

PyTorch 1.13's F._scaled_dot_product_attention has no GQA, window, ALiBi, soft-cap, sink or
alignment options, so every case is computed with explicit torch ops, step by step as
MultiHead.hpp states the semantics (see explicit() below). Wherever SDPA can express the case
(no soft-cap), the script also runs SDPA and asserts that its output and weights agree with the
explicit ones to 1e-12 (and that its NaN rows are exactly the fully masked rows):
  - natively, when only plain attention, a bool mask, a float bias or is_causal (top-left,
    or T_q == T_k) is involved: the mask/bias/is_causal passed as SDPA's own arguments;
  - otherwise through one combined float mask (ALiBi term + bias, -inf where masked).
GQA goes to SDPA as K/V repeated per query head; an explicit scale as Q scaled by
scale * sqrt(d_k) (SDPA 1.13 always divides by sqrt(d_k)).

ATTENTION SINKS (Masks::sinks, gpt-oss): one logit per query head that joins every row's
softmax and carries no value. explicit() computes them as the softmax over the logits with the
sink as one more column, the column dropped before V: L_i = logsumexp([s_i, sink_h]) is the LSE,
w_ij = exp(s_ij - L_i) the weights (they sum to less than 1), OUT_i = sum_j w_ij V_j; a row that
sees no key gets OUT = 0 and LSE = sink_h. The script checks this against the closed form
L_i = log(exp(sink_h) + sum_j exp(s_ij)) (torch.logaddexp, w = exp(s - L)) to 1e-13, and SDPA
against both: the sink goes to SDPA as one more key (zero K and V rows) whose float-mask column
holds the sink logit, and the weights SDPA gives that key are dropped.

FILE FORMAT (text, whitespace-separated tokens; one case per file):

    eigen_attention_multihead_golden 1
    mode heads|varlen
    causal 0|1
    align top_left|bottom_right
    scale default|<number>           default = 1/sqrt(d_k)
    window <left> <right>            -1 = unbounded side (both -1: no window)
    softcap <number>                 0 = off
    then arrays, each a line "<NAME> <rank> <n_0> ... <n_rank-1>" followed by the
    n_0*...*n_rank-1 elements in row-major (C) order, one innermost row per line,
    numbers with 17 significant digits, "-inf" where infinite:
      optional inputs (absent = not used), in this order when present:
        MASK 4 b h T_q T_k        0/1 (1 = may attend); b is 1 or B, h is 1 or H
        BIAS 4 b h T_q T_k        additive bias, same broadcast rules
        KEY_LENGTHS 1 B           integers in [0, T_k]
        ALIBI 1 H                 one slope per query head
        SINKS 1 H                 one sink logit per query head (Masks::sinks)
        CU_SEQLENS_Q 1 n+1        varlen only: offsets into the packed query rows
        CU_SEQLENS_K 1 n+1        varlen only: offsets into the packed key rows
      inputs (always, always in the BHTD layout):
        Q 4 B H T_q d_k
        K 4 B H_kv T_k d_k
        V 4 B H_kv T_k d_v
      outputs:
        OUT 4 B H T_q d_v
        LSE 4 B H T_q 1           -inf for a row that sees no key (its OUT row is 0);
                                  with SINKS the sink is in it (sink_h for such a row)
        SCORES 4 B H T_q T_k      heads mode only: the per-head softmax weights (the
                                  keys' only: with SINKS a row sums to less than 1)
        AVG_SCORES 4 B 1 T_q T_k  heads mode only: SCORES averaged over the H heads
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


# ----------------------------------------------------------------------------- computation
# (make_backward_golden.py imports this script and reuses what follows, up to the cases.)

def seed(name):
    """Seeds torch from the case's name (so that adding a case never changes another)."""
    torch.manual_seed(zlib.crc32(name.encode()))


def logits(q, k, causal=False, align="top_left", scale=None, window=(-1, -1), softcap=0.0,
           mask=None, bias=None, key_lengths=None, alibi=None, chunk=0, sinks=None):
    """Steps 1-5 of the semantics table of MultiHead.hpp with torch ops (differentiable).
    Returns the logits s (-inf where masked), `visible`, and the additive (ALiBi + bias) term
    for the SDPA check. (`sinks` is not used here: the sink joins at the softmax, step 6, see
    with_sink().)"""
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
        if chunk > 0:                                          # chunked-local (Llama 4)
            vis = vis & (torch.div(j, chunk, rounding_mode="floor")
                         == torch.div(pos, chunk, rounding_mode="floor"))
        visible[b] &= vis
    if bias is not None:                                       # 4. bias
        additive = additive + bias
    if mask is not None:
        visible &= mask
    s = (s + additive).masked_fill(~visible, NEG_INF)
    return s, visible, additive


def sink_column(s, sinks):
    """The sink logits (one per query head; a list or a tensor, which keeps its autograd link)
    as one column per row of the logits s [B, H, T_q, T_k]: [B, H, T_q, 1]."""
    B, H, Tq, _ = s.shape
    return torch.as_tensor(sinks, dtype=DT).view(1, H, 1, 1).expand(B, H, Tq, 1)


def with_sink(s, sinks):
    """Step 6 with attention sinks (Masks::sinks), as the issue states it: the softmax over the
    logits s [B, H, T_q, T_k] (-inf where masked) with the sink as one more column, the column
    dropped before V. Returns the LSE (the sink included; sink_h for a row that sees no key) and
    the keys' weights (a row sums to less than 1; zeros for a row that sees no key).
    Differentiable in s and in the sinks (a tensor with requires_grad), with no NaN: the sink
    column is finite, so no row is all -inf."""
    ext = torch.cat([s, sink_column(s, sinks)], dim=-1)
    return torch.logsumexp(ext, dim=-1, keepdim=True), torch.softmax(ext, dim=-1)[..., :-1]


def check_sink_formula(name, s, sinks, lse, w):
    """Asserts with_sink()'s LSE and weights equal the closed form of Masks.hpp to 1e-13:
    L_i = log(exp(sink_h) + sum_j exp(s_ij)) (torch.logaddexp of the keys' logsumexp and the sink;
    -inf for a row that sees no key, so L_i = sink_h there) and w_ij = exp(s_ij - L_i)."""
    s, lse, w = s.detach(), lse.detach(), w.detach()
    L = torch.logaddexp(torch.logsumexp(s, dim=-1, keepdim=True), sink_column(s, sinks).detach())
    w2 = torch.exp(s - L)
    assert torch.isfinite(L).all() and torch.isfinite(w2).all(), name
    dl = (L - lse).abs().max().item() if L.numel() else 0.0
    dw = (w2 - w).abs().max().item() if w.numel() else 0.0
    assert dl <= 1e-13 * (1 + lse.abs().max().item()) and dw <= 1e-13, \
        f"{name}: the sink's closed form differs: lse {dl}, weights {dw}"
    dead = torch.isinf(s).all(dim=-1)  # rows that see no key: LSE = the sink, zero weights
    assert torch.equal(lse[dead].flatten(), sink_column(s, sinks).detach()[dead].flatten()), name
    assert (w[dead] == 0).all(), name


def explicit(q, k, v, name="", **opt):
    """The semantics table of MultiHead.hpp with torch ops (opt: logits()'s options, and
    `sinks`). Returns out, lse and the weights."""
    s, _, _ = logits(q, k, **opt)
    vr = v.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    if opt.get("sinks") is not None:                            # 6. with the sink
        lse, w = with_sink(s, opt["sinks"])
        check_sink_formula(name, s, opt["sinks"], lse, w)
    else:
        lse = torch.logsumexp(s, dim=-1, keepdim=True)
        w = torch.softmax(s, dim=-1).nan_to_num(0.0)            # 6. no visible key: zeros
    out = w @ vr                                                # 7.
    return out, lse, w


def sdpa_inputs(q, k, v, scale):
    """Q, K, V as SDPA (1.13) takes them: K/V repeated per query head (GQA), and an explicit
    scale as Q scaled by scale * sqrt(d_k) (SDPA always divides by sqrt(d_k))."""
    g = q.shape[1] // k.shape[1]
    qs = q if scale is None else q * (scale * math.sqrt(q.shape[3]))
    return qs, k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)


def sdpa_native(Tq, Tk, opt):
    """Whether SDPA's own arguments express the case (opt: logits()'s options): plain
    attention, a bool mask, a float bias or is_causal (top-left, or T_q == T_k)."""
    mask, bias, causal = opt.get("mask"), opt.get("bias"), opt.get("causal", False)
    return (opt.get("alibi") is None and opt.get("window", (-1, -1)) == (-1, -1)
            and opt.get("chunk", 0) == 0 and opt.get("sinks") is None
            and opt.get("key_lengths") is None
            and not (mask is not None and bias is not None)
            and not (causal and (mask is not None or bias is not None))
            and not (causal and opt.get("align", "top_left") == "bottom_right" and Tq != Tk))


def sdpa_sink_key(qs, kr, vr, fm, sinks):
    """The sink as SDPA (1.13) can take it: one more key, with zero K and V rows (so its scaled
    logit is 0 and it adds nothing to OUT), whose float-mask column is the sink logit. qs, kr and
    vr are sdpa_inputs()'s, fm the combined float mask [B, H, T_q, T_k]."""
    B, H, Tq, _ = qs.shape
    kz = torch.zeros(B, H, 1, kr.shape[3], dtype=DT)
    vz = torch.zeros(B, H, 1, vr.shape[3], dtype=DT)
    return (qs, torch.cat([kr, kz], dim=2), torch.cat([vr, vz], dim=2),
            torch.cat([fm, sink_column(fm, sinks)], dim=-1))


def sdpa_check(name, q, k, v, out, w, lse, opt):
    """Asserts SDPA (1.13) agrees with the explicit computation where it can express the case."""
    if opt.get("softcap", 0.0) > 0:
        return "explicit only (soft-cap)"
    B, H, Tq, _ = q.shape
    Tk = k.shape[2]
    qs, kr, vr = sdpa_inputs(q, k, v, opt.get("scale"))
    if sdpa_native(Tq, Tk, opt):
        attn_mask = None
        if opt.get("mask") is not None:
            attn_mask = opt["mask"].expand(B, H, Tq, Tk).contiguous()
        if opt.get("bias") is not None:
            attn_mask = opt["bias"].expand(B, H, Tq, Tk).contiguous()
        o2, w2 = F._scaled_dot_product_attention(qs, kr, vr, attn_mask, 0.0, True,
                                                 opt.get("causal", False))
        how = "SDPA native"
    else:
        _, visible, additive = logits(q, k, **opt)
        fm = additive.masked_fill(~visible, NEG_INF)
        how = "SDPA float mask"
        if opt.get("sinks") is not None:
            qs, kr, vr, fm = sdpa_sink_key(qs, kr, vr, fm, opt["sinks"])
            how += " + sink key"
        o2, w2 = F._scaled_dot_product_attention(qs, kr, vr, fm, 0.0, True, False)
        w2 = w2[..., :Tk]  # the sink key's weights dropped (no-op without sinks)
    dead = torch.isinf(lse).squeeze(-1)  # rows with no visible key
    if dead.any():
        assert torch.isnan(w2[dead]).all(), name + ": SDPA should give NaN on fully masked rows"
    assert not torch.isnan(w2[~dead]).any(), name
    dw = (w2[~dead] - w[~dead]).abs().max().item() if (~dead).any() else 0.0
    do = (o2[~dead] - out[~dead]).abs().max().item() if (~dead).any() else 0.0
    assert dw <= 1e-12 and do <= 1e-12, f"{name}: SDPA disagrees: weights {dw}, out {do}"
    return f"{how} (max diff {max(dw, do):.1e})"


# ----------------------------------------------------------------------------- inputs

def rand(*shape, mag=1.0):
    return torch.randn(*shape, dtype=DT) * mag


def alibi_slopes(H):
    # The ALiBi paper's geometric slopes 2^(-8 (h+1) / H): exact in float.
    return [2.0 ** (-8.0 * (h + 1) / H) for h in range(H)]


def sink_logits(H):
    """One sink logit per query head, drawn after the case's other inputs (so that a case
    without sinks draws what it drew before): normal with mean 1 and deviation 1.5, rounded to a
    multiple of 2^-6 so that it is exact in float (as the ALiBi slopes are)."""
    return [round((1.0 + 1.5 * x) * 64) / 64 for x in torch.randn(H, dtype=DT).tolist()]


def heads_inputs(name, B, H, Hkv, Tq, Tk, dk, dv, mask=None, bias=None, alibi=False, mag=1.0,
                 dead_row=False):
    """Seeds from `name` and draws Q, K, V, the mask and the bias (None or the broadcast shape
    "1x1", "Bx1", "BxH", "1xH"; dead_row: one fully masked query row everywhere). Returns q, k,
    v, mask, bias and the ALiBi slopes (None when not wanted)."""
    seed(name)
    q = rand(B, H, Tq, dk, mag=mag)
    k = rand(B, Hkv, Tk, dk, mag=mag)
    v = rand(B, Hkv, Tk, dv)

    def bshape(spec):
        b, h = spec.split("x")
        return (B if b == "B" else 1, H if h == "H" else 1, Tq, Tk)

    m = None
    if mask is not None:
        m = torch.rand(*bshape(mask)) < 0.7
        if dead_row:
            m[..., Tq // 2, :] = False
    bi = None
    if bias is not None:
        bi = rand(*bshape(bias))
    return q, k, v, m, bi, alibi_slopes(H) if alibi else None


def varlen_inputs(name, H, Hkv, q_lens, k_lens, dk, dv, alibi=False):
    """Seeds from `name` and draws the packed Q, K, V. Returns q, k, v, the ALiBi slopes (None
    when not wanted), CU_SEQLENS_Q, CU_SEQLENS_K and each sequence's query and key row slices."""
    seed(name)
    tq, tk = sum(q_lens), sum(k_lens)
    q = rand(1, H, tq, dk)
    k = rand(1, Hkv, tk, dk)
    v = rand(1, Hkv, tk, dv)
    cq, ck = [0], [0]
    for lq, lk in zip(q_lens, k_lens):
        cq.append(cq[-1] + lq)
        ck.append(ck[-1] + lk)
    rows = [(slice(cq[s], cq[s + 1]), slice(ck[s], ck[s + 1])) for s in range(len(q_lens))]
    return q, k, v, alibi_slopes(H) if alibi else None, cq, ck, rows


# ----------------------------------------------------------------------------- writing

def fmt(x):
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.17g}"


def write_array(f, name, t):
    """One array: its header line, then its innermost rows (integers as such)."""
    t = torch.as_tensor(t).detach()
    dims = list(t.shape)
    f.write(f"{name} {len(dims)} {' '.join(str(d) for d in dims)}\n")
    if t.numel() == 0:
        return
    integer = not t.is_floating_point()
    for row in t.reshape(-1, dims[-1]).tolist():
        if integer:
            f.write(" ".join(str(int(x)) for x in row) + "\n")
        else:
            f.write(" ".join(fmt(float(x)) for x in row) + "\n")


def write_case(directory, name, kind, mode, opt, arrays):
    """Writes <directory>/<name>.txt: the header "eigen_attention_<kind>_golden 1", the mode and
    opt's options, the optional inputs opt holds (MASK, BIAS, KEY_LENGTHS, ALIBI, SINKS), then
    `arrays` ((NAME, tensor) pairs in the file's order; a None tensor is left out) and "end"."""
    scale, window = opt.get("scale"), opt.get("window", (-1, -1))
    with open(os.path.join(directory, name + ".txt"), "w") as f:
        f.write(f"eigen_attention_{kind}_golden 1\n")
        f.write(f"mode {mode}\ncausal {int(opt.get('causal', False))}\n")
        f.write(f"align {opt.get('align', 'top_left')}\n")
        f.write("scale default\n" if scale is None else f"scale {fmt(scale)}\n")
        f.write(f"window {window[0]} {window[1]}\n")
        if opt.get("chunk", 0) > 0:
            f.write(f"chunk {opt['chunk']}\n")
        f.write(f"softcap {fmt(opt.get('softcap', 0.0))}\n")
        if opt.get("mask") is not None:
            write_array(f, "MASK", opt["mask"].to(torch.int64))
        if opt.get("bias") is not None:
            write_array(f, "BIAS", opt["bias"])
        if opt.get("key_lengths") is not None:
            write_array(f, "KEY_LENGTHS", torch.tensor(opt["key_lengths"]))
        if opt.get("alibi") is not None:
            write_array(f, "ALIBI", torch.tensor(opt["alibi"], dtype=DT))
        if opt.get("sinks") is not None:
            write_array(f, "SINKS", torch.as_tensor(opt["sinks"], dtype=DT))
        for n, t in arrays:
            if t is not None:
                write_array(f, n, t)
        f.write("end\n")


# ----------------------------------------------------------------------------- the case kinds

CASES = []


def heads_case(name, B, H, Hkv, Tq, Tk, dk, dv, causal=False, align="top_left", scale=None,
               window=(-1, -1), softcap=0.0, mask=None, bias=None, key_lengths=None, alibi=False,
               mag=1.0, dead_row=False, chunk=0, sinks=False):
    """mask / bias: None or the broadcast shape "1x1", "Bx1", "BxH", "1xH"; sinks: draw one
    sink logit per query head."""
    q, k, v, m, bi, slopes = heads_inputs(name, B, H, Hkv, Tq, Tk, dk, dv, mask, bias, alibi,
                                          mag, dead_row)
    opt = dict(causal=causal, align=align, scale=scale, window=window, softcap=softcap, mask=m,
               bias=bi, key_lengths=key_lengths, alibi=slopes, chunk=chunk,
               sinks=sink_logits(H) if sinks else None)
    finish_heads_case(name, q, k, v, opt)


def finish_heads_case(name, q, k, v, opt, note=""):
    """Computes a heads-mode case from its inputs (opt: logits()'s options and `sinks`), checks
    it against SDPA, writes it and lists it (with `note`, the case's own cross-checks). Returns
    out, lse and the weights."""
    out, lse, w = explicit(q, k, v, name=name, **opt)
    how = sdpa_check(name, q, k, v, out, w, lse, opt)
    write_case(HERE, name, "multihead", "heads", opt,
               (("Q", q), ("K", k), ("V", v), ("OUT", out), ("LSE", lse), ("SCORES", w),
                ("AVG_SCORES", w.mean(dim=1, keepdim=True))))
    CASES.append((name, how + note))
    return out, lse, w


def varlen_case(name, H, Hkv, q_lens, k_lens, dk, dv, causal=False, align="top_left", scale=None,
                window=(-1, -1), softcap=0.0, alibi=False, chunk=0, sinks=False):
    q, k, v, slopes, cq, ck, rows = varlen_inputs(name, H, Hkv, q_lens, k_lens, dk, dv, alibi)
    opt = dict(causal=causal, align=align, scale=scale, window=window, softcap=softcap,
               alibi=slopes, chunk=chunk, sinks=sink_logits(H) if sinks else None)
    tq = sum(q_lens)
    out = torch.zeros(1, H, tq, dv, dtype=DT)
    lse = torch.full((1, H, tq, 1), NEG_INF, dtype=DT)
    hows = set()
    for (rq, rk), lq, lk in zip(rows, q_lens, k_lens):
        if lq == 0:
            continue
        qs, ks, vs = q[:, :, rq], k[:, :, rk], v[:, :, rk]
        o, l, w = explicit(qs, ks, vs, name=name, **opt)
        if lk > 0:
            hows.add(sdpa_check(name, qs, ks, vs, o, w, l, opt).split(" (")[0])
        out[:, :, rq] = o
        lse[:, :, rq] = l
    write_case(HERE, name, "multihead", "varlen", opt,
               (("CU_SEQLENS_Q", torch.tensor(cq)), ("CU_SEQLENS_K", torch.tensor(ck)),
                ("Q", q), ("K", k), ("V", v), ("OUT", out), ("LSE", lse)))
    CASES.append((name, ", ".join(sorted(hows))))


def mla_absorbed_case(name, H=8, Tq=2, Tk=37, d_c=64, d_nope=32, d_rope=16):
    """DeepSeek MLA decode in its absorbed form (at small dims). The inputs: the latent cache c
    (T_k x d_c), the shared rotary keys k_rope (T_k x d_rope), per-head W_UK and W_UV
    (H x d_nope x d_c), and the queries q_nope (H x T_q x d_nope), q_rope (H x T_q x d_rope);
    scale 1/sqrt(d_nope + d_rope) (that of the unabsorbed head, not of the absorbed d_k),
    causal bottom-right (T_q > 1: multi-token prediction).
    Unabsorbed (the reference): K_h = [c W_UK_h^T, k_rope], V_h = c W_UV_h^T,
    q_h = [q_nope_h, q_rope_h], out_h = softmax(scale q_h K_h^T + mask) V_h.
    Absorbed (what the file holds): Q_h = [q_nope_h W_UK_h, q_rope_h] (d_k = d_c + d_rope), one
    KV head with K = [c, k_rope] and V = c (the first d_c columns of K), so that OUT_h =
    softmax(scale Q_h K^T + mask) c and out_h = OUT_h W_UV_h^T. Asserts both identities (the
    logits and the up-projected output) to 1e-12."""
    seed(name)
    c = rand(Tk, d_c)
    k_rope = rand(Tk, d_rope)
    w_uk = rand(H, d_nope, d_c, mag=d_nope ** -0.5)
    w_uv = rand(H, d_nope, d_c, mag=d_nope ** -0.5)
    q_nope = rand(H, Tq, d_nope)
    q_rope = rand(H, Tq, d_rope)
    scale = 1.0 / math.sqrt(d_nope + d_rope)
    opt = dict(causal=True, align="bottom_right", scale=scale)
    # unabsorbed: H KV heads of d_k = d_nope + d_rope, d_v = d_nope
    k_un = torch.cat([c @ w_uk.transpose(-1, -2), k_rope.expand(H, Tk, d_rope)], dim=-1)
    v_un = c @ w_uv.transpose(-1, -2)
    q_un = torch.cat([q_nope, q_rope], dim=-1)
    s_un, _, _ = logits(q_un.unsqueeze(0), k_un.unsqueeze(0), **opt)
    out_un, _, _ = explicit(q_un.unsqueeze(0), k_un.unsqueeze(0), v_un.unsqueeze(0), name=name,
                            **opt)
    # absorbed: one KV head, V = the first d_c columns of K
    q = torch.cat([q_nope @ w_uk, q_rope], dim=-1).unsqueeze(0)   # [1, H, T_q, d_c + d_rope]
    k = torch.cat([c, k_rope], dim=-1).view(1, 1, Tk, d_c + d_rope)
    v = k[..., :d_c].clone()
    s_ab, _, _ = logits(q, k, **opt)
    fin = torch.isfinite(s_un)
    assert torch.equal(fin, torch.isfinite(s_ab)), name
    dl = (s_ab[fin] - s_un[fin]).abs().max().item()
    out, _, _ = finish_heads_case(name, q, k, v, opt)
    do = (out[0] @ w_uv.transpose(-1, -2) - out_un[0]).abs().max().item()   # OUT_h W_UV_h^T vs out_h
    assert dl <= 1e-12 and do <= 1e-12, f"{name}: absorbed != unabsorbed: logits {dl}, out {do}"
    CASES[-1] = (name, CASES[-1][1] + f"; vs unabsorbed: logits {dl:.1e}, out {do:.1e}")
    print(f"{name}: max |absorbed - unabsorbed| logits {dl:.3e}, OUT W_UV^T vs out {do:.3e}")


def tree_ancestry(parents):
    """The ancestor-or-self relation of a draft tree (parents[i] < i, -1 for a root: a child of
    the last cached token): [T_q, T_q] bool, [i, j] = draft j is draft i or an ancestor of it."""
    Tq = len(parents)
    a = torch.zeros(Tq, Tq, dtype=torch.bool)
    for i, p in enumerate(parents):
        assert -1 <= p < i, f"parents {parents}: a parent must come before its child"
        a[i, i] = True
        if p >= 0:
            a[i] |= a[p]
    return a


def tree_mask(parents, Tk):
    """Speculative decoding's tree mask [T_q, T_k]: every cached token (j < T_k - T_q) and, in
    the last T_q columns (the drafts, in the order of the queries), the draft's ancestors and
    itself. Asserts it lies within the causal bottom-right frontier j <= i + T_k - T_q."""
    Tq = len(parents)
    m = torch.ones(Tq, Tk, dtype=torch.bool)
    m[:, Tk - Tq:] = tree_ancestry(parents)
    frontier = torch.arange(Tk).unsqueeze(0) <= torch.arange(Tq).unsqueeze(1) + (Tk - Tq)
    assert not (m & ~frontier).any(), f"tree {parents} crosses the causal frontier"
    return m


def tree_path_check(name, q, k, v, out, trees, alibi=None):
    """Each draft's output as plain attention over its own path (the cached tokens, its
    ancestors, itself), gathered without a mask; ALiBi at the tokens' cache positions. trees:
    [B][H] parents lists. Returns the largest difference from `out`."""
    B, H, Tq, _ = q.shape
    Tk = k.shape[2]
    g = H // k.shape[1]
    sc = 1.0 / math.sqrt(q.shape[3])
    worst = 0.0
    for b in range(B):
        for h in range(H):
            anc = tree_ancestry(trees[b][h])
            for i in range(Tq):
                cols = torch.tensor(list(range(Tk - Tq)) +
                                    [Tk - Tq + j for j in range(Tq) if anc[i, j]])
                s = sc * (k[b, h // g, cols] @ q[b, h, i])
                if alibi is not None:
                    s = s - alibi[h] * ((Tk - Tq + i) - cols).abs().to(DT)
                o = torch.softmax(s, dim=0) @ v[b, h // g, cols]
                worst = max(worst, (o - out[b, h, i]).abs().max().item())
    assert worst <= 1e-12, f"{name}: the tree's paths disagree: {worst}"
    return worst


def tree_case(name, B, H, Hkv, Tq, Tk, d, trees, causal=False, alibi=False):
    """Speculative decoding's tree attention: the last T_q of the T_k cached keys are drafted
    tokens forming a tree, and the queries are those drafts. trees: one parents list for all
    (MASK [1, 1, T_q, T_k]) or [B][H] of them (MASK [B, H, T_q, T_k]). With causal (bottom-right),
    asserts the flag changes no bit (the tree implies it)."""
    q, k, v, _, _, slopes = heads_inputs(name, B, H, Hkv, Tq, Tk, d, d, alibi=alibi)
    if isinstance(trees[0], int):
        mask = tree_mask(trees, Tk).view(1, 1, Tq, Tk)
        per = [[trees] * H] * B
    else:
        mask = torch.stack([torch.stack([tree_mask(t, Tk) for t in row]) for row in trees])
        per = trees
    # aligned bottom-right (the queries are the last T_q tokens: ALiBi's distances, the flag)
    opt = dict(causal=causal, align="bottom_right", mask=mask, alibi=slopes)
    if causal:
        plain = explicit(q, k, v, name=name, **dict(opt, causal=False))
        with_flag = explicit(q, k, v, name=name, **opt)
        assert all(torch.equal(a, b) for a, b in zip(plain, with_flag)), \
            f"{name}: the causal flag changes the tree's result"
    out, _, _ = finish_heads_case(name, q, k, v, opt)
    dp = tree_path_check(name, q, k, v, out, per, slopes)
    note = f"; paths {dp:.1e}" + ("; causal flag: bitwise no change" if causal else "")
    CASES[-1] = (name, CASES[-1][1] + note)
    print(f"{name}: max |tree - each draft's path alone| {dp:.3e}"
          + (", causal flag changes no bit" if causal else ""))


# ----------------------------------------------------------------------------- the cases

def write_cases():

    # plain multi-head, odd sizes, default and explicit scale
    heads_case("plain", 2, 3, 3, 5, 7, 6, 4)
    heads_case("plain_scale_odd", 3, 2, 2, 11, 11, 9, 5, scale=0.3)
    heads_case("plain_wide", 1, 2, 2, 37, 40, 24, 17, causal=True, align="bottom_right")
    # grouped / multi-query K/V
    heads_case("gqa_8_2", 2, 8, 2, 6, 9, 8, 5)
    heads_case("mqa_8_1", 1, 8, 1, 7, 10, 12, 3)
    heads_case("gqa_8_2_causal", 2, 8, 2, 6, 6, 8, 5, causal=True)
    # causal with T_q != T_k, both alignments
    heads_case("causal_top_left", 2, 4, 2, 5, 9, 8, 3, causal=True)
    heads_case("causal_bottom_right", 2, 4, 2, 5, 9, 8, 3, causal=True, align="bottom_right")
    heads_case("causal_top_left_more_queries", 2, 4, 2, 9, 5, 8, 3, causal=True)
    heads_case("causal_bottom_right_more_queries", 2, 4, 2, 9, 5, 8, 3, causal=True,
               align="bottom_right")  # the first 4 query rows see no key
    # boolean masks, three broadcasts (one fully masked row in each)
    heads_case("mask_2d", 2, 3, 3, 6, 8, 7, 4, mask="1x1", dead_row=True)
    heads_case("mask_per_batch", 2, 3, 3, 6, 8, 7, 4, mask="Bx1", dead_row=True)
    heads_case("mask_per_head", 2, 4, 2, 6, 8, 7, 4, mask="BxH", dead_row=True)
    # additive biases, three broadcasts
    heads_case("bias_2d", 2, 3, 3, 6, 8, 7, 4, bias="1x1")
    heads_case("bias_per_batch", 2, 3, 3, 6, 8, 7, 4, bias="Bx1")
    heads_case("bias_per_head", 2, 4, 2, 6, 8, 7, 4, bias="BxH")
    # mask and bias together
    heads_case("mask_and_bias", 2, 4, 2, 6, 8, 7, 4, mask="Bx1", bias="1xH", dead_row=True)
    heads_case("mask_and_bias_causal", 3, 2, 1, 5, 5, 6, 3, causal=True, mask="BxH", bias="Bx1")
    # key lengths (right padding), one sequence of length 0
    heads_case("key_lengths", 3, 4, 2, 5, 7, 6, 4, key_lengths=[7, 0, 4])
    heads_case("key_lengths_causal_bottom_right", 3, 2, 2, 4, 9, 6, 4, causal=True,
               align="bottom_right", key_lengths=[9, 3, 6])
    heads_case("key_lengths_causal_top_left", 2, 2, 1, 6, 8, 5, 3, causal=True, key_lengths=[3, 8])
    # sliding windows
    heads_case("window_both", 2, 2, 2, 12, 12, 6, 4, window=(2, 1))
    heads_case("window_left_causal_top_left", 2, 2, 1, 6, 10, 6, 4, causal=True, window=(3, -1))
    heads_case("window_left_causal_bottom_right", 2, 2, 1, 6, 10, 6, 4, causal=True,
               align="bottom_right", window=(3, -1))
    heads_case("window_bottom_right", 2, 2, 1, 6, 10, 6, 4, align="bottom_right", window=(1, 2))
    heads_case("window_right_only_top_left", 1, 3, 3, 7, 9, 5, 4, window=(-1, 2))
    heads_case("window_zero_zero_bottom_right", 1, 2, 2, 7, 5, 5, 4, align="bottom_right",
               window=(0, 0))  # the diagonal only; the first 2 rows see no key
    # ALiBi
    heads_case("alibi", 2, 4, 4, 9, 9, 6, 4, alibi=True)
    heads_case("alibi_top_left_rect", 1, 4, 2, 5, 11, 6, 4, alibi=True)
    heads_case("alibi_bottom_right_rect", 1, 4, 2, 5, 11, 6, 4, alibi=True, align="bottom_right")
    heads_case("alibi_causal_bottom_right", 2, 4, 2, 5, 11, 6, 4, alibi=True, causal=True,
               align="bottom_right")
    # soft-capping (large logits so that the cap matters)
    heads_case("softcap", 2, 3, 3, 7, 9, 8, 5, softcap=2.0, mag=3.0)
    heads_case("softcap_causal_gqa", 1, 6, 2, 8, 8, 10, 4, softcap=5.0, causal=True, mag=2.5)
    # combinations
    heads_case("combo_all", 2, 6, 2, 7, 10, 9, 5, causal=True, align="bottom_right", scale=0.4,
               window=(4, -1), softcap=3.0, mask="BxH", bias="Bx1", key_lengths=[10, 6],
               alibi=True, mag=1.5)
    heads_case("combo_mqa_window", 3, 4, 1, 6, 9, 7, 6, window=(2, 3), softcap=4.0, mask="1x1",
               alibi=True, key_lengths=[9, 5, 0], mag=2.0)
    heads_case("combo_no_softcap", 2, 4, 2, 6, 9, 8, 4, causal=True, window=(3, 1), mask="Bx1",
               bias="BxH", alibi=True, align="bottom_right")
    # packed variable-length batches
    varlen_case("varlen_gqa", 4, 2, [3, 0, 6, 2], [5, 4, 8, 0], 8, 5)
    varlen_case("varlen_causal_bottom_right_alibi", 3, 1, [4, 1, 0, 7], [6, 3, 2, 7], 6, 4,
                causal=True, align="bottom_right", alibi=True)
    varlen_case("varlen_window_softcap_top_left", 2, 2, [5, 2, 6], [3, 9, 6], 7, 3, causal=True,
                window=(2, -1), softcap=2.0, scale=0.5)
    # chunked-local attention (Options::chunk_size): Llama 4's causal chunks, a rectangle
    # aligned bottom-right, with a window, with key lengths and ALiBi, packed sequences
    heads_case("chunk_causal", 2, 4, 2, 13, 13, 6, 4, causal=True, chunk=4)
    heads_case("chunk_causal_bottom_right_rect", 2, 2, 1, 5, 11, 6, 4, causal=True,
               align="bottom_right", chunk=3)
    heads_case("chunk_window_no_causal", 1, 3, 3, 9, 12, 5, 4, window=(2, 1), chunk=5)
    heads_case("chunk_key_lengths_alibi", 3, 2, 2, 6, 10, 6, 4, causal=True, align="bottom_right",
               key_lengths=[10, 7, 0], alibi=True, chunk=4)
    varlen_case("varlen_chunk_causal", 2, 1, [5, 0, 9], [5, 3, 9], 6, 4, causal=True, chunk=4)
    # DeepSeek's non-absorbed head: d_k = 192, d_v = 128
    heads_case("dk192_dv128_causal_gqa", 1, 2, 1, 6, 9, 192, 128, causal=True, align="bottom_right")
    # attention sinks (Masks::sinks): causal with GQA; bottom-right with T_q > T_k, whose first
    # rows see no key (OUT 0, LSE = the sink); packed sequences, one without keys
    heads_case("sinks_causal_gqa", 2, 4, 2, 7, 7, 6, 4, causal=True, sinks=True)
    heads_case("sinks_causal_bottom_right_dead_rows", 2, 2, 1, 7, 4, 6, 4, causal=True,
               align="bottom_right", sinks=True)  # the first 3 query rows see only the sink
    varlen_case("varlen_sinks_causal_bottom_right", 2, 1, [4, 3, 0, 5], [6, 0, 2, 3], 6, 4,
                causal=True, align="bottom_right", sinks=True)
    # DeepSeek MLA decode, absorbed: 8 query heads on one latent KV head (K = [c, k_rope], d_k = 80,
    # V = c, its first 64 columns), T_q = 2 (multi-token prediction), causal bottom-right, the
    # unabsorbed head's scale 1/sqrt(32 + 16); checked against the unabsorbed computation
    mla_absorbed_case("mla_absorbed")
    # speculative decoding's tree attention: the last T_q keys are the drafts (the queries), each
    # sees every earlier cached token, its ancestors and itself (a boolean mask; parents[i] < i,
    # -1 for a root). One tree for all (GQA 8:2); a tree per sequence and head (a forest, a star
    # and a chain among them) with the causal bottom-right flag (implied) and ALiBi
    tree_case("tree_decode_gqa", 1, 8, 2, 6, 41, 40, [-1, 0, 0, 1, 1, 2])
    tree_case("tree_decode_batch_per_head", 2, 4, 4, 5, 29, 24,
              [[[-1, 0, 0, 1, 1], [-1, 0, 1, 0, 3], [-1, -1, 0, 1, 2], [-1, 0, 0, 0, 0]],
               [[-1, 0, 1, 1, 2], [-1, -1, -1, 0, 1], [-1, 0, 0, 2, 2], [-1, 0, 1, 2, 3]]],
              causal=True, alibi=True)


if __name__ == "__main__":
    write_cases()
    for name, how in CASES:
        print(f"{name:40s} {how}")
    total = sum(os.path.getsize(os.path.join(HERE, n + ".txt")) for n, _ in CASES)
    print(f"{len(CASES)} cases, {total} bytes")
