// SPDX-License-Identifier: MIT
// Every bad input to the multi-head calls throws std::invalid_argument whose message names what
// is wrong (the offending number, and for options and masks the word), and no output is written
// (every output is filled with a sentinel first and checked afterwards).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "common.hpp"
#include "errors.hpp"
#include "multihead_golden.hpp"
#include "random.hpp"

namespace test_multihead_errors {

using namespace ea_test;

namespace {

template <class T>
constexpr T kSentinel = T(1234.5);

// The valid problem the bad calls start from; every size differs from the others and from the
// bad values below, so a number in a message says which size it names.
constexpr Eigen::Index kB = 2, kH = 12, kHkv = 4, kTq = 5, kTk = 7, kDk = 9, kDv = 3;

const std::vector<std::string> kMaskWord = {"mask"};
const std::vector<std::string> kBiasWord = {"bias"};
const std::vector<std::string> kWindowWord = {"window"};
const std::vector<std::string> kSoftcapWord = {"softcap", "soft-cap", "soft cap"};
const std::vector<std::string> kLengthWord = {"length"};

}  // namespace

TEST_CASE_TEMPLATE(
    "multihead errors: attention_heads_into and _decomposed reject bad shapes, masks and options", T, float,
    double) {
  Rng rng(3);
  const auto L = mh::Layout::BHTD;
  auto random_buffer = [&](Eigen::Index b, Eigen::Index h, Eigen::Index t, Eigen::Index d) {
    Array4 a(b, h, t, d);
    for (auto& x : a.v) x = static_cast<T>(rng.normal());
    return HeadsBuffer<T>(a, L);
  };
  const HeadsBuffer<T> Q = random_buffer(kB, kH, kTq, kDk), K = random_buffer(kB, kHkv, kTk, kDk),
                       V = random_buffer(kB, kHkv, kTk, kDv);
  // wrong inputs
  const HeadsBuffer<T> K_b14 = random_buffer(14, kHkv, kTk, kDk), V_b14 = random_buffer(14, kHkv, kTk, kDv);
  const HeadsBuffer<T> K_dk10 = random_buffer(kB, kHkv, kTk, 10);
  const HeadsBuffer<T> V_t11 = random_buffer(kB, kHkv, 11, kDv);
  const HeadsBuffer<T> V_h6 = random_buffer(kB, 6, kTk, kDv);
  const HeadsBuffer<T> K_h5 = random_buffer(kB, 5, kTk, kDk), V_h5 = random_buffer(kB, 5, kTk, kDv);
  // outputs, right and wrong, all sentinels
  auto sentinel = [&](Eigen::Index b, Eigen::Index h, Eigen::Index t, Eigen::Index d) {
    return HeadsBuffer<T>(L, b, h, t, d, kSentinel<T>);
  };
  HeadsBuffer<T> out = sentinel(kB, kH, kTq, kDv), lse = sentinel(kB, kH, kTq, 1);
  HeadsBuffer<T> scores = sentinel(kB, kH, kTq, kTk), avg = sentinel(kB, 1, kTq, kTk);
  HeadsBuffer<T> out_b13 = sentinel(13, kH, kTq, kDv), out_h8 = sentinel(kB, 8, kTq, kDv),
                 out_t15 = sentinel(kB, kH, 15, kDv), out_d16 = sentinel(kB, kH, kTq, 16),
                 lse_t17 = sentinel(kB, kH, 17, 1), scores_d18 = sentinel(kB, kH, kTq, 18),
                 avg_t19 = sentinel(kB, 1, 19, kTk), avg_h12 = sentinel(kB, kH, kTq, kTk);
  const std::vector<HeadsBuffer<T>*> outputs = {&out,     &lse,        &scores,  &avg,
                                                &out_b13, &out_h8,     &out_t15, &out_d16,
                                                &lse_t17, &scores_d18, &avg_t19, &avg_h12};
  const auto untouched = [&] {
    for (const auto* o : outputs)
      if (!o->all_equal_to(kSentinel<T>)) return false;
    return true;
  };

  // Masks and biases: the right ones and wrong ones (a mask that hides every third element, never
  // a whole row of 7 keys; a random bias).
  std::unique_ptr<bool[]> mask_data(new bool[30 * 30 * 30]());
  for (Eigen::Index i = 0; i < 30 * 30 * 30; ++i) mask_data[i] = i % 3 != 0;
  std::vector<T> bias_data(30 * 30 * 30);
  for (auto& x : bias_data) x = static_cast<T>(rng.normal());
  auto mask_view = [&](Eigen::Index b, Eigen::Index h, Eigen::Index r, Eigen::Index c) {
    return mh::BroadcastView<bool>{mask_data.get(),    b, h, r, c, b == 1 ? 0 : h * r * c,
                                   h == 1 ? 0 : r * c, c, 1};
  };
  auto bias_view = [&](Eigen::Index b, Eigen::Index h, Eigen::Index r, Eigen::Index c) {
    return mh::BroadcastView<T>{bias_data.data(),   b, h, r, c, b == 1 ? 0 : h * r * c,
                                h == 1 ? 0 : r * c, c, 1};
  };
  auto with_mask = [&](Eigen::Index b, Eigen::Index h, Eigen::Index r, Eigen::Index c) {
    mh::Masks<T> m;
    m.mask = mask_view(b, h, r, c);
    return m;
  };
  auto with_bias = [&](Eigen::Index b, Eigen::Index h, Eigen::Index r, Eigen::Index c) {
    mh::Masks<T> m;
    m.bias = bias_view(b, h, r, c);
    return m;
  };
  // A broadcast view's elements as the reference's [b, h, r, c] array.
  auto as_array = [](const auto& view) {
    Array4 a(view.batch, view.heads, view.rows, view.cols);
    for (Eigen::Index b = 0; b < view.batch; ++b)
      for (Eigen::Index h = 0; h < view.heads; ++h)
        for (Eigen::Index r = 0; r < view.rows; ++r)
          for (Eigen::Index c = 0; c < view.cols; ++c)
            a(b, h, r, c) = static_cast<long double>(view.data[b * view.batch_stride + h * view.head_stride +
                                                               r * view.row_stride + c * view.col_stride]);
    return a;
  };
  // The valid calls' answers: OUT, LSE, SCORES and the averaged weights against the long-double
  // reference of `spec`, within the budget of T.
  const Array4 Qa = Q.to_array(), Ka = K.to_array(), Va = V.to_array();
  auto check_values = [&](const MultiHeadSpec& spec, const HeadsBuffer<T>* o, const HeadsBuffer<T>* l,
                          const HeadsBuffer<T>* s, const HeadsBuffer<T>* a, const std::string& what) {
    CAPTURE(what);
    const MultiHeadReference ref = reference_heads(Qa, Ka, Va, spec);
    if (o) check_heads_near(o->cview(), ref.out, attn_budget<T>(ref), "OUT");
    if (l) check_heads_near(l->cview(), ref.lse, lse_budget<T>(ref), "LSE");
    if (s) check_heads_near(s->cview(), ref.scores, scores_budget<T>(ref), "SCORES");
    if (a) check_heads_near(a->cview(), ref.avg_scores, avg_budget<T>(ref), "averaged SCORES");
  };
  const std::vector<std::int64_t> lengths_negative = {3, -15}, lengths_too_long = {3, 19};
  auto with_lengths = [&](const std::vector<std::int64_t>& l) {
    mh::Masks<T> m;
    m.key_lengths = l.data();
    return m;
  };

  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    mh::Options opt;
    opt.kernel = kernel;

    // The base problem is valid, in every form and with every valid broadcast.
    {
      HeadsBuffer<T> o = sentinel(kB, kH, kTq, kDv), l = sentinel(kB, kH, kTq, 1),
                     s = sentinel(kB, kH, kTq, kTk), a = sentinel(kB, 1, kTq, kTk);
      CHECK_NOTHROW(mh::attention_heads_into(Q.cview(), K.cview(), V.cview(), o.view(), l.view(), opt));
      check_values({}, &o, &l, nullptr, nullptr, "attention_heads_into");
      CHECK_NOTHROW(mh::attention_heads_decomposed_into(Q.cview(), K.cview(), V.cview(), s.view(), o.view(),
                                                        l.view(), a.view(), opt));
      check_values({}, &o, &l, &s, &a, "attention_heads_decomposed_into");
      for (const Eigen::Index b : {Eigen::Index(1), kB})
        for (const Eigen::Index h : {Eigen::Index(1), kH}) {
          CAPTURE(b);
          CAPTURE(h);
          MultiHeadSpec spec;
          CHECK_NOTHROW(mh::attention_heads_into(Q.cview(), K.cview(), V.cview(), o.view(), opt,
                                                 with_mask(b, h, kTq, kTk)));
          spec.mask = as_array(mask_view(b, h, kTq, kTk));
          check_values(spec, &o, nullptr, nullptr, nullptr, "with a mask");
          CHECK_NOTHROW(mh::attention_heads_into(Q.cview(), K.cview(), V.cview(), o.view(), opt,
                                                 with_bias(b, h, kTq, kTk)));
          spec.mask.reset();
          spec.bias = as_array(bias_view(b, h, kTq, kTk));
          check_values(spec, &o, nullptr, nullptr, nullptr, "with a bias");
        }
      mh::Options edge = opt;
      edge.window_left = 0;
      edge.window_right = 0;
      edge.softcap = 1e-3;
      const std::vector<std::int64_t> lengths_edge = {0, kTk};
      CHECK_NOTHROW(mh::attention_heads_into(Q.cview(), K.cview(), V.cview(), o.view(), l.view(), edge,
                                             with_lengths(lengths_edge)));
      // Sequence 0 sees no key (zeros, LSE -inf); sequence 1 only its diagonal key, capped.
      MultiHeadSpec spec;
      spec.window_left = spec.window_right = 0;
      spec.softcap = 1e-3;  // the double the call gets
      spec.key_lengths = lengths_edge;
      check_values(spec, &o, &l, nullptr, nullptr, "window 0, soft-cap 1e-3, key lengths 0 and all");
    }

    auto heads = [&](const HeadsBuffer<T>& k, const HeadsBuffer<T>& v, HeadsBuffer<T>& o,
                     const mh::Options& op = {}, const mh::Masks<T>& m = {}) {
      mh::Options o2 = op;
      o2.kernel = kernel;
      const auto kv = k.cview(), vv = v.cview();
      const auto ov = o.view(), lv = lse.view();
      const auto qv = Q.cview();
      return [=] { mh::attention_heads_into(qv, kv, vv, ov, lv, o2, m); };
    };
    auto opt_with = [&](auto set) {
      mh::Options o = opt;
      set(o);
      return o;
    };
    const double nan = std::numeric_limits<double>::quiet_NaN(),
                 inf = std::numeric_limits<double>::infinity();

    const std::vector<BadCall> bad = {
        // inconsistent sizes between Q, K, V and the outputs
        {"K and V with batch 14", heads(K_b14, V_b14, out), {2, 14}, {}},
        {"V with batch 14", heads(K, V_b14, out), {14}, {}},
        {"K with d_k 10", heads(K_dk10, V, out), {9, 10}, {}},
        {"V with 11 tokens", heads(K, V_t11, out), {7, 11}, {}},
        {"V with 6 heads, K with 4", heads(K, V_h6, out), {4, 6}, {}},
        {"H = 12 not a multiple of H_kv = 5", heads(K_h5, V_h5, out), {12, 5}, {}},
        {"out with batch 13", heads(K, V, out_b13), {13}, {}},
        {"out with 8 heads", heads(K, V, out_h8), {8}, {}},
        {"out with 15 tokens", heads(K, V, out_t15), {15}, {}},
        {"out with dim 16", heads(K, V, out_d16), {16}, {}},
        {"lse with 17 tokens",
         [&] { mh::attention_heads_into(Q.cview(), K.cview(), V.cview(), out.view(), lse_t17.view(), opt); },
         {17},
         {}},
        {"scores with 18 keys",
         [&] {
           mh::attention_heads_decomposed_into(Q.cview(), K.cview(), V.cview(), scores_d18.view(), out.view(),
                                               lse.view(), avg.view(), opt);
         },
         {18},
         {}},
        {"average scores with 19 tokens",
         [&] {
           mh::attention_heads_decomposed_into(Q.cview(), K.cview(), V.cview(), scores.view(), out.view(),
                                               lse.view(), avg_t19.view(), opt);
         },
         {19},
         {}},
        {"average scores with 12 heads (must be 1)",
         [&] {
           mh::attention_heads_decomposed_into(Q.cview(), K.cview(), V.cview(), scores.view(), out.view(),
                                               lse.view(), avg_h12.view(), opt);
         },
         {12},
         {}},
        {"decomposed, K with d_k 10",
         [&] {
           mh::attention_heads_decomposed_into(Q.cview(), K_dk10.cview(), V.cview(), scores.view(),
                                               out.view(), lse.view(), avg.view(), opt);
         },
         {9, 10},
         {}},
        {"decomposed, H = 12 not a multiple of H_kv = 5",
         [&] {
           mh::attention_heads_decomposed_into(Q.cview(), K_h5.cview(), V_h5.cview(), scores.view(),
                                               out.view(), lse.view(), avg.view(), opt);
         },
         {12, 5},
         {}},
        // masks and biases of the wrong shape
        {"mask with 20 query rows", heads(K, V, out, opt, with_mask(1, 1, 20, kTk)), {20}, {kMaskWord}},
        {"mask with 21 key columns", heads(K, V, out, opt, with_mask(kB, kH, kTq, 21)), {21}, {kMaskWord}},
        {"mask with batch 22", heads(K, V, out, opt, with_mask(22, 1, kTq, kTk)), {22}, {kMaskWord}},
        {"mask with 23 heads", heads(K, V, out, opt, with_mask(1, 23, kTq, kTk)), {23}, {kMaskWord}},
        {"mask with H_kv = 4 heads (must be 1 or H)",
         heads(K, V, out, opt, with_mask(kB, kHkv, kTq, kTk)),
         {},
         {kMaskWord}},
        {"bias with 24 query rows", heads(K, V, out, opt, with_bias(kB, 1, 24, kTk)), {24}, {kBiasWord}},
        {"bias with 25 key columns", heads(K, V, out, opt, with_bias(1, 1, kTq, 25)), {25}, {kBiasWord}},
        {"bias with batch 26", heads(K, V, out, opt, with_bias(26, kH, kTq, kTk)), {26}, {kBiasWord}},
        {"bias with 27 heads", heads(K, V, out, opt, with_bias(kB, 27, kTq, kTk)), {27}, {kBiasWord}},
        {"decomposed, bias with 25 key columns",
         [&] {
           mh::attention_heads_decomposed_into(Q.cview(), K.cview(), V.cview(), scores.view(), out.view(),
                                               lse.view(), avg.view(), opt, with_bias(1, 1, kTq, 25));
         },
         {25},
         {kBiasWord}},
        // options
        {"window_left -17",
         heads(K, V, out, opt_with([](mh::Options& o) { o.window_left = -17; })),
         {17},
         {kWindowWord}},
        {"window_right -23",
         heads(K, V, out, opt_with([](mh::Options& o) { o.window_right = -23; })),
         {23},
         {kWindowWord}},
        {"softcap -2.5",
         heads(K, V, out, opt_with([](mh::Options& o) { o.softcap = -2.5; })),
         {},
         {kSoftcapWord, {"2.5"}}},
        {"softcap NaN",
         heads(K, V, out, opt_with([&](mh::Options& o) { o.softcap = nan; })),
         {},
         {kSoftcapWord}},
        {"softcap +inf",
         heads(K, V, out, opt_with([&](mh::Options& o) { o.softcap = inf; })),
         {},
         {kSoftcapWord}},
        {"decomposed, window_left -17",
         [&] {
           mh::Options o = opt;
           o.window_left = -17;
           mh::attention_heads_decomposed_into(Q.cview(), K.cview(), V.cview(), scores.view(), out.view(),
                                               lse.view(), avg.view(), o);
         },
         {17},
         {kWindowWord}},
        // key lengths
        {"key length -15", heads(K, V, out, opt, with_lengths(lengths_negative)), {15}, {kLengthWord}},
        {"key length 19 > T_k = 7",
         heads(K, V, out, opt, with_lengths(lengths_too_long)),
         {19, 7},
         {kLengthWord}},
    };
    for (const auto& b : bad) check_bad_call(b, untouched);
  }
}

