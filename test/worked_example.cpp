// SPDX-License-Identifier: MIT
// A three-token example worked out by hand: integer Q, K, V, d_k = 4 so that the default
// scale is exactly 1/2, every logit is a multiple of 1/2, and every weight is a closed form in
// a = e^(1/2) and e = e^1.
//
//   Q = [1 0 1 0]    K = [1 0 0 0]    V = [1 2 0]
//       [0 1 0 1]        [0 1 0 0]        [0 1 3]
//       [1 1 0 0]        [1 1 1 1]        [2 0 1]
//
//   Q K^T = [1 0 2]   scaled by 1/2:  L = [1/2  0   1]
//           [0 1 2]                       [ 0  1/2  1]
//           [1 1 2]                       [1/2 1/2  1]
#include <doctest/doctest.h>

#include <cmath>

#include "common.hpp"

namespace test_worked_example {

using namespace ea_test;

namespace {

template <class T>
struct Example {
  RowMatrix<T> Q{3, 4}, K{3, 4}, V{3, 3};
  Example() {
    Q << 1, 0, 1, 0,  //
        0, 1, 0, 1,   //
        1, 1, 0, 0;
    K << 1, 0, 0, 0,  //
        0, 1, 0, 0,   //
        1, 1, 1, 1;
    V << 1, 2, 0,  //
        0, 1, 3,   //
        2, 0, 1;
  }
};

const long double a = std::exp(0.5L);  // e^(1/2)
const long double e = std::exp(1.0L);  // e^1

// Logits are exact in float and double; what is left is exp (1 rounding), a 3-term sum (2),
// the division (1), and for ATTN 3 products and a 3-term sum (5), plus up to 3 rescalings in a
// tiled kernel: about 12 roundings at most, so 16 u.
template <class T>
constexpr long double kTol = 16 * unit_roundoff<T>();

template <class T>
void check_all_forms(const RowMatrix<T>& Q, const RowMatrix<T>& K, const RowMatrix<T>& V,
                     const ea::Options& base, const MatrixLD& scores, const MatrixLD& attn,
                     const VectorLD& lse) {
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt = base;
    opt.kernel = kernel;

    const auto r = ea::attention_decomposed(Q, K, V, opt);
    EA_CHECK_NEAR(r.scores, scores, kTol<T>);
    EA_CHECK_NEAR(r.attn, attn, kTol<T>);
    EA_CHECK_NEAR(r.lse, lse, kTol<T>);

    EA_CHECK_NEAR(ea::attention(Q, K, V, opt), attn, kTol<T>);
    EA_CHECK_NEAR(ea::attention_scores(Q, K, opt), scores, kTol<T>);

    RowMatrix<T> out(3, 3);
    ea::Vector<T> l(3);
    ea::attention_into(Q, K, V, out, l, opt);
    EA_CHECK_NEAR(out, attn, kTol<T>);
    EA_CHECK_NEAR(l, lse, kTol<T>);
  }
}

}  // namespace

TEST_CASE_TEMPLATE("worked example: non-causal, default scale 1/2", T, float, double) {
  const Example<T> x;
  // Rows 0 and 1 see the logits {1/2, 0, 1} (in another order): Z = a + 1 + e.
  // Row 2 sees {1/2, 1/2, 1}: Z2 = 2a + e.
  const long double Z = a + 1 + e, Z2 = 2 * a + e;
  MatrixLD scores(3, 3), attn(3, 3);
  VectorLD lse(3);
  scores << a / Z, 1 / Z, e / Z,  //
      1 / Z, a / Z, e / Z,        //
      a / Z2, a / Z2, e / Z2;
  // ATTN row = sum_j w_j V_j, e.g. row 0: (a [1 2 0] + 1 [0 1 3] + e [2 0 1]) / Z.
  attn << (a + 2 * e) / Z, (2 * a + 1) / Z, (3 + e) / Z,  //
      (1 + 2 * e) / Z, (2 + a) / Z, (3 * a + e) / Z,      //
      (a + 2 * e) / Z2, (3 * a) / Z2, (3 * a + e) / Z2;
  lse << std::log(Z), std::log(Z), std::log(Z2);

  check_all_forms<T>(x.Q, x.K, x.V, ea::Options{}, scores, attn, lse);
}

