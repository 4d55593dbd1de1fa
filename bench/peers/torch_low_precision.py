#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""PyTorch peer of eigen_attention_low_precision_bench: attention on bfloat16 and float32 inputs.

For T_q = T_k = T and d_k = d_v = d, batch 1 and one head (tensors shaped (1, T, d)), per
(d, causal, threads, T), under torch.no_grad():
  plain  torch.softmax(q @ k^T * scale [masked], -1) @ v (torch_sdpa.py's plain(): the causal mask,
         a T x T bool tensor built once outside the timing, applied by masked_fill(-inf)), in
         torch.bfloat16 (the arithmetic torch does for that dtype: its matmul and softmax kernels,
         every intermediate tensor a bfloat16) and in torch.float32 for reference.
torch 1.13 (Debian's python3-torch) has no public F.scaled_dot_product_attention, so the
expression is written out. The bfloat16 inputs are the float32 ones rounded (.to(torch.bfloat16),
outside the timing). GFLOP/s count 4 * T * T * d FLOPs per call (half when causal), as the C++
bench does; times are medians of --reps runs (default 5) after a warm-up (torch_sdpa.py's
measure()). The thread count goes to torch.set_num_threads and, when torch's BLAS is OpenBLAS, to
openblas_set_num_threads too.

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

from torch_sdpa import int_list, measure, plain, print_machine  # noqa: E402
from torch_sdpa_backward import openblas, set_threads  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "float": torch.float32}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--t", "--T", type=int_list, default=[4096], help="T values (comma list; default 4096)")
    p.add_argument("--d", type=int_list, default=[64, 128], help="d values (comma list; default 64,128)")
    p.add_argument("--type", default="bf16,float", help="bf16, float or both (default both)")
    p.add_argument("--threads", type=int_list, default=[1, 2], help="torch.set_num_threads values (default 1,2)")
    p.add_argument("--causal", type=int_list, default=[0, 1], help="0, 1 or both (default both)")
    p.add_argument("--reps", type=int, default=5, help="measured runs (default 5; 0 = 3..5 by --seconds)")
    p.add_argument("--seconds", type=float, default=1.0, help="a run lasts about SECONDS / 5 (default 1)")
    p.add_argument("--quick", action="store_true", help="T = 512, d = 64, 3 runs, --seconds 0.2")
    p.add_argument("--csv", action="store_true", help="also print CSV after the tables")
    a = p.parse_args()
    a.type = [x for x in a.type.split(",") if x]
    for x in a.type:
        if x not in DTYPES:
            p.error("unknown type %r" % x)
    if a.quick:
        a.t, a.d, a.reps, a.seconds = [512], [64], 3, 0.2
    return a


def f(x, p=1):
    return "-" if x is None or math.isnan(x) else "%.*f" % (p, x)


