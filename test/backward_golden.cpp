// The backward golden cases of test/data/backward/ (PyTorch autograd, float64; see
// make_backward_golden.py there): dQ, dK, dV and dBIAS from attention_backward (one head, the
// Eigen front door), attention_heads_backward (both buffer layouts) and
// attention_varlen_backward, for every kernel, threads 1 and 2, in float and double. The
// forward's OUT and LSE are the golden ones rounded to the scalar type, as a user feeds the
// forward's results. Bounds, element by element: the long-double reference of the gradients
// and its first-order error model (support/reference_backward.hpp, through
// backward_golden.hpp's golden_reference), against which PyTorch's values are checked first
// (within the double bound); a result in T must then lie within tol_T + tol_double of the
// golden value (golden_bounds: the library's rounding plus the float64 golden's own).
#include <doctest/doctest.h>

#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "backward_crosscheck.hpp"
#include "backward_golden.hpp"
#include "common.hpp"

using namespace ea_test;

namespace {

template <class T>
constexpr T kSentinel = T(-777.25);

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

/// A row-major matrix (attention_backward's gradients) as a [1, 1, rows, cols] view.
template <class M>
mh::HeadsView<const typename M::Scalar> matrix_view(const M& m) {
  static_assert(M::IsRowMajor, "a row-major matrix");
  return mh::HeadsView<const typename M::Scalar>::bhtd(m.data(), 1, 1, m.rows(), m.cols());
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

}  // namespace

TEST_CASE("backward golden: the data directory holds all 28 expected cases") {
  const auto dir = backward_data_dir();
  CAPTURE(dir.string());
  REQUIRE(std::filesystem::is_directory(dir));
  for (const auto& name : expected_backward_files()) {
    CAPTURE(name);
    CHECK(std::filesystem::is_regular_file(dir / (name + ".txt")));
  }
  CHECK(expected_backward_files().size() == 28);
  CHECK(backward_golden_files().size() == expected_backward_files().size());
}

TEST_CASE("backward golden: every case parses and PyTorch agrees with the long-double reference") {
  // This validates the data and the reference against each other, and is what golden_bounds'
  // slack rests on: |golden - exact| <= tol_double, element by element.
  const auto files = backward_golden_files();
  REQUIRE(files.size() == expected_backward_files().size());
  int single = 0, heads = 0, varlen = 0, with_d_scores = 0, with_d_bias = 0, gqa = 0, softcap = 0;
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
    const Eigen::Index H = g.Q.n[1];
    if (g.varlen()) {
      for (size_t s = 0; s + 1 < g.cu_q.size(); ++s) {
        const Eigen::Index first = g.cu_q[s], count = g.cu_q[s + 1] - first;
        CAPTURE(s);
        for (Eigen::Index h = 0; h < H; ++h) {
          CAPTURE(h);
          const Budget bud = multihead_budget<double>(f, static_cast<Eigen::Index>(s) * H + h);
          EA_CHECK_NEAR(f.out.rows(0, h, first, count), g.out.rows(0, h, first, count), bud.attn);
          EA_CHECK_NEAR(f.lse.rows(0, h, first, count), g.lse.rows(0, h, first, count), bud.lse);
        }
      }
    } else {
      check_heads_near(
          array_view(f.out), g.out,
          [&](Eigen::Index b, Eigen::Index h) { return multihead_budget<double>(f, b * H + h).attn; },
          "reference OUT");
      check_heads_near(
          array_view(f.lse), g.lse,
          [&](Eigen::Index b, Eigen::Index h) { return multihead_budget<double>(f, b * H + h).lse; },
          "reference LSE");
    }
    // The gradients: PyTorch's float64, element by element within the reference's double bound.
    check_golden(array_view(g.dq), r.dq, r.dq_tol, g.name + ": golden DQ", worst);
    check_golden(array_view(g.dk), r.dk, r.dk_tol, g.name + ": golden DK", worst);
    check_golden(array_view(g.dv), r.dv, r.dv_tol, g.name + ": golden DV", worst);
    if (g.d_bias)
      check_golden(array_view(*g.d_bias), r.d_bias, r.d_bias_tol, g.name + ": golden D_BIAS", worst);

    single += g.mode == BackwardMode::Single;
    heads += g.mode == BackwardMode::Heads;
    varlen += g.varlen();
    with_d_scores += g.d_scores.has_value();
    with_d_bias += g.d_bias.has_value();
    gqa += g.K.n[1] != g.Q.n[1];
    softcap += g.spec.softcap > 0;
    for (const long double x : f.lse.v) dead_rows += x == -std::numeric_limits<long double>::infinity();
  }
  // The suite covers what it claims.
  CHECK(single == 14);
  CHECK(heads == 12);
  CHECK(varlen == 2);
  CHECK(with_d_scores == 4);
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
  Worst worst;
  int cases = 0;
  for (const BackwardGolden& g : load_all()) {
    if (g.mode != BackwardMode::Single) continue;
    CAPTURE(g.name);
    ++cases;
    const GoldenBounds bound = golden_bounds<T>(g);
    // Mixed storage orders, as a caller may hold them.
    const Col Q = matrix_of<Col>(g.Q), V = matrix_of<Col>(g.V), dO = matrix_of<Col>(g.d_out);
    const Row K = matrix_of<Row>(g.K), O = matrix_of<Row>(g.out);
    const Vec L = g.lse.slice(0, 0).col(0).cast<T>();
    auto check = [&](const ea::Gradients<T>& grad, const std::string& note) {
      check_golden(matrix_view(grad.dq), g.dq, bound.dq, g.name + ": dq" + note, worst);
      check_golden(matrix_view(grad.dk), g.dk, bound.dk, g.name + ": dk" + note, worst);
      check_golden(matrix_view(grad.dv), g.dv, bound.dv, g.name + ": dv" + note, worst);
    };
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      for (const int threads : {1, 2}) {
        CAPTURE(threads);
        const ea::Options opt = options_for(g.spec, kernel, threads);
        if (g.d_scores) {
          const Row dS = matrix_of<Row>(*g.d_scores);
          const auto grad = ea::attention_backward(Q, K, V, O, L, dO, dS, opt);
          check(grad, "");
          // The masked entries of d_scores (~1e8 in the file) have no effect: zeroed, the
          // same gradients, bit for bit.
          const Row dS0 = matrix_of<Row>(masked_zeroed(g));
          const auto again = ea::attention_backward(Q, K, V, O, L, dO, dS0, opt);
          EA_CHECK_EQUAL(again.dq, grad.dq);
          EA_CHECK_EQUAL(again.dk, grad.dk);
          EA_CHECK_EQUAL(again.dv, grad.dv);
        } else {
          check(ea::attention_backward(Q, K, V, O, L, dO, opt), "");
          if (threads == 1) {
            // A zero d_scores adds nothing.
            const Row zero = Row::Zero(Q.rows(), K.rows());
            check(ea::attention_backward(Q, K, V, O, L, dO, zero, opt), " (zero d_scores)");
          }
        }
      }
    }
  }
  CHECK(cases == 14);
  report<T>("attention_backward", worst);
}

