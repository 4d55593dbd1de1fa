// SPDX-License-Identifier: MIT
/// \file Compiled.hpp
/// Version 0.2's `compiled::` forms of the single-head calls, as inline forwarders for one minor
/// version (removed in 0.4; the compiler warns at every use), and `compiled::view()`, the
/// MatrixView of a strided map.
///
/// In 0.3 the single-head calls of Attention.hpp and Backward.hpp take any Eigen dense
/// expression, strided maps included, and cross into the compiled library through `abi::`
/// (detail/AbiSingleHead.hpp): one call that validates, sizes the resizable outputs in your
/// translation unit, and computes. `compiled::validate`, `validate_into`, `validate_backward`,
/// `check_result_size` and `prefer_huge_pages` are gone: every call validates its arguments
/// itself, before it resizes or writes anything (docs/migration.md).
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include <EigenAttention/Attention.hpp>
#include <EigenAttention/Backward.hpp>
#include <EigenAttention/Masks.hpp>
#include <EigenAttention/Options.hpp>
#include <EigenAttention/Types.hpp>
#include <EigenAttention/detail/AbiSingleHead.hpp>

namespace EigenAttention {
namespace compiled {

/// The MatrixView of a strided Eigen map (ConstStridedMap, StridedMap, or any Map/Matrix with
/// direct access: its data(), sizes and strides).
template <class Derived>
MatrixView<std::remove_pointer_t<decltype(std::declval<Derived&>().data())>> view(Derived& m) {
  return {m.data(), static_cast<std::ptrdiff_t>(m.rows()), static_cast<std::ptrdiff_t>(m.cols()),
          static_cast<std::ptrdiff_t>(m.rowStride()), static_cast<std::ptrdiff_t>(m.colStride())};
}

/// The writable MatrixView of an output map (outputs arrive as `const StridedMap&`, Eigen's
/// idiom for writable views).
template <typename Scalar>
MatrixView<Scalar> view(const StridedMap<Scalar>& m) {
  return {const_cast<Scalar*>(m.data()), static_cast<std::ptrdiff_t>(m.rows()),
          static_cast<std::ptrdiff_t>(m.cols()), static_cast<std::ptrdiff_t>(m.rowStride()),
          static_cast<std::ptrdiff_t>(m.colStride())};
}

/// 0.2's inputs of compiled::backward(), as views of the compiled library's scalar types.
template <typename Scalar>
struct BackwardInputs {
  MatrixView<const Scalar> q;                   ///< the forward's Q (T_q x d_k)
  MatrixView<const Scalar> k;                   ///< the forward's K (T_k x d_k)
  MatrixView<const Scalar> v;                   ///< the forward's V (T_k x d_v)
  MatrixView<const Scalar> attn;                ///< the forward's ATTN (T_q x d_v)
  MatrixView<const ComputeScalar<Scalar>> lse;  ///< the forward's LSE (T_q x 1), in the compute type
  MatrixView<const Scalar> d_attn;              ///< dL/dATTN (T_q x d_v)
  MatrixView<const Scalar> d_scores;            ///< dL/dSCORES (T_q x T_k), read when has_d_scores
  bool has_d_scores = false;                    ///< is d_scores given?
};

/// \cond
#define EIGEN_ATTENTION_DEPRECATED_RUN(T, L)                                                                \
  [[deprecated(                                                                                             \
      "EigenAttention 0.3: call attention_into / attention_decomposed_into / attention_scores_into "        \
      "on Eigen maps")]] inline void                                                                        \
  run(const char* api, MatrixView<const T> q, MatrixView<const T> k, const MatrixView<const T>* v,          \
      const MatrixView<T>* scores, const MatrixView<T>* attn, const MatrixView<L>* lse, const Options& opt, \
      const Masks<T>& masks) {                                                                              \
    abi::Output<T> s, a;                                                                                    \
    abi::Output<L> l;                                                                                       \
    if (scores != nullptr) s.view = *scores;                                                                \
    if (attn != nullptr) a.view = *attn;                                                                    \
    if (lse != nullptr) l.view = *lse;                                                                      \
    abi::attention(api, q, k, v, scores ? &s : nullptr, attn ? &a : nullptr, lse ? &l : nullptr, nullptr,   \
                   opt, masks);                                                                             \
  }                                                                                                         \
  [[deprecated("EigenAttention 0.3: call attention_backward_into on Eigen maps")]] inline void backward(    \
      const char* api, const BackwardInputs<T>& in, const MatrixView<T>& dq, const MatrixView<T>& dk,       \
      const MatrixView<T>& dv, const Options& opt, const Masks<T>& masks) {                                 \
    abi::Output<T> gq, gk, gv;                                                                              \
    gq.view = dq, gk.view = dk, gv.view = dv;                                                               \
    abi::attention_backward(api, in.q, in.k, in.v, in.attn, in.lse, in.d_attn,                              \
                            in.has_d_scores ? &in.d_scores : nullptr, gq, gk, gv, opt, masks, {});          \
  }
EIGEN_ATTENTION_DEPRECATED_RUN(float, float)
EIGEN_ATTENTION_DEPRECATED_RUN(double, double)
#undef EIGEN_ATTENTION_DEPRECATED_RUN
/// \endcond

/// 0.2's compiled::attention on strided maps.
template <typename Scalar>
[[deprecated(
    "EigenAttention 0.3: call attention(q, k, v, opt, masks): it takes strided maps")]] RowMatrix<Scalar>
attention(const ConstStridedMap<Scalar>& q, const ConstStridedMap<Scalar>& k,
          const ConstStridedMap<Scalar>& v, const Options& opt, const Masks<Scalar>& masks = {}) {
  return EigenAttention::attention(q, k, v, opt, masks);
}

/// 0.2's compiled::attention_into on strided maps (`lse` null: not asked for).
template <typename Scalar>
[[deprecated("EigenAttention 0.3: call attention_into(q, k, v, attn[, lse], opt, masks)")]] void
attention_into(const ConstStridedMap<Scalar>& q, const ConstStridedMap<Scalar>& k,
               const ConstStridedMap<Scalar>& v, const StridedMap<Scalar>& out,
               const StridedMap<ComputeScalar<Scalar>>* lse, const Options& opt,
               const Masks<Scalar>& masks = {}) {
  if (lse != nullptr) {
    EigenAttention::attention_into(q, k, v, out, *lse, opt, masks);
  } else {
    EigenAttention::attention_into(q, k, v, out, opt, masks);
  }
}

/// 0.2's compiled::attention_decomposed on strided maps.
template <typename Scalar>
[[deprecated("EigenAttention 0.3: call attention_decomposed(q, k, v, opt, masks)")]] DecomposedResult<Scalar>
attention_decomposed(const ConstStridedMap<Scalar>& q, const ConstStridedMap<Scalar>& k,
                     const ConstStridedMap<Scalar>& v, const Options& opt, const Masks<Scalar>& masks = {}) {
  return EigenAttention::attention_decomposed(q, k, v, opt, masks);
}

/// 0.2's compiled::attention_decomposed_into on strided maps.
template <typename Scalar, typename ScoresScalar>
[[deprecated(
    "EigenAttention 0.3: call attention_decomposed_into(q, k, v, scores, attn[, lse], opt, masks)")]] void
attention_decomposed_into(const ConstStridedMap<Scalar>& q, const ConstStridedMap<Scalar>& k,
                          const ConstStridedMap<Scalar>& v, const StridedMap<ScoresScalar>& scores,
                          const StridedMap<Scalar>& attn, const StridedMap<ComputeScalar<Scalar>>* lse,
                          const Options& opt, const Masks<Scalar>& masks = {}) {
  if (lse != nullptr) {
    EigenAttention::attention_decomposed_into(q, k, v, scores, attn, *lse, opt, masks);
  } else {
    EigenAttention::attention_decomposed_into(q, k, v, scores, attn, opt, masks);
  }
}

/// 0.2's compiled::attention_scores on strided maps.
template <typename Scalar>
[[deprecated("EigenAttention 0.3: call attention_scores(q, k, opt, masks)")]] RowMatrix<Scalar>
attention_scores(const ConstStridedMap<Scalar>& q, const ConstStridedMap<Scalar>& k, const Options& opt,
                 const Masks<Scalar>& masks = {}) {
  return EigenAttention::attention_scores(q, k, opt, masks);
}

/// 0.2's compiled::attention_scores_into on strided maps (`lse` null: not asked for).
template <typename Scalar, typename ScoresScalar>
[[deprecated("EigenAttention 0.3: call attention_scores_into(q, k, scores[, lse], opt, masks)")]] void
attention_scores_into(const ConstStridedMap<Scalar>& q, const ConstStridedMap<Scalar>& k,
                      const StridedMap<ScoresScalar>& scores, const StridedMap<ComputeScalar<Scalar>>* lse,
                      const Options& opt, const Masks<Scalar>& masks = {}) {
  if (lse != nullptr) {
    EigenAttention::attention_scores_into(q, k, scores, *lse, opt, masks);
  } else {
    EigenAttention::attention_scores_into(q, k, scores, opt, masks);
  }
}

}  // namespace compiled
}  // namespace EigenAttention
