#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The heatmaps of `eigen-attention heatmap` and `eigen-attention run --heatmap`, decoded with
pngread.py (zlib only) and checked: a valid PNG (signature, CRCs, chunk order, the scanlines'
filters), at least T_k x T_q pixels (keys along x: a wide matrix gives a wide image), several
distinct colours, and both dark and bright pixels.

The decoder itself is checked first, against images this script encodes with every filter
type, colour type and bit depth (decoder_selftest), so that a failure below is the tool's.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eacli  # noqa: E402
import pngread  # noqa: E402
from eacli import case, check  # noqa: E402

MAX_SIDE = 16384


def luma(p):
    return 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2]


def check_heatmap(path, tq, tk, what, wide=None):
    """Decodes the PNG at `path` and checks it as a heatmap of a T_q x T_k matrix whose values
    span their range. Returns the Image."""
    check(os.path.isfile(path), "%s: %s was not written" % (what, os.path.basename(path)))
    with open(path, "rb") as f:
        data = f.read()
    try:
        img = pngread.decode(data)
    except pngread.PNGError as e:
        raise eacli.Failure("%s: not a valid PNG: %s" % (what, e))
    check(tk <= img.width <= MAX_SIDE and tq <= img.height <= MAX_SIDE,
          "%s: %dx%d pixels for a %dx%d (T_q x T_k) matrix" % (what, img.width, img.height, tq, tk))
    if wide is not None:
        check((img.width > img.height) == wide,
              "%s: %dx%d pixels for a %dx%d matrix: keys should run along x" % (what, img.width, img.height, tq, tk))
    colours = set(p[:3] for p in img.pixels())
    check(len(colours) >= 8, "%s: only %d distinct colours: %s" % (what, len(colours), sorted(colours)[:10]))
    lum = [luma(p) for p in colours]
    check(min(lum) < 64, "%s: no dark pixel (darkest luma %.1f)" % (what, min(lum)))
    check(max(lum) > 192, "%s: no bright pixel (brightest luma %.1f)" % (what, max(lum)))
    return img


def gradient(tq, tk, phase=0.0):
    """A T_q x T_k matrix spanning [0, 1] with structure along both axes."""
    import numpy as np
    i = np.arange(tq)[:, None] / max(tq - 1, 1)
    j = np.arange(tk)[None, :] / max(tk - 1, 1)
    return (0.5 * j + 0.5 * np.abs(np.sin(3.0 * i + phase))) / 1.0


# --- the decoder ----------------------------------------------------------------------------------

