// SPDX-License-Identifier: MIT
// What the sections of eigen_attention_multihead_bench share (multihead_bench.cpp says what it
// measures): the options, timing, the deterministic inputs, the exact-softmax and library-vs-
// library checks, and the entry points of the sections, one file each:
//   multihead_bench_options.cpp  the command line and the machine's description
//   multihead_bench_heads.cpp    section 1: attention_heads_into against the single-head call
//   multihead_bench_window.cpp   section 2: sliding window and chunked-local against full causal
//   multihead_bench_varlen.cpp   section 3: varlen against padded
//   multihead_bench.cpp          the order of the sections, the summary, main
#pragma once

#include "harness.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace ea = EigenAttention;
using Clock = bench::Clock;
using Idx = Eigen::Index;

namespace ea_multihead_bench {

template <typename T>
using Mat = ea::RowMatrix<T>;
template <typename T>
using ConstMap = Eigen::Map<const Mat<T>>;

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------------------------------------
// Options

struct Args {
  // heads
  std::vector<Idx> ts{2048, 8192};
  std::vector<Idx> hs{8, 32};
  std::vector<Idx> ds{64, 128};
  std::vector<std::pair<Idx, Idx>> gqa{{32, 8}};
  Idx bthd_t = -1;  // T of the BTHD rows; -1: the smallest T; 0: none
  std::vector<int> causal{0, 1};
  // window
  Idx window_t = 16384, window_h = 8, window_d = 64, window = 256;
  Idx chunk = 4096;  // chunked-local attention's chunk (Options::chunk_size), 0: none
  // varlen
  Idx varlen_seqs = 8, varlen_min = 256, varlen_max = 4096, varlen_h = 8, varlen_d = 64;
  // all
  std::vector<std::string> types{"float"};
  std::vector<int> threads{1, 2};
  std::string kernel = "auto";
  int reps = 0;
  double seconds = 1.0;
  bool s_heads = true, s_window = true, s_varlen = true;
  bool seconds_given = false;
};

using bench::kUsage;
using bench::parse_int;
using bench::parse_ints;
using bench::split;
using bench::usage_error;

// ---------------------------------------------------------------------------------------------
// Timing (as attention_bench: warm-up, runs of ~seconds/5, the median per call)

using bench::measure;
using bench::seconds_since;
using bench::Timing;

// ---------------------------------------------------------------------------------------------
// The machine (as attention_bench)

using bench::load_average;

// ---------------------------------------------------------------------------------------------
// Inputs: deterministic pseudo-random, uniform in [-1, 1]. Head h of tensor `tensor` (1 = Q,
// 2 = K, 3 = V) is always the same stream, whatever H, so head 0 of every config is the
// single-head problem and GQA's K/V head 0 is MHA's.

template <typename T>
void fill_stream(T* p, Idx n, unsigned tensor, Idx head) {
  std::uint64_t s = 0x9E3779B97F4A7C15ull * (std::uint64_t(tensor) * 1000003ull + std::uint64_t(head) + 1);
  for (int warm = 0; warm < 4; ++warm) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
  }
  for (Idx i = 0; i < n; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    p[i] = T(double(s >> 11) * (2.0 / 9007199254740992.0) - 1.0);
  }
}

// [heads, t, d] (BHTD with B = 1), head by head.
template <typename T>
std::vector<T> make_heads(Idx heads, Idx t, Idx d, unsigned tensor) {
  std::vector<T> buf(static_cast<std::size_t>(heads * t * d));
  for (Idx h = 0; h < heads; ++h) fill_stream(buf.data() + h * t * d, t * d, tensor, h);
  return buf;
}

// BHTD [1, H, T, d] -> BTHD [1, T, H, d].
template <typename T>
std::vector<T> to_bthd(const std::vector<T>& src, Idx heads, Idx t, Idx d) {
  std::vector<T> dst(src.size());
  for (Idx h = 0; h < heads; ++h)
    for (Idx i = 0; i < t; ++i)
      std::copy_n(src.data() + (h * t + i) * d, d, dst.data() + (i * heads + h) * d);
  return dst;
}

template <typename T>
const T* row_of(const ea::HeadsView<T>& v, Idx b, Idx h, Idx t) {
  return v.data + b * v.batch_stride + h * v.head_stride + t * v.token_stride;
}

// ---------------------------------------------------------------------------------------------
// Masks, pairs, exact rows

