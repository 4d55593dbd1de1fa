#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Writes the seed corpora of the fuzz targets: corpus/attention, corpus/npy and corpus/kv_cache.

  /usr/bin/python3 test/fuzz/make_seeds.py            # (re)writes every directory
  /usr/bin/python3 test/fuzz/make_seeds.py kv_cache   # (re)writes the named ones only
  /usr/bin/python3 test/fuzz/make_seeds.py --print    # prints the attention seeds as hex

The attention seeds are byte strings in fuzz_attention.cpp's input format (encoded here field by
field, in the order the harness decodes them); each decodes into one interesting configuration
(run one with EA_FUZZ_VERBOSE=1 to see it). The .npy seeds are written by NumPy itself, one per
dtype and rank, plus a few broken files. Needs NumPy (python3-numpy). The kv_cache seeds are series
of cache operations in fuzz_kv_cache.cpp's input format (kv_cache() and the operation helpers below).
"""
import io
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# Calls, in fuzz_attention.cpp's order.
CALLS = ["attention", "attention_into", "attention_into_lse", "decomposed", "decomposed_into",
         "decomposed_into_lse", "scores", "scores_into", "scores_into_lse", "heads", "heads_decomposed",
         "varlen", "varlen_decomposed", "merge", "backward", "heads_backward", "varlen_backward"]


def options(causal=False, bottom_right=False, scale=0, window=(0, 0), softcap=0, threads=0, kernel=0):
    """Option bytes. scale: index into the harness's table (0..4 default, 5 = 1.0, 6 = 0.125, 9 = 0.0,
    11 = NaN, 14 = 1e-45, 18 = FLT_MAX); window: indices (0..4 = -1, 5 = 0, 6 = 1, 7 = 2, 11 = -2,
    14 = PTRDIFF_MAX); softcap: index (0 = off, 5 = 1, 7 = 30, 9 = NaN, 10 = -1); threads: index
    (0 = 1, 4 = 2, 6 = 0, 7 = -1); kernel: index (0 = Auto, 4 = Reference, 5 = Portable, 8 = invalid)."""
    flags = (1 if causal else 0) | (2 if bottom_right else 0)
    return bytes([flags, scale, window[0], window[1], softcap, threads, kernel])


def filler(mode=0, seed=1, p=0, magnitude=2, values=b""):
    """A tensor's values: mode 0 uniform[-2,2], 1 uniform + specials (probability (p % 64) / 256),
    2 palette bytes (values), 3 constant palette[p], 4 integers, 5 uniform * magnitude, 6 raw bits."""
    return bytes([mode]) + struct.pack("<I", seed) + bytes([p, magnitude]) + values


def single(call, dtype="f", big=False, tq=4, tk=5, dk=3, dv=2, share=4, fault=0, in_kind=0, out_kind=0,
           lays=(0, 0, 0), out_lays=(0, 0, 0), claim=0, alias=0, alias_shift=0, opts=None, fills=None):
    head = (1 if dtype == "d" else 0) | (0x0E if big else 0)
    b = bytes([head, CALLS.index(call)]) + (opts or options())
    if big:
        b += struct.pack("<HH", tq, tk) + bytes([dk - 1, dv])
    else:
        b += bytes([tq, tk, dk, dv])
    b += bytes([share, fault, in_kind, out_kind]) + bytes(lays) + bytes(out_lays) + bytes([claim, alias])
    if alias % 8 == 7:
        b += bytes([alias_shift])
    for f in fills or [filler(), filler(seed=2), filler(seed=3)]:
        b += f
    return b


def heads(call, dtype="f", B=2, Hkv=1, group=2, tq=4, tk=5, dk=3, dv=2, seqs=(), extra=(0, 0), varlen_fault=0,
          pres=0, mpres=0, mask_shape=(0, 0), bias_shape=(0, 0), fault=0, h_fault=0, claim=0, claim_value=0,
          lays=(0,) * 9, alias=0, alias_shift=0, packed=(0, 0), opts=None, fills=None, tail=b""):
    b = bytes([1 if dtype == "d" else 0, CALLS.index(call)]) + (opts or options())
    b += bytes([B, Hkv, group - 1, tq, tk, dk, dv])
    if call.startswith("varlen"):
        b += bytes([len(seqs)])
        for lq, lk in seqs:
            b += bytes([lq, lk])
        b += bytes([extra[0], extra[1], varlen_fault])
    b += bytes([pres, mpres, mask_shape[0], mask_shape[1], bias_shape[0], bias_shape[1], fault, h_fault, claim])
    if claim % 8 == 7:
        b += bytes([claim_value])
    b += bytes(lays) + bytes([alias])
    if alias % 8 == 7:
        b += bytes([alias_shift])
    if call == "varlen_decomposed":
        b += bytes(packed)
    for f in fills or [filler(), filler(seed=2), filler(seed=3)]:
        b += f
    return b + tail


def merge(dtype="f", B=1, H=2, T=3, D=4, fault=0, claim=0, lays=(0,) * 6, where=(0, 0, 0), tail=b""):
    b = bytes([1 if dtype == "d" else 0, CALLS.index("merge"), B, H, T, D, fault, claim])
    b += bytes(lays) + bytes(where)
    for s in range(4):
        b += filler(seed=s + 1) if s % 2 == 0 else struct.pack("<I", s + 7) + bytes([0])
    return b + tail


def backward(dtype="f", big=False, into=False, d_scores=False, arbitrary=False, tq=4, tk=5, dk=3, dv=2, share=4,
             fault=(), in_kind=0, out_kind=0, lays=(0,) * 7, out_lays=(0, 0, 0), claim=(), alias=(), opts=None,
             fills=None):
    """attention_backward(_into). fault: (kind 2 = one less / 3 = one more, slot | axis << 4) with slots Q K V
    attn lse d_attn d_scores dq dk dv; in_kind/out_kind: index into (Map, Map, Map, column-major copy or
    resizable row-major, expression or resizable column-major); claim: (byte, slot | axis << 4) (Map inputs,
    no sharing); alias: (byte, host, shift) with host Q K V attn lse d_attn d_scores, 7 = the previous output.
    Fills: Q, K (unless K is Q), V (unless V is K), attn, lse, d_attn, d_scores (when given)."""
    head = (1 if dtype == "d" else 0) | (0x0E if big else 0)
    b = bytes([head, CALLS.index("backward")]) + (opts or options())
    b += bytes([(1 if into else 0) | (2 if d_scores else 0) | (12 if arbitrary else 0)])
    if big:
        b += struct.pack("<HH", tq, tk) + bytes([dk - 1, dv])
    else:
        b += bytes([tq, tk, dk, dv])
    b += bytes([share]) + (bytes(fault) if fault else bytes([0]))
    b += bytes([in_kind]) + (bytes([out_kind]) if into else b"")
    b += bytes(lays) + bytes(out_lays) + (bytes(claim) if claim else bytes([0]))
    b += bytes(alias) if alias else bytes([0])
    n = 7 - (1 if share & 1 and share < 4 else 0) - (1 if share & 2 and share < 4 else 0) - (0 if d_scores else 1)
    for f in fills or [filler(seed=s + 1) for s in range(n)]:
        b += f
    return b


def heads_backward(call="heads_backward", dtype="f", d_scores=False, d_bias=0, arbitrary=False, B=2, Hkv=1,
                   group=2, tq=4, tk=5, dk=3, dv=2, seqs=(), extra=(0, 0), varlen_fault=0, mpres=0,
                   mask_shape=(0, 0), bias_shape=(0, 0), fault=(), h_fault=0, claim=(), lays=(0,) * 13, alias=(),
                   opts=None, tail=b""):
    """attention_heads_backward_into / attention_varlen_backward_into. d_bias: 0 none, 2 with a bias (forced), 3 as
    the masks say; mpres as heads(); fault (kind, slot | axis << 4) with slots Q K V out lse d_out d_scores dq
    dk dv d_bias mask bias; alias: (byte, host, shift). Then the fills: Q, K, V; `tail` holds the mask,
    bias, key lengths and ALiBi fills (as the masks say) and then out, lse (read always), d_out, d_scores."""
    b = bytes([1 if dtype == "d" else 0, CALLS.index(call)]) + (opts or options())
    b += bytes([(1 if d_scores else 0) | (d_bias << 1) | (0x18 if arbitrary else 0)])
    b += bytes([B, Hkv, group - 1, tq, tk, dk, dv])
    if call.startswith("varlen"):
        b += bytes([len(seqs)])
        for lq, lk in seqs:
            b += bytes([lq, lk])
        b += bytes([extra[0], extra[1], varlen_fault])
    b += bytes([mpres, mask_shape[0], mask_shape[1], bias_shape[0], bias_shape[1]])
    b += (bytes(fault) if fault else bytes([0])) + bytes([h_fault]) + (bytes(claim) if claim else bytes([0]))
    b += bytes(lays) + (bytes(alias) if alias else bytes([0]))
    for s in range(3):
        b += filler(seed=s + 1)
    return b + tail


# The two option bytes after options()'s (Options::chunk_size and chunk_origin): off. The older seeds
# above leave them out, so their later fields decode one or two bytes early.
NO_CHUNKS = bytes([0, 0])


def sinks(*values, one_for_all=None):
    """Attention sinks, read after everything else a multi-head call reads (heads(): after its tail;
    heads_backward(): after out, lse, d_out, d_scores): a byte per head (values), or one for all heads.
    A value byte x: x % 16 < 10 gives 1.5 * ((x >> 4) - 8); 10 -inf, 11 NaN, 12 40, 13 -60, 14 1e4, 15 -40."""
    if one_for_all is not None:
        return bytes([2, one_for_all])
    return bytes([1]) + bytes(values)


def terms(d_lse=False, d_sinks=False, without_sinks=False, d_lse_fault=False, lay=0, fill=None):
    """heads_backward()'s BackwardTerms, after its sinks: dL/dLSE (its layout byte and values) and whether
    dL/dsinks is wanted (without_sinks: even without sinks, which must throw)."""
    b = (1 if d_lse else 0) | (2 if d_sinks else 0) | (0x1c if without_sinks else 0) | (0xe0 if d_lse_fault else 0)
    return bytes([b]) + (bytes([lay]) + (fill or filler(seed=21)) if d_lse else b"")


def program(atoms=(), ops=(), blocks=0):
    """A programmable mask and score modification, read after a multi-head forward call's sinks: the
    mask's comparisons (a, b) (kind (a & 7) % 6: 0 k <= q + c, 1 |q - k| <= c, 2 q and k in one chunk of m,
    3 k % m != c % m, 4 k < c, 5 by the parity of b + h and q; negated when (a >> 3) % 4 == 3, joined
    to the previous by or when (a >> 5) % 2; c = b % 16 (less 4 for kind 0), m = 1 + (b >> 4) % 9), the
    score operations a (kind (a & 7) % 6: a scale, a soft-cap, + slope (q - k), - slope |q - k|, + slope
    ((h + 1) - b), + a table of (q - k) mod 7; the constant's index (a >> 3) % 4), and the block mask byte
    (b % 4 == 3: tiles of 1 + (b >> 2) % 8 rows and 1 + (b >> 5) % 8 keys)."""
    b = bytes([len(atoms) | len(ops) << 2])
    for a, c in atoms:
        b += bytes([a, c])
    return b + bytes(ops) + bytes([blocks])


# Options::diagonal_offset (bit 4 of the first byte: its index into decode_diagonal_offset's table
# after the other options): 0 -> 0, 4 -> -3, 6 -> -7, 9 -> 40, 13 -> 2^60, 14 -> -2^60, 17 -> 2^60 + 1
# (must throw), 18 -> -2^60 - 1 (must throw), 20 -> PTRDIFF_MIN (must throw); 23..31: the next byte - 128.
DIAGONAL, LOWP_BF16, LOWP_HALF = 0x10, 0x60, 0xE0


def flagged(seed, bits):
    """A seed whose first byte also carries `bits` (DIAGONAL, LOWP_BF16 or LOWP_HALF)."""
    return bytes([seed[0] | bits]) + seed[1:]


def diagonal(index, causal=False, bottom_right=False, window=(0, 0), **kw):
    """Option bytes with the chunk bytes and a diagonal_offset (index into the harness's table)."""
    return options(causal=causal, bottom_right=bottom_right, window=window, **kw) + NO_CHUNKS + bytes([index])


def single16(call, half=False, big=False, tq=4, tk=5, dk=3, dv=2, fault=0, bias=False, alibi=False, sink=False,
             opts=None, diag=None, fills=None):
    """A 16-bit single-head call (fuzz_attention_lowp.cpp's single16): attention, attention_into(_lse),
    decomposed_into (float SCORES), decomposed_into_lse (T16 SCORES), scores (float), scores_into(_lse)."""
    head = (LOWP_HALF if half else LOWP_BF16) | (0x0E if big else 0) | (DIAGONAL if diag is not None else 0)
    b = bytes([head, CALLS.index(call)])
    b += diagonal(diag, **(opts or {})) if diag is not None else options(**(opts or {})) + NO_CHUNKS
    b += struct.pack("<HH", tq, tk) + bytes([dk - 1, dv]) if big else bytes([tq, tk, dk, dv])
    b += bytes([fault, (1 if bias else 0) | (4 if alibi else 0) | (16 if sink else 0)])
    n = 3 + bias + alibi + sink
    for f in fills or [filler(seed=s) for s in range(1, n + 1)]:
        b += f
    return b


def heads16(call, half=False, B=2, Hkv=1, group=2, tq=4, tk=5, dk=3, dv=2, seqs=(), extra=(0, 0), bthd=False,
            mpres=0, shapes=(0, 0, 0, 0), sink=False, want_lse=True, opts=None, diag=None):
    """A 16-bit multi-head call (heads16): heads, heads_decomposed, varlen (merge stands for heads)."""
    head = (LOWP_HALF if half else LOWP_BF16) | (DIAGONAL if diag is not None else 0)
    b = bytes([head, CALLS.index(call)])
    b += diagonal(diag, **(opts or {})) if diag is not None else options(**(opts or {})) + NO_CHUNKS
    b += bytes([B, Hkv, group - 1, tq, tk, dk, dv])
    if call.startswith("varlen"):
        b += bytes([len(seqs)]) + b"".join(bytes([lq, lk]) for lq, lk in seqs) + bytes([extra[0], extra[1], 0])
    b += bytes([1 if bthd else 0, mpres]) + bytes(shapes) + bytes([1 if sink else 0])
    b += filler(seed=1) + filler(seed=2) + filler(seed=3)
    if mpres & 3 == 1 and not call.startswith("varlen"):
        b += struct.pack("<I", 7)
    if (mpres >> 2) & 3 == 1 and not call.startswith("varlen"):
        b += filler(seed=4)
    if mpres >> 6 == 1:
        b += filler(mode=5, seed=5, magnitude=1)
    if sink:
        b += filler(seed=6)
    return b + bytes([1 if want_lse else 0])


def backward16(half=False, tq=4, tk=5, dk=3, dv=2, arbitrary=False, d_scores=False, opts=None, diag=None):
    """The 16-bit single-head backward (backward16)."""
    head = (LOWP_HALF if half else LOWP_BF16) | (DIAGONAL if diag is not None else 0)
    b = bytes([head, CALLS.index("backward")])
    b += diagonal(diag, **(opts or {})) if diag is not None else options(**(opts or {})) + NO_CHUNKS
    b += bytes([tq, tk, dk, dv, (0 if arbitrary else 1) | (4 if d_scores else 0)])
    n = 4 + d_scores + (2 if arbitrary else 0)
    return b + b"".join(filler(seed=s) for s in range(1, n + 1))


def attention_seeds():
    nan_q = filler(mode=2, values=bytes([13, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]))
    return {
        "plain_attention": single("attention"),
        "causal_bottom_right_decomposed": single("decomposed", opts=options(causal=True, bottom_right=True)),
        "into_lse_colmajor_double": single("attention_into_lse", dtype="d", lays=(2, 2, 2), out_lays=(2, 2, 2)),
        "scores_into_lse_window": single("scores_into_lse", opts=options(window=(6, 5)), tq=6, tk=6),
        "decomposed_nan_query_reference": single("decomposed", opts=options(causal=True, kernel=4), fills=[
            nan_q, filler(seed=2), filler(seed=3)]),
        "empty_keys_softcap": single("decomposed_into_lse", tk=0, opts=options(softcap=5, scale=5)),
        "output_over_q": single("attention_into", alias=7, alias_shift=1),
        "big_tiles_threads": single("attention", big=True, tq=200, tk=700, dk=2, dv=3,
                                    opts=options(causal=True, threads=4)),
        "invalid_scale_nan": single("attention", opts=options(scale=11)),
        "heads_gqa_mask_bias_alibi": heads("heads", B=2, Hkv=2, group=2, pres=1, mpres=0x45, mask_shape=(1, 1),
                                           bias_shape=(0, 1), tail=bytes([2, 1, 0, 0, 0, 0x80]) + filler(seed=9) +
                                           filler(seed=10)),
        "heads_decomposed_key_lengths_average": heads("heads_decomposed", pres=0x23, mpres=0x10,
                                                      tail=bytes([0, 3, 10])),
        "varlen_three_sequences": heads("varlen", seqs=((3, 4), (0, 2), (5, 1)), extra=(2, 1),
                                        opts=options(causal=True, bottom_right=True)),
        "varlen_decomposed_alibi": heads("varlen_decomposed", seqs=((2, 3), (4, 4)), mpres=0x40,
                                         tail=filler(seed=11)),
        "heads_lse_over_q": heads("heads", pres=1, alias=(1 << 3) | 7, alias_shift=2),
        "merge_in_place": merge(where=(1, 1, 0)),
        "merge_partial_overlap": merge(where=(3, 0, 1)),
        "backward_plain": backward(),
        "backward_into_d_scores_colmajor_double": backward(
            dtype="d", into=True, d_scores=True, in_kind=3, out_kind=4, tq=5, tk=7,
            opts=options(causal=True, bottom_right=True)),
        "backward_into_softcap_window_padded": backward(
            into=True, lays=(3, 2, 0, 3, 0, 2, 0), out_lays=(3, 2, 0), opts=options(softcap=7, window=(6, 5))),
        "backward_arbitrary_attn_lse": backward(arbitrary=True, d_scores=True, opts=options(kernel=4)),
        "backward_dq_over_lse": backward(into=True, alias=(7, 4, 0)),
        "backward_d_scores_wrong_shape": backward(d_scores=True, fault=(3, 6 | 1 << 4)),
        "backward_big_threads": backward(big=True, tq=200, tk=700, dk=2, dv=3, opts=options(causal=True, threads=4)),
        "heads_backward_gqa_mask_bias_d_bias_alibi": heads_backward(
            d_scores=True, d_bias=2, B=2, Hkv=2, group=2, mpres=0x41, mask_shape=(1, 1), bias_shape=(0, 1),
            tail=bytes([2, 1, 0, 0, 0, 0x80]) + filler(seed=9) + filler(seed=10) +
            b"".join(filler(seed=s) for s in (11, 12, 13, 14))),
        "heads_backward_key_lengths_broadcast_d_bias": heads_backward(
            d_bias=2, mpres=0x10, opts=options(causal=True, bottom_right=True),
            tail=filler(seed=9) + bytes([0, 3, 10]) + b"".join(filler(seed=s) for s in (11, 12, 13))),
        "heads_backward_d_bias_without_bias": heads_backward(d_bias=3),
        "varlen_backward_three_sequences": heads_backward(
            call="varlen_backward", seqs=((3, 4), (0, 2), (5, 1)), extra=(2, 1), mpres=0x40,
            opts=options(causal=True, bottom_right=True), tail=filler(seed=11)),
        # Attention sinks (the heads' H = 2 unless said), and the backward's dL/dLSE and dL/dsinks. These
        # give the chunk bytes that options() predates (NO_CHUNKS), so that they decode as written.
        "heads_sinks_causal_bottom_right": heads("heads", pres=1, tq=6, tk=4,
                                                 opts=options(causal=True, bottom_right=True) + NO_CHUNKS,
                                                 tail=sinks(0x90, 0x50)),
        "heads_decomposed_sinks_one_for_all": heads("heads_decomposed", pres=0x01, mpres=0x10,
                                                    opts=options() + NO_CHUNKS,
                                                    tail=bytes([0, 3, 0, 2]) + sinks(one_for_all=0xc0)),
        "varlen_sinks_nan_head": heads("varlen", seqs=((3, 4), (2, 0)), pres=1, opts=options() + NO_CHUNKS,
                                       tail=sinks(0x0b, 0x70)),
        "heads_backward_sinks_d_lse_d_sinks": heads_backward(
            tq=6, tk=4, opts=options(causal=True, bottom_right=True) + NO_CHUNKS,
            tail=b"".join(filler(seed=s) for s in (11, 12, 13)) + sinks(0x90, 0x3c) + terms(d_lse=True, d_sinks=True)),
        "varlen_backward_sinks_d_lse": heads_backward(
            call="varlen_backward", seqs=((3, 4), (0, 2), (5, 1)), extra=(2, 1),
            opts=options(causal=True, bottom_right=True) + NO_CHUNKS,
            tail=b"".join(filler(seed=s) for s in (11, 12, 13)) + sinks(0x60, 0xa0) +
            terms(d_lse=True, d_sinks=True, lay=1)),
        "heads_backward_minus_inf_sinks": heads_backward(
            d_scores=True, opts=options() + NO_CHUNKS,
            tail=b"".join(filler(seed=s) for s in (11, 12, 13, 14)) + sinks(one_for_all=0x0a) + terms(d_sinks=True)),
        # Programmable attention: prefix-LM (causal or the first 2 keys) with a soft-cap and a distance
        # bias, in 2 x 3 tiles; a varlen batch masked by the parity of b + h and q, with a per-sequence and
        # per-head offset and a table; a decomposed call without a band, ALiBi-like and scaled, 1 x 1 tiles.
        "heads_program_prefix_lm_blocks": heads(
            "heads", pres=1, tq=6, tk=6, opts=options() + NO_CHUNKS,
            tail=bytes([0]) + program(atoms=((0, 4), (4 | 1 << 5, 2)), ops=(1 | 1 << 3, 2 | 2 << 3),
                                      blocks=3 | 1 << 2 | 2 << 5)),
        "varlen_program_parity_table": heads(
            "varlen", seqs=((3, 4), (2, 5)), pres=1, opts=options(causal=True) + NO_CHUNKS,
            tail=bytes([0]) + program(atoms=((5, 0),), ops=(4 | 1 << 3, 5))),
        "heads_decomposed_program_band_blocks": heads(
            "heads_decomposed", pres=0x01, tq=7, tk=5, opts=options(bottom_right=True) + NO_CHUNKS,
            tail=bytes([0]) + program(atoms=((1 | 3 << 3, 3),), ops=(3 | 3 << 3, 0 | 3 << 3), blocks=3)),
        "heads_backward_d_sinks_without_sinks": heads_backward(
            opts=options() + NO_CHUNKS,
            tail=b"".join(filler(seed=s) for s in (11, 12, 13)) + bytes([0]) + terms(d_sinks=True, without_sinks=True)),
        # Options::diagonal_offset (a block of a longer sequence): small offsets with the causal frontier and
        # windows, the limits +-2^60 with ALiBi (allowed) and one past them (must throw), a packed batch, the
        # backward against the model's visibility.
        "diagonal_offset_decomposed_causal_window": flagged(
            single("decomposed", tq=6, tk=6, opts=diagonal(4, causal=True, window=(7, 6))), DIAGONAL),
        "diagonal_offset_heads_limit_alibi": flagged(
            heads("heads", pres=1, mpres=0x40, opts=diagonal(13, causal=True), tail=filler(seed=11)), DIAGONAL),
        "diagonal_offset_minus_limit_window": flagged(
            single("attention_into_lse", opts=diagonal(14, window=(8, 8))), DIAGONAL),
        "diagonal_offset_past_limit": flagged(single("attention", opts=diagonal(17)), DIAGONAL),
        "diagonal_offset_varlen": flagged(
            heads("varlen", seqs=((3, 4), (2, 5)), opts=diagonal(6, causal=True)), DIAGONAL),
        "diagonal_offset_backward": flagged(backward(tq=5, tk=7, opts=diagonal(9, causal=True, window=(8, 0))),
                                            DIAGONAL),
        # The 16-bit calls against the float calls on the widened inputs (bfloat16 and half).
        "bf16_attention_into_lse_causal": single16("attention_into_lse", opts=dict(causal=True)),
        "half_attention_specials": single16("attention", half=True, fills=[
            filler(mode=1, seed=1, p=40), filler(mode=5, seed=2, magnitude=6), filler(seed=3)]),
        "bf16_decomposed_float_scores_bias_alibi_sink": single16("decomposed_into", bias=True, alibi=True, sink=True),
        "half_scores_into_lse_diagonal": single16("scores_into_lse", half=True, diag=5, opts=dict(causal=True)),
        "bf16_big_threads": single16("attention", big=True, tq=150, tk=600, dk=4, dv=3,
                                     opts=dict(causal=True, threads=4)),
        "half_heads_gqa_mask_bias_alibi_sinks": heads16("heads", half=True, B=2, Hkv=2, group=2, mpres=0x45,
                                                        shapes=(1, 1, 0, 1), sink=True, bthd=True),
        "bf16_heads_decomposed": heads16("heads_decomposed", opts=dict(causal=True, bottom_right=True)),
        "half_varlen_sinks": heads16("varlen", half=True, seqs=((3, 4), (0, 2), (5, 1)), extra=(2, 1), sink=True,
                                     diag=2, opts=dict(causal=True)),
        "bf16_backward_d_scores": backward16(d_scores=True, opts=dict(causal=True)),
        "half_backward_arbitrary": backward16(half=True, arbitrary=True),
    }


def npy_seeds():
    import numpy as np

    def save(a, **kw):
        f = io.BytesIO()
        np.save(f, a, **kw)
        return f.getvalue()

    rng = np.random.default_rng(7)
    seeds = {
        "f4_2d.npy": save(rng.standard_normal((3, 4)).astype("<f4")),
        "f8_4d.npy": save(rng.standard_normal((2, 3, 2, 2)).astype("<f8")),
        "i4_1d.npy": save(np.arange(5, dtype="<i4")),
        "i8_3d.npy": save(np.arange(24, dtype="<i8").reshape(2, 3, 4)),
        "b1_2d.npy": save(np.array([[True, False, True], [False, False, True]])),
        "f4_scalar.npy": save(np.float32(1.5)),
        "f8_empty.npy": save(np.zeros((0, 3), dtype="<f8")),
        "f4_fortran_1d.npy": save(np.asfortranarray(np.arange(3, dtype="<f4"))),
        "f8_special.npy": save(np.array([np.nan, np.inf, -np.inf, -0.0, 5e-324], dtype="<f8")),
    }
    # Format version 2.0 and 3.0 headers, as NumPy writes them.
    f = io.BytesIO()
    np.lib.format.write_array(f, np.ones((2, 2), dtype="<f4"), version=(2, 0))
    seeds["f4_v2.npy"] = f.getvalue()
    f = io.BytesIO()
    np.lib.format.write_array(f, np.ones(3, dtype="<i8"), version=(3, 0))
    seeds["i8_v3.npy"] = f.getvalue()
    # Broken ones.
    good = seeds["f4_2d.npy"]
    seeds["broken_truncated.npy"] = good[:-5]
    seeds["broken_big_endian.npy"] = save(np.arange(4, dtype=">f8"))
    seeds["broken_fortran_2d.npy"] = save(np.asfortranarray(np.ones((2, 3), dtype="<f4")))
    seeds["broken_header_len.npy"] = good[:8] + b"\xff\xff" + good[10:]
    seeds["broken_object.npy"] = save(np.array([1, "a"], dtype=object), allow_pickle=True)
    seeds["broken_negative_shape.npy"] = good.replace(b"(3, 4)", b"(-3,4)")
    return seeds


# fuzz_kv_cache: a cache's sizes, then operations. An operation names its sequence by an index into
# the ids handed out so far, in order (live and released), then two that never were (next + 3, -1).
def kv_cache(*ops, page=16, kv_heads=1, d_k=4, d_v=3, group=2, pages=4, slack=0, seed=1):
    """The header (page size, kv_heads, d_k, d_v, query heads per KV head, pages, capacity slack,
    value seed), then the operations."""
    code = {16: 0, 32: 1, 64: 2, 128: 3, 256: 4}[page]
    head = bytes([code, kv_heads - 1, d_k - 1, d_v, group - 1, pages - 1, slack]) + struct.pack("<I", seed)
    return head + b"".join(ops)


def create():
    return bytes([0])


def append(seq, n, form=0):
    """n tokens (0..40); form 0 matrix, 1 HeadsView, 2 column-major, 3 expression."""
    return bytes([1, seq, n, form])


def fork(seq):
    return bytes([3, seq])


def truncate(seq, to=0, beyond=False, negative=False):
    """To `to` (taken modulo length + 1), or one-plus-`to` past the length, or -1 - `to`."""
    return bytes([4, seq, 7 if negative else 6 if beyond else 0, to])


def release(seq):
    return bytes([5, seq])


def erase(seq, begin=0, n=0, pages=0, beyond=False, negative=False):
    """Tokens [begin, begin + n) (begin taken modulo length + 1, n modulo what is left + 1), or
    `pages` whole pages (1..3) from begin, or a range past the end, or from a negative begin."""
    mode = 7 if negative else 6 if beyond else 4 if pages else 0
    return bytes([10, seq, mode, begin, (pages - 1) if pages else n])


def decode(seq, tq=1, causal=True, window=None, softcap=False, threads=1):
    """Options byte: bit 0 causal, bit 1 window_left = 5 * (bits 4-7), bit 2 softcap 3, bit 3 two threads."""
    opts = (1 if causal else 0) | (2 | (window // 5) << 4 if window is not None else 0) | (4 if softcap else 0)
    opts |= 8 if threads == 2 else 0
    return bytes([6, seq, tq - 1, opts])


def bad_append(seq, n, fault):
    """fault: 0 K one column wider, 1 V of another width, 2 V one token more, 3 HeadsView batch 2,
    4 HeadsView with a head too many."""
    return bytes([8, seq, n - 1, fault])


def decode_two(seq0, seq1, tq0=1, tq1=1, causal=True):
    return bytes([9, seq0, seq1, tq0, tq1 - 1, 1 if causal else 0])


def views(page=0, kv_heads=1, d_k=4, d_v=3, group=2, pages=6, seqs=((2, 1),), extra_stride=0, seed=1,
          garbage=0, start=0, opts=1, extras=0, fault=0, cu_null=False):
    """The view mode of fuzz_kv_cache (run_views): page is an index into (1, 2, 3, 4, 5, 7, 8, 16, 32);
    seqs: (length byte, queries byte) per sequence (length byte % 8: 0 empty, 1 a page boundary, 2 one
    short, 3 one past, >= 4: the next byte % (tokens + 1), given as a third element); garbage 0 NaN,
    1 +inf, 2 -inf, 3 1e30; fault: 16/17 a used table entry out of range, 18 a negative length, 19 a
    length beyond the table, 20 null key pages, 21 null lengths, 22 null tables, 23 page size 0, 15 a
    decreasing cu_seqlens_q, 14 query heads not a multiple of kv_heads, 13 batch -1."""
    b = bytes([0xE0, page, kv_heads - 1, d_k - 1, d_v, group - 1, pages - 1, len(seqs), extra_stride])
    b += struct.pack("<I", seed) + bytes([garbage])
    for s in seqs:
        b += bytes([s[0]]) + (bytes([s[2]]) if s[0] % 8 >= 4 else b"") + bytes([s[1]])
    b += bytes([start, opts, extras, fault])
    if len(seqs) == 1:
        b += bytes([1 if cu_null else 0])
    return b


def kv_cache_seeds():
    return {
        # Decode through caller views (PagedKVView::nhd and ::hnd) over pages laid out by the harness.
        "views_one_token_pages_gqa": views(seqs=((4, 2, 5), (1 | 1 << 3, 1), (0, 6)), kv_heads=2, d_k=3, d_v=5,
                                           extra_stride=2),
        "views_page_boundaries_shared_pages": views(page=2, seqs=((1, 2), (2, 1), (3, 0)), pages=3, garbage=3,
                                                    extras=3),
        "views_cache_page_16": views(page=7, seqs=((4, 2, 40), (1 | 1 << 3, 1)), pages=5, d_v=0, opts=3 | 2 << 4),
        "views_cache_page_32_single": views(page=8, seqs=((3, 2),), cu_null=True, opts=0x08 | 1 | 3 << 4),
        "views_table_entry_out_of_range": views(seqs=((4, 0, 9), (1, 1)), fault=16, garbage=1),
        "views_negative_length": views(page=3, seqs=((1, 0), (2, 1)), fault=18),
        "views_null_pages": views(page=4, seqs=((4, 1, 3),), fault=20),
        "views_page_size_zero": views(seqs=((1, 0),), fault=23),
        "views_gqa_heads_fault": views(kv_heads=2, group=2, seqs=((1, 0),), fault=14),
        "fork_copy_on_write": kv_cache(
            create(), append(0, 20), fork(0), decode(0), decode(1), append(0, 7), append(1, 19), decode(0, tq=3),
            decode(1, tq=2), decode_two(0, 1, 2, 1), pages=8),
        "fork_full_last_page": kv_cache(
            create(), append(0, 32), fork(0), append(1, 5), append(0, 40), fork(1), truncate(2, 3), append(2, 9),
            decode(0), decode(1), decode(2, tq=2), pages=8),
        "full_pool": kv_cache(
            create(), append(0, 16), append(0, 16), append(0, 1), fork(0), append(1, 1), decode(0), release(1),
            truncate(0, 20), append(0, 5), append(0, 40), decode(0), pages=2, slack=5),
        "copy_on_write_one_page_short": kv_cache(
            create(), append(0, 20), fork(0), append(0, 13), append(0, 1), append(1, 12), decode(0), decode(1),
            fork(0), append(2, 1), pages=3),
        "truncate_boundaries": kv_cache(
            create(), append(0, 40), append(0, 40), truncate(0, 64), decode(0), truncate(0, 33), append(0, 31),
            truncate(0, 2, beyond=True), truncate(0, 0, negative=True), truncate(0, 0), append(0, 5), decode(0, tq=3),
            page=32, pages=6),
        "erase_streaming": kv_cache(
            create(), append(0, 40), erase(0, 4, pages=1), decode(0), append(0, 30), fork(0), erase(0, 5, 17),
            decode(0), decode(1), erase(1, 3, pages=2), append(1, 7), decode(1, tq=2), erase(0, 0, 0, beyond=True),
            erase(1, 0, 0, negative=True), erase(1, 2, 200), decode(1), page=16, pages=6),
        "release_and_reuse": kv_cache(
            create(), create(), append(0, 10), append(1, 10), release(0), decode(0), append(0, 3), fork(0),
            truncate(0, 1), release(0), decode(2), decode(3), create(), append(0, 4), decode_two(0, 1, 1, 2)),
        "bad_appends": kv_cache(
            create(), append(0, 5), fork(0), bad_append(1, 3, 0), bad_append(1, 3, 1), bad_append(1, 3, 2),
            bad_append(1, 3, 3), bad_append(1, 3, 4), bad_append(2, 1, 0), decode(1), d_v=0),
        "append_forms": kv_cache(
            create(), append(0, 17, 1), append(0, 18, 2), append(0, 19, 3), append(0, 0, 1), decode(0, tq=3),
            kv_heads=2, d_k=3, d_v=5, pages=3),
        "big_pages_gqa_options": kv_cache(
            create(), *[append(0, 40) for _ in range(8)], fork(0), append(0, 30), append(1, 40), decode(0, tq=3),
            decode(1, tq=3, window=50, softcap=True, threads=2), decode_two(1, 0, 2, 2, causal=False),
            page=256, kv_heads=3, d_k=8, d_v=5, group=3, pages=3),
    }


def write(directory, seeds):
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        os.remove(os.path.join(directory, name))
    for name, data in seeds.items():
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)


def main():
    if "--print" in sys.argv:
        for name, data in attention_seeds().items():
            print(name, data.hex())
        return
    corpora = {"attention": attention_seeds, "npy": npy_seeds, "kv_cache": kv_cache_seeds}
    names = [a for a in sys.argv[1:] if not a.startswith("-")] or list(corpora)
    for name in names:
        write(os.path.join(HERE, "corpus", name), corpora[name]())


if __name__ == "__main__":
    main()