TEST_CASE_TEMPLATE("multihead errors: outputs that overlap an input or each other", T, float, double) {
  Rng rng(5);
  const auto L = mh::Layout::BHTD;
  // One buffer holding Q, then K, then V, then room for SCORES; the outputs are placed over parts
  // of it.
  const Eigen::Index nq = kB * kH * kTq * kDk, nk = kB * kHkv * kTk * kDk, nv = kB * kHkv * kTk * kDv;
  std::vector<T> inputs(static_cast<size_t>(nq + nk + nv + kB * kH * kTq * kTk));
  for (auto& x : inputs) x = static_cast<T>(rng.normal());
  const std::vector<T> original = inputs;
  const auto Q = mh::HeadsView<const T>::bhtd(inputs.data(), kB, kH, kTq, kDk);
  const auto K = mh::HeadsView<const T>::bhtd(inputs.data() + nq, kB, kHkv, kTk, kDk);
  const auto V = mh::HeadsView<const T>::bhtd(inputs.data() + nq + nk, kB, kHkv, kTk, kDv);
  HeadsBuffer<T> out(L, kB, kH, kTq, kDv, kSentinel<T>), lse(L, kB, kH, kTq, 1, kSentinel<T>);
  HeadsBuffer<T> scores(L, kB, kH, kTq, kTk, kSentinel<T>);
  const auto untouched = [&] {
    return inputs == original && out.all_equal_to(kSentinel<T>) && lse.all_equal_to(kSentinel<T>) &&
           scores.all_equal_to(kSentinel<T>);
  };
  const auto out_over_q = mh::HeadsView<T>::bhtd(inputs.data(), kB, kH, kTq, kDv);
  const auto out_over_v = mh::HeadsView<T>::bhtd(inputs.data() + nq + nk, kB, kH, kTq, 1);  // as the LSE
  const auto lse_over_out = mh::HeadsView<T>::bhtd(out.data.data() + 4, kB, kH, kTq, 1);
  const std::vector<std::string> word = {"overlap", "alias"};
  const std::vector<BadCall> bad = {
      {"out over Q", [&] { mh::attention_heads_into(Q, K, V, out_over_q); }, {}, {word}},
      {"lse over V", [&] { mh::attention_heads_into(Q, K, V, out.view(), out_over_v); }, {}, {word}},
      {"lse over out", [&] { mh::attention_heads_into(Q, K, V, out.view(), lse_over_out); }, {}, {word}},
      {"decomposed, scores over K",
       [&] {
         mh::attention_heads_decomposed_into(
             Q, K, V, mh::HeadsView<T>::bhtd(inputs.data() + nq, kB, kH, kTq, kTk), out.view());
       },
       {},
       {word}},
  };
  for (const auto& b : bad) check_bad_call(b, untouched);
}

