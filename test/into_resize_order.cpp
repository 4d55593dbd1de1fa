// SPDX-License-Identifier: MIT
// The one _into contract: an output that would be resized is resized only once every input and
// every other output has passed the checks. For every single-head call with two outputs or more,
// a bad output that keeps its storage (a Map of the wrong shape, or one overlapping an input)
// throws, naming it, and leaves the resizable outputs as they were.
#include <doctest/doctest.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <EigenAttention/EigenAttention.hpp>

namespace ea = EigenAttention;

namespace {

template <typename T>
using M = ea::RowMatrix<T>;
template <typename T>
using Map = Eigen::Map<M<T>>;

// The message of what `call` throws (std::invalid_argument), or "" when it throws nothing.
std::string thrown(const std::function<void()>& call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE_TEMPLATE("into resize order: a bad fixed output throws before any other output is resized", T,
                   float, double) {
  const Eigen::Index tq = 6, tk = 9, dk = 4, dv = 3;
  M<T> Q = M<T>::Random(tq, dk);
  const M<T> K = M<T>::Random(tk, dk), V = M<T>::Random(tk, dv), dO = M<T>::Random(tq, dv);
  std::vector<T> wrong(200, T(0));
  Map<T> bad_lse(wrong.data(), tq + 1, 1);      // one row too many
  Map<T> bad_attn(wrong.data(), tq, dv + 1);    // one column too many
  Map<T> bad_scores(wrong.data(), tq, tk - 1);  // one column too few
  Map<T> lse_on_q(Q.data(), tq, 1);             // the right shape, over Q
  const auto check = [](const std::string& what, const char* api, const char* name, const auto& untouched) {
    CAPTURE(what);
    CHECK(what.find(std::string("EigenAttention::") + api) != std::string::npos);
    CHECK(what.find(name) != std::string::npos);
    for (const auto* m : untouched) CHECK(m->size() == 0);
  };

  SUBCASE("attention_into(attn, lse)") {
    M<T> attn;
    check(thrown([&] { ea::attention_into(Q, K, V, attn, bad_lse); }), "attention_into", "lse is",
          std::vector<const M<T>*>{&attn});
    check(thrown([&] { ea::attention_into(Q, K, V, attn, lse_on_q); }), "attention_into", "output lse",
          std::vector<const M<T>*>{&attn});
    M<T> lse;
    check(thrown([&] { ea::attention_into(Q, K, V, bad_attn, lse); }), "attention_into", "attn is",
          std::vector<const M<T>*>{&lse});
  }
  SUBCASE("attention_decomposed_into(scores, attn[, lse])") {
    M<T> scores, attn;
    check(thrown([&] { ea::attention_decomposed_into(Q, K, V, scores, bad_attn); }),
          "attention_decomposed_into", "attn is", std::vector<const M<T>*>{&scores});
    check(thrown([&] { ea::attention_decomposed_into(Q, K, V, bad_scores, attn); }),
          "attention_decomposed_into", "scores is", std::vector<const M<T>*>{&attn});
    check(thrown([&] { ea::attention_decomposed_into(Q, K, V, scores, attn, bad_lse); }),
          "attention_decomposed_into", "lse is", std::vector<const M<T>*>{&scores, &attn});
    check(thrown([&] { ea::attention_decomposed_into(Q, K, V, scores, attn, lse_on_q); }),
          "attention_decomposed_into", "output lse", std::vector<const M<T>*>{&scores, &attn});
  }
  SUBCASE("attention_backward_into(dq, dk, dv)") {
    M<T> attn, lse;
    ea::attention_into(Q, K, V, attn, lse);
    M<T> gq, gk;
    Map<T> bad_dv(wrong.data(), tk, dv + 1);
    check(thrown([&] { ea::attention_backward_into(Q, K, V, attn, lse, dO, gq, gk, bad_dv); }),
          "attention_backward_into", "dv is", std::vector<const M<T>*>{&gq, &gk});
    Map<T> dq_on_q(Q.data(), tq, dk);  // the right shape, over Q
    M<T> gv;
    check(thrown([&] { ea::attention_backward_into(Q, K, V, attn, lse, dO, dq_on_q, gk, gv); }),
          "attention_backward_into", "output dq", std::vector<const M<T>*>{&gk, &gv});
    const M<T> d_scores = M<T>::Random(tq, tk);
    check(thrown([&] { ea::attention_backward_into(Q, K, V, attn, lse, dO, d_scores, gq, gk, bad_dv); }),
          "attention_backward_into", "dv is", std::vector<const M<T>*>{&gq, &gk});
  }
  SUBCASE("the masks are checked before anything is resized") {
    M<T> attn, lse;
    const M<T> bias = M<T>::Random(tq, tk + 1);
    ea::Masks<T> masks;
    masks.bias = ea::BroadcastView<T>::of(bias);
    check(thrown([&] { ea::attention_into(Q, K, V, attn, lse, {}, masks); }), "attention_into", "bias is",
          std::vector<const M<T>*>{&attn, &lse});
  }
}
