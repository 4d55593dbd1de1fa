#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""PyTorch peers of eigen_attention_bench: the same shapes, the same FLOP convention.

Times, for T_q = T_k = T and d_k = d_v = d, batch 1 and one head (tensors shaped (1, T, d)):
  sdpa   torch.nn.functional._scaled_dot_product_attention (torch 1.13's private name; on
         torch >= 2.0 the public scaled_dot_product_attention), is_causal as asked;
  plain  torch.softmax(q @ k^T * scale [masked], -1) @ v, the expression written out, with the
         causal mask (a T x T bool tensor, built once outside the timing) applied by masked_fill.
GFLOP/s count 4 * T * T * d FLOPs per call (half when causal), as eigen_attention_bench does.
Times are medians of 3..5 runs after one warm-up call (see --reps, --seconds).

Run with /usr/bin/python3 (Debian's python3-torch). See bench/README.md.
"""

import os

# Before torch loads its BLAS: Debian's OpenBLAS otherwise runs SSE3 kernels on this CPU (it
# does not know it). Has no effect when the BLAS that torch loads is not OpenBLAS (printed below).
os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"

import argparse  # noqa: E402
import datetime  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def int_list(text):
    try:
        return [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError("expected a comma list of integers: %r" % text)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--t", type=int_list, default=[512, 1024, 2048, 4096, 8192, 16384], help="T values (comma list)")
    p.add_argument("--quick", action="store_true", help="T = 512,1024")
    p.add_argument("--d", type=int_list, default=[64, 128], help="d values (comma list)")
    p.add_argument("--type", default="float,double", help="float, double or both")
    p.add_argument("--threads", type=int_list, default=[1, 2], help="torch.set_num_threads values")
    p.add_argument("--causal", type=int_list, default=[0, 1], help="0, 1 or both")
    p.add_argument("--reps", type=int, default=0, help="measured runs (default 3..5, about --seconds per config)")
    p.add_argument("--seconds", type=float, default=1.0, help="time budget of one config (default 1)")
    p.add_argument("--methods", default="sdpa,plain", help="sdpa, plain or both")
    p.add_argument("--csv", action="store_true", help="also print CSV after the table")
    a = p.parse_args()
    if a.quick:
        a.t = [512, 1024]
    a.type = [x for x in a.type.split(",") if x]
    for x in a.type:
        if x not in ("float", "double"):
            p.error("unknown type %r" % x)
    a.methods = set(x for x in a.methods.split(",") if x)
    if not a.methods <= {"sdpa", "plain"}:
        p.error("unknown method in %r" % ",".join(sorted(a.methods)))
    return a


def sdpa_function():
    """(callable(q, k, v, causal) -> out, name) for this torch."""
    if hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0
        f = F.scaled_dot_product_attention
        return (lambda q, k, v, causal: f(q, k, v, is_causal=causal)), "F.scaled_dot_product_attention"
    # torch 1.13: _scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
    # need_attn_weights=False, is_causal=False) -> (output, attn_weights); weights unspecified
    # unless asked for.
    f = F._scaled_dot_product_attention
    return ((lambda q, k, v, causal: f(q, k, v, attn_mask=None, dropout_p=0.0, need_attn_weights=False,
                                       is_causal=causal)[0]),
            "F._scaled_dot_product_attention")


def plain(q, k, v, scale, mask):
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    if mask is not None:
        s = s.masked_fill(mask, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v)


def measure(call, reps, seconds):
    """Median seconds per call: one warm-up call, then reps runs (3..5 by the budget if 0)."""
    t0 = time.perf_counter()
    call()
    w = max(time.perf_counter() - t0, 1e-7)
    inner = max(1, int(seconds / 5 / w))
    if reps <= 0:
        reps = min(5, max(3, int(seconds / (w * inner))))
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            call()
        samples.append((time.perf_counter() - t0) / inner)
    return statistics.median(samples), reps, inner


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "(unknown)"


def cpu_flags_of_interest():
    """The vector and matrix extensions that matter here (as eigen_attention_bench prints them)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return " ".join(x for x in line.split(":", 1)[1].split()
                                    if x in ("avx2", "fma", "avx512f", "avx512dq", "avx512bw", "avx512vl",
                                             "avx512_bf16", "avx512_fp16") or x.startswith("amx"))
    except OSError:
        pass
    return ""


def loaded_math_libraries():
    """The BLAS/LAPACK/OpenMP shared objects mapped into this process, with their real paths."""
    found = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if path.startswith("/") and re.search(r"blas|lapack|mkl|gomp|iomp|dnnl", os.path.basename(path)):
                    found.add((path, os.path.realpath(path)))
    except OSError:
        pass
    return sorted(found)


def print_machine(sdpa_name, title="PyTorch peers",
                  flops="4*T*T*d per call (half when causal); median of 3..5 runs after a warm-up", notes=()):
    """The header: the machine, torch and its libraries; `notes`, lines printed before the FLOPs."""
    print("%s  %s" % (title, datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")))
    print("  cpu       %s  (%d logical CPUs; %s)" % (cpu_model(), os.cpu_count() or 0, cpu_flags_of_interest()))
    try:
        print("  load      %s (1/5/15 min, at start)" % " ".join(open("/proc/loadavg").read().split()[:3]))
    except OSError:
        pass
    print("  python    %s, torch %s, timing %s" % (platform.python_version(), torch.__version__, sdpa_name))
    print("  env       OPENBLAS_CORETYPE=%s" % os.environ.get("OPENBLAS_CORETYPE"))
    libs = loaded_math_libraries()
    openblas = any("openblas" in real for _, real in libs)
    mkl = any("mkl" in real for _, real in libs)
    for path, real in libs:
        print("  loaded    %s%s" % (path, "" if real == path else " -> " + real))
    if not openblas and not mkl and any("blas" in real for _, real in libs):
        print("  NOTE      torch's BLAS here is not OpenBLAS (nor MKL): OPENBLAS_CORETYPE has no effect, and a\n"
              "            reference (netlib) libblas makes every matmul of both columns slow")
    config = torch.__config__.show().strip().splitlines()
    for line in config:
        line = line.strip()
        if line.startswith("- ") and ("BLAS" in line or "CPU capability" in line or "OpenMP" in line
                                      or "MKL" in line):
            # The build-settings line is long: keep its BLAS fields only.
            if line.startswith("- Build settings:"):
                fields = [f.strip() for f in line[len("- Build settings:"):].split(",")
                          if re.search(r"BLAS|LAPACK|MKL", f)]
                line = "- Build settings: " + ", ".join(fields)
            print("  config    %s" % line[2:])
    print("  threads   torch.get_num_threads() = %d before set_num_threads; parallel backend: %s"
          % (torch.get_num_threads(), next((ln.split(":", 1)[1].strip() for ln in
                                           torch.__config__.parallel_info().splitlines()
                                           if ln.startswith("ATen parallel backend")), "?")))
    for line in notes:
        print(line)
    print("  FLOPs     %s\n" % flops)
    sys.stdout.flush()


def main():
    a = parse_args()
    sdpa, sdpa_name = sdpa_function()
    print_machine(sdpa_name)
    header = "%-6s %4s %3s %3s %6s | %9s %9s %9s | %10s | %9s" % (
        "type", "d", "cau", "thr", "T", "sdpa ms", "sdpa", "plain", "sdpa/plain", "max|diff|")
    units = "%-6s %4s %3s %3s %6s | %9s %9s %9s | %10s | %9s" % ("", "", "", "", "", "", "GFLOP/s", "GFLOP/s", "", "")
    csv = ["kind,type,d,causal,threads,T,sdpa_s,sdpa_gflops,plain_s,plain_gflops,sdpa_over_plain,max_abs_diff,reps"]
    torch.manual_seed(0)
    with torch.no_grad():
        for type_name in a.type:
            dtype = torch.float32 if type_name == "float" else torch.float64
            for d in a.d:
                for causal in a.causal:
                    print(header)
                    print(units)
                    for threads in a.threads:
                        torch.set_num_threads(threads)
                        got = torch.get_num_threads()
                        for T in a.t:
                            q = torch.rand(1, T, d, dtype=dtype) * 2 - 1
                            k = torch.rand(1, T, d, dtype=dtype) * 2 - 1
                            v = torch.rand(1, T, d, dtype=dtype) * 2 - 1
                            scale = 1.0 / math.sqrt(d)
                            mask = torch.ones(T, T, dtype=torch.bool).triu(1) if causal else None
                            flops = 4.0 * T * T * d / (2 if causal else 1)
                            t_sdpa = t_plain = float("nan")
                            reps = 0
                            out_sdpa = out_plain = None
                            if "sdpa" in a.methods:
                                t_sdpa, reps, _ = measure(lambda: sdpa(q, k, v, bool(causal)), a.reps, a.seconds)
                                out_sdpa = sdpa(q, k, v, bool(causal))
                            if "plain" in a.methods:
                                t_plain, reps, _ = measure(lambda: plain(q, k, v, scale, mask), a.reps, a.seconds)
                                out_plain = plain(q, k, v, scale, mask)
                            diff = (float((out_sdpa - out_plain).abs().max())
                                    if out_sdpa is not None and out_plain is not None else float("nan"))
                            g_sdpa, g_plain = flops / t_sdpa / 1e9, flops / t_plain / 1e9

                            def f(x, p=1):
                                return "-" if math.isnan(x) else "%.*f" % (p, x)

                            print("%-6s %4d %3d %3d %6d | %9s %9s %9s | %10s | %9s%s" % (
                                type_name, d, causal, got, T, f(t_sdpa * 1e3, 2), f(g_sdpa), f(g_plain),
                                f(g_sdpa / g_plain, 2), "-" if math.isnan(diff) else "%.1e" % diff,
                                "" if got == threads else "  (asked for %d threads)" % threads))
                            sys.stdout.flush()
                            csv.append("torch,%s,%d,%d,%d,%d,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%d" % (
                                type_name, d, causal, got, T, t_sdpa, g_sdpa, t_plain, g_plain, g_sdpa / g_plain,
                                diff, reps))
                            del q, k, v, mask, out_sdpa, out_plain
                    print()
    if a.csv:
        print("# CSV")
        print("\n".join(csv))


if __name__ == "__main__":
    main()
