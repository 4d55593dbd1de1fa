// SPDX-License-Identifier: MIT
// Random problems against the long-double reference (support/reference.hpp): odd shapes that do
// not fit a tile, T = 1, d_v != d_k, T_q < T_k and T_q > T_k, every mask, custom scales, and
// inputs of every layout the front door accepts.
#include <doctest/doctest.h>

#include <optional>
#include <vector>

#include "common.hpp"
#include "inputs.hpp"
#include "random.hpp"

namespace test_reference_random {

using namespace ea_test;

namespace {

// Sizes on both sides of likely tile edges (64) and far from any power of two.
const std::vector<Shape> kShapes = {
    {1, 1, 1, 1},     {1, 3, 8, 5},    {3, 17, 16, 8},     {17, 3, 5, 7},      {63, 64, 32, 16},
    {64, 64, 64, 64}, {65, 65, 17, 3}, {127, 129, 24, 40}, {129, 127, 40, 24}, {1, 200, 16, 16},
    {200, 1, 16, 16}, {64, 65, 8, 8},  {65, 63, 12, 1},    {200, 200, 64, 32}, {3, 129, 33, 65}};

// Checks every form of the call with every kernel against `ref`, within the budget of T.
template <class T, class DQ, class DK, class DV>
void check_against_reference(const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
                             const Eigen::MatrixBase<DV>& V, ea::Options opt, const ReferenceResult& ref) {
  // One computed result against the exact one: the worst-case error model of
  // support/tolerance.hpp (d_k, T_k and the logit magnitude set the bound).
  const Budget b = budget_for<T>(ref, Q.cols());
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    opt.kernel = kernel;
    const auto r = ea::attention_decomposed(Q, K, V, opt);
    EA_CHECK_NEAR(r.scores, ref.scores, b.scores);
    EA_CHECK_NEAR(r.attn, ref.attn, b.attn);
    EA_CHECK_NEAR(r.lse, ref.lse, b.lse);
    EA_CHECK_NEAR(ea::attention(Q, K, V, opt), ref.attn, b.attn);
    EA_CHECK_NEAR(ea::attention_scores(Q, K, opt), ref.scores, b.scores);
  }
}

}  // namespace

TEST_CASE_TEMPLATE("random: odd shapes, every mask, default and custom scales, every kernel", T, float,
                   double) {
  Rng rng(20240601);
  const std::vector<std::optional<double>> scales = {std::nullopt, 0.3, 2.0, 1e-3};
  for (const Shape& s : kShapes) {
    CAPTURE(s.tq);
    CAPTURE(s.tk);
    CAPTURE(s.dk);
    CAPTURE(s.dv);
    const auto [Q, K, V] = random_inputs<T>(rng, s);
    for (const MaskSpec& mask : all_masks()) {
      const std::string mname = mask_name(mask);
      CAPTURE(mname);
      for (const auto& scale : scales) {
        const double scale_value = scale ? *scale : -1.0;  // -1: default
        CAPTURE(scale_value);
        const ea::Options opt = make_options(mask, scale);
        check_against_reference<T>(Q, K, V, opt, reference_for(Q, K, V, opt));
      }
    }
  }
}

TEST_CASE_TEMPLATE("random: one long problem (T = 300, d_k = d_v = 64)", T, float, double) {
  Rng rng(77);
  const auto [Q, K, V] = random_inputs<T>(rng, {300, 300, 64, 64});
  for (const MaskSpec& mask : {MaskSpec{false, false}, MaskSpec{true, false}}) {
    const std::string mname = mask_name(mask);
    CAPTURE(mname);
    const ea::Options opt = make_options(mask);
    check_against_reference<T>(Q, K, V, opt, reference_for(Q, K, V, opt));
  }
}

