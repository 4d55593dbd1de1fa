// SPDX-License-Identifier: MIT
/// \file detail/AbiSingleHead.hpp
/// What the single-head front doors of Attention.hpp and Backward.hpp call across the boundary
/// into the compiled library: one exported forward and one backward per boundary scalar type
/// (float, double, BFloat16Bits, HalfBits). Each validates everything, then sizes the outputs
/// that are the caller's resizable Eigen matrices through the caller's own translation unit
/// (Output::resize: allocation stays on the consumer's side of the boundary), then computes.
/// Not part of the documented API: call the front doors.
#pragma once

#ifndef EIGEN_ATTENTION_PUBLIC_HEADER
#error \
    "EigenAttention: <EigenAttention/detail/AbiSingleHead.hpp> is internal, include <EigenAttention/EigenAttention.hpp> (or another public header) instead"
#endif

#include <cstddef>

#include <EigenAttention/BackwardTerms.hpp>
#include <EigenAttention/Masks.hpp>
#include <EigenAttention/Options.hpp>
#include <EigenAttention/Scalars.hpp>
#include <EigenAttention/Types.hpp>
#include <EigenAttention/export.hpp>

namespace EigenAttention {
namespace abi {

/// An output as it crosses the boundary: its storage as it is now and, for the caller's
/// Eigen::Matrix, how to size it. The call resizes only after every input and every output that
/// keeps its storage has passed its checks.
template <typename S>
struct Output {
  MatrixView<S> view{};  ///< the storage as it is now
  /// The caller's matrix and the function of the caller's translation unit that resizes it to
  /// rows x cols and returns its new storage; both null for storage of a fixed shape (a Map, Ref,
  /// block or a view).
  void* matrix = nullptr;
  MatrixView<S> (*resize)(void* matrix, std::ptrdiff_t rows, std::ptrdiff_t cols) = nullptr;
  std::ptrdiff_t compile_rows = -1, compile_cols = -1;  ///< the matrix's fixed sizes, -1 when Dynamic
  std::ptrdiff_t max_elements = 0;  ///< the most elements the caller's Eigen::Index counts
};

/// The single-head forward of the element type T whose log-sum-exps are of type L: SCORES into
/// `scores` (or, for the 16-bit types, into `float_scores` in float), ATTN into `attn`, the LSE
/// into `lse`, each when not null (`v` may be null only when `attn` is). `api` names the public
/// call in messages. attention_check() makes the checks attention() makes before it sizes an
/// output, and nothing else: for the distributed one-head calls, which size their outputs before
/// the collective call.
#define EIGEN_ATTENTION_ABI_SINGLE_HEAD(T, L)                                                                \
  EIGEN_ATTENTION_EXPORT void attention(const char* api, MatrixView<const T> q, MatrixView<const T> k,       \
                                        const MatrixView<const T>* v, Output<T>* scores, Output<T>* attn,    \
                                        Output<L>* lse, Output<L>* float_scores, const Options& opt,         \
                                        const Masks<T>& masks);                                              \
  EIGEN_ATTENTION_EXPORT void attention_backward(                                                            \
      const char* api, MatrixView<const T> q, MatrixView<const T> k, MatrixView<const T> v,                  \
      MatrixView<const T> attn, MatrixView<const L> lse, MatrixView<const T> d_attn,                         \
      const MatrixView<const T>* d_scores, Output<T>& dq, Output<T>& dk, Output<T>& dv, const Options& opt,  \
      const Masks<T>& masks, const BackwardTerms<T>& terms);                                                 \
  EIGEN_ATTENTION_EXPORT void attention_check(const char* api, MatrixView<const T> q, MatrixView<const T> k, \
                                              const MatrixView<const T>* v, Output<T>* attn, Output<L>* lse, \
                                              const Options& opt, const Masks<T>& masks);

EIGEN_ATTENTION_ABI_SINGLE_HEAD(float, float)
EIGEN_ATTENTION_ABI_SINGLE_HEAD(double, double)
EIGEN_ATTENTION_ABI_SINGLE_HEAD(BFloat16Bits, float)
EIGEN_ATTENTION_ABI_SINGLE_HEAD(HalfBits, float)
#undef EIGEN_ATTENTION_ABI_SINGLE_HEAD

}  // namespace abi
}  // namespace EigenAttention
