# SPDX-License-Identifier: MIT
"""A NumPy float64 reference of the attention that `eigen-attention run` computes, written from
the table in include/EigenAttention/MultiHead.hpp, in the order it gives:

    Q [B, H, T_q, d_k], K [B, H_kv, T_k, d_k], V [B, H_kv, T_k, d_v]; query head h reads the
    K/V head h // (H // H_kv) (GQA; H_kv = 1 is MQA). For sequence b: Tk_b = key_lengths[b]
    when key lengths are given, else T_k; offset = 0 (top-left) or Tk_b - T_q (bottom-right).
    The logit of query i and key j:
      1. s = scale * q_i . k_j                     (scale default 1 / sqrt(d_k))
      2. s = softcap * tanh(s / softcap)            when softcap > 0
      3. s -= slope_h * |i + offset - j|            with ALiBi slopes (one per query head)
      4. s += bias[b, h, i, j]                      (an axis of size 1 broadcasts)
      5. s = -inf where mask[b, h, i, j] is false; when causal and j > i + offset; when
         left >= 0 and j < i + offset - left; when right >= 0 and j > i + offset + right;
         when j >= Tk_b
      6. row softmax subtracting the row maximum; a row with no visible key has zero weights,
         a zero output row and LSE = -inf (never NaN). With sinks (one logit per query head,
         no value): the sink joins the row's softmax, L = log(exp(sink_h) + sum of exp(s)),
         the weights are exp(s - L) (summing to less than 1); a row with no visible key has
         zero weights, a zero output row and LSE = sink_h
      7. ATTN = weights V; LSE = max + log(sum of exp(s - max)) (L with sinks)
    --average-heads: the weights averaged over the H query heads, [B, T_q, T_k].

Everything here is float64 whatever the dtype of the files: float32 inputs are widened exactly,
so the reference is the exact attention of the very values the tool read.
"""

import numpy as np


def reference_attention(q, k, v, causal=False, align="top-left", scale=None, softcap=0.0,
                        window=(-1, -1), mask=None, bias=None, key_lengths=None, alibi=None, chunk=0,
                        sinks=None):
    """Returns (out [B, H, T_q, d_v], weights [B, H, T_q, T_k], lse [B, H, T_q]), float64.
    q, k, v: 4-D arrays in [batch, heads, tokens, dim] order. mask (bool) and bias (float):
    4-D [B or 1, H or 1, T_q, T_k]. key_lengths: B integers. alibi: H slopes. chunk: the
    chunked-local attention's chunk size (0: off). sinks: H sink logits."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    B, H, Tq, dk = q.shape
    Bk, Hkv, Tk, dk2 = k.shape
    assert Bk == B and dk2 == dk and v.shape[:3] == k.shape[:3] and H % Hkv == 0
    dv = v.shape[3]
    group = H // Hkv
    if scale is None:
        scale = 1.0 / np.sqrt(dk)
    left, right = window
    out = np.zeros((B, H, Tq, dv))
    weights = np.zeros((B, H, Tq, Tk))
    lse = np.full((B, H, Tq), -np.inf)
    i = np.arange(Tq)[:, None]
    j = np.arange(Tk)[None, :]
    for b in range(B):
        tk_b = Tk if key_lengths is None else int(key_lengths[b])
        offset = 0 if align == "top-left" else tk_b - Tq
        pos = i + offset  # the key position query i is aligned with
        visible = np.broadcast_to(j < tk_b, (Tq, Tk)).copy()
        if causal:
            visible &= j <= pos
        if left >= 0:
            visible &= j >= pos - left
        if right >= 0:
            visible &= j <= pos + right
        if chunk > 0:  # the same chunk of positions as the query's diagonal key
            visible &= (j // chunk) == (pos // chunk)  # numpy's // floors, as the chunks do
        for h in range(H):
            kh = h // group
            s = scale * (q[b, h] @ k[b, kh].T)                         # 1
            if softcap > 0:
                s = softcap * np.tanh(s / softcap)                     # 2
            if alibi is not None:
                s = s - float(alibi[h]) * np.abs(pos - j)              # 3
            if bias is not None:
                s = s + bias[b if bias.shape[0] > 1 else 0, h if bias.shape[1] > 1 else 0]  # 4
            vis = visible.copy()
            if mask is not None:
                vis &= mask[b if mask.shape[0] > 1 else 0, h if mask.shape[1] > 1 else 0]
            s = np.where(vis, s, -np.inf)                              # 5
            sink = None if sinks is None else float(sinks[h])
            for r in range(Tq):                                        # 6, 7
                if not vis[r].any():  # zeros, as initialised; LSE -inf (as initialised) or the sink
                    if sink is not None:
                        lse[b, h, r] = sink
                    continue
                m = s[r].max() if sink is None else max(s[r].max(), sink)
                e = np.where(vis[r], np.exp(s[r] - m), 0.0)
                total = e.sum() + (0.0 if sink is None else np.exp(sink - m))
                weights[b, h, r] = e / total
                out[b, h, r] = weights[b, h, r] @ v[b, kh]
                lse[b, h, r] = m + np.log(total)
    return out, weights, lse
