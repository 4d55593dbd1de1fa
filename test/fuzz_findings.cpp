// SPDX-License-Identifier: MIT
// What the fuzzers (test/fuzz) found, one case per finding, each reduced to the smallest call
// that showed it. The inputs that found them stay in test/fuzz/findings/, which scripts/fuzz
// replays before every campaign; these cases keep the fixes in the ordinary test run (and in the
// sanitized one, where the undefined behaviour the first ones caused is reported).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "common.hpp"
#include "errors.hpp"
#include "random.hpp"

#include <EigenAttention/Npy.hpp>

namespace test_fuzz_findings {

using namespace ea_test;

namespace {

using Index = Eigen::Index;
constexpr std::ptrdiff_t kHuge = std::numeric_limits<std::ptrdiff_t>::max();

/// CHECK that `call` throws std::invalid_argument whose message holds `words`.
template <class F>
void check_invalid_argument(F&& call, const char* words) {
  const std::string msg = invalid_argument_message(call);
  CAPTURE(msg);
  CHECK(msg.find(words) != std::string::npos);
}

}  // namespace

TEST_CASE_TEMPLATE("fuzz finding window-overflow: windows up to PTRDIFF_MAX are unbounded windows", T, float,
                   double) {
  // i + offset - window_left and i + offset + window_right + 1 overflowed in the kernels'
  // key ranges (signed overflow: undefined behaviour; in practice rows saw no key).
  Rng rng(11);
  const auto Q = random_matrix<RowMatrix<T>>(rng, 7, 3), K = random_matrix<RowMatrix<T>>(rng, 5, 3),
             V = random_matrix<RowMatrix<T>>(rng, 5, 2);
  for (const bool causal : {false, true}) {
    for (const auto alignment : {ea::CausalAlignment::TopLeft, ea::CausalAlignment::BottomRight}) {
      for (const auto kernel : kernels_under_test()) {
        CAPTURE(causal);
        CAPTURE(int(alignment));
        const std::string kname = ea::kernel_name(kernel);
        CAPTURE(kname);
        ea::Options plain;
        plain.causal = causal;
        plain.alignment = alignment;
        plain.kernel = kernel;
        const auto expected = ea::attention_decomposed(Q, K, V, plain);
        for (const auto& window : {std::pair{kHuge, kHuge}, std::pair{kHuge, std::ptrdiff_t{-1}},
                                   std::pair{std::ptrdiff_t{-1}, kHuge}, std::pair{kHuge - 1, kHuge - 7}}) {
          // Variables, not structured bindings: C++17 does not let CAPTURE's lambda name those.
          const std::ptrdiff_t left = window.first, right = window.second;
          CAPTURE(left);
          CAPTURE(right);
          ea::Options opt = plain;
          opt.window_left = left;
          opt.window_right = right;
          const auto r = ea::attention_decomposed(Q, K, V, opt);
          EA_CHECK_EQUAL(r.scores, expected.scores);
          EA_CHECK_EQUAL(r.attn, expected.attn);
          EA_CHECK_EQUAL(ea::attention(Q, K, V, opt), ea::attention(Q, K, V, plain));
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("fuzz finding hidden-nan: a NaN logit leaves the keys a row does not see at exactly 0", T,
                   float, double) {
  // The row sum was NaN and the final division reached the hidden keys' zeros too.
  const T nan = std::numeric_limits<T>::quiet_NaN();
  RowMatrix<T> Q(2, 1), K(2, 1), V(2, 1);
  Q << nan, 1;
  K << 1, 1;
  V << 1, 2;
  const T q[2] = {nan, 1}, k[2] = {1, 1}, v[2] = {1, 2};
  const bool mask[4] = {true, false, true, true};
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt;
    opt.kernel = kernel;
    opt.causal = true;  // query 0 sees key 0 only
    const auto r = ea::attention_decomposed(Q, K, V, opt);
    CHECK(std::isnan(r.scores(0, 0)));
    CHECK(r.scores(0, 1) == 0);
    CHECK(std::isnan(r.attn(0, 0)));
    CHECK(r.scores(1, 0) == T(0.5));  // row 1 is untouched
    // The same through a boolean mask (multi-head call).
    opt.causal = false;
    T scores[4], out[2];
    ea::Masks<T> m;
    m.mask = ea::BroadcastView<bool>::matrix(mask, 2, 2);
    ea::attention_heads_decomposed_into(
        ea::HeadsView<const T>::bhtd(q, 1, 1, 2, 1), ea::HeadsView<const T>::bhtd(k, 1, 1, 2, 1),
        ea::HeadsView<const T>::bhtd(v, 1, 1, 2, 1), ea::HeadsView<T>::bhtd(scores, 1, 1, 2, 2),
        ea::HeadsView<T>::bhtd(out, 1, 1, 2, 1), opt, m);
    CHECK(std::isnan(scores[0]));
    CHECK(scores[1] == 0);
    CHECK(scores[2] == T(0.5));
    CHECK(scores[3] == T(0.5));
  }
}

TEST_CASE_TEMPLATE("fuzz finding: an additive bias of -inf gives a weight of exactly 0 on every kernel", T,
                   float, double) {
  // Eigen's vectorised exp clamps its argument, so exp(-inf) came out as a subnormal.
  const T q[2] = {1, 2}, k[3] = {1, 2, 3}, v[3] = {1, 2, 3};
  const T inf = std::numeric_limits<T>::infinity();
  const T bias[6] = {0, -inf, 0, -inf, 0, 0};
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt;
    opt.kernel = kernel;
    ea::Masks<T> m;
    m.bias = ea::BroadcastView<T>::matrix(bias, 2, 3);
    T scores[6], out[2];
    ea::attention_heads_decomposed_into(
        ea::HeadsView<const T>::bhtd(q, 1, 1, 2, 1), ea::HeadsView<const T>::bhtd(k, 1, 1, 3, 1),
        ea::HeadsView<const T>::bhtd(v, 1, 1, 3, 1), ea::HeadsView<T>::bhtd(scores, 1, 1, 2, 3),
        ea::HeadsView<T>::bhtd(out, 1, 1, 2, 1), opt, m);
    CHECK(scores[1] == 0);
    CHECK(scores[3] == 0);
    T fused[2];
    ea::attention_heads_into(
        ea::HeadsView<const T>::bhtd(q, 1, 1, 2, 1), ea::HeadsView<const T>::bhtd(k, 1, 1, 3, 1),
        ea::HeadsView<const T>::bhtd(v, 1, 1, 3, 1), ea::HeadsView<T>::bhtd(fused, 1, 1, 2, 1), opt, m);
    // Row 1 sees keys 1 and 2 only, row 0 keys 0 and 2.
    const T w0 = 1 / (1 + std::exp(T(2))), w1 = w0;  // logits 1, 3 and 4, 6
    CHECK(fused[0] == doctest::Approx(double(w0 * 1 + (1 - w0) * 3)));
    CHECK(fused[1] == doctest::Approx(double(w1 * 2 + (1 - w1) * 3)));
  }
}

TEST_CASE_TEMPLATE("fuzz finding null-offset: empty column-major matrices (null data) in every role", T,
                   float, double) {
  // An empty Eigen::Matrix has data() == nullptr; the kernels offset it by row * row_stride,
  // which is undefined behaviour unless the offset is 0 (reported by UBSan).
  Rng rng(12);
  const auto Q = random_matrix<ColMatrix<T>>(rng, 4, 3), K = random_matrix<ColMatrix<T>>(rng, 6, 3);
  const ColMatrix<T> V0(6, 0);
  REQUIRE(V0.data() == nullptr);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    for (const bool causal : {false, true}) {
      ea::Options opt;
      opt.kernel = kernel;
      opt.causal = causal;
      ColMatrix<T> out(4, 0), scores(4, 6);
      ea::Vector<T> lse(4);
      ea::attention_into(Q, K, V0, out, lse, opt);
      ea::attention_decomposed_into(Q, K, V0, scores, out, lse, opt);
      CHECK(out.rows() == 4);
      CHECK(out.cols() == 0);
      CHECK((scores.rowwise().sum().array() - 1).abs().maxCoeff() < 1e-5);
      // d_k = 0: every logit 0, uniform weights over the visible keys.
      const ColMatrix<T> Q0(4, 0), K0(6, 0);
      const auto V = random_matrix<ColMatrix<T>>(rng, 6, 2);
      opt.scale = 1.0;
      const auto r = ea::attention_decomposed(Q0, K0, V, opt);
      CHECK(r.scores(0, 0) == (causal ? T(1) : T(1) / 6));
      // T_k = 0: no key at all, zero rows and LSE -inf.
      const ColMatrix<T> Ke(0, 3), Ve(0, 2);
      ColMatrix<T> oute(4, 2), scorese(4, 0);
      ea::attention_decomposed_into(Q, Ke, Ve, scorese, oute, lse, opt);
      CHECK(oute.isZero(0));
      CHECK(lse(0) == -std::numeric_limits<T>::infinity());
    }
  }
}

TEST_CASE_TEMPLATE(
    "fuzz finding empty-scores: averaging needs the per-head scores; key padding without them works", T,
    float, double) {
  // With no SCORES view, averaging and key-padding zeroing wrote through its null pointer.
  Rng rng(13);
  const Index B = 2, H = 2, tq = 3, tk = 4, d = 2;
  const auto q = random_matrix<RowMatrix<T>>(rng, B * H * tq, d),
             k = random_matrix<RowMatrix<T>>(rng, B * H * tk, d),
             v = random_matrix<RowMatrix<T>>(rng, B * H * tk, d);
  const auto Q = ea::HeadsView<const T>::bhtd(q.data(), B, H, tq, d);
  const auto K = ea::HeadsView<const T>::bhtd(k.data(), B, H, tk, d);
  const auto V = ea::HeadsView<const T>::bhtd(v.data(), B, H, tk, d);
  std::vector<T> out(B * H * tq * d, T(-7)), average(B * tq * tk, T(-7));
  const auto Out = ea::HeadsView<T>::bhtd(out.data(), B, H, tq, d);
  const auto Average = ea::HeadsView<T>::bhtd(average.data(), B, 1, tq, tk);
  check_invalid_argument([&] { ea::attention_heads_decomposed_into(Q, K, V, {}, Out, {}, Average); },
                         "average_scores");
  CHECK(out[0] == T(-7));  // nothing written
  CHECK(average[0] == T(-7));

  const std::int64_t lengths[2] = {2, 4};
  ea::Masks<T> m;
  m.key_lengths = lengths;
  ea::attention_heads_decomposed_into(Q, K, V, {}, Out, {}, m);
  std::vector<T> expected(out.size());
  ea::attention_heads_into(Q, K, V, ea::HeadsView<T>::bhtd(expected.data(), B, H, tq, d), {}, m);
  CHECK(out == expected);
}

TEST_CASE_TEMPLATE("fuzz finding overlap-gaps: outputs over lse, cu_seqlens or ALiBi slopes are rejected", T,
                   float, double) {
  Rng rng(14);
  const Index tq = 3, tk = 3, d = 2;
  const auto q = random_matrix<RowMatrix<T>>(rng, tq, d), k = random_matrix<RowMatrix<T>>(rng, tk, d),
             v = random_matrix<RowMatrix<T>>(rng, tk, d);
  const auto Q = ea::HeadsView<const T>::bhtd(q.data(), 1, 1, tq, d);
  const auto K = ea::HeadsView<const T>::bhtd(k.data(), 1, 1, tk, d);
  const auto V = ea::HeadsView<const T>::bhtd(v.data(), 1, 1, tk, d);
  // average_scores over lse.
  std::vector<T> scores(tq * tk), out(tq * d), shared(tq * tk, T(-7));
  check_invalid_argument(
      [&] {
        ea::attention_heads_decomposed_into(Q, K, V, ea::HeadsView<T>::bhtd(scores.data(), 1, 1, tq, tk),
                                            ea::HeadsView<T>::bhtd(out.data(), 1, 1, tq, d),
                                            ea::HeadsView<T>::bhtd(shared.data(), 1, 1, tq, 1),
                                            ea::HeadsView<T>::bhtd(shared.data(), 1, 1, tq, tk));
      },
      "overlaps lse");
  CHECK(shared[0] == T(-7));

  // Packed varlen weights over cu_seqlens_q, cu_seqlens_k or the ALiBi slopes: one buffer of
  // int64 offsets / slopes and weights (the caller's mistake, which must not go unnoticed).
  const std::int64_t cu[2] = {0, 3};
  const std::size_t size = ea::varlen_scores_size(cu, cu, 1, 1);
  REQUIRE(size == 9);
  static_assert(sizeof(std::int64_t) % sizeof(T) == 0);
  std::vector<std::int64_t> storage(16);
  T* const weights = reinterpret_cast<T*>(storage.data());
  std::int64_t* const cu_in_weights = storage.data() + 1;  // inside the weights' bytes
  cu_in_weights[0] = 0;
  cu_in_weights[1] = 3;
  check_invalid_argument(
      [&] {
        ea::attention_varlen_decomposed_into(Q, K, V, cu_in_weights, cu, 1, weights, size,
                                             ea::HeadsView<T>::bhtd(out.data(), 1, 1, tq, d));
      },
      "cu_seqlens_q");
  check_invalid_argument(
      [&] {
        ea::attention_varlen_decomposed_into(Q, K, V, cu, cu_in_weights, 1, weights, size,
                                             ea::HeadsView<T>::bhtd(out.data(), 1, 1, tq, d));
      },
      "cu_seqlens_k");
  std::vector<T> packed(size + 1);
  ea::Masks<T> m;
  m.alibi_slopes = packed.data() + 4;
  packed[4] = T(0.5);
  check_invalid_argument(
      [&] {
        ea::attention_varlen_decomposed_into(Q, K, V, cu, cu, 1, packed.data(), size,
                                             ea::HeadsView<T>::bhtd(out.data(), 1, 1, tq, d), {}, m);
      },
      "alibi_slopes");
  CHECK(packed[4] == T(0.5));
}

TEST_CASE_TEMPLATE("fuzz finding merge-empty-side: a side whose LSE is -inf contributes nothing, even NaN", T,
                   float, double) {
  // exp(-inf - m) * NaN was NaN: the side that saw no key poisoned the merged row.
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  const T out_a[4] = {nan, nan, 1, 2}, lse_a[2] = {-inf, T(0.5)};
  const T out_b[4] = {3, 4, nan, inf}, lse_b[2] = {T(1.5), -inf};
  T out[4], lse[2];
  ea::merge_attention_into(
      ea::HeadsView<const T>::bhtd(out_a, 1, 1, 2, 2), ea::HeadsView<const T>::bhtd(lse_a, 1, 1, 2, 1),
      ea::HeadsView<const T>::bhtd(out_b, 1, 1, 2, 2), ea::HeadsView<const T>::bhtd(lse_b, 1, 1, 2, 1),
      ea::HeadsView<T>::bhtd(out, 1, 1, 2, 2), ea::HeadsView<T>::bhtd(lse, 1, 1, 2, 1));
  CHECK(out[0] == 3);
  CHECK(out[1] == 4);
  CHECK(lse[0] == T(1.5));
  CHECK(out[2] == 1);
  CHECK(out[3] == 2);
  CHECK(lse[1] == T(0.5));
  // d_v = 0 with null out views: only the LSE is merged.
  T lse0[2];
  ea::merge_attention_into(ea::HeadsView<const T>{nullptr, 1, 1, 2, 0, 0, 0, 0, 1},
                           ea::HeadsView<const T>::bhtd(lse_a, 1, 1, 2, 1),
                           ea::HeadsView<const T>{nullptr, 1, 1, 2, 0, 0, 0, 0, 1},
                           ea::HeadsView<const T>::bhtd(lse_b, 1, 1, 2, 1),
                           ea::HeadsView<T>{nullptr, 1, 1, 2, 0, 0, 0, 0, 1},
                           ea::HeadsView<T>::bhtd(lse0, 1, 1, 2, 1));
  CHECK(lse0[0] == T(1.5));
  CHECK(lse0[1] == T(0.5));
}

TEST_CASE_TEMPLATE("fuzz finding backward-masked-nan-dv: a row's NaN reaches no dV of a key it does not see",
                   T, float, double) {
  // The tiled kernels scale a row's weights by its normaliser r_i after the mask has zeroed the
  // hidden keys; a NaN r_i (here: a NaN bias on the key the row sees) turns those zeros into NaN,
  // and dV = P^T dO carries it to keys the row does not see, even to a key no row sees.
  const T nan = std::numeric_limits<T>::quiet_NaN();
  // One head, T_q = 2, T_k = 3, d = 1: row 0 sees key 0 only (bias NaN), row 1 keys 0 and 1, no row
  // key 2.
  const T q[2] = {1, 2}, k[3] = {1, -1, 2}, v[3] = {3, 5, 7}, d_out[2] = {1, 1};
  const bool mask[6] = {true, false, false, true, true, false};
  const T bias[6] = {nan, 0, 0, 0, 0, 0};
  ea::Masks<T> m;
  m.mask = ea::BroadcastView<bool>::matrix(mask, 2, 3);
  m.bias = ea::BroadcastView<T>::matrix(bias, 2, 3);
  using C = ea::HeadsView<const T>;
  using W = ea::HeadsView<T>;
  // Row 1's logits are 2 and -2: dV(1) = P(1, 1) dO(1).
  const T p11 = std::exp(T(-2)) / (std::exp(T(2)) + std::exp(T(-2)));
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt;
    opt.kernel = kernel;
    T out[2], lse[2], dq[2], dk[3], dv[3];
    ea::attention_heads_into(C::bhtd(q, 1, 1, 2, 1), C::bhtd(k, 1, 1, 3, 1), C::bhtd(v, 1, 1, 3, 1),
                             W::bhtd(out, 1, 1, 2, 1), W::bhtd(lse, 1, 1, 2, 1), opt, m);
    REQUIRE(std::isnan(lse[0]));
    ea::attention_heads_backward_into(C::bhtd(q, 1, 1, 2, 1), C::bhtd(k, 1, 1, 3, 1), C::bhtd(v, 1, 1, 3, 1),
                                      C::bhtd(out, 1, 1, 2, 1), C::bhtd(lse, 1, 1, 2, 1),
                                      C::bhtd(d_out, 1, 1, 2, 1), W::bhtd(dq, 1, 1, 2, 1),
                                      W::bhtd(dk, 1, 1, 3, 1), W::bhtd(dv, 1, 1, 3, 1), opt, m);
    CHECK(std::isnan(dv[0]));  // row 0 sees key 0
    CHECK(dv[1] == doctest::Approx(double(p11)));
    CHECK(dv[2] == 0);
    CHECK(dk[2] == 0);
    CHECK(std::isfinite(dq[1]));
  }
}

TEST_CASE_TEMPLATE("fuzz finding backward-empty-d-bias: with no sequence or no head, d_bias is all 0", T,
                   float, double) {
  // dL/dbias sums over the sequences and heads that share the bias; over none it is 0, but the
  // call returned before writing d_bias.
  const T none[1] = {0}, bias[4] = {0, 0, 0, 0};
  ea::Masks<T> m;
  m.bias = ea::BroadcastView<T>::matrix(bias, 2, 2);
  using C = ea::HeadsView<const T>;
  using W = ea::HeadsView<T>;
  for (const auto& sizes : {std::pair<Index, Index>{0, 1}, std::pair<Index, Index>{1, 0}}) {
    const Index B = sizes.first, H = sizes.second;
    CAPTURE(B);
    CAPTURE(H);
    T d_bias[4] = {7, 7, 7, 7}, g[1] = {7};
    ea::attention_heads_backward_into(C::bhtd(none, B, H, 2, 1), C::bhtd(none, B, H, 2, 1),
                                      C::bhtd(none, B, H, 2, 1), C::bhtd(none, B, H, 2, 1),
                                      C::bhtd(none, B, H, 2, 1), C::bhtd(none, B, H, 2, 1), {},
                                      W::bhtd(g, B, H, 2, 1), W::bhtd(g, B, H, 2, 1), W::bhtd(g, B, H, 2, 1),
                                      W::bhtd(d_bias, 1, 1, 2, 2), {}, m);
    for (const T x : d_bias) CHECK(x == 0);
  }
}

TEST_CASE_TEMPLATE(
    "fuzz finding backward-null-dv: d_v = 0 with empty matrices (null data) over several strips", T, float,
    double) {
  // d_v = 0: V, ATTN and dL/dATTN are empty Eigen::Matrix objects (null data). The micro-kernel
  // backward took dL/dATTN's rows in place and offset the null pointer by a strip of rows (UBSan),
  // once T_q exceeded one strip. Every logit's gradient is then 0, so dQ and dK are 0.
  Rng rng(31);
  const Index tq = 37, tk = 300;
  const auto Q = random_matrix<ColMatrix<T>>(rng, tq, 3), K = random_matrix<ColMatrix<T>>(rng, tk, 3);
  const ColMatrix<T> V(tk, 0), d_attn(tq, 0);
  REQUIRE(V.data() == nullptr);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    for (const bool causal : {false, true}) {
      CAPTURE(causal);
      ea::Options opt;
      opt.kernel = kernel;
      opt.causal = causal;
      ColMatrix<T> attn(tq, 0);
      ea::Vector<T> lse(tq);
      ea::attention_into(Q, K, V, attn, lse, opt);
      const auto g = ea::attention_backward(Q, K, V, attn, lse, d_attn, opt);
      CHECK(g.dq.rows() == tq);
      CHECK(g.dk.rows() == tk);
      CHECK(g.dv.rows() == tk);
      CHECK(g.dv.cols() == 0);
      CHECK(g.dq.cwiseAbs().maxCoeff() == T(0));
      CHECK(g.dk.cwiseAbs().maxCoeff() == T(0));
    }
  }
}

TEST_CASE_TEMPLATE("fuzz finding backward-empty-d-scores: an empty d_scores of the wrong shape is rejected",
                   T, float, double) {
  // An empty Eigen::Matrix has data() == nullptr, which the compiled call took as "no d_scores":
  // a 0x0 d_scores for T_q x T_k = 3x4 was silently ignored.
  Rng rng(14);
  const auto Q = random_matrix<ColMatrix<T>>(rng, 3, 2), K = random_matrix<ColMatrix<T>>(rng, 4, 2),
             V = random_matrix<ColMatrix<T>>(rng, 4, 2);
  RowMatrix<T> out;
  ea::Vector<T> lse;
  ea::attention_into(Q, K, V, out, lse);
  const ColMatrix<T> d_out = ColMatrix<T>::Ones(3, 2), d_scores(0, 0), d_scores_0x4(0, 4);
  REQUIRE(d_scores.data() == nullptr);
  for (const ColMatrix<T>* bad : {&d_scores, &d_scores_0x4}) {
    check_invalid_argument([&] { (void)ea::attention_backward(Q, K, V, out, lse, d_out, *bad); }, "d_scores");
    RowMatrix<T> dq, dk, dv;
    check_invalid_argument([&] { ea::attention_backward_into(Q, K, V, out, lse, d_out, *bad, dq, dk, dv); },
                           "d_scores");
  }
}

TEST_CASE("fuzz finding as-heads-overflow: view factories whose strides overflow throw, never wrap") {
  const Index big = Index{1} << 40;
  float x = 0;
  check_invalid_argument([&] { (void)ea::HeadsView<float>::bhtd(&x, 1, big, big, 1); }, "HeadsView::bhtd");
  check_invalid_argument([&] { (void)ea::HeadsView<float>::bthd(&x, 0, big, 1, big); },
                         "HeadsView::bthd");  // H * D
  check_invalid_argument([&] { (void)ea::BroadcastView<float>::per_sequence(&x, 1, big, big); },
                         "BroadcastView::per_sequence");
  check_invalid_argument([&] { (void)ea::BroadcastView<float>::per_head(&x, 1, big, big, 1); },
                         "BroadcastView::per_head");
  // A zero size makes the strides that include it 0, whatever the others.
  const auto empty = ea::HeadsView<float>::bhtd(&x, 1, big, 0, big);
  CHECK(empty.batch_stride == 0);
  CHECK(empty.head_stride == 0);
  CHECK(empty.token_stride == big);
  // An .npy array of shape [0, 2^40, 2^40, 2^40] holds no byte, but its views' strides overflow.
  namespace npy = EigenAttention::npy;
  npy::Array a;
  a.dtype = npy::DType::Float32;
  a.shape = {0, big, big, big};
  CHECK_THROWS_AS((void)npy::as_heads<float>(a, ea::Layout::BHTD, "a"), npy::Error);
  CHECK_THROWS_AS((void)npy::as_heads<float>(a, ea::Layout::BTHD, "a"), npy::Error);
}

TEST_CASE("fuzz finding append-null-values-d0: a cache with d_v = 0 appends values of no element") {
  // With d_v = 0, an append's V view ([1, kv_heads, T_new, 0]: no element, a null pointer, strides
  // of the caller's layout) was read at null + token * token_stride (undefined behaviour: UBSan's
  // "applying non-zero offset to null pointer", which clang reports: the fuzz build; GCC does not check it).
  ea::PagedKVCache<float> cache(2, 4, 0, 16, 64);
  const ea::SequenceId s = cache.create();
  std::vector<float> keys(3 * 2 * 4, 0.5f);
  const ea::HeadsView<const float> k{keys.data(), 1, 2, 3, 4, 0, 4, 8, 1};  // [1, 2, 3, 4], BTHD
  const ea::HeadsView<const float> v{nullptr, 1, 2, 3, 0, 0, 0, 4, 1};      // [1, 2, 3, 0]
  cache.append(s, k, v);
  CHECK(cache.length(s) == 3);
  const Eigen::MatrixXf q = Eigen::MatrixXf::Ones(1, 8);  // H = 2 heads of d_k = 4
  const auto attn = ea::attention_decode(cache, s, q);
  CHECK(attn.rows() == 1);
  CHECK(attn.cols() == 0);
}

}  // namespace test_fuzz_findings
