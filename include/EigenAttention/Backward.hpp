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

#include <EigenAttention/Compiled.hpp>
#include <EigenAttention/Masks.hpp>
#include <EigenAttention/Options.hpp>
#include <EigenAttention/Types.hpp>
#include <EigenAttention/detail/FrontDoor.hpp>

namespace EigenAttention {

/// dL/dQ, dL/dK and dL/dV of a scalar loss L, given d_attn = dL/dATTN.
/// \param Q, K, V the forward's inputs.
/// \param attn the forward's ATTN (T_q x d_v).
/// \param lse the forward's log-sum-exps (T_q x 1).
/// \param d_attn dL/dATTN (T_q x d_v).
/// \param opt the forward's Options.
/// \param masks the forward's masks (default: none).
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
    const Options& opt = {}, const Masks<typename DQ::Scalar>& masks = {}) {
  using Scalar = typename DQ::Scalar;
  (void)detail::ScalarCheck<Scalar, typename DK::Scalar, typename DV::Scalar, typename DA::Scalar,
                            typename DG::Scalar>{};
  (void)detail::LseCheck<Scalar, typename DL::Scalar>{};
  detail::InputView<DQ> q(Q.derived());
  detail::InputView<DK> k(K.derived());
  detail::InputView<DV> v(V.derived());
  detail::InputView<DA> a(attn.derived());
  detail::InputView<DL> l(lse.derived());
  detail::InputView<DG> g(d_attn.derived());
  return compiled::attention_backward<Scalar>(
      compiled::backward_inputs<Scalar>(q.map(), k.map(), v.map(), a.map(), l.map(), g.map(), nullptr), opt,
      masks);
}

/// attention_backward() through the weights too: `d_scores` = dL/dSCORES (T_q x T_k) adds the
/// gradient of a loss on SCORES (d_attn may then be zero). Its entries at masked positions
/// have no effect.
template <class DQ, class DK, class DV, class DA, class DL, class DG, class DS>
Gradients<typename DQ::Scalar> attention_backward(
    const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K, const Eigen::MatrixBase<DV>& V,
    const Eigen::MatrixBase<DA>& attn, const Eigen::MatrixBase<DL>& lse, const Eigen::MatrixBase<DG>& d_attn,
    const Eigen::MatrixBase<DS>& d_scores, const Options& opt = {},
    const Masks<typename DQ::Scalar>& masks = {}) {
  using Scalar = typename DQ::Scalar;
  (void)detail::ScalarCheck<Scalar, typename DK::Scalar, typename DV::Scalar, typename DA::Scalar,
                            typename DG::Scalar, typename DS::Scalar>{};
  (void)detail::LseCheck<Scalar, typename DL::Scalar>{};
  detail::InputView<DQ> q(Q.derived());
  detail::InputView<DK> k(K.derived());
  detail::InputView<DV> v(V.derived());
  detail::InputView<DA> a(attn.derived());
  detail::InputView<DL> l(lse.derived());
  detail::InputView<DG> g(d_attn.derived());
  detail::InputView<DS> s(d_scores.derived());
  return compiled::attention_backward<Scalar>(
      compiled::backward_inputs<Scalar>(q.map(), k.map(), v.map(), a.map(), l.map(), g.map(), &s.map()), opt,
      masks);
}

