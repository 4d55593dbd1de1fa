#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Reference attention cases for bfloat16 and float16 inputs, computed in float64.

Needs Debian's python3-torch (1.13) and numpy; regenerate (from the repository root) with

    OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 test/data/low_precision/make_low_precision_golden.py

For each case Q (T_q x d_k), K (T_k x d_k) and V (T_k x d_v) are drawn in float64 from a
fixed seed, rounded to the storage dtype (x.to(dtype).to(float64)), and SCORES, ATTN and LSE
are computed in float64 from the ROUNDED inputs. The same float64 draws are used for both
dtypes, so bf16/<name>.txt and fp16/<name>.txt differ only by the rounding.

The files have the single-head format of test/data/*.txt (test/support/golden.hpp,
load_golden):
    causal 0|1
    align top_left|bottom_right
    scale default|<number>
    then Q, K, V, SCORES, ATTN, LSE, each as a line "NAME rows cols" followed by `rows`
    lines of `cols` numbers.
Q, K and V are written as the EXACT decimal value of the rounded number (a bf16/fp16 value
has a finite decimal expansion), so they read back exactly as float, double or long double
(the loader parses with strtold). SCORES, ATTN and LSE are written with repr (shortest
string that reads back as the same double; at most 17 significant digits). LSE is -inf for
a row that sees no key; its SCORES and ATTN rows are 0.
"""
import math
import os
import sys
from decimal import Decimal

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
TOL = 1e-12  # torch float64 vs numpy float64

# name, T_q, T_k, d_k, d_v, causal, align, scale (None: 1/sqrt(d_k)), magnitude of Q and K.
# magnitude "logits:<x>" scales Q and K so that the largest |scaled logit| is about x.
CASES = [
    ("seed_3x4", 3, 3, 4, 4, False, "top_left", None, 1.0),
    ("rect_keys", 4, 9, 16, 5, False, "top_left", None, 1.0),
    ("dv_differs", 6, 6, 8, 3, False, "top_left", None, 1.0),
    ("one_token", 1, 1, 5, 2, False, "top_left", None, 1.0),
    ("causal_top_left", 7, 7, 12, 6, True, "top_left", None, 1.0),
    ("rect_keys_causal_bottom_right", 4, 9, 16, 5, True, "bottom_right", None, 1.0),
    ("more_queries_bottom_right", 9, 4, 16, 5, True, "bottom_right", None, 1.0),
    ("scale_two", 7, 7, 10, 10, False, "top_left", 2.0, 1.0),
    ("odd_block_edges", 131, 263, 72, 40, True, "bottom_right", None, 1.0),
    ("large_logits", 12, 12, 32, 8, True, "top_left", None, "logits:30"),
    ("d128_long_keys", 16, 300, 128, 128, False, "top_left", None, 1.0),
]


def exact_decimal(x):
    """The shortest %g string whose decimal value is exactly x (x: a finite binary float)."""
    exact = Decimal(x)
    for digits in range(1, 800):
        s = "%.*g" % (digits, x)
        if Decimal(s) == exact:
            return s
    raise AssertionError(f"no exact decimal for {x!r}")


def fmt_output(x):
    s = repr(float(x))
    assert float(s) == x or (math.isnan(x) and math.isnan(float(s)))
    return s


def write_matrix(f, name, m, fmt):
    rows, cols = m.shape
    f.write(f"{name} {rows} {cols}\n")
    for row in m.tolist():
        f.write(" ".join(fmt(x) for x in row) + "\n")


def mask_matrix(tq, tk, causal, align):
    """True where query i sees key j."""
    i = np.arange(tq)[:, None]
    j = np.arange(tk)[None, :]
    if not causal:
        return np.ones((tq, tk), dtype=bool)
    offset = 0 if align == "top_left" else tk - tq
    return j <= i + offset


def torch_reference(q, k, v, scale, visible):
    logits = (q @ k.T) * scale
    logits = logits.masked_fill(~torch.from_numpy(visible), float("-inf"))
    lse = torch.logsumexp(logits, dim=-1, keepdim=True)
    w = torch.softmax(logits, dim=-1).nan_to_num(0.0)  # rows with no visible key: zeros
    o = w @ v
    return w, o, lse, logits


def numpy_reference(q, k, v, scale, visible):
    """An independent float64 computation (max-subtracted exp, explicit sums)."""
    logits = (q @ k.T) * scale
    tq, tk = logits.shape
    w = np.zeros((tq, tk))
    lse = np.full((tq, 1), -np.inf)
    for r in range(tq):
        vis = visible[r]
        if not vis.any():
            continue
        x = logits[r, vis]
        m = x.max()
        e = np.exp(x - m)
        s = e.sum()
        w[r, vis] = e / s
        lse[r, 0] = m + math.log(s)
    return w, w @ v, lse


def check_close(name, a, b):
    a = np.asarray(a)
    b = np.asarray(b)
    assert a.shape == b.shape, (name, a.shape, b.shape)
    inf_a, inf_b = np.isinf(a), np.isinf(b)
    assert (inf_a == inf_b).all() and (a[inf_a] == b[inf_b]).all(), name
    fa, fb = a[~inf_a], b[~inf_b]
    assert np.isfinite(fa).all() and np.isfinite(fb).all(), name
    err = np.abs(fa - fb) / np.maximum(1.0, np.abs(fb)) if fa.size else np.zeros(1)
    assert err.max() <= TOL, f"{name}: torch vs numpy differ by {err.max():.3g}"
    return float(err.max())


def round_to(x, dtype):
    return x.to(dtype).to(torch.float64)


def make_case(tag, dtype, name, tq, tk, dk, dv, causal, align, scale, mag, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(tq, dk, dtype=torch.float64, generator=g)
    k = torch.randn(tk, dk, dtype=torch.float64, generator=g)
    v = torch.randn(tk, dv, dtype=torch.float64, generator=g)
    s = 1.0 / math.sqrt(dk) if scale is None else scale
    visible = mask_matrix(tq, tk, causal, align)
    if isinstance(mag, str):  # "logits:<x>": largest visible |scaled logit| of the draws = x
        target = float(mag.split(":")[1])
        peak = float(((q @ k.T) * s).abs()[torch.from_numpy(visible)].max())
        mag = math.sqrt(target / peak)
    q, k = q * mag, k * mag

    q, k, v = (round_to(x, dtype) for x in (q, k, v))
    for x in (q, k, v):  # every written input is exactly a value of the storage dtype
        assert torch.equal(round_to(x, dtype), x)
        assert torch.isfinite(x).all()

    w, o, lse, logits = torch_reference(q, k, v, s, visible)
    wn, on, lsen = numpy_reference(q.numpy(), k.numpy(), v.numpy(), s, visible)
    errs = [check_close(f"{tag}/{name} {n}", a.numpy(), b)
            for n, a, b in (("SCORES", w, wn), ("ATTN", o, on), ("LSE", lse, lsen))]
    # rows with no visible key: lse -inf, zero weights and outputs
    empty = ~visible.any(axis=1)
    assert (lse.numpy()[empty] == -np.inf).all() and (w.numpy()[empty] == 0).all()
    assert (o.numpy()[empty] == 0).all()

    path = os.path.join(HERE, tag, name + ".txt")
    with open(path, "w") as f:
        f.write(f"causal {int(causal)}\nalign {align}\n")
        f.write("scale default\n" if scale is None else f"scale {exact_decimal(scale)}\n")
        for n, m in (("Q", q), ("K", k), ("V", v)):
            write_matrix(f, n, m, exact_decimal)
        for n, m in (("SCORES", w), ("ATTN", o), ("LSE", lse)):
            write_matrix(f, n, m, fmt_output)

    # read the inputs back: they must be exactly the rounded values
    back = read_back(path)
    for n, m in (("Q", q), ("K", k), ("V", v)):
        assert np.array_equal(back[n], m.numpy()), (path, n)
        assert np.array_equal(round_to(torch.from_numpy(back[n]), dtype).numpy(), back[n])
    for n, m in (("SCORES", w), ("ATTN", o), ("LSE", lse)):
        assert np.array_equal(back[n], m.numpy()), (path, n)

    finite = logits[torch.isfinite(logits)]
    peak = float(finite.abs().max()) if finite.numel() else 0.0
    print(f"{tag}/{name}: T_q={tq} T_k={tk} d_k={dk} d_v={dv} causal={int(causal)} {align} "
          f"scale={'default' if scale is None else scale} max|logit|={peak:.3g} "
          f"empty_rows={int(empty.sum())} max|x|={max(float(x.abs().max()) for x in (q, k, v)):.3g} "
          f"torch-vs-numpy={max(errs):.2g} bytes={os.path.getsize(path)}")


def read_back(path):
    """Parses a written file the way load_golden does (tokens; header, then six matrices)."""
    with open(path) as f:
        tok = f.read().split()
    pos = 0
    def take():
        nonlocal pos
        pos += 1
        return tok[pos - 1]
    assert take() == "causal" and take() in ("0", "1")
    assert take() == "align" and take() in ("top_left", "bottom_right")
    assert take() == "scale"
    take()
    out = {}
    for n in ("Q", "K", "V", "SCORES", "ATTN", "LSE"):
        assert take() == n
        r, c = int(take()), int(take())
        out[n] = np.array([float(take()) for _ in range(r * c)], dtype=np.float64).reshape(r, c)
    assert pos == len(tok), "trailing content"
    return out


def main():
    torch.set_num_threads(1)
    for tag, dtype in DTYPES.items():
        os.makedirs(os.path.join(HERE, tag), exist_ok=True)
        for seed, case in enumerate(CASES, start=101):
            make_case(tag, dtype, *case, seed=seed)
    print(f"torch {torch.__version__}, numpy {np.__version__}, python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