def main():
    a = parse_args()
    torch.zeros(2, 2) @ torch.zeros(2, 2)  # loads the BLAS
    blas = openblas()
    print_machine("softmax(q @ k^T * scale) @ v (plain expression)", title="PyTorch low-precision peer",
                  flops="4*T*T*d per call (half when causal); median of %s after a warm-up"
                        % ("%d runs" % a.reps if a.reps > 0 else "3..5 runs"),
                  notes=["  mkldnn    torch.backends.mkldnn.is_available() = %s (torch 1.13's bfloat16 matmul on\n"
                         "            CPU goes to oneDNN when it is)" % torch.backends.mkldnn.is_available(),
                         "  threads   thr = torch.set_num_threads(thr)%s" % (
                             ", and openblas_set_num_threads(thr) (torch does not set OpenBLAS's own pool)"
                             if blas else ""),
                         "  diff      max|bf16 - float32| over the output, each from its own inputs (bf16 = the\n"
                         "            float32 inputs rounded)"])
    header = "%-6s %4s %3s %3s | %9s %9s | %9s %9s | %10s | %9s" % (
        "T", "d", "cau", "thr", "float ms", "GFLOP/s", "bf16 ms", "GFLOP/s", "bf16/float", "max|diff|")
    csv = ["kind,T,d,causal,threads,float_s,float_gflops,bf16_s,bf16_gflops,bf16_over_float,max_abs_diff"]
    summary = {}  # (T, d, causal, threads) -> {type: GFLOP/s}
    torch.manual_seed(0)
    print(header)
    with torch.no_grad():
        for T in a.t:
            for d in a.d:
                for causal in a.causal:
                    # Uniform in [-1, 1), as the C++ bench's inputs (not the same numbers).
                    q32, k32, v32 = [torch.rand(1, T, d) * 2 - 1 for _ in range(3)]
                    scale = 1.0 / math.sqrt(d)
                    mask = torch.ones(T, T, dtype=torch.bool).triu(1) if causal else None
                    flops = 4.0 * T * T * d / (2 if causal else 1)
                    for threads in a.threads:
                        got, blas_threads = set_threads(threads, blas)
                        secs, outs = {}, {}
                        for type_name in a.type:
                            q, k, v = (x.to(DTYPES[type_name]) for x in (q32, k32, v32))
                            secs[type_name], _, _ = measure(lambda: plain(q, k, v, scale, mask), a.reps, a.seconds)
                            outs[type_name] = plain(q, k, v, scale, mask)
                            del q, k, v
                        g = {t: flops / s / 1e9 for t, s in secs.items()}
                        ratio = g["bf16"] / g["float"] if "bf16" in g and "float" in g else float("nan")
                        diff = (float((outs["bf16"].float() - outs["float"]).abs().max())
                                if len(outs) == 2 else float("nan"))
                        summary[(T, d, causal, got)] = g
                        print("%-6d %4d %3d %3d | %9s %9s | %9s %9s | %10s | %9s%s" % (
                            T, d, causal, got, f(secs.get("float", float("nan")) * 1e3, 2),
                            f(g.get("float", float("nan"))), f(secs.get("bf16", float("nan")) * 1e3, 2),
                            f(g.get("bf16", float("nan"))), f(ratio, 2),
                            "-" if math.isnan(diff) else "%.1e" % diff,
                            "" if got == threads and blas_threads in (None, threads) else
                            "  (asked for %d threads; OpenBLAS: %s)" % (threads, blas_threads)))
                        sys.stdout.flush()
                        csv.append("torch_lp,%d,%d,%d,%d,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g" % (
                            T, d, causal, got, secs.get("float", float("nan")), g.get("float", float("nan")),
                            secs.get("bf16", float("nan")), g.get("bf16", float("nan")), ratio, diff))
                        del outs
                    del q32, k32, v32, mask

    # The same rows as a Markdown table, to paste next to eigen_attention_low_precision_bench's.
    print("\nsummary (Markdown)")
    for T in a.t:
        cols = [(d, c) for d in a.d for c in a.causal]
        print("\n| PyTorch %s, plain expression, T = %d, GFLOP/s | %s |" % (
            torch.__version__, T, " | ".join("d = %d%s" % (d, " causal" if c else "") for d, c in cols)))
        print("|---|%s" % ("---|" * len(cols)))
        for threads in a.threads:
            th = "%d thread%s" % (threads, "" if threads == 1 else "s")
            cells = [summary.get((T, d, c, threads), {}) for d, c in cols]
            for type_name in a.type:
                print("| %s, %s | %s |" % (type_name, th, " | ".join(f(x.get(type_name, float("nan"))) for x in cells)))
            if len(a.type) == 2:
                print("| bf16 / float, %s | %s |" % (th, " | ".join(
                    f(x.get("bf16", float("nan")) / x.get("float", float("nan")), 2) for x in cells)))
    if a.csv:
        print("\n# CSV")
        print("\n".join(csv))


if __name__ == "__main__":
    main()
