// SPDX-License-Identifier: MIT
// Numerical robustness on adversarial inputs: for float and double and every kernel, the worst
// error against the long-double reference (test/support/reference.hpp), held to the error model
// of test/support/tolerance.hpp, and the numbers printed (MESSAGE lines starting with
// "robustness |") so that the table in docs/guarantees.md can be copied from them.
//
// Metrics, per element, each in the units of its error model (tolerance.hpp): SCORES the
// relative error |a - b| / max(|b|, tiny) (tiny: four times the smallest normal T, where exp
// underflows); LSE the absolute error |a - b| (its bound: absolute plus a few ulps of |LSE|);
// ATTN |a - b| / max_j |V(j, c)|, the model's own statement (ATTN(i, c) = sum_j p_j V(j, c) is
// off by at most (weight error + summation error) * max_j |V(j, c)|), which stays meaningful
// for V of any magnitude. "used" is the largest ratio of an error to its bound.
//
// Also pinned down here, as documented in docs/guarantees.md:
// - logits that overflow the scalar type (q.k beyond its largest finite value);
// - the fused call's accumulator, which can overflow when T_k * max|V| exceeds that value;
// - weights below the smallest normal number, which the tiled kernels may return as a
//   subnormal rather than 0 (Eigen's vectorised exp clamps its argument); a logit of -inf
//   (from the data or a bias) weighs exactly 0.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "common.hpp"
#include "random.hpp"

