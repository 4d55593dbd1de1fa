/// \file reference.hpp
/// A naive scaled dot-product attention in long double: triple loops that read like the
/// formula, independent of the library (it includes nothing from EigenAttention).
///
/// Order of operations, as the specification states it: raw logits Q K^T, causal mask (-inf),
/// scale, row softmax subtracting the row maximum. A row that sees no key gets zero SCORES,
/// zero ATTN and LSE = -inf.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace ea_test {

using MatrixLD = Eigen::Matrix<long double, Eigen::Dynamic, Eigen::Dynamic>;
using VectorLD = Eigen::Matrix<long double, Eigen::Dynamic, 1>;

/// The mask, described without the library's types.
struct MaskSpec {
  bool causal = false;
  bool bottom_right = false;  ///< alignment of the causal frontier; ignored when !causal
};

/// Whether query i (of tq) may see key j (of tk).
inline bool key_visible(Eigen::Index i, Eigen::Index j, Eigen::Index tq, Eigen::Index tk,
                        const MaskSpec& mask) {
  if (!mask.causal) return true;
  const Eigen::Index offset = mask.bottom_right ? tk - tq : 0;
  return j <= i + offset;
}

/// Everything the reference computes, plus the magnitudes the tolerance model needs.
struct ReferenceResult {
  MatrixLD scores;  ///< T_q x T_k
  MatrixLD attn;    ///< T_q x d_v
  VectorLD lse;     ///< T_q
  long double scale = 0;
  /// max over visible (i, j) of |scale| * sum_k |Q(i,k) K(j,k)|: bounds every scaled logit and
  /// sets the size of its rounding error (the softmax's condition number).
  long double logit_magnitude = 0;
  /// max |V(j, c)| (1 when V is empty).
  long double max_abs_v = 0;
};

/// Copies any dense Eigen expression into long double, element by element (exact for float
/// and double entries).
template <class Derived>
MatrixLD to_long_double(const Eigen::MatrixBase<Derived>& m) {
  MatrixLD r(m.rows(), m.cols());
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j) r(i, j) = static_cast<long double>(m(i, j));
  return r;
}

/// The reference attention. `scale` empty means 1/sqrt(d_k).
template <class DQ, class DK, class DV>
ReferenceResult reference_attention(const Eigen::MatrixBase<DQ>& Q_in, const Eigen::MatrixBase<DK>& K_in,
                                    const Eigen::MatrixBase<DV>& V_in, const MaskSpec& mask,
                                    std::optional<long double> scale = std::nullopt) {
  const MatrixLD Q = to_long_double(Q_in), K = to_long_double(K_in), V = to_long_double(V_in);
  const Eigen::Index tq = Q.rows(), tk = K.rows(), dk = Q.cols(), dv = V.cols();
  const long double inf = std::numeric_limits<long double>::infinity();

  ReferenceResult r;
  r.scale = scale ? *scale : 1.0L / std::sqrt(static_cast<long double>(dk));
  r.scores = MatrixLD::Zero(tq, tk);
  r.attn = MatrixLD::Zero(tq, dv);
  r.lse = VectorLD::Constant(tq, -inf);
  r.max_abs_v = 1.0L;
  for (Eigen::Index j = 0; j < V.rows(); ++j)
    for (Eigen::Index c = 0; c < dv; ++c) r.max_abs_v = std::max(r.max_abs_v, std::fabs(V(j, c)));

  MatrixLD logits(tq, tk);
  for (Eigen::Index i = 0; i < tq; ++i) {
    for (Eigen::Index j = 0; j < tk; ++j) {
      // 1. raw logit
      long double dot = 0, abs_dot = 0;
      for (Eigen::Index k = 0; k < dk; ++k) {
        dot += Q(i, k) * K(j, k);
        abs_dot += std::fabs(Q(i, k) * K(j, k));
      }
      // 2. mask, 3. scale
      if (key_visible(i, j, tq, tk, mask)) {
        logits(i, j) = r.scale * dot;
        r.logit_magnitude = std::max(r.logit_magnitude, std::fabs(r.scale) * abs_dot);
      } else {
        logits(i, j) = -inf;
      }
    }
  }

  // 4. row softmax, subtracting the row maximum; 5. ATTN = SCORES V.
  for (Eigen::Index i = 0; i < tq; ++i) {
    long double m = -inf;
    for (Eigen::Index j = 0; j < tk; ++j) m = std::max(m, logits(i, j));
    if (m == -inf) continue;  // sees no key: zeros and LSE = -inf, already set
    long double sum = 0;
    for (Eigen::Index j = 0; j < tk; ++j) sum += std::exp(logits(i, j) - m);
    for (Eigen::Index j = 0; j < tk; ++j) r.scores(i, j) = std::exp(logits(i, j) - m) / sum;
    r.lse(i) = m + std::log(sum);
    for (Eigen::Index c = 0; c < dv; ++c) {
      long double acc = 0;
      for (Eigen::Index j = 0; j < tk; ++j) acc += r.scores(i, j) * V(j, c);
      r.attn(i, c) = acc;
    }
  }
  return r;
}

}  // namespace ea_test
