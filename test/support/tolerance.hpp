// SPDX-License-Identifier: MIT
/// \file tolerance.hpp
/// How close is close enough, per scalar type, and matrix comparisons that say where they fail.
///
/// A tolerance is a Tol{abs, rel}: |a - b| <= abs + rel |b|, each output in the units of its
/// own error model. A plain number t is the mixed rule t (1 + |b|) (absolute near zero,
/// relative elsewhere), right for outputs whose error scales with max(1, |b|) such as ATTN.
/// Log-sum-exps carry an absolute error plus a few ulps of |LSE| (Tol{abs, few u}); softmax
/// weights a relative one down to the underflow threshold (Tol{tiny, rel}). Tolerances are
/// multiples of the unit roundoff u (2^-24 for float, 2^-53 for double), derived from a
/// worst-case error model (attention_budget) rather than tuned.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>

namespace ea_test {

/// Unit roundoff of T: half the distance from 1 to the next representable number.
template <class T>
constexpr long double unit_roundoff() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "float or double");
  return std::is_same_v<T, float> ? 0x1p-24L : 0x1p-53L;
}

/// The bound |a - b| <= abs + rel |b|.
struct Tol {
  long double abs = 0;
  long double rel = 0;
  /// The mixed rule t (1 + |b|).
  static constexpr Tol mixed(long double t) { return Tol{t, t}; }
  /// The bound at expected value b.
  long double at(long double b) const { return abs + rel * std::fabs(b); }
  Tol times(long double f) const { return Tol{abs * f, rel * f}; }
};
inline Tol operator*(long double f, const Tol& t) { return t.times(f); }

/// |a - b| <= tol.at(b). NaN is never near anything; infinities are near only themselves.
inline bool near(long double a, long double b, const Tol& tol) {
  if (std::isnan(a) || std::isnan(b)) return false;
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= tol.at(b);
}
/// |a - b| <= tol * (1 + |b|).
inline bool near(long double a, long double b, long double tol) { return near(a, b, Tol::mixed(tol)); }

/// Per-output tolerances for one attention problem (all to be used with near()).
struct Budget {
  Tol scores;            ///< relative to the weight, down to the underflow threshold
  long double attn = 0;  ///< mixed: attn (1 + |ATTN|)
  Tol lse;               ///< absolute, plus a few ulps of |LSE|
  /// The same budget with every bound multiplied by f (e.g. 2 when comparing two computed
  /// results, each within the budget of the exact one).
  Budget times(long double f) const { return Budget{scores.times(f), attn * f, lse.times(f)}; }
};

/// Weights below this are tiny: exp underflows there (a kernel's exp may return zero or the
/// threshold itself), so their error is absolute. Four times the smallest normal T.
template <class T>
constexpr long double tiny_weight() {
  return 4.0L * static_cast<long double>(std::numeric_limits<T>::min());
}

/// Worst-case error model of one attention call in precision T (Higham-style, first order).
///
/// - A scaled logit is off by at most delta = (d_k + 4) u A, A = logit_magnitude
///   = max |s| sum_k |Q_ik K_jk|: d_k for the dot product (gamma_{d_k}), one for the scale,
///   two for rounding Q and K to T when the data came in a wider type, one spare.
/// - The softmax's condition number is the logit magnitude: a weight's relative error is at
///   most 2 delta, plus (2 T_k + 4) u for exp, the row sum, the division and the online
///   rescalings of a tiled kernel (at most one per key).
/// - ATTN(i, c) = sum_j p_j V_jc adds gamma_{T_k} sum_j p_j |V_jc| and one u for rounding V.
/// - LSE adds delta and the sum's error to the row maximum, absolutely, and the roundings of
///   m + log(sum) and of the result to T: 2 u |LSE|.
/// A weight's bound is relative (no absolute part but tiny_weight), so a weight of 1e-3 is
/// held to the same relative error as one of 0.5. Every bound is then doubled, a safety
/// factor for the first-order model.
template <class T>
Budget attention_budget(long double logit_magnitude, long double max_abs_v, Eigen::Index d_k,
                        Eigen::Index t_k) {
  const long double u = unit_roundoff<T>();
  const long double delta = static_cast<long double>(d_k + 4) * u * logit_magnitude;
  const long double rel_weight = 2 * delta + static_cast<long double>(2 * t_k + 4) * u;
  Budget b;
  b.scores = Tol{tiny_weight<T>(), 2 * rel_weight};
  b.attn = 2 * (rel_weight + static_cast<long double>(t_k + 2) * u) * std::max(1.0L, max_abs_v);
  b.lse = Tol{2 * (delta + static_cast<long double>(2 * t_k + 4) * u), 2 * 2 * u};
  return b;
}