namespace detail {

/// The body of both attention_backward_into() forms: `in` holds the views of the inputs whose
/// Extents `inputs` lists, for the resize checks.
template <typename Scalar, class DGQ, class DGK, class DGV>
void backward_into(const compiled::BackwardInputs<AbiScalar<Scalar>>& in,
                   std::initializer_list<Extent> inputs, DGQ&& dq, DGK&& dk, DGV&& dv, const Options& opt,
                   const Masks<Scalar>& masks) {
  const char* api = "attention_backward_into";
  const Masks<AbiScalar<Scalar>> m = bits(masks);
  if (will_resize(dq, in.q.rows, in.q.cols) || will_resize(dk, in.k.rows, in.k.cols) ||
      will_resize(dv, in.v.rows, in.v.cols)) {
    // Every input and every gradient that keeps its storage is checked before anything is resized.
    const auto fq = fixed_view(dq, in.q.rows, in.q.cols);
    const auto fk = fixed_view(dk, in.k.rows, in.k.cols);
    const auto fv = fixed_view(dv, in.v.rows, in.v.cols);
    const auto abi_of = [](const auto& f) {
      return f ? compiled::abi(compiled::view(*f)) : MatrixView<AbiScalar<Scalar>>{};
    };
    const MatrixView<AbiScalar<Scalar>> vq = abi_of(fq), vk = abi_of(fk), vv = abi_of(fv);
    compiled::validate_backward(api, in, fq ? &vq : nullptr, fk ? &vk : nullptr, fv ? &vv : nullptr, opt, m);
    check_resizable_apart(api, inputs,
                          {output_extent("dq", dq), output_extent("dk", dk), output_extent("dv", dv)},
                          mask_extents(masks));
  }
  const auto gq = output_view(dq, in.q.rows, in.q.cols);
  const auto gk = output_view(dk, in.k.rows, in.k.cols);
  const auto gv = output_view(dv, in.v.rows, in.v.cols);
  compiled::backward(api, in, compiled::abi(compiled::view(gq)), compiled::abi(compiled::view(gk)),
                     compiled::abi(compiled::view(gv)), opt, m);
}

}  // namespace detail

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
                             const Masks<typename DQ::Scalar>& masks = {}) {
  using Scalar = typename DQ::Scalar;
  (void)detail::ScalarCheck<Scalar, typename DK::Scalar, typename DV::Scalar, typename DA::Scalar,
                            typename DG::Scalar, detail::ScalarOf<DGQ>, detail::ScalarOf<DGK>,
                            detail::ScalarOf<DGV>>{};
  (void)detail::LseCheck<Scalar, typename DL::Scalar>{};
  (void)detail::OutputCheck<DGQ>{};
  (void)detail::OutputCheck<DGK>{};
  (void)detail::OutputCheck<DGV>{};
  detail::InputView<DQ> q(Q.derived());
  detail::InputView<DK> k(K.derived());
  detail::InputView<DV> v(V.derived());
  detail::InputView<DA> a(attn.derived());
  detail::InputView<DL> l(lse.derived());
  detail::InputView<DG> g(d_attn.derived());
  detail::backward_into<Scalar>(
      compiled::backward_inputs<Scalar>(q.map(), k.map(), v.map(), a.map(), l.map(), g.map(), nullptr),
      {detail::input_extent("Q", Q, q.map()), detail::input_extent("K", K, k.map()),
       detail::input_extent("V", V, v.map()), detail::input_extent("attn", attn, a.map()),
       detail::input_extent("lse", lse, l.map()), detail::input_extent("d_attn", d_attn, g.map())},
      std::forward<DGQ>(dq), std::forward<DGK>(dk), std::forward<DGV>(dv), opt, masks);
}

/// attention_backward_into() through the weights too (`d_scores` = dL/dSCORES, T_q x T_k).
template <class DQ, class DK, class DV, class DA, class DL, class DG, class DS, class DGQ, class DGK,
          class DGV, detail::EnableIfMatrix<DGQ, DGK, DGV> = 0>
void attention_backward_into(const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
                             const Eigen::MatrixBase<DV>& V, const Eigen::MatrixBase<DA>& attn,
                             const Eigen::MatrixBase<DL>& lse, const Eigen::MatrixBase<DG>& d_attn,
                             const Eigen::MatrixBase<DS>& d_scores, DGQ&& dq, DGK&& dk, DGV&& dv,
                             const Options& opt = {}, const Masks<typename DQ::Scalar>& masks = {}) {
  using Scalar = typename DQ::Scalar;
  (void)detail::ScalarCheck<Scalar, typename DK::Scalar, typename DV::Scalar, typename DA::Scalar,
                            typename DG::Scalar, typename DS::Scalar, detail::ScalarOf<DGQ>,
                            detail::ScalarOf<DGK>, detail::ScalarOf<DGV>>{};
  (void)detail::LseCheck<Scalar, typename DL::Scalar>{};
  (void)detail::OutputCheck<DGQ>{};
  (void)detail::OutputCheck<DGK>{};
  (void)detail::OutputCheck<DGV>{};
  detail::InputView<DQ> q(Q.derived());
  detail::InputView<DK> k(K.derived());
  detail::InputView<DV> v(V.derived());
  detail::InputView<DA> a(attn.derived());
  detail::InputView<DL> l(lse.derived());
  detail::InputView<DG> g(d_attn.derived());
  detail::InputView<DS> s(d_scores.derived());
  detail::backward_into<Scalar>(
      compiled::backward_inputs<Scalar>(q.map(), k.map(), v.map(), a.map(), l.map(), g.map(), &s.map()),
      {detail::input_extent("Q", Q, q.map()), detail::input_extent("K", K, k.map()),
       detail::input_extent("V", V, v.map()), detail::input_extent("attn", attn, a.map()),
       detail::input_extent("lse", lse, l.map()), detail::input_extent("d_attn", d_attn, g.map()),
       detail::input_extent("d_scores", d_scores, s.map())},
      std::forward<DGQ>(dq), std::forward<DGK>(dk), std::forward<DGV>(dv), opt, masks);
}

}  // namespace EigenAttention
