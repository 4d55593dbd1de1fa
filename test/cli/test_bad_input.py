#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Bad input to `eigen-attention`: malformed and hostile .npy files, shapes that do not fit
together, bad option values, unreadable inputs and unwritable outputs.

Every failure must be: a non-zero exit (not a signal), exactly one line on stderr of the form
'eigen-attention: <file or option>: <problem>' naming the file (or option) and the problem, and
nothing left behind: the directory holds exactly the files it held before (no output, no
temporary file). Each run asks for every output (ATTN, SCORES, LSE, a heatmap), so that any one
of them written before the error is found is caught.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eacli  # noqa: E402
from eacli import case, check, npy_bytes  # noqa: E402

OUTPUTS = ["--out", "ATTN.npy", "--scores", "SCORES.npy", "--lse", "LSE.npy", "--heatmap", "HEAT.png"]

# Words any of which describes the problem (the wording is the tool's own).
TRUNCATED = ("truncat", "short", "end of file", "eof")
SHAPE = ("shape", "dim", "size", "mismatch", "match", "head", "token", "batch", "rank",
         "expected", "must", "length")


def setup(ctx, four_d=False, dtype="<f8"):
    """Valid Q, K, V (2-D [5, 4]/[6, 4]/[6, 3], or bhtd [2, 4, 5, 4]/[2, 2, 6, 4]/[2, 2, 6, 3])."""
    import numpy as np
    rng = np.random.default_rng(0)
    shapes = ((2, 4, 5, 4), (2, 2, 6, 4), (2, 2, 6, 3)) if four_d else ((5, 4), (6, 4), (6, 3))
    for name, shape in zip(("Q.npy", "K.npy", "V.npy"), shapes):
        eacli.write_npy(ctx.path(name), rng.standard_normal(shape).astype(dtype))


def base_args(**replace):
    files = {"q": "Q.npy", "k": "K.npy", "v": "V.npy"}
    files.update(replace)
    return ["run", "--q", files["q"], "--k", files["k"], "--v", files["v"]] + OUTPUTS


def expect_error(ctx, args, what, mentions=(), any_of=(), files_any=()):
    before = ctx.files()
    r = ctx.run(args)
    line = eacli.check_one_line_error(r, what, mentions=mentions, any_of=any_of, files_any=files_any)
    if os.environ.get("EA_CLI_VERBOSE"):
        print("%-50s exit %d: %s" % (what, r.returncode, line))
    eacli.check_no_new_files(ctx, before, what)
    return line


def hostile_q(ctx, name, content, what, any_of, four_d=False):
    """Q replaced by the hostile `content` (written as `name`); the error must name it."""
    setup(ctx, four_d)
    eacli.write_raw(ctx.path(name), content)
    expect_error(ctx, base_args(q=name), what, mentions=(name,), any_of=any_of)


F8_5x4 = b"\0" * (5 * 4 * 8)


# --- malformed and hostile .npy files ----------------------------------------------------------

@case
def npy_truncated_data(ctx):
    hostile_q(ctx, "q_short.npy", npy_bytes("<f8", (5, 4), F8_5x4[:100]), "data truncated", TRUNCATED)
    hostile_q(ctx, "q_one_byte_short.npy", npy_bytes("<f8", (5, 4), F8_5x4[:-1]), "one byte short", TRUNCATED)
    hostile_q(ctx, "q_no_data.npy", npy_bytes("<f8", (5, 4), b""), "no data at all", TRUNCATED)
    hostile_q(ctx, "q4_short.npy", npy_bytes("<f4", (2, 4, 5, 4), b"\0" * (2 * 4 * 5 * 4 * 4 - 4)),
              "4-D data truncated", TRUNCATED, four_d=True)
    # A huge shape (8 TiB, no overflow) in a tiny file: found truncated, never allocated.
    hostile_q(ctx, "q_huge.npy", npy_bytes("<f8", (1 << 20, 1 << 20), F8_5x4),
              "8 TiB shape in a small file", TRUNCATED + ("large", "size", "memory"))


@case
def npy_header_beyond_file(ctx):
    good = npy_bytes("<f8", (5, 4), b"")
    hostile_q(ctx, "q_hlen.npy", good[:8] + (1000).to_bytes(2, "little") + good[10:],
              "header length 1000 in a 128-byte file", ("header",) + TRUNCATED)
    hostile_q(ctx, "q_hlen_max.npy", good[:8] + (0xFFFF).to_bytes(2, "little") + good[10:],
              "header length 65535", ("header",) + TRUNCATED)
    v2 = npy_bytes("<f8", (5, 4), F8_5x4, version=(2, 0))
    hostile_q(ctx, "q_hlen_v2.npy", v2[:8] + (0xFFFFFFF0).to_bytes(4, "little") + v2[12:],
              "version 2.0 header length 4 GiB", ("header",) + TRUNCATED)
    hostile_q(ctx, "q_magic_only.npy", good[:9], "file ends inside the length field", ("header",) + TRUNCATED)
    hostile_q(ctx, "q_header_cut.npy", good[:40], "file ends inside the header", ("header",) + TRUNCATED)


