// SPDX-License-Identifier: MIT
/// \file low_precision.hpp
/// The bfloat16 and half tests' error model. A 16-bit call computes in float on inputs that are
/// already rounded, so its oracle is the exact result on those rounded inputs (long double), and
/// its bound is the model of the GPU kernels: the naive float expression with the weights
/// P rounded to the 16-bit type before P V, and the results rounded to it. The library keeps P in
/// float (more accurate), so twice the naive expression's error bounds it with margin; what both
/// share is the final rounding of each output element (half an ulp of the 16-bit type).
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include <EigenAttention/Kernels.hpp>

#include "common.hpp"

namespace ea_test {

template <class T16>
using Row16 = RowMatrix<T16>;

/// A float matrix rounded to T16 (to nearest, ties to even: Eigen's conversion).
template <class T16, class Derived>
Row16<T16> round_to(const Eigen::MatrixBase<Derived>& m) {
  return m.template cast<float>().template cast<T16>();
}

/// A 16-bit matrix widened to long double (exact).
template <class Derived>
MatrixLD widen_ld(const Eigen::MatrixBase<Derived>& m) {
  return to_long_double(m.template cast<float>());
}

/// max |a - b| over the elements both have (NaN counts as infinite).
inline long double max_error(const MatrixLD& a, const MatrixLD& b) {
  long double e = 0;
  for (Eigen::Index i = 0; i < a.rows(); ++i)
    for (Eigen::Index j = 0; j < a.cols(); ++j) {
      if (a(i, j) == b(i, j)) continue;  // infinities of one sign too
      const long double d = std::fabs(a(i, j) - b(i, j));
      e = std::max(e, std::isnan(d) ? std::numeric_limits<long double>::infinity() : d);
    }
  return e;
}

/// The naive expression's results: SCORES and ATTN rounded to T16 (P rounded before P V), LSE
/// in float.
struct NaiveResult {
  MatrixLD scores, attn, lse;
};

/// softmax(mask(scale Q K^T)) V in float, P rounded to T16 before the product, on the 16-bit
/// inputs widened to float.
template <class T16>
NaiveResult naive_p_rounded(const Row16<T16>& Q, const Row16<T16>& K, const Row16<T16>& V,
                            const MaskSpec& mask, float scale) {
  const RowMatrix<float> q = Q.template cast<float>(), k = K.template cast<float>(),
                         v = V.template cast<float>();
  const Eigen::Index tq = q.rows(), tk = k.rows();
  RowMatrix<float> s = scale * (q * k.transpose());
  RowMatrix<float> p = RowMatrix<float>::Zero(tq, tk);
  Eigen::VectorXf lse(tq);
  for (Eigen::Index i = 0; i < tq; ++i) {
    float m = -std::numeric_limits<float>::infinity();
    for (Eigen::Index j = 0; j < tk; ++j)
      if (key_visible(i, j, tq, tk, mask)) m = std::max(m, s(i, j));
    if (m == -std::numeric_limits<float>::infinity()) {
      lse(i) = m;
      continue;
    }
    float sum = 0;
    for (Eigen::Index j = 0; j < tk; ++j)
      if (key_visible(i, j, tq, tk, mask)) sum += (p(i, j) = std::exp(s(i, j) - m));
    p.row(i) /= sum;
    lse(i) = m + std::log(sum);
  }
  const Row16<T16> p16 = round_to<T16>(p);
  const RowMatrix<float> o = p16.template cast<float>() * v;
  return {widen_ld(p16), widen_ld(round_to<T16>(o)), to_long_double(lse)};
}

/// The bound of a 16-bit result against the exact one: twice the naive expression's error
/// (max over the matrix).
inline long double low_precision_bound(const MatrixLD& naive, const MatrixLD& exact) {
  return 2 * max_error(naive, exact);
}

/// The spacing of T16's numbers in [1, 2): 2^-7 for bfloat16 (8 significant bits), 2^-10 for half
/// (11). (Not std::numeric_limits<Eigen::half>::epsilon(): Eigen 3.4 gives 2^-13 there.)
template <class T16>
constexpr float epsilon16() {
  return std::is_same_v<T16, Eigen::bfloat16> ? 0x1p-7f : 0x1p-10f;
}

/// Does `kernel` run T16's fused forward on bf16 pairs (Kernel::Avx512Bf16 or Kernel::Amx, or
/// Kernel::Auto where auto_kernel() is one of them)? Its fused bf16 results are then not the float
/// call's rounded once: the weights are rounded to bf16 before P V, as in the P-rounded model
/// (test/bf16_dot_product.cpp holds them to it), and the logits are summed in another order.
template <class T16>
bool bf16_pairs(ea::Kernel kernel) {
  const ea::Kernel k = kernel == ea::Kernel::Auto ? ea::auto_kernel() : kernel;
  return std::is_same_v<T16, Eigen::bfloat16> && (k == ea::Kernel::Avx512Bf16 || k == ea::Kernel::Amx);
}

/// (The same kernels run T16's backward, and the prefill over a T16 cache, on bf16 pairs.)

/// A fused result on bf16 pairs against the float call on the same widened inputs (wide), V's
/// largest magnitude v_max: a weight rounded to bf16 moves an element by at most 2^-9 p_j |v_j|,
/// 2^-9 v_max in all (the weights sum to 1), the logits' sums in another order by a few float
/// roundings, and each result's rounding to bf16 by 2^-9 of it: within 2^-8 (v_max + |y|).
template <class D16, class DF>
void check_pairs(const Eigen::MatrixBase<D16>& actual, const Eigen::MatrixBase<DF>& wide, float v_max) {
  REQUIRE(actual.rows() == wide.rows());
  REQUIRE(actual.cols() == wide.cols());
  long bad = 0;
  for (Eigen::Index i = 0; i < actual.rows(); ++i)
    for (Eigen::Index j = 0; j < actual.cols(); ++j) {
      const float x = static_cast<float>(actual(i, j)), y = static_cast<float>(wide(i, j));
      if (!(std::fabs(x - y) <= 0x1p-8f * (v_max + std::fabs(y))) && !(std::isnan(x) && std::isnan(y))) ++bad;
    }
  CHECK_MESSAGE(bad == 0,
                bad << " elements of the bf16-pair result beyond 2^-8 (max|V| + |y|) of the float call");
}

/// The 16-bit types under test, with their names.
template <class T16>
const char* type_name();
template <>
inline const char* type_name<Eigen::bfloat16>() {
  return "bfloat16";
}
template <>
inline const char* type_name<Eigen::half>() {
  return "half";
}

}  // namespace ea_test
