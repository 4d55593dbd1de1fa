// SPDX-License-Identifier: MIT
// The tiled attention kernel, written once and compiled once per kernel of the table
// (kernels.cmake generates a tiled_<name>.cpp for each from tiled_isa.cpp.in). Internal.
//
// A file that includes this one may first rename Eigen's namespace (#define Eigen ...), so that
// the Eigen templates it instantiates with its own -m flags never merge with those of another
// translation unit; everything here is in an anonymous namespace for the same reason. Only
// abi.hpp's plain types cross the boundary.
//
// Fused call (ATTN only). For each tile of kRows query rows, stream over key tiles (their size
// from the tile policy, tile_policy.hpp: K and V of one tile stay in L2), keeping for each row a
// running maximum m, a running sum l of exp(logit - m) and an accumulator acc = sum_j exp(logit_j
// - m) V_j, rescaled by exp(m_old - m_new) whenever m grows (the online softmax). Each key tile's
// K is packed once into the micro-kernel's panels (KeyTile) and read by every strip of MR query
// rows of the tile (micro_kernel.hpp): the strip's logits (MR x keys, in L1) come from the
// register-blocked micro-kernel, the softmax update runs on them row by row, and the same
// micro-kernel adds the strip's weights times V into its accumulator rows. Nothing of size
// T_q x T_k exists: the working set per thread is a few tiles whatever T is.
//
// Decomposed call (SCORES too). For kDecRows query rows at a time, their whole rows of logits
// are formed in per-thread scratch by the same micro-kernel, normalised in place, written once
// into SCORES, and multiplied by V key tile by key tile. The scratch (rather than SCORES itself)
// keeps the rounding independent of where the caller's SCORES lie.
//
// Masking. Each query row i sees the keys [first_key(i), end_key(i)) (causal frontier, sliding
// window, key length; both ends non-decreasing in i), less those a boolean mask hides. Key
// tiles outside the range of a row tile are never computed, nor panels outside the range of a
// strip. Within a tile, each row's softmax runs over its range only (the same as setting the
// others to -inf first), after the per-logit extras (soft-cap, ALiBi, bias, then -inf where the
// boolean mask says no), and every hidden key gets weight exactly 0. The product with V then
// runs as one micro-kernel product when the strip hides no key or the tile's V rows are finite
// (exact zeros times finite values add nothing), else row by row over the visible keys, so that
// a hidden NaN or Inf in V never reaches a row that does not see it. Narrow windows take
// shorter row tiles (window / 4 rows), so that a tile computes few keys its rows do not see.
//
// Every element of a result is one chain of operations in a fixed order that depends on the
// problem, the tile policy and the instruction set only, never on the thread count or on which
// rows share a task. The per-thread scratch is taken once and kept, so a call allocates nothing
// once it has grown. What this file takes from Eigen's internals (packet math, packet exp) is
// in eigen_internal.hpp and micro_kernel.hpp; the softmax's exp is our own (exp_at_most_zero).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "kernels/abi.hpp"
#include "kernels/convert.hpp"
#include "kernels/eigen_internal.hpp"
#include "kernels/micro_kernel.hpp"
#include "kernels/program.hpp"
#include "kernels/sink.hpp"
#include "kernels/tile_policy.hpp"
#if defined(__AMX_BF16__)
#include "kernels/amx.hpp"
#endif

namespace EigenAttention {
namespace internal {
namespace {

constexpr index_t kRows = 128;    // query rows per tile
constexpr index_t kDecRows = 64;  // query rows whose whole logit rows the decomposed call holds
// Validation bounds d_k, d_v and T_k so that kScratchRows rows of them fit Eigen::Index
// (abi.hpp); a kernel's scratch must take fewer rows than that. Fused: Q and acc tiles (kRows rows
// of d_k or d_v, rounded up to whole packets), K rows and panels and V rows (3 kMaxKeyTile
// rows), m and l, and one strip of logits (a constant).
// Decomposed: Q and acc tiles, the same key tile, and kDecRows rows of T_k logits (whole panels).
static_assert(2 * kRows + 3 * kMaxKeyTile + 2 < kScratchRows,
              "fused tiles too large for the scratch size limit");
static_assert(3 * kDecRows + 3 * kMaxKeyTile < kScratchRows,
              "decomposed tiles too large for the scratch size limit");

template <typename T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using TileMap = Eigen::Map<RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T>
using StridedMap = Eigen::Map<RowMat<T>, Eigen::Unaligned, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>>;

/// Per-thread scratch, 64-byte aligned, grown on demand and kept for the next call. (Not
/// Eigen::aligned_allocator: that aligns only to this translation unit's EIGEN_MAX_ALIGN_BYTES,
/// 16 in the portable build, while the softmax maps rows as Aligned64.)
template <typename T>
class Arena {
 public:
  explicit Arena(std::size_t elements) {
    struct Buffer {
      T* data = nullptr;
      std::size_t size = 0;
      ~Buffer() { release(); }
      void release() {
        std::free(data);
        data = nullptr;
        size = 0;
      }
    };
    thread_local Buffer buffer;
    if (buffer.size < elements) {
      buffer.release();
      // aligned_alloc rather than aligned operator new: a failure is a null pointer that we turn
      // into std::bad_alloc, which tools that replace the allocator (valgrind) also report so.
      const std::size_t bytes = (elements * sizeof(T) + 63) / 64 * 64;
      buffer.data = static_cast<T*>(std::aligned_alloc(64, bytes));
      if (buffer.data == nullptr) throw std::bad_alloc();
      // Value-initialised, so that tools such as memcheck never see uninitialised scratch.
      std::fill_n(buffer.data, elements, T(0));
      buffer.size = elements;
    }
    next_ = buffer.data;
  }
  /// Room for n elements, keeping 64-byte alignment for the next one.
  T* take(index_t n) {
    T* p = next_;
    next_ += round(n);
    return p;
  }
  static std::size_t round(index_t n) {
    constexpr index_t per_line = 64 / sizeof(T);
    return static_cast<std::size_t>((n + per_line - 1) / per_line * per_line);
  }

