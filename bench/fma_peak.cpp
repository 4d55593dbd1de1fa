// SPDX-License-Identifier: MIT
// The host's FMA peak (fma_peak.hpp): inline assembly, so that the loop is exactly the
// instructions named and nothing the compiler chose; each loop compiled with its own target
// attribute and called only when __builtin_cpu_supports says that this CPU (and its OS) has
// every feature it needs.
#include "fma_peak.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

namespace eabench {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
using LoopFn = void (*)(long, const void*);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define EA_FMA_X86 1
// Iterations of 12 instructions per call of a loop.
constexpr long kIterations = 1 << 16;
#define EA_FMA_R12(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11)
#define EA_FMA_ZERO(i) "vpxor %%xmm" #i ", %%xmm" #i ", %%xmm" #i "\n\t"
#define EA_FMA_CLOBBERS                                                                                   \
  "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", \
      "xmm12", "xmm13"
// The sources: xmm12, xmm13 (and their wider registers) = 1.0 of the loop's type (at `ones`), so
// that the accumulators only grow by whole numbers and never reach a denormal or an infinity.
#define EA_FMA_LOOP(name, isa, body, reg)                                      \
  __attribute__((target(isa), noinline)) void name(long n, const void* ones) { \
    asm volatile(EA_FMA_R12(EA_FMA_ZERO) "vmovups (%[ones]), %%" reg           \
                                         "12\n\t"                              \
                                         "vmovups (%[ones]), %%" reg           \
                                         "13\n\t"                              \
                                         ".p2align 5\n1:\n\t" body             \
                                         "dec %[n]\n\tjnz 1b\n\t"              \
                                         "vzeroupper\n\t"                      \
                 : [n] "+r"(n)                                                 \
                 : [ones] "r"(ones)                                            \
                 : EA_FMA_CLOBBERS, "memory");                                 \
  }
#define EA_FMA_PS_Z(i) "vfmadd231ps %%zmm13, %%zmm12, %%zmm" #i "\n\t"
#define EA_FMA_PD_Z(i) "vfmadd231pd %%zmm13, %%zmm12, %%zmm" #i "\n\t"
#define EA_FMA_PS_Y(i) "vfmadd231ps %%ymm13, %%ymm12, %%ymm" #i "\n\t"
#define EA_FMA_PD_Y(i) "vfmadd231pd %%ymm13, %%ymm12, %%ymm" #i "\n\t"
EA_FMA_LOOP(fma_ps_zmm, "avx512f", EA_FMA_R12(EA_FMA_PS_Z), "zmm")
EA_FMA_LOOP(fma_pd_zmm, "avx512f", EA_FMA_R12(EA_FMA_PD_Z), "zmm")
EA_FMA_LOOP(fma_ps_ymm, "avx2,fma", EA_FMA_R12(EA_FMA_PS_Y), "ymm")
EA_FMA_LOOP(fma_pd_ymm, "avx2,fma", EA_FMA_R12(EA_FMA_PD_Y), "ymm")
#else
#define EA_FMA_X86 0
constexpr long kIterations = 0;
#endif

/// The loops of the widest unit here and their FLOPs per instruction (float, double).
struct Unit {
  const char* name = "none";
  LoopFn ps = nullptr, pd = nullptr;
  double ps_flops = 0, pd_flops = 0;
};

Unit unit_here() {
#if EA_FMA_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return {"vfmadd231ps/pd zmm", fma_ps_zmm, fma_pd_zmm, 32, 16};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return {"vfmadd231ps/pd ymm", fma_ps_ymm, fma_pd_ymm, 16, 8};
#endif
  return {};
}

/// GFLOP/s of `loop` on `threads` threads at once: each thread times its own calls between a
/// common start and about `seconds` later; their rates add up.
double rate(LoopFn loop, bool is_double, double flops_per_instruction, int threads, double seconds) {
  using Clock = std::chrono::steady_clock;
  std::atomic<int> ready{0};
  std::vector<double> rates(static_cast<std::size_t>(threads), 0.0);
  alignas(64) static const float ones_f[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  alignas(64) static const double ones_d[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  const void* ones = is_double ? static_cast<const void*>(ones_d) : static_cast<const void*>(ones_f);
  const auto body = [&](int t) {
    loop(kIterations, ones);  // warm up: the unit's clock, the page of the loop
    ready.fetch_add(1);
    while (ready.load() < threads) {
    }
    const Clock::time_point t0 = Clock::now();
    long calls = 0;
    double elapsed = 0;
    do {
      loop(kIterations, ones);
      ++calls;
      elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (elapsed < seconds);
    rates[static_cast<std::size_t>(t)] =
        double(calls) * kIterations * 12 * flops_per_instruction / elapsed / 1e9;
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(body, t);
  body(0);
  for (std::thread& th : pool) th.join();
  double sum = 0;
  for (double r : rates) sum += r;
  return sum;
}

double median_rate(LoopFn loop, bool is_double, double flops, int threads, double seconds) {
  if (loop == nullptr) return kNaN;
  std::vector<double> runs;
  for (int i = 0; i < 5; ++i) runs.push_back(rate(loop, is_double, flops, threads, seconds / 5));
  std::sort(runs.begin(), runs.end());
  return runs[2];
}

}  // namespace

std::string fma_unit() { return unit_here().name; }

FmaPeak measure_fma_peak(int threads, double seconds) {
  const Unit u = unit_here();
  FmaPeak p;
  p.threads = std::max(threads, 1);
  p.float_gflops = median_rate(u.ps, false, u.ps_flops, p.threads, seconds);
  p.double_gflops = median_rate(u.pd, true, u.pd_flops, p.threads, seconds);
  return p;
}

}  // namespace eabench
