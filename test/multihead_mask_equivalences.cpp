// SPDX-License-Identifier: MIT
// Equivalent ways to write the same mask give the same results: causal == a boolean
// lower-triangular mask (both alignments), ALiBi == the equivalent additive bias, a bias of -inf
// == the boolean mask.
#include <doctest/doctest.h>

#include "multihead_crosscheck.hpp"

namespace test_multihead_mask_equivalences {

using namespace ea_test;
using namespace ea_test::crosscheck;

TEST_CASE_TEMPLATE("multihead crosscheck: causal == a boolean lower-triangular mask, both alignments", T,
                   float, double) {
  Rng rng(11);
  struct Shape {
    Eigen::Index tq, tk;
  };
  for (const Shape s : {Shape{7, 7}, Shape{5, 12}, Shape{12, 5}}) {
    for (const bool bottom_right : {false, true}) {
      CAPTURE(s.tq);
      CAPTURE(s.tk);
      CAPTURE(bottom_right);
      Config c{"", 2, 4, 2, s.tq, s.tk, 8, 5};
      Problem causal = make_problem<T>(c, rng);
      causal.spec.causal = true;
      causal.spec.bottom_right = bottom_right;
      // The same frontier as a column-major Eigen bool matrix, through BroadcastView::of().
      const Eigen::Index offset = bottom_right ? s.tk - s.tq : 0;
      Eigen::Matrix<bool, Eigen::Dynamic, Eigen::Dynamic> tri(s.tq, s.tk);
      for (Eigen::Index i = 0; i < s.tq; ++i)
        for (Eigen::Index j = 0; j < s.tk; ++j) tri(i, j) = j <= i + offset;
      const auto ref = reference_heads(causal.Q, causal.K, causal.V, causal.spec);
      for (const auto kernel : kernels_under_test()) {
        const std::string kname = ea::kernel_name(kernel);
        CAPTURE(kname);
        for (const bool decomposed : {false, true}) {
          CAPTURE(decomposed);
          const Run<T> a =
              run_heads<T>(causal, options_for(causal.spec, kernel), mh::Layout::BHTD, decomposed);
          // masked call: no causal flag (the alignment then does not matter)
          const Eigen::Index B = c.B, H = c.H, dv = c.dv;
          const HeadsBuffer<T> Q(causal.Q, mh::Layout::BHTD), K(causal.K, mh::Layout::BHTD),
              V(causal.V, mh::Layout::BHTD);
          mh::Masks<T> masks;
          masks.mask = mh::BroadcastView<bool>::of(tri);
          Run<T> b;
          b.out = HeadsBuffer<T>(mh::Layout::BHTD, B, H, s.tq, dv, kSentinel<T>);
          b.lse = HeadsBuffer<T>(mh::Layout::BHTD, B, H, s.tq, 1, kSentinel<T>);
          mh::Options opt = options_for(MultiHeadSpec{}, kernel);
          if (decomposed) {
            b.scores = HeadsBuffer<T>(mh::Layout::BHTD, B, H, s.tq, s.tk, kSentinel<T>);
            b.avg = HeadsBuffer<T>(mh::Layout::BHTD, B, 1, s.tq, s.tk, kSentinel<T>);
            mh::attention_heads_decomposed_into(Q.cview(), K.cview(), V.cview(), b.scores.view(),
                                                b.out.view(), b.lse.view(), b.avg.view(), opt, masks);
          } else {
            mh::attention_heads_into(Q.cview(), K.cview(), V.cview(), b.out.view(), b.lse.view(), opt, masks);
          }
          check_runs_near(b, a, ref, "mask vs causal");
          check_against(b, ref, 1, "mask vs reference");
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("multihead crosscheck: ALiBi == the equivalent additive bias", T, float, double) {
  Rng rng(12);
  for (const bool bottom_right : {false, true}) {
    for (const bool causal : {false, true}) {
      for (const bool power_of_two : {true, false}) {
        CAPTURE(bottom_right);
        CAPTURE(causal);
        CAPTURE(power_of_two);
        Config c{"", 2, 4, 2, 6, 11, 8, 5};
        c.causal = causal;
        c.bottom_right = bottom_right;
        c.alibi = true;
        Problem with_alibi = make_problem<T>(c, rng);
        if (power_of_two)
          for (Eigen::Index h = 0; h < c.H; ++h)
            with_alibi.spec.alibi[static_cast<size_t>(h)] =
                std::pow(2.0L, -8.0L * static_cast<long double>(h + 1) / c.H);
        // bias[1, H, T_q, T_k] = -slope_h |i + offset - j|, rounded to T once
        Problem with_bias = with_alibi;
        with_bias.spec.alibi.clear();
        Array4 bias(1, c.H, c.Tq, c.Tk);
        const Eigen::Index offset = bottom_right ? c.Tk - c.Tq : 0;
        for (Eigen::Index h = 0; h < c.H; ++h)
          for (Eigen::Index i = 0; i < c.Tq; ++i)
            for (Eigen::Index j = 0; j < c.Tk; ++j)
              bias(0, h, i, j) =
                  static_cast<T>(-static_cast<T>(with_alibi.spec.alibi[static_cast<size_t>(h)]) *
                                 static_cast<T>(std::abs(i + offset - j)));
        with_bias.spec.bias = bias;
        const auto ref = reference_heads(with_alibi.Q, with_alibi.K, with_alibi.V, with_alibi.spec);
        // the reference agrees with itself across the two forms
        const auto ref_bias = reference_heads(with_bias.Q, with_bias.K, with_bias.V, with_bias.spec);
        check_heads_near(array_view(ref_bias.out), ref.out, budget_fn<T>(ref, 1, &Budget::attn), "reference");
        for (const auto kernel : kernels_under_test()) {
          const std::string kname = ea::kernel_name(kernel);
          CAPTURE(kname);
          for (const bool decomposed : {false, true}) {
            CAPTURE(decomposed);
            const Run<T> a =
                run_heads<T>(with_alibi, options_for(with_alibi.spec, kernel), mh::Layout::BHTD, decomposed);
            const Run<T> b =
                run_heads<T>(with_bias, options_for(with_bias.spec, kernel), mh::Layout::BHTD, decomposed);
            check_runs_near(a, b, ref, "alibi vs bias");
            check_against(a, ref, 1, "alibi vs reference");
          }
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE(
    "multihead crosscheck: a bias of -inf == the boolean mask (rows of -inf: zeros, never NaN)", T, float,
    double) {
  Rng rng(22);
  Config c{"", 2, 4, 2, 7, 9, 8, 5};
  c.mask = "BxH";
  c.softcap = 2.0;
  Problem masked = make_problem<T>(c, rng);
  for (Eigen::Index b = 0; b < c.B; ++b)
    for (Eigen::Index h = 0; h < c.H; ++h)
      for (Eigen::Index j = 0; j < c.Tk; ++j) (*masked.spec.mask)(b, h, 3, j) = 0;  // row 3 sees no key
  Problem biased = masked;
  biased.spec.mask.reset();
  Array4 bias = *masked.spec.mask;
  for (auto& x : bias.v) x = x != 0 ? 0 : -kInf;
  biased.spec.bias = bias;
  const auto ref = reference_heads(masked.Q, masked.K, masked.V, masked.spec);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    for (const bool decomposed : {false, true}) {
      CAPTURE(decomposed);
      const Run<T> a = run_heads<T>(masked, options_for(masked.spec, kernel), mh::Layout::BHTD, decomposed);
      const Run<T> b = run_heads<T>(biased, options_for(biased.spec, kernel), mh::Layout::BHTD, decomposed);
      check_against(a, ref, 1, "mask vs reference");
      check_against(b, ref, 1, "-inf bias vs reference");
      check_runs_near(b, a, ref, "-inf bias vs mask");
    }
  }
}

}  // namespace test_multihead_mask_equivalences