 private:
  T* next_;
};

/// Rows [first, first + n) of m as a row-major block with unit column stride: in place when the
/// input has one (and, when `dense`, no gap between rows: rows far apart, such as a head's rows in
/// a [B, T, H, D] buffer, share cache sets and pages), else copied into `scratch` (n x m.cols).
template <typename T>
Eigen::Map<const RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>> rows_of(const RawMatrix<const T>& m,
                                                                            index_t first, index_t n,
                                                                            T* scratch, bool dense = false) {
  using Result = Eigen::Map<const RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
  if ((m.col_stride == 1 || m.cols <= 1) &&
      (dense ? m.row_stride == m.cols : m.row_stride >= m.cols || n <= 1)) {
    const index_t ld = n <= 1 ? std::max<index_t>(m.cols, 1) : m.row_stride;
    return Result(m.data + first * m.row_stride, n, m.cols, Eigen::OuterStride<>(ld));
  }
  for (index_t i = 0; i < n; ++i) {
    const T* src = m.data + (first + i) * m.row_stride;
    if (m.col_stride == 1) {
      std::copy(src, src + m.cols, scratch + i * m.cols);
    } else {
      for (index_t j = 0; j < m.cols; ++j) scratch[i * m.cols + j] = src[j * m.col_stride];
    }
  }
  return Result(scratch, n, m.cols, Eigen::OuterStride<>(std::max<index_t>(m.cols, 1)));
}

/// rows_of() for an input of element type S, computed in T: 16-bit rows are widened to float
/// into `scratch` (n x m.cols) as the tile is loaded; float and double are as rows_of().
template <typename S, typename T>
Eigen::Map<const RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>> tile_rows(const RawMatrix<const S>& m,
                                                                              index_t first, index_t n,
                                                                              T* scratch,
                                                                              bool dense = false) {
  if constexpr (std::is_same_v<S, T>) {
    return rows_of(m, first, n, scratch, dense);
  } else {
    for (index_t i = 0; i < n; ++i)
      widen(m.data + (first + i) * m.row_stride, m.col_stride, m.cols, scratch + i * m.cols);
    return Eigen::Map<const RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>(
        scratch, n, m.cols, Eigen::OuterStride<>(std::max<index_t>(m.cols, 1)));
  }
}

/// Row i of an output of element type S gets src[0, n) (of the compute type), rounded when S is
/// a 16-bit type.
template <typename S, typename T>
void store_row(const RawMatrix<S>& m, index_t i, const T* src) {
  if (m.cols == 0) return;
  S* dst = m.data + i * m.row_stride;
  if constexpr (std::is_same_v<S, T>) {
    if (m.col_stride == 1) {  // (element by element, 0.8 % of a block-sparse forward)
      std::copy(src, src + m.cols, dst);
      return;
    }
    for (index_t j = 0; j < m.cols; ++j) dst[j * m.col_stride] = src[j];
  } else {
    narrow(src, m.cols, dst, m.col_stride);
  }
}

template <typename T>
StridedMap<T> map_of(const RawMatrix<T>& m) {
  return StridedMap<T>(m.data, m.rows, m.cols,
                       Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(m.row_stride, m.col_stride));
}

/// dst[0, n) = src[0, n) (or 0 when src is null). SCORES is written once and not read back
/// by the kernel, so on x86 the aligned middle goes out with non-temporal stores, which skip
/// reading each destination line into the cache first (Eigen has no such assignment). A copy
/// changes no value, so the results stay independent of addresses.
template <typename T>
void stream_row(T* dst, const T* src, index_t n) {
#if defined(__SSE2__)
  constexpr index_t kAlign = 16;
  index_t i = 0;
  for (; i < n && reinterpret_cast<std::uintptr_t>(dst + i) % kAlign != 0; ++i) dst[i] = src ? src[i] : T(0);
  constexpr index_t kStep = kAlign / static_cast<index_t>(sizeof(T));
  for (; i + kStep <= n; i += kStep) {
    if constexpr (std::is_same_v<T, float>) {
      _mm_stream_ps(dst + i, src ? _mm_loadu_ps(src + i) : _mm_setzero_ps());
    } else {
      _mm_stream_pd(dst + i, src ? _mm_loadu_pd(src + i) : _mm_setzero_pd());
    }
  }
  for (; i < n; ++i) dst[i] = src ? src[i] : T(0);
#else
  for (index_t i = 0; i < n; ++i) dst[i] = src ? src[i] : T(0);
#endif
}

/// Makes the non-temporal stores of stream_row visible before the kernel returns.
inline void finish_streams() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

/// The largest of a row's logits, or NaN when it holds a NaN and nothing larger: a NaN must
/// make its row NaN, never pass for "no visible key" (-inf). Eigen's fast max may skip NaNs.
template <class Row>
typename Row::Scalar row_max(const Row& row) {
  using T = typename Row::Scalar;
  if (row.size() == 0) return -std::numeric_limits<T>::infinity();
  const T max = row.maxCoeff();
  if (max == -std::numeric_limits<T>::infinity() && row.hasNaN()) return std::numeric_limits<T>::quiet_NaN();
  return max;
}

/// The keys [a, b) of a tile's keys [j0, j0 + cols) that query row i may see (a == b: none).
struct Span {
  index_t a, b;
};
template <typename T>
EIGEN_ATTENTION_SHARED_INLINE Span span_in_tile(const RawProblem<T>& p, index_t i, index_t j0, index_t cols) {
  const index_t a = clamp_index(p.first_key(i) - j0, 0, cols);
  const index_t b = clamp_index(p.end_key(i) - j0, a, cols);
  return {a, b};
}

/// Row i's soft-capped logits of keys j_first, j_first + 1, ... (the segment s) become the final
/// logits: minus ALiBi, plus the bias, then -inf where the mask says no.
template <typename S, class Segment>
void apply_additive(const RawProblem<S>& p, index_t i, index_t j_first, Segment&& s) {
  using T = ComputeScalar<S>;
  const index_t n = s.size();
  if (n == 0) return;
  if (p.has_alibi) {
    // distance |i + offset - j| for j = j_first + t is |c - t|, exact in T
    const T c = static_cast<T>(i + p.offset - j_first);
    s.array() -= p.alibi_slope * (c - Eigen::Array<T, 1, Eigen::Dynamic>::LinSpaced(n, T(0), T(n - 1))).abs();
  }
  if (p.bias.data != nullptr) {
    const S* b = p.bias.data + i * p.bias.row_stride + j_first * p.bias.col_stride;
    if constexpr (std::is_same_v<S, T>) {
      s += Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>, Eigen::Unaligned, Eigen::InnerStride<>>(
          b, n, Eigen::InnerStride<>(p.bias.col_stride));
    } else {
      for (index_t t = 0; t < n; ++t) s(t) += to_compute(b[t * p.bias.col_stride]);
    }
  }
  if (p.mask.data != nullptr) {
    const bool* m = p.mask.data + i * p.mask.row_stride + j_first * p.mask.col_stride;
    for (index_t t = 0; t < n; ++t) {
      if (!m[t * p.mask.col_stride]) s(t) = -std::numeric_limits<T>::infinity();
    }
  }
  if (p.mask_mod != nullptr || p.blocks != nullptr)
    for_each_programmed_hidden(p, i, j_first, n,
                               [&](index_t t) { s(t) = -std::numeric_limits<T>::infinity(); });
}

/// Row i's scaled logits of keys j_first, j_first + 1, ... (the segment s, contiguous) become
/// the final logits: soft-capped, modified by score_mod, minus ALiBi, plus the bias, then -inf
/// where a mask says no.
template <typename T, class Segment>
void apply_extras(const RawProblem<T>& p, index_t i, index_t j_first, Segment&& s) {
  static_assert(std::decay_t<Segment>::InnerStrideAtCompileTime == 1, "a contiguous segment");
  if (p.softcap > 0 && s.size() > 0) s = (p.softcap * (s.array() / p.softcap).tanh()).matrix();
  if (p.score_mod != nullptr) apply_score_mod(p, i, j_first, s.data(), s.size());
  apply_additive(p, i, j_first, s);
}

/// row[a, b) = exp(row[a, b) - shift), computed in whole aligned packets: [a, b) is widened to
/// 64-byte boundaries (the row must start on one and have room up to the next boundary past b),
/// the extra elements are fed -inf, which gives them exactly 0. Eigen would otherwise run its exp scalar on
/// the unaligned head and tail of every row, which costs as much as the rest when a window
/// makes every row start elsewhere; and each element's rounding would depend on where its row
/// segment starts. Returns the sum of row[a, b) (taken in the same pass, in packets).
template <Shift kShift, typename T>
T exp_in_packets(T* row, index_t a, index_t b, T shift) {
  constexpr index_t kLanes = 64 / static_cast<index_t>(sizeof(T));
  const index_t e0 = a / kLanes * kLanes, e1 = (b + kLanes - 1) / kLanes * kLanes;
  const T minus_inf = -std::numeric_limits<T>::infinity();
  std::fill(row + e0, row + a, minus_inf);
  std::fill(row + b, row + e1, minus_inf);
  // exp(-inf) gives exactly 0 (eigen_internal.hpp).
  return exp_shifted_in_packets<kShift>(row, e0, e1, shift);
}

/// row_max of row[a, b), on a row laid out as exp_in_packets takes it, whose padding around
/// [a, b) to the 64-byte boundaries it sets to -inf (as exp_in_packets does): the largest in
/// whole packets, or NaN when the row holds a NaN and nothing larger.
template <typename T>
T row_max_in_packets(T* row, index_t a, index_t b) {
  constexpr index_t kLanes = 64 / static_cast<index_t>(sizeof(T));
  const index_t e0 = a / kLanes * kLanes, e1 = (b + kLanes - 1) / kLanes * kLanes;
  const T minus_inf = -std::numeric_limits<T>::infinity();
  std::fill(row + e0, row + a, minus_inf);
  std::fill(row + b, row + e1, minus_inf);
  const T max = max_in_packets(row, e0, e1);
  if (max == minus_inf && Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(row + a, b - a).hasNaN())
    return std::numeric_limits<T>::quiet_NaN();
  return max;
}

/// After the division by the row sum: keys the boolean mask hides weigh exactly 0 even when the
/// sum is NaN (0 / NaN).
template <typename S, class Segment>
void zero_masked(const RawProblem<S>& p, index_t i, index_t j_first, Segment&& w) {
  if (p.mask.data != nullptr) {
    const bool* m = p.mask.data + i * p.mask.row_stride + j_first * p.mask.col_stride;
    for (index_t t = 0; t < w.size(); ++t) {
      if (!m[t * p.mask.col_stride]) w(t) = ComputeScalar<S>(0);
    }
  }
  if (p.mask_mod != nullptr || p.blocks != nullptr)
    for_each_programmed_hidden(p, i, j_first, w.size(), [&](index_t t) { w(t) = ComputeScalar<S>(0); });
}

/// Are the V rows [begin, end) all finite? One pass over them, so that tiles with hidden keys can
/// still use one product.
template <typename S>
bool values_finite(const RawProblem<S>& p, index_t begin, index_t end) {
  if constexpr (kIsLowPrecision<S>) {
    // NaN and +-inf have every exponent bit set: the largest magnitude (sign cleared) of a row
    // reaches the exponent mask exactly when the row holds one. A max over 16-bit integers,
    // which the compiler vectorises.
    const std::uint16_t exponent = std::is_same_v<S, BFloat16Bits> ? 0x7f80 : 0x7c00;
    for (index_t j = begin; j < end; ++j) {
      const S* row = p.v.data + j * p.v.row_stride;
      std::uint16_t largest = 0;
      if (p.v.col_stride == 1) {
        for (index_t c = 0; c < p.v.cols; ++c)
          largest = std::max<std::uint16_t>(largest, static_cast<std::uint16_t>(row[c].bits & 0x7fff));
      } else {
        for (index_t c = 0; c < p.v.cols; ++c)
          largest = std::max<std::uint16_t>(
              largest, static_cast<std::uint16_t>(row[c * p.v.col_stride].bits & 0x7fff));
      }
      if (largest >= exponent) return false;
    }
    return true;
  } else {
    using T = S;
    // x * 0 is 0 for finite x and NaN for NaN or +-inf; Eigen's sum of it runs in packets.
    if (p.v.col_stride == 1 && p.v.row_stride == p.v.cols) {  // dense rows: one sum over them all
      const T sum = (Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(p.v.data + begin * p.v.cols,
                                                                          (end - begin) * p.v.cols) *
                     T(0))
                        .sum();
      return sum == sum;
    }
    const StridedMap<T> v(const_cast<T*>(p.v.data), p.v.rows, p.v.cols,
                          Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(p.v.row_stride, p.v.col_stride));
    for (index_t j = begin; j < end; ++j) {
      const T sum = p.v.col_stride == 1 ? (Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(
                                               p.v.data + j * p.v.row_stride, p.v.cols) *
                                           T(0))
                                              .sum()
                                        : (v.row(j).array() * T(0)).sum();
      if (sum != sum) return false;
    }
    return true;
  }
}

/// f(r, t) for every pair of query row i0 + r (r < rows) and key j0 + t (t < cols) that the row
/// sees, row by row: the sums that a hidden NaN must not reach.
template <typename T, class F>
void for_each_visible(const RawProblem<T>& p, index_t i0, index_t rows, index_t j0, index_t cols, F&& f) {
  const bool programmed = p.mask_mod != nullptr || p.blocks != nullptr;
  bool hidden[kMaskChunk];
  for (index_t r = 0; r < rows; ++r) {
    const index_t i = i0 + r;
    const Span span = span_in_tile(p, i, j0, cols);
    const bool* m =
        p.mask.data != nullptr ? p.mask.data + i * p.mask.row_stride + j0 * p.mask.col_stride : nullptr;
    for (index_t c0 = span.a; c0 < span.b; c0 += kMaskChunk) {
      const index_t n = std::min(kMaskChunk, span.b - c0);
      std::fill_n(hidden, n, false);
      if (programmed) for_each_programmed_hidden(p, i, j0 + c0, n, [&](index_t t) { hidden[t] = true; });
      for (index_t t = c0; t < c0 + n; ++t) {
        if ((m == nullptr || m[t * p.mask.col_stride]) && !hidden[t - c0]) f(r, t);
      }
    }
  }
}

/// Does some row of the strip [i0, i0 + rows) not see some key of [j0 + lo, j0 + hi) by its key
/// range?
template <typename S>
bool strip_cuts(const RawProblem<S>& p, index_t i0, index_t rows, index_t j0, index_t lo, index_t hi) {
  for (index_t r = 0; r < rows; ++r) {
    const Span span = span_in_tile(p, i0 + r, j0 + lo, hi - lo);
    if (span.a > 0 || span.b < hi - lo) return true;
  }
  return false;
}

/// O (rows x ldo) += P V for a strip of rows <= MR query rows i0, i0 + 1, ... (weights P, row
/// stride ldp, column t for key j0 + t) over the keys [lo, hi) of the key tile it may see: one
/// micro-kernel product when the strip hides none of them or when the tile's V rows are finite
/// (asked only then; hidden keys weigh exactly 0), else row by row over each row's visible keys,
/// so that a hidden NaN in V reaches no row. `hides`: does (or may) some row not see some of the
/// keys (its key range: strip_cuts; a boolean mask, a programmable one)?
template <typename S, typename T, class Tile>
void accumulate_strip(const RawProblem<S>& p, index_t i0, index_t rows, index_t j0, index_t lo, index_t hi,
                      const T* P, index_t ldp, Tile& tile, T* o, index_t ldo, bool hides) {
  const T* vb = tile.v();
  const index_t ldv = tile.ldv();
  if (!hides || tile.v_finite()) {
    product_strip(rows, ldo, hi - lo, P + lo, ldp, vb + lo * ldv, ldv, o, ldo);
    return;
  }
  for_each_visible(p, i0, rows, j0 + lo, hi - lo, [&](index_t r, index_t t) {
    Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>>(o + r * ldo, ldo).noalias() +=
        P[r * ldp + lo + t] * Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(vb + (lo + t) * ldv, ldo);
  });
}

/// What this thread packed of one forward call's K and V (RawProblem::call): the call's key
/// tiles on the grid of multiples of `keys`, each packed on its first use and kept for the
/// call's next query tiles on this thread (and for the other query heads of a GQA group, which
/// read the same K and V). Grown on demand and kept, like the Arena; at most kPackCacheBytes.
template <typename T>
struct PackCache {
  static constexpr std::size_t kPackCacheBytes = std::size_t(32) << 20;
  static constexpr unsigned char kKeysPacked = 1, kValuesCopied = 2, kValuesChecked = 4, kValuesFinite = 8;
  std::uint64_t call = 0;
  const void *k = nullptr, *v = nullptr;
  index_t k_rows = 0, k_row_stride = 0, k_col_stride = 0, keys = 0, dk = 0, ldo = 0;
  T* data = nullptr;
  std::size_t capacity = 0;  // elements of data
  // Per tile: kKeysPacked, kValuesCopied, kValuesChecked (kValuesFinite then says whether its V
  // rows are all finite). (Plain buffers, not std::vector: a kernel translation unit must not
  // emit inline library code that a baseline one may emit too.)
  unsigned char* ready = nullptr;
  std::size_t tiles = 0;  // room in ready
  ~PackCache() {
    std::free(data);
    std::free(ready);
  }
  /// fill(a, n) for each tile [a, a + n) of the grid of `keys` (`rows` keys in all) that keys
  /// [j0, j0 + cols) touch and whose `flag` is not yet set, setting it: each tile packed or
  /// copied once per call.
  template <class Fill>
  void fill_tiles(index_t keys, index_t rows, index_t j0, index_t cols, unsigned char flag, Fill&& fill) {
    for (index_t t = j0 / keys; t * keys < j0 + cols; ++t) {
      unsigned char& flags = ready[static_cast<std::size_t>(t)];
      if (flags & flag) continue;
      flags |= flag;
      fill(t * keys, std::min(keys, rows - t * keys));
    }
  }
  static PackCache& here() {
    thread_local PackCache cache;
    return cache;
  }
  /// This thread's cache for the packed keys (and values) of call `p.call`, cut into `tiles`
  /// tiles (`keys` names the layout: the forward's key tile, or minus the backward's) and taking
  /// `need` elements, or null when it would exceed kPackCacheBytes or the call has no number.
  /// Kept as it is when it already holds this call's K (same data, strides and layout); else
  /// emptied, its ready flags all 0.
  template <typename E>
  static PackCache* open(const RawProblem<E>& p, index_t keys, index_t ldo, index_t tiles, std::size_t need) {
    if (p.call == 0 || p.k.rows == 0 || need * sizeof(T) > kPackCacheBytes) return nullptr;
    PackCache& c = here();
    const bool same = c.call == p.call && c.k == p.k.data && c.v == p.v.data && c.k_rows == p.k.rows &&
                      c.k_row_stride == p.k.row_stride && c.k_col_stride == p.k.col_stride &&
                      c.keys == keys && c.dk == p.k.cols && c.ldo == ldo;
    if (same) return &c;
    if (c.capacity < need) {
      std::free(c.data);
      c.data = nullptr;
      c.capacity = 0;
      c.data = static_cast<T*>(std::aligned_alloc(64, (need * sizeof(T) + 63) / 64 * 64));
      if (c.data == nullptr) throw std::bad_alloc();
      c.capacity = need;
    }
    c.call = p.call;
    c.k = p.k.data;
    c.v = p.v.data;
    c.k_rows = p.k.rows;
    c.k_row_stride = p.k.row_stride;
    c.k_col_stride = p.k.col_stride;
    c.keys = keys;
    c.dk = p.k.cols;
    c.ldo = ldo;
    if (c.tiles < static_cast<std::size_t>(tiles)) {
      std::free(c.ready);
      c.tiles = 0;
      c.ready = static_cast<unsigned char*>(std::malloc(static_cast<std::size_t>(tiles)));
      if (c.ready == nullptr) throw std::bad_alloc();
      c.tiles = static_cast<std::size_t>(tiles);
    }
    std::fill_n(c.ready, tiles, static_cast<unsigned char>(0));
    return &c;
  }
};

/// Are the V rows of the key tile [j0, j0 + cols) all finite? Asked of the rows once per call
/// and thread for each tile of the grid of `keys` that it touches when they are kept in `cache`
/// (a block-sparse query tile asks it of every tile it reads), else each time.
template <typename E, typename T>
bool tile_values_finite(const RawProblem<E>& p, PackCache<T>* cache, index_t keys, index_t j0, index_t cols) {
  if (cache == nullptr) return values_finite(p, j0, j0 + cols);
  for (index_t t = j0 / keys; t * keys < j0 + cols; ++t) {
    unsigned char& flags = cache->ready[static_cast<std::size_t>(t)];
    const index_t a = t * keys, b = std::min(a + keys, p.v.rows);
    if (!(flags & PackCache<T>::kValuesChecked))
      flags |= PackCache<T>::kValuesChecked | (values_finite(p, a, b) ? PackCache<T>::kValuesFinite : 0);
    if (!(flags & PackCache<T>::kValuesFinite)) return false;
  }
  return true;
}

/// One key tile [j0, j0 + cols) as the micro-kernel reads it (micro_kernel.hpp): K packed into
/// panels, and the V rows with ldv() elements between rows, in place when they are dense rows of
/// whole packets of the compute type, else widened, gathered or padded (the padding 0). Packed
/// into this thread's PackCache when the call has a number and its tiles fit, else into buffers
/// taken once per kernel call for tiles of up to `keys` keys.
template <typename E>
class KeyTile {
 public:
  using T = ComputeScalar<E>;
  /// ldo: d_v rounded up to whole packets (0 when the call wants no V).
  KeyTile(const RawProblem<E>& p, index_t keys, index_t ldo, Arena<T>& arena)
      : p_(p),
        keys_(keys),
        ldo_(ldo),
        k_buf_(arena.take(keys * p.k.cols)),
        panels_(arena.take(keys * p.k.cols)),
        v_buf_(arena.take(keys * ldo)) {
    if constexpr (std::is_same_v<E, T>) {
      const index_t dv = p.v.cols;
      // In place only when the rows are dense: rows far apart (a head of a [B, T, H, D] buffer)
      // would cost a page walk per row in every strip's product.
      v_in_place_ = dv == ldo && dv > 0 && p.v.col_stride == 1 && p.v.row_stride == dv;
    }
    if (p.call != 0) open_cache();
  }
  /// Buffer sizes (elements, each rounded as Arena::take rounds it) for tiles of `keys` keys.
  static std::size_t scratch(index_t keys, index_t dk, index_t ldo) {
    return Arena<T>::round(keys * dk) * 2 + Arena<T>::round(keys * ldo);
  }

