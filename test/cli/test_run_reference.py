#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""`eigen-attention run` against NumPy: every option, 2-D and 4-D inputs, float32 and float64
(and float16, case float16), both layouts, with the dtype, shape and layout of every output file checked (ATTN in the
inputs' layout; SCORES [B, H, T_q, T_k] and LSE [B, H, T_q] in both).

Each case is one option (or one combination); inside it the tool runs on 2-D inputs where the
option applies to them, and on 4-D inputs in both layouts, each in float32 and float64.

Tolerances, compared as |got - want| <= tol * (1 + |want|) element by element:
- float64: 1e-11. The tool's own rounding is a few hundred ulps at most here (dot products of
  d <= 48 terms, sums of <= 200 exponentials: ~1e-14); 1e-11 leaves three orders of margin,
  and still fails a tool that computes float64 inputs in float32 (errors ~1e-7).
- float32: 2e-5, about 340 ulps of float32 (u = 2^-24 = 6e-8). The reference is the exact
  (float64) attention of the float32 values read, so the difference is the tool's float32
  rounding alone: a logit scale * sum_d q_i k_i has an error bounded by ~d * u * sum |q_i k_i|
  * scale, which for d <= 48 standard-normal entries is ~1e-5 in the worst case and ~1e-6
  typically (|logits| <= ~10 here, soft-cap, ALiBi and bias included); softmax weights inherit
  it as a relative error, and ATTN, a convex combination of V rows (|v| <= ~4), inherits it as
  an absolute error of the same order. 2e-5 covers that worst case, and a tool in half
  precision (~1e-3) or with any semantic difference (>= 1e-3 here) still fails.