@case
def npy_dtype_object(ctx):
    hostile_q(ctx, "q_object.npy", npy_bytes("|O", (5, 4), b"\0" * 160), "dtype |O",
              ("dtype", "|o", "object"))


@case
def npy_dtype_complex(ctx):
    hostile_q(ctx, "q_complex.npy", npy_bytes("<c8", (5, 4), b"\0" * 160), "dtype <c8",
              ("dtype", "<c8", "complex"))
    hostile_q(ctx, "q_complex16.npy", npy_bytes("<c16", (5, 4), b"\0" * 320), "dtype <c16",
              ("dtype", "<c16", "complex"))


@case
def npy_dtype_other(ctx):
    # Integer, unsigned, structured and string Q: not float16/float32/float64.
    hostile_q(ctx, "q_int32.npy", npy_bytes("<i4", (5, 4), b"\0" * 80), "dtype <i4 for Q", ("dtype", "<i4", "float"))
    hostile_q(ctx, "q_u2.npy", npy_bytes("<u2", (5, 4), b"\0" * 40), "dtype <u2", ("dtype", "<u2"))
    hostile_q(ctx, "q_pipe_f2.npy", npy_bytes("|f2", (5, 4), b"\0" * 40), "dtype |f2", ("dtype", "|f2"))
    hostile_q(ctx, "q_struct.npy", npy_bytes(None, (5, 4), b"\0" * 160,
                                             header="{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (5, 4), }"),
              "structured dtype", ("dtype", "descr"))
    hostile_q(ctx, "q_str.npy", npy_bytes("<U1", (5, 4), b"\0" * 80), "dtype <U1", ("dtype", "<u1"))


@case
def npy_big_endian(ctx):
    hostile_q(ctx, "q_big.npy", npy_bytes(">f8", (5, 4), F8_5x4), "dtype >f8",
              ("endian", ">f8", "byte order", "dtype"))
    hostile_q(ctx, "q_big4.npy", npy_bytes(">f4", (5, 4), b"\0" * 80), "dtype >f4",
              ("endian", ">f4", "byte order", "dtype"))
    hostile_q(ctx, "q_big2.npy", npy_bytes(">f2", (5, 4), b"\0" * 40), "dtype >f2",
              ("endian", ">f2", "byte order", "dtype"))


@case
def npy_fortran_order(ctx):
    hostile_q(ctx, "q_fortran.npy", npy_bytes("<f8", (5, 4), F8_5x4, fortran=True), "Fortran order",
              ("fortran",))


@case
def npy_shape_not_numeric(ctx):
    for i, shape in enumerate(("('a', 4)", "(5, 4.0)", "(5, None)", "5", "[5, 4]", "(5, 4",
                               "(5, -4)", "(5, 4, '')")):
        hostile_q(ctx, "q_shape%d.npy" % i, npy_bytes("<f8", shape, F8_5x4), "shape %s" % shape,
                  ("shape", "header"))


@case
def npy_shape_overflow(ctx):
    cases = [
        ("q_ovf_elems.npy", "(4294967296, 4294967296)", "element count 2^64"),
        ("q_ovf_4d.npy", "(65536, 65536, 65536, 65536)", "4-D element count 2^64"),
        ("q_ovf_bytes.npy", "(2305843009213693952, 1)", "byte count 2^64 (2^61 float64)"),
        ("q_ovf_dim.npy", "(99999999999999999999999, 4)", "one dimension beyond int64"),
        # 2^62 + 5 by 4 is 2^64 + 20 elements: modulo 2^64 the 20 elements (160 bytes) the
        # file holds, which a reader multiplying without checks would accept.
        ("q_ovf_wrap.npy", "(4611686018427387909, 4)", "element count 2^64 + 20, wrapping to the file's 20"),
    ]
    for name, shape, what in cases:
        hostile_q(ctx, name, npy_bytes("<f8", shape, F8_5x4), what,
                  ("shape", "overflow", "too large", "size", "large"))