TEST_CASE_TEMPLATE("multihead errors: attention_varlen_into rejects bad offsets and per-sequence masks", T,
                   float, double) {
  Rng rng(4);
  const auto L = mh::Layout::BTHD;
  constexpr Eigen::Index total_q = 29, total_k = 31;
  auto random_buffer = [&](Eigen::Index h, Eigen::Index t, Eigen::Index d) {
    Array4 a(1, h, t, d);
    for (auto& x : a.v) x = static_cast<T>(rng.normal());
    return HeadsBuffer<T>(a, L);
  };
  const HeadsBuffer<T> Q = random_buffer(kH, total_q, kDk), K = random_buffer(kHkv, total_k, kDk),
                       V = random_buffer(kHkv, total_k, kDv);
  HeadsBuffer<T> out(L, 1, kH, total_q, kDv, kSentinel<T>), lse(L, 1, kH, total_q, 1, kSentinel<T>);
  const auto untouched = [&] { return out.all_equal_to(kSentinel<T>) && lse.all_equal_to(kSentinel<T>); };
  const std::vector<std::int64_t> cu_q = {0, 12, total_q}, cu_k = {0, 6, total_k};

  std::unique_ptr<bool[]> mask_data(new bool[total_q * total_k]());
  const std::vector<T> bias_data(total_q * total_k, T(0));
  const std::vector<std::int64_t> lengths = {6, 25};

  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    mh::Options opt;
    opt.kernel = kernel;
    opt.causal = true;
    {
      HeadsBuffer<T> o(L, 1, kH, total_q, kDv, kSentinel<T>), l(L, 1, kH, total_q, 1, kSentinel<T>);
      CHECK_NOTHROW(mh::attention_varlen_into(Q.cview(), K.cview(), V.cview(), cu_q.data(), cu_k.data(), 2,
                                              o.view(), l.view(), opt));
      // Its answer: each sequence on its own, causal, against the long-double reference.
      MultiHeadSpec spec;
      spec.causal = true;
      const MultiHeadReference ref =
          reference_varlen(Q.to_array(), K.to_array(), V.to_array(), cu_q, cu_k, spec);
      check_varlen_rows<T>(o.cview(), ref.out, cu_q, ref, false);
      check_varlen_rows<T>(l.cview(), ref.lse, cu_q, ref, true);
    }
    auto varlen = [&](std::vector<std::int64_t> q, std::vector<std::int64_t> k, mh::Masks<T> m = {}) {
      return [&, q, k, m] {
        mh::attention_varlen_into(Q.cview(), K.cview(), V.cview(), q.data(), k.data(),
                                  static_cast<Eigen::Index>(q.size()) - 1, out.view(), lse.view(), opt, m);
      };
    };
    mh::Masks<T> with_mask, with_bias, with_lengths;
    with_mask.mask = mh::BroadcastView<bool>::matrix(mask_data.get(), total_q, total_k);
    with_bias.bias = mh::BroadcastView<T>::matrix(bias_data.data(), total_q, total_k);
    with_lengths.key_lengths = lengths.data();

    const std::vector<BadCall> bad = {
        {"query offsets starting at 8", varlen({8, 20, total_q}, cu_k), {8}, {}},
        {"key offsets starting at 8", varlen(cu_q, {8, 20, total_k}), {8}, {}},
        {"query offsets 16 then 13", varlen({0, 16, 13}, cu_k), {16, 13}, {}},
        {"key offsets 26 then 23", varlen(cu_q, {0, 26, 23}), {26, 23}, {}},
        {"query offsets up to 33 > 29", varlen({0, 12, 33}, cu_k), {33, 29}, {}},
        {"key offsets up to 37 > 31", varlen(cu_q, {0, 6, 37}), {37, 31}, {}},
        {"varlen with a mask", varlen(cu_q, cu_k, with_mask), {}, {kMaskWord}},
        {"varlen with a bias", varlen(cu_q, cu_k, with_bias), {}, {kBiasWord}},
        {"varlen with key lengths", varlen(cu_q, cu_k, with_lengths), {}, {kLengthWord}},
        {"varlen, window_right -23",
         [&] {
           mh::Options o = opt;
           o.window_right = -23;
           mh::attention_varlen_into(Q.cview(), K.cview(), V.cview(), cu_q.data(), cu_k.data(), 2, out.view(),
                                     lse.view(), o);
         },
         {23},
         {kWindowWord}},
    };
    for (const auto& b : bad) check_bad_call(b, untouched);
  }
}