- float16 (case float16; inputs, bias, ALiBi slopes and sinks '<f2', computed in float32, ATTN
  and SCORES written as '<f2', LSE as '<f4'): ATTN and SCORES 2^-11 + 2.5e-5. The reference is the
  exact attention of the half values read (exact in float32 too), so the tool's float32
  arithmetic costs what it costs float32 inputs (2e-5 above, with 0.5e-5 more for the
  rounding of that float result's own error), and the one rounding of the result to half adds
  at most 2^-11 |x| (half's unit roundoff, normal range) or 2^-25 (below 2^-14, subnormal):
  |got - want| <= 2^-11 |want| + 2.5e-5 (1 + |want|) <= (2^-11 + 2.5e-5)(1 + |want|). A tool
  that rounds to half twice, or computes in half, still fails on most of these sizes (its
  errors are several 2^-11). LSE is never rounded to half: 2e-5, as float32.
Rows without a visible key must be exactly zero in ATTN and SCORES and exactly -inf in LSE
(with --sinks: exactly the head's sink as read); no NaN may appear anywhere.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eacli  # noqa: E402
from eacli import case, check  # noqa: E402

TOL = {"float64": 1e-11, "float32": 2e-5, "float16": 2.0 ** -11 + 2.5e-5}
DESCR = {"float64": "<f8", "float32": "<f4", "float16": "<f2"}
# LSE is in the compute type: float32 for float16 inputs (never rounded to half).
LSE_DTYPE = {"float64": "float64", "float32": "float32", "float16": "float32"}


def compare(what, got, want, dtype):
    import numpy as np
    got64 = got.astype(np.float64)
    check(got.shape == want.shape, "%s: shape %r, expected %r" % (what, got.shape, want.shape))
    check(not np.isnan(got64).any(), "%s: NaN at %s" % (what, np.argwhere(np.isnan(got64))[:5].tolist()))
    inf_w = np.isinf(want)
    bad_inf = (np.isinf(got64) != inf_w) | (inf_w & (np.sign(got64) != np.sign(want)))
    check(not bad_inf.any(), "%s: infinities differ at %s (got %s, want %s)"
          % (what, np.argwhere(bad_inf)[:5].tolist(), got64[bad_inf][:5], want[bad_inf][:5]))
    fin = ~inf_w
    err = np.zeros(want.shape)
    err[fin] = np.abs(got64[fin] - want[fin]) / (1.0 + np.abs(want[fin]))
    worst = np.unravel_index(np.argmax(err), err.shape) if err.size else ()
    if os.environ.get("EA_CLI_VERBOSE") and err.size:
        print("%-100s max scaled error %.2e (tolerance %.0e)" % (what, err[worst], TOL[dtype]))
    check(err.size == 0 or err[worst] <= TOL[dtype],
          "%s (%s): max scaled error %.3g > %.3g at %s: got %r, want %r"
          % (what, dtype, err[worst] if err.size else 0, TOL[dtype], list(worst),
             got64[worst] if err.size else None, want[worst] if err.size else None))


class Run:
    """One `eigen-attention run` on random inputs, compared with reference_attention."""

    def __init__(self, ctx, tag, layout, dtype, B=2, H=4, Hkv=None, Tq=7, Tk=11, dk=8, dv=None,
                 causal=False, align=None, scale=None, softcap=None, window=None, chunk=None, mask=None,
                 mask_shape=None, key_lengths=None, kl_dtype="int64", alibi=False, sinks=False,
                 average_heads=False, scores=True, lse=True, threads=None, seed=0, extra=(),
                 npy_version=None, quiet=False, attn=True, heatmap=False):
        import numpy as np
        from reference import reference_attention
        self.tag = tag
        self.layout, self.dtype = layout, dtype
        if layout == "2d":
            B, H, Hkv = 1, 1, 1
        Hkv = H if Hkv is None else Hkv
        dv = dk if dv is None else dv
        self.B, self.H, self.Tq, self.Tk = B, H, Tq, Tk
        rng = np.random.default_rng(seed)
        npdt = np.dtype(dtype)
        # Canonical [B, H, T, d] arrays, rounded to the file dtype first: the reference sees
        # exactly the values the tool reads.
        q = rng.standard_normal((B, H, Tq, dk)).astype(npdt)
        k = rng.standard_normal((B, Hkv, Tk, dk)).astype(npdt)
        v = rng.standard_normal((B, Hkv, Tk, dv)).astype(npdt)
        d = os.path.join(ctx.dir, tag)
        os.makedirs(d)
        self.sub = eacli.Context(ctx.tool, d)
        self.sub.log = ctx.log
        self.desc = "%s [%s %s B=%d H=%d H_kv=%d T_q=%d T_k=%d d_k=%d d_v=%d]" % (
            tag, layout, dtype, B, H, Hkv, Tq, Tk, dk, dv)

        def to_file(a):  # canonical -> the layout of the files
            if layout == "2d":
                return a[0, 0]
            if layout == "bthd":
                return a.transpose(0, 2, 1, 3)
            return a

        for name, a in (("Q.npy", q), ("K.npy", k), ("V.npy", v)):
            eacli.write_npy(self.sub.path(name), to_file(a), version=npy_version)
        args = ["run", "--q", "Q.npy", "--k", "K.npy", "--v", "V.npy"]
        outputs = []
        if attn:
            args += ["--out", "ATTN.npy"]
            outputs.append("ATTN.npy")
        if scores:
            args += ["--scores", "SCORES.npy"]
            outputs.append("SCORES.npy")
        if lse:
            args += ["--lse", "LSE.npy"]
            outputs.append("LSE.npy")
        if heatmap:
            args += ["--heatmap", "HEAT.png"]
            outputs.append("HEAT.png")
        if layout != "2d":
            args += ["--layout", layout]
        if causal:
            args.append("--causal")
        if align is not None:
            args += ["--align", align]
        if scale is not None:
            args += ["--scale", repr(scale)]
        if softcap is not None:
            args += ["--softcap", repr(softcap)]
        if window is not None:
            args += ["--window", "%d,%d" % window]
        if chunk is not None:
            args += ["--chunk-size", str(chunk)]
        if threads is not None:
            args += ["--threads", str(threads)]
        if average_heads:
            args.append("--average-heads")
        if quiet:
            args.append("--quiet")
        m4 = b4 = None
        if mask is not None:
            shape = mask_shape if mask_shape is not None else ((Tq, Tk) if layout == "2d" else (B, H, Tq, Tk))
            full4 = shape if len(shape) == 4 else (1, 1) + tuple(shape)
            if mask == "bool":
                m = rng.random(full4) < 0.65
                m[0, 0, 0, :] = False  # one row without a visible key
                m4 = m
            else:
                m = (rng.standard_normal(full4) * 2.0).astype(npdt)
                b4 = m.astype(np.float64)
            eacli.write_npy(self.sub.path("MASK.npy"), m.reshape(shape))
            args += ["--mask", "MASK.npy"]
        kl = None
        if key_lengths is not None:
            kl = np.array(key_lengths, dtype=kl_dtype)
            eacli.write_npy(self.sub.path("LENGTHS.npy"), kl)
            args += ["--key-lengths", "LENGTHS.npy"]
        slopes = None
        if alibi:
            slopes = rng.uniform(0.05, 0.8, H).astype(npdt)
            eacli.write_npy(self.sub.path("SLOPES.npy"), slopes)
            args += ["--alibi", "SLOPES.npy"]
        logits = None
        if sinks:
            logits = rng.uniform(-1.0, 2.0, H).astype(npdt)
            eacli.write_npy(self.sub.path("SINKS.npy"), logits)
            args += ["--sinks", "SINKS.npy"]
        args += list(extra)
        self.args = args
        before = self.sub.files()
        r = self.sub.run_ok(args)
        if quiet:
            check(r.stdout == "" and r.stderr == "", "%s: --quiet, yet the tool printed:\n%s%s"
                  % (self.desc, r.stdout[-1000:], r.stderr[-1000:]))
        eacli.check_only_outputs(self.sub, before, outputs, self.desc)

        self.want_out, self.want_w, self.want_lse = reference_attention(
            q, k, v, causal=causal, align=align or "top-left", scale=scale, softcap=softcap or 0.0,
            window=window or (-1, -1), chunk=chunk or 0, mask=m4, bias=b4, key_lengths=kl,
            alibi=None if slopes is None else slopes.astype(np.float64),
            sinks=None if logits is None else logits.astype(np.float64))

        descr = DESCR[dtype]
        # ATTN: like Q, with d_v.
        attn_shape = {"2d": (Tq, dv), "bhtd": (B, H, Tq, dv), "bthd": (B, Tq, H, dv)}[layout]
        self.out = self.scores = self.lse = None
        if attn:
            a = eacli.read_output(self.sub.path("ATTN.npy"), descr, attn_shape)
            self.out = a.reshape(1, 1, Tq, dv) if layout == "2d" else (
                a.transpose(0, 2, 1, 3) if layout == "bthd" else a)
            compare(self.desc + " ATTN", self.out, self.want_out, dtype)
        if scores:
            if average_heads:
                s_shape = (Tq, Tk) if layout == "2d" else (B, Tq, Tk)
                s = eacli.read_output(self.sub.path("SCORES.npy"), descr, s_shape)
                self.scores = s.reshape(B, Tq, Tk)
                compare(self.desc + " SCORES (--average-heads)", self.scores, self.want_w.mean(axis=1), dtype)
            else:
                # Per-head weights are [B, H, T_q, T_k] whatever the layout of Q, K, V and ATTN.
                s_shape = (Tq, Tk) if layout == "2d" else (B, H, Tq, Tk)
                s = eacli.read_output(self.sub.path("SCORES.npy"), descr, s_shape)
                self.scores = s.reshape(B, H, Tq, Tk)
                compare(self.desc + " SCORES", self.scores, self.want_w, dtype)
        if lse:
            l_shape = (Tq,) if layout == "2d" else (B, H, Tq)
            lse_dtype = LSE_DTYPE[dtype]
            self.lse = eacli.read_output(self.sub.path("LSE.npy"), DESCR[lse_dtype], l_shape).reshape(B, H, Tq)
            compare(self.desc + " LSE", self.lse, self.want_lse, lse_dtype)
        # Rows without a visible key: exactly zero / -inf.
        empty = np.isneginf(self.want_lse)
        if empty.any():
            check(self.out is None or not self.out[empty].any(), "%s: ATTN rows without a visible key are not zero" % self.desc)
            if self.lse is not None:
                check(np.isneginf(self.lse[empty]).all(), "%s: LSE of empty rows is not -inf" % self.desc)
            if self.scores is not None and not average_heads:
                check(not self.scores[empty].any(), "%s: SCORES rows without a visible key are not zero" % self.desc)
        if logits is not None:
            # With sinks, rows without a visible key: zero ATTN and SCORES, LSE exactly the
            # head's sink as read (exact in the LSE's dtype).
            empty = (self.want_w == 0).all(axis=-1)
            if self.out is not None:
                check(not self.out[empty].any(), "%s: ATTN rows that see only the sink are not zero" % self.desc)
            if self.scores is not None and not average_heads:
                check(not self.scores[empty].any(),
                      "%s: SCORES rows that see only the sink are not zero" % self.desc)
            if self.lse is not None:
                sink_of = np.broadcast_to(logits.astype(np.float64)[None, :, None], (B, H, Tq))
                check(np.array_equal(self.lse.astype(np.float64)[empty], sink_of[empty]),
                      "%s: LSE of rows that see only the sink is not the sink" % self.desc)


def each(ctx, kinds, tag, **kw):
    """Runs `kw` for every kind ('2d', 'bhtd', 'bthd') in `kinds` and both dtypes."""
    runs = []
    for kind in kinds:
        for dtype in ("float64", "float32"):
            runs.append(Run(ctx, "%s-%s-%s" % (tag, kind, dtype), kind, dtype, **kw))
    return runs


ALL = ("2d", "bhtd", "bthd")
FOUR_D = ("bhtd", "bthd")


@case
def plain(ctx):
    each(ctx, ALL, "rect", Tq=7, Tk=11, dk=8, dv=5, seed=1)
    each(ctx, ALL, "more-queries", Tq=12, Tk=5, dk=6, dv=9, seed=2)
    each(ctx, ("2d", "bhtd"), "one", B=1, H=1, Tq=1, Tk=1, dk=1, dv=1, seed=3)


@case
def empty(ctx):
    # No queries: empty outputs. No keys: every row sees nothing (zeros, LSE -inf).
    each(ctx, ALL, "no-queries", Tq=0, Tk=5, seed=55)
    each(ctx, ALL, "no-keys", Tq=4, Tk=0, seed=56)
    each(ctx, FOUR_D, "no-batch", B=0, Tq=3, Tk=4, seed=57)


@case
def causal_top_left(ctx):
    each(ctx, ALL, "tq<tk", causal=True, Tq=6, Tk=10, seed=4)
    each(ctx, ALL, "tq>tk-explicit", causal=True, align="top-left", Tq=10, Tk=6, seed=5)


@case
def causal_bottom_right(ctx):
    # T_q > T_k: the first T_q - T_k rows see no key at all (zeros, LSE -inf).
    each(ctx, ALL, "tq<tk", causal=True, align="bottom-right", Tq=6, Tk=10, seed=6)
    each(ctx, ALL, "tq>tk", causal=True, align="bottom-right", Tq=10, Tk=6, seed=7)


@case
def scale(ctx):
    each(ctx, ALL, "scale", scale=0.37, seed=8)
    each(ctx, ("2d",), "scale-causal", scale=1.25, causal=True, Tq=9, Tk=9, seed=9)


@case
def softcap(ctx):
    # scale 1: logits ~ N(0, d_k), so a cap of 1.5 changes almost every one of them.
    each(ctx, ALL, "softcap", scale=1.0, softcap=1.5, seed=10)
    each(ctx, ("2d", "bthd"), "softcap-default-scale", softcap=0.6, causal=True, seed=11)


@case
def mask_bool(ctx):
    each(ctx, ("2d",), "2d", mask="bool", Tq=8, Tk=12, seed=12)
    for shape in ((1, 1, 8, 12), (2, 1, 8, 12), (1, 4, 8, 12), (2, 4, 8, 12), (8, 12)):
        each(ctx, FOUR_D, "shape" + "x".join(map(str, shape)), mask="bool", mask_shape=shape,
             B=2, H=4, Hkv=2, Tq=8, Tk=12, seed=13)


@case
def mask_float_bias(ctx):
    each(ctx, ("2d",), "2d", mask="float", Tq=8, Tk=12, seed=14)
    for shape in ((1, 1, 8, 12), (2, 1, 8, 12), (1, 4, 8, 12), (2, 4, 8, 12), (8, 12)):
        each(ctx, FOUR_D, "shape" + "x".join(map(str, shape)), mask="float", mask_shape=shape,
             B=2, H=4, Tq=8, Tk=12, seed=15)
    each(ctx, FOUR_D, "bias-causal", mask="float", causal=True, align="bottom-right", Tq=5, Tk=9, seed=16)


@case
def key_lengths(ctx):
    # 2-D: one length. 4-D: B lengths, one of them 0 (a sequence without keys: zero rows,
    # LSE -inf), one full; int32 and int64.
    each(ctx, ("2d",), "2d-int32", key_lengths=[7], kl_dtype="int32", Tq=5, Tk=11, seed=17)
    each(ctx, ("2d",), "2d-int64-zero", key_lengths=[0], kl_dtype="int64", Tq=5, Tk=11, seed=18)
    each(ctx, FOUR_D, "int32", key_lengths=[3, 0, 11], kl_dtype="int32", B=3, Tq=5, Tk=11, seed=19)
    each(ctx, FOUR_D, "int64", key_lengths=[11, 6, 1], kl_dtype="int64", B=3, Tq=5, Tk=11, seed=20)


@case
def key_lengths_alignment(ctx):
    # Bottom-right alignment uses each sequence's own length as T_k (offset = length - T_q).
    each(ctx, ("2d",), "causal-2d", key_lengths=[8], causal=True, align="bottom-right", Tq=4, Tk=12, seed=21)
    each(ctx, FOUR_D, "causal", key_lengths=[8, 3], causal=True, align="bottom-right",
         B=2, Tq=4, Tk=12, seed=22)
    each(ctx, FOUR_D, "window", key_lengths=[10, 5], window=(2, 1), align="bottom-right",
         B=2, Tq=4, Tk=12, seed=23)
    each(ctx, FOUR_D, "alibi", key_lengths=[10, 5], alibi=True, align="bottom-right",
         B=2, Tq=4, Tk=12, seed=24)


@case
def window(ctx):
    each(ctx, ALL, "2,1", window=(2, 1), Tq=10, Tk=10, seed=25)
    each(ctx, ALL, "3,-1", window=(3, -1), Tq=10, Tk=10, seed=26)
    each(ctx, ("2d", "bhtd"), "-1,0", window=(-1, 0), Tq=10, Tk=10, seed=27)
    # T_q != T_k: (0, 0) leaves one key per row when aligned bottom-right; top-left, rows
    # past the last key see nothing.
    each(ctx, ("2d", "bthd"), "0,0-bottom-right", window=(0, 0), align="bottom-right", Tq=6, Tk=9, seed=28)
    each(ctx, ("2d", "bhtd"), "1,1-top-left-tq>tk", window=(1, 1), Tq=9, Tk=5, seed=29)
    each(ctx, FOUR_D, "causal-4,-1", window=(4, -1), causal=True, Tq=10, Tk=10, seed=30)


@case
def chunk_size(ctx):
    # Llama 4's causal chunks; T_q != T_k aligned bottom-right (negative positions floor); with
    # key lengths, a window and ALiBi.
    each(ctx, ALL, "causal-4", chunk=4, causal=True, Tq=11, Tk=11, seed=61)
    each(ctx, ("2d", "bhtd"), "3-bottom-right-tq>tk", chunk=3, align="bottom-right", Tq=9, Tk=5, seed=62)
    each(ctx, FOUR_D, "key-lengths-window-alibi", chunk=5, key_lengths=[12, 7], window=(3, -1), alibi=True,
         causal=True, align="bottom-right", B=2, Tq=6, Tk=12, seed=63)


@case
def alibi(ctx):
    each(ctx, ALL, "square", alibi=True, Tq=9, Tk=9, seed=31)
    each(ctx, ALL, "bottom-right", alibi=True, align="bottom-right", causal=True, Tq=5, Tk=9, seed=32)
    each(ctx, FOUR_D, "gqa", alibi=True, H=6, Hkv=2, Tq=5, Tk=9, seed=33)


@case
def sinks(ctx):
    # Attention sinks: causal bottom-right with T_q > T_k (the first rows see only the sink:
    # zero ATTN and SCORES, LSE = the sink); with GQA, key lengths (one sequence without keys),
    # a window, ALiBi, soft-cap and --average-heads.
    each(ctx, ALL, "causal-bottom-right-tq>tk", sinks=True, causal=True, align="bottom-right", Tq=9, Tk=5,
         seed=81)
    each(ctx, FOUR_D, "gqa-lengths-window-alibi", sinks=True, H=4, Hkv=2, key_lengths=[11, 0], window=(3, -1),
         alibi=True, softcap=2.5, causal=True, Tq=7, Tk=11, seed=82)
    each(ctx, ("bhtd",), "average-heads", sinks=True, average_heads=True, causal=True, Tq=6, Tk=8, seed=83)


@case
def gqa(ctx):
    each(ctx, FOUR_D, "6:3", H=6, Hkv=3, Tq=6, Tk=7, seed=34)
    each(ctx, FOUR_D, "8:2", H=8, Hkv=2, Tq=6, Tk=7, dv=3, seed=35)
    each(ctx, FOUR_D, "mqa", H=4, Hkv=1, Tq=6, Tk=7, causal=True, seed=36)


@case
def average_heads(ctx):
    # 2-D: one head, so the mean is the weights themselves, [T_q, T_k] (the rank is kept).
    each(ctx, ("2d",), "2d", average_heads=True, Tq=6, Tk=8, seed=36)
    each(ctx, FOUR_D, "mha", average_heads=True, H=4, Tq=6, Tk=8, seed=37)
    each(ctx, FOUR_D, "gqa-mask", average_heads=True, H=6, Hkv=3, Tq=6, Tk=8, mask="bool",
         mask_shape=(2, 6, 6, 8), seed=38)
    each(ctx, FOUR_D, "causal-lengths", average_heads=True, causal=True, key_lengths=[8, 0],
         Tq=6, Tk=8, seed=39)


@case
def everything(ctx):
    # All at once: scale, soft-cap, ALiBi, bias, causal bottom-right, window, key lengths, GQA.
    each(ctx, ("2d",), "bias-2d", scale=0.8, softcap=2.5, alibi=True, mask="float", causal=True,
         align="bottom-right", window=(5, 0), key_lengths=[11], Tq=7, Tk=13, seed=40)
    each(ctx, FOUR_D, "bias", scale=0.8, softcap=2.5, alibi=True, mask="float", causal=True,
         align="bottom-right", window=(5, 0), key_lengths=[13, 9], H=4, Hkv=2, Tq=7, Tk=13, seed=41)
    each(ctx, FOUR_D, "bool", scale=0.8, softcap=2.5, alibi=True, mask="bool", mask_shape=(2, 1, 7, 13),
         causal=True, window=(3, 2), key_lengths=[12, 13], H=4, Hkv=1, Tq=7, Tk=13, seed=42)


@case
def large_tiles(ctx):
    # Sizes past any tile edge, so that key tiles hidden entirely by the causal mask, the window
    # or the key length are skipped by the tool's kernel.
    for dtype in ("float64", "float32"):
        Run(ctx, "bhtd-" + dtype, "bhtd", dtype, B=2, H=4, Hkv=2, Tq=70, Tk=200, dk=40, dv=24,
            causal=True, align="bottom-right", window=(90, -1), key_lengths=[200, 131], seed=43)
        Run(ctx, "bthd-" + dtype, "bthd", dtype, B=1, H=2, Tq=150, Tk=150, dk=48, causal=True,
            alibi=True, window=(40, -1), seed=44)


@case
def threads(ctx):
    # Results are bitwise identical for every thread count (Options::threads); 0 = one per
    # hardware thread.
    import numpy as np
    for dtype in ("float64", "float32"):
        runs = [Run(ctx, "threads%s-%s" % (t, dtype), "bhtd", dtype, B=2, H=4, Hkv=2, Tq=140, Tk=140, dk=16,
                    causal=True, threads=t, seed=45) for t in (1, 3, 0)]
        for r in runs[1:]:
            for what in ("out", "scores", "lse"):
                a, b = getattr(runs[0], what), getattr(r, what)
                check(np.array_equal(a, b), "%s: %s differs bitwise from --threads 1" % (r.desc, what))


@case
def outputs(ctx):
    # Only the requested outputs are written; ATTN alone; existing files are replaced;
    # output paths in a subdirectory and absolute paths work.
    import numpy as np
    Run(ctx, "attn-only", "bhtd", "float64", scores=False, lse=False, seed=46)
    Run(ctx, "attn-lse", "bthd", "float32", scores=False, lse=True, seed=47)
    Run(ctx, "attn-scores", "2d", "float64", scores=True, lse=False, seed=48)
    r = Run(ctx, "again", "bhtd", "float64", seed=49)
    # Rerun into the same files, then into a subdirectory by absolute path.
    before = r.sub.files()
    r.sub.run_ok(r.args)
    check(r.sub.files() == before, "rerun: files changed: %s -> %s" % (before, r.sub.files()))
    again = eacli.read_output(r.sub.path("ATTN.npy"), "<f8", (2, 4, 7, 8))
    check(np.array_equal(again, r.out), "rerun: ATTN differs")
    os.makedirs(r.sub.path("sub"))
    args = list(r.args)
    for name in ("ATTN.npy", "SCORES.npy", "LSE.npy"):
        args[args.index(name)] = r.sub.path(os.path.join("sub", name))
    r.sub.run_ok(args)
    got = sorted(os.listdir(r.sub.path("sub")))
    check(got == ["ATTN.npy", "LSE.npy", "SCORES.npy"], "outputs in sub/: %s" % got)
    check(np.array_equal(eacli.read_output(r.sub.path("sub/ATTN.npy"), "<f8", (2, 4, 7, 8)), r.out),
          "ATTN written by absolute path differs")


@case
def outputs_without_out(ctx):
    # --out is optional when another output is asked for: SCORES, LSE or a heatmap alone (or
    # together) are written, and nothing else (no ATTN.npy, no temporary file).
    Run(ctx, "scores-only-2d", "2d", "float64", attn=False, scores=True, lse=False, causal=True, seed=60)
    Run(ctx, "scores-only-bthd", "bthd", "float32", attn=False, scores=True, lse=False, H=3, seed=61)
    Run(ctx, "average-only-bthd", "bthd", "float64", attn=False, scores=True, lse=False, average_heads=True,
        seed=62)
    Run(ctx, "lse-only-bhtd", "bhtd", "float64", attn=False, scores=False, lse=True, mask="bool", seed=63)
    Run(ctx, "heatmap-only-2d", "2d", "float64", attn=False, scores=False, lse=False, heatmap=True, Tq=9,
        Tk=9, seed=64)
    Run(ctx, "scores-lse-heatmap-bthd", "bthd", "float32", attn=False, heatmap=True, causal=True, seed=65)


@case
def quiet(ctx):
    # --quiet: nothing on stdout or stderr.
    Run(ctx, "quiet-2d", "2d", "float64", quiet=True, seed=50)
    Run(ctx, "quiet-bthd", "bthd", "float32", quiet=True, mask="bool", seed=51)


@case
def npy_versions(ctx):
    # Inputs in .npy format versions 2.0 and 3.0 (4-byte header length) read as 1.0 ones.
    for version in ((2, 0), (3, 0)):
        Run(ctx, "v%d-2d" % version[0], "2d", "float64", npy_version=version, seed=52)
        Run(ctx, "v%d-bthd" % version[0], "bthd", "float32", npy_version=version, seed=53)


@case
def float16(ctx):
    # '<f2' inputs in, '<f2' ATTN and SCORES out (LSE '<f4'), computed in float: every layout,
    # with the options that bring their own float16 data (a bias, ALiBi slopes, sinks) and the
    # rest.
    import numpy as np
    runs = []
    for kind in ALL:
        runs.append(Run(ctx, "plain-" + kind, kind, "float16", Tq=7, Tk=11, dk=8, dv=5, seed=70))
        runs.append(Run(ctx, "causal-bias-" + kind, kind, "float16", mask="float", causal=True,
                        align="bottom-right", Tq=6, Tk=10, seed=71))
        runs.append(Run(ctx, "alibi-window-" + kind, kind, "float16", alibi=True, window=(3, 1), Tq=9, Tk=9,
                        seed=72))
        runs.append(Run(ctx, "sinks-causal-" + kind, kind, "float16", sinks=True, causal=True,
                        align="bottom-right", Tq=9, Tk=6, seed=76))
    for kind in FOUR_D:
        runs.append(Run(ctx, "gqa-lengths-" + kind, kind, "float16", H=6, Hkv=2, key_lengths=[9, 0, 4],
                        B=3, mask="bool", mask_shape=(3, 1, 5, 9), Tq=5, Tk=9, softcap=1.5, scale=0.5,
                        seed=73))
        runs.append(Run(ctx, "average-" + kind, kind, "float16", average_heads=True, causal=True, seed=74))
        runs.append(Run(ctx, "large-" + kind, kind, "float16", B=1, H=2, Tq=80, Tk=150, dk=40, dv=24,
                        causal=True, align="bottom-right", seed=75))
    # The summary names the files' dtypes.
    r = runs[0].sub.run_ok(runs[0].args)
    check("ATTN.npy: ATTN, float16 (7, 5)" in r.stdout and "LSE.npy: LSE, float32 (7,)" in r.stdout,
          "float16 run: the summary %r does not name float16 ATTN and float32 LSE" % r.stdout)
    # Weights rounded to float16 stay in [0, 1].
    for run in runs:
        if run.scores is not None:
            w = run.scores.astype(np.float64)
            check(((w >= 0) & (w <= 1)).all(), "%s: float16 SCORES outside [0, 1]" % run.desc)


@case
def mixed_dtypes(ctx):
    # Q float32 with K/V float64 is not in the specification: the tool must either reject it
    # with the one-line error, leaving nothing behind, or compute it correctly in one dtype.
    import numpy as np
    from reference import reference_attention
    rng = np.random.default_rng(54)
    q = rng.standard_normal((5, 4)).astype(np.float32)
    k = rng.standard_normal((6, 4))
    v = rng.standard_normal((6, 3))
    eacli.write_npy(ctx.path("Q.npy"), q)
    eacli.write_npy(ctx.path("K.npy"), k)
    eacli.write_npy(ctx.path("V.npy"), v)
    before = ctx.files()
    r = ctx.run(["run", "--q", "Q.npy", "--k", "K.npy", "--v", "V.npy", "--out", "ATTN.npy"])
    if r.returncode != 0:
        eacli.check_one_line_error(r, "mixed dtypes", any_of=("Q.npy", "K.npy", "V.npy"))
        eacli.check_no_new_files(ctx, before, "mixed dtypes")
        return
    arr, descr, _ = eacli.read_npy_strict(ctx.path("ATTN.npy"))
    check(descr in ("<f4", "<f8") and arr.shape == (5, 3), "mixed dtypes: ATTN %s %r" % (descr, arr.shape))
    want = reference_attention(q[None, None], k[None, None], v[None, None])[0][0, 0]
    compare("mixed dtypes ATTN", arr, want, "float32")


if __name__ == "__main__":
    sys.exit(eacli.main(sys.argv))
