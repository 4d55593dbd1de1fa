// SPDX-License-Identifier: MIT
// What the sections of eigen_attention_low_precision_bench share (low_precision_bench.cpp says
// what it measures): the options, the rows, and the entry points of the sections, one file each:
//   low_precision_bench.cpp        the command line, the header, the summary, main
//   low_precision_bench_units.cpp  the vector units: vfmadd231ps against vdpbf16ps (and
//                                  vfmadd231ph), and the widening and narrowing conversions, each
//                                  in a function compiled with its own target attribute
//   low_precision_bench_rates.cpp  float, bfloat16 and half attention at T = 4096, per kernel
//   low_precision_bench_backward.cpp  the float and bfloat16 backward at T = 4096, per kernel
//   low_precision_bench_prefill.cpp   prefill over a float and a bfloat16 paged cache, per kernel
// It reuses eigen_attention_bench's helpers (attention_bench.hpp: inputs, formatting, the square
// GEMM of attention_bench_gemm.cpp, over baseline.cpp).
#pragma once

#include "attention_bench.hpp"

namespace ea_low_precision_bench {

using bench::measure;
using bench::resolved_name;
using bench::Timing;
using ea_attention_bench::fill;
using ea_attention_bench::fmt;
using ea_attention_bench::g_sink;
using ea_attention_bench::kNaN;
using ea_attention_bench::Mat;
using ea_attention_bench::print_row;

using bf16 = Eigen::bfloat16;
using half = Eigen::half;

// The forward's targets: bf16 GFLOP/s over the same-run fused float GFLOP/s (Kernel::Auto). Where
// Auto runs bf16 pairs (avx512bf16, amx): issue 27's 1.5 at 1 thread and issue 14's 1.8 at 2 threads;
// on every other host, issue 27's "no loss" (1.0) at any thread count.
inline constexpr double kTargetOneThread = 1.5;   // 1 thread, d = 64 and 128, causal or not
inline constexpr double kTargetTwoThreads = 1.8;  // 2 threads
inline double forward_target(int threads, bool pairs) {
  if (!pairs) return 1.0;
  return threads == 1 ? kTargetOneThread : threads == 2 ? kTargetTwoThreads : kNaN;
}
inline constexpr double kTargetBackward = 1.3;

struct Args {
  std::vector<Idx> ts{4096};
  std::vector<Idx> ds{64, 128};
  std::vector<int> threads{1, 2};
  std::vector<int> causal{0, 1};
  std::string kernel = "all";  // all: Auto, then every other available kernel but the reference
  int reps = 5;                // measured runs per config (0: 3..5 by `seconds`)
  double seconds = 1.0;        // one run lasts about seconds / 5
  double unit_seconds = 0.5;   // one unit loop: about unit_seconds / 5 per run, 5 runs
  Idx gemm_n = 2048;
  bool units = true, rates = true, backward = true, prefill = true;
  bool quick = false, smoke = false;
};

// FLOPs of one call: 4 T^2 d, half when causal (eigen_attention_bench's convention).
inline double flops(Idx t, Idx d, bool causal) { return ea_attention_bench::attention_flops(t, d, causal); }

// The kernels of the rates table: Auto first, then every available kernel but the reference and
// the one Auto resolves to (it would be the same call twice); or the one --kernel names.
std::vector<ea::Kernel> kernels_to_run(const std::string& name);

// One row of the rates table: one (T, d, causal, threads, kernel). Seconds are medians.
struct Row {
  Idx t = 0, d = 0;
  bool causal = false;
  int threads = 1;
  ea::Kernel kernel = ea::Kernel::Auto;
  double float_s = kNaN, bf16_s = kNaN, half_s = kNaN;
  double cvt_bf16_s = kNaN, cvt_half_s = kNaN;  // float on converted inputs (Auto rows only)
  bool bf16_bits = true, half_bits = true;      // equal to the float call on the widened inputs, rounded
  bool bf16_pairs = false;                      // bf16 on pairs (avx512bf16, amx): bf16_bits is then
                                                // "within 2^-7 of it" (the P-rounded model)
  bool same_as_first_threads = true;            // every output equal to the first thread count's
  double gflops(double s) const { return flops(t, d, causal) / s / 1e9; }
  bool ok() const { return bf16_bits && half_bits && same_as_first_threads; }
};

// The rates table (low_precision_bench_rates.cpp); false when a check failed.
bool rates_table(const Args& a, std::vector<Row>& rows);

// One row of the backward table: one (T, d, causal, threads, kernel). Seconds are medians.
struct BackwardRow {
  Idx t = 0, d = 0;
  bool causal = false;
  int threads = 1;
  ea::Kernel kernel = ea::Kernel::Auto;
  double float_s = kNaN, bf16_s = kNaN;
  bool pairs = false, ok = true;
};
// The backward table (low_precision_bench_backward.cpp); false when a check failed.
bool backward_table(const Args& a, std::vector<BackwardRow>& rows);
// The prefill table (low_precision_bench_prefill.cpp); false when a check failed.
bool prefill_table(const Args& a);

// The units section (low_precision_bench_units.cpp): what it measured, for the summary.
struct UnitsReport {
  double clock_ghz = kNaN;         // from a chain of dependent integer adds (1 cycle each)
  double fma_gflops = kNaN;        // vfmadd231ps zmm, 12 accumulators, 32 FLOPs each
  double dpbf16_gflops = kNaN;     // vdpbf16ps zmm, 12 accumulators, 64 FLOPs each
  double dpbf16_24_gflops = kNaN;  // the same with 24 accumulators (latency cannot limit it)
  bool has_bf16 = false, has_fp16 = false;
};
void units_section(const Args& a, UnitsReport& report);
// AVX512-FP16 on this CPU and OS (CPUID: not every compiler's __builtin_cpu_supports knows it).
bool cpu_has_avx512fp16();

}  // namespace ea_low_precision_bench
