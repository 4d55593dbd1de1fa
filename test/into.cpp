// SPDX-License-Identifier: MIT
// The _into forms: the same results as the by-value forms, written exactly where asked (blocks,
// Maps with strides, Refs), nothing else touched; resizable outputs are resized.
#include <doctest/doctest.h>

#include <vector>

#include "common.hpp"
#include "inputs.hpp"
#include "random.hpp"

namespace test_into {

using namespace ea_test;

namespace {

const std::vector<Shape> kShapes = {{1, 1, 3, 2}, {17, 65, 12, 7}, {70, 33, 9, 16}, {129, 129, 20, 5}};

template <class T>
constexpr T kSentinel = T(-777.25);

}  // namespace

TEST_CASE_TEMPLATE("into: the _into forms equal the by-value forms", T, float, double) {
  Rng rng(41);
  for (const Shape& s : kShapes) {
    CAPTURE(s.tq);
    CAPTURE(s.tk);
    const auto [Q, K, V] = random_inputs<T>(rng, s);
    for (const MaskSpec& mask : all_masks()) {
      const std::string mname = mask_name(mask);
      CAPTURE(mname);
      // The fused call's LSE against the decomposed one's: two computed results.
      const Budget b = budget_for<T>(reference_attention(Q, K, V, mask), s.dk).times(2);
      for (const auto kernel : kernels_under_test()) {
        const std::string kname = ea::kernel_name(kernel);
        CAPTURE(kname);
        const ea::Options opt = make_options(mask, std::nullopt, kernel);
        const auto attn = ea::attention(Q, K, V, opt);
        const auto dec = ea::attention_decomposed(Q, K, V, opt);
        const auto scores = ea::attention_scores(Q, K, opt);

        // Pre-sized row-major outputs filled with a sentinel: every element is written.
        RowMatrix<T> out = RowMatrix<T>::Constant(s.tq, s.dv, kSentinel<T>);
        ea::attention_into(Q, K, V, out, opt);
        EA_CHECK_EQUAL(out, attn);

        RowMatrix<T> out2 = RowMatrix<T>::Constant(s.tq, s.dv, kSentinel<T>);
        ea::Vector<T> lse = ea::Vector<T>::Constant(s.tq, kSentinel<T>);
        ea::attention_into(Q, K, V, out2, lse, opt);
        EA_CHECK_EQUAL(out2, attn);
        EA_CHECK_NEAR(lse, dec.lse, b.lse);

        RowMatrix<T> ds = RowMatrix<T>::Constant(s.tq, s.tk, kSentinel<T>);
        RowMatrix<T> da = RowMatrix<T>::Constant(s.tq, s.dv, kSentinel<T>);
        ea::attention_decomposed_into(Q, K, V, ds, da, opt);
        EA_CHECK_EQUAL(ds, dec.scores);
        EA_CHECK_EQUAL(da, dec.attn);

        ds.setConstant(kSentinel<T>);
        da.setConstant(kSentinel<T>);
        ea::Vector<T> dl = ea::Vector<T>::Constant(s.tq, kSentinel<T>);
        ea::attention_decomposed_into(Q, K, V, ds, da, dl, opt);
        EA_CHECK_EQUAL(ds, dec.scores);
        EA_CHECK_EQUAL(da, dec.attn);
        EA_CHECK_EQUAL(dl, dec.lse);

        RowMatrix<T> ss = RowMatrix<T>::Constant(s.tq, s.tk, kSentinel<T>);
        ea::attention_scores_into(Q, K, ss, opt);
        EA_CHECK_EQUAL(ss, scores);
      }
    }
  }
}

TEST_CASE_TEMPLATE("into: writing into blocks, Maps and Refs touches only the view", T, float, double) {
  using Col = ColMatrix<T>;
  using Row = RowMatrix<T>;
  Rng rng(42);
  const Eigen::Index tq = 37, tk = 70, dk = 11, dv = 6;
  const auto Q = random_matrix<Row>(rng, tq, dk);
  const auto K = random_matrix<Row>(rng, tk, dk);
  const auto V = random_matrix<Row>(rng, tk, dv);
  for (const MaskSpec& mask : all_masks()) {
    const std::string mname = mask_name(mask);
    CAPTURE(mname);
    const auto ref = reference_attention(Q, K, V, mask);
    // One computed result against the exact one: the error model of support/tolerance.hpp.
    const Budget b = budget_for<T>(ref, dk);
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      const ea::Options opt = make_options(mask, std::nullopt, kernel);
      std::string view;
      CAPTURE(view);

      // Blocks of bigger matrices, both storage orders; everything outside stays the sentinel.
      view = "blocks of bigger matrices";
      Col bigA = Col::Constant(tq + 5, dv + 4, kSentinel<T>);
      Row bigS = Row::Constant(tq + 2, tk + 3, kSentinel<T>);
      Col bigL = Col::Constant(tq + 3, 3, kSentinel<T>);
      ea::attention_decomposed_into(Q, K, V, bigS.block(1, 2, tq, tk), bigA.block(2, 3, tq, dv),
                                    bigL.block(3, 1, tq, 1), opt);
      EA_CHECK_NEAR(bigA.block(2, 3, tq, dv), ref.attn, b.attn);
      EA_CHECK_NEAR(bigS.block(1, 2, tq, tk), ref.scores, b.scores);
      EA_CHECK_NEAR(bigL.block(3, 1, tq, 1), ref.lse, b.lse);
      bigA.block(2, 3, tq, dv).setConstant(kSentinel<T>);
      bigS.block(1, 2, tq, tk).setConstant(kSentinel<T>);
      bigL.block(3, 1, tq, 1).setConstant(kSentinel<T>);
      CHECK((bigA.array() == kSentinel<T>).all());
      CHECK((bigS.array() == kSentinel<T>).all());
      CHECK((bigL.array() == kSentinel<T>).all());

      view = "fused into a middleRows block with an LSE column block";
      Row bigO = Row::Constant(tq + 4, dv, kSentinel<T>);
      Row bigLr = Row::Constant(tq, 2, kSentinel<T>);
      ea::attention_into(Q, K, V, bigO.middleRows(2, tq), bigLr.col(1), opt);
      EA_CHECK_NEAR(bigO.middleRows(2, tq), ref.attn, b.attn);
      EA_CHECK_NEAR(bigLr.col(1), ref.lse, b.lse);
      CHECK((bigO.topRows(2).array() == kSentinel<T>).all());
      CHECK((bigO.bottomRows(2).array() == kSentinel<T>).all());
      CHECK((bigLr.col(0).array() == kSentinel<T>).all());

      view = "scores into a block";
      Col bigS2 = Col::Constant(tq + 1, tk + 1, kSentinel<T>);
      ea::attention_scores_into(Q, K, bigS2.bottomRightCorner(tq, tk), opt);
      EA_CHECK_NEAR(bigS2.bottomRightCorner(tq, tk), ref.scores, b.scores);
      CHECK((bigS2.row(0).array() == kSentinel<T>).all());
      CHECK((bigS2.col(0).array() == kSentinel<T>).all());

      // Maps over plain buffers: outer stride with spare elements, and inner stride 3.
      view = "Maps with strides";
      std::vector<T> bufA(static_cast<size_t>(tq * (dv + 2)), kSentinel<T>);
      std::vector<T> bufS(static_cast<size_t>(3 * tq * tk), kSentinel<T>);
      Eigen::Map<Row, Eigen::Unaligned, Eigen::OuterStride<>> mapA(bufA.data(), tq, dv,
                                                                   Eigen::OuterStride<>(dv + 2));
      Eigen::Map<Col, Eigen::Unaligned, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>> mapS(
          bufS.data(), tq, tk, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(3 * tq, 3));
      ea::attention_decomposed_into(Q, K, V, mapS, mapA, opt);
      EA_CHECK_NEAR(mapA, ref.attn, b.attn);
      EA_CHECK_NEAR(mapS, ref.scores, b.scores);
      for (Eigen::Index i = 0; i < tq; ++i)
        for (Eigen::Index c = dv; c < dv + 2; ++c)
          CHECK(bufA[static_cast<size_t>(i * (dv + 2) + c)] == kSentinel<T>);
      size_t untouched = 0;
      for (size_t n = 0; n < bufS.size(); ++n)
        if (n % 3 != 0) untouched += bufS[n] == kSentinel<T> ? 1 : 0;
      CHECK(untouched == bufS.size() - bufS.size() / 3);

      view = "Eigen::Ref outputs";
      Row refBig = Row::Constant(tq, dv + 1, kSentinel<T>);
      Eigen::Ref<Row, 0, Eigen::OuterStride<>> refA(refBig.leftCols(dv));
      Col lseStore = Col::Constant(tq, 1, kSentinel<T>);
      Eigen::Ref<Col> refL(lseStore);
      ea::attention_into(Q, K, V, refA, refL, opt);
      EA_CHECK_NEAR(refBig.leftCols(dv), ref.attn, b.attn);
      EA_CHECK_NEAR(lseStore, ref.lse, b.lse);
      CHECK((refBig.col(dv).array() == kSentinel<T>).all());
    }
  }
}