TEST_CASE_TEMPLATE("backward golden: attention_heads_backward, both layouts, every kernel, threads 1 and 2",
                   T, float, double) {
  Worst worst;
  int cases = 0;
  for (const BackwardGolden& g : load_all()) {
    if (g.varlen()) continue;  // the single-head cases too, as [1, 1, T, d]
    CAPTURE(g.name);
    ++cases;
    const GoldenBounds bound = golden_bounds<T>(g);
    const Eigen::Index B = g.Q.n[0], H = g.Q.n[1], tq = g.Q.n[2], dk = g.Q.n[3];
    const Eigen::Index hkv = g.K.n[1], tk = g.K.n[2], dv = g.V.n[3];
    const MasksBuffer<T> masks(g.spec);
    std::optional<Array4> zeroed;
    if (g.d_scores) zeroed = masked_zeroed(g);
    for (const mh::Layout layout : {mh::Layout::BHTD, mh::Layout::BTHD}) {
      const std::string lname = layout_name(layout);
      CAPTURE(lname);
      const HeadsBuffer<T> Q(g.Q, layout), K(g.K, layout), V(g.V, layout), O(g.out, layout), L(g.lse, layout),
          dO(g.d_out, layout);
      std::optional<HeadsBuffer<T>> dS, dS0;
      if (g.d_scores) {
        dS.emplace(*g.d_scores, layout);
        dS0.emplace(*zeroed, layout);
      }
      for (const auto kernel : kernels_under_test()) {
        const std::string kname = ea::kernel_name(kernel);
        CAPTURE(kname);
        for (const int threads : {1, 2}) {
          CAPTURE(threads);
          const mh::Options opt = options_for(g.spec, kernel, threads);
          HeadsBuffer<T> dq(layout, B, H, tq, dk, kSentinel<T>), gk(layout, B, hkv, tk, dk, kSentinel<T>),
              gv(layout, B, hkv, tk, dv, kSentinel<T>);
          HeadsBuffer<T> db;
          if (g.d_bias) db = HeadsBuffer<T>(layout, g.d_bias->n[0], g.d_bias->n[1], tq, tk, kSentinel<T>);
          mh::attention_heads_backward(Q.cview(), K.cview(), V.cview(), O.cview(), L.cview(), dO.cview(),
                                       dq.view(), gk.view(), gv.view(), opt, masks.masks,
                                       dS ? dS->cview() : mh::HeadsView<const T>{},
                                       g.d_bias ? db.view() : mh::HeadsView<T>{});
          check_golden(dq.view(), g.dq, bound.dq, g.name + ": dq", worst);
          check_golden(gk.view(), g.dk, bound.dk, g.name + ": dk", worst);
          check_golden(gv.view(), g.dv, bound.dv, g.name + ": dv", worst);
          if (g.d_bias) check_golden(db.view(), *g.d_bias, bound.d_bias, g.name + ": d_bias", worst);

          if (dS) {
            // The masked entries of d_scores have no effect: zeroed, the same, bit for bit.
            HeadsBuffer<T> dq0(layout, B, H, tq, dk, kSentinel<T>), gk0(layout, B, hkv, tk, dk, kSentinel<T>),
                gv0(layout, B, hkv, tk, dv, kSentinel<T>);
            HeadsBuffer<T> db0;
            if (g.d_bias) db0 = HeadsBuffer<T>(layout, g.d_bias->n[0], g.d_bias->n[1], tq, tk, kSentinel<T>);
            mh::attention_heads_backward(Q.cview(), K.cview(), V.cview(), O.cview(), L.cview(), dO.cview(),
                                         dq0.view(), gk0.view(), gv0.view(), opt, masks.masks, dS0->cview(),
                                         g.d_bias ? db0.view() : mh::HeadsView<T>{});
            check_heads_equal(dq0.view(), dq.view(), "dq, masked d_scores zeroed");
            check_heads_equal(gk0.view(), gk.view(), "dk, masked d_scores zeroed");
            check_heads_equal(gv0.view(), gv.view(), "dv, masked d_scores zeroed");
            if (g.d_bias) check_heads_equal(db0.view(), db.view(), "d_bias, masked d_scores zeroed");
          }
          if (g.d_bias && threads == 1) {
            // The same call without d_bias: dq, dk and dv unchanged.
            HeadsBuffer<T> dq1(layout, B, H, tq, dk, kSentinel<T>), gk1(layout, B, hkv, tk, dk, kSentinel<T>),
                gv1(layout, B, hkv, tk, dv, kSentinel<T>);
            mh::attention_heads_backward(Q.cview(), K.cview(), V.cview(), O.cview(), L.cview(), dO.cview(),
                                         dq1.view(), gk1.view(), gv1.view(), opt, masks.masks,
                                         dS ? dS->cview() : mh::HeadsView<const T>{});
            check_golden(dq1.view(), g.dq, bound.dq, g.name + ": dq (no d_bias)", worst);
            check_golden(gk1.view(), g.dk, bound.dk, g.name + ": dk (no d_bias)", worst);
            check_golden(gv1.view(), g.dv, bound.dv, g.name + ": dv (no d_bias)", worst);
          }
        }
      }
    }
  }
  CHECK(cases == 26);
  report<T>("attention_heads_backward", worst);
}