namespace test_robustness {

using namespace ea_test;

namespace {

using Index = Eigen::Index;

/// The worst errors of one (case, type) over kernels and forms.
struct Worst {
  long double scores = 0, attn = 0, lse = 0;
  long double used = 0;  // largest error / bound
  bool has_scores = false;
  void merge(const Worst& w) {
    scores = std::max(scores, w.scores);
    attn = std::max(attn, w.attn);
    lse = std::max(lse, w.lse);
    used = std::max(used, w.used);
    has_scores = has_scores || w.has_scores;
  }
};

/// |a - b| / scale; equal values (also both -inf) give 0, any other non-finite pair inf.
long double error_metric(long double a, long double b, long double scale) {
  if (a == b) return 0;
  if (!std::isfinite(a) || !std::isfinite(b)) return std::numeric_limits<long double>::infinity();
  return std::fabs(a - b) / scale;
}

template <class T>
std::string type_name() {
  return sizeof(T) == 4 ? "float" : "double";
}

std::string sci(long double x) {
  std::ostringstream s;
  s << std::scientific << std::setprecision(1) << static_cast<double>(x);
  return s.str();
}

std::string percent(long double x) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(x < 0.1L ? 2 : 1) << static_cast<double>(100 * x) << "%";
  return s.str();
}

/// One adversarial problem.
template <class T>
struct Case {
  std::string name;
  RowMatrix<T> Q, K, V;
  ea::Options opt;
  bool fused_only = false;
};

/// Measures and checks one output against the reference; returns the worst metric and updates
/// `used`. `bound` is the per-element bound of the metric.
template <class A, class B>
long double measure(const char* what, const A& actual, const B& expected,
                    const std::function<long double(Index, Index)>& metric,
                    const std::function<long double(Index, Index)>& bound, long double& used) {
  REQUIRE(actual.rows() == expected.rows());
  REQUIRE(actual.cols() == expected.cols());
  long double worst = 0;
  Index bad = 0, bad_i = -1, bad_c = -1;
  long double bad_excess = 0;
  for (Index i = 0; i < actual.rows(); ++i) {
    for (Index c = 0; c < actual.cols(); ++c) {
      const long double m = metric(i, c), b = bound(i, c);
      worst = std::max(worst, m);
      used = std::max(used, m / b);
      if (!(m <= b)) {
        if (bad++ == 0 || m / b > bad_excess) {
          bad_i = i;
          bad_c = c;
          bad_excess = m / b;
        }
      }
    }
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " element(s) beyond the bound; worst (" << bad_i << ", "
                               << bad_c << ") at " << static_cast<double>(bad_excess) << "x the bound");
  return worst;
}

/// Runs every kernel on `cs`, checks it against the reference with the model's bounds, prints
/// a line per kernel and returns the worst over kernels and forms.
template <class T>
Worst run_case(const Case<T>& cs) {
  const auto ref = reference_for(cs.Q, cs.K, cs.V, cs.opt);
  const Index dk = cs.Q.cols(), tk = cs.K.rows(), tq = cs.Q.rows(), dv = cs.V.cols();
  const Budget b = budget_for<T>(ref, dk);
  // ATTN, relative to each column's largest |V|: the model with max|V| = 1 (its bound is
  // homogeneous in V), plus the standard underflow term of (T_k + 2) roundings of a subnormal
  // result, each off by at most the smallest subnormal.
  const long double attn_unit = attention_budget<T>(ref.logit_magnitude, 1, dk, tk).attn;
  const long double eta = (tk + 2) * static_cast<long double>(std::numeric_limits<T>::denorm_min());
  std::vector<long double> vmax(static_cast<size_t>(dv), 0);
  for (Index c = 0; c < dv; ++c)
    for (Index j = 0; j < tk; ++j)
      vmax[size_t(c)] =
          std::max<long double>(vmax[size_t(c)], std::fabs(static_cast<long double>(cs.V(j, c))));
  const auto attn_metric = [&](const RowMatrix<T>& a) {
    return [&a, &ref, &vmax](Index i, Index c) -> long double {
      const long double x = a(i, c), y = ref.attn(i, c);
      if (x == y) return 0;
      if (!std::isfinite(x)) return std::numeric_limits<long double>::infinity();
      return std::fabs(x - y) / std::max(vmax[size_t(c)], std::numeric_limits<long double>::min());
    };
  };
  const auto attn_bound = [&](Index, Index c) {
    return attn_unit + eta / std::max(vmax[size_t(c)], std::numeric_limits<long double>::min());
  };

  const auto lse_bound = [&](Index i, Index) {
    return std::isfinite(ref.lse(i)) ? b.lse.at(ref.lse(i)) : b.lse.abs;
  };
  const auto weight_scale = [&](Index i, Index j) {
    return std::max(std::fabs(ref.scores(i, j)), tiny_weight<T>());
  };

  Worst all;
  for (const auto kernel : ea::available_kernels()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt = cs.opt;
    opt.kernel = kernel;
    Worst w;
    // The fused call, into storage, with LSE.
    RowMatrix<T> out(tq, dv);
    ea::Vector<T> lse(tq);
    ea::attention_into(cs.Q, cs.K, cs.V, out, lse, opt);
    w.attn = measure("fused ATTN", out, ref.attn, attn_metric(out), attn_bound, w.used);
    w.lse = measure(
        "fused LSE", lse, ref.lse, [&](Index i, Index) { return error_metric(lse(i), ref.lse(i), 1); },
        lse_bound, w.used);
    if (!cs.fused_only) {
      const auto r = ea::attention_decomposed(cs.Q, cs.K, cs.V, opt);
      w.has_scores = true;
      w.scores = measure(
          "decomposed SCORES", r.scores, ref.scores,
          [&](Index i, Index j) {
            return error_metric(r.scores(i, j), ref.scores(i, j), weight_scale(i, j));
          },
          [&](Index i, Index j) { return b.scores.at(ref.scores(i, j)) / weight_scale(i, j); }, w.used);
      w.attn = std::max(
          w.attn, measure("decomposed ATTN", r.attn, ref.attn, attn_metric(r.attn), attn_bound, w.used));
      w.lse = std::max(w.lse, measure(
                                  "decomposed LSE", r.lse, ref.lse,
                                  [&](Index i, Index) { return error_metric(r.lse(i), ref.lse(i), 1); },
                                  lse_bound, w.used));
    }
    MESSAGE("robustness | " << cs.name << " | " << type_name<T>() << " | " << kname << " | SCORES "
                            << (w.has_scores ? sci(w.scores) : std::string("-")) << " | ATTN " << sci(w.attn)
                            << " | LSE " << sci(w.lse) << " | used " << percent(w.used));
    all.merge(w);
  }
  MESSAGE("robustness | " << cs.name << " | " << type_name<T>() << " | worst"
                          << " | SCORES " << (all.has_scores ? sci(all.scores) : std::string("-"))
                          << " | ATTN " << sci(all.attn) << " | LSE " << sci(all.lse) << " | used "
                          << percent(all.used) << " | logit magnitude " << sci(ref.logit_magnitude));
  return all;
}

template <class T>
RowMatrix<T> normal(Rng& rng, Index rows, Index cols, double magnitude = 1.0) {
  return random_matrix<RowMatrix<T>>(rng, rows, cols, magnitude);
}

}  // namespace

