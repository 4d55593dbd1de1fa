// SPDX-License-Identifier: MIT
/// \file BackwardTerms.hpp
/// The optional terms of a backward call beyond dL/dATTN and dL/dSCORES: dL/dLSE in, dL/dsinks
/// out. One struct, the last argument of every backward call (single head, multi-head, varlen,
/// ring and Ulysses), so that the backward's grammar grows in one place.
#pragma once

// Lets the detail/ headers in (each refuses to be included on its own); never undefined, so
// that any public header may include them, in any order.
#ifndef EIGEN_ATTENTION_PUBLIC_HEADER
#define EIGEN_ATTENTION_PUBLIC_HEADER
#endif

#include <EigenAttention/HeadsView.hpp>
#include <EigenAttention/Programmable.hpp>
#include <EigenAttention/Types.hpp>

namespace EigenAttention {

/// dL/dLSE, dL/dsinks and dL/d(modified logit) of a backward call. All optional (the default:
/// none).
/// \code
/// Eigen::VectorXf d_lse = 2 * z * lse;  // z-loss z * |lse|^2 on the forward's lse
/// float d_sink = 0;
/// EigenAttention::BackwardTerms<float> terms;
/// terms.d_lse = EigenAttention::HeadsView<const float>::single(d_lse);
/// terms.d_sinks = &d_sink;  // with masks.sinks given to the forward and the backward
/// auto g = EigenAttention::attention_backward(Q, K, V, out, lse, d_out, opt, masks, terms);
/// \endcode
template <typename Scalar>
struct BackwardTerms {
  /// dL/dLSE, for losses that use the forward's log-sum-exps (a z-loss, distillation through the
  /// normaliser, merging partial results in autograd): the shape of the call's `lse` ([B, H, T_q, 1];
  /// T_q x 1 for the single-head calls). Its effect: dL/dz_ij gains P_ij d_lse_i. Empty (the
  /// default): zero.
  HeadsView<const ComputeScalar<Scalar>> d_lse;
  /// Receives dL/dsinks when Masks::sinks is given: one value per query head (as many as
  /// `sinks`), each the sum over the batch and the rows of P_sink,i (d_lse_i - D_i), where
  /// P_sink,i = exp(sinks[h] - L_i) is the sink's weight and D_i = sum_j P_ij dL/dP_ij the
  /// backward's row term; summed in a fixed order (the same bits for every thread count). Null (the
  /// default): not wanted.
  ComputeScalar<Scalar>* d_sinks = nullptr;
  /// Receives dL/dz for each visible (query, key) pair, z the logit Masks::score_mod returned
  /// (or the scaled, soft-capped logit without one), tile by tile, from one thread at a time in
  /// an order the thread count does not change (Programmable.hpp, logit_grad()): for the
  /// gradients of what f captures, a relative-position table or per-head slopes, at no T_q x T_k
  /// memory. Empty (the default): not wanted.
  /// \code
  /// std::vector<float> d_table(table.size());
  /// auto lg = EigenAttention::logit_grad([&](float g, auto, auto, auto q, auto k) { d_table[q - k + T - 1]
  /// += g; }); terms.logit_grad = lg;  // lg must outlive the call \endcode
  LogitGradRef<ComputeScalar<Scalar>> logit_grad;
};

}  // namespace EigenAttention