// max() that keeps a NaN (std::max(x, NaN) is x): a NaN in an output must fail its check.
inline double worst(double a, double b) { return (std::isnan(a) || std::isnan(b)) ? kNaN : std::max(a, b); }

// Keys [lo, hi) that query row i sees (TopLeft alignment, T_q = T_k or key lengths: offset 0).
inline std::pair<Idx, Idx> visible(Idx i, Idx tk, const ea::Options& o) {
  Idx lo = 0, hi = tk;
  if (o.causal) hi = std::min(hi, i + 1);
  if (o.window_right >= 0) hi = std::min<Idx>(hi, i + o.window_right + 1);
  if (o.window_left >= 0) lo = std::max<Idx>(lo, i - o.window_left);
  if (o.chunk_size > 0) {  // the chunk holding key i
    const Idx first = i / o.chunk_size * o.chunk_size;
    lo = std::max(lo, first);
    hi = std::min(hi, first + o.chunk_size);
  }
  return {lo, std::max(lo, hi)};
}

// The (i, j) pairs no mask hides, counted exactly.
inline double computed_pairs(Idx tq, Idx tk, const ea::Options& o) {
  double n = 0;
  for (Idx i = 0; i < tq; ++i) {
    const auto [lo, hi] = visible(i, tk, o);
    n += double(hi - lo);
  }
  return n;
}

inline double gflops(double pairs, Idx d, Idx heads, double seconds) {
  return 4.0 * pairs * double(d) * double(heads) / seconds / 1e9;
}

// Max |diff| between row `i` of `out` and the exact softmax(scale q k^T) v over keys [lo, hi),
// computed in double. Rows with dim stride 1 (every buffer of this bench).
template <typename T>
double exact_row_diff(const T* q, const T* k0, Idx k_stride, const T* v0, Idx v_stride, const T* out, Idx d,
                      Idx lo, Idx hi) {
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> s(static_cast<std::size_t>(std::max<Idx>(hi - lo, 0)));
  double m = -std::numeric_limits<double>::infinity();
  for (Idx j = lo; j < hi; ++j) {
    double dot = 0;
    for (Idx c = 0; c < d; ++c) dot += double(q[c]) * double(k0[j * k_stride + c]);
    s[j - lo] = scale * dot;
    m = std::max(m, s[j - lo]);
  }
  std::vector<double> acc(static_cast<std::size_t>(d), 0.0);
  double sum = 0;
  for (Idx j = lo; j < hi; ++j) {
    const double w = std::exp(s[j - lo] - m);
    sum += w;
    for (Idx c = 0; c < d; ++c) acc[c] += w * double(v0[j * v_stride + c]);
  }
  double diff = 0;
  for (Idx c = 0; c < d; ++c) {
    const double want = sum > 0 ? acc[c] / sum : 0.0;
    diff = worst(diff, std::abs(double(out[c]) - want));
  }
  return diff;
}