  /// The first key tile of keys [begin, ...) and the keys of the tile that starts at j0 (< end):
  /// from the panel that holds begin when the call's tiles are kept (the cache, which holds the
  /// panels of all T_k keys one after the other: a tile may start at any panel and span two of
  /// its grid's tiles, so that a query tile's keys are cut into as few tiles as their count
  /// asks), else from begin and no further than end.
  index_t first(index_t begin) const {
    return cache_ != nullptr ? begin / Micro<T>::kCols * Micro<T>::kCols : begin;
  }
  index_t cols(index_t j0, index_t end) const {
    return std::min(keys_, (cache_ != nullptr ? p_.k.rows : end) - j0);
  }

  /// Packs the tile's keys into panels() (with the cache: each tile of its grid that the tile
  /// touches, once per call and thread).
  void load_keys(index_t j0, index_t cols) {
    if (cache_ != nullptr) {
      panels_ = cache_->data + j0 * p_.k.cols;
      cache_->fill_tiles(keys_, p_.k.rows, j0, cols, PackCache<T>::kKeysPacked, [&](index_t a, index_t n) {
        const auto K = tile_rows(p_.k, a, n, k_buf_);
        pack_panels(K.data(), K.outerStride(), n, p_.k.cols, cache_->data + a * p_.k.cols);
      });
      return;
    }
    const auto K = tile_rows(p_.k, j0, cols, k_buf_);
    pack_panels(K.data(), K.outerStride(), cols, p_.k.cols, panels_);
  }
  /// Makes the tile's V rows v(), ldv() apart (only when the call wants V).
  void load_values(index_t j0, index_t cols) {
    j0_ = j0;
    cols_ = cols;
    v_finite_ = -1;
    if constexpr (std::is_same_v<E, T>) {
      if (v_in_place_) {
        v_ = p_.v.data + j0 * p_.v.row_stride;
        ldv_ = p_.v.row_stride;
        return;
      }
    }
    ldv_ = ldo_;
    if (cache_ != nullptr) {
      v_ = cache_->data + values_at_ + j0 * ldo_;
      cache_->fill_tiles(keys_, p_.v.rows, j0, cols, PackCache<T>::kValuesCopied, [&](index_t a, index_t n) {
        copy_values(a, n, cache_->data + values_at_ + a * ldo_);
      });
      return;
    }
    copy_values(j0, cols, v_buf_);
    v_ = v_buf_;
  }
  /// V's rows [j0, j0 + cols) into dst, ldo_ apart, their padding 0.
  void copy_values(index_t j0, index_t cols, T* dst) {
    const index_t dv = p_.v.cols;
    const auto V = tile_rows(p_.v, j0, cols, dst);
    for (index_t t = cols; t-- > 0;) {  // from the last row: the rows may move within the buffer
      const T* src = V.data() + t * V.outerStride();
      T* row = dst + t * ldo_;
      std::fill(row + dv, row + ldo_, T(0));
      if (row != src) std::copy_backward(src, src + dv, row + dv);
    }
  }
  const T* panels() const { return panels_; }
  /// Are the call's tiles kept (all of K's panels one after the other, and V's rows)?
  bool cached() const { return cache_ != nullptr; }
  const T* v() const { return v_; }
  index_t ldv() const { return ldv_; }
  /// Are the tile's V rows all finite? Found out on the first question.
  bool v_finite() {
    if (v_finite_ < 0) v_finite_ = tile_values_finite(p_, cache_, keys_, j0_, cols_) ? 1 : 0;
    return v_finite_ == 1;
  }

