// The reference kernel: attention written as the formula, in plain Eigen expressions.
// Slow and memory-hungry (it forms T_q x T_k even for the fused call), and meant to be read:
// every fast kernel is tested against it.
#include <cmath>
#include <limits>

#include "kernels/reference_views.hpp"

namespace EigenAttention {
namespace internal {

template <typename T>
void reference_kernel(const RawProblem<T>& p) {
  const T minus_inf = -std::numeric_limits<T>::infinity();
  const auto Q = view(p.q), K = view(p.k), V = view(p.v);
  const Index tq = Q.rows(), tk = K.rows();
  // Is key j visible to query i: inside the causal/window/length range, and allowed by the mask?
  const auto visible = [&](Index i, Index j) {
    return j >= p.first_key(i) && j < p.end_key(i) && (p.mask.data == nullptr || view(p.mask)(i, j));
  };

  // 1. Scaled logits s = scale * Q K^T.
  RowMatrix<T> logits = p.scale * (Q * K.transpose());
  // 2. Soft-capping.
  if (p.softcap > 0) logits = (p.softcap * (logits.array() / p.softcap).tanh()).matrix();
  // 3. ALiBi and 4. the additive bias.
  for (Index i = 0; i < tq; ++i) {
    for (Index j = 0; j < tk; ++j) {
      if (p.has_alibi) logits(i, j) -= p.alibi_slope * std::abs(static_cast<T>(i + p.offset - j));
      if (p.bias.data != nullptr) logits(i, j) += view(p.bias)(i, j);
    }
  }
  // 5. Masks: -inf wherever a key is not visible.
  for (Index i = 0; i < tq; ++i) {
    for (Index j = 0; j < tk; ++j) {
      if (!visible(i, j)) logits(i, j) = minus_inf;
    }
  }
  // 6. Row softmax, subtracting each row's maximum; a row with no visible key is all zero.
  RowMatrix<T> scores(tq, tk);
  Vector<T> lse(tq);
  for (Index i = 0; i < tq; ++i) {
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
      for (Index j = 0; j < tk; ++j) {
        if (!visible(i, j)) scores(i, j) = T(0);
      }
    }
    lse(i) = row_max + std::log(sum);
  }
  // 7. ATTN = SCORES V, each query summing over the keys it sees (so that a hidden key's V row,
  //    even NaN, never reaches it).
  if (p.want_attn) {
    auto attn = view(p.attn);
    for (Index i = 0; i < tq; ++i) {
      attn.row(i).setZero();
      for (Index j = 0; j < tk; ++j) {
        if (visible(i, j)) attn.row(i) += scores(i, j) * V.row(j);
      }
    }
  }
  if (p.want_scores) view(p.scores) = scores;
  if (p.want_lse) view(p.lse) = lse;
}

template void reference_kernel<float>(const RawProblem<float>&);
template void reference_kernel<double>(const RawProblem<double>&);

}  // namespace internal
}  // namespace EigenAttention
