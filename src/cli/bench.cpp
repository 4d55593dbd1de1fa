// SPDX-License-Identifier: MIT
// eigen-attention bench: a short throughput table for this machine.
#include <EigenAttention/EigenAttention.hpp>
#include <EigenAttention/MultiHead.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include "../index.hpp"
#include "commands.hpp"
#include "util.hpp"

namespace EigenAttention {
namespace cli {
namespace {

// Uniform in [-1, 1), the same numbers everywhere (SplitMix64).
std::vector<float> random_values(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  SplitMix64(seed).fill(v);
  return v;
}

// Median seconds of the calls of f made in about `budget` seconds (at least 3), after a warm-up.
template <class F>
double median_seconds(double budget, F&& f) {
  using clock = std::chrono::steady_clock;
  f();
  std::vector<double> t;
  const auto start = clock::now();
  while (t.size() < 3 ||
         (std::chrono::duration<double>(clock::now() - start).count() < budget && t.size() < 1000)) {
    const auto t0 = clock::now();
    f();
    t.push_back(std::chrono::duration<double>(clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t.size() % 2 ? t[t.size() / 2] : 0.5 * (t[t.size() / 2 - 1] + t[t.size() / 2]);
}

}  // namespace

int bench_command(const BenchArgs& args) {
  constexpr index_t d = 64;
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  const double budget = args.quick ? 0.05 : 0.25;
  std::vector<int> thread_counts{1};
  if (hardware > 1) thread_counts.push_back(0);

  std::printf(
      "eigen-attention bench: one head, T_q = T_k = T, d = %ld, float, kernel %s, %u hardware thread%s\n", d,
      kernel_name(auto_kernel()), hardware, hardware == 1 ? "" : "s");
  std::printf("  %-11s %5s %8s %10s %9s\n", "call", "T", "threads", "time/ms", "GFLOP/s");
  std::fflush(stdout);
  for (const bool decomposed : {false, true}) {
    for (const index_t T : args.quick ? std::vector<index_t>{256, 512} : std::vector<index_t>{1024, 2048}) {
      const std::vector<float> q = random_values(std::size_t(T * d), 1),
                               k = random_values(std::size_t(T * d), 2),
                               v = random_values(std::size_t(T * d), 3);
      std::vector<float> out(std::size_t(T * d)), scores(decomposed ? std::size_t(T * T) : 0);
      const auto Q = HeadsView<const float>::bhtd(q.data(), 1, 1, T, d);
      const auto K = HeadsView<const float>::bhtd(k.data(), 1, 1, T, d);
      const auto V = HeadsView<const float>::bhtd(v.data(), 1, 1, T, d);
      const auto O = HeadsView<float>::bhtd(out.data(), 1, 1, T, d);
      const auto S = HeadsView<float>::bhtd(scores.data(), 1, 1, T, T);
      for (const int threads : thread_counts) {
        Options opt;
        opt.threads = threads;
        const double seconds = median_seconds(budget, [&] {
          if (decomposed) {
            attention_heads_decomposed_into(Q, K, V, S, O, opt);
          } else {
            attention_heads_into(Q, K, V, O, opt);
          }
        });
        const double flops = 4.0 * double(T) * double(T) * double(d);
        std::printf("  %-11s %5ld %8u %10.3f %9.1f\n", decomposed ? "decomposed" : "fused", T,
                    threads == 0 ? hardware : 1u, seconds * 1e3, flops / seconds * 1e-9);
        std::fflush(stdout);
      }
    }
  }
  std::printf(
      "GFLOP/s = 4 T^2 d / time (Q K^T and SCORES V); time: the median of the calls made in %.2f s.\n"
      "fused: attention_heads_into() (ATTN only, never forms T x T); decomposed: "
      "attention_heads_decomposed_into()\n"
      "(also writes the T x T weights).\n",
      budget);
  return 0;
}

}  // namespace cli
}  // namespace EigenAttention
