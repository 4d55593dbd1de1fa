// SPDX-License-Identifier: MIT
/// \file Attention.hpp
/// Scaled dot-product attention for one head: the calls.
///
/// ATTN = softmax(Q K^T * scale) V for Q (T_q x d_k), K (T_k x d_k) and V (T_k x d_v): any Eigen
/// dense expressions of one scalar type, float, double, Eigen::bfloat16 or Eigen::half (the
/// last two computed in float, results rounded back, LSE in float; SCORES in float on request:
/// [Low precision](docs/low_precision.md)); results are row-major (RowMatrix).
/// What a call computes, step by step (scale, soft-cap, causal mask and its alignment, window,
/// softmax, log-sum-exp), and what a row that sees no key or an empty size gives, is stated
/// once, in [Semantics](docs/semantics.md); what throws, non-finite inputs, determinism, memory
/// and error bounds in [Guarantees](docs/guarantees.md). Each call below gives its shapes and
/// exceptions: every call validates its arguments before it writes anything and throws
/// std::invalid_argument naming the shapes or value at fault.
///
/// attention() is the fused call (ATTN only, memory O(T)); attention_decomposed() also returns
/// the T_q x T_k SCORES; attention_scores() returns SCORES alone. The `_into` forms write into
/// storage you provide and allocate nothing in a loop: the tiled kernels keep a small
/// per-thread workspace that only grows (Kernel::Reference, the yardstick, does allocate).
#pragma once

// Lets the detail/ headers in (each refuses to be included on its own); never undefined, so
// that any public header may include them, in any order.
#ifndef EIGEN_ATTENTION_PUBLIC_HEADER
#define EIGEN_ATTENTION_PUBLIC_HEADER
#endif

#include <Eigen/Core>

#include <EigenAttention/Masks.hpp>
#include <EigenAttention/Options.hpp>
#include <EigenAttention/Types.hpp>
#include <EigenAttention/detail/FrontDoor.hpp>
#include <EigenAttention/detail/SingleHead.hpp>

