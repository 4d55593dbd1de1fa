// SPDX-License-Identifier: MIT
// The backward golden cases of test/data/backward/ (PyTorch autograd, float64; see
// make_backward_golden.py there): dQ, dK, dV, dBIAS and dL/dsinks (with dL/dLSE given, where a
// case has them: BackwardTerms) from attention_backward (one head, the Eigen front door),
// attention_heads_backward_into (both buffer layouts) and attention_varlen_backward_into, for
// every kernel, threads 1 and 2, in float and double. The
// forward's OUT and LSE are the golden ones rounded to the scalar type, as a user feeds the
// forward's results. Bounds, element by element: the long-double reference of the gradients
// and its first-order error model (support/reference_backward.hpp, through
// backward_golden.hpp's golden_reference), against which PyTorch's values are checked first
// (within the double bound); a result in T must then lie within tol_T + tol_double of the
// golden value (golden_bounds: the library's rounding plus the float64 golden's own).
#include <doctest/doctest.h>

#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "backward_crosscheck.hpp"
#include "backward_golden.hpp"
#include "common.hpp"

namespace test_backward_golden {

using namespace ea_test;

namespace {

template <class T>
constexpr T kSentinel = T(-777.25);

/// The type of dL/dLSE and dL/dsinks (BackwardTerms) for inputs of T.
template <class T>
using Compute = mh::ComputeScalar<T>;

/// H values of dL/dsinks as a [1, 1, H, 1] view (the shape of BackwardGolden::d_sinks).
template <class S>
mh::HeadsView<const S> sinks_view(const std::vector<S>& v) {
  return mh::HeadsView<const S>::bhtd(v.data(), 1, 1, static_cast<Eigen::Index>(v.size()), 1);
}

// (std::string: doctest prints a const char* as a pointer.)
template <class T>
std::string scalar_name() {
  return std::is_same_v<T, float> ? "float" : "double";
}

std::vector<BackwardGolden> load_all() {
  const auto files = backward_golden_files();
  REQUIRE(files.size() == expected_backward_files().size());
  std::vector<BackwardGolden> cases;
  for (const auto& path : files) cases.push_back(load_backward_golden(path));
  return cases;
}

/// The worst comparison of a test case: the largest |actual - golden| / bound, and where.
struct Worst {
  long double fraction = 0;
  std::string at;
  long checks = 0;  ///< arrays compared
};

/// CHECKs every element of `actual` within its bound of `golden` (backward::check_within) and
/// records the worst.
template <class S>
void check_golden(const mh::HeadsView<S>& actual, const Array4& golden, const Array4& bound,
                  const std::string& what, Worst& worst) {
  const long double f = backward::check_within(actual, golden, bound, what);
  ++worst.checks;
  if (!(f <= worst.fraction)) {
    worst.fraction = f;
    worst.at = what;
  }
}

/// check_golden of dq, dk and dv against the case's DQ, DK and DV, as "<case>: dq<note>" etc.
template <class S>
void check_gradients(const mh::HeadsView<S>& dq, const mh::HeadsView<S>& dk, const mh::HeadsView<S>& dv,
                     const BackwardGolden& g, const GoldenBounds& bound, const std::string& note,
                     Worst& worst) {
  check_golden(dq, g.dq, bound.dq, g.name + ": dq" + note, worst);
  check_golden(dk, g.dk, bound.dk, g.name + ": dk" + note, worst);
  check_golden(dv, g.dv, bound.dv, g.name + ": dv" + note, worst);
}

/// A row-major matrix (attention_backward's gradients) as a [1, 1, rows, cols] view.
template <class M>
mh::HeadsView<const typename M::Scalar> matrix_view(const M& m) {
  static_assert(M::IsRowMajor, "a row-major matrix");
  return mh::HeadsView<const typename M::Scalar>::bhtd(m.data(), 1, 1, m.rows(), m.cols());
}

/// D_LSE with its entries on the rows whose LSE is -inf (which must have no effect) set to 0;
/// none when there are no such rows.
std::optional<Array4> dead_rows_zeroed(const BackwardGolden& g) {
  if (!g.d_lse) return std::nullopt;
  Array4 d = *g.d_lse;
  bool any = false;
  for (size_t e = 0; e < d.v.size(); ++e)
    if (g.lse.v[e] == -std::numeric_limits<long double>::infinity()) d.v[e] = 0, any = true;
  if (!any) return std::nullopt;
  return d;
}

/// D_SCORES with its masked entries (which must have no effect) set to 0.
Array4 masked_zeroed(const BackwardGolden& g) {
  Array4 d = *g.d_scores;
  for (Eigen::Index b = 0; b < d.n[0]; ++b)
    for (Eigen::Index h = 0; h < d.n[1]; ++h)
      for (Eigen::Index i = 0; i < d.n[2]; ++i)
        for (Eigen::Index j = 0; j < d.n[3]; ++j)
          if (!reference_logit(g.Q, g.K, g.spec, 1, b, h, i, j).visible) d(b, h, i, j) = 0;
  return d;
}

/// A matrix of T (any storage order) from slice (0, 0) of an array, rounded.
template <class M>
M matrix_of(const Array4& a) {
  return a.slice(0, 0).cast<typename M::Scalar>();
}

template <class T>
void report(const std::string& call, const Worst& w) {
  MESSAGE("backward golden | " << call << " | " << scalar_name<T>() << " | worst "
                               << static_cast<double>(w.fraction) << " of the bound, at " << w.at << "; "
                               << w.checks << " arrays compared element by element");
}

/// Calls check(g, worst) on every case that wanted(g) selects, its name CAPTUREd; then CHECKs
/// that there were `expected` of them and reports the worst comparison (for T).
template <class T, class Wanted, class Check>
void for_each_case(const std::string& call, int expected, Wanted wanted, Check check) {
  Worst worst;
  int cases = 0;
  for (const BackwardGolden& g : load_all()) {
    if (!wanted(g)) continue;
    CAPTURE(g.name);
    ++cases;
    check(g, worst);
  }
  CHECK(cases == expected);
  report<T>(call, worst);
}

/// The forward's inputs and results, dL/dOUT and dL/dLSE (when the case has it) of a case in T,
/// laid out in `layout`.
template <class T>
struct InputBuffers {
  HeadsBuffer<T> Q, K, V, O, L, dO;
  std::optional<HeadsBuffer<Compute<T>>> dL;
  InputBuffers(const BackwardGolden& g, mh::Layout layout)
      : Q(g.Q, layout),
        K(g.K, layout),
        V(g.V, layout),
        O(g.out, layout),
        L(g.lse, layout),
        dO(g.d_out, layout) {
    if (g.d_lse) dL.emplace(*g.d_lse, layout);
  }
};

/// The gradient outputs of a case in T, laid out in `layout` and filled with the sentinel;
/// d_bias (the bias's shape) only when wanted; d_sinks (H values) when the case has sinks.
template <class T>
struct GradientBuffers {
  HeadsBuffer<T> dq, dk, dv, d_bias;
  std::vector<Compute<T>> d_sinks;
  bool with_d_bias;