TEST_CASE_TEMPLATE("multihead errors: merge_attention_into rejects mismatched shapes", T, float, double) {
  const auto L = mh::Layout::BHTD;
  const HeadsBuffer<T> oa(L, kB, kH, kTq, kDv, T(1)), la(L, kB, kH, kTq, 1, T(0));
  const HeadsBuffer<T> ob(L, kB, kH, kTq, kDv, T(2)), lb(L, kB, kH, kTq, 1, T(0));
  const HeadsBuffer<T> ob_t6(L, kB, kH, 6, kDv, T(2)), lb_t6(L, kB, kH, 6, 1, T(0));
  const HeadsBuffer<T> ob_d10(L, kB, kH, kTq, 10, T(2));
  HeadsBuffer<T> out(L, kB, kH, kTq, kDv, kSentinel<T>), lse(L, kB, kH, kTq, 1, kSentinel<T>);
  HeadsBuffer<T> out_h8(L, kB, 8, kTq, kDv, kSentinel<T>);
  const auto untouched = [&] {
    return out.all_equal_to(kSentinel<T>) && lse.all_equal_to(kSentinel<T>) &&
           out_h8.all_equal_to(kSentinel<T>);
  };
  {
    HeadsBuffer<T> o(L, kB, kH, kTq, kDv, kSentinel<T>), l(L, kB, kH, kTq, 1, kSentinel<T>);
    REQUIRE_NOTHROW(
        mh::merge_attention_into(oa.cview(), la.cview(), ob.cview(), lb.cview(), o.view(), l.view()));
    CHECK(o.all_equal_to(T(1.5)));  // equal LSEs: the mean
    // equal LSEs 0: log 2, within a few ulps
    for (const T x : l.data)
      CHECK(std::fabs(static_cast<long double>(x) - std::log(2.0L)) <= 4 * unit_roundoff<T>());
  }
  const std::vector<BadCall> bad = {
      {"out_b and lse_b with 6 tokens",
       [&] {
         mh::merge_attention_into(oa.cview(), la.cview(), ob_t6.cview(), lb_t6.cview(), out.view(),
                                  lse.view());
       },
       {6},
       {}},
      {"out_b with dim 10",
       [&] {
         mh::merge_attention_into(oa.cview(), la.cview(), ob_d10.cview(), lb.cview(), out.view(), lse.view());
       },
       {10},
       {}},
      {"out with 8 heads",
       [&] {
         mh::merge_attention_into(oa.cview(), la.cview(), ob.cview(), lb.cview(), out_h8.view(), lse.view());
       },
       {8},
       {}},
  };
  for (const auto& b : bad) check_bad_call(b, untouched);
}