TEST_CASE_TEMPLATE("into: resizable outputs are resized, fixed-size ones of the right shape work", T, float,
                   double) {
  Rng rng(43);
  const Eigen::Index tq = 3, tk = 9, dk = 4, dv = 2;
  const auto [Q, K, V] = random_inputs<T>(rng, {tq, tk, dk, dv});
  const auto ref = reference_attention(Q, K, V, MaskSpec{true, true});
  const Budget b = budget_for<T>(ref, dk);  // one computed result vs exact: the error model
  const ea::Options opt = make_options(MaskSpec{true, true});

  RowMatrix<T> a1(1, 1);
  ColMatrix<T> s1;  // 0 x 0
  ea::Vector<T> l1(50);
  ea::attention_decomposed_into(Q, K, V, s1, a1, l1, opt);
  EA_CHECK_NEAR(a1, ref.attn, b.attn);
  EA_CHECK_NEAR(s1, ref.scores, b.scores);
  EA_CHECK_NEAR(l1, ref.lse, b.lse);

  ColMatrix<T> a2(7, 7);
  ea::attention_into(Q, K, V, a2, opt);
  EA_CHECK_NEAR(a2, ref.attn, b.attn);

  RowMatrix<T> s2(100, 1);
  ea::attention_scores_into(Q, K, s2, opt);
  EA_CHECK_NEAR(s2, ref.scores, b.scores);

  // Dynamic rows, fixed columns: resized along the dynamic dimension only.
  Eigen::Matrix<T, Eigen::Dynamic, 2, Eigen::RowMajor> a3(8, 2);
  ea::attention_into(Q, K, V, a3, opt);
  EA_CHECK_NEAR(a3, ref.attn, b.attn);

  Eigen::Matrix<T, 3, 2> a4;
  Eigen::Matrix<T, 3, 9, Eigen::RowMajor> s4;
  Eigen::Matrix<T, 3, 1> l4;
  ea::attention_decomposed_into(Q, K, V, s4, a4, l4, opt);
  EA_CHECK_NEAR(a4, ref.attn, b.attn);
  EA_CHECK_NEAR(s4, ref.scores, b.scores);
  EA_CHECK_NEAR(l4, ref.lse, b.lse);
}

