#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The subcommands of `eigen-attention` as a user meets them: --help of each (exit 0, a usage
text naming the options of the specification), --version (the version of Version.hpp, the
license, the kernels this CPU can run), unknown options and subcommands (non-zero, one line),
`demo --quick` and `bench` (exit 0)."""

import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eacli  # noqa: E402
from eacli import case, check  # noqa: E402

RUN_OPTIONS = ["--q", "--k", "--v", "--out", "--scores", "--lse", "--causal", "--align", "--scale", "--mask",
               "--key-lengths", "--window", "--chunk-size", "--alibi", "--sinks", "--softcap", "--layout", "--threads",
               "--average-heads", "--heatmap", "--quiet", "--compute"]
HEATMAP_OPTIONS = ["--scores", "--batch", "--head", "--tokens", "--png"]


def check_help(ctx, args, must_mention, what):
    r = ctx.run_ok(args, timeout=20)
    text = r.stdout
    check("usage" in text.lower(), "%s: no usage text on stdout:\n%s" % (what, (text + r.stderr)[-2000:]))
    missing = [m for m in must_mention if m not in text]
    check(not missing, "%s: the help does not mention %s:\n%s" % (what, missing, text[-3000:]))
    return text


@case
def help_main(ctx):
    check_help(ctx, ["--help"], ["run", "heatmap", "demo", "bench"], "eigen-attention --help")


def source_version():
    """The version of include/EigenAttention/Version.hpp in this source tree."""
    header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include", "EigenAttention",
                          "Version.hpp")
    with open(header) as f:
        text = f.read()
    return ".".join(re.search(r"^#define EIGEN_ATTENTION_VERSION_%s (\d+)$" % part, text, re.M).group(1)
                    for part in ("MAJOR", "MINOR", "PATCH"))


@case
def version(ctx):
    r = ctx.run_ok(["--version"], timeout=20)
    lines = r.stdout.splitlines()
    what = "eigen-attention --version:\n%s" % r.stdout
    check(r.stderr == "", "%s\nwrote to stderr: %s" % (what, r.stderr))
    check(len(lines) == 3, "%s\nexpected three lines (version, license, kernels)" % what)
    check(lines[0] == "eigen-attention " + source_version(),
          "%s\nthe first line is not 'eigen-attention %s'" % (what, source_version()))
    check(lines[1].startswith("License: MIT"), "%s\nthe second line does not start 'License: MIT'" % what)
    m = re.match(r"^Kernels on this CPU: ([a-z0-9_]+(?:, [a-z0-9_]+)*) \(fastest first; auto takes ([a-z0-9_]+)\)$", lines[2])
    check(m is not None, "%s\nthe third line does not list the kernels" % what)
    kernels = m.group(1).split(", ")
    check(m.group(2) in kernels, "%s\nauto takes a kernel that is not listed" % what)
    # available_kernels(): the fastest first, always ending with portable then reference.
    check(kernels[-2:] == ["portable", "reference"], "%s\nthe kernels do not end with portable, reference" % what)
    check(len(set(kernels)) == len(kernels), "%s\na kernel is listed twice" % what)
    # An instruction-set kernel is listed only when the CPU has its instructions.
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(re.search(r"^flags\s*:(.*)$", f.read(), re.M).group(1).split())
    except (OSError, AttributeError):
        flags = None
    if flags is not None:
        for kernel, flag in (("avx2", "avx2"), ("avx512", "avx512f"), ("avx512bf16", "avx512_bf16"), ("amx", "amx_bf16")):
            check(kernel not in kernels or flag in flags, "%s\n%s is listed but the CPU has no %s" % (what, kernel, flag))
    check(ctx.files() == [], "--version wrote files: %s" % ctx.files())


@case
def help_run(ctx):
    text = check_help(ctx, ["run", "--help"], RUN_OPTIONS, "run --help")
    for word in ("top-left", "bottom-right", "bhtd", "bthd", "float16", "bf16", "half", "double"):
        check(word in text, "run --help does not mention %r" % word)
    check(ctx.files() == [], "run --help wrote files: %s" % ctx.files())


@case
def help_heatmap(ctx):
    check_help(ctx, ["heatmap", "--help"], HEATMAP_OPTIONS, "heatmap --help")


@case
def help_demo(ctx):
    check_help(ctx, ["demo", "--help"], ["--quick"], "demo --help")


@case
def help_bench(ctx):
    check_help(ctx, ["bench", "--help"], [], "bench --help")


def expect_one_line(ctx, args, what, mentions):
    before = ctx.files()
    r = ctx.run(args, timeout=20)
    eacli.check_one_line_error(r, what, mentions=mentions)
    eacli.check_no_new_files(ctx, before, what)


@case
def unknown_option(ctx):
    import numpy as np
    for n in ("Q.npy", "K.npy", "V.npy"):
        eacli.write_npy(ctx.path(n), np.ones((3, 2)))
    full = ["--q", "Q.npy", "--k", "K.npy", "--v", "V.npy", "--out", "ATTN.npy"]
    expect_one_line(ctx, ["run", "--bogus"] + full, "run --bogus", ["--bogus"])
    expect_one_line(ctx, ["run"] + full + ["--casual"], "run --casual (a typo)", ["--casual"])
    expect_one_line(ctx, ["run"] + full + ["stray"], "run with a stray positional argument", ["stray"])
    expect_one_line(ctx, ["heatmap", "--scores", "Q.npy", "--png", "x.png", "--bogus"], "heatmap --bogus", ["--bogus"])
    expect_one_line(ctx, ["demo", "--bogus"], "demo --bogus", ["--bogus"])
    expect_one_line(ctx, ["bench", "--bogus"], "bench --bogus", ["--bogus"])
    expect_one_line(ctx, ["--bogus"], "eigen-attention --bogus", ["--bogus"])


@case
def unknown_subcommand(ctx):
    expect_one_line(ctx, ["frobnicate"], "eigen-attention frobnicate", ["frobnicate"])


@case
def demo_quick(ctx):
    t = time.time()
    r = ctx.run_ok(["demo", "--quick"], timeout=60)
    check(r.stdout.strip() != "", "demo --quick printed nothing")
    check(time.time() - t < 30, "demo --quick took %.1f s" % (time.time() - t))


@case
def bench(ctx):
    # The benchmark's length is the tool's choice: use its quick flag when --help offers one;
    # without one, a run that needs more than 20 s is skipped rather than failed.
    help_text = ctx.run_ok(["bench", "--help"], timeout=20).stdout
    args = ["bench"]
    for flag in ("--quick", "--smoke"):
        if flag in help_text:
            args.append(flag)
            break
    limit = 60 if len(args) > 1 else 20
    try:
        r = ctx.run(args, timeout=limit)
    except eacli.Failure:
        if len(args) == 1:
            raise eacli.Skip("bench has no quick flag and runs longer than %d s" % limit)
        raise
    check(r.returncode == 0, "%s: exit status %d\nstderr: %s" % (" ".join(args), r.returncode, r.stderr[-2000:]))
    check(r.stdout.strip() != "", "%s printed nothing" % " ".join(args))


if __name__ == "__main__":
    sys.exit(eacli.main(sys.argv))