@case
def npy_malformed_misc(ctx):
    good = npy_bytes("<f8", (5, 4), F8_5x4)
    cases = [
        ("q_empty.npy", b"", "empty file", ("magic", "npy", "header") + TRUNCATED),
        ("q_magic.npy", b"\x93NUMPX" + good[6:], "bad magic", ("magic", "npy", "format")),
        ("q_text.npy", b"1 2 3\n4 5 6\n", "a text file", ("magic", "npy", "format")),
        ("q_version.npy", good[:6] + b"\x09\x00" + good[8:], "version 9.0", ("version",)),
        ("q_notdict.npy", npy_bytes(None, None, F8_5x4, header="('<f8', False, (5, 4))"),
         "header not a dict", ("header",)),
        ("q_nodescr.npy", npy_bytes(None, None, F8_5x4, header="{'fortran_order': False, 'shape': (5, 4), }"),
         "header without descr", ("descr", "header", "dtype")),
        ("q_noshape.npy", npy_bytes(None, None, F8_5x4, header="{'descr': '<f8', 'fortran_order': False, }"),
         "header without shape", ("shape", "header")),
        ("q_garbage.npy", npy_bytes(None, None, F8_5x4, header="{'descr': '<f8', 'fortran_order': Fa"),
         "header cut short", ("header", "fortran", "shape", "descr")),
        ("q_fortran_str.npy", npy_bytes(None, None, F8_5x4,
                                        header="{'descr': '<f8', 'fortran_order': 'no', 'shape': (5, 4), }"),
         "fortran_order not a bool", ("fortran", "header")),
        ("q_nul.npy", npy_bytes(None, None, F8_5x4, header="{'descr': '<f8\0', 'fortran_order': False, 'shape': (5, 4), }"),
         "NUL inside the descr", ("dtype", "descr", "header")),
        ("q_hlen0.npy", good[:8] + b"\0\0" + good[10:], "header length 0", ("header", "magic", "npy")),
        ("q_nested.npy", npy_bytes(None, None, b"", version=(2, 0),
                                   header="{'descr': '<f8', 'fortran_order': False, 'shape': " + "(" * 200000
                                   + ")" * 200000 + ", }"),
         "200000 nested parentheses (a recursive parser must not overflow its stack)", ("shape", "header", "nest", "deep")),
        ("q_long_number.npy", npy_bytes("<f8", "(" + "0" * 100000 + "5, 4)", F8_5x4, version=(2, 0)),
         "a dimension written with 100000 leading zeros", None),
    ]
    for name, content, what, any_of in cases:
        if any_of is None:
            # Well-formed after all (NumPy reads it): either accepted or one clean error.
            setup(ctx)
            eacli.write_raw(ctx.path(name), content)
            before = ctx.files()
            r = ctx.run(base_args(q=name))
            if r.returncode != 0:
                eacli.check_one_line_error(r, what, mentions=(name,))
                eacli.check_no_new_files(ctx, before, what)
            continue
        hostile_q(ctx, name, content, what, any_of)


@case
def npy_hostile_other_inputs(ctx):
    # The same checks apply to K, V, the mask, the key lengths and the ALiBi slopes, and the
    # error names that file.
    setup(ctx)
    eacli.write_raw(ctx.path("k_short.npy"), npy_bytes("<f8", (6, 4), b"\0" * 100))
    expect_error(ctx, base_args(k="k_short.npy"), "K truncated", mentions=("k_short.npy",), any_of=TRUNCATED)
    eacli.write_raw(ctx.path("v_big.npy"), npy_bytes(">f8", (6, 3), b"\0" * 144))
    expect_error(ctx, base_args(v="v_big.npy"), "V big-endian", mentions=("v_big.npy",),
                 any_of=("endian", ">f8", "byte order", "dtype"))
    eacli.write_raw(ctx.path("mask_fortran.npy"), npy_bytes("|b1", (5, 6), b"\1" * 30, fortran=True))
    expect_error(ctx, base_args() + ["--mask", "mask_fortran.npy"], "mask in Fortran order",
                 mentions=("mask_fortran.npy",), any_of=("fortran",))
    eacli.write_raw(ctx.path("mask_int.npy"), npy_bytes("<i4", (5, 6), b"\1\0\0\0" * 30))
    expect_error(ctx, base_args() + ["--mask", "mask_int.npy"], "integer mask (neither bool nor float)",
                 mentions=("mask_int.npy",), any_of=("dtype", "<i4", "bool", "float", "type"))
    eacli.write_raw(ctx.path("mask_obj.npy"), npy_bytes("|O", (5, 6), b"\0" * 240))
    expect_error(ctx, base_args() + ["--mask", "mask_obj.npy"], "object mask",
                 mentions=("mask_obj.npy",), any_of=("dtype", "|o", "object"))
    eacli.write_raw(ctx.path("len_f8.npy"), npy_bytes("<f8", (1,), b"\0" * 8))
    expect_error(ctx, base_args() + ["--key-lengths", "len_f8.npy"], "float key lengths",
                 mentions=("len_f8.npy",), any_of=("dtype", "<f8", "int", "type"))
    eacli.write_raw(ctx.path("len_big.npy"), npy_bytes(">i8", (1,), (3).to_bytes(8, "big")))
    expect_error(ctx, base_args() + ["--key-lengths", "len_big.npy"], "big-endian key lengths",
                 mentions=("len_big.npy",), any_of=("endian", ">i8", "byte order", "dtype"))
    eacli.write_raw(ctx.path("len_short.npy"), npy_bytes("<i8", (1,), b"\0" * 4))
    expect_error(ctx, base_args() + ["--key-lengths", "len_short.npy"], "key lengths truncated",
                 mentions=("len_short.npy",), any_of=TRUNCATED)
    eacli.write_raw(ctx.path("alibi_c8.npy"), npy_bytes("<c8", (1,), b"\0" * 8))
    expect_error(ctx, base_args() + ["--alibi", "alibi_c8.npy"], "complex ALiBi slopes",
                 mentions=("alibi_c8.npy",), any_of=("dtype", "<c8", "complex"))
    eacli.write_raw(ctx.path("alibi_ovf.npy"), npy_bytes("<f8", "(4294967296, 4294967296)", b"\0" * 8))
    expect_error(ctx, base_args() + ["--alibi", "alibi_ovf.npy"], "ALiBi shape overflow",
                 mentions=("alibi_ovf.npy",), any_of=("shape", "overflow", "too large", "size", "large"))