@case
def decoder_selftest(ctx):
    import random
    rnd = random.Random(7)
    n = 0
    for ctype, (samples, depths) in sorted(pngread.COLOUR_TYPES.items()):
        for depth in depths:
            for width, height in ((1, 1), (7, 5), (13, 9)):
                for interlace in (0, 1):
                    top = (1 << depth) - 1
                    palette = None
                    if ctype == 3:
                        palette = [(rnd.randrange(256), rnd.randrange(256), rnd.randrange(256))
                                   for _ in range(1 << depth)]
                    rows = [[rnd.randint(0, top) for _ in range(width * samples)] for _ in range(height)]
                    data = pngread.encode(rows, width, depth, ctype, palette=palette, interlace=interlace,
                                          chunk_split=7 if (width + height) % 2 else None)
                    img = pngread.decode(data)
                    check((img.width, img.height, img.bit_depth, img.colour_type) == (width, height, depth, ctype),
                          "selftest: IHDR read back wrong")
                    hi = (lambda c: c >> 8) if depth == 16 else (lambda c: c * 255 // top)
                    for y in range(height):
                        for x in range(width):
                            s = rows[y][x * samples:(x + 1) * samples]
                            if ctype == 0:
                                want = (hi(s[0]),) * 3 + (255,)
                            elif ctype == 2:
                                want = tuple(hi(c) for c in s) + (255,)
                            elif ctype == 3:
                                want = palette[s[0]] + (255,)
                            elif ctype == 4:
                                want = (hi(s[0]),) * 3 + (hi(s[1]),)
                            else:
                                want = tuple(hi(c) for c in s)
                            check(img.rows[y][x] == want, "selftest: colour type %d depth %d %dx%d interlace %d: "
                                  "pixel (%d, %d) %r != %r" % (ctype, depth, width, height, interlace, x, y,
                                                              img.rows[y][x], want))
                    n += 1
    # Every filter type on a wide RGB image, each filter alone.
    rows = [[rnd.randrange(256) for _ in range(3 * 40)] for _ in range(6)]
    for f in range(5):
        img = pngread.decode(pngread.encode(rows, 40, 8, 2, filters=(f,)))
        check([list(sum((p[:3] for p in r), ())) for r in img.rows] == rows, "selftest: filter %d alone" % f)
    # Corruption is detected.
    good = pngread.encode(rows, 40, 8, 2)
    for bad, what in ((good[:-5], "truncated"), (good[:30] + bytes([good[30] ^ 1]) + good[31:], "bit flip"),
                      (b"\x89PNG\r\n\x1a\x0a"[:7] + b"x" + good[8:], "signature"), (good + b"\0", "trailing byte")):
        try:
            pngread.decode(bad)
        except pngread.PNGError:
            continue
        raise eacli.Failure("selftest: a %s PNG was accepted" % what)
    check(n > 50, "selftest ran only %d images" % n)


# --- the heatmap subcommand -----------------------------------------------------------------------

@case
def heatmap_2d(ctx):
    import numpy as np
    # Wide (keys along x) and tall matrices, float64 and float32.
    eacli.write_npy(ctx.path("wide.npy"), gradient(12, 60))
    ctx.run_ok(["heatmap", "--scores", "wide.npy", "--png", "wide.png"])
    check_heatmap(ctx.path("wide.png"), 12, 60, "heatmap of a 12x60 matrix", wide=True)
    eacli.write_npy(ctx.path("tall.npy"), gradient(50, 10).astype(np.float32))
    ctx.run_ok(["heatmap", "--scores", "tall.npy", "--png", "tall.png"])
    check_heatmap(ctx.path("tall.png"), 50, 10, "heatmap of a 50x10 float32 matrix", wide=False)
    check(sorted(ctx.files()) == ["tall.npy", "tall.png", "wide.npy", "wide.png"],
          "heatmap: unexpected files %s" % ctx.files())


@case
def heatmap_4d_selection(ctx):
    import numpy as np
    # [B=2, H=3, 10, 14]: every slice different. --batch 1 --head 2 must draw exactly what the
    # 2-D file of that slice draws, and differ from another slice.
    s = np.stack([np.stack([gradient(10, 14, phase=0.7 * (3 * b + h)) ** (1 + h) for h in range(3)])
                  for b in range(2)])
    eacli.write_npy(ctx.path("S4.npy"), s)
    eacli.write_npy(ctx.path("S12.npy"), s[1, 2])
    ctx.run_ok(["heatmap", "--scores", "S4.npy", "--batch", "1", "--head", "2", "--png", "b1h2.png"])
    ctx.run_ok(["heatmap", "--scores", "S12.npy", "--png", "slice.png"])
    ctx.run_ok(["heatmap", "--scores", "S4.npy", "--batch", "0", "--head", "1", "--png", "b0h1.png"])
    a = check_heatmap(ctx.path("b1h2.png"), 10, 14, "heatmap --batch 1 --head 2")
    b = check_heatmap(ctx.path("slice.png"), 10, 14, "heatmap of the 2-D slice [1, 2]")
    c = check_heatmap(ctx.path("b0h1.png"), 10, 14, "heatmap --batch 0 --head 1")
    # A title naming the file and the slice may differ: compare below the top 15 %.
    check((a.width, a.height) == (b.width, b.height), "heatmap --batch 1 --head 2 is %dx%d, that of the slice "
          "S[1, 2] itself %dx%d" % (a.width, a.height, b.width, b.height))
    top = a.height * 15 // 100
    diff = [y for y in range(top, a.height) if a.rows[y] != b.rows[y]]
    check(not diff, "heatmap --batch 1 --head 2 differs from that of the slice S[1, 2] itself below the title, "
          "in rows %d..%d" % (diff[0], diff[-1]) if diff else "")
    check((c.width, c.height) != (a.width, a.height) or a.rows[top:] != c.rows[top:],
          "heatmaps of slices [1, 2] and [0, 1] are identical")


@case
def heatmap_tokens(ctx):
    import numpy as np
    toks = ["The", "cat", "sat", "on", "the", "mat", ".", "<eos>"]
    with open(ctx.path("tokens.txt"), "w") as f:
        f.write("\n".join(toks) + "\n")
    w = np.tril(gradient(8, 8) + 0.05)
    w /= w.sum(axis=1, keepdims=True)
    eacli.write_npy(ctx.path("S.npy"), w)
    ctx.run_ok(["heatmap", "--scores", "S.npy", "--tokens", "tokens.txt", "--png", "tok.png"])
    ctx.run_ok(["heatmap", "--scores", "S.npy", "--png", "plain.png"])
    t = check_heatmap(ctx.path("tok.png"), 8, 8, "heatmap with --tokens")
    p = check_heatmap(ctx.path("plain.png"), 8, 8, "heatmap without --tokens")
    check(t.rows != p.rows, "--tokens changed nothing in the image")


@case
def heatmap_log_scale(ctx):
    # Diffuse weights (1e-4 .. 1e-2 with one weight near 1 per row): on the linear scale all but
    # the peaks are at the dark end; --scale log spreads them over the colour map. --scale linear
    # is the default, byte for byte; masked zeros keep their colour on both scales.
    import numpy as np
    rng = np.random.default_rng(11)
    T = 24
    w = 10.0 ** rng.uniform(-4, -2, (T, T))
    w[np.arange(T), np.arange(T)] = 0.9
    w[np.triu_indices(T, 1)] = 0.0
    eacli.write_npy(ctx.path("S.npy"), w)
    ctx.run_ok(["heatmap", "--scores", "S.npy", "--png", "default.png"])
    ctx.run_ok(["heatmap", "--scores", "S.npy", "--scale", "linear", "--png", "linear.png"])
    ctx.run_ok(["heatmap", "--scores", "S.npy", "--scale", "log", "--png", "log.png"])
    with open(ctx.path("default.png"), "rb") as f, open(ctx.path("linear.png"), "rb") as g:
        check(f.read() == g.read(), "heatmap --scale linear differs from the default")
    lin = check_heatmap(ctx.path("linear.png"), T, T, "heatmap --scale linear")
    log = check_heatmap(ctx.path("log.png"), T, T, "heatmap --scale log")
    masked = (16, 16, 16)

    def cells(img):
        """Colours (and their count) of the pixels that are neither grey (text, frame, white) nor
        on the colour bar: the cells, and the legend's swatches."""
        return [p[:3] for p in img.pixels() if len(set(p[:3])) > 1]

    # (The colour bar is the same gradient in both: the difference is the cells.)
    dark = [p for p in cells(log) if luma(p) < 40]
    dark_lin = [p for p in cells(lin) if luma(p) < 40]
    check(2 * len(dark) < len(dark_lin), "--scale log: %d dark pixels, linear %d" % (len(dark), len(dark_lin)))
    check(masked in set(p[:3] for p in log.pixels()), "--scale log: no masked (near-black) cell")


# --- run --heatmap --------------------------------------------------------------------------------

@case
def run_heatmap(ctx):
    import numpy as np
    rng = np.random.default_rng(3)
    for name, shape in (("Q.npy", (16, 8)), ("K.npy", (16, 8)), ("V.npy", (16, 8))):
        eacli.write_npy(ctx.path(name), rng.standard_normal(shape))
    ctx.run_ok(["run", "--q", "Q.npy", "--k", "K.npy", "--v", "V.npy", "--out", "ATTN.npy", "--causal",
                "--heatmap", "causal.png"])
    check_heatmap(ctx.path("causal.png"), 16, 16, "run --causal --heatmap (2-D)")
    # A wide one (T_q 6, T_k 40) from float32 4-D inputs with scores too.
    for name, shape in (("Q4.npy", (1, 2, 6, 8)), ("K4.npy", (1, 1, 40, 8)), ("V4.npy", (1, 1, 40, 8))):
        eacli.write_npy(ctx.path(name), (3 * rng.standard_normal(shape)).astype(np.float32))
    ctx.run_ok(["run", "--q", "Q4.npy", "--k", "K4.npy", "--v", "V4.npy", "--out", "ATTN4.npy", "--scores",
                "S4.npy", "--causal", "--align", "bottom-right", "--heatmap", "wide.png"])
    check_heatmap(ctx.path("wide.png"), 6, 40, "run --heatmap (4-D, 6x40)", wide=True)
    check(sorted(ctx.files()) == sorted(["Q.npy", "K.npy", "V.npy", "ATTN.npy", "causal.png", "Q4.npy", "K4.npy",
                                         "V4.npy", "ATTN4.npy", "S4.npy", "wide.png"]),
          "run --heatmap: unexpected files %s" % ctx.files())


def same_below_title(a, b, what):
    """The images `a` and `b` are the same size and identical below their top 15 % (where a
    title naming the file or the slice may differ)."""
    check((a.width, a.height) == (b.width, b.height), "%s: %dx%d pixels, expected %dx%d"
          % (what, a.width, a.height, b.width, b.height))
    top = a.height * 15 // 100
    diff = [y for y in range(top, a.height) if a.rows[y] != b.rows[y]]
    check(not diff, "%s: differs below the title in rows %d..%d" % (what, diff[0], diff[-1]) if diff else "")


@case
def run_scores_any_layout(ctx):
    # Per-head SCORES have one meaning, [B, H, T_q, T_k], whatever --layout the run had: `heatmap
    # --batch b --head h` on the file of a bthd run, without --layout, draws the T_q x T_k weights
    # of that head (the slice S[b, h]), as `run --heatmap` itself does. `heatmap --layout bthd`
    # still reads a [B, T_q, H, T_k] file (one made elsewhere).
    import numpy as np
    B, T, H, D = 2, 40, 8, 16
    rng = np.random.default_rng(9)
    for name in ("Q.npy", "K.npy", "V.npy"):
        eacli.write_npy(ctx.path(name), 2 * rng.standard_normal((B, T, H, D)))  # bthd
    ctx.run_ok(["run", "--q", "Q.npy", "--k", "K.npy", "--v", "V.npy", "--layout", "bthd", "--causal",
                "--out", "ATTN.npy", "--scores", "S.npy", "--heatmap", "run.png", "--batch", "1", "--head", "5"])
    s = eacli.read_output(ctx.path("S.npy"), "<f8", (B, H, T, T))
    # S[b, h] is head h's causal weights: lower-triangular rows summing to 1.
    check(np.allclose(s.sum(axis=3), 1.0) and not np.triu(s, 1).any(),
          "S.npy of a bthd run: S[b, h] are not causal weight matrices")
    eacli.write_npy(ctx.path("S15.npy"), s[1, 5])
    ctx.run_ok(["heatmap", "--scores", "S15.npy", "--png", "slice.png"])
    r = ctx.run_ok(["heatmap", "--scores", "S.npy", "--batch", "1", "--head", "5", "--png", "b1h5.png"])
    check("(%d x %d)" % (T, T) in r.stdout, "heatmap --head 5 of a bthd run's SCORES: %r, expected %d x %d"
          % (r.stdout.strip(), T, T))
    want = check_heatmap(ctx.path("slice.png"), T, T, "heatmap of the slice S[1, 5]")
    same_below_title(check_heatmap(ctx.path("b1h5.png"), T, T, "heatmap --batch 1 --head 5"), want,
                     "heatmap --batch 1 --head 5 of a bthd run's SCORES vs the slice S[1, 5]")
    same_below_title(check_heatmap(ctx.path("run.png"), T, T, "run --layout bthd --heatmap --head 5"), want,
                     "run --layout bthd --heatmap --batch 1 --head 5 vs the slice S[1, 5]")
    # A [B, T_q, H, T_k] file, drawn with --layout bthd, and --layout bhtd (the default) given.
    eacli.write_npy(ctx.path("S_bthd.npy"), s.transpose(0, 2, 1, 3))
    ctx.run_ok(["heatmap", "--scores", "S_bthd.npy", "--layout", "bthd", "--batch", "1", "--head", "5",
                "--png", "bthd.png"])
    same_below_title(check_heatmap(ctx.path("bthd.png"), T, T, "heatmap --layout bthd"), want,
                     "heatmap --layout bthd of a [B, T_q, H, T_k] file vs the slice S[1, 5]")
    ctx.run_ok(["heatmap", "--scores", "S.npy", "--layout", "bhtd", "--batch", "1", "--head", "5",
                "--png", "bhtd.png"])
    same_below_title(check_heatmap(ctx.path("bhtd.png"), T, T, "heatmap --layout bhtd"), want,
                     "heatmap --layout bhtd vs the slice S[1, 5]")


@case
def heatmap_float16(ctx):
    # A float16 SCORES file ('<f2') is drawn as its values widened (exactly) to float32 are: the
    # same image, bit for bit (both files named S.npy, in two directories, for the same title),
    # for a 2-D and a 4-D file; and `run --heatmap` of float16 inputs draws the float16 weights
    # it writes to --scores.
    import numpy as np
    s = np.stack([np.stack([gradient(9, 13, phase=0.5 * (2 * b + h)) ** (1 + h) for h in range(2)])
                  for b in range(2)]).astype(np.float16)
    for sub, a in (("half", s), ("float", s.astype(np.float32))):
        os.makedirs(ctx.path(sub))
        eacli.write_npy(ctx.path(sub + "/S.npy"), a)
        eacli.write_npy(ctx.path(sub + "/S2.npy"), a[1, 0])
        ctx.run_ok(["heatmap", "--scores", sub + "/S.npy", "--batch", "1", "--head", "1", "--png", sub + "/4d.png"])
        ctx.run_ok(["heatmap", "--scores", sub + "/S2.npy", "--png", sub + "/2d.png"])
    for name, what in (("4d.png", "--batch 1 --head 1 of a 4-D"), ("2d.png", "a 2-D")):
        check_heatmap(ctx.path("half/" + name), 9, 13, "heatmap of %s float16 SCORES file" % what)
        with open(ctx.path("half/" + name), "rb") as f, open(ctx.path("float/" + name), "rb") as g:
            check(f.read() == g.read(), "heatmap of %s float16 SCORES file differs from that of the same "
                  "values in float32" % what)

    rng = np.random.default_rng(5)
    for name in ("Q.npy", "K.npy", "V.npy"):
        eacli.write_npy(ctx.path(name), (2 * rng.standard_normal((1, 2, 12, 8))).astype(np.float16))
    r = ctx.run_ok(["run", "--q", "Q.npy", "--k", "K.npy", "--v", "V.npy", "--causal", "--scores", "SR.npy",
                    "--heatmap", "run.png", "--head", "1"])
    check("SR.npy: SCORES, float16 (1, 2, 12, 12)" in r.stdout, "run of float16 inputs: %r" % r.stdout)
    sr = eacli.read_output(ctx.path("SR.npy"), "<f2", (1, 2, 12, 12))
    eacli.write_npy(ctx.path("SR1.npy"), sr[0, 1])
    ctx.run_ok(["heatmap", "--scores", "SR1.npy", "--png", "slice.png"])
    same_below_title(check_heatmap(ctx.path("run.png"), 12, 12, "run --heatmap of float16 inputs"),
                     check_heatmap(ctx.path("slice.png"), 12, 12, "heatmap of its float16 SCORES[0, 1]"),
                     "run --heatmap --head 1 of float16 inputs vs heatmap of its SCORES[0, 1]")


if __name__ == "__main__":
    sys.exit(eacli.main(sys.argv))