 private:
  /// Uses this thread's PackCache for the call's tiles when they fit: keeps what it holds when
  /// it holds this call's K and V already, else starts it afresh.
  void open_cache() {
    const index_t tk = p_.k.rows, dk = p_.k.cols, tiles = (tk + keys_ - 1) / keys_;
    // Room for whole grid tiles (the last panels of the last tile are packed whole): the K
    // panels of every tile, then the V rows.
    values_at_ = tiles * keys_ * dk;
    const std::size_t need = static_cast<std::size_t>(tiles * keys_) * static_cast<std::size_t>(dk + ldo_);
    cache_ = PackCache<T>::open(p_, keys_, ldo_, tiles, need);
  }

  const RawProblem<E>& p_;
  index_t keys_, ldo_, values_at_ = 0;
  T *k_buf_, *panels_, *v_buf_;
  PackCache<T>* cache_ = nullptr;
  bool v_in_place_ = false;
  const T* v_ = nullptr;
  index_t ldv_ = 0, j0_ = 0, cols_ = 0;
  int v_finite_ = -1;
};

#if defined(__AMX_BF16__)
/// Do the pairs of the fused forward go through AMX tiles (amx.hpp), rather than vdpbf16ps?
constexpr bool kAmx = true;
/// The pairs' strips: query rows per strip, and the block by which their depths go (Q Kᵀ's d_k
/// and P V's keys, padded with pairs of zeros).
constexpr index_t kPairStripRows = kAmxRows, kPairBlock = kAmxDepth;
#else
constexpr bool kAmx = false;
constexpr index_t kPairStripRows = Micro<float>::kRows, kPairBlock = 1;
struct AmxTiles {};  // never taken
#endif
struct NoTiles {};  // a kernel without tiles to configure

/// n rounded up to a whole number of kPairBlock.
constexpr index_t whole_pair_blocks(index_t n) { return (n + kPairBlock - 1) / kPairBlock * kPairBlock; }
/// n rows rounded up to whole strips of kPairStripRows.
constexpr index_t whole_pair_strips(index_t n) {
  return (n + kPairStripRows - 1) / kPairStripRows * kPairStripRows;
}

#if defined(__AVX512BF16__)
/// Does the fused forward on element type E take bf16 pairs (micro_kernel.hpp) in this kernel?
template <typename E>
constexpr bool kPairs = std::is_same_v<E, BFloat16Bits>;

// The pairs' products on one strip, on AMX tiles where this kernel has them (amx.hpp), else on
// vdpbf16ps (micro_kernel.hpp). On AMX the strip is kPairStripRows rows whatever `rows`: A's rows
// past `rows` are zeros, and C has those rows too, which the caller never reads; the depths are
// whole numbers of kPairBlock.

/// logits_strip_pairs: C (rows x cols, whole panels) = alpha A Kᵀ.
inline void pairs_logits(index_t rows, index_t cols, index_t depth, const Pair* a, index_t lda,
                         const Pair* kp, float* c, index_t ldc, float alpha) {
#if defined(__AMX_BF16__)
  amx_logits_strip(cols, depth, a, lda, kp, c, ldc);
  if (alpha != 1.0f)
    for (index_t r = 0; r < rows; ++r)
      Eigen::Map<Eigen::Matrix<float, 1, Eigen::Dynamic>>(c + r * ldc, cols) *= alpha;
#else
  logits_strip_pairs(rows, cols, depth, a, lda, kp, c, ldc, alpha);
#endif
}

/// product_strip_pairs: C (rows x n, whole packets) += A B.
inline void pairs_product([[maybe_unused]] index_t rows, index_t n, index_t depth, const Pair* a, index_t lda,
                          const Pair* b, index_t ldb, float* c, index_t ldc) {
#if defined(__AMX_BF16__)
  amx_product_strip(n, depth, a, lda, b, ldb, c, ldc);
#else
  product_strip_pairs(rows, n, depth, a, lda, b, ldb, c, ldc);
#endif
}

/// pair_columns (pairs `ld` apart), then rows of zeros up to a whole strip.
inline void pair_strip_rows(const RawMatrix<const BFloat16Bits>& m, index_t first, index_t rows, Pair* dst,
                            index_t ld) {
  pair_columns(m, first, rows, dst, ld);
  std::fill(dst + rows * ld, dst + whole_pair_strips(rows) * ld, Pair(0));
}

/// KeyTile for the pairs of the bf16 forward: one key tile [j0, j0 + cols) with K packed into
/// panels of pairs along d_k (pack_panels_pairs) and V as pairs of consecutive keys, ldv() pairs
/// between them: pair t, column c is (V[j0 + 2t][c], V[j0 + 2t + 1][c]), 0 past d_v and past
/// the tile's keys. Kept in this thread's PackCache of pairs like KeyTile's, or in buffers taken
/// once per call. The depths of the products go by whole kPairBlock: d_k's pairs (Q's and each
/// panel's, pairs()) end with pairs of zeros up to a whole block, and V's pairs with rows of
/// zeros, kPairBlock - 1 past the tile's last at least.
class PairTile {
 public:
  /// The arena of the compute type is KeyTile's: the pairs take their own (Arena<Pair>), with
  /// room for one query tile of kRows rows and one strip's weights besides the key tile.
  PairTile(const RawProblem<BFloat16Bits>& p, index_t keys, index_t ldo, Arena<float>&)
      : p_(p),
        keys_(keys),
        ldo_(ldo),
        pairs_(whole_pair_blocks((p.k.cols + 1) / 2)),
        ldpb_(whole_pair_blocks((keys + 1) / 2)),
        v_rows_(ldpb_ + kPairBlock - 1),
        arena_(Arena<Pair>::round(Micro<float>::whole_panels(keys) * pairs_) +
               Arena<Pair>::round(v_rows_ * ldo) + Arena<Pair>::round(kRows * pairs_) +
               Arena<Pair>::round(kPairStripRows * ldpb_)),
        panels_(arena_.take(Micro<float>::whole_panels(keys) * pairs_)),
        v_(arena_.take(v_rows_ * ldo)),
        q_(arena_.take(kRows * pairs_)),
        pb_(arena_.take(kPairStripRows * ldpb_)) {
    static_assert(kRows % kPairStripRows == 0, "a query tile is whole strips");
    if (p.call != 0) {
      const index_t tk = p.k.rows, tiles = (tk + keys_ - 1) / keys_;
      values_at_ = tiles * Micro<float>::whole_panels(keys_) * pairs_;
      const std::size_t need =
          static_cast<std::size_t>(values_at_) + static_cast<std::size_t>(tiles * v_rows_ * ldo_);
      cache_ = PackCache<Pair>::open(p_, keys_, ldo_, tiles, need);
    }
  }
  /// Nothing of the compute type's arena (the constructor takes its own).
  static std::size_t scratch(index_t, index_t, index_t) { return 0; }
  /// Query rows [i0, i0 + rows) (rows <= kRows) as pairs along d_k: query_pairs(), pairs() apart,
  /// then rows of zeros up to a whole strip.
  void load_queries(index_t i0, index_t rows) { pair_strip_rows(p_.q, i0, rows, q_, pairs_); }
  const Pair* query_pairs() const { return q_; }
  /// One strip's weights as pairs (accumulate_strip_pairs), weight_stride() pairs apart.
  Pair* weight_pairs() { return pb_; }
  index_t weight_stride() const { return ldpb_; }
  index_t first(index_t begin) const { return cache_ != nullptr ? begin / keys_ * keys_ : begin; }
  index_t cols(index_t j0, index_t end) const {
    return std::min(keys_, (cache_ != nullptr ? p_.k.rows : end) - j0);
  }
  /// Pairs along d_k of one row of Q or K.
  index_t pairs() const { return pairs_; }