# --- inconsistent shapes -------------------------------------------------------------------------

def write(ctx, name, shape, dtype="<f8", value=None):
    import numpy as np
    a = np.random.default_rng(1).standard_normal(shape).astype(dtype) if value is None else np.array(value, dtype=dtype)
    eacli.write_npy(ctx.path(name), a)


@case
def shapes_qkv_2d(ctx):
    setup(ctx)
    write(ctx, "k_dk5.npy", (6, 5))
    expect_error(ctx, base_args(k="k_dk5.npy"), "d_k of K differs from Q", files_any=("Q.npy", "k_dk5.npy"), any_of=SHAPE)
    write(ctx, "v_t7.npy", (7, 3))
    expect_error(ctx, base_args(v="v_t7.npy"), "V has more tokens than K", files_any=("K.npy", "v_t7.npy"), any_of=SHAPE)
    write(ctx, "q_1d.npy", (20,))
    expect_error(ctx, base_args(q="q_1d.npy"), "1-D Q", mentions=("q_1d.npy",), any_of=SHAPE)
    write(ctx, "q_3d.npy", (1, 5, 4))
    expect_error(ctx, base_args(q="q_3d.npy"), "3-D Q", mentions=("q_3d.npy",), any_of=SHAPE)
    write(ctx, "q_5d.npy", (1, 1, 1, 5, 4))
    expect_error(ctx, base_args(q="q_5d.npy"), "5-D Q", mentions=("q_5d.npy",), any_of=SHAPE)
    write(ctx, "k_4d.npy", (1, 1, 6, 4))
    expect_error(ctx, base_args(k="k_4d.npy"), "2-D Q with 4-D K", files_any=("Q.npy", "k_4d.npy"), any_of=SHAPE)


@case
def shapes_qkv_4d(ctx):
    setup(ctx, four_d=True)
    write(ctx, "k_b3.npy", (3, 2, 6, 4))
    expect_error(ctx, base_args(k="k_b3.npy"), "batch of K differs from Q", files_any=("Q.npy", "k_b3.npy"), any_of=SHAPE)
    write(ctx, "k_h3.npy", (2, 3, 6, 4))
    write(ctx, "v_h3.npy", (2, 3, 6, 3))
    expect_error(ctx, base_args(k="k_h3.npy", v="v_h3.npy"), "H=4 not a multiple of H_kv=3",
                 files_any=("Q.npy", "k_h3.npy", "v_h3.npy"), any_of=SHAPE + ("multiple", "divis"))
    write(ctx, "k_h8.npy", (2, 8, 6, 4))
    write(ctx, "v_h8.npy", (2, 8, 6, 3))
    expect_error(ctx, base_args(k="k_h8.npy", v="v_h8.npy"), "more K/V heads than Q heads",
                 files_any=("Q.npy", "k_h8.npy", "v_h8.npy"), any_of=SHAPE + ("multiple", "divis"))
    write(ctx, "v_h1.npy", (2, 1, 6, 3))
    expect_error(ctx, base_args(v="v_h1.npy"), "V heads differ from K heads", files_any=("K.npy", "v_h1.npy"), any_of=SHAPE)
    write(ctx, "v_t5.npy", (2, 2, 5, 3))
    expect_error(ctx, base_args(v="v_t5.npy"), "V tokens differ from K", files_any=("K.npy", "v_t5.npy"), any_of=SHAPE)
    write(ctx, "k_d3.npy", (2, 2, 6, 3))
    expect_error(ctx, base_args(k="k_d3.npy"), "d_k of K differs from Q", files_any=("Q.npy", "k_d3.npy"), any_of=SHAPE)
    write(ctx, "k_2d.npy", (6, 4))
    expect_error(ctx, base_args(k="k_2d.npy"), "4-D Q with 2-D K", files_any=("Q.npy", "k_2d.npy"), any_of=SHAPE)
    # The same files read as bthd: Q [B=2, T=4, H=5, d=4], K [2, T=2, H_kv=6, 4]: inconsistent.
    expect_error(ctx, base_args() + ["--layout", "bthd"], "bhtd files read as bthd",
                 files_any=("Q.npy", "K.npy", "V.npy"), any_of=SHAPE + ("multiple", "divis"))


@case
def shapes_masks(ctx):
    setup(ctx, four_d=True)  # B=2, H=4, H_kv=2, T_q=5, T_k=6
    bad = [
        ("mask_t.npy", (5, 7), "|b1", "2-D mask [T_q, T_k + 1]"),
        ("mask_q.npy", (6, 6), "|b1", "2-D mask [T_q + 1, T_k]"),
        ("mask_b3.npy", (3, 1, 5, 6), "|b1", "mask batch 3 (B=2)"),
        ("mask_h2.npy", (1, 2, 5, 6), "|b1", "mask heads 2 (H=4; the K/V heads do not count)"),
        ("mask_3d.npy", (2, 5, 6), "|b1", "3-D mask"),
        ("mask_1d.npy", (30,), "|b1", "1-D mask"),
        ("bias_t.npy", (1, 1, 5, 5), "<f8", "bias [1, 1, T_q, T_k - 1]"),
        ("bias_h.npy", (2, 3, 5, 6), "<f8", "bias heads 3"),
        ("mask_bthd.npy", (2, 5, 4, 6), "<f8", "bias in bthd order (masks are always bhtd)"),
    ]
    for name, shape, dtype, what in bad:
        import numpy as np
        eacli.write_npy(ctx.path(name), np.ones(shape, dtype=dtype))
        expect_error(ctx, base_args() + ["--mask", name], what, mentions=(name,), any_of=SHAPE)


