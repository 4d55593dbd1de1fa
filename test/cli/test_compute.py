#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""`eigen-attention run --compute float|double|bf16|half`: the type of the computation.

- A wider type than the files' (float of float16, double of float32) converts the inputs
  exactly: the outputs, in that type, are bitwise those of a run on files of the widened values.
  A narrower one (float of float64) rounds them once, as NumPy's astype does.
- bf16 (and half of float32/float64 files) rounds Q, K, V, the bias, the ALiBi slopes and the
  sinks to nearest even, once, computes in float and writes ATTN and SCORES as float32 holding bfloat16
  values ('<f2' for half), LSE as float32, then reports the differences against a computation in
  the inputs' own type on the inputs as read, and against float on the rounded inputs. Checked:
  the report's form and numbers (each recomputed here from runs of the tool in float on the
  files as read and on files of the inputs rounded by NumPy), the outputs' dtypes, that they are
  bitwise the float results on the rounded inputs rounded once more (the library's guarantee,
  docs/low_precision.md: this also checks that the tool rounds the inputs exactly as NumPy
  does), their accuracy against a NumPy float64 reference on the rounded inputs, and that the
  kernel-only difference is small: below 2^-7 max |ATTN| (one rounding to bfloat16 costs at
  most 2^-8 |x|, the float arithmetic far less).
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eacli  # noqa: E402
from eacli import case, check  # noqa: E402

HEADER = re.compile(r"^compute (bfloat16|float16): Q, K and V rounded to \1 \(max abs rounding (\S+)\), "
                    r"computed in float32(; outputs written as float32 \(NumPy has no bfloat16\))?$")
LINE = re.compile(r"^(ATTN|SCORES|LSE): max abs difference (\S+) against (float32|float64) on the inputs as "
                  r"read, (\S+) against float32 on the rounded inputs; max \|\1\| (\S+)$")


def to_odd_float32(x):
    """float64 rounded to float32 toward zero, the last bit set when inexact ("round to odd"):
    rounding that to bfloat16 (8 bits, far fewer than float32's 24 - 2) is one correct rounding
    of x, where rounding x to nearest float32 first could round twice."""
    import numpy as np
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):
        f = x.astype(np.float32)
    inexact = np.isfinite(x) & (f.astype(np.float64) != x)
    f = np.where(inexact & (np.abs(f.astype(np.float64)) > np.abs(x)), np.nextafter(f, np.float32(0)), f)
    bits = f.view(np.uint32) | np.where(inexact, np.uint32(1), np.uint32(0))
    return bits.astype(np.uint32).view(np.float32)