  void load_keys(index_t j0, index_t cols) {
    if (cache_ != nullptr) {
      const std::size_t t = static_cast<std::size_t>(j0 / keys_);
      panels_ = cache_->data + t * Micro<float>::whole_panels(keys_) * pairs_;
      if (cache_->ready[t] & PackCache<Pair>::kKeysPacked) return;
      cache_->ready[t] |= PackCache<Pair>::kKeysPacked;
    }
    pack_panels_pairs(p_.k.data + j0 * p_.k.row_stride, p_.k.row_stride, p_.k.col_stride, cols, p_.k.cols,
                      panels_, pairs_);
  }
  void load_values(index_t j0, index_t cols) {
    j0_ = j0;
    cols_ = cols;
    v_finite_ = -1;
    if (cache_ != nullptr) {
      const std::size_t t = static_cast<std::size_t>(j0 / keys_);
      v_ = cache_->data + values_at_ + t * v_rows_ * ldo_;
      if (cache_->ready[t] & PackCache<Pair>::kValuesCopied) return;
      cache_->ready[t] |= PackCache<Pair>::kValuesCopied;
    }
    for (index_t t = 0; t < (cols + 1) / 2; ++t) {
      const BFloat16Bits* a = p_.v.data + (j0 + 2 * t) * p_.v.row_stride;
      pair_rows(a, 2 * t + 1 < cols ? a + p_.v.row_stride : nullptr, p_.v.col_stride, p_.v.cols, ldo_,
                v_ + t * ldo_);
    }
    std::fill(v_ + (cols + 1) / 2 * ldo_, v_ + v_rows_ * ldo_, Pair(0));
  }
  const Pair* panels() const { return panels_; }
  const Pair* v() const { return v_; }
  index_t ldv() const { return ldo_; }
  index_t tile_cols() const { return cols_; }
  bool v_finite() {
    if (v_finite_ < 0) v_finite_ = tile_values_finite(p_, cache_, keys_, j0_, cols_) ? 1 : 0;
    return v_finite_ == 1;
  }