// Rows worth checking in a sequence of t rows: the ends, tile, window and chunk edges, the middle.
inline std::vector<Idx> sample_rows(Idx t, Idx window, Idx chunk = 0) {
  std::vector<Idx> r{0, 1, 127, 128, 129, t / 2, t - 2, t - 1};
  if (window >= 0) {
    for (Idx x : {window - 1, window, window + 1, window + 128}) r.push_back(x);
  }
  if (chunk > 0) {
    for (Idx x : {chunk - 1, chunk, chunk + 1, 2 * chunk}) r.push_back(x);
  }
  std::vector<Idx> out;
  for (Idx x : r) {
    if (x >= 0 && x < t && std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Sampled rows of head h (K/V head kv) of sequence b, the sequence's rows starting at token
// `first` (varlen) with t_q queries and t_k keys.
template <typename T>
double exact_rows_diff(const ea::HeadsView<const T>& q, const ea::HeadsView<const T>& k,
                       const ea::HeadsView<const T>& v, const ea::HeadsView<const T>& out, Idx b, Idx h,
                       Idx kv, Idx first, Idx t_q, Idx t_k, const ea::Options& opt) {
  double diff = 0;
  for (Idx i : sample_rows(t_q, opt.window_left, opt.chunk_size)) {
    const auto [lo, hi] = visible(i, t_k, opt);
    diff = worst(diff, exact_row_diff(row_of(q, b, h, first + i), row_of(k, b, kv, first), k.token_stride,
                                      row_of(v, b, kv, first), v.token_stride, row_of(out, b, h, first + i),
                                      q.dim, lo, hi));
  }
  return diff;
}

// Max |diff| between `rows` rows of head (bx, hx) of x from token first_x and head (by, hy) of y
// from token first_y.
template <typename T>
double rows_diff(const ea::HeadsView<const T>& x, Idx bx, Idx hx, Idx first_x,
                 const ea::HeadsView<const T>& y, Idx by, Idx hy, Idx first_y, Idx rows) {
  double diff = 0;
  for (Idx i = 0; i < rows; ++i) {
    const T* a = row_of(x, bx, hx, first_x + i);
    const T* c = row_of(y, by, hy, first_y + i);
    for (Idx j = 0; j < x.dim; ++j) diff = worst(diff, std::abs(double(a[j]) - double(c[j])));
  }
  return diff;
}

template <typename T>
double all_heads_diff(const ea::HeadsView<const T>& x, const ea::HeadsView<const T>& y) {
  double diff = 0;
  for (Idx b = 0; b < x.batch; ++b)
    for (Idx h = 0; h < x.heads; ++h) diff = worst(diff, rows_diff(x, b, h, 0, y, b, h, 0, x.tokens));
  return diff;
}

// Library against library (other layout, other head, padded): 1e-5 as the issue asks for
// float, 1e-10 for double. Against the exact double rows: 1e-4 for float (an accumulated
// rounding error), 1e-10 for double.
template <typename T>
double ref_tolerance() {
  return sizeof(T) == 4 ? 1e-5 : 1e-10;
}
template <typename T>
double exact_tolerance() {
  return sizeof(T) == 4 ? 1e-4 : 1e-10;
}

struct Checks {
  int failed = 0;
  std::vector<std::string> below_target;
};

inline std::string fmt_e(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

// "1.2e-07", or "3.4e-03!" / "nan!" when above `tol` or NaN (counted as a failure).
inline std::string check_cell(double diff, double tol, Checks& checks) {
  const bool bad = !(diff <= tol);
  if (bad) ++checks.failed;
  return (std::isnan(diff) ? std::string("nan") : fmt_e(diff)) + (bad ? "!" : "");
}

inline volatile double g_sink = 0;

// attention_heads_into(q, k, v, out, opt, masks), timed (its first output element kept alive).
template <typename T>
Timing time_heads(const Args& a, const ea::HeadsView<const T>& q, const ea::HeadsView<const T>& k,
                  const ea::HeadsView<const T>& v, const ea::HeadsView<T>& out, const ea::Options& opt,
                  const ea::Masks<T>& masks = {}) {
  return measure(a.seconds, a.reps, [&] {
    ea::attention_heads_into(q, k, v, out, opt, masks);
    g_sink = g_sink + double(out.data[0]);
  });
}

// Sampled rows of the first and the last query head of sequence 0 (the last with its K/V head
// under GQA) against the exact rows.
template <typename T>
double exact_first_last_heads(const ea::HeadsView<const T>& q, const ea::HeadsView<const T>& k,
                              const ea::HeadsView<const T>& v, const ea::HeadsView<const T>& out,
                              const ea::Options& opt) {
  const Idx last = q.heads - 1, last_kv = last / (q.heads / k.heads);
  return worst(exact_rows_diff<T>(q, k, v, out, 0, 0, 0, 0, q.tokens, k.tokens, opt),
               exact_rows_diff<T>(q, k, v, out, 0, last, last_kv, 0, q.tokens, k.tokens, opt));
}

// Options and the machine (multihead_bench_options.cpp).
Args parse_args(int argc, char** argv);
void print_machine(const Args& a, ea::Kernel kernel);

// Section 1 (multihead_bench_heads.cpp).
void print_heads_header();
template <typename T>
void heads_section(const Args& a, const char* type, ea::Kernel kernel, Checks& checks);

// Section 2 (multihead_bench_window.cpp): the window and the chunks.
template <typename T>
void window_section(const Args& a, const char* type, ea::Kernel kernel, Checks& checks);

// Section 3 (multihead_bench_varlen.cpp).
std::vector<Idx> varlen_lengths(const Args& a);
template <typename T>
void varlen_section(const Args& a, const char* type, ea::Kernel kernel, Checks& checks);

}  // namespace ea_multihead_bench
