// SPDX-License-Identifier: MIT
/// \file Types.hpp
/// The matrix and view types that EigenAttention returns and takes.
#pragma once

#include <cstddef>
#include <type_traits>

#include <Eigen/Core>

#include <EigenAttention/Scalars.hpp>

namespace EigenAttention {

/// A dense row-major matrix: one row per token, each row contiguous. All results are of
/// this type; assigning one to an `Eigen::MatrixXd` (column-major) converts it.
template <typename Scalar>
using RowMatrix = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// A dense column vector (one entry per query row, e.g. the log-sum-exp).
template <typename Scalar>
using Vector = Eigen::Matrix<Scalar, Eigen::Dynamic, 1>;

/// A read-only view of any dense matrix in memory: element (i, j) is at
/// `data()[i * rowStride + j * colStride]` (Eigen calls these the outer and inner strides of a
/// row-major map). It describes row- and column-major matrices, maps and blocks alike, without
/// copying.
template <typename Scalar>
using ConstStridedMap =
    Eigen::Map<const RowMatrix<Scalar>, Eigen::Unaligned, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>>;

/// A writable view of any dense matrix in memory; see ConstStridedMap.
template <typename Scalar>
using StridedMap =
    Eigen::Map<RowMatrix<Scalar>, Eigen::Unaligned, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>>;

/// A matrix in memory as the library's compiled code sees it: element (i, j) is at
/// `data[i * row_stride + j * col_stride]`. Plain integers and a pointer, no Eigen type: this is
/// what crosses the boundary between your code and the compiled library, so that nothing there
/// depends on how either side was compiled (Eigen's alignment, vectorisation or index type).
/// The front doors build these from any Eigen matrix; compiled::view() does it for a Map.
template <typename Scalar>
struct MatrixView {
  Scalar* data = nullptr;         ///< element (0, 0); may be null when the matrix is empty
  std::ptrdiff_t rows = 0;        ///< number of rows
  std::ptrdiff_t cols = 0;        ///< number of columns
  std::ptrdiff_t row_stride = 0;  ///< elements from (i, j) to (i + 1, j)
  std::ptrdiff_t col_stride = 0;  ///< elements from (i, j) to (i, j + 1)
};

/// Eigen::bfloat16: computed in float, carried into the library as BFloat16Bits.
template <>
struct ScalarTraits<Eigen::bfloat16> : ComputedInFloat<BFloat16Bits, ScalarType::BFloat16> {};
/// Eigen::half: computed in float, carried into the library as HalfBits.
template <>
struct ScalarTraits<Eigen::half> : ComputedInFloat<HalfBits, ScalarType::Float16> {};
static_assert(sizeof(Eigen::bfloat16) == sizeof(BFloat16Bits) && sizeof(Eigen::half) == sizeof(HalfBits),
              "EigenAttention: Eigen's 16-bit types are expected to hold their 16 bits only");

/// What attention_decomposed() returns.
template <typename Scalar>
struct DecomposedResult {
  /// SCORES: T_q x T_k softmax weights. Row i sums to 1, or is all zero when query i sees no
  /// key. Entries of masked keys are exactly 0.
  RowMatrix<Scalar> scores;
  /// ATTN = SCORES * V: T_q x d_v.
  RowMatrix<Scalar> attn;
  /// T_q log-sum-exps: lse(i) = log(sum_j exp(scale * (Q K^T)(i, j))) over the keys query i
  /// sees; -infinity when it sees none. SCORES(i, j) = exp(scale * (Q K^T)(i, j) - lse(i)).
  /// In the compute type (float for bfloat16 and half inputs: a rounded LSE would lose the
  /// digits the backward pass needs).
  Vector<ComputeScalar<Scalar>> lse;
  /// SCORES in float instead of `scores`, for bfloat16 and half inputs with
  /// Options::float_scores set (then `scores` is empty); empty otherwise.
  RowMatrix<ComputeScalar<Scalar>> scores_float;
};

/// What attention_backward() returns: the gradients of a scalar loss L with respect to the
/// inputs of the forward call (Backward.hpp).
template <typename Scalar>
struct Gradients {
  RowMatrix<Scalar> dq;  ///< dL/dQ: T_q x d_k.
  RowMatrix<Scalar> dk;  ///< dL/dK: T_k x d_k.
  RowMatrix<Scalar> dv;  ///< dL/dV: T_k x d_v.
};

}  // namespace EigenAttention
