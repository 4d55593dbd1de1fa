// SPDX-License-Identifier: MIT
// bfloat16 and half inputs (computed in float): the error against the exact result on the
// rounded inputs, within twice that of the naive float expression with P rounded to the 16-bit
// type (low_precision.hpp); masked weights exact zeros, rows that see no key zeros, NaN confined
// to its rows, and bitwise the same result for every thread count.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common.hpp"
#include "inputs.hpp"
#include "low_precision.hpp"

namespace test_low_precision_accuracy {

using namespace ea_test;

namespace {

template <class T16>
struct Inputs16 {
  Row16<T16> Q, K, V;
};

template <class T16>
Inputs16<T16> random16(Rng& rng, const Shape& s, double magnitude) {
  Inputs16<T16> in;
  in.Q = round_to<T16>(random_matrix<RowMatrix<float>>(rng, s.tq, s.dk, magnitude));
  in.K = round_to<T16>(random_matrix<RowMatrix<float>>(rng, s.tk, s.dk, magnitude));
  in.V = round_to<T16>(random_matrix<RowMatrix<float>>(rng, s.tk, s.dv));
  return in;
}

const std::vector<Shape> kShapes = {{1, 1, 8, 8},     {3, 7, 5, 4},       {7, 3, 16, 16},
                                    {33, 65, 24, 40}, {131, 517, 72, 40}, {200, 200, 64, 64}};

}  // namespace

TEST_CASE_TEMPLATE("low precision: SCORES, ATTN and LSE within twice the naive P-rounded error", T16,
                   Eigen::bfloat16, Eigen::half) {
  const std::string type = type_name<T16>();
  CAPTURE(type);
  Rng rng(1401);
  for (const Shape& s : kShapes) {
    for (const double magnitude : {1.0, 2.5}) {
      const Inputs16<T16> in = random16<T16>(rng, s, magnitude);
      const MatrixLD Q = widen_ld(in.Q), K = widen_ld(in.K), V = widen_ld(in.V);
      for (const MaskSpec& mask : all_masks()) {
        const ea::Options base = make_options(mask);
        const ReferenceResult ref = reference_for(Q, K, V, base);
        const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.dk)));
        const NaiveResult naive = naive_p_rounded<T16>(in.Q, in.K, in.V, mask, scale);
        const long double scores_bound = low_precision_bound(naive.scores, ref.scores);
        const long double attn_bound = low_precision_bound(naive.attn, ref.attn);
        // The LSE is returned in float, computed in float from exact (already rounded) inputs: the
        // float budget of the float tests bounds it (the P-rounded model says nothing of it).
        const Budget float_budget = budget_for<float>(ref, s.dk);
        for (const ea::Kernel kernel : kernels_under_test()) {
          CAPTURE(s.tq);
          CAPTURE(s.tk);
          CAPTURE(s.dk);
          CAPTURE(magnitude);
          CAPTURE(mask_name(mask));
          const std::string kname = ea::kernel_name(kernel);
          CAPTURE(kname);
          const ea::Options opt = make_options(mask, std::nullopt, kernel);
          const ea::DecomposedResult<T16> r = ea::attention_decomposed(in.Q, in.K, in.V, opt);
          const Row16<T16> fused = ea::attention(in.Q, in.K, in.V, opt);
          CHECK(max_error(widen_ld(r.scores), ref.scores) <= scores_bound);
          CHECK(max_error(widen_ld(r.attn), ref.attn) <= attn_bound);
          CHECK(max_error(widen_ld(fused), ref.attn) <= attn_bound);
          EA_CHECK_NEAR(r.lse, ref.lse, float_budget.lse);
          // Masked weights are exact zeros; a row that sees no key is zero with LSE -inf.
          for (Eigen::Index i = 0; i < s.tq; ++i) {
            bool any = false;
            for (Eigen::Index j = 0; j < s.tk; ++j) {
              if (key_visible(i, j, s.tq, s.tk, mask)) {
                any = true;
              } else {
                REQUIRE(static_cast<float>(r.scores(i, j)) == 0.0f);
              }
            }
            if (!any) {
              CHECK(r.lse(i) == -std::numeric_limits<float>::infinity());
              CHECK(r.attn.row(i).template cast<float>().isZero(0));
              CHECK(fused.row(i).template cast<float>().isZero(0));
            }
          }
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("low precision: the bound holds with margin on long rows of large logits", T16,
                   Eigen::bfloat16, Eigen::half) {
  // The 16-bit model's error is largest where many keys share the weight and the logits are
  // large: the bound is checked there and its margin reported.
  const std::string type = type_name<T16>();
  CAPTURE(type);
  Rng rng(1402);
  const Shape s{64, 1500, 64, 64};
  const Inputs16<T16> in = random16<T16>(rng, s, 2.0);
  const MatrixLD Q = widen_ld(in.Q), K = widen_ld(in.K), V = widen_ld(in.V);
  const MaskSpec mask{true, true};
  const ReferenceResult ref = reference_for(Q, K, V, make_options(mask));
  const NaiveResult naive = naive_p_rounded<T16>(in.Q, in.K, in.V, mask, 0.125f);
  const Row16<T16> fused = ea::attention(in.Q, in.K, in.V, make_options(mask));
  const long double ours = max_error(widen_ld(fused), ref.attn), model = max_error(naive.attn, ref.attn);
  MESSAGE(type << ": ATTN error " << static_cast<double>(ours) << ", the P-rounded model's "
               << static_cast<double>(model));
  CHECK(ours <= 2 * model);
}

TEST_CASE_TEMPLATE("low precision: SCORES in float on request are the rounded SCORES before rounding", T16,
                   Eigen::bfloat16, Eigen::half) {
  Rng rng(1403);
  const Inputs16<T16> in = random16<T16>(rng, {19, 41, 24, 8}, 1.0);
  for (const ea::Kernel kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt = make_options({true, true}, std::nullopt, kernel);
    const ea::DecomposedResult<T16> rounded = ea::attention_decomposed(in.Q, in.K, in.V, opt);
    opt.float_scores = true;
    const ea::DecomposedResult<T16> wide = ea::attention_decomposed(in.Q, in.K, in.V, opt);
    CHECK(wide.scores.size() == 0);
    REQUIRE(wide.scores_float.rows() == 19);
    REQUIRE(wide.scores_float.cols() == 41);
    EA_CHECK_EQUAL(round_to<T16>(wide.scores_float).template cast<float>(),
                   rounded.scores.template cast<float>());
    EA_CHECK_EQUAL(wide.attn.template cast<float>(), rounded.attn.template cast<float>());
    EA_CHECK_EQUAL(wide.lse, rounded.lse);
    // The float weights of each row sum to 1 within float rounding (41 terms).
    for (Eigen::Index i = 0; i < 19; ++i)
      CHECK(std::fabs(wide.scores_float.row(i).sum() - 1.0f) <= 41 * 6e-8f);
  }
}

TEST_CASE_TEMPLATE("low precision: NaN reaches only the rows that see it", T16, Eigen::bfloat16,
                   Eigen::half) {
  Rng rng(1404);
  Inputs16<T16> in = random16<T16>(rng, {9, 9, 8, 8}, 1.0);
  in.K(4, 2) = T16(std::numeric_limits<float>::quiet_NaN());  // seen by causal rows 4..8
  in.V(6, 1) = T16(std::numeric_limits<float>::quiet_NaN());  // seen by rows 6..8
  for (const ea::Kernel kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt = make_options({true, false}, std::nullopt, kernel);
    const Row16<T16> out = ea::attention(in.Q, in.K, in.V, opt);
    const RowMatrix<float> o = out.template cast<float>();
    for (Eigen::Index i = 0; i < 9; ++i) {
      CAPTURE(i);
      if (i < 4) {
        CHECK(all_finite(o.row(i)));
      } else {
        CHECK(any_nan(o.row(i)));
      }
    }
  }
}

TEST_CASE_TEMPLATE("low precision threads: bitwise the same for every thread count", T16, Eigen::bfloat16,
                   Eigen::half) {
  Rng rng(1405);
  const Inputs16<T16> in = random16<T16>(rng, {300, 333, 40, 24}, 1.0);
  for (const ea::Kernel kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt = make_options({true, true}, std::nullopt, kernel);
    const ea::DecomposedResult<T16> one = ea::attention_decomposed(in.Q, in.K, in.V, opt);
    const Row16<T16> fused_one = ea::attention(in.Q, in.K, in.V, opt);
    for (const int threads : {2, 3, 0}) {
      CAPTURE(threads);
      opt.threads = threads;
      const ea::DecomposedResult<T16> r = ea::attention_decomposed(in.Q, in.K, in.V, opt);
      EA_CHECK_EQUAL(r.scores.template cast<float>(), one.scores.template cast<float>());
      EA_CHECK_EQUAL(r.attn.template cast<float>(), one.attn.template cast<float>());
      EA_CHECK_EQUAL(r.lse, one.lse);
      EA_CHECK_EQUAL(ea::attention(in.Q, in.K, in.V, opt).template cast<float>(),
                     fused_one.template cast<float>());
    }
  }
}

}  // namespace test_low_precision_accuracy
