// The boundary between the dispatcher and the per-instruction-set kernels: plain pointers and
// strides, no Eigen types. Each kernel translation unit compiles its own private copy of Eigen
// (see tiled_kernel.hpp), so nothing Eigen-typed may cross this boundary. Internal.
#pragma once

#include <algorithm>
#include <cstddef>

namespace EigenAttention {
namespace internal {

using index_t = std::ptrdiff_t;  // Eigen::Index

/// A strided matrix in memory: element (i, j) is data[i * row_stride + j * col_stride].
template <typename T>
struct RawMatrix {
  T* data;
  index_t rows, cols;
  index_t row_stride, col_stride;
};

/// One validated problem and where its results go.
template <typename T>
struct RawProblem {
  RawMatrix<const T> q, k, v;  // T_q x d_k, T_k x d_k, T_k x d_v
  T scale;
  bool causal;
  index_t offset;       // key j visible to query i iff !causal or j <= i + offset
  RawMatrix<T> scores;  // T_q x T_k, when want_scores (the decomposed call)
  RawMatrix<T> attn;    // T_q x d_v, when want_attn
  RawMatrix<T> lse;     // T_q x 1, when want_lse
  bool want_scores, want_attn, want_lse;

  index_t visible(index_t i) const {
    if (!causal) return k.rows;
    return std::clamp<index_t>(i + offset + 1, 0, k.rows);
  }
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