TEST_CASE_TEMPLATE("robustness: worst errors on adversarial inputs, every kernel", T, float, double) {
  Rng rng(sizeof(T) == 4 ? 401 : 402);
  std::vector<Case<T>> cases;

  {
    // Logits of +-1e4 (alternating by row) that differ by O(1) within a row, so that every row
    // has many weights that matter: exp(1e4) would overflow, and the logits' own rounding
    // (~(d_k + 4) u 1e4, the softmax's condition number) dominates the error.
    Case<T> c{"|logit| ~ 1e4, O(1) apart",
              normal<T>(rng, 33, 8),
              normal<T>(rng, 129, 8),
              normal<T>(rng, 129, 7),
              {}};
    for (Index i = 0; i < c.Q.rows(); ++i) c.Q(i, 0) = static_cast<T>((i % 2 ? -1e4 : 1e4) * std::sqrt(8.0));
    for (Index j = 0; j < c.K.rows(); ++j) c.K(j, 0) = 1;
    cases.push_back(c);
  }
  // Logits of order 1e4 with gaps of order 1e3 in a row (Q, K ~ 100 N(0, 1)): one-hot rows.
  cases.push_back({"|logit| ~ 1e4, far apart",
                   normal<T>(rng, 33, 16, 100),
                   normal<T>(rng, 129, 16, 100),
                   normal<T>(rng, 129, 7),
                   {}});
  // Logits of order 1e30 (Q, K ~ 1e15): one-hot rows, LSE = the top logit.
  cases.push_back({"|logit| ~ 1e30",
                   normal<T>(rng, 40, 8, 1e15),
                   normal<T>(rng, 70, 8, 1e15),
                   normal<T>(rng, 70, 3),
                   {}});
  {
    // Every key of a row has the same logit (K's rows all equal): uniform weights 1/1000.
    Case<T> c{"all-equal logits (T_k = 1000)",
              normal<T>(rng, 17, 8, 2),
              RowMatrix<T>(1000, 8),
              normal<T>(rng, 1000, 5),
              {}};
    const RowMatrix<T> k = normal<T>(rng, 1, 8, 2);
    for (Index j = 0; j < c.K.rows(); ++j) c.K.row(j) = k;
    cases.push_back(c);
  }
  {
    // The same with every logit exactly 0 and causal: row i averages V's first i + 1 rows.
    Case<T> c{"all-zero logits, causal",
              RowMatrix<T>::Zero(70, 4),
              normal<T>(rng, 70, 4),
              normal<T>(rng, 70, 6),
              {}};
    c.opt.causal = true;
    cases.push_back(c);
  }
  // d_k = d_v = 1, logits up to ~30.
  cases.push_back({"d = 1", normal<T>(rng, 64, 1, 3), normal<T>(rng, 300, 1, 3), normal<T>(rng, 300, 1), {}});
  {
    // A long key sequence: 64 queries against 65536 keys, fused only (bottom-right causal: the
    // last query sees every key).
    Case<T> c{
        "T_k = 65536 (fused)", normal<T>(rng, 64, 4), normal<T>(rng, 65536, 4), normal<T>(rng, 65536, 4), {}};
    c.opt.causal = true;
    c.opt.alignment = ea::CausalAlignment::BottomRight;
    c.opt.threads = 2;
    c.fused_only = true;
    cases.push_back(c);
  }
  {
    // Subnormal Q and K: every product underflows, the logits are 0 (the reference's are
    // ~1e-80 or less: the same weights). V's column 1 is subnormal too.
    const double tiny = sizeof(T) == 4 ? 1e-41 : 1e-311;
    Case<T> c{"subnormal Q, K and V column",
              normal<T>(rng, 20, 8, tiny),
              normal<T>(rng, 50, 8, tiny),
              normal<T>(rng, 50, 3),
              {}};
    for (Index j = 0; j < c.V.rows(); ++j) c.V(j, 1) = static_cast<T>(tiny * rng.normal());
    CHECK(std::fpclassify(c.Q(0, 0)) == FP_SUBNORMAL);
    cases.push_back(c);
  }
  {
    // V mixing 1e30 and 1e-30 in one column, a column of 1e-30 and one of 1e30: each column's
    // error is relative to its own largest value.
    Case<T> c{"mixed huge/tiny V (1e30, 1e-30)",
              normal<T>(rng, 33, 8),
              normal<T>(rng, 200, 8),
              RowMatrix<T>(200, 3),
              {}};
    for (Index j = 0; j < 200; ++j) {
      c.V(j, 0) = static_cast<T>((j % 2 ? 1e30 : 1e-30) * rng.normal());
      c.V(j, 1) = static_cast<T>(1e-30 * rng.normal());
      c.V(j, 2) = static_cast<T>(1e30 * rng.normal());
    }
    cases.push_back(c);
  }
  {
    // V as large as the fused accumulator allows: |V| <= max(T) / (2 T_k), so that the
    // unnormalised sum of up to T_k weights <= 1 times V stays finite.
    const Index tk = 64;
    Case<T> c{"|V| up to max/(2 T_k)", normal<T>(rng, 16, 4), normal<T>(rng, tk, 4), RowMatrix<T>(tk, 2), {}};
    const long double big = static_cast<long double>(std::numeric_limits<T>::max()) / (2 * tk);
    for (Index j = 0; j < tk; ++j)
      for (Index col = 0; col < 2; ++col) c.V(j, col) = static_cast<T>(big * rng.uniform());
    cases.push_back(c);
  }

  Worst total;
  for (const auto& cs : cases) {
    CAPTURE(cs.name);
    total.merge(run_case(cs));
  }
  MESSAGE("robustness | all cases | " << type_name<T>() << " | worst | SCORES " << sci(total.scores)
                                      << " | ATTN " << sci(total.attn) << " | LSE " << sci(total.lse)
                                      << " | used " << percent(total.used));
}

