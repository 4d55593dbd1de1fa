// SPDX-License-Identifier: MIT
// What the sections of eigen_attention_decode_bench share (decode_bench.cpp says what it
// measures): the options, the buffers and inputs, the timing of warm and cold calls, the
// bandwidth yardstick, the caches with fragmented pages, and the entry points of the sections,
// one file each:
//   decode_bench_options.cpp    the command line and the header (machine, shapes, formulas)
//   decode_bench_bandwidth.cpp  section 1: streaming read bandwidth (the yardstick)
//   decode_bench_step.cpp       section 2: one decode step of one long sequence, per storage,
//                               page size and threads, beside contiguous views and attention_heads_into
//   decode_bench_batch.cpp      sections 3 and 4: a batch of mixed lengths; append of one token
//   decode_bench_latent.cpp     section 5: MLA absorbed decode over a latent cache
//   decode_bench_tree.cpp       section 6: speculative decoding's verify call with a tree mask
//   decode_bench_quantized.cpp  section 7: the error of the quantized caches (not timed)
//   decode_bench.cpp            the order of the sections, the summary, main
#pragma once

#include "harness.hpp"

#include <EigenAttention/KVCache.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace ea = EigenAttention;
using Clock = bench::Clock;
using Idx = Eigen::Index;

namespace ea_decode_bench {

template <typename T>
using Mat = ea::RowMatrix<T>;

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kMiB = 1024.0 * 1024.0;

// ---------------------------------------------------------------------------------------------
// Options

struct Args {
  Idx t_k = 32768, heads = 32, kv_heads = 8, d = 128;
  std::vector<Idx> page_sizes{16, 32, 64, 128, 256};
  std::vector<int> threads{1, 2};
  std::vector<std::string> storages{"float", "bf16", "half"};
  Idx batch = 8, batch_min = 512, batch_max = 8192;
  std::vector<Idx> batch_page_sizes{16, 256};
  std::vector<Idx> append_ts{1024, 8192, 32768};
  Idx append_tokens = 64;  // appends per timed run
  std::string kernel = "auto";
  int reps = 7;          // measured runs per row (the median is printed)
  double seconds = 0.5;  // a warm run lasts about seconds / 5
  bool cold = true;      // also time single calls after evicting the last-level cache
  bool quick = false;
  bool s_bandwidth = true, s_step = true, s_batch = true, s_append = true, s_latent = true, s_tree = true,
       s_quantized = true;
  std::vector<Idx> latent_heads{16, 32, 64, 128};  // section 5's query heads
};

using bench::kUsage;
using bench::parse_int;
using bench::parse_ints;
using bench::split;
using bench::usage_error;

Args parse_args(int argc, char** argv);

// Is the storage quantized (int8, e4m3, e5m2: a float scale per token and KV head beside the elements)?
inline bool quantized(const std::string& storage) {
  return storage == "int8" || storage == "e4m3" || storage == "e5m2";
}
// Bytes of one stored element.
inline Idx storage_bytes(const std::string& storage) {
  return storage == "float" ? 4 : quantized(storage) ? 1 : 2;
}
// Bytes of one token's key (or value) of one KV head: d elements, and a quantized row's scale.
inline Idx row_bytes(const std::string& storage, Idx d) {
  return d * storage_bytes(storage) + (quantized(storage) ? 4 : 0);
}
// f(T{}) with T the storage type named `storage` (float, bf16, half, int8, e4m3, e5m2).
template <class F>
void with_storage(const std::string& storage, F&& f) {
  if (storage == "float") {
    f(float{});
  } else if (storage == "bf16") {
    f(Eigen::bfloat16{});
  } else if (storage == "half") {
    f(Eigen::half{});
  } else if (storage == "int8") {
    f(ea::Int8{});
  } else if (storage == "e4m3") {
    f(ea::Float8E4M3{});
  } else {
    f(ea::Float8E5M2{});
  }
}
// The bench's name of a storage type.
template <typename T>
const char* storage_name() {
  if constexpr (std::is_same_v<T, float>) return "float";
  if constexpr (std::is_same_v<T, Eigen::bfloat16>) return "bf16";
  if constexpr (std::is_same_v<T, Eigen::half>) return "half";
  if constexpr (std::is_same_v<T, ea::Int8>) return "int8";
  if constexpr (std::is_same_v<T, ea::Float8E4M3>) return "e4m3";
  return "e5m2";
}

// The lengths of the batch's sequences: deterministic pseudo-random in [batch_min, batch_max].
std::vector<Idx> batch_lengths(const Args& a);

// ---------------------------------------------------------------------------------------------
// Buffers: 2 MiB aligned, advised for transparent huge pages as the cache's pool is, and written
// once (so that no page fault is timed).

template <typename T>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(Idx n);
  Buffer(Buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { std::free(p_); }
  T* data() { return p_; }
  const T* data() const { return p_; }
  Idx size() const { return n_; }

 private:
  T* p_ = nullptr;
  Idx n_ = 0;
};

// Allocates `bytes` (rounded up to 2 MiB), 2 MiB aligned, with the huge-page hint.
void* huge_alloc(std::size_t bytes);

template <typename T>
Buffer<T>::Buffer(Idx n) : p_(static_cast<T*>(huge_alloc(sizeof(T) * static_cast<std::size_t>(n)))), n_(n) {
  std::memset(static_cast<void*>(p_), 0, sizeof(T) * static_cast<std::size_t>(n));
}

// Uniform in [-1, 1), deterministic (xorshift64), as the other benchmarks' inputs.
void fill_uniform(float* p, Idx n, unsigned seed);

// ---------------------------------------------------------------------------------------------
// Timing

using bench::measure;
using bench::seconds_since;
using bench::Timing;

// The last-level cache (/sys/devices/system/cpu/cpu0/cache), in bytes; 0 when unknown.
std::size_t llc_bytes();
// cpu0's level-2 data (or unified) cache, in bytes; 0 when unknown.
std::size_t l2_bytes();

// Evicts the caches: sums a buffer of twice the last-level cache (at least 64 MiB), allocated on
// first use.
void evict_caches();
std::size_t evict_bytes();

// Median seconds of `reps` single calls, each after evict_caches() (outside the timed region),
// after one warm-up call.
template <class F>
double measure_cold(int reps, F&& call) {
  call();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    evict_caches();
    const Clock::time_point t0 = Clock::now();
    call();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  const std::size_t n = t.size();
  return n % 2 == 1 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

inline volatile double g_sink = 0;  // keeps results alive

// ---------------------------------------------------------------------------------------------
// Section 1: streaming read bandwidth, the yardstick of every GB/s figure

// Sum of n floats on `threads` threads (each a contiguous part; the calling thread is one):
// SSE2 (the x86-64 baseline) with eight independent accumulators, or Eigen's .sum().
double stream_sum(const float* p, Idx n, int threads, bool eigen);

struct Bandwidth {
  double warm = kNaN, eigen = kNaN, cold = kNaN;  // GB/s
};

// Bandwidths measured in section 1, by (bytes, threads); the rows print as they are measured.
class BandwidthTable {
 public:
  // Measures (bytes, threads) unless it was, and prints its row, `label` saying what it is for.
  void measure(const Args& a, Idx bytes, int threads, const std::string& label);
  const Bandwidth& at(Idx bytes, int threads) const;
  // The best of the hand loop and Eigen's sum, warm; cold.
  double warm(Idx bytes, int threads) const;
  double cold(Idx bytes, int threads) const { return at(bytes, threads).cold; }

 private:
  std::map<std::pair<Idx, int>, Bandwidth> rows_;
};

// The column headings, after a paragraph that says what is measured when `explain`.
void print_bandwidth_header(bool explain);

// ---------------------------------------------------------------------------------------------
// Caches with fragmented pages

// The keys and values of a sequence of `tokens` tokens, T x (H_kv d) float, heads side by side.
struct KeysValues {
  Mat<float> k, v;
  KeysValues(Idx tokens, Idx width, unsigned seed) : k(tokens, width), v(tokens, width) {
    fill_uniform(k.data(), k.size(), seed);
    fill_uniform(v.data(), v.size(), seed + 1);
  }
};

// Shuffles a fresh cache's free pages: every page is taken by a one-token sequence, and the
// sequences are released in a deterministic random order, so that the pages a sequence gets
// next lie in random order across the pool (as after a long run of a server).
template <typename T>
void shuffle_free_pages(ea::PagedKVCache<T>& cache, std::uint64_t seed) {
  const Idx n = cache.num_pages(), width = cache.kv_heads() * cache.d_k();
  const Mat<float> one = Mat<float>::Zero(1, width);
  std::vector<ea::SequenceId> ids;
  ids.reserve(static_cast<std::size_t>(n));
  for (Idx p = 0; p < n; ++p) {
    ids.push_back(cache.create());
    cache.append(ids.back(), one, one);
  }
  for (Idx i = n - 1; i > 0; --i) {  // Fisher-Yates
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    std::swap(ids[static_cast<std::size_t>(i)],
              ids[static_cast<std::size_t>((seed >> 11) % std::uint64_t(i + 1))]);
  }
  for (const ea::SequenceId s : ids) cache.release(s);
}

// Pairs of consecutive pages of s that follow each other in memory (what the kernel reads in
// place), and the number of pairs.
template <typename T>
std::pair<Idx, Idx> adjacent_pages(const ea::PagedKVCache<T>& cache, ea::SequenceId s) {
  const std::vector<std::int32_t> p = cache.pages(s);
  Idx adjacent = 0;
  for (std::size_t i = 1; i < p.size(); ++i) adjacent += p[i] == p[i - 1] + 1;
  return {adjacent, p.empty() ? 0 : Idx(p.size()) - 1};
}

// ---------------------------------------------------------------------------------------------
// Results and formatting

inline std::string fmt(double v, int prec = 1) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

inline std::string fmt_e(double v) {
  if (std::isnan(v)) return "nan";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

// max |a - b| over two equally sized float buffers (NaN when either has one).
inline double max_diff(const float* a, const float* b, Idx n) {
  double d = 0;
  for (Idx i = 0; i < n; ++i) {
    const double x = std::abs(double(a[i]) - double(b[i]));
    if (std::isnan(x)) return kNaN;
    d = std::max(d, x);
  }
  return d;
}

// What the summary needs from the sections.
struct Summary {
  // section 2: (storage, layout, page, threads) -> warm seconds per step
  std::map<std::tuple<std::string, std::string, Idx, int>, double> step;
  // section 2/3: fractions of the bandwidth, for the summary lines
  std::vector<std::string> lines;
  int failed = 0;  // result checks above tolerance
};

// Section 2 (decode_bench_step.cpp).
void step_section(const Args& a, ea::Kernel kernel, const BandwidthTable& bw, Summary& sum);

// Sections 3 and 4 (decode_bench_batch.cpp).
void batch_section(const Args& a, ea::Kernel kernel, const BandwidthTable& bw, Summary& sum);
void append_section(const Args& a, Summary& sum);
// Section 5 (decode_bench_latent.cpp).
void latent_section(const Args& a, ea::Kernel kernel, Summary& sum);
// Section 6 (decode_bench_tree.cpp).
void tree_section(const Args& a, ea::Kernel kernel, Summary& sum);
// Section 7 (decode_bench_quantized.cpp).
void quantized_section(const Args& a, ea::Kernel kernel, Summary& sum);

// The header (decode_bench_options.cpp).
void print_machine(const Args& a, ea::Kernel kernel);

}  // namespace ea_decode_bench
