#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""PyTorch peer of eigen_attention_backward_bench: the backward of attention, same shapes, same FLOPs.

For T_q = T_k = T and d_k = d_v = d, batch 1 and one head (tensors shaped (1, T, d)), per
(type, d, causal, threads, T):
  fwd    out = torch.nn.functional._scaled_dot_product_attention(q, k, v, is_causal=...) (torch
         1.13's private name; the public scaled_dot_product_attention on torch >= 2.0) with q, k,
         v requiring gradients, so that autograd records the graph: 4*T*T*d FLOPs (half causal);
  bwd    torch.autograd.grad(out, (q, k, v), dout, retain_graph=True): dQ, dK, dV through the
         graph of ONE forward made before the timing (outside the timed region) and kept by
         retain_graph, so every timed call is the backward alone: 10*T*T*d FLOPs (half causal).
Times are medians of 3..5 runs after one warm-up call (torch_sdpa.py's measure()). The thread
count goes to torch.set_num_threads and, when torch's BLAS is OpenBLAS, to
openblas_set_num_threads too (torch does not set OpenBLAS's own pool, which uses every core).

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

from torch_sdpa import int_list, loaded_math_libraries, measure, print_machine, sdpa_function  # noqa: E402


def openblas():
    """The OpenBLAS that torch loaded (ctypes), or None. torch.set_num_threads sets OpenMP's (and
    MKL's) threads, not OpenBLAS's own pool, which by default uses every core."""
    import ctypes
    for _, real in loaded_math_libraries():
        if "openblas" in os.path.basename(real):
            lib = ctypes.CDLL(real)
            if hasattr(lib, "openblas_set_num_threads") and hasattr(lib, "openblas_get_num_threads"):
                return lib
    return None


def set_threads(n, blas):
    """torch.set_num_threads(n), and OpenBLAS's threads too when torch uses it; what each reports."""
    torch.set_num_threads(n)
    if blas is None:
        return torch.get_num_threads(), None
    blas.openblas_set_num_threads(n)
    return torch.get_num_threads(), blas.openblas_get_num_threads()


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--t", "--T", type=int_list, default=[4096], help="T values (comma list; default 4096)")
    p.add_argument("--d", type=int_list, default=[64, 128], help="d values (comma list)")
    p.add_argument("--type", default="float", help="float, double or both (default float)")
    p.add_argument("--threads", type=int_list, default=[1, 2], help="torch.set_num_threads values")
    p.add_argument("--causal", type=int_list, default=[0, 1], help="0, 1 or both")
    p.add_argument("--reps", type=int, default=0, help="measured runs (default 3..5, about --seconds per config)")
    p.add_argument("--seconds", type=float, default=1.0, help="time budget of one config (default 1)")
    p.add_argument("--csv", action="store_true", help="also print CSV after the table")
    a = p.parse_args()
    a.type = [x for x in a.type.split(",") if x]
    for x in a.type:
        if x not in ("float", "double"):
            p.error("unknown type %r" % x)
    return a


def f(x, p=1):
    return "-" if x is None or math.isnan(x) else "%.*f" % (p, x)


def main():
    a = parse_args()
    sdpa, sdpa_name = sdpa_function()
    torch.zeros(2, 2) @ torch.zeros(2, 2)  # loads the BLAS
    blas = openblas()
    print_machine(sdpa_name, title="PyTorch backward peer",
                  flops="forward 4*T*T*d, backward 10*T*T*d per call (half of each when causal); median of\n"
                        "            3..5 runs after a warm-up. bwd = torch.autograd.grad(out, (q, k, v), dout,\n"
                        "            retain_graph=True) on the graph of one forward made outside the timing",
                  notes=["  threads   thr = torch.set_num_threads(thr)%s" % (
                      ", and openblas_set_num_threads(thr) (torch does not set OpenBLAS's own pool)" if blas else "")])
    header = "%-6s %4s %3s %3s %6s | %9s %9s | %9s %9s | %7s %6s" % (
        "type", "d", "cau", "thr", "T", "fwd ms", "fwd", "bwd ms", "bwd", "bwd/fwd", "bwd x")
    units = "%-6s %4s %3s %3s %6s | %9s %9s | %9s %9s | %7s %6s" % (
        "", "", "", "", "", "", "GFLOP/s", "", "GFLOP/s", "", "")
    csv = ["kind,type,d,causal,threads,T,fwd_s,fwd_gflops,bwd_s,bwd_gflops,bwd_over_fwd,bwd_speedup,reps"]
    summary = {}  # (type, T, d, causal, threads) -> (fwd GFLOP/s, bwd GFLOP/s)
    torch.manual_seed(0)
    for type_name in a.type:
        dtype = torch.float32 if type_name == "float" else torch.float64
        for T in a.t:
            print(header)
            print(units)
            for d in a.d:
                for causal in a.causal:
                    one_thread_bwd = float("nan")
                    for threads in a.threads:
                        got, blas_threads = set_threads(threads, blas)
                        q, k, v = [(torch.rand(1, T, d, dtype=dtype) * 2 - 1).requires_grad_() for _ in range(3)]
                        dout = torch.rand(1, T, d, dtype=dtype) * 2 - 1
                        fwd_flops = 4.0 * T * T * d / (2 if causal else 1)
                        bwd_flops = 2.5 * fwd_flops

                        # The forward, with autograd recording (as a training step runs it).
                        t_fwd, _, _ = measure(lambda: sdpa(q, k, v, bool(causal)), a.reps, a.seconds)
                        # One forward outside the timing; every timed call is one backward through
                        # its graph, kept alive by retain_graph=True.
                        out = sdpa(q, k, v, bool(causal))
                        t_bwd, reps, _ = measure(
                            lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), a.reps, a.seconds)
                        g_fwd, g_bwd = fwd_flops / t_fwd / 1e9, bwd_flops / t_bwd / 1e9
                        if threads == 1:
                            one_thread_bwd = g_bwd
                        speedup = g_bwd / one_thread_bwd if threads != 1 else float("nan")
                        summary[(type_name, T, d, causal, got)] = (g_fwd, g_bwd)
                        print("%-6s %4d %3d %3d %6d | %9s %9s | %9s %9s | %7s %6s%s" % (
                            type_name, d, causal, got, T, f(t_fwd * 1e3, 2), f(g_fwd), f(t_bwd * 1e3, 2), f(g_bwd),
                            f(g_bwd / g_fwd, 2), f(speedup, 2),
                            "" if got == threads and blas_threads in (None, threads) else
                            "  (asked for %d threads; OpenBLAS: %s)" % (threads, blas_threads)))
                        sys.stdout.flush()
                        csv.append("torch_bwd,%s,%d,%d,%d,%d,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%d" % (
                            type_name, d, causal, got, T, t_fwd, g_fwd, t_bwd, g_bwd, g_bwd / g_fwd, speedup, reps))
                        del q, k, v, dout, out
            print()

    # The same rows as a Markdown table, to paste next to eigen_attention_backward_bench's summary.
    print("summary (Markdown)")
    for type_name in a.type:
        for T in a.t:
            cols = [(d, c) for d in a.d for c in a.causal]
            print("\n| PyTorch %s, T = %d, GFLOP/s | %s |" % (
                torch.__version__, T, " | ".join("d = %d%s" % (d, " causal" if c else "") for d, c in cols)))
            print("|---|%s" % ("---|" * len(cols)))
            for label, i in (("forward (autograd recording)", 0), ("backward `autograd.grad` (retain_graph)", 1)):
                for threads in a.threads:
                    cells = [summary.get((type_name, T, d, c, threads)) for d, c in cols]
                    print("| %s, %d thread%s | %s |" % (label, threads, "" if threads == 1 else "s", " | ".join(f(x[i]) if x else "-"
                                                                                 for x in cells)))
    if a.csv:
        print("\n# CSV")
        print("\n".join(csv))


if __name__ == "__main__":
    main()
