// SPDX-License-Identifier: MIT
/// \file Backward.hpp
/// Training: the gradients of a scalar loss L through one attention head.
///
/// Given the forward's inputs Q (T_q x d_k), K (T_k x d_k), V (T_k x d_v), its ATTN
/// (T_q x d_v) and log-sum-exps LSE (T_q x 1, from attention_decomposed().lse or
/// attention_into(Q, K, V, out, lse, opt)), and d_attn = dL/dATTN (T_q x d_v), the calls here
/// return dL/dQ, dL/dK and dL/dV. `opt` must be the forward's Options (scale, causal mask and
/// alignment, window, soft-cap); `threads` and `kernel` may differ. With d_scores = dL/dSCORES
/// (T_q x T_k) they also carry a loss on the attention weights themselves (a distillation,
/// entropy or alignment loss); entries of d_scores at masked positions have no effect.
///
/// The tiled kernels recompute the weights tile by tile from Q, K and LSE (FlashAttention-2's
/// backward) and never form a T_q x T_k matrix; the result is bitwise identical for every
/// Options::threads. A row that sees no key contributes nothing (its dQ row is 0); NaN in an
/// input reaches only the gradients that depend on it. What is computed, step by step, is in
/// [Training](docs/training.md).
#pragma once

// Lets the detail/ headers in (each refuses to be included on its own); never undefined, so
// that any public header may include them, in any order.
#ifndef EIGEN_ATTENTION_PUBLIC_HEADER
#define EIGEN_ATTENTION_PUBLIC_HEADER
#endif

#include <Eigen/Core>

#include <EigenAttention/BackwardTerms.hpp>
#include <EigenAttention/Masks.hpp>
#include <EigenAttention/Options.hpp>
#include <EigenAttention/Types.hpp>
#include <EigenAttention/detail/FrontDoor.hpp>
#include <EigenAttention/detail/SingleHead.hpp>

namespace EigenAttention {

/// dL/dQ, dL/dK and dL/dV of a scalar loss L, given d_attn = dL/dATTN.
/// \param Q, K, V the forward's inputs.
/// \param attn the forward's ATTN (T_q x d_v).
/// \param lse the forward's log-sum-exps (T_q x 1).
/// \param d_attn dL/dATTN (T_q x d_v).
/// \param opt the forward's Options.
/// \param masks the forward's masks (default: none).
/// \param terms dL/dLSE to add, and where dL/dsinks goes (BackwardTerms.hpp; default: neither).
/// \returns Gradients: dq (T_q x d_k), dk (T_k x d_k), dv (T_k x d_v), row-major.
/// \throws std::invalid_argument on mismatched shapes or bad options (message names them).
/// \code
/// EigenAttention::RowMatrix<float> out;
/// Eigen::VectorXf lse;
/// EigenAttention::attention_into(Q, K, V, out, lse, opt);
/// Eigen::MatrixXf d_out = out - target;  // dL/dATTN of L = |ATTN - target|^2 / 2
/// auto g = EigenAttention::attention_backward(Q, K, V, out, lse, d_out, opt);
/// \endcode
template <class DQ, class DK, class DV, class DA, class DL, class DG>
Gradients<typename DQ::Scalar> attention_backward(
    const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K, const Eigen::MatrixBase<DV>& V,
    const Eigen::MatrixBase<DA>& attn, const Eigen::MatrixBase<DL>& lse, const Eigen::MatrixBase<DG>& d_attn,
    const Options& opt = {}, const Masks<typename DQ::Scalar>& masks = {},
    const BackwardTerms<typename DQ::Scalar>& terms = {}) {
  Gradients<typename DQ::Scalar> g;
  detail::backward("attention_backward", Q, K, V, attn, lse, d_attn,
                   static_cast<const Eigen::MatrixBase<DG>*>(nullptr), g.dq, g.dk, g.dv, opt, masks, terms);
  return g;
}

/// attention_backward() through the weights too: `d_scores` = dL/dSCORES (T_q x T_k) adds the
/// gradient of a loss on SCORES (d_attn may then be zero). Its entries at masked positions
/// have no effect.
template <class DQ, class DK, class DV, class DA, class DL, class DG, class DS>
Gradients<typename DQ::Scalar> attention_backward(
    const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K, const Eigen::MatrixBase<DV>& V,
    const Eigen::MatrixBase<DA>& attn, const Eigen::MatrixBase<DL>& lse, const Eigen::MatrixBase<DG>& d_attn,
    const Eigen::MatrixBase<DS>& d_scores, const Options& opt = {},
    const Masks<typename DQ::Scalar>& masks = {}, const BackwardTerms<typename DQ::Scalar>& terms = {}) {
  Gradients<typename DQ::Scalar> g;
  detail::backward("attention_backward", Q, K, V, attn, lse, d_attn, &d_scores, g.dq, g.dk, g.dv, opt, masks,
                   terms);
  return g;
}

/// attention_backward() into caller storage: `dq` (T_q x d_k), `dk` (T_k x d_k), `dv`
/// (T_k x d_v), each an Eigen::Matrix (resized if needed; no allocation when it already fits)
/// or a Map, Ref or block of the right shape. They must overlap no input and each other.
/// \throws std::invalid_argument as attention_backward(), or when an output has the wrong shape
/// or overlaps.
template <class DQ, class DK, class DV, class DA, class DL, class DG, class DGQ, class DGK, class DGV,
          detail::EnableIfMatrix<DGQ, DGK, DGV> = 0>
void attention_backward_into(const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
                             const Eigen::MatrixBase<DV>& V, const Eigen::MatrixBase<DA>& attn,
                             const Eigen::MatrixBase<DL>& lse, const Eigen::MatrixBase<DG>& d_attn, DGQ&& dq,
                             DGK&& dk, DGV&& dv, const Options& opt = {},
                             const Masks<typename DQ::Scalar>& masks = {},
                             const BackwardTerms<typename DQ::Scalar>& terms = {}) {
  detail::backward("attention_backward_into", Q, K, V, attn, lse, d_attn,
                   static_cast<const Eigen::MatrixBase<DG>*>(nullptr), std::forward<DGQ>(dq),
                   std::forward<DGK>(dk), std::forward<DGV>(dv), opt, masks, terms);
}

/// attention_backward_into() through the weights too (`d_scores` = dL/dSCORES, T_q x T_k).
template <class DQ, class DK, class DV, class DA, class DL, class DG, class DS, class DGQ, class DGK,
          class DGV, detail::EnableIfMatrix<DGQ, DGK, DGV> = 0>
void attention_backward_into(const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
                             const Eigen::MatrixBase<DV>& V, const Eigen::MatrixBase<DA>& attn,
                             const Eigen::MatrixBase<DL>& lse, const Eigen::MatrixBase<DG>& d_attn,
                             const Eigen::MatrixBase<DS>& d_scores, DGQ&& dq, DGK&& dk, DGV&& dv,
                             const Options& opt = {}, const Masks<typename DQ::Scalar>& masks = {},
                             const BackwardTerms<typename DQ::Scalar>& terms = {}) {
  detail::backward("attention_backward_into", Q, K, V, attn, lse, d_attn, &d_scores, std::forward<DGQ>(dq),
                   std::forward<DGK>(dk), std::forward<DGV>(dv), opt, masks, terms);
}

}  // namespace EigenAttention