TEST_CASE_TEMPLATE("backward golden: attention_varlen_backward, both layouts, every kernel, threads 1 and 2",
                   T, float, double) {
  Worst worst;
  int cases = 0;
  for (const BackwardGolden& g : load_all()) {
    if (!g.varlen()) continue;
    CAPTURE(g.name);
    ++cases;
    // Packed arrays: reference_varlen_backward puts each sequence's bounds at its own rows.
    const GoldenBounds bound = golden_bounds<T>(g);
    const Eigen::Index H = g.Q.n[1], tq = g.Q.n[2], dk = g.Q.n[3];
    const Eigen::Index hkv = g.K.n[1], tk = g.K.n[2], dv = g.V.n[3];
    const Eigen::Index batch = static_cast<Eigen::Index>(g.cu_q.size()) - 1;
    const MasksBuffer<T> masks(g.spec);  // ALiBi only
    for (const mh::Layout layout : {mh::Layout::BHTD, mh::Layout::BTHD}) {
      const std::string lname = layout_name(layout);
      CAPTURE(lname);
      const HeadsBuffer<T> Q(g.Q, layout), K(g.K, layout), V(g.V, layout), O(g.out, layout), L(g.lse, layout),
          dO(g.d_out, layout);
      for (const auto kernel : kernels_under_test()) {
        const std::string kname = ea::kernel_name(kernel);
        CAPTURE(kname);
        for (const int threads : {1, 2}) {
          CAPTURE(threads);
          const mh::Options opt = options_for(g.spec, kernel, threads);
          HeadsBuffer<T> dq(layout, 1, H, tq, dk, kSentinel<T>), gk(layout, 1, hkv, tk, dk, kSentinel<T>),
              gv(layout, 1, hkv, tk, dv, kSentinel<T>);
          mh::attention_varlen_backward(Q.cview(), K.cview(), V.cview(), O.cview(), L.cview(), dO.cview(),
                                        dq.view(), gk.view(), gv.view(), g.cu_q.data(), g.cu_k.data(), batch,
                                        opt, masks.masks);
          check_golden(dq.view(), g.dq, bound.dq, g.name + ": dq", worst);
          check_golden(gk.view(), g.dk, bound.dk, g.name + ": dk", worst);
          check_golden(gv.view(), g.dv, bound.dv, g.name + ": dv", worst);
        }
      }
    }
  }
  CHECK(cases == 2);
  report<T>("attention_varlen_backward", worst);
}
