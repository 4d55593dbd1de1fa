// SPDX-License-Identifier: MIT
// The causal mask and the degenerate shapes: where the frontier sits for each alignment, rows
// that see no key, T_k = 0, T_q = 0, d_v = 0, d_k = 0 with an explicit scale, and the
// alignment being ignored without the mask.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common.hpp"
#include "inputs.hpp"
#include "random.hpp"

namespace test_masking {

using namespace ea_test;

namespace {

struct Sizes {
  Eigen::Index tq, tk;
};

const std::vector<Sizes> kSizes = {{5, 5}, {4, 9}, {9, 4}, {1, 7}, {7, 1}, {70, 130}, {130, 70}, {66, 66}};

template <class Derived>
bool row_is_exact_zero(const Eigen::MatrixBase<Derived>& m, Eigen::Index i) {
  return (m.row(i).array() == typename Derived::Scalar(0)).all();
}

}  // namespace

TEST_CASE_TEMPLATE("masking: the frontier of each alignment, exactly", T, float, double) {
  Rng rng(21);
  const Eigen::Index dk = 6, dv = 3;
  for (const Sizes& s : kSizes) {
    CAPTURE(s.tq);
    CAPTURE(s.tk);
    // Small logits (|logit| < ~3): every visible weight is well above underflow, so "visible"
    // and "> 0" coincide.
    const auto Q = random_matrix<RowMatrix<T>>(rng, s.tq, dk, 0.5);
    const auto K = random_matrix<RowMatrix<T>>(rng, s.tk, dk, 0.5);
    const auto V = random_matrix<RowMatrix<T>>(rng, s.tk, dv);
    for (const MaskSpec& mask : {MaskSpec{true, false}, MaskSpec{true, true}}) {
      const std::string mname = mask_name(mask);
      CAPTURE(mname);
      const Eigen::Index offset = mask.bottom_right ? s.tk - s.tq : 0;
      const auto ref = reference_attention(Q, K, V, mask);
      const Budget b = budget_for<T>(ref, dk);  // one computed result vs exact: the error model
      for (const auto kernel : kernels_under_test()) {
        const std::string kname = ea::kernel_name(kernel);
        CAPTURE(kname);
        const auto r = ea::attention_decomposed(Q, K, V, make_options(mask, std::nullopt, kernel));
        Eigen::Index wrong = 0, first_i = -1, first_j = -1;
        for (Eigen::Index i = 0; i < s.tq; ++i) {
          for (Eigen::Index j = 0; j < s.tk; ++j) {
            const bool visible = j <= i + offset;  // the documented rule, written out again
            const bool ok = visible ? r.scores(i, j) > T(0) : r.scores(i, j) == T(0);
            if (!ok && wrong++ == 0) {
              first_i = i;
              first_j = j;
            }
          }
        }
        CAPTURE(first_i);
        CAPTURE(first_j);
        CHECK(wrong == 0);
        EA_CHECK_NEAR(r.scores, ref.scores, b.scores);
        EA_CHECK_NEAR(r.attn, ref.attn, b.attn);
        EA_CHECK_NEAR(r.lse, ref.lse, b.lse);
      }
    }
  }
}

TEST_CASE_TEMPLATE("masking: bottom-right with T_q > T_k leaves the first rows seeing no key", T, float,
                   double) {
  Rng rng(22);
  const Eigen::Index tq = 75, tk = 7, dk = 5, dv = 4, blind = tq - tk;  // rows 0..67 see nothing
  const auto [Q, K, V] = random_inputs<T>(rng, {tq, tk, dk, dv});
  const T minus_inf = -std::numeric_limits<T>::infinity();
  const auto ref = reference_attention(Q, K, V, MaskSpec{true, true});
  const Budget b = budget_for<T>(ref, dk);  // one computed result vs exact: the error model
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    const ea::Options opt = make_options(MaskSpec{true, true}, std::nullopt, kernel);
    const auto r = ea::attention_decomposed(Q, K, V, opt);
    const auto attn = ea::attention(Q, K, V, opt);
    const auto scores = ea::attention_scores(Q, K, opt);
    RowMatrix<T> out = RowMatrix<T>::Constant(tq, dv, T(7));
    ea::Vector<T> lse = ea::Vector<T>::Constant(tq, T(7));
    ea::attention_into(Q, K, V, out, lse, opt);
    CHECK_FALSE(any_nan(r.scores));
    CHECK_FALSE(any_nan(r.attn));
    CHECK_FALSE(any_nan(r.lse));
    CHECK_FALSE(any_nan(attn));
    CHECK_FALSE(any_nan(out));
    for (Eigen::Index i = 0; i < tq; ++i) {
      CAPTURE(i);
      if (i < blind) {
        CHECK(row_is_exact_zero(r.scores, i));
        CHECK(row_is_exact_zero(r.attn, i));
        CHECK(r.lse(i) == minus_inf);
        CHECK(row_is_exact_zero(attn, i));
        CHECK(row_is_exact_zero(scores, i));
        CHECK(row_is_exact_zero(out, i));
        CHECK(lse(i) == minus_inf);
      } else {
        CHECK(std::isfinite(r.lse(i)));
        CHECK(std::isfinite(lse(i)));
      }
    }
    EA_CHECK_NEAR(r.scores, ref.scores, b.scores);
    EA_CHECK_NEAR(r.attn, ref.attn, b.attn);
    EA_CHECK_NEAR(r.lse, ref.lse, b.lse);
    EA_CHECK_NEAR(attn, ref.attn, b.attn);
    EA_CHECK_NEAR(out, ref.attn, b.attn);
    EA_CHECK_NEAR(lse, ref.lse, b.lse);
  }
}

