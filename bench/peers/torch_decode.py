#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""PyTorch peer of eigen_attention_decode_bench: one decode step, the same shapes, the same bytes.

One sequence, T_q = 1 new token, H query heads against T_k cached keys and values of H_kv KV
heads (GQA, H / H_kv query heads per KV head), head dim d. The cache is a contiguous tensor
[H_kv, T_k, d] for K and for V (torch's natural [B, H, T, d] with B = 1: each head's keys
contiguous, like the bench's "contig HND" row); torch has no paged cache. Two ways to GQA:
  grouped  the queries reshaped into groups, q [H_kv, H/H_kv, d]:
           softmax(q @ k^T * scale, -1) @ v, batched over the H_kv KV heads: K and V read once;
  repeat   K and V expanded to H heads with repeat_interleave(H/H_kv, dim=0) (a copy, as a model
           that calls an MHA kernel does), then softmax(q @ k^T * scale, -1) @ v with q [H, 1, d]:
           the copy is timed, so K and V are read once and written and read again H/H_kv times.
bytes/step = 2 * T_k * H_kv * d * sizeof(dtype) (what a decode step must read; the same count as
eigen_attention_decode_bench, whatever an implementation reads more); GB/s = bytes / time / 1e9.
float32 and bfloat16 (arithmetic as torch does it for that dtype). Times are medians of
--reps runs (default 7) after a warm-up (torch_sdpa.py's measure()). The thread count goes to
torch.set_num_threads and, when torch's BLAS is OpenBLAS, to openblas_set_num_threads too.

Run with /usr/bin/python3 (Debian's python3-torch). See bench/README.md.
"""

import os

# Before torch loads its BLAS: Debian's OpenBLAS otherwise runs SSE3 kernels on this CPU (it
# does not know it). Has no effect when the BLAS that torch loads is not OpenBLAS (printed below).
os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"

import argparse  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

from torch_sdpa import int_list, measure, print_machine  # noqa: E402
from torch_sdpa_backward import openblas, set_threads  # noqa: E402

DTYPES = {"float": torch.float32, "bf16": torch.bfloat16}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--t-k", type=int_list, default=[32768], help="T_k values (comma list; default 32768)")
    p.add_argument("--shape", default="32,8,128", help="H,H_kv,d (default 32,8,128)")
    p.add_argument("--type", default="float,bf16", help="float, bf16 or both (default both)")
    p.add_argument("--threads", type=int_list, default=[1, 2], help="torch.set_num_threads values")
    p.add_argument("--methods", default="grouped,repeat", help="grouped, repeat or both")
    p.add_argument("--reps", type=int, default=7, help="measured runs (default 7)")
    p.add_argument("--seconds", type=float, default=0.5, help="a run lasts about SECONDS / 5 (default 0.5)")
    p.add_argument("--quick", action="store_true", help="T_k = 2048, 5 runs, --seconds 0.1")
    a = p.parse_args()
    try:
        a.heads, a.kv_heads, a.d = (int(x) for x in a.shape.split(","))
    except ValueError:
        p.error("--shape wants H,H_kv,d, not %r" % a.shape)
    if a.heads % a.kv_heads != 0:
        p.error("--shape: H must be a multiple of H_kv")
    a.type = [x for x in a.type.split(",") if x]
    for x in a.type:
        if x not in DTYPES:
            p.error("unknown type %r" % x)
    a.methods = [x for x in a.methods.split(",") if x]
    if not set(a.methods) <= {"grouped", "repeat"}:
        p.error("unknown method in %r" % ",".join(a.methods))
    if a.quick:
        a.t_k, a.reps, a.seconds = [2048], 5, 0.1
    if a.reps < 1:
        p.error("--reps must be >= 1")
    return a


def grouped(q, k, v, scale):
    """q [H_kv, G, d], k and v [H_kv, T_k, d] -> [H_kv, G, d]."""
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    return torch.matmul(torch.softmax(s, dim=-1), v)


def repeated(q, k, v, scale, group):
    """q [H, 1, d]; k and v [H_kv, T_k, d] expanded to H heads by repeat_interleave -> [H, 1, d]."""
    kk = k.repeat_interleave(group, dim=0)
    vv = v.repeat_interleave(group, dim=0)
    s = torch.matmul(q, kk.transpose(-2, -1)) * scale
    return torch.matmul(torch.softmax(s, dim=-1), vv)


def f(x, p=1):
    return "-" if x is None or math.isnan(x) else "%.*f" % (p, x)


def main():
    a = parse_args()
    torch.zeros(2, 2) @ torch.zeros(2, 2)  # loads the BLAS
    blas = openblas()
    H, Hkv, d = a.heads, a.kv_heads, a.d
    G = H // Hkv
    print_machine("q @ k^T, softmax, @ v (torch.matmul)", title="PyTorch decode peer",
                  flops="bytes/step = 2 * T_k * H_kv * d * sizeof(dtype) (K and V read once); flops/step =\n"
                        "            4 * H * T_k * d (not counted in GB/s); median of %d runs after a warm-up" % a.reps,
                  notes=["  shape     H = %d, H_kv = %d (GQA %d), d = %d, T_q = 1, K and V [H_kv, T_k, d] contiguous"
                         % (H, Hkv, G, d),
                         "  GQA       grouped: q reshaped to [H_kv, %d, d] (K/V read once); repeat: K/V\n"
                         "            repeat_interleave'd to H heads inside the timed call, q [H, 1, d]" % G,
                         "  threads   thr = torch.set_num_threads(thr)%s" % (
                             ", and openblas_set_num_threads(thr) (torch does not set OpenBLAS's own pool)"
                             if blas else "")])
    header = "%-6s %-8s %3s %6s | %9s %9s %9s | %9s" % ("type", "gqa", "thr", "T_k", "ms/step", "tok/s", "GB/s",
                                                         "max|diff|")
    torch.manual_seed(0)
    with torch.no_grad():
        for type_name in a.type:
            dtype = DTYPES[type_name]
            for T in a.t_k:
                print(header)
                # Uniform in [-1, 1), as the C++ bench's inputs (not the same numbers).
                k32 = torch.rand(Hkv, T, d) * 2 - 1
                v32 = torch.rand(Hkv, T, d) * 2 - 1
                q32 = torch.rand(H, 1, d) * 2 - 1
                k, v, q = k32.to(dtype), v32.to(dtype), q32.to(dtype)
                scale = 1.0 / math.sqrt(d)
                nbytes = 2.0 * T * Hkv * d * k.element_size()
                # The reference: grouped in float64 from the same (rounded) inputs.
                ref = grouped(q.double().reshape(Hkv, G, d), k.double(), v.double(), scale).reshape(H, d)
                for threads in a.threads:
                    got, blas_threads = set_threads(threads, blas)
                    for method in a.methods:
                        if method == "grouped":
                            qg = q.reshape(Hkv, G, d)

                            def call():
                                return grouped(qg, k, v, scale)
                        else:
                            def call():
                                return repeated(q, k, v, scale, G)
                        t, reps, _ = measure(call, a.reps, a.seconds)
                        out = call().reshape(H, d)
                        diff = float((out.double() - ref).abs().max())
                        print("%-6s %-8s %3d %6d | %9s %9s %9s | %9s%s" % (
                            type_name, method, got, T, f(t * 1e3, 3), f(1 / t), f(nbytes / t / 1e9, 2),
                            "%.1e" % diff,
                            "" if got == threads and blas_threads in (None, threads) else
                            "  (asked for %d threads; OpenBLAS: %s)" % (threads, blas_threads)))
                        sys.stdout.flush()
                del k, v, q, k32, v32, q32, ref
                print()


if __name__ == "__main__":
    main()
