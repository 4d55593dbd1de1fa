#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""`eigen-attention run --distributed ring|ulysses` under mpiexec (registered only when the tool
was built with MPI): the output files, written collectively by 1, 2 and 3 ranks (rank 0 the
header, every rank its rows), against the plain `run` on the same files, for causal and not,
contiguous and zigzag sharding, ring and Ulysses, 2-D and 4-D inputs (both layouts, GQA, uneven
and empty shards, T_q != T_k); then the errors: one line from rank 0, no output left behind.

The launcher is $EA_MPIEXEC (CMake passes MPIEXEC_EXECUTABLE), else `mpiexec` on the PATH; the
case is skipped when there is none. Open MPI gets --oversubscribe (more ranks than cores), and
--allow-run-as-root when the test runs as root. Every rank runs with --threads 1.

Tolerances, |distributed - plain| <= tol * (1 + |plain|) element by element (ATTN and LSE):
the distributed result is the plain one's exact attention, with the softmax of each row merged
from partial blocks by their log-sum-exps (ring) or computed whole (Ulysses): only the order of
the rounding differs, a few ulps of the compute type on these sizes (d <= 16, T <= 41).
- float64: 1e-12 (~4500 ulps: wide margin; a float32 computation would be ~1e-7 off).
- float32: 1e-5 (~170 ulps; a semantic difference, a wrong row or mask, is >= 1e-2 here).
- float16 files (computed in float32, ATTN written as float16 by both): 2^-10, two half ulps
  (each side rounds its float32 result once to half; the float32 results differ by ~1e-6).