TEST_CASE_TEMPLATE("into: inputs and outputs may be disjoint blocks of one matrix", T, float, double) {
  // [Q | ATTN | LSE] side by side in one row-major matrix, and K, V side by side in another.
  Rng rng(44);
  const Eigen::Index tq = 20, tk = 30, dk = 6, dv = 4;
  RowMatrix<T> QA = random_matrix<RowMatrix<T>>(rng, tq, dk + dv + 1);
  ColMatrix<T> KV = random_matrix<ColMatrix<T>>(rng, tk, dk + dv);
  const RowMatrix<T> Q = QA.leftCols(dk), K = KV.leftCols(dk), V = KV.rightCols(dv);
  const auto ref = reference_attention(Q, K, V, MaskSpec{true, false});
  const Budget b = budget_for<T>(ref, dk);  // one computed result vs exact: the error model
  const ea::Options opt = make_options(MaskSpec{true, false});
  ea::attention_into(QA.leftCols(dk), KV.leftCols(dk), KV.rightCols(dv), QA.middleCols(dk, dv),
                     QA.col(dk + dv), opt);
  EA_CHECK_NEAR(QA.middleCols(dk, dv), ref.attn, b.attn);
  EA_CHECK_NEAR(QA.col(dk + dv), ref.lse, b.lse);
  EA_CHECK_EQUAL(QA.leftCols(dk), Q);
}

}  // namespace test_into