/// Result of an element-wise comparison: the worst element relative to its bound.
struct Comparison {
  bool ok = true;
  bool shape_ok = true;
  Eigen::Index rows = 0, cols = 0, expected_rows = 0, expected_cols = 0;
  Eigen::Index failures = 0;
  Eigen::Index row = -1, col = -1;  // worst element
  long double actual = 0, expected = 0, excess = 0;
  Tol tol;
};

template <class DA, class DB>
Comparison compare(const Eigen::MatrixBase<DA>& a, const Eigen::MatrixBase<DB>& b, const Tol& tol) {
  Comparison c;
  c.tol = tol;
  c.rows = a.rows();
  c.cols = a.cols();
  c.expected_rows = b.rows();
  c.expected_cols = b.cols();
  if (a.rows() != b.rows() || a.cols() != b.cols()) {
    c.ok = c.shape_ok = false;
    return c;
  }
  long double worst = -1;
  for (Eigen::Index i = 0; i < a.rows(); ++i) {
    for (Eigen::Index j = 0; j < a.cols(); ++j) {
      const long double x = static_cast<long double>(a(i, j)), y = static_cast<long double>(b(i, j));
      if (near(x, y, tol)) continue;
      ++c.failures;
      c.ok = false;
      // excess: how many times the bound is exceeded (NaN/inf mismatches count as infinite).
      long double excess = std::numeric_limits<long double>::infinity();
      if (std::isfinite(x) && std::isfinite(y)) excess = std::fabs(x - y) / tol.at(y);
      if (excess > worst) {
        worst = excess;
        c.row = i;
        c.col = j;
        c.actual = x;
        c.expected = y;
        c.excess = excess;
      }
    }
  }
  return c;
}
template <class DA, class DB>
Comparison compare(const Eigen::MatrixBase<DA>& a, const Eigen::MatrixBase<DB>& b, long double tol) {
  return compare(a, b, Tol::mixed(tol));
}

inline std::string describe(const Comparison& c) {
  std::ostringstream s;
  s.precision(21);
  if (!c.shape_ok) {
    s << "shape " << c.rows << "x" << c.cols << " but expected " << c.expected_rows << "x" << c.expected_cols;
    return s.str();
  }
  if (c.ok) return "all elements near";
  s << c.failures << " of " << c.rows * c.cols << " elements off; worst (" << c.row << ", " << c.col
    << "): actual " << c.actual << " expected " << c.expected << " |diff| "
    << std::fabs(c.actual - c.expected) << " bound " << c.tol.at(c.expected) << " (abs " << c.tol.abs
    << " + rel " << c.tol.rel << ")"
    << " (x" << c.excess << ")";
  return s.str();
}

/// Exact equality, element by element (NaN never equal); reports the first difference.
template <class DA, class DB>
Comparison compare_exact(const Eigen::MatrixBase<DA>& a, const Eigen::MatrixBase<DB>& b) {
  Comparison c;
  c.rows = a.rows();
  c.cols = a.cols();
  c.expected_rows = b.rows();
  c.expected_cols = b.cols();
  if (a.rows() != b.rows() || a.cols() != b.cols()) {
    c.ok = c.shape_ok = false;
    return c;
  }
  for (Eigen::Index i = 0; i < a.rows(); ++i) {
    for (Eigen::Index j = 0; j < a.cols(); ++j) {
      const long double x = static_cast<long double>(a(i, j)), y = static_cast<long double>(b(i, j));
      if (x == y) continue;
      if (c.ok) {
        c.row = i;
        c.col = j;
        c.actual = x;
        c.expected = y;
        c.excess = std::numeric_limits<long double>::infinity();
      }
      c.ok = false;
      ++c.failures;
    }
  }
  return c;
}

}  // namespace ea_test

/// CHECK that two matrices have the same shape and every element is near() within `tol`;
/// on failure the message names the worst element.
#define EA_CHECK_NEAR(actual, expected, tol)                                                  \
  do {                                                                                        \
    const ::ea_test::Comparison ea_cmp_ = ::ea_test::compare((actual), (expected), (tol));    \
    CHECK_MESSAGE(ea_cmp_.ok, #actual " vs " #expected ": " << ::ea_test::describe(ea_cmp_)); \
  } while (false)

/// CHECK that two matrices are equal element by element (bitwise for finite values).
#define EA_CHECK_EQUAL(actual, expected)                                                      \
  do {                                                                                        \
    const ::ea_test::Comparison ea_cmp_ = ::ea_test::compare_exact((actual), (expected));     \
    CHECK_MESSAGE(ea_cmp_.ok, #actual " == " #expected ": " << ::ea_test::describe(ea_cmp_)); \
  } while (false)