  GradientBuffers(const BackwardGolden& g, mh::Layout layout, bool want_d_bias)
      : dq(like(g.dq, layout)), dk(like(g.dk, layout)), dv(like(g.dv, layout)), with_d_bias(want_d_bias) {
    if (with_d_bias) d_bias = like(*g.d_bias, layout);
    if (g.d_sinks) d_sinks.assign(static_cast<size_t>(g.d_sinks->n[2]), Compute<T>(kSentinel<T>));
  }
  /// d_bias's view, or none (not wanted).
  mh::HeadsView<T> d_bias_view() { return with_d_bias ? d_bias.view() : mh::HeadsView<T>{}; }
  /// The call's BackwardTerms: dL/dLSE from `d_lse` (none: not given), and d_sinks when the
  /// case has sinks.
  mh::BackwardTerms<T> terms(const std::optional<HeadsBuffer<Compute<T>>>& d_lse) {
    mh::BackwardTerms<T> t;
    if (d_lse) t.d_lse = d_lse->cview();
    if (!d_sinks.empty()) t.d_sinks = d_sinks.data();
    return t;
  }
  /// check_gradients, d_bias against the case's D_BIAS when wanted, and d_sinks against its
  /// D_SINKS when it has sinks.
  void check(const BackwardGolden& g, const GoldenBounds& bound, const std::string& note,
             Worst& worst) const {
    check_gradients(dq.view(), dk.view(), dv.view(), g, bound, note, worst);
    if (with_d_bias) check_golden(d_bias.view(), *g.d_bias, bound.d_bias, g.name + ": d_bias" + note, worst);
    if (g.d_sinks)
      check_golden(sinks_view(d_sinks), *g.d_sinks, bound.d_sinks, g.name + ": d_sinks" + note, worst);
  }
  /// CHECK another run's outputs bitwise equal to these.
  void check_equal(const GradientBuffers& other, const std::string& what) const {
    check_heads_equal(dq.view(), other.dq.view(), "dq, " + what);
    check_heads_equal(dk.view(), other.dk.view(), "dk, " + what);
    check_heads_equal(dv.view(), other.dv.view(), "dv, " + what);
    if (with_d_bias) check_heads_equal(d_bias.view(), other.d_bias.view(), "d_bias, " + what);
    if (!d_sinks.empty())
      check_heads_equal(sinks_view(d_sinks), sinks_view(other.d_sinks), "d_sinks, " + what);
  }

