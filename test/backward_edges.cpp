// SPDX-License-Identifier: MIT
// The backward pass at its edges and through its Eigen front doors: storage orders, maps and
// blocks, resized and pre-sized outputs, T = 1, empty sizes; rows that see no key and keys no
// row sees; non-finite inputs reaching only what depends on them; d_scores at masked positions;
// and the errors (std::invalid_argument naming the shapes, nothing written).
#include <doctest/doctest.h>

#include <stdexcept>

#include "backward_crosscheck.hpp"

namespace test_backward_edges {

using namespace ea_test;
using namespace ea_test::backward;

namespace {

template <class T>
struct Case {
  RowMatrix<T> Q, K, V, out, dO, dS;
  ea::Vector<T> lse;
  ea::Options opt;
};

template <class T>
Case<T> make_case(Rng& rng, Eigen::Index tq, Eigen::Index tk, Eigen::Index dk, Eigen::Index dv,
                  ea::Options opt) {
  Case<T> c;
  c.Q = random_matrix<RowMatrix<T>>(rng, tq, dk);
  c.K = random_matrix<RowMatrix<T>>(rng, tk, dk);
  c.V = random_matrix<RowMatrix<T>>(rng, tk, dv);
  c.dO = random_matrix<RowMatrix<T>>(rng, tq, dv);
  c.dS = random_matrix<RowMatrix<T>>(rng, tq, tk);
  c.opt = opt;
  ea::attention_into(c.Q, c.K, c.V, c.out, c.lse, opt);
  return c;
}

template <class A, class B>
bool same(const A& a, const B& b) {  // element for element, NaN equal to NaN
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (Eigen::Index i = 0; i < a.rows(); ++i)
    for (Eigen::Index j = 0; j < a.cols(); ++j)
      if (!(a(i, j) == b(i, j) || (std::isnan(a(i, j)) && std::isnan(b(i, j))))) return false;
  return true;
}

}  // namespace

TEST_CASE_TEMPLATE("backward edges: storage orders, maps, blocks and _into forms give the same bits", T,
                   float, double) {
  Rng rng(21);
  ea::Options opt;
  opt.causal = true;
  const Case<T> c = make_case<T>(rng, 133, 129, 11, 6, opt);
  const auto base = ea::attention_backward(c.Q, c.K, c.V, c.out, c.lse, c.dO, c.dS, opt);
  // Column-major copies, a map, blocks of larger matrices, an expression (evaluated once).
  const ColMatrix<T> Qc = c.Q, Kc = c.K, dOc = c.dO;
  RowMatrix<T> big_v = RowMatrix<T>::Zero(c.V.rows() + 3, c.V.cols() + 2);
  big_v.block(2, 1, c.V.rows(), c.V.cols()) = c.V;
  const Eigen::Map<const RowMatrix<T>> out_map(c.out.data(), c.out.rows(), c.out.cols());
  const auto g = ea::attention_backward(Qc, Kc, big_v.block(2, 1, c.V.rows(), c.V.cols()), out_map, c.lse,
                                        dOc * T(1), c.dS, opt);
  CHECK(same(g.dq, base.dq));
  CHECK(same(g.dk, base.dk));
  CHECK(same(g.dv, base.dv));
  // _into: a column-major Matrix (resized), a block of a larger matrix, a Map.
  ColMatrix<T> dq;
  RowMatrix<T> dk_big = RowMatrix<T>::Constant(c.K.rows() + 2, c.K.cols() + 4, T(7));
  std::vector<T> dv_storage(static_cast<size_t>(c.V.size()));
  Eigen::Map<RowMatrix<T>> dv(dv_storage.data(), c.V.rows(), c.V.cols());
  ea::attention_backward_into(c.Q, c.K, c.V, c.out, c.lse, c.dO, c.dS, dq,
                              dk_big.block(1, 2, c.K.rows(), c.K.cols()), dv, opt);
  CHECK(same(dq, base.dq));
  CHECK(same(dk_big.block(1, 2, c.K.rows(), c.K.cols()), base.dk));
  CHECK(dk_big.row(0).isConstant(T(7)));
  CHECK(same(dv, base.dv));
  // Without d_scores: the same as a zero d_scores.
  const auto plain = ea::attention_backward(c.Q, c.K, c.V, c.out, c.lse, c.dO, opt);
  RowMatrix<T> zq, zk, zv;
  ea::attention_backward_into(c.Q, c.K, c.V, c.out, c.lse, c.dO, zq, zk, zv, opt);
  CHECK(same(plain.dq, zq));
  const auto zero =
      ea::attention_backward(c.Q, c.K, c.V, c.out, c.lse, c.dO, RowMatrix<T>::Zero(133, 129), opt);
  CHECK(same(plain.dk, zk));
  CHECK((plain.dq - zero.dq).cwiseAbs().maxCoeff() <=
        T(0) + std::numeric_limits<T>::epsilon() * 64 * std::max(T(1), plain.dq.cwiseAbs().maxCoeff()));
}

TEST_CASE_TEMPLATE("backward edges: T = 1, d_v != d_k, T_q != T_k and empty sizes", T, float, double) {
  Rng rng(22);
  const Eigen::Index shapes[][4] = {{1, 1, 1, 1}, {1, 9, 4, 7}, {9, 1, 4, 2},
                                    {0, 5, 3, 2}, {4, 0, 3, 2}, {3, 4, 3, 0}};
  for (const auto& s : shapes) {
    CAPTURE(s[0]);
    CAPTURE(s[1]);
    CAPTURE(s[3]);
    for (const bool causal : {false, true}) {
      ea::Options opt;
      opt.causal = causal;
      opt.alignment = ea::CausalAlignment::BottomRight;
      const Case<T> c = make_case<T>(rng, s[0], s[1], s[2], s[3], opt);
      for (const auto kernel : kernels_under_test()) {
        opt.kernel = kernel;
        const auto g = ea::attention_backward(c.Q, c.K, c.V, c.out, c.lse, c.dO, c.dS, opt);
        REQUIRE(g.dq.rows() == s[0]);
        REQUIRE(g.dk.rows() == s[1]);
        REQUIRE(g.dv.cols() == s[3]);
        crosscheck::Problem p;
        p.Q = Array4::one_head(to_long_double(c.Q));
        p.K = Array4::one_head(to_long_double(c.K));
        p.V = Array4::one_head(to_long_double(c.V));
        p.spec.causal = causal;
        p.spec.bottom_right = true;
        const BackwardReference ref =
            reference_heads_backward<T>(p.Q, p.K, p.V, p.spec, Array4::one_head(to_long_double(c.dO)),
                                        Array4::one_head(to_long_double(c.dS)));
        using View = mh::HeadsView<const T>;
        check_within(View::single(g.dq), ref.dq, ref.dq_tol, "dQ");
        check_within(View::single(g.dk), ref.dk, ref.dk_tol, "dK");
        check_within(View::single(g.dv), ref.dv, ref.dv_tol, "dV");
      }
    }
  }
}

TEST_CASE_TEMPLATE("backward edges: rows that see no key and keys no row sees get exact zeros", T, float,
                   double) {
  Rng rng(23);
  // Causal top-left with T_q < T_k: keys after the last query are seen by no row. Bottom-right
  // with T_q > T_k: the first T_q - T_k rows see no key.
  for (const bool bottom_right : {false, true}) {
    ea::Options opt;
    opt.causal = true;
    opt.alignment = bottom_right ? ea::CausalAlignment::BottomRight : ea::CausalAlignment::TopLeft;
    const Eigen::Index tq = bottom_right ? 200 : 60, tk = bottom_right ? 60 : 200;
    const Case<T> c = make_case<T>(rng, tq, tk, 8, 5, opt);
    for (const auto kernel : kernels_under_test()) {
      opt.kernel = kernel;
      const auto g = ea::attention_backward(c.Q, c.K, c.V, c.out, c.lse, c.dO, c.dS, opt);
      CHECK(all_finite(g.dq));
      CHECK(all_finite(g.dk));
      CHECK(all_finite(g.dv));
      if (bottom_right) {
        CHECK(g.dq.topRows(tq - tk).isZero(0));
      } else {
        CHECK(g.dk.bottomRows(tk - tq).isZero(0));
        CHECK(g.dv.bottomRows(tk - tq).isZero(0));
      }
    }
  }
}

TEST_CASE_TEMPLATE("backward edges: NaN reaches only the gradients that depend on it", T, float, double) {
  // Against the long-double reference (which sums over the pairs a row sees and nothing else):
  // NaN exactly where it is NaN, every other element finite and within its bound; and named
  // elements that must be NaN, or finite, are (so that a reference gone wrong is caught too).
  Rng rng(24);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const Eigen::Index tq = 150, tk = 140;
  struct Witness {
    const char* gradient;  // "dQ", "dK" or "dV"
    Eigen::Index h, row;
    bool is_nan;
  };
  const std::vector<std::vector<Witness>> witnesses = {
      {{"dQ", 1, 70, true}, {"dQ", 0, 70, false}, {"dK", 0, 0, true}, {"dK", 0, 139, false}},
      {{"dQ", 0, 100, true}, {"dQ", 1, 99, false}, {"dV", 0, 0, true}},
      {{"dQ", 0, 30, true}, {"dQ", 1, 29, false}, {"dK", 0, 0, true}, {"dV", 0, 30, false}},
      {{"dQ", 0, 10, true}, {"dQ", 1, 10, false}, {"dV", 0, 10, true}, {"dV", 0, 11, false}},
      {{"dQ", 0, 149, false}, {"dK", 0, 120, false}, {"dV", 0, 120, false}}};
  for (int where = 0; where < 5; ++where) {
    CAPTURE(where);
    Config cfg{"nan", 1, 2, 1, tq, tk, 6, 4};
    cfg.causal = true;
    cfg.mask = where == 4 ? "1x1" : "";
    Problem p = crosscheck::make_problem<T>(cfg, rng);
    Seeds s = make_seeds<T>(p, rng, true);
    if (where == 0) p.Q(0, 1, 70, 2) = nan;      // one query row
    if (where == 1) p.K(0, 0, 100, 0) = nan;     // one key row: rows >= 100 see it
    if (where == 2) p.V(0, 0, 30, 1) = nan;      // one value row: OUT of rows >= 30
    if (where == 3) s.d_out(0, 0, 10, 3) = nan;  // one row of dL/dATTN
    if (where == 4) {                            // a key row no query sees
      for (Eigen::Index i = 0; i < tq; ++i) (*p.spec.mask)(0, 0, i, 120) = 0;
      p.K(0, 0, 120, 1) = nan;
      p.V(0, 0, 120, 0) = nan;
    }
    const BackwardReference ref =
        reference_heads_backward<T>(p.Q, p.K, p.V, p.spec, s.d_out, s.d_scores, s.d_lse);
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      for (const int threads : {1, 2}) {
        CAPTURE(threads);
        const Gradients<T> g = run_backward<T>(p, s, options_for(p.spec, kernel, threads));
        for (const auto& [actual, expected, tol, gradient] :
             {std::tuple{&g.dq, &ref.dq, &ref.dq_tol, "dQ"}, std::tuple{&g.dk, &ref.dk, &ref.dk_tol, "dK"},
              std::tuple{&g.dv, &ref.dv, &ref.dv_tol, "dV"}}) {
          const std::string name = gradient;  // CAPTURE cannot name a structured binding (C++17)
          CAPTURE(name);
          const auto view = actual->view();
          long wrong_nan = 0, outside = 0;
          for (Eigen::Index h = 0; h < expected->n[1]; ++h)
            for (Eigen::Index i = 0; i < expected->n[2]; ++i)
              for (Eigen::Index c = 0; c < expected->n[3]; ++c) {
                const long double a = static_cast<long double>(view.head(0, h)(i, c)),
                                  e = (*expected)(0, h, i, c);
                if (std::isnan(a) != std::isnan(e)) {
                  ++wrong_nan;
                } else if (!std::isnan(e) && !(std::fabs(a - e) <= (*tol)(0, h, i, c))) {
                  ++outside;
                }
              }
          CHECK(wrong_nan == 0);
          CHECK(outside == 0);
          for (const Witness& w : witnesses[static_cast<size_t>(where)]) {
            if (std::string(w.gradient) != name) continue;
            CAPTURE(w.h);
            CAPTURE(w.row);
            const auto row = view.head(0, w.h).row(w.row);
            if (w.is_nan) {
              CHECK(row.hasNaN());
            } else {
              CHECK(row.allFinite());
            }
          }
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("backward edges: d_scores at masked positions has no effect, even NaN", T, float, double) {
  Rng rng(25);
  Config cfg{"masked d_scores", 2, 2, 1, 140, 150, 8, 4};
  cfg.causal = true;
  cfg.mask = "BxH";
  cfg.key_lengths = true;
  cfg.bias = "1x1";
  const Problem p = crosscheck::make_problem<T>(cfg, rng);
  Seeds s = make_seeds<T>(p, rng, true);
  const auto visible = [&](Eigen::Index b, Eigen::Index h, Eigen::Index i, Eigen::Index j) {
    return reference_logit(p.Q, p.K, p.spec, 1, b, h, i, j).visible;
  };
  Seeds poisoned;
  poisoned.d_out = s.d_out;
  poisoned.d_scores.emplace(*s.d_scores);
  poisoned.d_lse = s.d_lse;
  for (Eigen::Index b = 0; b < 2; ++b)
    for (Eigen::Index h = 0; h < 2; ++h)
      for (Eigen::Index i = 0; i < 140; ++i)
        for (Eigen::Index j = 0; j < 150; ++j)
          if (!visible(b, h, i, j)) {
            (*s.d_scores)(b, h, i, j) = 0;
            (*poisoned.d_scores)(b, h, i, j) =
                (i + j) % 2 ? std::numeric_limits<long double>::quiet_NaN() : 1e30L;
          }
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    const mh::Options opt = options_for(p.spec, kernel, 2);
    check_equal(run_backward<T>(p, poisoned, opt), run_backward<T>(p, s, opt),
                "NaN and 1e30 where masked vs zeros");
  }
}

TEST_CASE_TEMPLATE("backward edges: bad shapes throw std::invalid_argument naming them, writing nothing", T,
                   float, double) {
  Rng rng(26);
  const Case<T> c = make_case<T>(rng, 5, 7, 4, 3, {});
  const T sentinel = T(-5.5);
  RowMatrix<T> dq = RowMatrix<T>::Constant(5, 4, sentinel), dk = RowMatrix<T>::Constant(7, 4, sentinel),
               dv = RowMatrix<T>::Constant(7, 3, sentinel);
  const auto throws_naming = [&](auto&& call, const std::string& text) {
    CAPTURE(text);
    bool thrown = false;
    try {
      call();
    } catch (const std::invalid_argument& e) {
      thrown = true;
      const std::string what = e.what();
      CAPTURE(what);
      CHECK(what.find(text) != std::string::npos);
    }
    CHECK(thrown);
    CHECK(dq.isConstant(sentinel));
    CHECK(dk.isConstant(sentinel));
    CHECK(dv.isConstant(sentinel));
  };
  Eigen::Map<RowMatrix<T>> dq_map(dq.data(), 5, 4), dk_map(dk.data(), 7, 4), dv_map(dv.data(), 7, 3);
  const RowMatrix<T> wrong_out = RowMatrix<T>::Zero(5, 2), wrong_dS = RowMatrix<T>::Zero(5, 6);
  const ea::Vector<T> wrong_lse = ea::Vector<T>::Zero(4);
  throws_naming(
      [&] { ea::attention_backward_into(c.Q, c.K, c.V, wrong_out, c.lse, c.dO, dq_map, dk_map, dv_map); },
      "attn is 5x2 but must be 5x3 (T_q x d_v)");
  throws_naming(
      [&] { ea::attention_backward_into(c.Q, c.K, c.V, c.out, wrong_lse, c.dO, dq_map, dk_map, dv_map); },
      "lse is 4x1 but must be 5x1 (T_q x 1)");
  throws_naming(
      [&] { ea::attention_backward_into(c.Q, c.K, c.V, c.out, c.lse, wrong_out, dq_map, dk_map, dv_map); },
      "d_attn is 5x2 but must be 5x3");
  throws_naming(
      [&] {
        ea::attention_backward_into(c.Q, c.K, c.V, c.out, c.lse, c.dO, wrong_dS, dq_map, dk_map, dv_map);
      },
      "d_scores is 5x6 but must be 5x7 (T_q x T_k)");
  throws_naming(
      [&] {
        ea::attention_backward_into(c.Q, c.K.leftCols(3), c.V, c.out, c.lse, c.dO, dq_map, dk_map, dv_map);
      },
      "K has 3 columns but Q has 4 (d_k must match)");
  Eigen::Map<RowMatrix<T>> dk_wrong(dk.data(), 6, 4);
  throws_naming(
      [&] { ea::attention_backward_into(c.Q, c.K, c.V, c.out, c.lse, c.dO, dq_map, dk_wrong, dv_map); },
      "dk is 6x4 but must be 7x4 (T_k x d_k)");
  Eigen::Map<RowMatrix<T>> dv_over_dk(dk.data(), 7, 3);
  throws_naming(
      [&] { ea::attention_backward_into(c.Q, c.K, c.V, c.out, c.lse, c.dO, dq_map, dk_map, dv_over_dk); },
      "overlaps");
  RowMatrix<T> Q_copy = c.Q;
  throws_naming(
      [&] { ea::attention_backward_into(Q_copy, c.K, c.V, c.out, c.lse, c.dO, Q_copy, dk_map, dv_map); },
      "output dq (5x4) overlaps Q (5x4)");
  // Multi-head: d_bias without a bias, and a d_bias of the wrong broadcast shape.
  Config cfg{"errors", 2, 2, 1, 5, 7, 4, 3};
  Problem p = crosscheck::make_problem<T>(cfg, rng);
  const Seeds s = make_seeds<T>(p, rng, false);
  const HeadsBuffer<T> Q(p.Q, mh::Layout::BHTD), K(p.K, mh::Layout::BHTD), V(p.V, mh::Layout::BHTD),
      dO(s.d_out, mh::Layout::BHTD), out(mh::Layout::BHTD, 2, 2, 5, 3, T(0)),
      lse(mh::Layout::BHTD, 2, 2, 5, 1, T(0));
  HeadsBuffer<T> gq(mh::Layout::BHTD, 2, 2, 5, 4, sentinel), gk(mh::Layout::BHTD, 2, 1, 7, 4, sentinel),
      gv(mh::Layout::BHTD, 2, 1, 7, 3, sentinel), db(mh::Layout::BHTD, 1, 2, 5, 7, sentinel);
  const auto heads_throws = [&](const mh::Masks<T>& masks, mh::HeadsView<T> d_bias, mh::HeadsView<T> dk_view,
                                const std::string& text) {
    CAPTURE(text);
    try {
      mh::attention_heads_backward_into(Q.cview(), K.cview(), V.cview(), out.cview(), lse.cview(), dO.cview(),
                                        {}, gq.view(), dk_view, gv.view(), d_bias, {}, masks);
      FAIL("no exception");
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      CAPTURE(what);
      CHECK(what.find(text) != std::string::npos);
    }
    CHECK(gq.all_equal_to(sentinel));
    CHECK(gk.all_equal_to(sentinel));
    CHECK(db.all_equal_to(sentinel));
  };
  heads_throws({}, db.view(), gk.view(), "d_bias is given but masks.bias is not");
  const std::vector<T> bias(2 * 5 * 7, T(0.5));
  mh::Masks<T> with_bias;
  with_bias.bias = mh::BroadcastView<T>::per_sequence(bias.data(), 2, 5, 7);
  heads_throws(with_bias, db.view(), gk.view(), "d_bias is [1, 2, 5, 7] but must be [2, 1, 5, 7]");
  HeadsBuffer<T> gk_wrong(mh::Layout::BHTD, 2, 2, 7, 4, sentinel);
  heads_throws({}, {}, gk_wrong.view(), "dk is [2, 2, 7, 4] but must be [2, 1, 7, 4]");
}

}  // namespace test_backward_edges
