// SPDX-License-Identifier: MIT
// The single-head calls take Masks after Options, as the multi-head calls do: each gives the bits
// of attention_heads_into (and its backward) on the one-head views of the same matrices, a key
// length is attention over that many keys, and bad masks are rejected naming them.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include <EigenAttention/EigenAttention.hpp>

namespace test_masks_single_head {

namespace ea = EigenAttention;

namespace {

template <typename T>
using M = ea::RowMatrix<T>;

template <typename T>
M<T> filled(Eigen::Index rows, Eigen::Index cols, std::uint32_t seed) {
  M<T> m(rows, cols);
  std::uint32_t s = seed * 2654435761u + 7;
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    s = s * 1664525u + 1013904223u;
    m.data()[i] = static_cast<T>(static_cast<float>(static_cast<int>(s >> 24) - 128) / 64.0f);
  }
  return m;
}

template <class A, class B>
bool same_bits(const A& a, const B& b) {
  using S = typename A::Scalar;
  static_assert(std::is_same_v<S, typename B::Scalar>);
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (Eigen::Index i = 0; i < a.rows(); ++i)
    for (Eigen::Index j = 0; j < a.cols(); ++j)
      if (std::memcmp(&a(i, j), &b(i, j), sizeof(S)) != 0) return false;
  return true;
}

template <typename T>
ea::HeadsView<const T> one(const M<T>& m) {
  return ea::HeadsView<const T>::single(m);
}
template <typename T>
ea::HeadsView<T> one_out(M<T>& m) {
  return ea::HeadsView<T>::single(m);
}

}  // namespace

TEST_CASE_TEMPLATE("single-head masks: every call equals attention_heads_into on one head, bit for bit", T,
                   float, double, Eigen::bfloat16, Eigen::half) {
  using L = ea::ComputeScalar<T>;
  const Eigen::Index tq = 5, tk = 9, dk = 4, dv = 3;
  const M<T> Q = filled<T>(tq, dk, 1), K = filled<T>(tk, dk, 2), V = filled<T>(tk, dv, 3),
             bias = filled<T>(tq, tk, 4);
  Eigen::Matrix<bool, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> mask(tq, tk);
  for (Eigen::Index i = 0; i < tq; ++i)
    for (Eigen::Index j = 0; j < tk; ++j) mask(i, j) = (i + 2 * j) % 5 != 0;
  mask.row(3).setConstant(false);  // a row that sees no key: zeros, LSE -inf
  const std::int64_t key_length = 7;
  const T slope = T(0.25f);
  ea::Masks<T> masks;
  masks.mask = ea::BroadcastView<bool>::of(mask);
  masks.bias = ea::BroadcastView<T>::of(bias);
  masks.key_lengths = &key_length;
  masks.alibi_slopes = &slope;
  ea::Options opt;
  opt.causal = true;
  opt.alignment = ea::CausalAlignment::BottomRight;

  // The fused and the decomposed calls may differ in the last bit (the decomposed forms SCORES
  // first): each is compared with its multi-head twin.
  M<T> ref_attn(tq, dv), ref_scores(tq, tk), ref_dec_attn(tq, dv);
  M<L> ref_lse(tq, 1), ref_dec_lse(tq, 1);
  ea::attention_heads_into(one(Q), one(K), one(V), one_out(ref_attn), one_out(ref_lse), opt, masks);
  ea::attention_heads_decomposed_into(one(Q), one(K), one(V), one_out(ref_scores), one_out(ref_dec_attn),
                                      one_out(ref_dec_lse), opt, masks);
  // The masks are honoured: row 3 sees nothing, keys from the key length on get no weight.
  CHECK(ref_attn.row(3).isZero());
  CHECK(ref_scores.row(3).isZero());
  CHECK(ref_scores.rightCols(tk - key_length).isZero());

  CHECK(same_bits(ea::attention(Q, K, V, opt, masks), ref_attn));
  M<T> attn;
  Eigen::Matrix<L, Eigen::Dynamic, 1> lse;
  ea::attention_into(Q, K, V, attn, lse, opt, masks);
  CHECK(same_bits(attn, ref_attn));
  CHECK(same_bits(lse, ref_lse));
  const auto r = ea::attention_decomposed(Q, K, V, opt, masks);
  CHECK(same_bits(r.scores, ref_scores));
  CHECK(same_bits(r.attn, ref_dec_attn));
  CHECK(same_bits(r.lse, ref_dec_lse));
  M<T> scores = M<T>::Constant(tq, tk, T(7.0f));  // padded keys' weights are written (zero), not left
  ea::attention_decomposed_into(Q, K, V, scores, attn, opt, masks);
  CHECK(same_bits(scores, ref_scores));
  CHECK(same_bits(attn, ref_dec_attn));
  CHECK(same_bits(ea::attention_scores(Q, K, opt, masks), ref_scores));
  scores.setConstant(T(7.0f));
  ea::attention_scores_into(Q, K, scores, opt, masks);
  CHECK(same_bits(scores, ref_scores));

  // The backward, against attention_heads_backward_into.
  const M<T> d_attn = filled<T>(tq, dv, 5), d_scores = filled<T>(tq, tk, 6);
  M<T> dq(tq, dk), dk_(tk, dk), dv_(tk, dv);
  ea::attention_heads_backward_into(one(Q), one(K), one(V), one(ref_attn),
                                    ea::HeadsView<const L>::single(ref_lse), one(d_attn), one(d_scores),
                                    one_out(dq), one_out(dk_), one_out(dv_), {}, opt, masks);
  const auto g = ea::attention_backward(Q, K, V, ref_attn, ref_lse, d_attn, d_scores, opt, masks);
  CHECK(same_bits(g.dq, dq));
  CHECK(same_bits(g.dk, dk_));
  CHECK(same_bits(g.dv, dv_));
  M<T> gq, gk, gv;
  ea::attention_heads_backward_into(one(Q), one(K), one(V), one(ref_attn),
                                    ea::HeadsView<const L>::single(ref_lse), one(d_attn), one_out(dq),
                                    one_out(dk_), one_out(dv_), opt, masks);
  ea::attention_backward_into(Q, K, V, ref_attn, ref_lse, d_attn, gq, gk, gv, opt, masks);
  CHECK(same_bits(gq, dq));
  CHECK(same_bits(gk, dk_));
  CHECK(same_bits(gv, dv_));
}