 private:
  static HeadsBuffer<T> like(const Array4& a, mh::Layout layout) {
    return HeadsBuffer<T>(layout, a.n[0], a.n[1], a.n[2], a.n[3], kSentinel<T>);
  }
};

}  // namespace

TEST_CASE("backward golden: the data directory holds all 37 expected cases") {
  check_golden_dir(backward_data_dir(), expected_backward_files(), ".txt");
  CHECK(expected_backward_files().size() == 37);
  CHECK(backward_golden_files().size() == expected_backward_files().size());
}

TEST_CASE("backward golden: every case parses and PyTorch agrees with the long-double reference") {
  // This validates the data and the reference against each other, and is what golden_bounds'
  // slack rests on: |golden - exact| <= tol_double, element by element.
  const auto files = backward_golden_files();
  REQUIRE(files.size() == expected_backward_files().size());
  int single = 0, heads = 0, varlen = 0, with_d_scores = 0, with_d_bias = 0, gqa = 0, softcap = 0,
      chunked = 0, with_sinks = 0, with_d_lse = 0;
  long dead_rows = 0;
  Worst worst;
  for (const auto& path : files) {
    const std::string file = path.filename().string();
    CAPTURE(file);
    BackwardGolden g;
    REQUIRE_NOTHROW(g = load_backward_golden(path));
    const BackwardReference r = golden_reference<double>(g);
    const MultiHeadReference& f = r.forward;
    // The forward's OUT and LSE, within the double budget of the forward model.
    if (g.varlen()) {
      check_varlen_rows<double>(array_view(f.out), g.out, g.cu_q, f, false);
      check_varlen_rows<double>(array_view(f.lse), g.lse, g.cu_q, f, true);
    } else {
      check_heads_near(array_view(f.out), g.out, attn_budget<double>(f), "reference OUT");
      check_heads_near(array_view(f.lse), g.lse, lse_budget<double>(f), "reference LSE");
    }
    // The gradients: PyTorch's float64, element by element within the reference's double bound.
    check_golden(array_view(g.dq), r.dq, r.dq_tol, g.name + ": golden DQ", worst);
    check_golden(array_view(g.dk), r.dk, r.dk_tol, g.name + ": golden DK", worst);
    check_golden(array_view(g.dv), r.dv, r.dv_tol, g.name + ": golden DV", worst);
    if (g.d_bias)
      check_golden(array_view(*g.d_bias), r.d_bias, r.d_bias_tol, g.name + ": golden D_BIAS", worst);
    if (g.d_sinks)
      check_golden(array_view(*g.d_sinks), sinks_array(r.d_sinks), sinks_array(r.d_sinks_tol),
                   g.name + ": golden D_SINKS", worst);

    single += g.mode == BackwardMode::Single;
    heads += g.mode == BackwardMode::Heads;
    varlen += g.varlen();
    with_d_scores += g.d_scores.has_value();
    with_d_bias += g.d_bias.has_value();
    gqa += g.K.n[1] != g.Q.n[1];
    softcap += g.spec.softcap > 0;
    chunked += g.spec.chunk > 0;
    with_sinks += g.d_sinks.has_value();
    with_d_lse += g.d_lse.has_value();
    for (const long double x : f.lse.v) dead_rows += x == -std::numeric_limits<long double>::infinity();
  }
  // The suite covers what it claims.
  CHECK(single == 17);
  CHECK(heads == 16);
  CHECK(varlen == 4);
  CHECK(chunked == 4);
  CHECK(with_sinks == 3);
  CHECK(with_d_lse == 4);
  CHECK(with_d_scores == 6);
  CHECK(with_d_bias == 5);
  CHECK(gqa >= 6);
  CHECK(softcap == 4);
  CHECK(dead_rows > 0);
  report<double>("PyTorch vs long-double reference", worst);
}

TEST_CASE_TEMPLATE(
    "backward golden: attention_backward (one head, Eigen front door), every kernel, threads 1 and 2", T,
    float, double) {
  using Col = ColMatrix<T>;
  using Row = RowMatrix<T>;
  using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  auto single = [](const BackwardGolden& g) { return g.mode == BackwardMode::Single; };
  using CVec = Eigen::Matrix<Compute<T>, Eigen::Dynamic, 1>;
  for_each_case<T>("attention_backward", 17, single, [](const BackwardGolden& g, Worst& worst) {
    const GoldenBounds bound = golden_bounds<T>(g);
    const MasksBuffer<T> masks(g.spec);  // the sink, if any
    // Mixed storage orders, as a caller may hold them.
    const Col Q = matrix_of<Col>(g.Q), V = matrix_of<Col>(g.V), dO = matrix_of<Col>(g.d_out);
    const Row K = matrix_of<Row>(g.K), O = matrix_of<Row>(g.out);
    const Vec L = g.lse.slice(0, 0).col(0).cast<T>();
    const CVec dL = g.d_lse ? CVec(g.d_lse->slice(0, 0).col(0).cast<Compute<T>>()) : CVec();
    // dL/dLSE and dL/dsink (the one head's) through BackwardTerms, when the case has them.
    std::vector<Compute<T>> d_sink;
    auto terms = [&] {
      ea::BackwardTerms<T> t;
      if (g.d_lse) t.d_lse = ea::HeadsView<const Compute<T>>::single(dL);
      if (g.d_sinks) {
        d_sink.assign(1, Compute<T>(kSentinel<T>));
        t.d_sinks = d_sink.data();
      }
      return t;
    };
    auto check = [&](const ea::Gradients<T>& grad, const std::string& note) {
      check_gradients(matrix_view(grad.dq), matrix_view(grad.dk), matrix_view(grad.dv), g, bound, note,
                      worst);
      if (g.d_sinks)
        check_golden(sinks_view(d_sink), *g.d_sinks, bound.d_sinks, g.name + ": d_sinks" + note, worst);
    };
    for_each_kernel_and_threads(g.spec, [&](const ea::Options& opt, int threads) {
      if (g.d_scores) {
        const Row dS = matrix_of<Row>(*g.d_scores);
        const auto grad = ea::attention_backward(Q, K, V, O, L, dO, dS, opt, masks.masks, terms());
        check(grad, "");
        const std::vector<Compute<T>> first_d_sink = d_sink;
        // The masked entries of d_scores (~1e8 in the file) have no effect: zeroed, the
        // same gradients, bit for bit.
        const Row dS0 = matrix_of<Row>(masked_zeroed(g));
        const auto again = ea::attention_backward(Q, K, V, O, L, dO, dS0, opt, masks.masks, terms());
        EA_CHECK_EQUAL(again.dq, grad.dq);
        EA_CHECK_EQUAL(again.dk, grad.dk);
        EA_CHECK_EQUAL(again.dv, grad.dv);
        if (g.d_sinks)
          check_heads_equal(sinks_view(d_sink), sinks_view(first_d_sink), "d_sinks, d_scores zeroed");
      } else {
        check(ea::attention_backward(Q, K, V, O, L, dO, opt, masks.masks, terms()), "");
        if (threads == 1) {
          // A zero d_scores adds nothing.
          const Row zero = Row::Zero(Q.rows(), K.rows());
          check(ea::attention_backward(Q, K, V, O, L, dO, zero, opt, masks.masks, terms()),
                " (zero d_scores)");
        }
      }
    });
  });
}

TEST_CASE_TEMPLATE(
    "backward golden: attention_heads_backward_into, both layouts, every kernel, threads 1 and 2", T, float,
    double) {
  auto heads = [](const BackwardGolden& g) { return !g.varlen(); };  // single-head as [1, 1, T, d]
  for_each_case<T>("attention_heads_backward_into", 33, heads, [](const BackwardGolden& g, Worst& worst) {
    const GoldenBounds bound = golden_bounds<T>(g);
    const MasksBuffer<T> masks(g.spec);
    std::optional<Array4> zeroed;
    if (g.d_scores) zeroed = masked_zeroed(g);
    const std::optional<Array4> d_lse_zeroed = dead_rows_zeroed(g);
    for_each_layout([&](mh::Layout layout) {
      const InputBuffers<T> in(g, layout);
      std::optional<HeadsBuffer<T>> dS, dS0;
      if (g.d_scores) {
        dS.emplace(*g.d_scores, layout);
        dS0.emplace(*zeroed, layout);
      }
      std::optional<HeadsBuffer<Compute<T>>> dL0;  // D_LSE, its entries on rows with LSE = -inf zeroed
      if (d_lse_zeroed) dL0.emplace(*d_lse_zeroed, layout);
      for_each_kernel_and_threads(g.spec, [&](const mh::Options& opt, int threads) {
        auto run = [&](GradientBuffers<T>& out, const std::optional<HeadsBuffer<T>>& d_scores,
                       const std::optional<HeadsBuffer<Compute<T>>>& d_lse) {
          mh::attention_heads_backward_into(
              in.Q.cview(), in.K.cview(), in.V.cview(), in.O.cview(), in.L.cview(), in.dO.cview(),
              d_scores ? d_scores->cview() : mh::HeadsView<const T>{}, out.dq.view(), out.dk.view(),
              out.dv.view(), out.d_bias_view(), opt, masks.masks, out.terms(d_lse));
        };
        GradientBuffers<T> out(g, layout, g.d_bias.has_value());
        run(out, dS, in.dL);
        out.check(g, bound, "", worst);

        if (dS || dL0) {
          // The masked entries of d_scores and the entries of d_lse on rows that see no key (and
          // no sink) have no effect: zeroed, the same, bit for bit.
          GradientBuffers<T> out0(g, layout, g.d_bias.has_value());
          run(out0, dS ? dS0 : dS, dL0 ? dL0 : in.dL);
          out0.check_equal(out, "masked d_scores and dead rows' d_lse zeroed");
        }
        if (g.d_bias && threads == 1) {
          // The same call without d_bias: dq, dk and dv unchanged.
          GradientBuffers<T> out1(g, layout, false);
          run(out1, dS, in.dL);
          out1.check(g, bound, " (no d_bias)", worst);
        }
      });
    });
  });
}

TEST_CASE_TEMPLATE(
    "backward golden: attention_varlen_backward_into, both layouts, every kernel, threads 1 and 2", T, float,
    double) {
  auto varlen = [](const BackwardGolden& g) { return g.varlen(); };
  for_each_case<T>("attention_varlen_backward_into", 4, varlen, [](const BackwardGolden& g, Worst& worst) {
    // Packed arrays: reference_varlen_backward puts each sequence's bounds at its own rows.
    const GoldenBounds bound = golden_bounds<T>(g);
    const Eigen::Index batch = static_cast<Eigen::Index>(g.cu_q.size()) - 1;
    const MasksBuffer<T> masks(g.spec);  // ALiBi and sinks only
    for_each_layout([&](mh::Layout layout) {
      const InputBuffers<T> in(g, layout);
      for_each_kernel_and_threads(g.spec, [&](const mh::Options& opt, int) {
        GradientBuffers<T> out(g, layout, false);
        mh::attention_varlen_backward_into(in.Q.cview(), in.K.cview(), in.V.cview(), in.O.cview(),
                                           in.L.cview(), in.dO.cview(), g.cu_q.data(), g.cu_k.data(), batch,
                                           out.dq.view(), out.dk.view(), out.dv.view(), opt, masks.masks,
                                           out.terms(in.dL));
        out.check(g, bound, "", worst);
      });
    });
  });
}

}  // namespace test_backward_golden
