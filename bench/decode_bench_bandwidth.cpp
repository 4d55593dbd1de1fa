// SPDX-License-Identifier: MIT
// eigen_attention_decode_bench, section 1: the streaming read bandwidth of this machine, the
// yardstick of every GB/s figure of the other sections. A buffer of the same bytes as a decode
// step reads is summed: by a hand loop of SSE2 (the x86-64 baseline this file is compiled for)
// with eight independent accumulators, and by Eigen's .sum(); on 1 thread, and on N threads each
// summing a contiguous 1/N of it (the calling thread is one of them; std::thread for the others,
// started inside the timed region).
#include "decode_bench.hpp"

#include <thread>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ea_decode_bench {

namespace {

float sum_hand(const float* p, Idx n) {
  Idx i = 0;
  float total = 0;
#if defined(__SSE2__)
  // Eight named accumulators (an array of them would live in memory at -O2).
  __m128 a0 = _mm_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm_add_ps(a0, _mm_loadu_ps(p + i));
    a1 = _mm_add_ps(a1, _mm_loadu_ps(p + i + 4));
    a2 = _mm_add_ps(a2, _mm_loadu_ps(p + i + 8));
    a3 = _mm_add_ps(a3, _mm_loadu_ps(p + i + 12));
    a4 = _mm_add_ps(a4, _mm_loadu_ps(p + i + 16));
    a5 = _mm_add_ps(a5, _mm_loadu_ps(p + i + 20));
    a6 = _mm_add_ps(a6, _mm_loadu_ps(p + i + 24));
    a7 = _mm_add_ps(a7, _mm_loadu_ps(p + i + 28));
  }
  const __m128 s = _mm_add_ps(_mm_add_ps(_mm_add_ps(a0, a1), _mm_add_ps(a2, a3)),
                              _mm_add_ps(_mm_add_ps(a4, a5), _mm_add_ps(a6, a7)));
  float lanes[4];
  _mm_storeu_ps(lanes, s);
  total = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
#else
  float acc[8] = {};
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += p[i + j];
  for (float x : acc) total += x;
#endif
  for (; i < n; ++i) total += p[i];
  return total;
}

float sum_part(const float* p, Idx n, bool eigen) {
  return eigen ? Eigen::Map<const Eigen::ArrayXf>(p, n).sum() : sum_hand(p, n);
}

}  // namespace

double stream_sum(const float* p, Idx n, int threads, bool eigen) {
  if (threads <= 1) return sum_part(p, n, eigen);
  // Parts of whole 64-byte lines.
  const Idx part = (n / threads + 15) / 16 * 16;
  std::vector<float> sums(static_cast<std::size_t>(threads), 0.0f);
  std::vector<std::thread> helpers;
  for (int t = 1; t < threads; ++t) {
    const Idx b = std::min(n, t * part), e = t + 1 == threads ? n : std::min(n, (t + 1) * part);
    helpers.emplace_back([=, &sums] { sums[static_cast<std::size_t>(t)] = sum_part(p + b, e - b, eigen); });
  }
  sums[0] = sum_part(p, std::min(n, part), eigen);
  for (std::thread& h : helpers) h.join();
  double total = 0;
  for (float s : sums) total += s;
  return total;
}

void print_bandwidth_header(bool explain) {
  if (explain)
    std::printf(
        "== 1. streaming read bandwidth: the sum of a float buffer of the bytes a decode step reads\n"
        "   (hand: SSE2, 8 accumulators; eigen: Eigen::Map<ArrayXf>.sum(); N threads: each sums a\n"
        "   contiguous 1/N; GB/s = bytes / median time / 1e9; 'best' = max(hand, eigen) is the\n"
        "   yardstick of the warm fractions, 'cold' (hand, caches evicted first) of the cold ones)\n");
  std::printf("%-10s %-22s %3s | %9s %9s %9s | %9s\n", "MiB", "for", "thr", "hand", "eigen", "best", "cold");
  std::fflush(stdout);
}

void BandwidthTable::measure(const Args& a, Idx bytes, int threads, const std::string& label) {
  const auto key = std::make_pair(bytes, threads);
  if (rows_.count(key) != 0) return;
  Buffer<float> buf(bytes / Idx(sizeof(float)));
  fill_uniform(buf.data(), buf.size(), 7);
  Bandwidth r;
  for (const bool eigen : {false, true}) {
    const Timing t = bench::measure(
        a.seconds, a.reps, [&] { g_sink = g_sink + stream_sum(buf.data(), buf.size(), threads, eigen); });
    (eigen ? r.eigen : r.warm) = double(bytes) / t.median / 1e9;
  }
  if (a.cold) {
    const double s =
        measure_cold(a.reps, [&] { g_sink = g_sink + stream_sum(buf.data(), buf.size(), threads, false); });
    r.cold = double(bytes) / s / 1e9;
  }
  rows_[key] = r;
  std::printf("%-10s %-22s %3d | %9s %9s %9s | %9s\n", fmt(double(bytes) / kMiB).c_str(), label.c_str(),
              threads, fmt(r.warm, 2).c_str(), fmt(r.eigen, 2).c_str(),
              fmt(std::max(r.warm, r.eigen), 2).c_str(), fmt(r.cold, 2).c_str());
  std::fflush(stdout);
}

const Bandwidth& BandwidthTable::at(Idx bytes, int threads) const {
  static const Bandwidth none;
  const auto it = rows_.find(std::make_pair(bytes, threads));
  return it == rows_.end() ? none : it->second;
}

double BandwidthTable::warm(Idx bytes, int threads) const {
  const Bandwidth& b = at(bytes, threads);
  return std::max(b.warm, b.eigen);
}

}  // namespace ea_decode_bench