TEST_CASE_TEMPLATE("masking: T_k = 0 gives zero rows and LSE -inf", T, float, double) {
  const Eigen::Index tq = 4, dk = 3, dv = 2;
  const RowMatrix<T> Q = RowMatrix<T>::Ones(tq, dk), K(0, dk), V(0, dv);
  const T minus_inf = -std::numeric_limits<T>::infinity();
  for (const MaskSpec& mask : all_masks()) {
    const std::string mname = mask_name(mask);
    CAPTURE(mname);
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      const ea::Options opt = make_options(mask, std::nullopt, kernel);
      const auto r = ea::attention_decomposed(Q, K, V, opt);
      CHECK(r.scores.rows() == tq);
      CHECK(r.scores.cols() == 0);
      REQUIRE(r.attn.rows() == tq);
      REQUIRE(r.attn.cols() == dv);
      REQUIRE(r.lse.rows() == tq);
      CHECK((r.attn.array() == T(0)).all());
      CHECK((r.lse.array() == minus_inf).all());
      const auto attn = ea::attention(Q, K, V, opt);
      REQUIRE(attn.rows() == tq);
      REQUIRE(attn.cols() == dv);
      CHECK((attn.array() == T(0)).all());
      const auto scores = ea::attention_scores(Q, K, opt);
      CHECK(scores.rows() == tq);
      CHECK(scores.cols() == 0);
      RowMatrix<T> out = RowMatrix<T>::Constant(tq, dv, T(7));
      ea::Vector<T> lse = ea::Vector<T>::Constant(tq, T(7));
      ea::attention_into(Q, K, V, out, lse, opt);
      CHECK((out.array() == T(0)).all());
      CHECK((lse.array() == minus_inf).all());
    }
  }
}

TEST_CASE_TEMPLATE("masking: T_q = 0 gives empty results of the right shapes", T, float, double) {
  Rng rng(23);
  const Eigen::Index tk = 6, dk = 3, dv = 2;
  const RowMatrix<T> Q(0, dk);
  const auto K = random_matrix<RowMatrix<T>>(rng, tk, dk);
  const auto V = random_matrix<RowMatrix<T>>(rng, tk, dv);
  for (const MaskSpec& mask : all_masks()) {
    const std::string mname = mask_name(mask);
    CAPTURE(mname);
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      const ea::Options opt = make_options(mask, std::nullopt, kernel);
      const auto r = ea::attention_decomposed(Q, K, V, opt);
      CHECK(r.scores.rows() == 0);
      CHECK(r.scores.cols() == tk);
      CHECK(r.attn.rows() == 0);
      CHECK(r.attn.cols() == dv);
      CHECK(r.lse.rows() == 0);
      const auto attn = ea::attention(Q, K, V, opt);
      CHECK(attn.rows() == 0);
      CHECK(attn.cols() == dv);
      const auto scores = ea::attention_scores(Q, K, opt);
      CHECK(scores.rows() == 0);
      CHECK(scores.cols() == tk);
      // Resizable outputs of another size are resized to the empty shapes.
      RowMatrix<T> out(2, 2), s(2, 2);
      ea::Vector<T> lse(2);
      ea::attention_decomposed_into(Q, K, V, s, out, lse, opt);
      CHECK(s.rows() == 0);
      CHECK(s.cols() == tk);
      CHECK(out.rows() == 0);
      CHECK(out.cols() == dv);
      CHECK(lse.rows() == 0);
    }
  }
}

