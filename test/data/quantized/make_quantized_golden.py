#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Golden cases of the quantized KV caches (test/quantized_cache.cpp): PyTorch float64 attention
on the dequantized keys and values, and the quantized elements and scales themselves.

Needs Debian's python3-torch (1.13, which has no float8 type) and numpy; run with
/usr/bin/python3 from any directory. It writes the *.txt files next to itself.

The quantizer here is written apart from the library's (src/kernels/quantized.hpp), the way the
formats define it: the scale of a token's head is max |x| / the format's largest value (in float32),
and each element is x / scale (float32) rounded to the nearest element of the format, found by
search over all 256 codes (ties to the even code, a zero keeping the sign of x, saturating).
The values of the codes come from the OCP definitions: E5M2 as the top byte of an IEEE half
(numpy's float16), E4M3 ("fn") from its exponent and fraction fields; int8 is numpy's
round-half-even in [-127, 127]. The dequantized element is float32(scale) x float32(value), rounded
once to float32, and the attention over those in float64 is the expected output.

FILE FORMAT (text, whitespace-separated tokens):

    eigen_attention_quantized_golden 1
    format int8|float8_e4m3fn|float8_e5m2
    causal 0|1                     bottom-right (the queries are the last T_q tokens)
    scale default|<number>         default = 1/sqrt(d_k)
    page <n>                       the cache's page size
    then arrays "<NAME> <rank> <n_0> ... " with their row-major elements:
      K 3 T_k H_kv d_k, V 3 T_k H_kv d_v     the float32 rows appended
      K_CODES 3 T_k H_kv d_k, V_CODES ...    the elements (int8: -127..127; FP8: the byte 0..255)
      K_SCALES 2 T_k H_kv, V_SCALES 2 ...    the scales (float32)
      Q 3 T_q H d_k                          float32
      OUT 3 T_q H d_v                        float64 attention on the dequantized K and V
    end
"""
import math
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def e4m3_values():
    v = []
    for code in range(256):
        s, e, m = code >> 7, (code >> 3) & 15, code & 7
        if e == 15 and m == 7:
            x = math.nan
        elif e == 0:
            x = m / 8 * 2.0 ** -6
        else:
            x = (1 + m / 8) * 2.0 ** (e - 7)
        v.append(-x if s else x)
    return np.array(v, dtype=np.float64)


def e5m2_values():
    return (np.arange(256, dtype=np.uint16) << 8).astype(np.uint16).view(np.float16).astype(np.float64)


FORMATS = {
    "int8": (127.0, None),
    "float8_e4m3fn": (448.0, e4m3_values()),
    "float8_e5m2": (57344.0, e5m2_values()),
}


def nearest_code(y, values):
    """The code of the element nearest y (float32), ties to the even code, zero signed as y."""
    finite = np.isfinite(values)
    d = np.full(256, np.inf)
    d[finite] = np.abs(values[finite] - np.float64(y))
    best = d.min()
    ties = [c for c in range(256) if d[c] == best]
    if len(ties) > 1:
        if all(values[c] == 0 for c in ties):
            ties = [c for c in ties if (c >= 128) == bool(np.signbit(y))]
        else:
            ties = [c for c in ties if c % 2 == 0]
    assert len(ties) == 1, (y, ties)
    return ties[0]


def quantize(x, fmt):
    """x: [T, H, d] float32 -> codes [T, H, d] (int), scales [T, H] float32, dequantized float32."""
    top, values = FORMATS[fmt]
    T, H, d = x.shape
    codes = np.zeros((T, H, d), dtype=np.int64)
    scales = np.zeros((T, H), dtype=np.float32)
    deq = np.zeros((T, H, d), dtype=np.float32)
    for t in range(T):
        for h in range(H):
            row = x[t, h].astype(np.float32)
            scale = np.float32(np.abs(row).max()) / np.float32(top) if d else np.float32(0)
            scales[t, h] = scale
            for c in range(d):
                if scale == 0:
                    code, value = 0, 0.0
                else:
                    y = np.float32(row[c]) / np.float32(scale)
                    if values is None:
                        value = float(np.round(np.clip(np.float64(y), -127, 127)))
                        code = int(value)
                    else:
                        code = nearest_code(y, values)
                        value = values[code]
                codes[t, h, c] = code
                deq[t, h, c] = np.float32(scale) * np.float32(value)
    return codes, scales, deq


def realistic(rng, T, H, d, outliers):
    """Gaussian rows with a few outlier channels (x10), as LLM keys have."""
    x = rng.standard_normal((T, H, d)).astype(np.float32)
    for h in range(H):
        for c in rng.choice(d, outliers, replace=False):
            x[:, h, c] *= 10
    return x


def attention(q, k, v, causal, scale):
    """q [T_q, H, d_k], k [T_k, H_kv, d_k], v [T_k, H_kv, d_v], float64; bottom-right causal."""
    Q = torch.tensor(q, dtype=torch.float64).permute(1, 0, 2)
    K = torch.tensor(k, dtype=torch.float64).permute(1, 0, 2)
    V = torch.tensor(v, dtype=torch.float64).permute(1, 0, 2)
    H, Hkv = Q.shape[0], K.shape[0]
    K = K.repeat_interleave(H // Hkv, dim=0)
    V = V.repeat_interleave(H // Hkv, dim=0)
    s = scale * Q @ K.transpose(1, 2)
    tq, tk = s.shape[1], s.shape[2]
    if causal:
        i = torch.arange(tq).unsqueeze(1)
        j = torch.arange(tk).unsqueeze(0)
        s = s.masked_fill(j > i + (tk - tq), -math.inf)
    return (torch.softmax(s, dim=-1) @ V).permute(1, 0, 2).numpy()


def write_array(f, name, a, integer=False):
    f.write(f"{name} {a.ndim} " + " ".join(str(n) for n in a.shape) + "\n")
    flat = a.reshape(-1)
    for i in range(0, len(flat), 8):
        if integer:
            f.write(" ".join(str(int(x)) for x in flat[i:i + 8]) + "\n")
        else:
            f.write(" ".join(repr(float(x)) for x in flat[i:i + 8]) + "\n")


def case(name, fmt, seed, T_k, T_q, H, H_kv, d_k, d_v, page, causal, special=False):
    rng = np.random.default_rng(seed)
    k = realistic(rng, T_k, H_kv, d_k, 2)
    v = realistic(rng, T_k, H_kv, d_v, 1)
    if special:  # a token of zeros, one of tiny values (FP8 subnormals), one of a single spike
        k[1] = 0
        v[1] = 0
        k[2] *= 1e-30
        k[3] = 0.01
        k[3, :, 0] = 1000
    q = rng.standard_normal((T_q, H, d_k)).astype(np.float32)
    kc, ks, kd = quantize(k, fmt)
    vc, vs, vd = quantize(v, fmt)
    scale = 1 / math.sqrt(d_k)
    out = attention(q, kd, vd, causal, scale)
    with open(os.path.join(HERE, name + ".txt"), "w") as f:
        f.write("eigen_attention_quantized_golden 1\n")
        f.write(f"format {fmt}\ncausal {int(causal)}\nscale default\npage {page}\n")
        write_array(f, "K", k)
        write_array(f, "V", v)
        write_array(f, "K_CODES", kc, True)
        write_array(f, "V_CODES", vc, True)
        write_array(f, "K_SCALES", ks)
        write_array(f, "V_SCALES", vs)
        write_array(f, "Q", q)
        write_array(f, "OUT", out)
        f.write("end\n")


for i, fmt in enumerate(FORMATS):
    short = {"int8": "int8", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}[fmt]
    # GQA 8 over 2, one new token over 70 keys in pages of 16 (five pages, the last partly filled).
    case(f"{short}_gqa", fmt, 100 + i, 70, 1, 8, 2, 32, 24, 16, False, special=True)
    # Three new tokens, causal, over 260 keys (two split-K chunks), MQA.
    case(f"{short}_causal_mqa", fmt, 200 + i, 260, 3, 4, 1, 16, 16, 32, True)
