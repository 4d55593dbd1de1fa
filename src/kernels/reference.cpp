// SPDX-License-Identifier: MIT
// The reference kernel: attention written as the formula, in plain Eigen expressions.
// Slow and memory-hungry (it forms T_q x T_k even for the fused call), and meant to be read:
// every fast kernel is tested against it.
#include <cmath>
#include <limits>

#include <vector>

#include "kernels/convert.hpp"
#include "kernels/reference_views.hpp"

namespace EigenAttention {
namespace internal {

template <typename T>
void reference_kernel(const RawProblem<T>& p) {
  const T minus_inf = -std::numeric_limits<T>::infinity();
  const auto Q = view(p.q), K = view(p.k), V = view(p.v);
  const index_t tq = Q.rows(), tk = K.rows();
  // Is key j visible to query i: inside the causal/window/length range, and allowed by the masks
  // (the boolean mask, mask_mod and the block mask)?
  const auto programmed = programmed_visible(p);
  const auto visible = [&](index_t i, index_t j) {
    return j >= p.first_key(i) && j < p.end_key(i) && (p.mask.data == nullptr || view(p.mask)(i, j)) &&
           programmed(i, j);
  };

  // 1. Scaled logits s = scale * Q K^T.
  RowMatrix<T> logits = p.scale * (Q * K.transpose());
  // 2. Soft-capping.
  if (p.softcap > 0) logits = (p.softcap * (logits.array() / p.softcap).tanh()).matrix();
  // 2b. The score modification f(s, b, h, q, k), row by row.
  if (p.score_mod != nullptr)
    for (index_t i = 0; i < tq; ++i) apply_score_mod(p, i, 0, logits.row(i).data(), tk);
  // 3. ALiBi and 4. the additive bias.
  for (index_t i = 0; i < tq; ++i) {
    for (index_t j = 0; j < tk; ++j) {
      if (p.has_alibi) logits(i, j) -= p.alibi_slope * std::abs(static_cast<T>(i + p.offset - j));
      if (p.bias.data != nullptr) logits(i, j) += view(p.bias)(i, j);
    }
  }
  // 5. Masks: -inf wherever a key is not visible.
  for (index_t i = 0; i < tq; ++i) {
    for (index_t j = 0; j < tk; ++j) {
      if (!visible(i, j)) logits(i, j) = minus_inf;
    }
  }
  // 6. Row softmax, subtracting each row's maximum; a row with no visible key is all zero.
  RowMatrix<T> scores(tq, tk);
  Vector<T> lse(tq);
  for (index_t i = 0; i < tq; ++i) {
    // PropagateNaN: a NaN logit must make the row NaN, never pass for "no visible key".
    const T row_max = tk > 0 ? logits.row(i).template maxCoeff<Eigen::PropagateNaN>() : minus_inf;
    if (row_max == minus_inf) {
      scores.row(i).setZero();
      lse(i) = minus_inf;
      continue;
    }
    // exp(-inf) must be exactly 0: Eigen's vectorised exp gives a tiny subnormal on SSE.
    const auto row = logits.row(i).array();
    scores.row(i) = (row == minus_inf).select(T(0), (row - row_max).exp()).matrix();
    const T sum = scores.row(i).sum();
    scores.row(i) /= sum;
    // Hidden keys stay exactly 0 even when the sum is NaN (a NaN logit this row sees).
    if (std::isnan(sum)) {
      for (index_t j = 0; j < tk; ++j) {
        if (!visible(i, j)) scores(i, j) = T(0);
      }
    }
    lse(i) = row_max + std::log(sum);
  }
  // 6b. The attention sink: one more logit in each row's softmax, without a value (sink.hpp).
  if (p.has_sink) {
    for (index_t i = 0; i < tq; ++i) {
      const SinkStep<T> step = sink_step(lse(i), p.sink);
      if (lse(i) != minus_inf) {
        for (index_t j = 0; j < tk; ++j) {
          if (visible(i, j)) scores(i, j) *= step.factor;
        }
      }
      lse(i) = step.lse;
    }
  }
  // 7. ATTN = SCORES V, each query summing over the keys it sees (so that a hidden key's V row,
  //    even NaN, never reaches it).
  if (p.want_attn) {
    auto attn = view(p.attn);
    for (index_t i = 0; i < tq; ++i) {
      attn.row(i).setZero();
      for (index_t j = 0; j < tk; ++j) {
        if (visible(i, j)) attn.row(i) += scores(i, j) * V.row(j);
      }
    }
  }
  if (p.want_scores) view(p.scores) = scores;
  if (p.want_lse) view(p.lse) = lse;
}

template void reference_kernel<float>(const RawProblem<float>&);
template void reference_kernel<double>(const RawProblem<double>&);

namespace {

template <typename T>
void narrow_into(const RowMatrix<float>& m, const RawMatrix<T>& out) {
  for (index_t i = 0; i < m.rows(); ++i)
    narrow(m.row(i).data(), m.cols(), out.data + i * out.row_stride, out.col_stride);
}

}  // namespace

/// 16-bit inputs: the formula in float on the inputs widened exactly (the oracle of the 16-bit
/// kernels), its results rounded once into the outputs.
template <typename T>
void reference_kernel_widened(const RawProblem<T>& p) {
  WidenedInputs inputs;
  RawProblem<float> f = widened_inputs(p, inputs);
  RowMatrix<float> scores(p.want_scores ? p.q.rows : 0, p.want_scores ? p.k.rows : 0);
  RowMatrix<float> attn(p.want_attn ? p.q.rows : 0, p.want_attn ? p.v.cols : 0);
  f.scores = raw_matrix<float>(scores.data(), scores.rows(), scores.cols(), scores.cols(), 1);
  f.attn = raw_matrix<float>(attn.data(), attn.rows(), attn.cols(), attn.cols(), 1);
  f.lse = p.lse;
  f.want_scores = p.want_scores;
  f.want_attn = p.want_attn;
  f.want_lse = p.want_lse;
  reference_kernel(f);
  if (p.want_attn) narrow_into(attn, p.attn);
  if (p.want_scores) {
    if (p.scores_compute) {
      view(p.compute_scores) = scores;
    } else {
      narrow_into(scores, p.scores);
    }
  }
}

template <>
void reference_kernel<BFloat16Bits>(const RawProblem<BFloat16Bits>& p) {
  reference_kernel_widened(p);
}
template <>
void reference_kernel<HalfBits>(const RawProblem<HalfBits>& p) {
  reference_kernel_widened(p);
}

}  // namespace internal
}  // namespace EigenAttention