 private:
  const RawProblem<BFloat16Bits>& p_;
  index_t keys_, ldo_, pairs_, ldpb_, v_rows_, values_at_ = 0;
  Arena<Pair> arena_;
  Pair *panels_, *v_, *q_, *pb_;
  PackCache<Pair>* cache_ = nullptr;
  index_t j0_ = 0, cols_ = 0;
  int v_finite_ = -1;
};

/// accumulate_strip on pairs: O (rows x ldo) += P V over the keys [lo, hi) of the tile (lo a
/// whole panel, so even), P rounded to bf16 into `pb` first. A pair holds two keys, and the
/// product goes by whole kPairBlock of pairs, so it brings in the keys from hi to the end of the
/// last block with weight 0: like keys the strip hides, they go through the product only when
/// the tile's V rows are finite (past the tile's keys, V's rows are zeros); else each row takes
/// its visible keys one by one (the same rounded weights, in float). On AMX tiles, the strip is
/// kPairStripRows rows whatever `rows`: the weights of the rows past it are 0, and O has those
/// rows (the query tile's accumulator, whole strips), which nothing reads.
inline void accumulate_strip_pairs(const RawProblem<BFloat16Bits>& p, index_t i0, index_t rows, index_t j0,
                                   index_t lo, index_t hi, const float* P, index_t ldp, PairTile& tile,
                                   float* o, index_t ldo, bool hides) {
  Pair* const pb = tile.weight_pairs();
  const index_t ldpb = tile.weight_stride();
  const index_t pairs = (hi - lo + 1) / 2, depth = whole_pair_blocks(pairs);
  const bool hides_keys = hides || (lo + 2 * depth > hi && hi < tile.tile_cols());
  weights_to_pairs(rows, lo, hi, P, ldp, pb, ldpb);
  const Pair* vp = tile.v();
  const index_t ldv = tile.ldv();
  if (!hides_keys || tile.v_finite()) {
    for (index_t r = 0; r < whole_pair_strips(rows); ++r)  // (AMX: whole blocks and strips)
      std::fill(pb + r * ldpb + (r < rows ? pairs : 0), pb + r * ldpb + depth, Pair(0));
    pairs_product(rows, ldo, depth, pb, ldpb, vp + lo / 2 * ldv, ldv, o, ldo);
    return;
  }
  for_each_visible(p, i0, rows, j0 + lo, hi - lo, [&](index_t r, index_t t) {
    const index_t key = lo + t;
    const float w = pair_half(pb[r * ldpb + t / 2], t % 2);
    const Pair* v = vp + key / 2 * ldv;
    for (index_t c = 0; c < p.v.cols; ++c) o[r * ldo + c] += w * pair_half(v[c], key % 2);
  });
}
#else
template <typename E>
constexpr bool kPairs = false;
using PairTile = void;  // never taken
#endif

/// What a call on element type E configures for its thread while it runs: AMX's tiles where its
/// pairs take them, else nothing.
template <typename E>
using PairTiles = std::conditional_t<kPairs<E> && kAmx, AmxTiles, NoTiles>;

/// The keys [lo, hi) of the key tile [j0, j0 + cols) that the strip of query rows
/// [i, i + rows) may see, lo rounded down to a multiple of `unit` (a panel, or a packet where
/// logits_strip may start) (lo == hi: none).
template <typename T>
Span strip_keys(const RawProblem<T>& p, index_t i, index_t rows, index_t j0, index_t cols, index_t unit) {
  const index_t lo = clamp_index(p.first_key(i) - j0, 0, cols) / unit * unit;
  return {lo, clamp_index(p.end_key(i + rows - 1) - j0, lo, cols)};
}

/// The forward's tiles on this CPU for head dims d_k and d_v (KernelSet::tiles; the decomposed
/// call takes the same key tiles). The one place that asks the tile policy.
template <typename T>
RawTiles forward_tiles_of(index_t dk, index_t dv) {
  using MK = Micro<T>;
  const index_t ldo = MK::whole_packets(dv);
  const CacheSizes caches = cache_sizes();
  const index_t kc =
      forward_tiles(caches, dk, ldo, MK::kRows, MK::kCols, static_cast<index_t>(sizeof(T))).keys;
  return {MK::kRows, MK::kCols, kc, caches.l1, caches.l2};
}
// (Unused in a kernel with a base, which takes its base's: tiled_isa.cpp.in.)
[[maybe_unused]] RawTiles forward_tiles_here(bool is_double, index_t dk, index_t dv) {
  return is_double ? forward_tiles_of<double>(dk, dv) : forward_tiles_of<float>(dk, dv);
}

template <typename E>
void fused_rows(const RawProblem<E>& p, index_t first, index_t count) {
  using T = ComputeScalar<E>;  // E: the arrays' element type
  using MK = Micro<T>;
  const T minus_inf = -std::numeric_limits<T>::infinity();
  const index_t dk = p.q.cols, dv = p.v.cols;
  const index_t ldo = MK::whole_packets(dv);  // O rows: whole packets
  const index_t kc = forward_tiles_of<T>(dk, dv).key_tile;
  const index_t lds = static_cast<index_t>(Arena<T>::round(kc));  // strip rows start 64-byte aligned
  // bf16 pairs on vdpbf16ps or AMX tiles where this kernel has them (PairTile), else tiles of the
  // compute type; strips of MR rows, or the pairs' own.
  using Tile = std::conditional_t<kPairs<E>, PairTile, KeyTile<E>>;
  constexpr index_t kStrip = kPairs<E> ? kPairStripRows : MK::kRows;
  // A strip's pass over a key tile starts at a whole packet of keys (logits_strip starts within
  // a panel), the pairs' at a whole panel: a block of 128 keys starts where it starts.
  constexpr index_t kStart = kPairs<E> ? MK::kCols : MK::kLanes;
  [[maybe_unused]] const PairTiles<E> amx_tiles;
  Arena<T> arena(Arena<T>::round(kRows * dk) + Tile::scratch(kc, dk, ldo) + Arena<T>::round(kStrip * lds) +
                 Arena<T>::round(kRows * ldo) + Arena<T>::round(2 * kRows));
  T* const q_buf = arena.take(kRows * dk);
  Tile tile(p, kc, ldo, arena);
  T* const s = arena.take(kStrip * lds);  // one strip's logits, then weights
  T* const acc = arena.take(kRows * ldo);
  T* const m = arena.take(kRows);
  T* const l = arena.take(kRows);
  // A narrow window slides along the diagonal: a tall row tile would compute many keys that
  // most of its rows do not see, so take shorter row tiles (window / 4 rows, at least 16).
  const index_t row_step = p.window_left >= 0 ? clamp_index(p.window_left / 4, 16, kRows) : kRows;
  // A programmable mask (mask_mod, a block mask; program.hpp) is asked about each strip's keys
  // once, before their logits (`seen`: 1 where the row sees the key), so that the strip computes
  // only the keys from the first to the last that one of its rows sees, as the built-in masks'
  // key ranges do; the logits take -inf where it hides a key (after the other extras, from
  // `extras`: p without it).
  const bool programmed = p.mask_mod != nullptr || p.blocks != nullptr;
  RawProblem<E> extras = p;
  extras.mask_mod = nullptr, extras.blocks = nullptr;
  Arena<unsigned char> seen_arena(programmed ? Arena<unsigned char>::round(kStrip * lds) : 0);
  unsigned char* const seen = seen_arena.take(programmed ? kStrip * lds : 0);

  // The online softmax of a strip's rows over the logits s[0, n) of a pass (a row that sees no key
  // yet: its weights 0): each row's maximum, its exps (one row after another, nothing between
  // them waiting on one, so that the core overlaps a row's chains with the next row's: a pass
  // over a block of 128 keys is 8 packets a row, too few to hide them alone), and its sum and
  // O rescaled. shifts[r]: -inf for a row without keys in the pass (it takes no part), else
  // anything; spans[r] its keys. Masked keys (-inf) weigh exactly 0.
  const auto softmax_update = [&](index_t s0, index_t srows, Span keys, const Span* spans, T* shifts) {
    for (index_t r = 0; r < srows; ++r) {
      if (shifts[r] == minus_inf) continue;
      const T tile_max = row_max_in_packets(s + r * lds, spans[r].a, spans[r].b);
      const T mr = m[s0 + r];
      shifts[r] = std::isnan(tile_max) || tile_max > mr ? tile_max : mr;
    }
    for (index_t r = 0; r < srows; ++r) {
      if (shifts[r] == minus_inf) std::fill(s + r * lds + keys.a, s + r * lds + keys.b, T(0));
    }
    T sums[kStrip];
    for (index_t r = 0; r < srows; ++r) {
      if (shifts[r] != minus_inf)
        sums[r] = exp_in_packets<Shift::RowMax>(s + r * lds, spans[r].a, spans[r].b, shifts[r]);
    }
    for (index_t r = 0; r < srows; ++r) {
      if (shifts[r] == minus_inf) continue;
      T& mr = m[s0 + r];
      // 0 on the row's first visible tile; exactly 1 (exp(0)) while the maximum stays
      const T rescale = mr == shifts[r] ? T(1) : std::exp(mr - shifts[r]);
      l[s0 + r] = rescale * l[s0 + r] + sums[r];
      if (rescale != T(1))
        Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>>(acc + (s0 + r) * ldo, ldo) *= rescale;
      mr = shifts[r];
    }
  };

  // Gathered passes (block-sparse attention): a strip whose rows see whole runs of Full tiles, in
  // full (no key range cuts one, no boolean mask, mask_mod or logit option), with every key's
  // panels and V rows kept (the PackCache), takes its runs' logits side by side into one row of
  // the strip's logits (a run's keys from a whole packet), as many runs as a key tile's keys, and
  // goes through the online softmax once for them all: runs of a few blocks cost few passes'
  // work per row, not one each. Returns false (nothing done) when the strip is not such.
  bool gathers = false;
  if constexpr (!kPairs<E>)
    gathers = p.blocks != nullptr && p.mask_mod == nullptr && !extras.has_extras() && tile.cached() && dv > 0;
  constexpr index_t kMaxRuns = kMaxKeyTile / kStart + 1;
  const auto gather_strip = [&](index_t is, index_t srows, index_t s0, const T* q, index_t ldq) -> bool {
    if constexpr (kPairs<E>) {
      return false;
    } else {
      Span runs[kMaxRuns];
      index_t count_runs = 0;
      bool whole = true;
      const Span keys = strip_keys(p, is, srows, 0, p.k.rows, kStart);
      if (keys.a >= keys.b) return true;  // no key: nothing to add
      for_each_shown_run(p, is, srows, 0, keys, kStart, [&](Span run) {
        // Each run must be Full for the strip and seen whole by its rows, and all but the last a
        // whole number of packets, so that the next one starts on a packet of the row.
        if (!whole || count_runs == kMaxRuns) {
          whole = false;
          return;
        }
        whole = blocks_all_full(p, is, srows, run.a, run.b - run.a) &&
                !strip_cuts(p, is, srows, 0, run.a, run.b) &&
                (count_runs == 0 || runs[count_runs - 1].b % kStart == 0);
        runs[count_runs++] = run;
      });
      if (!whole) return false;
      // Batches of runs whose keys fill at most kc columns (a run longer than that alone, in
      // pieces of kc).
      index_t next = 0, offset = 0;
      while (next < count_runs) {
        Span batch[kMaxRuns];
        index_t in_batch = 0, n = 0;
        while (next < count_runs) {
          Span run = runs[next];
          run.a += offset;
          const index_t len = std::min(run.b - run.a, kc - n);
          if (len <= 0 || (len < run.b - run.a && n > 0)) break;
          batch[in_batch++] = Span{run.a, run.a + len};
          n += (len + kStart - 1) / kStart * kStart;
          if (run.a + len < run.b) {
            offset += len;
            break;
          }
          offset = 0;
          ++next;
        }
        index_t c = 0, last = 0;  // last: one past the batch's last logit in the row
        for (index_t b = 0; b < in_batch; ++b) {
          const index_t pa = batch[b].a / MK::kCols * MK::kCols;
          tile.load_keys(pa, batch[b].b - pa);
          logits_strip(srows, batch[b].b - pa, dk, q, ldq, tile.panels(), s + c, lds, p.scale,
                       batch[b].a - pa, false);
          last = c + (batch[b].b - batch[b].a);
          c += (batch[b].b - batch[b].a + kStart - 1) / kStart * kStart;
        }
        Span spans[kStrip];
        T shifts[kStrip];
        for (index_t r = 0; r < srows; ++r) spans[r] = Span{0, last}, shifts[r] = T(0);
        softmax_update(s0, srows, Span{0, last}, spans, shifts);
        c = 0;
        for (index_t b = 0; b < in_batch; ++b) {
          const index_t len = batch[b].b - batch[b].a;
          tile.load_values(batch[b].a, len);
          product_strip(srows, ldo, len, s + c, lds, tile.v(), tile.ldv(), acc + s0 * ldo, ldo);
          c += (len + kStart - 1) / kStart * kStart;
        }
      }
      return true;
    }
  };

  for (index_t i0 = first; i0 < first + count; i0 += row_step) {
    const index_t rows = std::min(row_step, first + count - i0);
    // The keys some row of the tile may see; tiles outside are never computed.
    const index_t key_begin = p.first_key(i0), key_end = p.end_key(i0 + rows - 1);
    // (The pairs take their queries as pairs: nothing widened.)
    const auto Q = tile_rows(p.q, i0, kPairs<E> ? 0 : rows, q_buf, true);
    if constexpr (kPairs<E>) tile.load_queries(i0, rows);
    std::fill_n(acc, rows * ldo, T(0));
    std::fill_n(m, rows, minus_inf);
    std::fill_n(l, rows, T(0));

    // A block mask's strips that see whole runs of Full tiles only (block-sparse attention) go
    // first, each in as few passes as its keys fill (gathered: below); the others, tile by tile.
    bool gathered[kRows / kStrip + 1] = {};
    bool all_gathered = gathers;
    for (index_t s0 = 0; gathers && s0 < rows; s0 += kStrip) {
      gathered[s0 / kStrip] = gather_strip(i0 + s0, std::min<index_t>(kStrip, rows - s0), s0,
                                           Q.data() + s0 * Q.outerStride(), Q.outerStride());
      all_gathered = all_gathered && gathered[s0 / kStrip];
    }
    for (index_t j0 = tile.first(key_begin); !all_gathered && j0 < key_end; j0 += kc) {
      const index_t cols = tile.cols(j0, key_end);
      if (!blocks_show(p, i0, rows, j0, cols)) continue;  // a block mask's Empty tiles
      tile.load_keys(j0, cols);
      tile.load_values(j0, cols);
      // Strip by strip (MR rows): logits of the keys it may see, in whole panels, the online
      // softmax row by row, then the strip's share of P V.
      for (index_t s0 = 0; s0 < rows; s0 += kStrip) {
        if (gathered[s0 / kStrip]) continue;
        const index_t srows = std::min<index_t>(kStrip, rows - s0), is = i0 + s0;
        // One pass over the keys [keys.a, keys.b) of the tile (keys.a a whole panel): the logits,
        // the online softmax row by row, then the strip's share of P V.
        const auto pass = [&](Span keys) {
          // (Tiles the block mask calls Full hide nothing: nothing to ask.)
          const bool ask = programmed && !blocks_all_full(p, is, srows, j0 + keys.a, keys.b - keys.a);
          if (ask) {  // which keys each row sees, and the strip's first and last
            programmed_visibility(p, is, srows, j0 + keys.a, keys.b - keys.a, seen + keys.a, lds, true);
            index_t lo = keys.b, hi = keys.a;
            for (index_t r = 0; r < srows; ++r) {
              Span span = span_in_tile(p, is + r, j0, keys.b);
              span.a = std::max(span.a, keys.a), span.b = std::max(span.b, span.a);
              const ShownKeys shown = shown_keys(p, is + r, j0, seen + r * lds);
              const index_t a = shown.first(span.a, span.b);
              if (a < span.b) lo = std::min(lo, a), hi = std::max(hi, shown.last_end(a, span.b));
            }
            if (lo >= hi) return;  // no row of the strip sees a key of the pass
            keys.a = lo, keys.b = hi;
          }
          // From the start unit that holds keys.a: the logits, and the rest too, so that a
          // mask_mod that states a built-in mask computes what the built-in does, bit for bit.
          keys.a = keys.a / kStart * kStart;
          if constexpr (kPairs<E>) {
            const index_t qp = tile.pairs();
            pairs_logits(srows, keys.b - keys.a, qp, tile.query_pairs() + s0 * qp, qp,
                         tile.panels() + keys.a * qp, s + keys.a, lds, p.scale);
          } else {
            logits_strip(srows, keys.b, dk, Q.data() + s0 * Q.outerStride(), Q.outerStride(), tile.panels(),
                         s + keys.a, lds, p.scale, keys.a, false);
          }
          bool cut = false;  // does some row's key range leave out some key of the pass?
          // Each row's keys of the pass, and its new maximum (-inf: the row sees nothing yet and
          // takes no exp; 0 until the maxima are taken: the row has keys in the pass).
          Span spans[kStrip];
          T shifts[kStrip];
          for (index_t r = 0; r < srows; ++r) {
            const index_t i = is + r;
            T* const row_data = s + r * lds;
            shifts[r] = minus_inf;
            // The key range: keys this row does not see take no part, and weigh exactly 0.
            // span.a >= keys.a (the strip's first row), but for keys a block mask hides
            Span span = span_in_tile(p, i, j0, keys.b);
            span.a = std::max(span.a, keys.a), span.b = std::max(span.b, span.a);
            spans[r] = span;
            cut = cut || span.a > keys.a || span.b < keys.b;
            Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>> S(row_data, keys.b);
            S.segment(keys.a, span.a - keys.a).setZero();
            S.tail(keys.b - span.b).setZero();
            if (span.a >= span.b) continue;
            auto row = S.segment(span.a, span.b - span.a);
            if (ask) {
              if (extras.has_extras()) apply_extras(extras, i, j0 + span.a, row);
              shown_keys(p, i, j0, seen + r * lds).hide(row_data, span.a, span.b);
            } else if (programmed) {
              if (extras.has_extras()) apply_extras(extras, i, j0 + span.a, row);
            } else if (p.has_extras()) {
              apply_extras(p, i, j0 + span.a, row);
            }
            shifts[r] = T(0);  // (a row with keys)
          }
          softmax_update(s0, srows, keys, spans, shifts);
          // (Besides the key ranges, only the boolean mask and what mask_mod was asked can hide
          // keys of the pass.)
          const bool masked = cut || p.mask.data != nullptr || ask;
          if constexpr (kPairs<E>) {
            accumulate_strip_pairs(p, is, srows, j0, keys.a, keys.b, s, lds, tile, acc + s0 * ldo, ldo,
                                   masked);
          } else {
            accumulate_strip(p, is, srows, j0, keys.a, keys.b, s, lds, tile, acc + s0 * ldo, ldo, masked);
          }
        };
        const Span keys = strip_keys(p, is, srows, j0, cols, kStart);
        if (keys.a >= keys.b) continue;
        if (p.blocks == nullptr) {
          pass(keys);
          continue;
        }
        // A block mask: a pass per run of the tiles that some row of the strip sees, so that the
        // Empty tiles between them are not computed.
        for_each_shown_run(p, is, srows, j0, keys, kStart, pass);
      }
    }

    for (index_t r = 0; r < rows; ++r) {
      T* const o = acc + r * ldo;
      T lse = minus_inf;
      if (m[r] == minus_inf) {  // the row sees no key
        std::fill_n(o, ldo, T(0));
      } else {
        Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>>(o, ldo) /= l[r];
        lse = m[r] + std::log(l[r]);
      }
      if (p.has_sink) {  // the sink's share of the row (sink.hpp)
        const SinkStep<T> step = sink_step(lse, p.sink);
        if (lse != minus_inf) Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>>(o, ldo) *= step.factor;
        lse = step.lse;
      }
      if (p.want_lse) p.lse.data[(i0 + r) * p.lse.row_stride] = lse;
      store_row(p.attn, i0 + r, o);
    }
  }
}

template <typename E>
void decomposed_rows(const RawProblem<E>& p, index_t first, index_t count) {
  using T = ComputeScalar<E>;  // E: the arrays' element type
  using MK = Micro<T>;
  const T minus_inf = -std::numeric_limits<T>::infinity();
  const index_t tk = p.k.rows, dk = p.q.cols;
  const index_t dv = p.want_attn ? p.v.cols : 0;
  const index_t ldo = MK::whole_packets(dv);
  const index_t kc = forward_tiles_of<T>(dk, dv).key_tile;
  // The logits of kDecRows query rows at a time, in scratch whose rows start 64-byte aligned and
  // hold whole panels: Eigen's vectorised exp and sums peel scalar steps up to the first aligned
  // element, so doing them on the caller's SCORES would make the last bits depend on where
  // SCORES lies.
  const index_t lds = static_cast<index_t>(Arena<T>::round(MK::whole_panels(std::max<index_t>(tk, 1))));
  Arena<T> arena(Arena<T>::round(kDecRows * dk) + KeyTile<E>::scratch(kc, dk, ldo) +
                 Arena<T>::round(kDecRows * lds) + Arena<T>::round(kDecRows * ldo));
  T* const q_buf = arena.take(kDecRows * dk);
  KeyTile<E> tile(p, kc, ldo, arena);
  T* const s = arena.take(kDecRows * lds);
  T* const acc = arena.take(kDecRows * ldo);

  for (index_t i0 = first; i0 < first + count; i0 += kDecRows) {
    const index_t rows = std::min(kDecRows, first + count - i0);
    const index_t key_begin = p.first_key(i0), key_end = p.end_key(i0 + rows - 1);
    const index_t width = key_end - key_begin;
    const auto Q = tile_rows(p.q, i0, rows, q_buf, true);
    // Row r of the scratch holds keys [base, key_end) from s + r * lds; S is its part
    // [key_begin, key_end).
    const index_t base = tile.first(key_begin), off = key_begin - base;
    TileMap<T> S(s + off, rows, width, Eigen::OuterStride<>(lds));

    // load(j0, cols) for each key tile from base, then f(j0, s0, srows, keys) for each strip of
    // rows [i0 + s0, i0 + s0 + srows) that sees some of its keys (keys: strip_keys()).
    const auto each_strip = [&](auto&& load, auto&& f) {
      for (index_t j0 = base; j0 < key_end; j0 += kc) {
        const index_t cols = tile.cols(j0, key_end);
        load(j0, cols);
        for (index_t s0 = 0; s0 < rows; s0 += MK::kRows) {
          const index_t srows = std::min<index_t>(MK::kRows, rows - s0);
          const Span keys = strip_keys(p, i0 + s0, srows, j0, cols, MK::kCols);
          if (keys.a < keys.b) f(j0, s0, srows, keys);
        }
      }
    };

    // Scaled logits, key tile by key tile, strip by strip: only the panels a strip may see.
    each_strip([&](index_t j0, index_t cols) { tile.load_keys(j0, cols); },
               [&](index_t j0, index_t s0, index_t srows, const Span& keys) {
                 logits_strip(srows, keys.b - keys.a, dk, Q.data() + s0 * Q.outerStride(), Q.outerStride(),
                              tile.panels() + keys.a * dk, s + s0 * lds + (j0 - base) + keys.a, lds, p.scale);
               });
    // Masks and row softmax in place: keys a row does not see weigh exactly 0 (the logits outside
    // its range were never computed, or belong to another row's range; those before key_begin,
    // which the product with V reads from whole panels, too).
    for (index_t r = 0; r < rows; ++r) {
      const index_t i = i0 + r;
      const Span span = span_in_tile(p, i, key_begin, width);
      std::fill_n(s + r * lds, off, T(0));
      S.row(r).head(span.a).setZero();
      S.row(r).tail(width - span.b).setZero();
      auto row = S.row(r).segment(span.a, span.b - span.a);
      if (p.has_extras()) apply_extras(p, i, key_begin + span.a, row);
      const T max = row_max(row);
      T lse = minus_inf;
      if (max == minus_inf) {
        row.setZero();
      } else {
        const T sum = exp_in_packets<Shift::RowMax>(s + r * lds, off + span.a, off + span.b, max);
        row /= sum;
        // After the division, so that a NaN sum (a NaN logit this row sees) leaves the keys the
        // mask hides at exactly 0.
        zero_masked(p, i, key_begin + span.a, row);
        lse = max + std::log(sum);
      }
      if (p.has_sink) {  // the sink's share of the row (sink.hpp)
        const SinkStep<T> step = sink_step(lse, p.sink);
        if (lse != minus_inf) {
          row *= step.factor;
          zero_masked(p, i, key_begin + span.a, row);
        }
        lse = step.lse;
      }
      if (p.want_lse) p.lse.data[i * p.lse.row_stride] = lse;
    }
    // SCORES written once: in the compute type (streamed), or rounded to the 16-bit type.
    const auto store_scores = [&](const RawMatrix<T>& out) {
      if (out.col_stride == 1) {
        for (index_t r = 0; r < rows; ++r) {
          T* dst = out.data + (i0 + r) * out.row_stride;
          stream_row<T>(dst, nullptr, key_begin);
          stream_row(dst + key_begin, s + r * lds + off, width);
          stream_row<T>(dst + key_end, nullptr, tk - key_end);
        }
      } else {
        StridedMap<T> scores = map_of(out);
        scores.middleRows(i0, rows).leftCols(key_begin).setZero();
        scores.middleRows(i0, rows).middleCols(key_begin, width) = S;
        scores.middleRows(i0, rows).rightCols(tk - key_end).setZero();
      }
    };
    if constexpr (std::is_same_v<E, T>) {
      store_scores(p.scores_compute ? p.compute_scores : p.scores);
    } else if (p.scores_compute) {
      store_scores(p.compute_scores);
    } else if (tk > 0) {
      for (index_t r = 0; r < rows; ++r) {
        E* dst = p.scores.data + (i0 + r) * p.scores.row_stride;
        for (index_t j = 0; j < key_begin; ++j) dst[j * p.scores.col_stride] = E{0};
        narrow(s + r * lds + off, width, dst + key_begin * p.scores.col_stride, p.scores.col_stride);
        for (index_t j = key_end; j < tk; ++j) dst[j * p.scores.col_stride] = E{0};
      }
    }

    if (!p.want_attn) continue;
    std::fill_n(acc, rows * ldo, T(0));
    each_strip([&](index_t j0, index_t cols) { tile.load_values(j0, cols); },
               [&](index_t j0, index_t s0, index_t srows, const Span& keys) {
                 accumulate_strip(p, i0 + s0, srows, j0, keys.a, keys.b, s + s0 * lds + (j0 - base), lds,
                                  tile, acc + s0 * ldo, ldo,
                                  p.hides_some() || strip_cuts(p, i0 + s0, srows, j0, keys.a, keys.b));
               });
    for (index_t r = 0; r < rows; ++r) store_row(p.attn, i0 + r, acc + r * ldo);
  }
  finish_streams();
}

/// The kernel entry: fused or decomposed, by whether SCORES are wanted.
template <typename S>
void tiled_rows(const RawProblem<S>& p, index_t first, index_t count) {
  if (count <= 0) return;
  if (!p.want_scores) {
    fused_rows(p, first, count);
  } else {
    decomposed_rows(p, first, count);
  }
}

}  // namespace
}  // namespace internal
}  // namespace EigenAttention