@case
def key_lengths_and_slopes(ctx):
    setup(ctx, four_d=True)  # B=2, H=4, T_k=6
    cases = [
        ("len_3.npy", [6, 6, 6], "<i8", "three lengths for B=2"),
        ("len_1.npy", [6], "<i4", "one length for B=2"),
        ("len_2d.npy", [[6, 6]], "<i8", "2-D key lengths"),
        ("len_big.npy", [6, 7], "<i8", "length 7 > T_k=6"),
        ("len_neg.npy", [-1, 6], "<i4", "negative length"),
        ("len_huge.npy", [6, 1 << 40], "<i8", "length 2^40"),
    ]
    for name, value, dtype, what in cases:
        write(ctx, name, None, dtype=dtype, value=value)
        expect_error(ctx, base_args() + ["--key-lengths", name], what, mentions=(name,),
                     any_of=SHAPE + ("range", "outside", "exceed", "negative", "key", "between", "t_k", "<"))
    for name, value, what in (("slopes_3.npy", [0.1, 0.2, 0.3], "3 slopes for H=4"),
                              ("slopes_2.npy", [0.1, 0.2], "2 slopes (H_kv=2; one per query head is required)"),
                              ("slopes_2d.npy", [[0.1, 0.2, 0.3, 0.4]], "2-D slopes")):
        write(ctx, name, None, value=value)
        expect_error(ctx, base_args() + ["--alibi", name], what, mentions=(name,),
                     any_of=SHAPE + ("slope", "count", "element"))


@case
def sinks(ctx):
    # --sinks: one float logit per query head (H = 4 here; H_kv = 2 is not enough), float16,
    # float32 or float64, and a file that exists. The message names the file and the problem.
    setup(ctx, four_d=True)
    for name, value, dtype, what, words in (
            ("sinks_3.npy", [0.1, 0.2, 0.3], "<f8", "3 sinks for H=4", ("shape (3,)", "(4,)", "per query head")),
            ("sinks_2.npy", [0.1, 0.2], "<f4", "2 sinks (H_kv=2; one per query head is required)",
             ("shape (2,)", "(4,)", "per query head")),
            ("sinks_2d.npy", [[0.1, 0.2, 0.3, 0.4]], "<f8", "2-D sinks", ("shape (1, 4)", "(4,)", "sink")),
            ("sinks_0d.npy", 0.5, "<f8", "a scalar sink for H=4", ("shape ()", "(4,)", "sink")),
            ("sinks_i4.npy", [0, 1, 2, 3], "<i4", "int32 sinks", ("dtype int32", "float32", "sinks")),
            ("sinks_b1.npy", [True, False, True, False], "|b1", "bool sinks", ("dtype bool", "float32", "sinks"))):
        write(ctx, name, None, dtype=dtype, value=value)
        expect_error(ctx, base_args() + ["--sinks", name], what, mentions=(name,) + words)
    eacli.write_raw(ctx.path("sinks_c8.npy"), npy_bytes("<c8", (4,), b"\0" * 32))
    expect_error(ctx, base_args() + ["--sinks", "sinks_c8.npy"], "complex sinks",
                 mentions=("sinks_c8.npy",), any_of=("dtype", "<c8", "complex"))
    expect_error(ctx, base_args() + ["--sinks", "nosinks.npy"], "sinks do not exist", mentions=("nosinks.npy",))
    os.mkdir(ctx.path("sinkdir.npy"))
    expect_error(ctx, base_args() + ["--sinks", "sinkdir.npy"], "sinks are a directory", mentions=("sinkdir.npy",))
    # 2-D inputs: one head, one sink ([1] or a scalar); two are too many.
    for n in ("Q.npy", "K.npy", "V.npy"):
        os.remove(ctx.path(n))
    setup(ctx)
    write(ctx, "sinks_two.npy", None, value=[0.5, 0.5])
    expect_error(ctx, base_args() + ["--sinks", "sinks_two.npy"], "2 sinks for one head",
                 mentions=("sinks_two.npy", "(1,)"))
    write(ctx, "sinks_one.npy", None, value=[0.5])
    write(ctx, "sinks_scalar.npy", None, value=0.5)
    for name in ("sinks_one.npy", "sinks_scalar.npy"):
        ctx.run_ok(["run", "--q", "Q.npy", "--k", "K.npy", "--v", "V.npy", "--out", "ATTN.npy", "--sinks", name,
                    "--quiet"])


