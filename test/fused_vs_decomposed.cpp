// SPDX-License-Identifier: MIT
// attention() never forms the T_q x T_k weights (an online softmax in tiled kernels);
// attention_decomposed() normalises them first. Both must give the same ATTN (and LSE) to
// within a few ulps, for every kernel.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "common.hpp"
#include "random.hpp"

namespace test_fused_vs_decomposed {

using namespace ea_test;

namespace {

struct Case {
  Eigen::Index tq, tk, dk, dv;
  MaskSpec mask;
  double magnitude;  // of Q and K entries: sets the spread of the logits
};

const std::vector<Case> kCases = {
    {300, 300, 64, 64, {false, false}, 1.0}, {300, 300, 64, 64, {true, false}, 1.0},
    {129, 257, 17, 33, {true, true}, 1.0},   {257, 129, 17, 33, {true, false}, 1.0},
    {200, 200, 32, 16, {false, false}, 3.0}, {200, 200, 32, 16, {true, false}, 3.0},
    {65, 130, 24, 8, {true, true}, 10.0},    {1, 300, 64, 64, {false, false}, 1.0}};

/// max over rows of sum_j p_ij (m_i - l_ij): how far below the row maximum, on average, the
/// arguments of exp lie. exp turns an absolute error in its argument (one rounding of
/// l - m, about |l - m| u) into a relative error of the weight, and the two forms subtract
/// different maxima (running per tile vs final), so this is what their rounding differs by.
long double exp_argument_spread(const ReferenceResult& ref) {
  long double spread = 0;
  for (Eigen::Index i = 0; i < ref.scores.rows(); ++i) {
    if (!std::isfinite(ref.lse(i))) continue;
    long double m = -INFINITY;
    for (Eigen::Index j = 0; j < ref.scores.cols(); ++j)
      if (ref.scores(i, j) > 0) m = std::max(m, std::log(ref.scores(i, j)) + ref.lse(i));
    long double e = 0;
    for (Eigen::Index j = 0; j < ref.scores.cols(); ++j)
      if (ref.scores(i, j) > 0) e += ref.scores(i, j) * (m - (std::log(ref.scores(i, j)) + ref.lse(i)));
    spread = std::max(spread, e);
  }
  return spread;
}

}  // namespace

TEST_CASE_TEMPLATE("fused vs decomposed: the same ATTN and LSE within a few ulps, every kernel", T, float,
                   double) {
  Rng rng(51);
  for (const Case& cs : kCases) {
    CAPTURE(cs.tq);
    CAPTURE(cs.tk);
    CAPTURE(cs.dk);
    CAPTURE(cs.magnitude);
    const std::string mname = mask_name(cs.mask);
    CAPTURE(mname);
    const auto Q = random_matrix<RowMatrix<T>>(rng, cs.tq, cs.dk, cs.magnitude);
    const auto K = random_matrix<RowMatrix<T>>(rng, cs.tk, cs.dk, cs.magnitude);
    const auto V = random_matrix<RowMatrix<T>>(rng, cs.tk, cs.dv);
    const auto ref = reference_attention(Q, K, V, cs.mask);
    // Both forms compute the same logits; they differ in how the exponentials are rescaled and
    // summed. Tolerance: 16 ulps x (1 + spread) x max(1, max|V|), spread as above
    // (measured: at most ~9 ulps on these cases).
    const long double spread = exp_argument_spread(ref);
    CAPTURE(spread);
    const long double tol = 16 * unit_roundoff<T>() * (1 + spread) * std::max(1.0L, ref.max_abs_v);
    // LSE carries no V: the same roundings, of its own size (mixed: a few ulps of |LSE|).
    const long double lse_tol = 16 * unit_roundoff<T>() * (1 + spread);
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      const ea::Options opt = make_options(cs.mask, std::nullopt, kernel);
      const auto dec = ea::attention_decomposed(Q, K, V, opt);
      const auto fused = ea::attention(Q, K, V, opt);
      EA_CHECK_NEAR(fused, dec.attn, tol);
      RowMatrix<T> out(cs.tq, cs.dv);
      ea::Vector<T> lse(cs.tq);
      ea::attention_into(Q, K, V, out, lse, opt);
      EA_CHECK_NEAR(out, dec.attn, tol);
      EA_CHECK_NEAR(lse, dec.lse, lse_tol);
    }
  }
}

}  // namespace test_fused_vs_decomposed
