// SPDX-License-Identifier: MIT
// The float backward against the error of the naive float expression (the same error model as
// the forward's accuracy test): on the same inputs, the largest error of each float gradient
// against the long-double reference must be at most twice that of the plain Eigen expression a
// user would write (S = scale Q K^T, mask, P = softmax, dV = P^T dO, dP = dO V^T,
// dS = P o (dP - rowsum(P o dP)), dQ = scale dS K, dK = scale dS^T Q), evaluated in float.
#include <doctest/doctest.h>

#include "backward_crosscheck.hpp"

namespace test_backward_accuracy {

using namespace ea_test;
using namespace ea_test::backward;

namespace {

using Mf = Eigen::MatrixXf;

// The naive float backward, one head, causal top-left or none.
void naive_backward(const Mf& Q, const Mf& K, const Mf& V, const Mf& dO, bool causal, Mf& dq, Mf& dk,
                    Mf& dv) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(Q.cols()));
  Mf S = scale * Q * K.transpose();
  if (causal)
    for (Eigen::Index i = 0; i < S.rows(); ++i)
      for (Eigen::Index j = i + 1; j < S.cols(); ++j) S(i, j) = -std::numeric_limits<float>::infinity();
  Mf P = (S.colwise() - S.rowwise().maxCoeff()).array().exp().matrix();
  P = P.array().colwise() / P.rowwise().sum().array();
  dv = P.transpose() * dO;
  const Mf dP = dO * V.transpose();
  const Eigen::VectorXf D = (P.array() * dP.array()).rowwise().sum();
  const Mf dS = (P.array() * (dP.colwise() - D).array()).matrix();
  dq = scale * dS * K;
  dk = scale * dS.transpose() * Q;
}

long double max_error(const Mf& m, const Array4& exact) {
  long double e = 0;
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j)
      e = std::max(e, std::fabs(static_cast<long double>(m(i, j)) - exact(0, 0, i, j)));
  return e;
}

}  // namespace

TEST_CASE("backward accuracy: float error within twice the naive float expression's") {
  Rng rng(99);
  for (const Eigen::Index T : {64, 200}) {
    for (const Eigen::Index d : {16, 64}) {
      for (const bool causal : {false, true}) {
        for (const double magnitude : {1.0, 3.0}) {
          CAPTURE(T);
          CAPTURE(d);
          CAPTURE(causal);
          CAPTURE(magnitude);
          Config c{"accuracy", 1, 1, 1, T, T, d, d};
          c.causal = causal;
          c.magnitude = magnitude;
          const Problem p = crosscheck::make_problem<float>(c, rng);
          const Seeds s = make_seeds<float>(p, rng, false);
          const BackwardReference ref =
              reference_heads_backward<float>(p.Q, p.K, p.V, p.spec, s.d_out, s.d_scores, s.d_lse);
          const auto f = [](const Array4& a) {
            Mf m(a.n[2], a.n[3]);
            for (Eigen::Index i = 0; i < m.rows(); ++i)
              for (Eigen::Index j = 0; j < m.cols(); ++j) m(i, j) = static_cast<float>(a(0, 0, i, j));
            return m;
          };
          Mf nq, nk, nv;
          naive_backward(f(p.Q), f(p.K), f(p.V), f(s.d_out), causal, nq, nk, nv);
          for (const auto kernel : kernels_under_test()) {
            const std::string kname = ea::kernel_name(kernel);
            CAPTURE(kname);
            const Gradients<float> g = run_backward<float>(p, s, options_for(p.spec, kernel));
            const Mf gq = g.dq.view().head(0, 0), gk = g.dk.view().head(0, 0), gv = g.dv.view().head(0, 0);
            CHECK(max_error(gq, ref.dq) <= 2 * max_error(nq, ref.dq));
            CHECK(max_error(gk, ref.dk) <= 2 * max_error(nk, ref.dk));
            CHECK(max_error(gv, ref.dv) <= 2 * max_error(nv, ref.dv));
          }
        }
      }
    }
  }
}

}  // namespace test_backward_accuracy