TEST_CASE_TEMPLATE("robustness: a q.k that overflows the scalar type gives +-inf logits, handled row by row",
                   T, float, double) {
  // h = sqrt(max(T)): h * 2h = 2 max(T) overflows T (float: inputs ~1.8e19; double ~1.3e154),
  // while the long-double reference computes it. The dot product is formed in T before the
  // scale is applied (a smaller scale does not help). What the library does, on every kernel:
  // - a row with a +inf (or NaN) logit among the keys it sees is NaN: SCORES, ATTN and LSE;
  // - a -inf logit weighs exactly nothing (its true weight exp(-2 max(T) - m) underflows
  //   anyway): the row is correct within the model;
  // - a row whose every visible logit is -inf is treated as seeing no key: zero SCORES and
  //   ATTN, LSE = -inf (the reference, in long double, would still find a softmax there);
  // - rows whose logits stay finite are unaffected.
  const T h = std::sqrt(std::numeric_limits<T>::max());
  const long double u = unit_roundoff<T>();
  // Keys 0 and 4 are huge along axis 0 (and equal there); the rest are ordinary and 0 there.
  RowMatrix<T> K(6, 2), V(6, 2);
  K << 2 * h, 0, 0, 1, 0, -1, 0, T(0.5), 2 * h, 0, 0, 2;
  V << 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12;
  // Row 0: +inf logits (keys 0, 4). Row 1: -inf logits there, finite elsewhere. Row 2: all
  // finite and small. Row 3: logits of max(T) / 2 (finite) for keys 0 and 4: weights 1/2, 1/2.
  RowMatrix<T> Q(4, 2);
  Q << h, 1, -h, 1, 0, 1, h / 4, 0;
  const auto ref = reference_attention(Q, K, V, MaskSpec{});
  for (const auto kernel : ea::available_kernels()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt;
    opt.kernel = kernel;
    const auto r = ea::attention_decomposed(Q, K, V, opt);
    RowMatrix<T> out(4, 2);
    ea::Vector<T> lse(4);
    ea::attention_into(Q, K, V, out, lse, opt);
    // Row 0: NaN throughout.
    for (Index j = 0; j < 6; ++j) CHECK(std::isnan(r.scores(0, j)));
    for (Index c = 0; c < 2; ++c) {
      CHECK(std::isnan(r.attn(0, c)));
      CHECK(std::isnan(out(0, c)));
    }
    CHECK(std::isnan(r.lse(0)));
    CHECK(std::isnan(lse(0)));
    // Rows 1 and 2: the reference, with the bounds of their finite logits (|logit| <= 2 / sqrt 2).
    const Budget b = attention_budget<T>(2, 12, 2, 6);
    for (const Index i : {Index{1}, Index{2}}) {
      CAPTURE(i);
      for (Index j = 0; j < 6; ++j) CHECK(near(r.scores(i, j), ref.scores(i, j), b.scores));
      for (Index c = 0; c < 2; ++c) {
        CHECK(near(r.attn(i, c), ref.attn(i, c), b.attn));
        CHECK(near(out(i, c), ref.attn(i, c), b.attn));
      }
      CHECK(near(r.lse(i), ref.lse(i), b.lse));
      CHECK(near(lse(i), ref.lse(i), b.lse));
    }
    // Row 1's overflowed keys (-inf logits): weight exactly 0 on every kernel.
    for (const Index j : {Index{0}, Index{4}}) {
      CAPTURE(j);
      CHECK(r.scores(1, j) == 0);
    }
    // Row 3: huge but finite logits, exactly tied: 1/2 and 1/2, LSE = the logit + log 2.
    for (Index j = 0; j < 6; ++j) CHECK(near(r.scores(3, j), ref.scores(3, j), 4 * u));
    for (Index c = 0; c < 2; ++c) {
      CHECK(near(r.attn(3, c), ref.attn(3, c), 4 * u));
      CHECK(near(out(3, c), ref.attn(3, c), 4 * u));
    }
    CHECK(near(r.lse(3), ref.lse(3), 8 * u));
    CHECK(near(lse(3), ref.lse(3), 8 * u));
  }

  // A NaN logit from +inf and -inf terms of one dot product, and a row of only -inf logits.
  RowMatrix<T> K2(2, 2), V2(2, 1), Q2(2, 2);
  K2 << 2 * h, -2 * h, 2 * h, 0;
  V2 << 1, 2;
  Q2 << h, h,  // key 0: 2max - 2max -> inf + (-inf) = NaN; key 1: +inf
      -h, 0;   // both keys -inf
  for (const auto kernel : ea::available_kernels()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt;
    opt.kernel = kernel;
    const auto r = ea::attention_decomposed(Q2, K2, V2, opt);
    const auto fused = ea::attention(Q2, K2, V2, opt);
    CHECK(std::isnan(r.scores(0, 0)));
    CHECK(std::isnan(r.attn(0, 0)));
    CHECK(std::isnan(fused(0, 0)));
    CHECK(std::isnan(r.lse(0)));
    // Row 1: all -inf, "sees no key": zeros and -inf, never NaN.
    CHECK(r.scores(1, 0) == 0);
    CHECK(r.scores(1, 1) == 0);
    CHECK(r.attn(1, 0) == 0);
    CHECK(fused(1, 0) == 0);
    CHECK(r.lse(1) == -std::numeric_limits<T>::infinity());
  }
}