TEST_CASE("multihead errors: an output over the bias, mask or key lengths is rejected, nothing written") {
  namespace ea = EigenAttention;
  const Eigen::Index B = 1, H = 2, T = 4, D = 3;
  std::vector<float> q(B * H * T * D, 0.5f), k(q), v(q);
  // One buffer holds the bias [T, T] and, overlapping it, the output [B, H, T, D] = 24 floats.
  std::vector<float> shared(40, 7.0f);
  const auto Q = ea::HeadsView<const float>::bhtd(q.data(), B, H, T, D);
  const auto K = ea::HeadsView<const float>::bhtd(k.data(), B, H, T, D);
  const auto V = ea::HeadsView<const float>::bhtd(v.data(), B, H, T, D);
  ea::Masks<float> masks;
  masks.bias = ea::BroadcastView<float>::matrix(shared.data(), T, T);
  const auto O = ea::HeadsView<float>::bhtd(shared.data() + 8, B, H, T, D);
  CHECK_THROWS_WITH_AS(ea::attention_heads_into(Q, K, V, O, {}, masks), doctest::Contains("bias"),
                       std::invalid_argument);
  for (float x : shared) CHECK(x == 7.0f);

  std::vector<std::int64_t> lengths_and_out(64, 3);
  ea::Masks<double> lengths;
  lengths.key_lengths = lengths_and_out.data();
  std::vector<double> qd(B * H * T * D, 0.5);
  const auto Qd = ea::HeadsView<const double>::bhtd(qd.data(), B, H, T, D);
  const auto Od = ea::HeadsView<double>::bhtd(reinterpret_cast<double*>(lengths_and_out.data()), B, H, T, D);
  CHECK_THROWS_WITH_AS(ea::attention_heads_into(Qd, Qd, Qd, Od, {}, lengths),
                       doctest::Contains("key_lengths"), std::invalid_argument);
}

