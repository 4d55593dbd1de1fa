// SPDX-License-Identifier: MIT
// Every bad input throws std::invalid_argument whose message names the shapes or values at
// fault, and no output is written (each output is filled with a sentinel first).
#include <doctest/doctest.h>

#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "common.hpp"
#include "errors.hpp"
#include "random.hpp"

namespace test_errors {

using namespace ea_test;

namespace {

template <class T>
constexpr T kSentinel = T(1234.5);

template <class Derived>
bool all_sentinel(const Eigen::MatrixBase<Derived>& m) {
  return (m.array() == kSentinel<typename Derived::Scalar>).all();
}

// The valid problem that the bad calls start from: T_q = 3, T_k = 5, d_k = 7, d_v = 2.
constexpr Eigen::Index kTq = 3, kTk = 5, kDk = 7, kDv = 2;

}  // namespace

TEST_CASE_TEMPLATE("errors: mismatched input shapes name both shapes, in every form", T, float, double) {
  Rng rng(1);
  const auto Q = random_matrix<RowMatrix<T>>(rng, kTq, kDk);
  const auto K = random_matrix<RowMatrix<T>>(rng, kTk, kDk);
  const auto V = random_matrix<RowMatrix<T>>(rng, kTk, kDv);
  const auto K8 = random_matrix<RowMatrix<T>>(rng, kTk, 8);  // d_k 8 != 7
  const auto V6 = random_matrix<RowMatrix<T>>(rng, 6, kDv);  // T_k 6 != 5
  // Outputs of the right shapes, but resizable and sized wrong on purpose (4 x 4): an input
  // error must not even resize them.
  RowMatrix<T> out = RowMatrix<T>::Constant(4, 4, kSentinel<T>), scores = out;
  ea::Vector<T> lse = ea::Vector<T>::Constant(4, kSentinel<T>);

  std::vector<BadCall> bad = {
      {"attention, K with 8 columns", [&] { ea::attention(Q, K8, V); }, {7, 8}, {}},
      {"attention_decomposed, K with 8 columns", [&] { ea::attention_decomposed(Q, K8, V); }, {7, 8}, {}},
      {"attention_scores, K with 8 columns", [&] { ea::attention_scores(Q, K8); }, {7, 8}, {}},
      {"attention_into, K with 8 columns", [&] { ea::attention_into(Q, K8, V, out); }, {7, 8}, {}},
      {"attention_into+lse, K with 8 columns", [&] { ea::attention_into(Q, K8, V, out, lse); }, {7, 8}, {}},
      {"attention_decomposed_into, K with 8 columns",
       [&] { ea::attention_decomposed_into(Q, K8, V, scores, out); },
       {7, 8},
       {}},
      {"attention_decomposed_into+lse, K with 8 columns",
       [&] { ea::attention_decomposed_into(Q, K8, V, scores, out, lse); },
       {7, 8},
       {}},
      {"attention_scores_into, K with 8 columns",
       [&] { ea::attention_scores_into(Q, K8, scores); },
       {7, 8},
       {}},
      {"attention, V with 6 rows", [&] { ea::attention(Q, K, V6); }, {5, 6}, {}},
      {"attention_decomposed, V with 6 rows", [&] { ea::attention_decomposed(Q, K, V6); }, {5, 6}, {}},
      {"attention_into, V with 6 rows", [&] { ea::attention_into(Q, K, V6, out); }, {5, 6}, {}},
      {"attention_into+lse, V with 6 rows", [&] { ea::attention_into(Q, K, V6, out, lse); }, {5, 6}, {}},
      {"attention_decomposed_into, V with 6 rows",
       [&] { ea::attention_decomposed_into(Q, K, V6, scores, out); },
       {5, 6},
       {}},
      {"attention_decomposed_into+lse, V with 6 rows",
       [&] { ea::attention_decomposed_into(Q, K, V6, scores, out, lse); },
       {5, 6},
       {}},
      // K^T instead of K: 7 x 5 against Q's 7 columns.
      {"attention, K transposed", [&] { ea::attention(Q, K.transpose(), V); }, {7, 5}, {}},
  };
  for (const auto& b : bad) check_bad_call(b);

  CHECK(out.rows() == 4);
  CHECK(out.cols() == 4);
  CHECK(all_sentinel(out));
  CHECK(scores.rows() == 4);
  CHECK(all_sentinel(scores));
  CHECK(lse.rows() == 4);
  CHECK(all_sentinel(lse));
}

TEST_CASE_TEMPLATE("errors: a non-finite or non-positive scale is named in the message", T, float, double) {
  Rng rng(2);
  const auto Q = random_matrix<RowMatrix<T>>(rng, kTq, kDk);
  const auto K = random_matrix<RowMatrix<T>>(rng, kTk, kDk);
  const auto V = random_matrix<RowMatrix<T>>(rng, kTk, kDv);
  RowMatrix<T> out = RowMatrix<T>::Constant(kTq, kDv, kSentinel<T>),
               scores = RowMatrix<T>::Constant(kTq, kTk, kSentinel<T>);
  ea::Vector<T> lse = ea::Vector<T>::Constant(kTq, kSentinel<T>);

  struct BadScale {
    double value;
    std::vector<long> numbers;
    WordGroups words;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<BadScale> scales = {
      {-2.5, {}, {{"-2.5"}}}, {0.0, {0}, {}},
      {-0.0, {0}, {}},        {std::numeric_limits<double>::quiet_NaN(), {}, {{"nan"}}},
      {inf, {}, {{"inf"}}},   {-inf, {}, {{"-inf"}}}};
  for (const auto& s : scales) {
    CAPTURE(s.value);
    for (const bool causal : {false, true}) {
      CAPTURE(causal);
      ea::Options opt;
      opt.causal = causal;
      opt.scale = s.value;
      std::vector<BadCall> bad = {
          {"attention", [&] { ea::attention(Q, K, V, opt); }, s.numbers, s.words},
          {"attention_decomposed", [&] { ea::attention_decomposed(Q, K, V, opt); }, s.numbers, s.words},
          {"attention_scores", [&] { ea::attention_scores(Q, K, opt); }, s.numbers, s.words},
          {"attention_into", [&] { ea::attention_into(Q, K, V, out, opt); }, s.numbers, s.words},
          {"attention_into+lse", [&] { ea::attention_into(Q, K, V, out, lse, opt); }, s.numbers, s.words},
          {"attention_decomposed_into", [&] { ea::attention_decomposed_into(Q, K, V, scores, out, opt); },
           s.numbers, s.words},
          {"attention_decomposed_into+lse",
           [&] { ea::attention_decomposed_into(Q, K, V, scores, out, lse, opt); }, s.numbers, s.words},
          {"attention_scores_into", [&] { ea::attention_scores_into(Q, K, scores, opt); }, s.numbers,
           s.words},
      };
      for (const auto& b : bad) check_bad_call(b);
    }
  }
  CHECK(all_sentinel(out));
  CHECK(all_sentinel(scores));
  CHECK(all_sentinel(lse));
}

TEST_CASE_TEMPLATE("errors: d_k = 0 with the default scale", T, float, double) {
  const RowMatrix<T> Q(kTq, 0), K(kTk, 0);
  const RowMatrix<T> V = RowMatrix<T>::Ones(kTk, kDv);
  RowMatrix<T> out = RowMatrix<T>::Constant(kTq, kDv, kSentinel<T>),
               scores = RowMatrix<T>::Constant(kTq, kTk, kSentinel<T>);
  // The message names Q's shape, 3 x 0.
  std::vector<BadCall> bad = {
      {"attention", [&] { ea::attention(Q, K, V); }, {3, 0}, {}},
      {"attention_decomposed", [&] { ea::attention_decomposed(Q, K, V); }, {3, 0}, {}},
      {"attention_scores", [&] { ea::attention_scores(Q, K); }, {3, 0}, {}},
      {"attention_into", [&] { ea::attention_into(Q, K, V, out); }, {3, 0}, {}},
      {"attention_decomposed_into", [&] { ea::attention_decomposed_into(Q, K, V, scores, out); }, {3, 0}, {}},
      {"attention_scores_into", [&] { ea::attention_scores_into(Q, K, scores); }, {3, 0}, {}},
  };
  for (const auto& b : bad) check_bad_call(b);
  CHECK(all_sentinel(out));
  CHECK(all_sentinel(scores));
}

TEST_CASE_TEMPLATE("errors: outputs of the wrong shape name the shape given and the one needed", T, float,
                   double) {
  Rng rng(3);
  const auto Q = random_matrix<RowMatrix<T>>(rng, kTq, kDk);
  const auto K = random_matrix<RowMatrix<T>>(rng, kTk, kDk);
  const auto V = random_matrix<RowMatrix<T>>(rng, kTk, kDv);
  using MapT = Eigen::Map<RowMatrix<T>>;
  using VecMap = Eigen::Map<ea::Vector<T>>;
  std::vector<T> buf_out(11 * 13, kSentinel<T>), buf_scores(17 * 19, kSentinel<T>), buf_lse(23, kSentinel<T>);
  // Right-shaped outputs too, to check that nothing is written when another output is wrong.
  RowMatrix<T> good_out = RowMatrix<T>::Constant(kTq, kDv, kSentinel<T>),
               good_scores = RowMatrix<T>::Constant(kTq, kTk, kSentinel<T>);
  ea::Vector<T> good_lse = ea::Vector<T>::Constant(kTq, kSentinel<T>);
  MapT out_11x13(buf_out.data(), 11, 13), scores_17x19(buf_scores.data(), 17, 19);
  VecMap lse_23(buf_lse.data(), 23);
  // A fixed-size matrix cannot be resized: 2 x 2 where 3 x 2 is needed.
  Eigen::Matrix<T, 2, 2> fixed_2x2 = Eigen::Matrix<T, 2, 2>::Constant(kSentinel<T>);
  // A block of a bigger matrix with the wrong number of rows: 4 x 2 where 3 x 2 is needed.
  RowMatrix<T> big = RowMatrix<T>::Constant(9, 9, kSentinel<T>);

  std::vector<BadCall> bad = {
      {"attention_into, out 11x13", [&] { ea::attention_into(Q, K, V, out_11x13); }, {11, 13, 3, 2}, {}},
      {"attention_into, fixed 2x2 out", [&] { ea::attention_into(Q, K, V, fixed_2x2); }, {2, 3}, {}},
      {"attention_into, 4x2 block out",
       [&] { ea::attention_into(Q, K, V, big.block(1, 1, 4, 2)); },
       {4, 3, 2},
       {}},
      {"attention_into+lse, out 11x13",
       [&] { ea::attention_into(Q, K, V, out_11x13, good_lse); },
       {11, 13, 3, 2},
       {}},
      {"attention_into+lse, lse 23", [&] { ea::attention_into(Q, K, V, good_out, lse_23); }, {23, 3}, {}},
      {"attention_decomposed_into, scores 17x19",
       [&] { ea::attention_decomposed_into(Q, K, V, scores_17x19, good_out); },
       {17, 19, 3, 5},
       {}},
      {"attention_decomposed_into, attn 11x13",
       [&] { ea::attention_decomposed_into(Q, K, V, good_scores, out_11x13); },
       {11, 13, 3, 2},
       {}},
      {"attention_decomposed_into+lse, lse 23",
       [&] { ea::attention_decomposed_into(Q, K, V, good_scores, good_out, lse_23); },
       {23, 3},
       {}},
      {"attention_scores_into, scores 17x19",
       [&] { ea::attention_scores_into(Q, K, scores_17x19); },
       {17, 19, 3, 5},
       {}},
      {"attention_scores_into, scores is a 3x2 block",
       [&] { ea::attention_scores_into(Q, K, big.block(0, 0, 3, 2)); },
       {3, 2, 5},
       {}},
  };
  for (const auto& b : bad) check_bad_call(b);

  for (const T x : buf_out) CHECK(x == kSentinel<T>);
  for (const T x : buf_scores) CHECK(x == kSentinel<T>);
  for (const T x : buf_lse) CHECK(x == kSentinel<T>);
  CHECK(all_sentinel(good_out));
  CHECK(all_sentinel(good_scores));
  CHECK(all_sentinel(good_lse));
  CHECK(all_sentinel(fixed_2x2));
  CHECK(all_sentinel(big));
}

TEST_CASE_TEMPLATE("errors: outputs that overlap an input or each other", T, float, double) {
  Rng rng(4);
  // [Q | 2 spare columns]: Q is the left 3 x 7 block of a 3 x 9 row-major matrix.
  RowMatrix<T> QQ = random_matrix<RowMatrix<T>>(rng, kTq, kDk + 2);
  const auto K = random_matrix<RowMatrix<T>>(rng, kTk, kDk);
  RowMatrix<T> V = random_matrix<RowMatrix<T>>(rng, kTk, kDv);
  auto Q = QQ.leftCols(kDk);
  const RowMatrix<T> QQ0 = QQ, V0 = V;
  std::vector<T> kbuf(K.data(), K.data() + K.size());  // K in a buffer that an output can alias
  const Eigen::Map<const RowMatrix<T>> Kmap(kbuf.data(), kTk, kDk);
  std::vector<T> kbuf0 = kbuf;

  std::vector<T> shared(64, kSentinel<T>);                                // one buffer for two outputs
  Eigen::Map<RowMatrix<T>> scores_in_shared(shared.data(), kTq, kTk);     // elements 0..14
  Eigen::Map<RowMatrix<T>> attn_in_shared(shared.data() + 10, kTq, kDv);  // elements 10..15
  Eigen::Map<ea::Vector<T>> lse_in_shared(shared.data() + 14, kTq);       // elements 14..16
  RowMatrix<T> good_out = RowMatrix<T>::Constant(kTq, kDv, kSentinel<T>),
               good_scores = RowMatrix<T>::Constant(kTq, kTk, kSentinel<T>);
  ea::Vector<T> good_lse = ea::Vector<T>::Constant(kTq, kSentinel<T>);

  const WordGroups w = {{"overlap"}};
  std::vector<BadCall> bad = {
      // Columns 6..7 of QQ: column 6 is Q's last column.
      {"attn overlaps Q", [&] { ea::attention_into(Q, K, V, QQ.middleCols(kDk - 1, kDv)); }, {3, 2, 7}, w},
      {"attn overlaps K",
       [&] { ea::attention_into(Q, Kmap, V, Eigen::Map<RowMatrix<T>>(kbuf.data() + 4, kTq, kDv)); },
       {3, 2, 5, 7},
       w},
      {"attn is V's storage",
       [&] { ea::attention_into(Q, K, V, Eigen::Map<RowMatrix<T>>(V.data(), kTq, kDv)); },
       {3, 2, 5},
       w},
      {"lse overlaps Q", [&] { ea::attention_into(Q, K, V, good_out, QQ.col(kDk - 1)); }, {3, 1, 7}, w},
      {"scores overlaps Q",
       [&] { ea::attention_scores_into(Q, K, Eigen::Map<RowMatrix<T>>(QQ.data() + 1, kTq, kTk)); },
       {3, 5, 7},
       w},
      {"scores overlaps attn",
       [&] { ea::attention_decomposed_into(Q, K, V, scores_in_shared, attn_in_shared); },
       {3, 5, 2},
       w},
      {"attn overlaps lse",
       [&] { ea::attention_decomposed_into(Q, K, V, good_scores, attn_in_shared, lse_in_shared); },
       {3, 2, 1},
       w},
      {"attention_into: out overlaps lse",
       [&] { ea::attention_into(Q, K, V, attn_in_shared, lse_in_shared); },
       {3, 2, 1},
       w},
  };
  for (const auto& b : bad) check_bad_call(b);

  // Nothing was written: not the outputs, not the inputs they alias.
  EA_CHECK_EQUAL(QQ, QQ0);
  EA_CHECK_EQUAL(V, V0);
  CHECK(kbuf == kbuf0);
  for (const T x : shared) CHECK(x == kSentinel<T>);
  CHECK(all_sentinel(good_out));
  CHECK(all_sentinel(good_scores));
  CHECK(all_sentinel(good_lse));
}

TEST_CASE_TEMPLATE("errors: an output that is the input itself", T, float, double) {
  // d_k = d_v = 2 and T_q = T_k = 3, so Q, K and V have the shape of ATTN.
  Rng rng(5);
  RowMatrix<T> Q = random_matrix<RowMatrix<T>>(rng, 3, 2), K = random_matrix<RowMatrix<T>>(rng, 3, 2),
               V = random_matrix<RowMatrix<T>>(rng, 3, 2);
  const RowMatrix<T> Q0 = Q, K0 = K, V0 = V;
  CHECK_THROWS_AS(ea::attention_into(Q, K, V, Q), std::invalid_argument);
  CHECK_THROWS_AS(ea::attention_into(Q, K, V, K), std::invalid_argument);
  CHECK_THROWS_AS(ea::attention_into(Q, K, V, V), std::invalid_argument);
  RowMatrix<T> S(3, 3);
  CHECK_THROWS_AS(ea::attention_decomposed_into(Q, K, V, S, V), std::invalid_argument);
  EA_CHECK_EQUAL(Q, Q0);
  EA_CHECK_EQUAL(K, K0);
  EA_CHECK_EQUAL(V, V0);
}

TEST_CASE_TEMPLATE("errors: a resizable output that is an input or another output throws before resizing", T,
                   float, double) {
  // Resizing such a matrix would free the memory that the other argument's view still points to
  // (this crashed before the front doors checked it).
  Rng rng(3);
  const RowMatrix<T> Q = random_matrix<RowMatrix<T>>(rng, 40, kDk),
                     V = random_matrix<RowMatrix<T>>(rng, 60, kDv);
  RowMatrix<T> K = random_matrix<RowMatrix<T>>(rng, 60, kDk);
  const RowMatrix<T> K_before = K;
  RowMatrix<T> X;  // empty: both outputs would resize it
  ea::Vector<T> lse;
  const auto throws_naming = [](const std::function<void()>& call, const std::string& words) {
    try {
      call();
      FAIL("no exception; expected one naming '" << words << "'");
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      CHECK_MESSAGE(what.find(words) != std::string::npos, what);
    }
  };
  throws_naming([&] { ea::attention_decomposed_into(Q, K, V, X, X); }, "scores is the same matrix as attn");
  throws_naming([&] { ea::attention_decomposed_into(Q, K, V, X, X, lse); },
                "scores is the same matrix as attn");
  throws_naming([&] { ea::attention_into(Q, K, V, K); }, "attn is the same matrix as K");
  throws_naming([&] { ea::attention_into(Q, K, V, K, lse); }, "attn is the same matrix as K");
  throws_naming([&] { ea::attention_scores_into(Q, K, K); }, "scores is the same matrix as K");
  throws_naming([&] { ea::attention_into(K.topRows(40), K, V, K); }, "attn overlaps Q");
  CHECK(X.size() == 0);
  CHECK(K == K_before);  // nothing resized, nothing written
}

TEST_CASE_TEMPLATE("errors: const Maps, Refs and blocks are writable outputs, as in Eigen", T, float,
                   double) {
  // Only a const Eigen::Matrix is refused (at compile time: test/compile_fail/const_output.cpp).
  Rng rng(4);
  const RowMatrix<T> Q = random_matrix<RowMatrix<T>>(rng, kTq, kDk),
                     K = random_matrix<RowMatrix<T>>(rng, kTk, kDk),
                     V = random_matrix<RowMatrix<T>>(rng, kTk, kDv);
  const RowMatrix<T> expected = ea::attention(Q, K, V);
  RowMatrix<T> storage = RowMatrix<T>::Zero(kTq, kDv);
  const Eigen::Map<RowMatrix<T>> map(storage.data(), kTq, kDv);
  ea::attention_into(Q, K, V, map);
  CHECK(storage == expected);
  storage.setZero();
  const Eigen::Ref<RowMatrix<T>> ref(storage);
  ea::attention_into(Q, K, V, ref);
  CHECK(storage == expected);
  storage.setZero();
  const auto block = storage.topLeftCorner(kTq, kDv);
  ea::attention_into(Q, K, V, block);
  CHECK(storage == expected);
  // Eigen's idiom: an output received as const MatrixBase<D>& and const_cast.
  storage.setZero();
  const auto write = [&](const auto& out) {
    using D = std::decay_t<decltype(out.derived())>;
    ea::attention_into(Q, K, V,
                       const_cast<Eigen::MatrixBase<D>&>(static_cast<const Eigen::MatrixBase<D>&>(out)));
  };
  write(storage);
  CHECK(storage == expected);
}

TEST_CASE("errors: a count of one is written in the singular") {
  const RowMatrix<float> Q = RowMatrix<float>::Ones(3, 2), K = RowMatrix<float>::Ones(2, 2);
  const RowMatrix<float> K1 = RowMatrix<float>::Ones(2, 1), V1 = RowMatrix<float>::Ones(1, 2);
  CHECK(invalid_argument_message([&] { (void)ea::attention(Q, K1, K); }) ==
        "EigenAttention::attention: K has 1 column but Q has 2 (d_k must match); Q is 3x2, K is 2x1");
  CHECK(invalid_argument_message([&] { (void)ea::attention(Q, K, V1); }) ==
        "EigenAttention::attention: V has 1 row but K has 2 (T_k must match); K is 2x2, V is 1x2");
}

}  // namespace test_errors
