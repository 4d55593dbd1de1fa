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

namespace test_into_resize_order {

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

TEST_CASE_TEMPLATE("into resize order: decode's attn is not resized when lse is bad, nor lse when attn is", T,
                   float, double) {
  const Eigen::Index H = 4, Hkv = 2, dk = 8, dv = 5, tk = 20, tq = 3;
  ea::PagedKVCache<T> cache(Hkv, dk, dv, /*page_size=*/16, /*capacity_tokens=*/64);
  const auto s = cache.create();
  cache.append(s, M<T>::Random(tk, Hkv * dk), M<T>::Random(tk, Hkv * dv));
  M<T> Qm = M<T>::Random(tq, H * dk);
  const auto q = ea::HeadsView<const T>::side_by_side(Qm, dk);
  const std::int64_t cu[2] = {0, tq};
  std::vector<T> wrong(400, T(0));
  Map<T> bad_lse(wrong.data(), tq, H + 1);        // a column too many (T_q x H, heads side by side)
  Map<T> bad_attn(wrong.data(), tq + 1, H * dv);  // a row too many
  auto bad_lse_view = ea::HeadsView<T>::bhtd(wrong.data(), 1, H, tq + 1, 1);
  auto lse_on_q = ea::HeadsView<T>::bhtd(Qm.data(), 1, H, tq, 1);  // the right shape, over Q
  const auto check = [](const std::string& what, const char* name, const auto& untouched) {
    CAPTURE(what);
    CHECK(what.find("EigenAttention::attention_decode_into") != std::string::npos);
    CHECK(what.find(name) != std::string::npos);
    for (const auto* m : untouched) CHECK(m->size() == 0);
  };
  SUBCASE("cache: resizable attn, bad fixed lse (a Map, a view, a view over Q)") {
    M<T> attn;
    check(thrown([&] { ea::attention_decode_into(cache, &s, 1, q, cu, attn, bad_lse); }), "lse is",
          std::vector<const M<T>*>{&attn});
    check(thrown([&] { ea::attention_decode_into(cache, &s, 1, q, cu, attn, bad_lse_view); }), "lse is",
          std::vector<const M<T>*>{&attn});
    check(thrown([&] { ea::attention_decode_into(cache, &s, 1, q, cu, attn, lse_on_q); }), "output lse",
          std::vector<const M<T>*>{&attn});
  }
  SUBCASE("cache: bad fixed attn, resizable lse") {
    M<T> lse;
    check(thrown([&] { ea::attention_decode_into(cache, &s, 1, q, cu, bad_attn, lse); }), "attn is",
          std::vector<const M<T>*>{&lse});
  }
  SUBCASE("view of pages: resizable attn, bad fixed lse") {
    const auto pages = cache.pages(s);
    const std::int64_t length = tk;
    const auto kv =
        ea::PagedKVView<T>::hnd(cache.key_pages(), cache.value_pages(), cache.num_pages(), 16, Hkv, dk, dv,
                                pages.data(), static_cast<std::ptrdiff_t>(pages.size()), &length, 1);
    M<T> attn;
    check(thrown([&] { ea::attention_decode_into(kv, q, cu, attn, bad_lse); }), "lse is",
          std::vector<const M<T>*>{&attn});
  }
  SUBCASE("both resizable: sized T_q x (H d_v) and T_q x H, heads side by side") {
    M<T> attn, lse;
    ea::attention_decode_into(cache, &s, 1, q, cu, attn, lse);
    CHECK(attn.rows() == tq);
    CHECK(attn.cols() == H * dv);
    CHECK(lse.rows() == tq);
    CHECK(lse.cols() == H);
  }
}

}  // namespace test_into_resize_order