TEST_CASE_TEMPLATE("worked example: causal top-left", T, float, double) {
  const Example<T> x;
  // Row 0 sees key 0 only: weight 1, ATTN = V_0, LSE = 1/2.
  // Row 1 sees keys 0 and 1, logits {0, 1/2}: Z1 = 1 + a.
  // Row 2 sees every key: as without the mask.
  const long double Z1 = 1 + a, Z2 = 2 * a + e;
  MatrixLD scores(3, 3), attn(3, 3);
  VectorLD lse(3);
  scores << 1, 0, 0,      //
      1 / Z1, a / Z1, 0,  //
      a / Z2, a / Z2, e / Z2;
  attn << 1, 2, 0,                         //
      1 / Z1, (2 + a) / Z1, (3 * a) / Z1,  //
      (a + 2 * e) / Z2, (3 * a) / Z2, (3 * a + e) / Z2;
  lse << 0.5L, std::log(Z1), std::log(Z2);

  ea::Options opt;
  opt.causal = true;
  check_all_forms<T>(x.Q, x.K, x.V, opt, scores, attn, lse);

  // The masked weights are exact zeros, not merely small.
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    opt.kernel = kernel;
    const auto r = ea::attention_decomposed(x.Q, x.K, x.V, opt);
    CHECK(r.scores(0, 1) == T(0));
    CHECK(r.scores(0, 2) == T(0));
    CHECK(r.scores(1, 2) == T(0));
    CHECK(r.scores(0, 0) == T(1));  // exp(0) / exp(0)
  }
}

TEST_CASE_TEMPLATE("worked example: causal bottom-right with 2 queries and 3 keys", T, float, double) {
  const Example<T> x;
  // Queries are Q's rows 1 and 2; offset = T_k - T_q = 1, so query 0 sees keys 0..1 (logits
  // {0, 1/2}) and query 1 sees all three (logits {1/2, 1/2, 1}).
  const RowMatrix<T> Q = x.Q.bottomRows(2);
  const long double Z1 = 1 + a, Z2 = 2 * a + e;
  MatrixLD scores(2, 3), attn(2, 3);
  VectorLD lse(2);
  scores << 1 / Z1, a / Z1, 0,  //
      a / Z2, a / Z2, e / Z2;
  attn << 1 / Z1, (2 + a) / Z1, (3 * a) / Z1,  //
      (a + 2 * e) / Z2, (3 * a) / Z2, (3 * a + e) / Z2;
  lse << std::log(Z1), std::log(Z2);

  ea::Options opt;
  opt.causal = true;
  opt.alignment = ea::CausalAlignment::BottomRight;
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    opt.kernel = kernel;
    const auto r = ea::attention_decomposed(Q, x.K, x.V, opt);
    EA_CHECK_NEAR(r.scores, scores, kTol<T>);
    EA_CHECK_NEAR(r.attn, attn, kTol<T>);
    EA_CHECK_NEAR(r.lse, lse, kTol<T>);
    EA_CHECK_NEAR(ea::attention(Q, x.K, x.V, opt), attn, kTol<T>);
  }
}

TEST_CASE_TEMPLATE("worked example: explicit scale 1 (logits are the integers of Q K^T)", T, float, double) {
  const Example<T> x;
  // L = Q K^T: rows {1, 0, 2}, {0, 1, 2}, {1, 1, 2}; Z = e + 1 + e^2, Z2 = 2e + e^2.
  const long double e2 = e * e, Z = e + 1 + e2, Z2 = 2 * e + e2;
  MatrixLD scores(3, 3), attn(3, 3);
  VectorLD lse(3);
  scores << e / Z, 1 / Z, e2 / Z,  //
      1 / Z, e / Z, e2 / Z,        //
      e / Z2, e / Z2, e2 / Z2;
  attn << (e + 2 * e2) / Z, (2 * e + 1) / Z, (3 + e2) / Z,  //
      (1 + 2 * e2) / Z, (2 + e) / Z, (3 * e + e2) / Z,      //
      (e + 2 * e2) / Z2, (3 * e) / Z2, (3 * e + e2) / Z2;
  lse << std::log(Z), std::log(Z), std::log(Z2);

  ea::Options opt;
  opt.scale = 1.0;
  check_all_forms<T>(x.Q, x.K, x.V, opt, scores, attn, lse);
}

}  // namespace test_worked_example
