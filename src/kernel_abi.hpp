// The boundary between the dispatcher and the per-instruction-set kernels: plain pointers and
// strides, no Eigen types. Each kernel translation unit compiles its own private copy of Eigen
// (see tiled_kernel.hpp), so nothing Eigen-typed may cross this boundary. Internal.
#pragma once

#include <algorithm>
#include <cstddef>

namespace EigenAttention {
namespace internal {

using index_t = std::ptrdiff_t;  // Eigen::Index

/// The kernels' per-thread scratch holds fewer than kScratchRows rows of max(d_k, d_v, T_k)
/// elements (tiled_kernel.hpp checks its tile sizes against it); validation rejects sizes for
/// which that many rows would overflow Eigen::Index (validate.hpp).
constexpr index_t kScratchRows = 4096;

/// A strided matrix in memory: element (i, j) is data[i * row_stride + j * col_stride].
template <typename T>
struct RawMatrix {
  T* data;
  index_t rows, cols;
  index_t row_stride, col_stride;
};

/// A RawMatrix whose strides are 0 when it holds no element: an empty Eigen matrix may have a
/// null data(), and the kernels' row and column offsets (data + i * row_stride) must then stay
/// null + 0, which is defined, rather than null + i.
template <typename T>
RawMatrix<T> raw_matrix(T* data, index_t rows, index_t cols, index_t row_stride, index_t col_stride) {
  if (rows == 0 || cols == 0) return {data, rows, cols, 0, 0};
  return {data, rows, cols, row_stride, col_stride};
}

/// One validated single-head problem and where its results go.
///
/// Query row i sees the keys [first_key(i), end_key(i)) (both non-decreasing in i), less those
/// where `mask` is false. The logit of a visible key is, in this order: scale * q.k, soft-capped
/// (softcap > 0), minus alibi_slope * |i + offset - j| (has_alibi), plus bias(i, j) (bias.data).
template <typename T>
struct RawProblem {
  RawMatrix<const T> q, k, v;  // T_q x d_k, T_k x d_k, T_k x d_v
  T scale;
  bool causal;
  index_t offset;                      // 0, or T_k - T_q for bottom-right alignment
  index_t window_left, window_right;   // -1: unbounded
  T softcap;                           // 0: off
  bool has_alibi;
  T alibi_slope;
  RawMatrix<const T> bias;     // T_q x T_k additive bias, when data is not null
  RawMatrix<const bool> mask;  // T_q x T_k, true = may attend, when data is not null
  RawMatrix<T> scores;  // T_q x T_k, when want_scores (the decomposed call)
  RawMatrix<T> attn;    // T_q x d_v, when want_attn
  RawMatrix<T> lse;     // T_q x 1, when want_lse
  bool want_scores, want_attn, want_lse;

  /// The first key query i may see. (Written so that no window size, up to PTRDIFF_MAX, can
  /// overflow: i + offset lies in [-T_q, T_k).)
  index_t first_key(index_t i) const {
    const index_t c = i + offset;
    if (window_left < 0 || window_left >= c) return 0;
    return std::min<index_t>(c - window_left, k.rows);
  }
  /// One past the last key query i may see (never below first_key(i)).
  index_t end_key(index_t i) const {
    const index_t c = i + offset;
    index_t end = k.rows;
    if (causal) end = std::min(end, c + 1);
    if (window_right >= 0 && window_right < k.rows - c) end = std::min(end, c + window_right + 1);
    return std::clamp<index_t>(end, first_key(i), k.rows);
  }
  /// Does any logit need more than scale * q.k and the key range?
  bool has_extras() const { return softcap > 0 || has_alibi || bias.data != nullptr || mask.data != nullptr; }
};

/// A tiled kernel compiled for one instruction set: computes every output row of
/// [first_row, first_row + rows). Calls on disjoint row ranges may run concurrently; the
/// result of each row never depends on how the rows were split.
template <typename T>
using RowsKernel = void (*)(const RawProblem<T>& p, index_t first_row, index_t rows);

#define EIGEN_ATTENTION_DECLARE_TILED(isa)                                              \
  void isa##_rows(const RawProblem<float>& p, index_t first_row, index_t rows);         \
  void isa##_rows(const RawProblem<double>& p, index_t first_row, index_t rows);

EIGEN_ATTENTION_DECLARE_TILED(portable)
EIGEN_ATTENTION_DECLARE_TILED(avx2)
EIGEN_ATTENTION_DECLARE_TILED(avx512)
#undef EIGEN_ATTENTION_DECLARE_TILED

}  // namespace internal
}  // namespace EigenAttention
