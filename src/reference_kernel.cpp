// The reference kernel: attention written as the formula, in plain Eigen expressions.
// Slow and memory-hungry (it forms T_q x T_k even for the fused call), and meant to be read:
// every fast kernel is tested against it.
#include <cmath>
#include <limits>

#include "kernel.hpp"

namespace EigenAttention {
namespace internal {
namespace {

// Sets every logit strictly above the causal frontier (key j > i + offset) to -inf.
template <typename T>
void mask_above_frontier(RowMatrix<T>& logits, Index offset) {
  const T minus_inf = -std::numeric_limits<T>::infinity();
  const Index tq = logits.rows(), tk = logits.cols();
  if (offset >= 0) {
    // Columns offset+1.. form an upper-triangular region whose diagonal is the first masked key.
    const Index first = std::min(offset + 1, tk);
    logits.rightCols(tk - first).template triangularView<Eigen::Upper>().setConstant(minus_inf);
  } else {
    // The first -offset queries see no key; below them the frontier is the main diagonal.
    const Index blind = std::min(-offset, tq);
    logits.topRows(blind).setConstant(minus_inf);
    logits.bottomRows(tq - blind).template triangularView<Eigen::StrictlyUpper>().setConstant(minus_inf);
  }
}

}  // namespace

template <typename T>
void reference_kernel(const Problem<T>& p, const Outputs<T>& out) {
  const T minus_inf = -std::numeric_limits<T>::infinity();
  const Index tq = p.tq(), tk = p.tk();

  // 1. Raw logits Q K^T.
  RowMatrix<T> logits = p.q * p.k.transpose();
  // 2. Causal mask: -inf above the frontier.
  if (p.causal) mask_above_frontier(logits, p.offset);
  // 3. Scale.
  logits *= p.scale;
  // 4. Row softmax, subtracting each row's maximum; a row with no visible key is all zero.
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
    lse(i) = row_max + std::log(sum);
  }
  // 5. ATTN = SCORES V, each query summing over the keys it sees (so that a masked key's V row,
  //    even NaN, never reaches it).
  if (out.attn != nullptr) {
    for (Index i = 0; i < tq; ++i) {
      const Index seen = p.visible(i);
      out.attn->row(i).noalias() = scores.row(i).head(seen) * p.v.topRows(seen);
    }
  }
  if (out.scores != nullptr) *out.scores = scores;
  if (out.lse != nullptr) *out.lse = lse;
}

template void reference_kernel<float>(const Problem<float>&, const Outputs<float>&);
template void reference_kernel<double>(const Problem<double>&, const Outputs<double>&);

}  // namespace internal
}  // namespace EigenAttention
