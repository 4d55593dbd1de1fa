// SPDX-License-Identifier: MIT
// The reference backward kernel: the gradients of attention written as the formula, in plain
// Eigen expressions and loops. It recomputes the whole T_q x T_k weights from Q and K (it does
// not use the forward's LSE or ATTN) and is meant to be read: the tiled backward kernels are
// tested against it.
#include <cmath>
#include <limits>

#include "kernels/convert.hpp"
#include "kernels/reference_views.hpp"

namespace EigenAttention {
namespace internal {

template <typename T>
void reference_backward(const RawProblem<T>& p) {
  const T minus_inf = -std::numeric_limits<T>::infinity();
  const auto Q = view(p.q), K = view(p.k), V = view(p.v), dO = view(p.grad.d_out);
  const index_t tq = Q.rows(), tk = K.rows();
  const auto programmed = programmed_visible(p);
  const auto visible = [&](index_t i, index_t j) {
    return j >= p.first_key(i) && j < p.end_key(i) && (p.mask.data == nullptr || view(p.mask)(i, j)) &&
           programmed(i, j);
  };

  // The forward's steps 1-5 (reference.cpp): the logits z, and the derivative of z in the scaled
  // logit: the soft-cap's c' = 1 - tanh^2(s / softcap) = 1 - (capped / softcap)^2, times the
  // score modification's df/ds (from its Dual instantiation).
  RowMatrix<T> z = p.scale * (Q * K.transpose());
  RowMatrix<T> cap = RowMatrix<T>::Ones(tq, tk);
  if (p.softcap > 0) {
    z = (p.softcap * (z.array() / p.softcap).tanh()).matrix();
    cap = (T(1) - (z.array() / p.softcap).square()).matrix();
  }
  if (p.score_mod != nullptr) {
    RowMatrix<T> derivative(tq, tk);
    for (index_t i = 0; i < tq; ++i) apply_score_mod(p, i, 0, z.row(i).data(), tk, derivative.row(i).data());
    cap = cap.cwiseProduct(derivative);
  }
  for (index_t i = 0; i < tq; ++i) {
    for (index_t j = 0; j < tk; ++j) {
      if (p.has_alibi) z(i, j) -= p.alibi_slope * std::abs(static_cast<T>(i + p.offset - j));
      if (p.bias.data != nullptr) z(i, j) += view(p.bias)(i, j);
      if (!visible(i, j)) z(i, j) = minus_inf;
    }
  }
  // 6. The weights P, row by row (zero for hidden keys and for a row that sees none), and the
  // sink's weight p_sink when there is one: one more logit of the row's softmax, with no value.
  RowMatrix<T> P = RowMatrix<T>::Zero(tq, tk);
  Vector<T> p_sink = Vector<T>::Zero(tq);
  const bool sink = p.has_sink && p.sink != minus_inf;  // a sink of -inf is none
  for (index_t i = 0; i < tq; ++i) {
    T row_max = tk > 0 ? z.row(i).template maxCoeff<Eigen::PropagateNaN>() : minus_inf;
    if (sink && !std::isnan(row_max)) row_max = std::max(row_max, p.sink);
    if (row_max == minus_inf) continue;
    for (index_t j = 0; j < tk; ++j) P(i, j) = visible(i, j) ? std::exp(z(i, j) - row_max) : T(0);
    const T sink_weight = sink ? std::exp(p.sink - row_max) : T(0);
    const T sum = P.row(i).sum() + sink_weight;
    // Hidden keys stay exactly 0 even when the sum is NaN (a NaN logit this row sees).
    for (index_t j = 0; j < tk; ++j) P(i, j) = visible(i, j) ? P(i, j) / sum : T(0);
    p_sink(i) = sink_weight / sum;
  }
  // dL/dP = dO V^T (+ d_scores), over the visible pairs; dZ = P o (dP - D), D = rowsum(P o dP)
  // the softmax's Jacobian (the sink's dL/dP is 0: it has no value), less dL/dLSE; the hidden
  // entries are 0. The sink's own dZ is p_sink (0 - D).
  RowMatrix<T> dZ = RowMatrix<T>::Zero(tq, tk);
  for (index_t i = 0; i < tq; ++i) {
    T row_sum = 0;
    for (index_t j = 0; j < tk; ++j) {
      if (!visible(i, j)) continue;
      dZ(i, j) = dO.row(i).dot(V.row(j));
      if (p.grad.d_scores.data != nullptr) dZ(i, j) += view(p.grad.d_scores)(i, j);
      row_sum += P(i, j) * dZ(i, j);
    }
    if (p.grad.d_lse.data != nullptr) row_sum -= view(p.grad.d_lse)(i, 0);
    for (index_t j = 0; j < tk; ++j) dZ(i, j) = visible(i, j) ? P(i, j) * (dZ(i, j) - row_sum) : T(0);
    if (p.grad.d_sink_rows.data != nullptr) view(p.grad.d_sink_rows)(i, 0) = -p_sink(i) * row_sum;
  }
  if (p.grad.d_bias.data != nullptr) view(p.grad.d_bias) += dZ;
  // The gradient callback (BackwardTerms::logit_grad): dZ as one tile.
  if (p.logit_grad != nullptr && tq > 0 && tk > 0)
    p.logit_grad->apply(p.logit_grad->callable,
                        LogitGradTile<T>{dZ.data(), tk, p.batch_index, p.head_index, p.query_position(0), tq,
                                         p.key_position(0), tk});
  // Through the soft-cap and the scale to Q K^T; then the three products, each over the visible
  // pairs only (so that a hidden row's NaN never reaches a gradient that does not depend on it).
  const RowMatrix<T> dS = p.scale * dZ.cwiseProduct(cap);
  auto dq = view(p.grad.dq), dk = view(p.grad.dk), dv = view(p.grad.dv);
  dq.setZero();
  for (index_t i = 0; i < tq; ++i) {
    for (index_t j = 0; j < tk; ++j) {
      if (!visible(i, j)) continue;
      dq.row(i) += dS(i, j) * K.row(j);
      dk.row(j) += dS(i, j) * Q.row(i);
      dv.row(j) += P(i, j) * dO.row(i);
    }
  }
}

template void reference_backward<float>(const RawProblem<float>&);
template void reference_backward<double>(const RawProblem<double>&);

namespace {

/// 16-bit inputs: the formula in float on the inputs widened exactly, into the float gradients
/// (RawGradient: the compute type), which the caller rounds once.
template <typename T>
void reference_backward_widened(const RawProblem<T>& p) {
  WidenedInputs inputs;
  RowMatrix<float> out, d_out, d_scores;
  RawProblem<float> f = widened_inputs(p, inputs);
  f.grad.out = widen_matrix(p.grad.out, out);
  f.grad.lse = p.grad.lse;
  f.grad.d_out = widen_matrix(p.grad.d_out, d_out);
  f.grad.d_scores = widen_matrix(p.grad.d_scores, d_scores);
  f.grad.dq = p.grad.dq, f.grad.dk = p.grad.dk, f.grad.dv = p.grad.dv, f.grad.d_bias = p.grad.d_bias;
  f.grad.d_lse = p.grad.d_lse, f.grad.d_sink_rows = p.grad.d_sink_rows;
  reference_backward(f);
}

}  // namespace

template <>
void reference_backward<BFloat16Bits>(const RawProblem<BFloat16Bits>& p) {
  reference_backward_widened(p);
}
template <>
void reference_backward<HalfBits>(const RawProblem<HalfBits>& p) {
  reference_backward_widened(p);
}

}  // namespace internal
}  // namespace EigenAttention
