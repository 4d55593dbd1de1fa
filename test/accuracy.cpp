// SPDX-License-Identifier: MIT
// Accuracy may not pay for speed: against a long-double reference, the float result of every
// kernel stays within 2x the error of the naive float expression on the same inputs.
#include <doctest/doctest.h>

#include <EigenAttention/EigenAttention.hpp>

#include <cmath>
#include <limits>
#include <string>

#include "common.hpp"
#include "random.hpp"

namespace test_accuracy {

namespace ea = EigenAttention;
using namespace ea_test;

namespace {

// The obvious Eigen expression, in float: S = scale (Q K^T), -inf above the frontier, row
// softmax subtracting the row max, O = S V.
RowMatrix<float> naive_attention(const RowMatrix<float>& Q, const RowMatrix<float>& K,
                                 const RowMatrix<float>& V, bool causal) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(Q.cols()));
  RowMatrix<float> S = scale * (Q * K.transpose());
  if (causal) S.triangularView<Eigen::StrictlyUpper>().setConstant(-std::numeric_limits<float>::infinity());
  for (Eigen::Index i = 0; i < S.rows(); ++i) {
    const float m = S.row(i).maxCoeff();
    for (Eigen::Index j = 0; j < S.cols(); ++j) S(i, j) = std::exp(S(i, j) - m);  // exp(-inf) = 0
    S.row(i) /= S.row(i).sum();
  }
  return S * V;
}

template <class M>
long double max_error(const M& actual, const MatrixLD& expected) {
  long double worst = 0;
  for (Eigen::Index i = 0; i < actual.rows(); ++i)
    for (Eigen::Index j = 0; j < actual.cols(); ++j)
      worst = std::max(worst, std::abs(static_cast<long double>(actual(i, j)) - expected(i, j)));
  return worst;
}

}  // namespace

TEST_CASE("accuracy: every kernel's float ATTN is within 2x the naive float expression's error") {
  Rng rng(31337);
  struct Case {
    Eigen::Index t, d;
    double magnitude;  // scales Q and K: larger logits, a worse-conditioned softmax
  };
  for (const Case c : {Case{600, 64, 1.0}, Case{600, 128, 1.0}, Case{700, 64, 3.0}, Case{1030, 32, 2.0}}) {
    const auto Q = random_matrix<RowMatrix<float>>(rng, c.t, c.d, c.magnitude);
    const auto K = random_matrix<RowMatrix<float>>(rng, c.t, c.d, c.magnitude);
    const auto V = random_matrix<RowMatrix<float>>(rng, c.t, c.d);
    for (bool causal : {false, true}) {
      CAPTURE(c.t);
      CAPTURE(c.d);
      CAPTURE(c.magnitude);
      CAPTURE(causal);
      const ReferenceResult ref = reference_attention(Q, K, V, MaskSpec{causal, false});
      const long double naive_error = max_error(naive_attention(Q, K, V, causal), ref.attn);
      REQUIRE(naive_error > 0);
      for (ea::Kernel kernel : kernels_under_test()) {
        const std::string kname = ea::kernel_name(kernel);
        CAPTURE(kname);
        ea::Options opt;
        opt.causal = causal;
        opt.kernel = kernel;
        const long double fused_error = max_error(ea::attention(Q, K, V, opt), ref.attn);
        const long double decomposed_error = max_error(ea::attention_decomposed(Q, K, V, opt).attn, ref.attn);
        CAPTURE(static_cast<double>(naive_error));
        CAPTURE(static_cast<double>(fused_error));
        CAPTURE(static_cast<double>(decomposed_error));
        CHECK(fused_error <= 2 * naive_error);
        CHECK(decomposed_error <= 2 * naive_error);
      }
    }
  }
}

}  // namespace test_accuracy