TEST_CASE_TEMPLATE("random: every input layout gives the reference's answer", T, float, double) {
  using Col = ColMatrix<T>;
  using Row = RowMatrix<T>;
  using OuterMapCol = Eigen::Map<const Col, Eigen::Unaligned, Eigen::OuterStride<>>;
  using OuterMapRow = Eigen::Map<const Row, Eigen::Unaligned, Eigen::OuterStride<>>;
  using AnyStrideMap = Eigen::Map<const Row, Eigen::Unaligned, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>>;

  Rng rng(4242);
  const Eigen::Index tq = 65, tk = 129, dk = 33, dv = 17;
  const Row Q = random_matrix<Row>(rng, tq, dk);
  const Row K = random_matrix<Row>(rng, tk, dk);
  const Row V = random_matrix<Row>(rng, tk, dv);

  // Buffers for the maps: column-major with 5 spare rows, row-major with 3 spare columns,
  // and every element spaced by 2 (inner stride) for the fully strided map.
  std::vector<T> bq(static_cast<size_t>((tq + 5) * dk)), bk(static_cast<size_t>(tk * (dk + 3))),
      bv(static_cast<size_t>(2 * tk * dv));
  Eigen::Map<Col, Eigen::Unaligned, Eigen::OuterStride<>>(bq.data(), tq, dk, Eigen::OuterStride<>(tq + 5)) =
      Q;
  Eigen::Map<Row, Eigen::Unaligned, Eigen::OuterStride<>>(bk.data(), tk, dk, Eigen::OuterStride<>(dk + 3)) =
      K;
  Eigen::Map<Row, Eigen::Unaligned, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>>(
      bv.data(), tk, dv, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(2 * dv, 2)) = V;
  const OuterMapCol mQ(bq.data(), tq, dk, Eigen::OuterStride<>(tq + 5));
  const OuterMapRow mK(bk.data(), tk, dk, Eigen::OuterStride<>(dk + 3));
  const AnyStrideMap mV(bv.data(), tk, dv, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(2 * dv, 2));

  // Big matrices whose blocks are the inputs.
  Col bigQ = random_matrix<Col>(rng, tq + 7, dk + 4);
  bigQ.block(3, 2, tq, dk) = Q;
  Row bigK = random_matrix<Row>(rng, tk + 9, dk);
  bigK.middleRows(4, tk) = K;
  Col bigV = random_matrix<Col>(rng, tk + 2, dv + 6);
  bigV.block(1, 5, tk, dv) = V;

  // Transposed storage: Q^T held as dk x tq, viewed through .transpose() (direct access).
  const Col Qt = Q.transpose();

  for (const MaskSpec& mask : {MaskSpec{false, false}, MaskSpec{true, true}}) {
    const std::string mname = mask_name(mask);
    CAPTURE(mname);
    const ea::Options opt = make_options(mask, 0.25);
    const auto ref = reference_for(Q, K, V, opt);
    std::string layout;
    CAPTURE(layout);

    layout = "row-major matrices";
    check_against_reference<T>(Q, K, V, opt, ref);
    layout = "column-major matrices";
    check_against_reference<T>(Col(Q), Col(K), Col(V), opt, ref);
    layout = "mixed: column-major Q, row-major K, column-major V";
    check_against_reference<T>(Col(Q), K, Col(V), opt, ref);
    layout = "maps: column-major outer stride, row-major outer stride, inner stride 2";
    check_against_reference<T>(mQ, mK, mV, opt, ref);
    layout = "blocks: .block() of column-major, .middleRows() of row-major";
    check_against_reference<T>(bigQ.block(3, 2, tq, dk), bigK.middleRows(4, tk), bigV.block(1, 5, tk, dv),
                               opt, ref);
    layout = "Eigen::Ref";
    check_against_reference<T>(Eigen::Ref<const Col>(Col(Q)), Eigen::Ref<const Row>(K),
                               Eigen::Ref<const Col, 0, Eigen::OuterStride<>>(bigV.block(1, 5, tk, dv)), opt,
                               ref);
    layout = "transposed storage";
    check_against_reference<T>(Qt.transpose(), K, V, opt, ref);

    // Expressions without direct access are evaluated once: their reference is the evaluated value.
    layout = "expressions: 2*Q, K + K, V.array().square()";
    const Row Q2 = T(2) * Q, K2 = K + K, V2 = V.array().square().matrix();
    check_against_reference<T>(T(2) * Q, K + K, V.array().square().matrix(), opt,
                               reference_for(Q2, K2, V2, opt));
    layout = "expression: a product Q * I";
    const Row I = Row::Identity(dk, dk);
    check_against_reference<T>(Q * I, K, V, opt, ref);
  }
}

TEST_CASE("random: a row-major float Map over a plain buffer") {
  Rng rng(99);
  const Eigen::Index tq = 17, tk = 63, dk = 20, dv = 9;
  std::vector<float> q(static_cast<size_t>(tq * dk)), k(static_cast<size_t>(tk * dk)),
      v(static_cast<size_t>(tk * dv));
  for (auto* buf : {&q, &k, &v})
    for (auto& x : *buf) x = static_cast<float>(rng.normal());
  const Eigen::Map<const RowMatrix<float>> Q(q.data(), tq, dk), K(k.data(), tk, dk), V(v.data(), tk, dv);
  for (const MaskSpec& mask : all_masks()) {
    const std::string mname = mask_name(mask);
    CAPTURE(mname);
    const ea::Options opt = make_options(mask);
    check_against_reference<float>(Q, K, V, opt, reference_for(Q, K, V, opt));
  }
}

}  // namespace test_reference_random
