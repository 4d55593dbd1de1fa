// SPDX-License-Identifier: MIT
// Properties that hold whatever the values: rows of SCORES sum to 1 (0 when fully masked),
// masked weights are exact zeros, permuting keys permutes SCORES columns and leaves ATTN alone,
// shifting every key by one vector leaves SCORES alone, and ATTN = SCORES V.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "common.hpp"
#include "inputs.hpp"
#include "random.hpp"

namespace test_invariants {

using namespace ea_test;

namespace {

// T_q < T_k, T_q > T_k (with fully masked rows under bottom-right), one token, tile edges.
const std::vector<Shape> kShapes = {{37, 129, 24, 16}, {130, 70, 16, 20}, {1, 1, 4, 4}, {65, 65, 9, 3}};

}  // namespace

TEST_CASE_TEMPLATE("invariants: SCORES rows sum to 1, or to 0 when the query sees no key", T, float, double) {
  Rng rng(11);
  for (const Shape& s : kShapes) {
    CAPTURE(s.tq);
    CAPTURE(s.tk);
    const auto [Q, K, V] = random_inputs<T>(rng, s);
    for (const MaskSpec& mask : all_masks()) {
      const std::string mname = mask_name(mask);
      CAPTURE(mname);
      const auto ref = reference_attention(Q, K, V, mask);
      // The weights of a row are normalised by their own sum: every weight's relative error
      // (budget.scores.rel, plus its floor for tiny weights) bounds the error of the row sum.
      const Tol w = budget_for<T>(ref, s.dk).scores;
      const long double tol = w.rel + static_cast<long double>(s.tk) * w.abs;
      for (const auto kernel : kernels_under_test()) {
        const std::string kname = ea::kernel_name(kernel);
        CAPTURE(kname);
        const ea::Options opt = make_options(mask, std::nullopt, kernel);
        for (const auto& scores :
             {ea::attention_decomposed(Q, K, V, opt).scores, ea::attention_scores(Q, K, opt)}) {
          for (Eigen::Index i = 0; i < s.tq; ++i) {
            CAPTURE(i);
            bool sees_a_key = false;
            for (Eigen::Index j = 0; j < s.tk; ++j)
              sees_a_key = sees_a_key || key_visible(i, j, s.tq, s.tk, mask);
            long double sum = 0;
            for (Eigen::Index j = 0; j < s.tk; ++j) sum += scores(i, j);
            if (sees_a_key) {
              CHECK(near(sum, 1.0L, tol));
            } else {
              CHECK(sum == 0);
            }
          }
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("invariants: weights above the causal frontier are exact zeros", T, float, double) {
  Rng rng(12);
  for (const Shape& s : kShapes) {
    CAPTURE(s.tq);
    CAPTURE(s.tk);
    const auto [Q, K, V] = random_inputs<T>(rng, s);
    for (const MaskSpec& mask : {MaskSpec{true, false}, MaskSpec{true, true}}) {
      const std::string mname = mask_name(mask);
      CAPTURE(mname);
      for (const auto kernel : kernels_under_test()) {
        const std::string kname = ea::kernel_name(kernel);
        CAPTURE(kname);
        const ea::Options opt = make_options(mask, std::nullopt, kernel);
        for (const auto& scores :
             {ea::attention_decomposed(Q, K, V, opt).scores, ea::attention_scores(Q, K, opt)}) {
          Eigen::Index nonzero = 0, first_i = -1, first_j = -1;
          long double first_value = 0;
          for (Eigen::Index i = 0; i < s.tq; ++i)
            for (Eigen::Index j = 0; j < s.tk; ++j)
              if (!key_visible(i, j, s.tq, s.tk, mask) && scores(i, j) != T(0)) {
                if (nonzero++ == 0) {
                  first_i = i;
                  first_j = j;
                  first_value = scores(i, j);
                }
              }
          CAPTURE(first_i);
          CAPTURE(first_j);
          CAPTURE(first_value);
          CHECK(nonzero == 0);
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("invariants: permuting the keys permutes SCORES columns and keeps ATTN", T, float,
                   double) {
  Rng rng(13);
  for (const Shape& s : kShapes) {
    CAPTURE(s.tq);
    CAPTURE(s.tk);
    const auto [Q, K, V] = random_inputs<T>(rng, s);
    // Key i of the permuted problem is key perm[i] of the original.
    std::vector<Eigen::Index> perm(static_cast<size_t>(s.tk));
    std::iota(perm.begin(), perm.end(), Eigen::Index{0});
    std::shuffle(perm.begin(), perm.end(), rng.engine());
    RowMatrix<T> Kp(s.tk, s.dk), Vp(s.tk, s.dv);
    for (Eigen::Index i = 0; i < s.tk; ++i) {
      Kp.row(i) = K.row(perm[static_cast<size_t>(i)]);
      Vp.row(i) = V.row(perm[static_cast<size_t>(i)]);
    }
    // Two computed results, each within the budget of the exact one (non-causal only: the
    // causal mask is not permutation invariant).
    const Budget b = budget_for<T>(reference_attention(Q, K, V, MaskSpec{}), s.dk).times(2);
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      const ea::Options opt = make_options(MaskSpec{}, std::nullopt, kernel);
      const auto r = ea::attention_decomposed(Q, K, V, opt);
      const auto rp = ea::attention_decomposed(Q, Kp, Vp, opt);
      RowMatrix<T> unpermuted(s.tq, s.tk);
      for (Eigen::Index i = 0; i < s.tk; ++i) unpermuted.col(perm[static_cast<size_t>(i)]) = rp.scores.col(i);
      EA_CHECK_NEAR(unpermuted, r.scores, b.scores);
      EA_CHECK_NEAR(rp.attn, r.attn, b.attn);
      EA_CHECK_NEAR(rp.lse, r.lse, b.lse);
      EA_CHECK_NEAR(ea::attention(Q, Kp, Vp, opt), ea::attention(Q, K, V, opt), b.attn);
    }
  }
}

TEST_CASE_TEMPLATE("invariants: adding one vector to every key leaves SCORES unchanged", T, float, double) {
  Rng rng(14);
  for (const Shape& s : kShapes) {
    CAPTURE(s.tq);
    CAPTURE(s.tk);
    // Entries are multiples of 2^-10 below 16 in magnitude, so K + c is exact in float and
    // double: the shifted problem is exactly the one the invariance speaks of.
    auto dyadic = [&](Eigen::Index r, Eigen::Index c) {
      RowMatrix<T> m(r, c);
      for (Eigen::Index i = 0; i < r; ++i)
        for (Eigen::Index j = 0; j < c; ++j) m(i, j) = static_cast<T>(std::round(rng.normal() * 1024) / 1024);
      return m;
    };
    const RowMatrix<T> Q = dyadic(s.tq, s.dk), K = dyadic(s.tk, s.dk), V = dyadic(s.tk, s.dv);
    const RowMatrix<T> c = dyadic(1, s.dk);
    const RowMatrix<T> Ks = K.rowwise() + c.row(0);
    for (const MaskSpec& mask : all_masks()) {
      const std::string mname = mask_name(mask);
      CAPTURE(mname);
      const auto ref = reference_attention(Q, K, V, mask), ref_s = reference_attention(Q, Ks, V, mask);
      // Two computed results; the larger logit magnitude of the two sets the budget.
      ReferenceResult worst = ref.logit_magnitude > ref_s.logit_magnitude ? ref : ref_s;
      const Budget b = budget_for<T>(worst, s.dk).times(2);
      for (const auto kernel : kernels_under_test()) {
        const std::string kname = ea::kernel_name(kernel);
        CAPTURE(kname);
        const ea::Options opt = make_options(mask, std::nullopt, kernel);
        const auto r = ea::attention_decomposed(Q, K, V, opt);
        const auto rs = ea::attention_decomposed(Q, Ks, V, opt);
        EA_CHECK_NEAR(rs.scores, r.scores, b.scores);
        EA_CHECK_NEAR(rs.attn, r.attn, b.attn);
        // LSE moves by scale * (q_i . c) exactly.
        ea_test::VectorLD expected(s.tq);
        for (Eigen::Index i = 0; i < s.tq; ++i) {
          long double shift = 0;
          for (Eigen::Index k = 0; k < s.dk; ++k) shift += static_cast<long double>(Q(i, k)) * c(0, k);
          expected(i) = static_cast<long double>(r.lse(i)) + ref.scale * shift;
        }
        EA_CHECK_NEAR(rs.lse, expected, b.lse);
      }
    }
  }
}

TEST_CASE_TEMPLATE("invariants: ATTN equals SCORES times V", T, float, double) {
  Rng rng(15);
  for (const Shape& s : kShapes) {
    CAPTURE(s.tq);
    CAPTURE(s.tk);
    const auto [Q, K, V] = random_inputs<T>(rng, s);
    for (const MaskSpec& mask : all_masks()) {
      const std::string mname = mask_name(mask);
      CAPTURE(mname);
      // ATTN and SCORES of one call are each within the budget of the exact ones.
      const Budget b = budget_for<T>(reference_attention(Q, K, V, mask), s.dk).times(2);
      for (const auto kernel : kernels_under_test()) {
        const std::string kname = ea::kernel_name(kernel);
        CAPTURE(kname);
        const auto r = ea::attention_decomposed(Q, K, V, make_options(mask, std::nullopt, kernel));
        const MatrixLD product = to_long_double(r.scores) * to_long_double(V);
        EA_CHECK_NEAR(r.attn, product, b.attn);
      }
    }
  }
}

}  // namespace test_invariants