TEST_CASE("multihead errors: merge_attention_into takes in-place merges but rejects partial overlaps") {
  namespace ea = EigenAttention;
  const Eigen::Index B = 1, H = 1, T = 4, D = 2;
  std::vector<float> a(T * D, 1.0f), b(T * D, 3.0f), la(T, 0.0f), lb(T, 0.0f), buffer(T * D + 2, 9.0f);
  const auto A = ea::HeadsView<float>::bhtd(a.data(), B, H, T, D);
  const auto Bv = ea::HeadsView<float>::bhtd(b.data(), B, H, T, D);
  const auto LA = ea::HeadsView<float>::bhtd(la.data(), B, H, T, 1);
  const auto LB = ea::HeadsView<float>::bhtd(lb.data(), B, H, T, 1);
  // In place: out is out_a. Equal LSEs: the mean of the two outputs.
  ea::merge_attention_into(A, LA, Bv, LB, A, LA);
  for (float x : a) CHECK(x == doctest::Approx(2.0f));
  // out shifted by one element into out_b: rejected before anything is written.
  std::copy(b.begin(), b.end(), buffer.begin());
  const auto Shifted = ea::HeadsView<float>::bhtd(buffer.data() + 1, B, H, T, D);
  const auto Bbuf = ea::HeadsView<float>::bhtd(buffer.data(), B, H, T, D);
  std::vector<float> before = buffer;
  CHECK_THROWS_WITH_AS(ea::merge_attention_into(A, LA, Bbuf, LB, Shifted, LA), doctest::Contains("overlaps"),
                       std::invalid_argument);
  CHECK(buffer == before);
  // lse_a laid over out_a's first column, with out_a's very strides: out merged in place over out_a
  // would overwrite lse_a as it reads it. Only the same view (sizes and strides) is "in place".
  const std::vector<float> a_before = a;
  const ea::HeadsView<float> first_column{a.data(),       B, H, T, 1, A.batch_stride, A.head_stride,
                                          A.token_stride, 1};
  CHECK_THROWS_WITH_AS(ea::merge_attention_into(A, first_column, Bv, LB, A, LA),
                       doctest::Contains("overlaps"), std::invalid_argument);
  CHECK(a == a_before);
}