def to_bf16(x):
    """float16, float32 or float64 values rounded to bfloat16 (once, to nearest, ties to even),
    as float32 values."""
    import numpy as np
    x = np.ascontiguousarray(to_odd_float32(x) if np.asarray(x).dtype == np.float64 else x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    out = (r & 0xFFFFFFFF).astype(np.uint32).view(np.float32).reshape(x.shape)
    nan = np.isnan(x)
    out[nan] = x[nan]
    return out


def rounded(x, kind):
    """x rounded once to `kind` ('bf16' or 'half'), as float32 values."""
    import numpy as np
    if kind == "bf16":
        return to_bf16(x)
    return np.asarray(x).astype(np.float16).astype(np.float32)


def parse_report(stdout, what):
    """The report of a rounding --compute: (type, rounding, {name: (inputs, reference type,
    rounded, largest)})."""
    lines = [l for l in stdout.splitlines() if l.startswith("compute ")]
    check(len(lines) == 1, "%s: expected one 'compute ...' line, got:\n%s" % (what, stdout))
    m = HEADER.match(lines[0])
    check(m is not None, "%s: the line %r is not the report's header" % (what, lines[0]))
    typ, rounding, widened = m.group(1), float(m.group(2)), m.group(3) is not None
    check(widened == (typ == "bfloat16"), "%s: %r: 'outputs written as float32' is for bfloat16 only"
          % (what, lines[0]))
    diffs = {}
    for l in stdout.splitlines():
        if l.split(":")[0] in ("ATTN", "SCORES", "LSE"):
            m = LINE.match(l)
            check(m is not None, "%s: the line %r is not a difference line" % (what, l))
            diffs[m.group(1)] = (float(m.group(2)), m.group(3), float(m.group(4)), float(m.group(5)))
    return typ, rounding, diffs


def near(reported, exact, what):
    """A number printed with %.3e is the exact one to 4 significant digits."""
    check(abs(reported - exact) <= 6e-4 * abs(exact) + 1e-300,
          "%s: reported %.4e, recomputed %.6e" % (what, reported, exact))


def max_diff(a, b):
    import numpy as np
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    d = np.where(same, 0.0, np.abs(a - b))
    return float(d.max()) if d.size else 0.0


def write_inputs(ctx, sub, arrays):
    os.makedirs(ctx.path(sub), exist_ok=True)
    for name, a in arrays.items():
        eacli.write_npy(ctx.path(os.path.join(sub, name)), a)


def run_args(sub, extra, mask=False, alibi=False, sinks=False):
    p = lambda n: os.path.join(sub, n)  # noqa: E731
    args = ["run", "--q", p("Q.npy"), "--k", p("K.npy"), "--v", p("V.npy"), "--out", p("ATTN.npy"),
            "--scores", p("SCORES.npy"), "--lse", p("LSE.npy")]
    if mask:
        args += ["--mask", p("MASK.npy")]
    if alibi:
        args += ["--alibi", p("SLOPES.npy")]
    if sinks:
        args += ["--sinks", p("SINKS.npy")]
    return args + list(extra)


def outputs(ctx, sub, descr, lse_descr, shapes):
    attn_shape, scores_shape, lse_shape = shapes
    return (eacli.read_output(ctx.path(sub + "/ATTN.npy"), descr, attn_shape),
            eacli.read_output(ctx.path(sub + "/SCORES.npy"), descr, scores_shape),
            eacli.read_output(ctx.path(sub + "/LSE.npy"), lse_descr, lse_shape))


def check_rounding_run(ctx, kind, file_dtype, layout="bhtd", seed=0, B=2, H=4, Hkv=2, Tq=9, Tk=13, dk=16,
                       dv=8, bias=True, alibi=True, sinks=False, extra=("--causal", "--align", "bottom-right")):
    """Runs --compute `kind` on random `file_dtype` inputs and checks everything the module's
    docstring says. Returns the parsed report."""
    import numpy as np
    from reference import reference_attention
    rng = np.random.default_rng(seed)
    dt = np.dtype(file_dtype)
    q = (1.5 * rng.standard_normal((B, H, Tq, dk))).astype(dt)
    k = (1.5 * rng.standard_normal((B, Hkv, Tk, dk))).astype(dt)
    v = rng.standard_normal((B, Hkv, Tk, dv)).astype(dt)
    m = (rng.standard_normal((1, H, Tq, Tk))).astype(dt) if bias else None
    s = rng.uniform(0.05, 0.5, H).astype(dt) if alibi else None
    z = rng.uniform(-1.0, 2.0, H).astype(dt) if sinks else None
    to_file = (lambda a: a.transpose(0, 2, 1, 3)) if layout == "bthd" else (lambda a: a)
    shapes = ((B, Tq, H, dv) if layout == "bthd" else (B, H, Tq, dv), (B, H, Tq, Tk), (B, H, Tq))

    def files(qq, kk, vv, mm, ss, zz):
        d = {"Q.npy": to_file(qq), "K.npy": to_file(kk), "V.npy": to_file(vv)}
        if mm is not None:
            d["MASK.npy"] = mm
        if ss is not None:
            d["SLOPES.npy"] = ss
        if zz is not None:
            d["SINKS.npy"] = zz
        return d

    extra = list(extra) + ["--layout", layout]
    tag = "--compute %s of %s %s" % (kind, file_dtype, layout)
    # 1. --compute KIND on the files as read.
    write_inputs(ctx, "in", files(q, k, v, m, s, z))
    r = ctx.run_ok(run_args("in", extra + ["--compute", kind], bias, alibi, sinks))
    typ, rounding, diffs = parse_report(r.stdout, tag)
    check(typ == {"bf16": "bfloat16", "half": "float16"}[kind], "%s: the report names %s" % (tag, typ))
    descr = "<f4" if kind == "bf16" else "<f2"
    got = outputs(ctx, "in", descr, "<f4", shapes)
    for name in ("ATTN.npy", "SCORES.npy", "LSE.npy"):
        check(("%s: %s, %s" % ("in/" + name, name[:-4], "float32" if descr == "<f4" or name == "LSE.npy"
                               else "float16")) in r.stdout, "%s: the summary does not list %s as %s:\n%s"
              % (tag, name, descr, r.stdout))
    if kind == "bf16":
        for a, n in zip(got[:2], ("ATTN", "SCORES")):
            low = a.astype(np.float32).view(np.uint32) & 0xFFFF
            check(not low.any(), "%s: %s holds float32 values that are not bfloat16's" % (tag, n))
    # 2. The same in the files' own type on the files as read: float64, or float32 (for float16
    # files too: the report's reference is float, not half).
    exact_dtype = "float64" if dt == np.float64 else "float32"
    write_inputs(ctx, "own", files(q, k, v, m, s, z))
    ctx.run_ok(run_args("own", extra + ["--compute", "double" if exact_dtype == "float64" else "float"], bias,
                        alibi, sinks))
    exact_descr = "<f8" if exact_dtype == "float64" else "<f4"
    own = outputs(ctx, "own", exact_descr, exact_descr, shapes)
    # 3. float on the inputs rounded by NumPy.
    rq, rk, rv = (rounded(a, kind) for a in (q, k, v))
    rm = rounded(m, kind) if bias else None
    rs = rounded(s, kind) if alibi else None
    rz = rounded(z, kind) if sinks else None
    write_inputs(ctx, "rounded", files(rq, rk, rv, rm, rs, rz))
    ctx.run_ok(run_args("rounded", extra + ["--compute", "float"], bias, alibi, sinks))
    flt = outputs(ctx, "rounded", "<f4", "<f4", shapes)

    # The report, recomputed.
    want_rounding = max(max_diff(a, rounded(a, kind)) for a in (q, k, v))
    near(rounding, want_rounding, tag + ": max abs rounding")
    check(sorted(diffs) == ["ATTN", "LSE", "SCORES"], "%s: differences reported for %s" % (tag, sorted(diffs)))
    for i, name in enumerate(("ATTN", "SCORES", "LSE")):
        inputs, ref_type, on_rounded, largest = diffs[name]
        what = "%s: %s" % (tag, name)
        check(ref_type == exact_dtype, "%s: compared against %s, expected %s" % (what, ref_type, exact_dtype))
        for x in (inputs, on_rounded, largest):
            check(np.isfinite(x) and x >= 0, "%s: a reported number is %r" % (what, x))
        near(inputs, max_diff(got[i], own[i]), what + " against the inputs as read")
        near(on_rounded, max_diff(got[i], flt[i]), what + " against float on the rounded inputs")
        fin = np.isfinite(got[i].astype(np.float64))
        near(largest, float(np.abs(got[i].astype(np.float64)[fin]).max()), what + " max")
    # The kernel's own error is small: below 2^-7 of the largest |ATTN| (the rounding of the
    # outputs alone is at most 2^-8 of it for bfloat16, 2^-11 for half).
    bound = {"bf16": 2.0 ** -7, "half": 2.0 ** -10}[kind]
    for name in ("ATTN", "SCORES"):
        check(diffs[name][2] <= bound * diffs[name][3], "%s: %s differs from float on the rounded inputs by "
              "%.3e, more than %.3g of its largest %.3e" % (tag, name, diffs[name][2], bound, diffs[name][3]))
    # Bitwise: the 16-bit results are the float ones on the rounded inputs, rounded once (and
    # LSE, float in both, is the float LSE itself).
    for i, name in enumerate(("ATTN", "SCORES")):
        once = rounded(flt[i], kind)
        check(np.array_equal(got[i].astype(np.float32), once),
              "%s: %s is not the float result on the rounded inputs rounded once (max diff %.3e)"
              % (tag, name, max_diff(got[i], once)))
    check(np.array_equal(got[2], flt[2]), "%s: LSE differs from the float LSE on the rounded inputs" % tag)
    # Against NumPy in float64 on the rounded inputs: within one rounding (2^-8 or 2^-11
    # relative) plus float32 arithmetic (2e-5, as test_run_reference.py's float32).
    canon = lambda a: a.transpose(0, 2, 1, 3) if layout == "bthd" else a  # noqa: E731
    want = reference_attention(rq, rk, rv, causal="--causal" in extra,
                               align="bottom-right" if "bottom-right" in extra else "top-left",
                               bias=None if rm is None else rm.astype(np.float64),
                               alibi=None if rs is None else rs.astype(np.float64),
                               sinks=None if rz is None else rz.astype(np.float64))
    u = {"bf16": 2.0 ** -8, "half": 2.0 ** -11}[kind]
    for name, g, w, tol in (("ATTN", canon(got[0]), want[0], u), ("SCORES", got[1], want[1], u),
                            ("LSE", got[2], want[2], 0.0)):
        g = g.astype(np.float64)
        fin = np.isfinite(w)
        check(np.array_equal(np.isfinite(g), fin), "%s: %s infinities differ from the reference" % (tag, name))
        err = np.abs(g[fin] - w[fin])
        lim = tol * np.abs(w[fin]) + 2e-5 * (1 + np.abs(w[fin]))
        check((err <= lim).all(), "%s: %s differs from the float64 reference on the rounded inputs by %.3e "
              "(allowed %.3e there)" % (tag, name, err.max(), lim[np.argmax(err - lim)]))
    return diffs


@case
def bf16_of_float32(ctx):
    check_rounding_run(ctx, "bf16", "float32", "bhtd", seed=1)


@case
def bf16_of_float32_bthd_plain(ctx):
    check_rounding_run(ctx, "bf16", "float32", "bthd", seed=2, H=3, Hkv=3, bias=False, alibi=False, extra=())


@case
def bf16_of_float64(ctx):
    check_rounding_run(ctx, "bf16", "float64", "bhtd", seed=3, Tq=20, Tk=20, extra=("--causal",))


@case
def bf16_of_float16(ctx):
    check_rounding_run(ctx, "bf16", "float16", "bhtd", seed=4, bias=False)


@case
def half_of_float32(ctx):
    check_rounding_run(ctx, "half", "float32", "bthd", seed=5)


@case
def bf16_sinks_of_float64(ctx):
    # Sinks rounded to bfloat16 with the rest; T_q > T_k bottom-right: the first rows see only
    # the sink (zero ATTN, LSE = the rounded sink).
    check_rounding_run(ctx, "bf16", "float64", "bhtd", seed=9, Tq=13, Tk=9, sinks=True)


@case
def half_sinks_of_float32(ctx):
    check_rounding_run(ctx, "half", "float32", "bthd", seed=10, Tq=13, Tk=9, bias=False, sinks=True)


@case
def bf16_report_2d_and_quiet(ctx):
    # 2-D inputs, ATTN alone: one difference line (ATTN); --quiet prints nothing at all.
    import numpy as np
    rng = np.random.default_rng(6)
    for name, shape in (("Q.npy", (6, 8)), ("K.npy", (10, 8)), ("V.npy", (10, 4))):
        eacli.write_npy(ctx.path(name), rng.standard_normal(shape).astype(np.float32))
    args = ["run", "--q", "Q.npy", "--k", "K.npy", "--v", "V.npy", "--out", "ATTN.npy", "--compute", "bf16"]
    r = ctx.run_ok(args)
    typ, _, diffs = parse_report(r.stdout, "--compute bf16 of 2-D inputs")
    check(typ == "bfloat16" and sorted(diffs) == ["ATTN"], "--compute bf16, ATTN only: %r" % r.stdout)
    check(r.stdout.splitlines()[0] == "ATTN.npy: ATTN, float32 (6, 4)", "summary: %r" % r.stdout)
    a = eacli.read_output(ctx.path("ATTN.npy"), "<f4", (6, 4))
    check(diffs["ATTN"][2] <= 2.0 ** -7 * float(np.abs(a).max()), "kernel-only difference %r" % (diffs["ATTN"],))
    r = ctx.run_ok(args + ["--quiet"])
    check(r.stdout == "" and r.stderr == "", "--compute bf16 --quiet printed %r %r" % (r.stdout, r.stderr))


@case
def widening_is_exact(ctx):
    # float of float16 files and double of float32 ones: bitwise the run on files of the
    # widened values, in the wider dtype; no report. float of float64: the run on the values
    # rounded to float32 by NumPy.
    import numpy as np
    rng = np.random.default_rng(7)
    base = {"Q.npy": rng.standard_normal((2, 3, 7, 8)), "K.npy": rng.standard_normal((2, 3, 9, 8)),
            "V.npy": rng.standard_normal((2, 3, 9, 5)), "MASK.npy": rng.standard_normal((7, 9)),
            "SLOPES.npy": rng.uniform(0.1, 0.6, 3)}
    shapes = ((2, 3, 7, 5), (2, 3, 7, 9), (2, 3, 7))
    for file_dt, compute, same_dt, descr in (("float16", "float", "float32", "<f4"),
                                             ("float32", "double", "float64", "<f8"),
                                             ("float64", "float", "float32", "<f4")):
        tag = "--compute %s of %s" % (compute, file_dt)
        sub_a, sub_b = file_dt + "-" + compute, file_dt + "-" + compute + "-ref"
        files = {n: a.astype(file_dt) for n, a in base.items()}
        write_inputs(ctx, sub_a, files)
        write_inputs(ctx, sub_b, {n: a.astype(same_dt) for n, a in files.items()})
        r = ctx.run_ok(run_args(sub_a, ["--compute", compute, "--causal"], True, True))
        check("compute" not in r.stdout, "%s printed a report: %r" % (tag, r.stdout))
        ctx.run_ok(run_args(sub_b, ["--causal"], True, True))
        got = outputs(ctx, sub_a, descr, descr, shapes)
        want = outputs(ctx, sub_b, descr, descr, shapes)
        for g, w, n in zip(got, want, ("ATTN", "SCORES", "LSE")):
            check(np.array_equal(g, w), "%s: %s differs from the run on %s files" % (tag, n, same_dt))
    # The default of float16 files is half: --compute half changes nothing and reports nothing.
    write_inputs(ctx, "h", {n: a.astype("float16") for n, a in base.items()})
    r1 = ctx.run_ok(run_args("h", ["--compute", "half"], True, True))
    check("compute" not in r1.stdout, "--compute half of float16 printed a report: %r" % r1.stdout)
    a1 = outputs(ctx, "h", "<f2", "<f4", shapes)
    ctx.run_ok(run_args("h", [], True, True))
    a2 = outputs(ctx, "h", "<f2", "<f4", shapes)
    for g, w, n in zip(a1, a2, ("ATTN", "SCORES", "LSE")):
        check(np.array_equal(g, w), "--compute half of float16: %s differs from the default" % n)


@case
def compute_checks_options_in_its_type(ctx):
    # A scale that is 0 in float32 (1e-50) is refused for --compute bf16 and half of float64
    # files (computed in float32), naming --scale; accepted with --compute double.
    import numpy as np
    rng = np.random.default_rng(8)
    for name, shape in (("Q.npy", (5, 4)), ("K.npy", (6, 4)), ("V.npy", (6, 3))):
        eacli.write_npy(ctx.path(name), rng.standard_normal(shape))
    base = ["run", "--q", "Q.npy", "--k", "K.npy", "--v", "V.npy", "--out", "ATTN.npy", "--scale", "1e-50"]
    for kind in ("bf16", "half", "float"):
        before = ctx.files()
        r = ctx.run(base + ["--compute", kind])
        eacli.check_one_line_error(r, "--scale 1e-50 --compute " + kind, mentions=("--scale",))
        eacli.check_no_new_files(ctx, before, "--scale 1e-50 --compute " + kind)
    ctx.run_ok(base + ["--compute", "double", "--quiet"])


if __name__ == "__main__":
    sys.exit(eacli.main(sys.argv))