@case
def shape_scalar(ctx):
    # A 0-D (scalar) array as Q: rejected, and the error describes it as what it is (0-D, shape
    # ()), not as some other shape.
    setup(ctx)
    write(ctx, "q_scalar.npy", ())
    line = expect_error(ctx, base_args(q="q_scalar.npy"), "0-D Q", mentions=("q_scalar.npy",), any_of=SHAPE)
    check(any(w in line.lower() for w in ("0-d", "()", "[]", "scalar")) and "1-d" not in line.lower(),
          "0-D Q: the error %r does not describe a 0-D array (shape ())" % line)


# --- options --------------------------------------------------------------------------------------

@case
def bad_option_values(ctx):
    setup(ctx)
    cases = [
        (["--align", "sideways"], "align"),
        (["--align", "bottom_right"], "align"),
        (["--window", "5"], "window"),
        (["--window", "-2,3"], "window"),
        (["--window", "3,-5"], "window"),
        (["--window", "a,b"], "window"),
        (["--window", "1,2,3"], "window"),
        (["--window", "1,"], "window"),
        (["--chunk-size", "-1"], "chunk-size"),
        (["--chunk-size", "x"], "chunk-size"),
        (["--chunk-size", "1152921504606846977"], "chunk-size"),
        (["--scale", "-1"], "scale"),
        (["--scale", "0"], "scale"),
        (["--scale", "nan"], "scale"),
        (["--scale", "inf"], "scale"),
        (["--scale", "abc"], "scale"),
        (["--softcap", "-1"], "softcap"),
        (["--softcap", "inf"], "softcap"),
        (["--softcap", "x"], "softcap"),
        (["--layout", "bhdt"], "layout"),
        (["--threads", "-1"], "threads"),
        (["--threads", "two"], "threads"),
        (["--compute", "bfloat16"], "compute"),
        (["--compute", "int8"], "compute"),
        (["--compute", "Float"], "compute"),
        (["--compute", ""], "compute"),
    ]
    for extra, option in cases:
        expect_error(ctx, base_args() + extra, " ".join(extra), mentions=("--" + option,))


@case
def library_errors_named(ctx):
    # Problems that only the library can find still get the tool's error form, naming the
    # option or file (not a library function). 1e-50 is a valid float64 scale but 0 as a
    # float32: with float32 inputs it must be rejected (Options::scale), naming --scale; with
    # float64 inputs it is accepted. The same for --softcap 1e-50. And d_k = 0 leaves the
    # default scale 1/sqrt(d_k) undefined: the error names Q/K or --scale.
    write(ctx, "q_d0.npy", (5, 0))
    write(ctx, "k_d0.npy", (6, 0))
    write(ctx, "V.npy", (6, 3))
    expect_error(ctx, ["run", "--q", "q_d0.npy", "--k", "k_d0.npy", "--v", "V.npy", "--out", "ATTN.npy"],
                 "d_k = 0 without --scale", files_any=("q_d0.npy", "k_d0.npy", "--scale"))
    for n in ("q_d0.npy", "k_d0.npy", "V.npy"):
        os.remove(ctx.path(n))
    setup(ctx, dtype="<f4")
    expect_error(ctx, base_args() + ["--scale", "1e-50"], "--scale 1e-50 with float32 inputs",
                 mentions=("--scale",))
    expect_error(ctx, base_args() + ["--softcap", "1e-50"], "--softcap 1e-50 with float32 inputs",
                 mentions=("--softcap",))
    setup(ctx, dtype="<f8")
    ctx.run_ok(["run", "--q", "Q.npy", "--k", "K.npy", "--v", "V.npy", "--out", "ATTN.npy", "--scale", "1e-50",
                "--quiet"])


@case
def mixed_dtypes_float16(ctx):
    # Q, K and V of one dtype: float16 beside float32 or float64 (either way round) is an error
    # naming both files and the rule, nothing written; no promotion.
    import numpy as np
    rng = np.random.default_rng(2)
    for q_dt, kv_dt in (("<f2", "<f4"), ("<f4", "<f2"), ("<f2", "<f8"), ("<f8", "<f2")):
        for name, shape, dt in (("Q.npy", (5, 4), q_dt), ("K.npy", (6, 4), kv_dt), ("V.npy", (6, 3), kv_dt)):
            eacli.write_npy(ctx.path(name), rng.standard_normal(shape).astype(dt))
        line = expect_error(ctx, base_args(), "Q %s with K, V %s" % (q_dt, kv_dt),
                            mentions=("Q.npy", "K.npy", "same dtype"))
        check("float16" in line, "Q %s with K, V %s: the error %r does not name float16" % (q_dt, kv_dt, line))
    # V alone of another dtype: the error names V.
    for name, shape, dt in (("Q.npy", (5, 4), "<f2"), ("K.npy", (6, 4), "<f2"), ("V.npy", (6, 3), "<f4")):
        eacli.write_npy(ctx.path(name), rng.standard_normal(shape).astype(dt))
    expect_error(ctx, base_args(), "V float32 beside float16 Q and K", mentions=("V.npy", "same dtype"))