Rows that see no key are exactly 0 in ATTN and -inf in LSE (with --sinks: the sink) in both.
"""

import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eacli  # noqa: E402
from eacli import case, check  # noqa: E402

TOL = {"float64": 1e-12, "float32": 1e-5, "float16": 2.0 ** -10}
RANKS = (1, 2, 3)


def launcher():
    """The mpiexec command prefix (a list), or raises Skip."""
    exe = os.environ.get("EA_MPIEXEC") or shutil.which("mpiexec") or shutil.which("mpirun")
    if not exe or not os.access(exe, os.X_OK):
        raise eacli.Skip("no mpiexec (set EA_MPIEXEC)")
    cmd = [exe]
    try:
        version = subprocess.run([exe, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 universal_newlines=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        version = ""
    if "Open MPI" in version or "OpenRTE" in version:
        cmd.append("--oversubscribe")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
    return cmd


def mpirun(ctx, ranks, args, timeout=60):
    """Runs the tool under mpiexec with `ranks` ranks; returns the CompletedProcess."""
    import shlex
    cmd = launcher() + ["-np", str(ranks), ctx.tool] + [str(a) for a in args]
    env = dict(os.environ)
    env["LC_ALL"] = "C"
    ctx.log.append("cd %s && %s" % (shlex.quote(ctx.dir), " ".join(shlex.quote(c) for c in cmd)))
    try:
        return subprocess.run(cmd, cwd=ctx.dir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=timeout, universal_newlines=True,
                              errors="replace")
    except subprocess.TimeoutExpired:
        raise eacli.Failure("timed out after %s s (a rank waiting forever?): %s" % (timeout, ctx.log[-1]))


def mpirun_ok(ctx, ranks, args):
    r = mpirun(ctx, ranks, args)
    check(r.returncode == 0, "exit status %d (expected 0)\nstdout: %s\nstderr: %s"
          % (r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
    return r


def compare(what, got, want, dtype):
    import numpy as np
    check(got.shape == want.shape, "%s: shape %r, expected %r" % (what, got.shape, want.shape))
    g, w = got.astype(np.float64), want.astype(np.float64)
    check(not np.isnan(g).any(), "%s: NaN in the distributed output" % what)
    inf = np.isinf(w)
    check(np.array_equal(np.isinf(g), inf) and np.array_equal(g[inf], w[inf]),
          "%s: infinities differ (rows that see no key must be -inf in LSE)" % what)
    err = np.abs(g[~inf] - w[~inf]) / (1.0 + np.abs(w[~inf]))
    worst = err.max() if err.size else 0.0
    check(worst <= TOL[dtype], "%s (%s): max scaled difference %.3g > %.3g" % (what, dtype, worst, TOL[dtype]))


def prefix_of(path):
    """The bytes of a .npy file before its data: magic, version, header length, header."""
    import struct
    with open(path, "rb") as f:
        raw = f.read(12)
        if raw[6] == 1:
            end = 10 + struct.unpack("<H", raw[8:10])[0]
        else:
            end = 12 + struct.unpack("<I", raw[8:12])[0]
        f.seek(0)
        return f.read(end)


def write_inputs(ctx, tag, layout, dtype, B=1, H=1, Hkv=None, Tq=37, Tk=None, dk=16, dv=8, seed=0):
    """Q, K, V files in `layout` (2d, bhtd, bthd); returns the file names."""
    import numpy as np
    rng = np.random.default_rng(seed)
    Hkv = H if Hkv is None else Hkv
    Tk = Tq if Tk is None else Tk
    names = []
    for name, heads, tokens, dim in (("Q", H, Tq, dk), ("K", Hkv, Tk, dk), ("V", Hkv, Tk, dv)):
        a = rng.standard_normal((B, heads, tokens, dim)).astype(dtype)
        if layout == "2d":
            a = a[0, 0]
        elif layout == "bthd":
            a = a.transpose(0, 2, 1, 3)
        path = "%s_%s.npy" % (tag, name)
        eacli.write_npy(ctx.path(path), a)
        names.append(path)
    return names


def check_distributed(ctx, tag, files, dtype, options, methods=("ring",), shardings=("contiguous",),
                      ranks=RANKS, lse=True):
    """The plain run, then every (method, sharding, ranks) distributed run, compared with it."""
    q, k, v = files
    base = ["run", "--q", q, "--k", k, "--v", v, "--threads", "1"] + list(options)
    plain = ["--out", tag + "_plain.npy"] + (["--lse", tag + "_plain_lse.npy"] if lse else [])
    ctx.run_ok(base + plain + ["--quiet"])
    descr = {"float64": "<f8", "float32": "<f4", "float16": "<f2"}[dtype]
    want, _, want_header = eacli.read_npy_strict(ctx.path(tag + "_plain.npy"))
    want_lse = eacli.read_npy_strict(ctx.path(tag + "_plain_lse.npy"))[0] if lse else None
    want_prefix = prefix_of(ctx.path(tag + "_plain.npy"))
    for method in methods:
        for sharding in shardings:
            for n in ranks:
                what = "%s %s --distributed %s --sharding %s, %d rank%s" % (
                    tag, " ".join(options), method, sharding, n, "" if n == 1 else "s")
                out, out_lse = tag + "_dist.npy", tag + "_dist_lse.npy"
                before = ctx.files()
                r = mpirun_ok(ctx, n, base + ["--out", out] + (["--lse", out_lse] if lse else []) +
                              ["--distributed", method, "--sharding", sharding])
                # Rank 0 alone reports: the files, then what ran.
                check(r.stdout.count("%s: ATTN, %s" % (out, {"<f8": "float64", "<f4": "float32",
                                                             "<f2": "float16"}[descr])) == 1,
                      "%s: the summary does not name %s once:\n%s" % (what, out, r.stdout))
                check(("%s attention on %d rank" % (method, n)) in r.stdout and sharding in r.stdout
                      and "visible pairs per rank" in r.stdout,
                      "%s: the summary does not say what ran:\n%s" % (what, r.stdout))
                eacli.check_only_outputs(ctx, before, [out] + ([out_lse] if lse else []), what)
                got, got_descr, header = eacli.read_npy_strict(ctx.path(out))
                check(got_descr == descr and header == want_header,
                      "%s: header %r, the plain run's %r" % (what, header, want_header))
                check(prefix_of(ctx.path(out)) == want_prefix,
                      "%s: the file's header bytes differ from the plain run's" % what)
                compare(what + ": ATTN", got, want, dtype)
                if lse:
                    compare(what + ": LSE", eacli.read_npy_strict(ctx.path(out_lse))[0], want_lse, dtype)
                os.remove(ctx.path(out))
                if lse:
                    os.remove(ctx.path(out_lse))


# --- ring ---------------------------------------------------------------------------------------

@case
def ring_2d(ctx):
    """One head, T = 37 (uneven shards), float32: not causal and causal, both shardings."""
    launcher()
    files = write_inputs(ctx, "a", "2d", "float32")
    for options in ([], ["--causal"]):
        check_distributed(ctx, "a", files, "float32", options, shardings=("contiguous", "zigzag"))


@case
def ring_4d_masks(ctx):
    """bhtd float64, 2 sequences, 4 query heads on 2 K/V heads (GQA), with a sliding window,
    ALiBi and key lengths (one sequence sees no key), computed at global positions."""
    import numpy as np
    launcher()
    files = write_inputs(ctx, "m", "bhtd", "float64", B=2, H=4, Hkv=2, Tq=29, dk=8, dv=8, seed=1)
    eacli.write_npy(ctx.path("lengths.npy"), np.array([23, 0], dtype=np.int64))
    eacli.write_npy(ctx.path("slopes.npy"), np.array([0.5, 0.25, 0.125, 0.0625], dtype=np.float64))
    options = ["--layout", "bhtd", "--causal", "--window", "7,0", "--alibi", "slopes.npy",
               "--key-lengths", "lengths.npy", "--softcap", "5"]
    check_distributed(ctx, "m", files, "float64", options, shardings=("contiguous", "zigzag"))


@case
def ring_cross_lengths(ctx):
    """T_q = 13 queries on T_k = 41 keys, causal aligned bottom-right, and one token per rank
    or none (T = 2 on 3 ranks)."""
    launcher()
    files = write_inputs(ctx, "x", "2d", "float64", Tq=13, Tk=41, seed=2)
    check_distributed(ctx, "x", files, "float64", ["--causal", "--align", "bottom-right"],
                      shardings=("contiguous", "zigzag"), ranks=(2, 3))
    files = write_inputs(ctx, "t", "2d", "float32", Tq=2, seed=3)
    check_distributed(ctx, "t", files, "float32", ["--causal"], shardings=("contiguous", "zigzag"),
                      ranks=(3,))


@case
def ring_float16(ctx):
    """float16 files: computed in float32, ATTN written as float16 (LSE float32), as the plain run."""
    launcher()
    files = write_inputs(ctx, "h", "2d", "float16", Tq=31, seed=4)
    check_distributed(ctx, "h", files, "float16", ["--causal"], lse=False, ranks=(2, 3))


# --- ulysses ------------------------------------------------------------------------------------

@case
def ulysses_bthd(ctx):
    """[1, T, 6, d] (bthd) float32, 6 query heads on 3 K/V heads: every rank count divides 6."""
    launcher()
    files = write_inputs(ctx, "u", "bthd", "float32", H=6, Hkv=3, Tq=35, seed=5)
    for options in (["--layout", "bthd"], ["--layout", "bthd", "--causal"]):
        check_distributed(ctx, "u", files, "float32", options, methods=("ulysses",),
                          shardings=("contiguous", "zigzag"))


@case
def ulysses_bhtd(ctx):
    """bhtd float64, 2 sequences of 6 heads, causal, with the ring on the same files."""
    launcher()
    files = write_inputs(ctx, "w", "bhtd", "float64", B=2, H=6, Tq=23, dk=8, dv=4, seed=6)
    check_distributed(ctx, "w", files, "float64", ["--causal"], methods=("ulysses", "ring"),
                      shardings=("zigzag",))


# --- sinks --------------------------------------------------------------------------------------

@case
def sinks(ctx):
    """--sinks (one logit per query head, joined once to each row's softmax): bhtd float64, 4
    query heads on 2 K/V heads, T_q = 17 on T_k = 11 causal bottom-right, so that the first rows
    see only the sink (ATTN 0, LSE = the sink); ring on 3 ranks (uneven shards), Ulysses on 2.
    float16 files with float16 sinks, ring on 2 ranks. A wrong number of sinks fails on every
    rank."""
    import numpy as np
    launcher()
    files = q, k, v = write_inputs(ctx, "s", "bhtd", "float64", B=2, H=4, Hkv=2, Tq=17, Tk=11, dk=8, dv=8,
                                   seed=7)
    eacli.write_npy(ctx.path("sinks.npy"), np.array([0.5, -1.0, 2.0, 0.0], dtype=np.float64))
    options = ["--layout", "bhtd", "--causal", "--align", "bottom-right", "--sinks", "sinks.npy"]
    check_distributed(ctx, "s", files, "float64", options, shardings=("contiguous", "zigzag"), ranks=(3,))
    check_distributed(ctx, "s", files, "float64", options, methods=("ulysses",), ranks=(2,))
    lse = eacli.read_npy_strict(ctx.path("s_plain_lse.npy"))[0]
    check(np.array_equal(lse[:, :, 0], np.broadcast_to([0.5, -1.0, 2.0, 0.0], (2, 4))),
          "sinks: the LSE of the rows that see no key is not the sink: %r" % lse[:, :, 0])
    files = write_inputs(ctx, "h", "2d", "float16", Tq=23, Tk=15, seed=8)
    eacli.write_npy(ctx.path("sink_h.npy"), np.array([1.25], dtype=np.float16))
    check_distributed(ctx, "h", files, "float16", ["--causal", "--align", "bottom-right", "--sinks", "sink_h.npy"],
                      lse=False, ranks=(2,))
    eacli.write_npy(ctx.path("sinks_3.npy"), np.array([0.5, -1.0, 2.0], dtype=np.float64))
    expect_error(ctx, 2, ["run", "--q", q, "--k", k, "--v", v, "--out", "o.npy", "--sinks", "sinks_3.npy",
                          "--distributed", "ring"], "3 sinks for 4 heads",
                 mentions=("sinks_3.npy", "(4,)", "per query head"))


# --- errors -------------------------------------------------------------------------------------

def expect_error(ctx, ranks, args, what, mentions=(), any_of=()):
    """A failure on every rank: non-zero exit, one line from the tool (rank 0's: mpiexec may add
    its own lines), no output and no temporary file left behind, and no rank waiting forever."""
    before = ctx.files()
    r = mpirun(ctx, ranks, args)
    check(r.returncode != 0, "%s: exit status 0, expected a failure\nstdout: %s" % (what, r.stdout[-1000:]))
    lines = [line for line in r.stderr.splitlines() if line.startswith(eacli.ERROR_PREFIX)]
    check(len(lines) == 1, "%s: expected one line from the tool (rank 0), got %d:\n%s"
          % (what, len(lines), r.stderr[-2000:]))
    low = lines[0].lower()
    for m in mentions:
        check(m.lower() in low, "%s: the error %r does not mention %r" % (what, lines[0], m))
    if any_of:
        check(any(a.lower() in low for a in any_of), "%s: the error %r mentions none of %r"
              % (what, lines[0], list(any_of)))
    eacli.check_no_new_files(ctx, before, what)


@case
def errors(ctx):
    """Errors found on every rank alike: by the library (Ulysses with 1 head on 2 ranks), by the
    tool's checks (a truncated Q, Fortran order, a mask, a bad --sharding), and an output that
    cannot be created (rank 0's)."""
    import numpy as np
    launcher()
    q, k, v = write_inputs(ctx, "e", "2d", "float32", Tq=9)
    base = ["run", "--q", q, "--k", k, "--v", v, "--threads", "1"]
    expect_error(ctx, 2, base + ["--out", "o.npy", "--distributed", "ulysses"],
                 "ulysses with 1 head on 2 ranks", mentions=("ranks",), any_of=("divisible", "divide"))
    with open(ctx.path(q), "rb") as f:
        raw = f.read()
    eacli.write_raw(ctx.path("short.npy"), raw[:-4])
    expect_error(ctx, 3, ["run", "--q", "short.npy", "--k", k, "--v", v, "--out", "o.npy",
                          "--distributed", "ring"], "truncated Q", mentions=("short.npy",),
                 any_of=("truncat",))
    eacli.write_raw(ctx.path("fortran.npy"), eacli.npy_bytes("<f4", (9, 16), np.load(ctx.path(q)).T.tobytes(),
                                                             fortran=True))
    expect_error(ctx, 2, ["run", "--q", "fortran.npy", "--k", k, "--v", v, "--out", "o.npy",
                          "--distributed", "ring"], "Fortran-order Q", mentions=("fortran.npy", "fortran"))
    expect_error(ctx, 2, base + ["--out", "o.npy", "--mask", q, "--distributed", "ring"], "--mask",
                 mentions=("--mask", "--distributed"))
    expect_error(ctx, 2, base + ["--out", "no/such/dir/o.npy", "--distributed", "ring"],
                 "unwritable output", mentions=("o.npy",))
    expect_error(ctx, 2, base + ["--out", "o.npy", "--distributed", "ring", "--sharding", "stripes"],
                 "bad --sharding", mentions=("--sharding", "stripes"))


if __name__ == "__main__":
    sys.exit(eacli.main(sys.argv))
