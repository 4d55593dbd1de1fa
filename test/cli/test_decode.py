#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""`eigen-attention decode`, the synthetic generation loop on a paged KV cache: its help, tiny runs
of every storage type and of the smallest and largest page size (exit 0, the report's lines and
their numbers consistent with the options), and bad options (exit 2, one line naming the option,
no file written)."""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eacli  # noqa: E402
from eacli import case, check  # noqa: E402

DECODE_OPTIONS = ["--sequences", "--heads", "--kv-heads", "--dim", "--prompt", "--generate", "--page-size",
                  "--storage", "--threads"]
TINY = ["--sequences", "3", "--heads", "4", "--kv-heads", "2", "--dim", "16", "--prompt", "5,40", "--generate", "6",
        "--threads", "1"]
NUMBER = r"([0-9]+(?:\.[0-9]+)?)"


@case
def help_decode(ctx):
    r = ctx.run_ok(["decode", "--help"], timeout=20)
    check("usage" in r.stdout.lower(), "decode --help: no usage text:\n%s" % r.stdout[-2000:])
    missing = [o for o in DECODE_OPTIONS if o not in r.stdout]
    check(not missing, "decode --help does not mention %s" % missing)
    for word in ("float", "bf16", "half", "tokens/s", "GB/s"):
        check(word in r.stdout, "decode --help does not mention %r" % word)
    main = ctx.run_ok(["--help"], timeout=20)
    check(re.search(r"^\s+decode\s", main.stdout, re.M), "eigen-attention --help does not list decode")


def check_report(r, what, sequences, generate, prompt_min, prompt_max, storage, page):
    """The report of a successful run: its five lines, their numbers consistent with the options."""
    out = r.stdout
    head = re.search(r"^eigen-attention decode: (\d+) sequences, H = (\d+), H_kv = (\d+), d = (\d+), (\w+) storage, "
                     r"page size (\d+), (\d+) threads? \(kernel \w+\)$", out, re.M)
    check(head, "%s: no header line:\n%s" % (what, out))
    check(int(head.group(1)) == sequences, "%s: header says %s sequences" % (what, head.group(1)))
    check(head.group(5) == storage, "%s: header says %s storage, expected %s" % (what, head.group(5), storage))
    check(int(head.group(6)) == page, "%s: header says page size %s" % (what, head.group(6)))
    prompts = re.search(r"^prompts: +(\d+) tokens appended in %s s \(lengths ([0-9, ]+);" % NUMBER, out, re.M)
    check(prompts, "%s: no prompts line:\n%s" % (what, out))
    lengths = [int(x) for x in prompts.group(3).split(",")]
    check(len(lengths) == sequences, "%s: %d prompt lengths for %d sequences" % (what, len(lengths), sequences))
    check(all(prompt_min <= n <= prompt_max for n in lengths),
          "%s: prompt lengths %s outside %d..%d" % (what, lengths, prompt_min, prompt_max))
    check(int(prompts.group(1)) == sum(lengths), "%s: %s prompt tokens, lengths sum to %d"
          % (what, prompts.group(1), sum(lengths)))
    gen = re.search(r"^generated: (\d+) tokens \((\d+) steps of (\d+)\) in %s s: %s tokens/s$" % (NUMBER, NUMBER),
                    out, re.M)
    check(gen, "%s: no 'generated:' line:\n%s" % (what, out))
    check(int(gen.group(1)) == sequences * generate and int(gen.group(2)) == generate
          and int(gen.group(3)) == sequences, "%s: %r" % (what, gen.group(0)))
    check(float(gen.group(5)) > 0, "%s: tokens/s is %s" % (what, gen.group(5)))
    dec = re.search(r"^decode: +%s ms/step \(median\), %s GB/s \(%s MiB read per step on average\)$"
                    % (NUMBER, NUMBER, NUMBER), out, re.M)
    check(dec, "%s: no 'decode:' line:\n%s" % (what, out))
    check(float(dec.group(2)) > 0, "%s: GB/s is %s" % (what, dec.group(2)))
    app = re.search(r"^append: +%s ms/step \(median, (\d+) one-token appends\)$" % NUMBER, out, re.M)
    check(app and int(app.group(2)) == sequences, "%s: no or a wrong 'append:' line:\n%s" % (what, out))
    check(r.stderr == "", "%s: wrote to stderr: %s" % (what, r.stderr[-1000:]))
    check(r.returncode == 0, "%s: exit status %d" % (what, r.returncode))


@case
def decode_tiny(ctx):
    for storage, name, pages in (("float", "float32", (16, 256)), ("bf16", "bfloat16", (16, 256)),
                                 ("half", "float16", (16, 256)), ("int8", "int8", (16,)),
                                 ("e4m3", "float8_e4m3fn", (32,)), ("e5m2", "float8_e5m2", (64,))):
        for page in pages:
            args = ["decode"] + TINY + ["--storage", storage, "--page-size", str(page)]
            r = ctx.run_ok(args, timeout=60)
            check_report(r, " ".join(args), 3, 6, 5, 40, name, page)
    check(ctx.files() == [], "decode wrote files: %s" % ctx.files())


@case
def decode_prompt_one_length_and_threads(ctx):
    args = ["decode", "--sequences", "2", "--heads", "8", "--kv-heads", "8", "--dim", "8", "--prompt", "17",
            "--generate", "3", "--threads", "0"]
    r = ctx.run_ok(args, timeout=60)
    check_report(r, " ".join(args), 2, 3, 17, 17, "float32", 16)


def expect_usage_error(ctx, args, what, mentions):
    before = ctx.files()
    r = ctx.run(["decode"] + args, timeout=20)
    eacli.check_one_line_error(r, what, mentions=mentions)
    check(r.returncode == 2, "%s: exit status %d, expected 2 (a bad command line)" % (what, r.returncode))
    check(r.stdout == "", "%s: printed on stdout before failing: %s" % (what, r.stdout[-1000:]))
    eacli.check_no_new_files(ctx, before, what)


@case
def decode_bad_options(ctx):
    bad = [
        (["--page-size", "24"], ["--page-size", "power of two"]),
        (["--page-size", "512"], ["--page-size"]),
        (["--storage", "fp8"], ["--storage", "fp8"]),
        (["--heads", "32", "--kv-heads", "5"], ["--kv-heads"]),
        (["--prompt", "100,10"], ["--prompt"]),
        (["--prompt", "1,2,3"], ["--prompt"]),
        (["--prompt", "0"], ["--prompt"]),
        (["--sequences", "0"], ["--sequences"]),
        (["--sequences", "many"], ["--sequences", "many"]),
        (["--generate", "-3"], ["--generate"]),
        (["--dim", "1.5"], ["--dim"]),
        (["--threads", "-1"], ["--threads"]),
        (["--generate"], ["--generate"]),
        (["--bogus"], ["--bogus"]),
        (["stray"], ["stray"]),
    ]
    for args, mentions in bad:
        expect_usage_error(ctx, args, "decode " + " ".join(args), mentions)


@case
def decode_too_large(ctx):
    # More cache than any machine holds: refused before any work, exit 1, one line.
    args = ["decode", "--sequences", "65536", "--prompt", "16777216", "--dim", "65536"]
    r = ctx.run(args, timeout=20)
    eacli.check_one_line_error(r, " ".join(args), any_of=["GiB", "memory"])
    check(r.returncode == 1, "%s: exit status %d, expected 1" % (" ".join(args), r.returncode))


if __name__ == "__main__":
    sys.exit(eacli.main(sys.argv))