TEST_CASE_TEMPLATE("single-head masks: a key length is attention over that many keys", T, float, double) {
  const M<T> Q = filled<T>(4, 8, 7), K = filled<T>(10, 8, 8), V = filled<T>(10, 5, 9);
  for (const std::int64_t n : {std::int64_t(0), std::int64_t(1), std::int64_t(6), std::int64_t(10)}) {
    ea::Masks<T> masks;
    masks.key_lengths = &n;
    const M<T> got = ea::attention(Q, K, V, {}, masks);
    if (n == 0) {
      CHECK(got.isZero());
    } else {
      const M<T> want = ea::attention(Q, K.topRows(n), V.topRows(n));
      // Different tilings of the same keys: equal within a few roundings.
      CHECK((got - want).cwiseAbs().maxCoeff() <= T(16) * Eigen::NumTraits<T>::epsilon());
    }
  }
}

TEST_CASE("single-head masks: bad masks are rejected, naming them, before any output is resized") {
  const M<float> Q = filled<float>(3, 4, 1), K = filled<float>(5, 4, 2), V = filled<float>(5, 2, 3);
  M<float> wrong = filled<float>(3, 4, 4);
  ea::Masks<float> masks;
  masks.bias = ea::BroadcastView<float>::of(wrong);  // 3 x 4, must be 3 x 5
  M<float> attn;
  std::string what;
  try {
    ea::attention_into(Q, K, V, attn, {}, masks);
  } catch (const std::invalid_argument& e) {
    what = e.what();
  }
  CAPTURE(what);
  CHECK(what.find("EigenAttention::attention_into") != std::string::npos);
  CHECK(what.find("bias") != std::string::npos);
  CHECK(attn.size() == 0);  // not resized

  // A resizable output whose storage is the bias would free what the call reads.
  M<float> bias = filled<float>(3, 5, 5);
  masks.bias = ea::BroadcastView<float>::of(bias);
  what.clear();
  try {
    ea::attention_into(Q, K, V, bias, {}, masks);
  } catch (const std::invalid_argument& e) {
    what = e.what();
  }
  CAPTURE(what);
  CHECK(what.find("attn overlaps masks.bias") != std::string::npos);
  CHECK(bias.rows() == 3);
  CHECK(bias.cols() == 5);

  const std::int64_t too_long = 6;
  ea::Masks<float> lengths;
  lengths.key_lengths = &too_long;
  CHECK_THROWS_AS(ea::attention(Q, K, V, {}, lengths), std::invalid_argument);
}

}  // namespace test_masks_single_head