@case
def missing_options(ctx):
    setup(ctx)
    expect_error(ctx, ["run", "--k", "K.npy", "--v", "V.npy", "--out", "ATTN.npy"], "no --q", mentions=("--q",))
    expect_error(ctx, ["run", "--q", "Q.npy", "--v", "V.npy", "--out", "ATTN.npy"], "no --k", mentions=("--k",))
    expect_error(ctx, ["run", "--q", "Q.npy", "--k", "K.npy", "--out", "ATTN.npy"], "no --v", mentions=("--v",))
    expect_error(ctx, ["run", "--q", "Q.npy", "--k", "K.npy", "--v", "V.npy"], "no --out", mentions=("--out",))
    expect_error(ctx, ["run", "--q", "Q.npy", "--k", "K.npy", "--v", "V.npy", "--out"], "--out without a value",
                 mentions=("--out",))


@case
def no_output_requested(ctx):
    # --out is optional when --scores, --lse or --heatmap is given; with none of the four, the
    # run is a usage error (exit 2) naming them all, and writes nothing.
    setup(ctx)
    for extra in ([], ["--causal"], ["--average-heads"], ["--layout", "bthd"]):
        args = ["run", "--q", "Q.npy", "--k", "K.npy", "--v", "V.npy"] + extra
        what = "run without any output" + (" (%s)" % " ".join(extra) if extra else "")
        before = ctx.files()
        r = ctx.run(args)
        eacli.check_one_line_error(r, what, mentions=("--out", "--scores", "--lse", "--heatmap"))
        check(r.returncode == 2, "%s: exit status %d, expected 2 (a bad command line)" % (what, r.returncode))
        eacli.check_no_new_files(ctx, before, what)
    # An empty file name is an error, not an output left out.
    for option in ("--out", "--scores", "--lse", "--heatmap"):
        others = [o for o in ("--out", "--scores", "--lse") if o != option][:1]
        args = ["run", "--q", "Q.npy", "--k", "K.npy", "--v", "V.npy", others[0], "X.npy", option, ""]
        what = "%s ''" % option
        before = ctx.files()
        r = ctx.run(args)
        eacli.check_one_line_error(r, what, mentions=(option,))
        check(r.returncode == 2, "%s: exit status %d, expected 2" % (what, r.returncode))
        eacli.check_no_new_files(ctx, before, what)


@case
def unreadable_inputs(ctx):
    setup(ctx)
    expect_error(ctx, base_args(q="nonexistent.npy"), "Q does not exist", mentions=("nonexistent.npy",))
    os.mkdir(ctx.path("adir.npy"))
    expect_error(ctx, base_args(k="adir.npy"), "K is a directory", mentions=("adir.npy",))
    expect_error(ctx, base_args() + ["--mask", "nomask.npy"], "mask does not exist", mentions=("nomask.npy",))
    expect_error(ctx, base_args() + ["--key-lengths", "nolen.npy"], "key lengths do not exist", mentions=("nolen.npy",))
    expect_error(ctx, base_args() + ["--alibi", "noslopes.npy"], "slopes do not exist", mentions=("noslopes.npy",))


@case
def unwritable_outputs(ctx):
    # An output that cannot be written: the run fails and no other output is left behind
    # either (ATTN must not remain when SCORES, LSE or the heatmap cannot be written).
    setup(ctx)
    run = ["run", "--q", "Q.npy", "--k", "K.npy", "--v", "V.npy"]
    expect_error(ctx, run + ["--out", "nodir/ATTN.npy"], "--out in a missing directory", mentions=("ATTN.npy",))
    expect_error(ctx, run + ["--out", "ATTN.npy", "--scores", "nodir/SCORES.npy", "--lse", "LSE.npy"],
                 "--scores in a missing directory", mentions=("SCORES.npy",))
    expect_error(ctx, run + ["--out", "ATTN.npy", "--scores", "SCORES.npy", "--lse", "nodir/LSE.npy"],
                 "--lse in a missing directory", mentions=("LSE.npy",))
    expect_error(ctx, run + ["--out", "ATTN.npy", "--scores", "SCORES.npy", "--heatmap", "nodir/HEAT.png"],
                 "--heatmap in a missing directory", mentions=("HEAT.png",))
    # An output path that is an existing directory: the temporary file must not remain.
    os.mkdir(ctx.path("outdir"))
    expect_error(ctx, run + ["--out", "outdir"], "--out is a directory", mentions=("outdir",))
    check(os.listdir(ctx.path("outdir")) == [], "outdir: files left inside: %s" % os.listdir(ctx.path("outdir")))
    expect_error(ctx, run + ["--out", "ATTN.npy", "--lse", "outdir"], "--lse is a directory", mentions=("outdir",))
    check(os.listdir(ctx.path("outdir")) == [], "outdir: files left inside: %s" % os.listdir(ctx.path("outdir")))
    # Outputs that exist already are left as they were by a failed run (neither removed nor
    # half overwritten).
    for name in ("ATTN.npy", "SCORES.npy", "LSE.npy", "HEAT.png"):
        eacli.write_raw(ctx.path(name), b"precious " + name.encode())
    eacli.write_raw(ctx.path("mask_bad.npy"), npy_bytes("|b1", (5, 7), b"\1" * 35))
    expect_error(ctx, base_args() + ["--mask", "mask_bad.npy"], "a failed run over existing outputs",
                 mentions=("mask_bad.npy",))
    for name in ("ATTN.npy", "SCORES.npy", "LSE.npy", "HEAT.png"):
        with open(ctx.path(name), "rb") as f:
            check(f.read() == b"precious " + name.encode(), "a failed run changed the existing %s" % name)


