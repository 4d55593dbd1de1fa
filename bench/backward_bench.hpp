// SPDX-License-Identifier: MIT
// What the sections of eigen_attention_backward_bench share (backward_bench.cpp says what it
// measures): the options, the results, and the entry points of the sections, one file each:
//   backward_bench.cpp         the command line, the header, the summary table, main
//   backward_bench_rates.cpp   forward, backward and naive backward rates at T = 4096
//   backward_bench_memory.cpp  extra peak memory of one backward call, in a forked child
// It reuses eigen_attention_bench's helpers (attention_bench.hpp: inputs, formatting, the square
// GEMM of attention_bench_gemm.cpp) and the yardsticks of baseline.cpp (the naive backward).
#pragma once

#include "attention_bench.hpp"

namespace ea_backward_bench {

using bench::measure;
using bench::resolved_name;
using bench::Timing;
using ea_attention_bench::fill;
using ea_attention_bench::fmt;
using ea_attention_bench::g_sink;
using ea_attention_bench::Inputs;
using ea_attention_bench::kMiB;
using ea_attention_bench::kNaN;
using ea_attention_bench::Mat;
using ea_attention_bench::print_row;

template <typename T>
using Vec = ea::Vector<T>;

// The targets.
inline constexpr double kTargetBackwardOverForward = 0.8;  // backward / forward GFLOP/s, 1 thread
inline constexpr double kTargetSpeedup = 1.8;              // backward, 2 threads / 1 thread
inline constexpr double kTargetMemoryMiB = 64;             // extra peak memory of one backward call

struct Args {
  std::vector<Idx> ts{4096};
  std::vector<Idx> ds{64, 128};
  std::vector<std::string> types{"float"};
  std::vector<int> threads{1, 2};
  std::vector<int> causal{0, 1};
  std::string kernel = "auto";
  int reps = 5;          // measured runs per config (0: 3..5, about `seconds` per config)
  double seconds = 1.0;  // one run lasts about seconds / 5
  Idx naive_max_t = 8192;
  Idx gemm_n = 2048;
  bool rates = true, memory = true;
  Idx memory_t = 65536, memory_d = 64;
  bool smoke = false;
};

// Forward FLOPs: 4 T^2 d (half when causal), as eigen_attention_bench counts them.
inline double forward_flops(Idx t, Idx d, bool causal) {
  return ea_attention_bench::attention_flops(t, d, causal);
}

// Backward FLOPs: 10 T^2 d (half when causal): the five T x T x d products of a backward that
// recomputes the weights (S = Q K^T, dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q).
inline double backward_flops(Idx t, Idx d, bool causal) {
  const double f = 10.0 * double(t) * double(t) * double(d);
  return causal ? f / 2 : f;
}

inline double gflops(double flops, const Timing& t) { return flops / t.median / 1e9; }

// The gradients' check against the naive backward: max |ours - naive| / max |naive| over dQ, dK
// and dV, each relative to its own largest entry.
template <typename T>
double tolerance() {
  return sizeof(T) == 4 ? 1e-4 : 1e-9;
}

// One row of the rates table: one (type, d, causal, threads, T).
struct RateRow {
  std::string type;
  Idx d = 0, t = 0;
  bool causal = false;
  int threads = 1;
  double fwd_gflops = kNaN, bwd_gflops = kNaN, naive_gflops = kNaN;
  double fwd_s = kNaN, bwd_s = kNaN;
  double bwd_over_fwd = kNaN, bwd_speedup = kNaN, fwd_speedup = kNaN;  // speed-ups over 1 thread
  double rel_diff = kNaN;             // against the naive backward (1-thread rows), NaN when not checked
  bool same_as_first_threads = true;  // gradients bitwise equal to those of the first thread count
};

// The extra peak memory of one backward call, measured in a forked child.
struct MemoryReport {
  int ok = 0;
  int hwm_reset = 0;       // /proc/self/clear_refs reset the peak after the forward
  long base_kib = 0;       // resident after the buffers were written, before any library call
  long after_fwd_kib = 0;  // resident after the forward (its workspace stays)
  long peak_kib = 0;       // peak resident during the backward (VmHWM)
  double fwd_s = 0, bwd_s = 0;
  char error[256] = {};
};

struct MemoryRow {
  std::string type;
  Idx t = 0, d = 0;
  int threads = 1;
  MemoryReport r;
  double extra_mib() const { return r.ok ? double(r.peak_kib - r.base_kib) / 1024.0 : kNaN; }
  double forward_retained_mib() const { return r.ok ? double(r.after_fwd_kib - r.base_kib) / 1024.0 : kNaN; }
  double buffers_mib() const;  // Q, K, V, out, dout, dQ, dK, dV and lse
};

// The rates of one scalar type (backward_bench_rates.cpp); false when a check failed.
// gemm_rate: the square GEMM's GFLOP/s of the same type (the bwd/gem column).
template <typename T>
bool rates_table(const Args& a, const char* type, double gemm_rate, std::vector<RateRow>& rows);

// The memory children (backward_bench_memory.cpp); run them before this process has started the
// library's threads (a fork copies the pool's state but not its threads).
template <typename T>
MemoryRow backward_memory(const Args& a, const char* type, int threads);
void print_memory(const std::vector<MemoryRow>& rows);

}  // namespace ea_backward_bench