namespace EigenAttention {

/// ATTN = softmax(mask(Q K^T) * scale) V, never forming the T_q x T_k matrix.
/// \param Q T_q x d_k queries, one row per token.
/// \param K T_k x d_k keys.
/// \param V T_k x d_v values.
/// \param opt causal mask and its alignment, scale, window, soft-cap, kernel, threads
/// (default: Options{}).
/// \param masks optional boolean mask and additive bias of T_q x T_k (BroadcastView::of(matrix)),
/// key length and ALiBi slope (one entry each), as the multi-head calls take them (default: none).
/// Every call of this header takes them after `opt`.
/// \returns T_q x d_v, row-major.
/// \throws std::invalid_argument on mismatched shapes or a bad scale (message names them).
/// \code
/// Eigen::MatrixXf Q = Eigen::MatrixXf::Random(5, 8), K = Eigen::MatrixXf::Random(7, 8),
///                 V = Eigen::MatrixXf::Random(7, 3);
/// EigenAttention::Options opt;
/// opt.causal = true;
/// auto O = EigenAttention::attention(Q, K, V, opt);  // 5 x 3
/// \endcode
template <class DQ, class DK, class DV>
RowMatrix<typename DQ::Scalar> attention(const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
                                         const Eigen::MatrixBase<DV>& V, const Options& opt = {},
                                         const Masks<typename DQ::Scalar>& masks = {}) {
  RowMatrix<typename DQ::Scalar> attn;
  detail::forward("attention", Q, K, &V, opt, masks, detail::output<detail::Role::Attn>(attn));
  return attn;
}

/// attention() into caller storage: `attn` receives ATTN (T_q x d_v).
/// `attn` may be an Eigen::Matrix (resized if needed; no allocation when it already fits), or a
/// Map, Ref or block of the right shape, but not a const object (that does not compile). It must
/// not overlap Q, K or V.
/// \throws std::invalid_argument as attention(), or when `attn` has the wrong shape or overlaps.
template <class DQ, class DK, class DV, class DO, detail::EnableIfMatrix<DO> = 0>
void attention_into(const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
                    const Eigen::MatrixBase<DV>& V, DO&& attn, const Options& opt = {},
                    const Masks<typename DQ::Scalar>& masks = {}) {
  detail::forward("attention_into", Q, K, &V, opt, masks, detail::output<detail::Role::Attn>(attn));
}

/// attention_into() that also writes each query row's log-sum-exp into `lse` (T_q entries;
/// -inf for a row that sees no key). With (ATTN, LSE) of two disjoint key sets, the result
/// over their union can be merged exactly.
template <class DQ, class DK, class DV, class DO, class DL, detail::EnableIfMatrix<DO, DL> = 0>
void attention_into(const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
                    const Eigen::MatrixBase<DV>& V, DO&& attn, DL&& lse, const Options& opt = {},
                    const Masks<typename DQ::Scalar>& masks = {}) {
  detail::forward("attention_into", Q, K, &V, opt, masks, detail::output<detail::Role::Attn>(attn),
                  detail::output<detail::Role::Lse>(lse));
}

/// SCORES (T_q x T_k softmax weights), ATTN (T_q x d_v) and LSE (T_q), computed in one pass.
/// \throws std::invalid_argument on mismatched shapes or a bad scale.
/// \code
/// auto r = EigenAttention::attention_decomposed(Q, K, V);
/// r.scores;  // T_q x T_k, rows sum to 1
/// r.attn;    // T_q x d_v, equal to r.scores * V
/// \endcode
template <class DQ, class DK, class DV>
DecomposedResult<typename DQ::Scalar> attention_decomposed(const Eigen::MatrixBase<DQ>& Q,
                                                           const Eigen::MatrixBase<DK>& K,
                                                           const Eigen::MatrixBase<DV>& V,
                                                           const Options& opt = {},
                                                           const Masks<typename DQ::Scalar>& masks = {}) {
  using Scalar = typename DQ::Scalar;
  using detail::Role;
  DecomposedResult<Scalar> r;
  if (kIsLowPrecision<Scalar> && opt.float_scores) {
    detail::forward("attention_decomposed", Q, K, &V, opt, masks,
                    detail::output<Role::Scores>(r.scores_float), detail::output<Role::Attn>(r.attn),
                    detail::output<Role::Lse>(r.lse));
  } else {
    detail::forward("attention_decomposed", Q, K, &V, opt, masks, detail::output<Role::Scores>(r.scores),
                    detail::output<Role::Attn>(r.attn), detail::output<Role::Lse>(r.lse));
  }
  return r;
}

/// attention_decomposed() into caller storage: `scores` (T_q x T_k) and `attn` (T_q x d_v).
/// Outputs as for attention_into(); they must overlap neither the inputs nor each other.
template <class DQ, class DK, class DV, class DS, class DO, detail::EnableIfMatrix<DS, DO> = 0>
void attention_decomposed_into(const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
                               const Eigen::MatrixBase<DV>& V, DS&& scores, DO&& attn,
                               const Options& opt = {}, const Masks<typename DQ::Scalar>& masks = {}) {
  detail::forward("attention_decomposed_into", Q, K, &V, opt, masks,
                  detail::output<detail::Role::Scores>(scores), detail::output<detail::Role::Attn>(attn));
}

/// attention_decomposed_into() that also writes the log-sum-exps into `lse` (T_q entries).
template <class DQ, class DK, class DV, class DS, class DO, class DL, detail::EnableIfMatrix<DS, DO, DL> = 0>
void attention_decomposed_into(const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
                               const Eigen::MatrixBase<DV>& V, DS&& scores, DO&& attn, DL&& lse,
                               const Options& opt = {}, const Masks<typename DQ::Scalar>& masks = {}) {
  detail::forward("attention_decomposed_into", Q, K, &V, opt, masks,
                  detail::output<detail::Role::Scores>(scores), detail::output<detail::Role::Attn>(attn),
                  detail::output<detail::Role::Lse>(lse));
}

/// SCORES alone: the T_q x T_k softmax weights. Needs no V.
/// \throws std::invalid_argument on mismatched shapes or a bad scale.
template <class DQ, class DK>
RowMatrix<typename DQ::Scalar> attention_scores(const Eigen::MatrixBase<DQ>& Q,
                                                const Eigen::MatrixBase<DK>& K, const Options& opt = {},
                                                const Masks<typename DQ::Scalar>& masks = {}) {
  RowMatrix<typename DQ::Scalar> scores;
  detail::forward("attention_scores", Q, K, static_cast<const Eigen::MatrixBase<DK>*>(nullptr), opt, masks,
                  detail::output<detail::Role::Scores>(scores));
  return scores;
}

/// attention_scores() into caller storage (`scores`, T_q x T_k).
template <class DQ, class DK, class DS, detail::EnableIfMatrix<DS> = 0>
void attention_scores_into(const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K, DS&& scores,
                           const Options& opt = {}, const Masks<typename DQ::Scalar>& masks = {}) {
  detail::forward("attention_scores_into", Q, K, static_cast<const Eigen::MatrixBase<DK>*>(nullptr), opt,
                  masks, detail::output<detail::Role::Scores>(scores));
}

/// attention_scores_into() that also writes each query row's log-sum-exp into `lse` (T_q entries,
/// of the compute type).
template <class DQ, class DK, class DS, class DL, detail::EnableIfMatrix<DS, DL> = 0>
void attention_scores_into(const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K, DS&& scores,
                           DL&& lse, const Options& opt = {}, const Masks<typename DQ::Scalar>& masks = {}) {
  detail::forward("attention_scores_into", Q, K, static_cast<const Eigen::MatrixBase<DK>*>(nullptr), opt,
                  masks, detail::output<detail::Role::Scores>(scores),
                  detail::output<detail::Role::Lse>(lse));
}

}  // namespace EigenAttention