TEST_CASE("multihead errors: a broadcast size of 1 is printed once, and a count of one in the singular") {
  namespace ea = EigenAttention;
  const Eigen::Index T = 4, D = 2;
  std::vector<float> data(2 * 3 * T * D, 0.5f), out_data(data.size(), 7.0f);
  std::unique_ptr<bool[]> mask_data(new bool[2 * 3 * T * T]());
  const auto message = [&](Eigen::Index B, Eigen::Index H, Eigen::Index mask_b, Eigen::Index mask_h) {
    const auto Q = ea::HeadsView<const float>::bhtd(data.data(), B, H, T, D);
    const auto O = ea::HeadsView<float>::bhtd(out_data.data(), B, H, T, D);
    ea::Masks<float> masks;
    masks.mask = ea::BroadcastView<bool>{mask_data.get(), mask_b, mask_h, T, T, mask_h * T * T, T * T, T, 1};
    return invalid_argument_message([&] { ea::attention_heads_into(Q, Q, Q, O, {}, masks); });
  };
  // [B or 1, H or 1, T_q, T_k], with one size where B or H is 1.
  CHECK(message(1, 3, 1, 2) ==
        "EigenAttention::attention_heads_into: mask is [1, 2, 4, 4] but must be [1, 3 or 1, 4, 4]");
  CHECK(message(2, 1, 3, 1) ==
        "EigenAttention::attention_heads_into: mask is [3, 1, 4, 4] but must be [2 or 1, 1, 4, 4]");
  CHECK(message(1, 1, 1, 2) ==
        "EigenAttention::attention_heads_into: mask is [1, 2, 4, 4] but must be [1, 1, 4, 4]");
  CHECK(message(2, 3, 1, 2) ==
        "EigenAttention::attention_heads_into: mask is [1, 2, 4, 4] but must be [2 or 1, 3 or 1, 4, 4]");
  for (const float x : out_data) CHECK(x == 7.0f);

  // key_lengths of one sequence: "(1 entry)".
  std::vector<std::int64_t> lengths_and_out(64, 3);
  ea::Masks<double> lengths;
  lengths.key_lengths = lengths_and_out.data();
  std::vector<double> qd(3 * T * D, 0.5);
  const auto Qd = ea::HeadsView<const double>::bhtd(qd.data(), 1, 3, T, D);
  const auto Od = ea::HeadsView<double>::bhtd(reinterpret_cast<double*>(lengths_and_out.data()), 1, 3, T, D);
  CHECK_THROWS_WITH_AS(ea::attention_heads_into(Qd, Qd, Qd, Od, {}, lengths),
                       doctest::Contains("key_lengths (1 entry)"), std::invalid_argument);

  // A packed batch of one token: "exceeds the 1 packed token"; packed scores of one element.
  const auto Q1 = ea::HeadsView<const float>::bthd(data.data(), 1, 1, 2, D);
  const auto O1 = ea::HeadsView<float>::bthd(out_data.data(), 1, 1, 2, D);
  const std::int64_t cu_one[2] = {0, 1}, cu_two[2] = {0, 2};
  CHECK(invalid_argument_message([&] { ea::attention_varlen_into(Q1, Q1, Q1, cu_two, cu_one, 1, O1); }) ==
        "EigenAttention::attention_varlen_into: cu_seqlens_q[1] = 2 exceeds the 1 packed token");
  float scores[4] = {7.0f, 7.0f, 7.0f, 7.0f};
  CHECK(invalid_argument_message(
            [&] { ea::attention_varlen_decomposed_into(Q1, Q1, Q1, cu_one, cu_one, 1, scores, 1, O1); }) ==
        "EigenAttention::attention_varlen_decomposed_into: scores holds 1 element but the packed weights "
        "need 2 "
        "(varlen_scores_size)");
  for (const float x : scores) CHECK(x == 7.0f);
  for (const float x : out_data) CHECK(x == 7.0f);
}

}  // namespace test_multihead_errors
