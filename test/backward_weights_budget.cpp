// SPDX-License-Identifier: MIT
// The backward holds a query tile's weights from its first step to its third while they take at
// most 64 MiB (kMaxHeldWeightsBytes, src/kernels/tile_policy.hpp) and computes them again beyond
// it (src/kernels/backward.hpp). Both ways must give the same bits. Two problems
// with the same visible pairs tell: B, 1024 keys (4 key tiles of weights, held), and A, the
// same keys after 130048 others that no query sees (512 key tiles, 71 MB of weights in float,
// computed again), the masks shifted by a whole number of key tiles.
#include <doctest/doctest.h>

#include <cstring>

#include "common.hpp"
#include "random.hpp"

namespace test_backward_weights_budget {

using namespace ea_test;

namespace {

template <typename T>
void check_bits(const RowMatrix<T>& a, const RowMatrix<T>& b, const char* what) {
  CAPTURE(what);
  REQUIRE(a.rows() == b.rows());
  REQUIRE(a.cols() == b.cols());
  long differ = 0;
  for (Eigen::Index i = 0; i < a.rows(); ++i)
    for (Eigen::Index c = 0; c < a.cols(); ++c)
      if (std::memcmp(&a(i, c), &b(i, c), sizeof(T)) != 0) ++differ;
  CHECK(differ == 0);
}

}  // namespace

TEST_CASE_TEMPLATE("backward weights budget: weights computed again give the bits of weights held", T, float,
                   double) {
  const Eigen::Index tq = 200, tkb = 1024, skipped = 130048, dk = 8, dv = 12;  // 130048 = 508 x 256
  Rng rng(41);
  const RowMatrix<T> Q = random_matrix<RowMatrix<T>>(rng, tq, dk),
                     dO = random_matrix<RowMatrix<T>>(rng, tq, dv);
  RowMatrix<T> Ka(skipped + tkb, dk), Va(skipped + tkb, dv);
  fill_normal(rng, Ka);
  fill_normal(rng, Va);
  const RowMatrix<T> Kb = Ka.bottomRows(tkb), Vb = Va.bottomRows(tkb);

  ea::Options b;  // bottom-right causal with a window, soft-capped: each query sees <= 301 keys
  b.causal = true;
  b.diagonal_offset = tkb - tq;
  b.window_left = 300;
  b.softcap = 20;
  ea::Options a = b;
  a.diagonal_offset = skipped + tkb - tq;

  RowMatrix<T> out(tq, dv);
  Eigen::Matrix<T, Eigen::Dynamic, 1> lse(tq);
  ea::attention_into(Q, Kb, Vb, out, lse, b);
  for (const auto kernel : ea::available_kernels()) {
    if (kernel == ea::Kernel::Reference) continue;  // has no tiles
    CAPTURE(ea::kernel_name(kernel));
    b.kernel = a.kernel = kernel;
    b.threads = 1;
    const auto held = ea::attention_backward(Q, Kb, Vb, out, lse, dO, b);
    for (const int threads : {1, 2}) {
      CAPTURE(threads);
      a.threads = threads;
      const auto again = ea::attention_backward(Q, Ka, Va, out, lse, dO, a);
      check_bits<T>(again.dq, held.dq, "dQ");
      check_bits<T>(again.dk.bottomRows(tkb), held.dk, "dK");
      check_bits<T>(again.dv.bottomRows(tkb), held.dv, "dV");
      CHECK(again.dk.topRows(skipped).cwiseAbs().maxCoeff() == T(0));
      CHECK(again.dv.topRows(skipped).cwiseAbs().maxCoeff() == T(0));
    }
  }
}

}  // namespace test_backward_weights_budget
