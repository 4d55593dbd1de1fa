// SPDX-License-Identifier: MIT
// Logits around +-1e4 and far larger: the softmax must subtract the row maximum (exp(1e4)
// overflows, exp(-1e4) underflows) and stay finite and accurate.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "common.hpp"
#include "random.hpp"

namespace test_large_logits {

using namespace ea_test;

namespace {

template <class T>
void check_every_form(const RowMatrix<T>& Q, const RowMatrix<T>& K, const RowMatrix<T>& V, ea::Options opt,
                      const ReferenceResult& ref, const Budget& b) {
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    opt.kernel = kernel;
    const auto r = ea::attention_decomposed(Q, K, V, opt);
    CHECK(all_finite(r.scores));
    CHECK(all_finite(r.attn));
    CHECK_FALSE(any_nan(r.lse));  // -inf only where the reference has a row that sees no key
    EA_CHECK_NEAR(r.scores, ref.scores, b.scores);
    EA_CHECK_NEAR(r.attn, ref.attn, b.attn);
    EA_CHECK_NEAR(r.lse, ref.lse, b.lse);
    const auto attn = ea::attention(Q, K, V, opt);
    CHECK(all_finite(attn));
    EA_CHECK_NEAR(attn, ref.attn, b.attn);
    EA_CHECK_NEAR(ea::attention_scores(Q, K, opt), ref.scores, b.scores);
  }
}

}  // namespace

TEST_CASE_TEMPLATE("large logits: exactly representable logits near +-1e4 and beyond", T, float, double) {
  // d_k = 4 and the default scale 1/2: Q_i = [2 B_i, x], K_j = [1, y] with small integers x, y,
  // so every scaled logit is B_i + (x . y) / 2, exact in float (|2 B_i| + 48 < 2^24), and its
  // difference from the row maximum is exact too. Only exp, the sum and the division round:
  // the budget of a problem whose logits carry no error (logit magnitude 0).
  Rng rng(5);
  const Eigen::Index tq = 70, tk = 67, dk = 4, dv = 5;
  std::vector<double> bases = {1e4, -1e4, 3e5, -3e5, 4e6};
  if constexpr (std::is_same_v<T, double>) bases.insert(bases.end(), {1e12, -1e12});
  for (const double B : bases) {
    CAPTURE(B);
    RowMatrix<T> Q(tq, dk), K(tk, dk);
    for (Eigen::Index i = 0; i < tq; ++i) {
      // Alternate the sign of the base from row to row: logits of +-B in one problem.
      Q(i, 0) = static_cast<T>((i % 2 == 0 ? 2 : -2) * B);
      for (Eigen::Index k = 1; k < dk; ++k) Q(i, k) = static_cast<T>(rng.integer(-4, 4));
    }
    for (Eigen::Index j = 0; j < tk; ++j) {
      K(j, 0) = 1;
      for (Eigen::Index k = 1; k < dk; ++k) K(j, k) = static_cast<T>(rng.integer(-4, 4));
    }
    const auto V = random_matrix<RowMatrix<T>>(rng, tk, dv);
    for (const MaskSpec& mask : all_masks()) {
      const std::string mname = mask_name(mask);
      CAPTURE(mname);
      const auto ref = reference_attention(Q, K, V, mask);
      const Budget b = attention_budget<T>(0, ref.max_abs_v, dk, tk);
      check_every_form<T>(Q, K, V, make_options(mask), ref, b);
    }
  }
}

TEST_CASE_TEMPLATE("large logits: random data with logits of order 1e4", T, float, double) {
  // Q, K ~ 100 N(0, 1), d_k = 16: scaled logits of order 1e4 with gaps of order 1e3-1e4 within a
  // row. The budget grows with the logit magnitude (the softmax's condition number).
  Rng rng(6);
  const Eigen::Index tq = 33, tk = 129, dk = 16, dv = 7;
  const auto Q = random_matrix<RowMatrix<T>>(rng, tq, dk, 100.0);
  const auto K = random_matrix<RowMatrix<T>>(rng, tk, dk, 100.0);
  const auto V = random_matrix<RowMatrix<T>>(rng, tk, dv);
  for (const MaskSpec& mask : all_masks()) {
    const std::string mname = mask_name(mask);
    CAPTURE(mname);
    const auto ref = reference_attention(Q, K, V, mask);
    CHECK(ref.logit_magnitude > 1e3L);  // the case is what it says
    // The error model: the logit magnitude (~1e4, the condition number) scales the bound.
    check_every_form<T>(Q, K, V, make_options(mask), ref, budget_for<T>(ref, dk));
  }
}

TEST_CASE_TEMPLATE("large logits: scale 1e30 makes every row one-hot", T, float, double) {
  // With logits of order 1e30 the gap between a row's two largest logits is of order 1e29,
  // far above their rounding error (d_k + 4) u |logit| and above any exp range: SCORES is
  // exactly one-hot (up to exp's last bits), ATTN is the winning key's V row, LSE its logit.
  Rng rng(7);
  const Eigen::Index tq = 40, tk = 70, dk = 8, dv = 3;
  const auto Q = random_matrix<RowMatrix<T>>(rng, tq, dk);
  const auto K = random_matrix<RowMatrix<T>>(rng, tk, dk);
  const auto V = random_matrix<RowMatrix<T>>(rng, tk, dv);
  const long double u = unit_roundoff<T>();
  for (const MaskSpec& mask : all_masks()) {
    const std::string mname = mask_name(mask);
    CAPTURE(mname);
    ea::Options opt = make_options(mask, 1e30);
    const auto ref = reference_for(Q, K, V, opt);
    const long double delta = (dk + 4) * u * ref.logit_magnitude;
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      opt.kernel = kernel;
      const auto r = ea::attention_decomposed(Q, K, V, opt);
      const auto attn = ea::attention(Q, K, V, opt);
      CHECK(all_finite(r.scores));
      CHECK(all_finite(r.attn));
      CHECK(all_finite(attn));
      Eigen::Index rows_checked = 0;
      for (Eigen::Index i = 0; i < tq; ++i) {
        CAPTURE(i);
        // The winner and the gap, from the exact logits.
        Eigen::Index best = -1;
        long double top = -INFINITY, second = -INFINITY;
        for (Eigen::Index j = 0; j < tk; ++j) {
          if (!key_visible(i, j, tq, tk, mask)) continue;
          long double l = 0;
          for (Eigen::Index k = 0; k < dk; ++k) l += static_cast<long double>(Q(i, k)) * K(j, k);
          l *= ref.scale;
          if (l > top) {
            second = top;
            top = l;
            best = j;
          } else if (l > second) {
            second = l;
          }
        }
        if (std::isfinite(second) && top - second < 4 * delta + 1e4L) continue;  // a near tie
        ++rows_checked;
        // 4 u: the winner's weight is 1 / (1 + underflowed terms), ATTN a copy of V(best) with at
        // most a rescaling and a division, each one rounding.
        for (Eigen::Index j = 0; j < tk; ++j) CHECK(near(r.scores(i, j), j == best ? 1.0L : 0.0L, 4 * u));
        for (Eigen::Index c = 0; c < dv; ++c) {
          CHECK(near(r.attn(i, c), V(best, c), 4 * u));
          CHECK(near(attn(i, c), V(best, c), 4 * u));
        }
        // LSE = top + log(1 + tiny): the winning logit, within its own rounding error.
        CHECK(std::fabs(static_cast<long double>(r.lse(i)) - top) <= 2 * delta);
      }
      CHECK(rows_checked >= tq / 2);
    }
  }
}

}  // namespace test_large_logits