TEST_CASE_TEMPLATE("robustness: weights far below the row maximum are 0 or a subnormal, never more", T, float,
                   double) {
  // A key whose logit is below the row maximum by more than the exponent range has a true
  // weight that underflows. The tiled kernels' vectorised exp clamps its argument, so such a
  // weight may come out as a subnormal (float ~2e-39, double ~5e-309) instead of 0: always
  // below the smallest normal number, and within the error bounds. Masked keys are exact zeros
  // whatever their logits (checked elsewhere).
  RowMatrix<T> Q(1, 1), K(3, 1), V(3, 1);
  Q << 1;
  K << 0, sizeof(T) == 4 ? 200 : 1600, -(sizeof(T) == 4 ? 300.0f : 3000.0);  // gaps far beyond exp's range
  V << 1, 1, 1;
  ea::Options opt;
  opt.scale = 1.0;
  T worst = 0;
  for (const auto kernel : ea::available_kernels()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    opt.kernel = kernel;
    const auto r = ea::attention_decomposed(Q, K, V, opt);
    CHECK(r.scores(0, 1) == 1);
    for (const Index j : {Index{0}, Index{2}}) {
      CHECK(r.scores(0, j) >= 0);
      CHECK(r.scores(0, j) < std::numeric_limits<T>::min());
      worst = std::max(worst, r.scores(0, j));
    }
    CHECK(r.attn(0, 0) == 1);
  }
  MESSAGE("robustness | underflowing weight | " << type_name<T>() << " | largest returned "
                                                << static_cast<double>(worst));
}