TEST_CASE_TEMPLATE("masking: d_v = 0 gives an empty ATTN and the usual SCORES and LSE", T, float, double) {
  Rng rng(24);
  const Eigen::Index tq = 5, tk = 8, dk = 4;
  const auto Q = random_matrix<RowMatrix<T>>(rng, tq, dk);
  const auto K = random_matrix<RowMatrix<T>>(rng, tk, dk);
  const RowMatrix<T> V(tk, 0);
  for (const MaskSpec& mask : all_masks()) {
    const std::string mname = mask_name(mask);
    CAPTURE(mname);
    const auto ref = reference_attention(Q, K, V, mask);
    const Budget b = budget_for<T>(ref, dk);  // one computed result vs exact: the error model
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      const ea::Options opt = make_options(mask, std::nullopt, kernel);
      const auto r = ea::attention_decomposed(Q, K, V, opt);
      CHECK(r.attn.rows() == tq);
      CHECK(r.attn.cols() == 0);
      EA_CHECK_NEAR(r.scores, ref.scores, b.scores);
      EA_CHECK_NEAR(r.lse, ref.lse, b.lse);
      const auto attn = ea::attention(Q, K, V, opt);
      CHECK(attn.rows() == tq);
      CHECK(attn.cols() == 0);
      RowMatrix<T> out;
      ea::Vector<T> lse;
      ea::attention_into(Q, K, V, out, lse, opt);
      CHECK(out.rows() == tq);
      CHECK(out.cols() == 0);
      EA_CHECK_NEAR(lse, ref.lse, b.lse);
    }
  }
}

TEST_CASE_TEMPLATE("masking: d_k = 0 with an explicit scale gives uniform weights", T, float, double) {
  Rng rng(25);
  const Eigen::Index tq = 4, tk = 6, dv = 3;
  const RowMatrix<T> Q(tq, 0), K(tk, 0);
  const auto V = random_matrix<RowMatrix<T>>(rng, tk, dv);
  // Every logit is 0: query i weighs each of its n_i visible keys 1/n_i, ATTN is their mean,
  // LSE = log(n_i). A handful of roundings: 4 (T_k + 4) u.
  const long double tol = 4 * (tk + 4) * unit_roundoff<T>();
  for (const MaskSpec& mask : all_masks()) {
    const std::string mname = mask_name(mask);
    CAPTURE(mname);
    MatrixLD scores = MatrixLD::Zero(tq, tk), attn = MatrixLD::Zero(tq, dv);
    VectorLD lse(tq);
    for (Eigen::Index i = 0; i < tq; ++i) {
      Eigen::Index n = 0;
      for (Eigen::Index j = 0; j < tk; ++j) n += key_visible(i, j, tq, tk, mask) ? 1 : 0;
      for (Eigen::Index j = 0; j < tk; ++j)
        if (key_visible(i, j, tq, tk, mask)) {
          scores(i, j) = 1.0L / n;
          for (Eigen::Index c = 0; c < dv; ++c) attn(i, c) += static_cast<long double>(V(j, c)) / n;
        }
      lse(i) = std::log(static_cast<long double>(n));
    }
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      const ea::Options opt = make_options(mask, 0.5, kernel);
      const auto r = ea::attention_decomposed(Q, K, V, opt);
      EA_CHECK_NEAR(r.scores, scores, tol);
      EA_CHECK_NEAR(r.attn, attn, tol);
      EA_CHECK_NEAR(r.lse, lse, tol);
      EA_CHECK_NEAR(ea::attention(Q, K, V, opt), attn, tol);
      EA_CHECK_NEAR(ea::attention_scores(Q, K, opt), scores, tol);
    }
  }
}

TEST_CASE_TEMPLATE("masking: the alignment is ignored without the mask, and equal when T_q = T_k", T, float,
                   double) {
  Rng rng(26);
  for (const Sizes& s : kSizes) {
    CAPTURE(s.tq);
    CAPTURE(s.tk);
    const auto [Q, K, V] = random_inputs<T>(rng, {s.tq, s.tk, 8, 5});
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      for (const bool causal : {false, true}) {
        if (causal && s.tq != s.tk) continue;  // the two masks differ then
        CAPTURE(causal);
        const auto tl =
            ea::attention_decomposed(Q, K, V, make_options(MaskSpec{causal, false}, std::nullopt, kernel));
        const auto br =
            ea::attention_decomposed(Q, K, V, make_options(MaskSpec{causal, true}, std::nullopt, kernel));
        EA_CHECK_EQUAL(br.scores, tl.scores);
        EA_CHECK_EQUAL(br.attn, tl.attn);
        EA_CHECK_EQUAL(br.lse, tl.lse);
        EA_CHECK_EQUAL(ea::attention(Q, K, V, make_options(MaskSpec{causal, true}, std::nullopt, kernel)),
                       ea::attention(Q, K, V, make_options(MaskSpec{causal, false}, std::nullopt, kernel)));
      }
    }
  }
}

}  // namespace test_masking
