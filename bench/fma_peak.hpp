// SPDX-License-Identifier: MIT
// The shared yardstick of the benchmarks: the host's own peak rate of fused multiply-adds,
// measured in the same run as the rates it judges, on 1 and more threads (fma_peak.cpp).
#pragma once

#include <string>

namespace eabench {

/// The peak of one thread count: GFLOP/s of float and of double FMAs (NaN: no FMA unit known
/// here, or not an x86-64 build).
struct FmaPeak {
  int threads = 1;
  double float_gflops = 0, double_gflops = 0;
};

/// The widest FMA instruction this CPU and its OS run, as the peak measures it, e.g.
/// "vfmadd231ps/pd zmm" (AVX-512F), "vfmadd231ps/pd ymm" (AVX2 + FMA), or "none".
std::string fma_unit();

/// The peak on `threads` threads at once (each a loop of 12 independent vfmadd231 on one
/// register width, which hides the instruction's latency on every x86-64 core known: the loop
/// runs at the units' issue rate), the median of 5 runs of about seconds / 5 each. 2 FLOPs per
/// lane and instruction; the threads' rates add up.
FmaPeak measure_fma_peak(int threads, double seconds);

}  // namespace eabench
