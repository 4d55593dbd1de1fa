// SPDX-License-Identifier: MIT
// The exp inside the softmax, alone: each kernel's weights, divided by the weight of the row's
// largest logit, are exp(z - max) to a few ulp over the whole range of a row's logit gaps, from
// 0 to past the underflow of T. The sums and the division by them cancel in that ratio, so that
// the check sees the exp's error (kernels/eigen_internal.hpp: at most 0.91 ulp, 1.22 without a
// fused multiply-add) and not the rest of the pipeline's.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "common.hpp"

namespace test_softmax_exp {

using namespace ea_test;

namespace {

/// One row's gaps 0, step, 2 step, ... as logits c - gap (Q_i = [1, c_i], K_j = [-gap_j, 1], scale
/// 1: each logit is fl(c_i - gap_j), one rounding, and the library's z - max is exact).
template <typename T>
void check_ratios(const RowMatrix<T>& w, const RowMatrix<T>& Q, const RowMatrix<T>& K,
                  const std::string& what) {
  CAPTURE(what);
  const T u = std::numeric_limits<T>::epsilon() / 2;
  // Below this, a kernel may flush the weight to 0 (exp_at_most_zero without vscalef; the true
  // weight then changes no sum of T) or give it with a subnormal's absolute error.
  const long double normal_floor = std::ldexp(1.0L, std::numeric_limits<T>::min_exponent + 4);
  for (Eigen::Index i = 0; i < Q.rows(); ++i) {
    const T c = Q(i, 1);
    REQUIRE(w(i, 0) > 0);
    for (Eigen::Index j = 0; j < K.rows(); ++j) {
      const T z = c + K(j, 0);  // the logit, as the library forms it (one product is exact)
      const long double want = std::exp(static_cast<long double>(z) - static_cast<long double>(c));
      const long double got = static_cast<long double>(w(i, j)) / static_cast<long double>(w(i, 0));
      CAPTURE(i);
      CAPTURE(j);
      CAPTURE(static_cast<double>(z - c));
      if (want * static_cast<long double>(w(i, 0)) >= normal_floor) {
        // exp (<= 1.22 ulp), the two divisions by the sum (0.5 ulp each) and the ratio's own
        // rounding in long double: 3 ulp of T.
        CHECK(std::abs(static_cast<double>((got - want) / want)) <= 3 * static_cast<double>(u) * 2);
      } else {
        CHECK(w(i, j) >= 0);
        CHECK(static_cast<long double>(w(i, j)) <= 2 * normal_floor);
      }
    }
  }
}

}  // namespace

TEST_CASE_TEMPLATE("softmax exp: weights over the row's largest are exp(z - max) to 3 ulp, every kernel", T,
                   float, double) {
  // Gaps from 0 to past where exp(-gap) underflows T entirely (104 in float, 746 in double).
  const Eigen::Index tk = 301;
  const T step = std::is_same_v<T, float> ? T(0.37) : T(2.51);
  const T shifts[] = {T(0), T(7), T(-37), T(1000), T(-0.25)};
  const Eigen::Index tq = std::size(shifts);
  RowMatrix<T> Q(tq, 2), K(tk, 2), V = RowMatrix<T>::Identity(tk, tk);
  for (Eigen::Index i = 0; i < tq; ++i) Q.row(i) << T(1), shifts[i];
  for (Eigen::Index j = 0; j < tk; ++j) K.row(j) << -step * static_cast<T>(j), T(1);
  ea::Options opt;
  opt.scale = 1.0;
  for (const auto kernel : kernels_under_test()) {
    CAPTURE(ea::kernel_name(kernel));
    opt.kernel = kernel;
    const auto r = ea::attention_decomposed(Q, K, V, opt);
    check_ratios(r.scores, Q, K, "decomposed SCORES");
    // With V the identity, ATTN is the weights again, from the fused kernel's online softmax.
    check_ratios(ea::attention(Q, K, V, opt), Q, K, "fused ATTN");
  }
}

}  // namespace test_softmax_exp