@case
def singular_counts(ctx):
    # A count of one is written in the singular: "1 head", "1 token", "the 1 query head".
    setup(ctx, four_d=True)  # Q [2, 4, 5, 4], K [2, 2, 6, 4], V [2, 2, 6, 3]
    write(ctx, "v_h1.npy", (2, 1, 6, 3))
    line = expect_error(ctx, base_args(v="v_h1.npy"), "V of 1 head", files_any=("K.npy", "v_h1.npy"), any_of=SHAPE)
    check("1 head but K.npy has 2" in line, "V of 1 head: %r" % line)
    write(ctx, "v_t1.npy", (2, 2, 1, 3))
    line = expect_error(ctx, base_args(v="v_t1.npy"), "V of 1 token", files_any=("K.npy", "v_t1.npy"), any_of=SHAPE)
    check("has 1 token but K.npy" in line, "V of 1 token: %r" % line)
    write(ctx, "q_h1.npy", (2, 1, 5, 4))
    line = expect_error(ctx, base_args(q="q_h1.npy"), "Q of 1 head for 2 K/V heads", files_any=("K.npy", "q_h1.npy"),
                        any_of=SHAPE)
    check("2 heads, which do not divide the 1 query head of q_h1.npy" in line, "Q of 1 head: %r" % line)


# --- the heatmap subcommand ----------------------------------------------------------------------

@case
def heatmap_bad_input(ctx):
    import numpy as np
    eacli.write_npy(ctx.path("S4.npy"), np.full((2, 3, 5, 6), 1.0 / 6))
    eacli.write_npy(ctx.path("S2.npy"), np.full((5, 6), 1.0 / 6))
    eacli.write_raw(ctx.path("s_short.npy"), npy_bytes("<f8", (5, 6), b"\0" * 100))
    eacli.write_raw(ctx.path("s_c8.npy"), npy_bytes("<c8", (5, 6), b"\0" * 240))
    eacli.write_raw(ctx.path("s_fortran.npy"), npy_bytes("<f8", (5, 6), b"\0" * 240, fortran=True))
    eacli.write_raw(ctx.path("s_ovf.npy"), npy_bytes("<f8", "(4294967296, 4294967296)", b"\0" * 240))
    eacli.write_npy(ctx.path("s_1d.npy"), np.zeros(6))
    eacli.write_npy(ctx.path("s_5d.npy"), np.zeros((1, 1, 1, 5, 6)))
    hm = ["heatmap", "--png", "OUT.png", "--scores"]
    expect_error(ctx, hm + ["s_short.npy"], "heatmap: truncated scores", mentions=("s_short.npy",), any_of=TRUNCATED)
    expect_error(ctx, hm + ["s_c8.npy"], "heatmap: complex scores", mentions=("s_c8.npy",), any_of=("dtype", "<c8", "complex"))
    expect_error(ctx, hm + ["s_fortran.npy"], "heatmap: Fortran scores", mentions=("s_fortran.npy",), any_of=("fortran",))
    expect_error(ctx, hm + ["s_ovf.npy"], "heatmap: shape overflow", mentions=("s_ovf.npy",),
                 any_of=("shape", "overflow", "too large", "size", "large"))
    expect_error(ctx, hm + ["s_1d.npy"], "heatmap: 1-D scores", mentions=("s_1d.npy",), any_of=SHAPE)
    expect_error(ctx, hm + ["s_5d.npy"], "heatmap: 5-D scores", mentions=("s_5d.npy",), any_of=SHAPE)
    expect_error(ctx, hm + ["missing.npy"], "heatmap: missing scores", mentions=("missing.npy",))
    expect_error(ctx, hm + ["S4.npy", "--batch", "2", "--head", "0"], "heatmap: --batch 2 of 2", mentions=("batch",))
    expect_error(ctx, hm + ["S4.npy", "--batch", "0", "--head", "3"], "heatmap: --head 3 of 3", mentions=("head",))
    expect_error(ctx, hm + ["S4.npy", "--batch", "-1", "--head", "0"], "heatmap: --batch -1", mentions=("batch",))
    expect_error(ctx, hm + ["S2.npy", "--tokens", "missing.txt"], "heatmap: missing tokens file", mentions=("missing.txt",))
    expect_error(ctx, ["heatmap", "--scores", "S2.npy", "--png", "nodir/OUT.png"], "heatmap: PNG in a missing directory",
                 mentions=("OUT.png",))
    expect_error(ctx, ["heatmap", "--scores", "S2.npy"], "heatmap: no --png", mentions=("png",))
    line = expect_error(ctx, hm + ["S2.npy", "--scale", "sqrt"], "heatmap: --scale sqrt", mentions=("--scale", "sqrt"))
    check("neither linear nor log" in line, "heatmap --scale sqrt: %r" % line)


if __name__ == "__main__":
    sys.exit(eacli.main(sys.argv))