TEST_CASE_TEMPLATE("robustness: the fused ATTN overflows when T_k * max|V| exceeds the scalar type's range",
                   T, float, double) {
  // The fused call accumulates sum_j exp(s_j - m) V_j, the weights not yet divided by their sum
  // (each <= 1, the sum <= T_k): with |V| near max(T) that accumulator can overflow where the
  // true ATTN, and the decomposed call's (which normalises first), are finite. Documented as a
  // limit: the fused call is exact for T_k * max|V| <= max(T) / 2. Checked here: the decomposed
  // call is right; the fused call's affected entries are non-finite (never a wrong finite
  // number), its other columns and rows right. The values found are printed.
  const Index tk = 8;
  RowMatrix<T> Q = RowMatrix<T>::Zero(2, 2), K = RowMatrix<T>::Zero(tk, 2), V(tk, 2);
  Q(1, 0) = 1;
  const T big = static_cast<T>(0.6L * static_cast<long double>(std::numeric_limits<T>::max()));
  for (Index j = 0; j < tk; ++j) {
    V(j, 0) = big;  // the true ATTN of row 0 is `big`: finite
    V(j, 1) = static_cast<T>(j + 1);
  }
  const auto ref = reference_attention(Q, K, V, MaskSpec{}, 1.0L);
  const Budget b = attention_budget<T>(0, 1, 2, tk);
  ea::Options opt;
  opt.scale = 1.0;
  for (const auto kernel : ea::available_kernels()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    opt.kernel = kernel;
    const auto r = ea::attention_decomposed(Q, K, V, opt);
    const auto fused = ea::attention(Q, K, V, opt);
    for (Index i = 0; i < 2; ++i) {
      CAPTURE(i);
      CHECK(std::fabs(r.attn(i, 0) - ref.attn(i, 0)) <= b.attn * big);
      CHECK(near(r.attn(i, 1), ref.attn(i, 1), b.attn));
      CHECK(near(fused(i, 1), ref.attn(i, 1), b.attn));
      const bool right = std::fabs(fused(i, 0) - ref.attn(i, 0)) <= b.attn * big;
      CHECK((right || !std::isfinite(fused(i, 0))));
    }
    MESSAGE("robustness | fused accumulator overflow | "
            << type_name<T>() << " | " << kname << " | true ATTN " << static_cast<double>(ref.attn(0, 0))
            << " | decomposed " << static_cast<double>(r.attn(0, 0)) << " | fused "
            << static_cast<double>(fused(0, 0)));
  }
}

}  // namespace test_robustness
