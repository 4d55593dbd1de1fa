// SPDX-License-Identifier: MIT
// Masks::sinks (gpt-oss's attention sinks) and BackwardTerms (dL/dLSE in, dL/dsinks out): a
// hand-worked example with rows that see only the sink; a sink of -inf is no sink, bitwise; the
// weights sum to 1 - exp(sink - LSE), and a shift of every logit and the sink changes nothing;
// partial results merged without the sink plus one merge with a valueless part holding the sink
// are the call with sinks (what the ring does); varlen is its sequences one by one, dL/dsinks
// summed; a NaN sink reaches its own head's rows only; the 16-bit types are the float call on the
// widened inputs, rounded once; bad terms throw. (The long-double crosschecks, finite differences,
// decode, the distributed calls and the PyTorch golden cases test them too.)
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "common.hpp"
#include "low_precision.hpp"
#include "random.hpp"

namespace test_sinks {

using namespace ea_test;

namespace {

template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

template <class T>
bool same_bits(const Eigen::DenseBase<T>& a, const Eigen::DenseBase<T>& b) {
  using S = typename T::Scalar;
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (Eigen::Index i = 0; i < a.rows(); ++i)
    for (Eigen::Index j = 0; j < a.cols(); ++j) {
      const S x = a(i, j), y = b(i, j);
      if (std::memcmp(&x, &y, sizeof(S)) != 0) return false;
    }
  return true;
}

/// [1, H, T, d] of a T x (H d) matrix of heads side by side (d = 1: a T x H matrix of LSEs).
template <class T>
ea::HeadsView<const T> heads(const RowMatrix<T>& m, std::ptrdiff_t H) {
  return ea::HeadsView<const T>::side_by_side(m, m.cols() / H);
}
template <class T>
ea::HeadsView<T> heads_out(RowMatrix<T>& m, std::ptrdiff_t H) {
  return ea::HeadsView<T>::side_by_side(m, m.cols() / H);
}

}  // namespace

TEST_CASE_TEMPLATE("sinks: a hand-worked example, and rows that see only the sink", T, float, double) {
  // Q = 0: every logit is 0. Three keys and a sink of log 3: each key weighs 1 / (3 + 3).
  const RowMatrix<T> Q = RowMatrix<T>::Zero(1, 2), K = RowMatrix<T>::Ones(3, 2);
  RowMatrix<T> V(3, 1);
  V << 1, 2, 4;
  const T sink = std::log(T(3));
  ea::Masks<T> masks;
  masks.sinks = &sink;
  // Bottom-right, T_q = 3 over one key: rows 0 and 1 see no key, only the sink (ATTN 0, LSE =
  // sink exactly); row 2 sees key 0 with weight 1 / (1 + e^0.5).
  const RowMatrix<T> Q3 = RowMatrix<T>::Zero(3, 2), K1 = RowMatrix<T>::Ones(1, 2);
  RowMatrix<T> V1(1, 1);
  V1 << 8;
  const T half = T(0.5);
  ea::Masks<T> masks_half;
  masks_half.sinks = &half;
  const T tol = T(8) * std::numeric_limits<T>::epsilon();
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt;
    opt.kernel = kernel;
    const auto r = ea::attention_decomposed(Q, K, V, opt, masks);
    for (Eigen::Index j = 0; j < 3; ++j) CHECK(std::abs(r.scores(0, j) - T(1) / T(6)) <= tol);
    CHECK(std::abs(r.attn(0, 0) - T(7) / T(6)) <= tol * T(2));
    CHECK(std::abs(r.lse(0) - std::log(T(6))) <= tol * T(2));
    const RowMatrix<T> fused = ea::attention(Q, K, V, opt, masks);
    CHECK(std::abs(fused(0, 0) - T(7) / T(6)) <= tol * T(2));

    opt.causal = true;
    opt.alignment = ea::CausalAlignment::BottomRight;
    const auto b = ea::attention_decomposed(Q3, K1, V1, opt, masks_half);
    CHECK(b.attn(0, 0) == T(0));
    CHECK(b.attn(1, 0) == T(0));
    CHECK(b.lse(0) == half);  // exactly the sink
    CHECK(b.lse(1) == half);
    CHECK(b.scores(0, 0) == T(0));
    const T w = T(1) / (T(1) + std::exp(half));
    CHECK(std::abs(b.scores(2, 0) - w) <= tol);
    CHECK(std::abs(b.attn(2, 0) - T(8) * w) <= tol * T(8));
    CHECK(std::abs(b.lse(2) - std::log(T(1) + std::exp(half))) <= tol);
    // The gradient of the sink in the rows that see only it: dL/dLSE_i (their LSE is the sink).
    Vec<T> d_lse(3);
    d_lse << T(2), T(-3), T(0);
    const RowMatrix<T> d_attn = RowMatrix<T>::Zero(3, 1);
    T d_sink = T(-777);
    ea::BackwardTerms<T> terms;
    terms.d_lse = ea::HeadsView<const T>::single(d_lse);
    terms.d_sinks = &d_sink;
    const auto g = ea::attention_backward(Q3, K1, V1, b.attn, b.lse, d_attn, opt, masks_half, terms);
    // Row 2: dL/dsink = P_sink d_lse = 0 here (d_lse_2 = 0, dL/dATTN = 0).
    CHECK(std::abs(d_sink - T(-1)) <= tol);
    CHECK(g.dq.cwiseAbs().maxCoeff() == T(0));
  }
}

TEST_CASE_TEMPLATE("sinks: a sink of -inf is no sink, bitwise, forward and backward", T, float, double) {
  Rng rng(2611);
  const Eigen::Index tq = 150, tk = 170, dk = 12, dv = 7;
  const auto Q = random_matrix<RowMatrix<T>>(rng, tq, dk);
  const auto K = random_matrix<RowMatrix<T>>(rng, tk, dk);
  const auto V = random_matrix<RowMatrix<T>>(rng, tk, dv);
  const auto dO = random_matrix<RowMatrix<T>>(rng, tq, dv);
  const T none = -std::numeric_limits<T>::infinity();
  ea::Masks<T> masks;
  masks.sinks = &none;
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt;
    opt.causal = true;
    opt.kernel = kernel;
    const auto a = ea::attention_decomposed(Q, K, V, opt), b = ea::attention_decomposed(Q, K, V, opt, masks);
    CHECK(same_bits(a.scores, b.scores));
    CHECK(same_bits(a.attn, b.attn));
    CHECK(same_bits(a.lse, b.lse));
    RowMatrix<T> out;
    Vec<T> lse;
    RowMatrix<T> plain;
    Vec<T> plain_lse;
    ea::attention_into(Q, K, V, plain, plain_lse, opt);
    ea::attention_into(Q, K, V, out, lse, opt, masks);
    CHECK(same_bits(out, plain));
    CHECK(same_bits(lse, plain_lse));
    T d_sink = T(-777);
    ea::BackwardTerms<T> terms;
    terms.d_sinks = &d_sink;
    const auto ga = ea::attention_backward(Q, K, V, out, lse, dO, opt);
    const auto gb = ea::attention_backward(Q, K, V, out, lse, dO, opt, masks, terms);
    CHECK(same_bits(ga.dq, gb.dq));
    CHECK(same_bits(ga.dk, gb.dk));
    CHECK(same_bits(ga.dv, gb.dv));
    CHECK(d_sink == T(0));
    // No key at all, with dL/dLSE: still no sink, dL/dsink exactly 0 (the tiled kernels once gave
    // each row d_lse_i here, the share of a sink that weighs 1).
    const RowMatrix<T> K0(0, dk), V0(0, dv);
    RowMatrix<T> out0, d_lse = random_matrix<RowMatrix<T>>(rng, tq, 1);
    Vec<T> lse0;
    ea::attention_into(Q, K0, V0, out0, lse0, opt, masks);
    terms.d_lse = heads(d_lse, 1);
    d_sink = T(-777);
    (void)ea::attention_backward(Q, K0, V0, out0, lse0, dO, opt, masks, terms);
    CHECK(d_sink == T(0));
  }
}

TEST_CASE_TEMPLATE(
    "sinks: the weights sum to 1 - exp(sink - LSE), and shifting every logit and the sink changes nothing", T,
    float, double) {
  Rng rng(2612);
  const Eigen::Index H = 3, tq = 37, tk = 300, dk = 8, dv = 5;
  const auto Q = random_matrix<RowMatrix<T>>(rng, tq, H * dk);
  const auto K = random_matrix<RowMatrix<T>>(rng, tk, H * dk);
  const auto V = random_matrix<RowMatrix<T>>(rng, tk, H * dv);
  const std::vector<T> sinks = {T(-1.5), T(0.25), T(3)}, shifted = {T(-1.5 + 6), T(0.25 + 6), T(3 + 6)};
  const RowMatrix<T> shift = RowMatrix<T>::Constant(tq, tk, T(6));
  const T tol = T(64) * std::numeric_limits<T>::epsilon();
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt;
    opt.causal = true;
    opt.alignment = ea::CausalAlignment::BottomRight;
    opt.window_left = 100;
    opt.kernel = kernel;
    std::vector<T> scores(static_cast<std::size_t>(H * tq * tk)), scores2(scores.size());
    RowMatrix<T> out(tq, H * dv), out2(tq, H * dv), lse(tq, H), lse2(tq, H);
    ea::Masks<T> masks;
    masks.sinks = sinks.data();
    ea::attention_heads_decomposed_into(heads(Q, H), heads(K, H), heads(V, H),
                                        ea::HeadsView<T>::bhtd(scores.data(), 1, H, tq, tk),
                                        heads_out(out, H), heads_out(lse, H), opt, masks);
    ea::Masks<T> moved;
    moved.sinks = shifted.data();
    moved.bias = ea::BroadcastView<T>::of(shift);
    ea::attention_heads_decomposed_into(heads(Q, H), heads(K, H), heads(V, H),
                                        ea::HeadsView<T>::bhtd(scores2.data(), 1, H, tq, tk),
                                        heads_out(out2, H), heads_out(lse2, H), opt, moved);
    for (Eigen::Index h = 0; h < H; ++h)
      for (Eigen::Index i = 0; i < tq; ++i) {
        T sum = 0;
        for (Eigen::Index j = 0; j < tk; ++j) {
          const std::size_t e = static_cast<std::size_t>((h * tq + i) * tk + j);
          sum += scores[e];
          CHECK(std::abs(scores[e] - scores2[e]) <= tol * (scores[e] + std::numeric_limits<T>::min()));
        }
        const T sink_weight = std::exp(sinks[static_cast<std::size_t>(h)] - lse(i, h));
        CHECK(sink_weight > T(1e-4));  // the sinks matter here
        CHECK(std::abs(sum + sink_weight - T(1)) <= tol);
        CHECK(std::abs(lse2(i, h) - (lse(i, h) + T(6))) <= tol * T(8));
      }
    CHECK((out - out2).cwiseAbs().maxCoeff() <= tol);
  }
}

TEST_CASE_TEMPLATE("sinks: key blocks merged without the sink, then one merge with the sink, are the call", T,
                   float, double) {
  // merge_attention_into of the blocks' partial results, then with a part whose ATTN is 0 and
  // whose LSE is the sink: what the ring does after its last block.
  Rng rng(2613);
  const Eigen::Index H = 2, tq = 29, tk = 61, dk = 6, dv = 4, k1 = 25;
  const auto Q = random_matrix<RowMatrix<T>>(rng, tq, H * dk);
  const auto K = random_matrix<RowMatrix<T>>(rng, tk, H * dk);
  const auto V = random_matrix<RowMatrix<T>>(rng, tk, H * dv);
  const std::vector<T> sinks = {T(0.75), T(-0.5)};
  const T tol = T(128) * std::numeric_limits<T>::epsilon();
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt;
    opt.kernel = kernel;
    RowMatrix<T> out(tq, H * dv), lse(tq, H);
    ea::Masks<T> masks;
    masks.sinks = sinks.data();
    ea::attention_heads_into(heads(Q, H), heads(K, H), heads(V, H), heads_out(out, H), heads_out(lse, H), opt,
                             masks);
    RowMatrix<T> a(tq, H * dv), la(tq, H), b(tq, H * dv), lb(tq, H);
    const RowMatrix<T> K0 = K.topRows(k1), V0 = V.topRows(k1), K1 = K.bottomRows(tk - k1),
                       V1 = V.bottomRows(tk - k1);
    ea::attention_heads_into(heads(Q, H), heads(K0, H), heads(V0, H), heads_out(a, H), heads_out(la, H), opt);
    ea::attention_heads_into(heads(Q, H), heads(K1, H), heads(V1, H), heads_out(b, H), heads_out(lb, H), opt);
    ea::merge_attention_into(heads(a, H), heads_out(la, H), heads(b, H), heads_out(lb, H), heads_out(a, H),
                             heads_out(la, H));
    RowMatrix<T> zeros = RowMatrix<T>::Zero(tq, H * dv), sink_lse(tq, H);
    for (Eigen::Index i = 0; i < tq; ++i)
      for (Eigen::Index h = 0; h < H; ++h) sink_lse(i, h) = sinks[static_cast<std::size_t>(h)];
    ea::merge_attention_into(heads(a, H), heads_out(la, H), heads(zeros, H), heads_out(sink_lse, H),
                             heads_out(a, H), heads_out(la, H));
    CHECK((a - out).cwiseAbs().maxCoeff() <= tol);
    CHECK((la - lse).cwiseAbs().maxCoeff() <= tol * T(4));
  }
}

TEST_CASE_TEMPLATE("sinks: varlen is its sequences one by one, forward and backward, dL/dsinks summed", T,
                   float, double) {
  Rng rng(2614);
  const Eigen::Index H = 4, Hkv = 2, dk = 8, dv = 6;
  const std::vector<std::int64_t> cu_q = {0, 5, 5, 140}, cu_k = {0, 9, 12, 150};
  const Eigen::Index total_q = cu_q.back(), total_k = cu_k.back();
  const auto Q = random_matrix<RowMatrix<T>>(rng, total_q, H * dk);
  const auto K = random_matrix<RowMatrix<T>>(rng, total_k, Hkv * dk);
  const auto V = random_matrix<RowMatrix<T>>(rng, total_k, Hkv * dv);
  const auto dO = random_matrix<RowMatrix<T>>(rng, total_q, H * dv);
  const auto d_lse = random_matrix<RowMatrix<T>>(rng, total_q, H);
  const std::vector<T> sinks = {T(0.5), T(-1), T(2), T(0)};
  ea::Masks<T> masks;
  masks.sinks = sinks.data();
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt;
    opt.causal = true;
    opt.alignment = ea::CausalAlignment::BottomRight;
    opt.kernel = kernel;
    opt.threads = 2;
    RowMatrix<T> out(total_q, H * dv), lse(total_q, H);
    ea::attention_varlen_into(heads(Q, H), heads(K, Hkv), heads(V, Hkv), cu_q.data(), cu_k.data(), 3,
                              heads_out(out, H), heads_out(lse, H), opt, masks);
    RowMatrix<T> dq(total_q, H * dk), dk_(total_k, Hkv * dk), dv_(total_k, Hkv * dv);
    std::vector<T> d_sinks(H, T(-777));
    ea::BackwardTerms<T> terms;
    terms.d_lse = heads(d_lse, H);
    terms.d_sinks = d_sinks.data();
    ea::attention_varlen_backward_into(
        heads(Q, H), heads(K, Hkv), heads(V, Hkv), heads(out, H), heads(lse, H), heads(dO, H), cu_q.data(),
        cu_k.data(), 3, heads_out(dq, H), heads_out(dk_, Hkv), heads_out(dv_, Hkv), opt, masks, terms);
    std::vector<T> summed(H, T(0));
    for (std::size_t s = 0; s + 1 < cu_q.size(); ++s) {
      const Eigen::Index q0 = cu_q[s], nq = cu_q[s + 1] - q0, k0 = cu_k[s], nk = cu_k[s + 1] - k0;
      CAPTURE(s);
      const RowMatrix<T> Qs = Q.middleRows(q0, nq), Ks = K.middleRows(k0, nk), Vs = V.middleRows(k0, nk),
                         dOs = dO.middleRows(q0, nq), dLs = d_lse.middleRows(q0, nq);
      RowMatrix<T> o(nq, H * dv), l(nq, H);
      ea::attention_heads_into(heads(Qs, H), heads(Ks, Hkv), heads(Vs, Hkv), heads_out(o, H), heads_out(l, H),
                               opt, masks);
      CHECK(same_bits(o, RowMatrix<T>(out.middleRows(q0, nq))));
      CHECK(same_bits(l, RowMatrix<T>(lse.middleRows(q0, nq))));
      RowMatrix<T> gq(nq, H * dk), gk(nk, Hkv * dk), gv(nk, Hkv * dv);
      std::vector<T> ds(H, T(-777));
      ea::BackwardTerms<T> t;
      t.d_lse = heads(dLs, H);
      t.d_sinks = ds.data();
      ea::attention_heads_backward_into(heads(Qs, H), heads(Ks, Hkv), heads(Vs, Hkv), heads(o, H),
                                        heads(l, H), heads(dOs, H), heads_out(gq, H), heads_out(gk, Hkv),
                                        heads_out(gv, Hkv), opt, masks, t);
      CHECK(same_bits(gq, RowMatrix<T>(dq.middleRows(q0, nq))));
      CHECK(same_bits(gk, RowMatrix<T>(dk_.middleRows(k0, nk))));
      CHECK(same_bits(gv, RowMatrix<T>(dv_.middleRows(k0, nk))));
      for (Eigen::Index h = 0; h < H; ++h)
        summed[static_cast<std::size_t>(h)] += ds[static_cast<std::size_t>(h)];
    }
    // The same rows' shares summed in the same order, each sequence's from 0: within a few ulps.
    for (Eigen::Index h = 0; h < H; ++h) {
      CAPTURE(h);
      const T x = d_sinks[static_cast<std::size_t>(h)], y = summed[static_cast<std::size_t>(h)];
      CHECK(std::abs(x - y) <= T(16) * std::numeric_limits<T>::epsilon() * (T(1) + std::abs(y)));
    }
  }
}

TEST_CASE_TEMPLATE("sinks: a NaN sink reaches its own head's rows only", T, float, double) {
  Rng rng(2615);
  const Eigen::Index H = 2, tq = 20, tk = 30, dk = 4, dv = 3;
  const auto Q = random_matrix<RowMatrix<T>>(rng, tq, H * dk);
  const auto K = random_matrix<RowMatrix<T>>(rng, tk, H * dk);
  const auto V = random_matrix<RowMatrix<T>>(rng, tk, H * dv);
  const std::vector<T> sinks = {std::numeric_limits<T>::quiet_NaN(), T(0.5)};
  ea::Masks<T> masks;
  masks.sinks = sinks.data();
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt;
    opt.kernel = kernel;
    RowMatrix<T> out(tq, H * dv), lse(tq, H);
    ea::attention_heads_into(heads(Q, H), heads(K, H), heads(V, H), heads_out(out, H), heads_out(lse, H), opt,
                             masks);
    CHECK(out.leftCols(dv).array().isNaN().all());
    CHECK(lse.col(0).array().isNaN().all());
    CHECK(out.rightCols(dv).allFinite());
    CHECK(lse.col(1).allFinite());
  }
}

TEST_CASE_TEMPLATE("sinks: bfloat16 and half are the float call on the widened inputs, rounded once", S,
                   Eigen::bfloat16, Eigen::half) {
  Rng rng(2616);
  const Eigen::Index H = 2, tq = 70, tk = 90, dk = 16, dv = 8;
  const auto narrow = [](const RowMatrix<float>& m) { return RowMatrix<S>(m.template cast<S>()); };
  const RowMatrix<S> Q = narrow(random_matrix<RowMatrix<float>>(rng, tq, H * dk));
  const RowMatrix<S> K = narrow(random_matrix<RowMatrix<float>>(rng, tk, H * dk));
  const RowMatrix<S> V = narrow(random_matrix<RowMatrix<float>>(rng, tk, H * dv));
  const std::vector<S> sinks = {S(1.25f), S(-0.75f)};
  const std::vector<float> wide_sinks = {float(sinks[0]), float(sinks[1])};
  ea::Masks<S> masks;
  masks.sinks = sinks.data();
  ea::Masks<float> wide_masks;
  wide_masks.sinks = wide_sinks.data();
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt;
    opt.causal = true;
    opt.kernel = kernel;
    RowMatrix<S> out(tq, H * dv);
    RowMatrix<float> lse(tq, H), wide_out(tq, H * dv), wide_lse(tq, H);
    ea::attention_heads_into(heads(Q, H), heads(K, H), heads(V, H), heads_out(out, H), heads_out(lse, H), opt,
                             masks);
    const RowMatrix<float> Qf = Q.template cast<float>(), Kf = K.template cast<float>(),
                           Vf = V.template cast<float>();
    ea::attention_heads_into(heads(Qf, H), heads(Kf, H), heads(Vf, H), heads_out(wide_out, H),
                             heads_out(wide_lse, H), opt, wide_masks);
    if (bf16_pairs<S>(kernel)) {  // the weights rounded to bf16 (low_precision.hpp)
      check_pairs(out, wide_out, Vf.cwiseAbs().maxCoeff());
      CHECK(((lse - wide_lse).array().abs() <= 1e-5f * (1 + wide_lse.array().abs())).all());
    } else {
      CHECK(same_bits(out, narrow(wide_out)));
      CHECK(same_bits(lse, wide_lse));
    }
  }
}

TEST_CASE_TEMPLATE("sinks: bad terms throw std::invalid_argument naming them, writing nothing", T, float,
                   double) {
  Rng rng(2617);
  const auto Q = random_matrix<RowMatrix<T>>(rng, 5, 4);
  const auto K = random_matrix<RowMatrix<T>>(rng, 6, 4);
  const auto V = random_matrix<RowMatrix<T>>(rng, 6, 3);
  RowMatrix<T> out;
  Vec<T> lse;
  ea::attention_into(Q, K, V, out, lse);
  const RowMatrix<T> dO = RowMatrix<T>::Ones(5, 3);
  RowMatrix<T> dq = RowMatrix<T>::Constant(5, 4, T(-777)), dk = RowMatrix<T>::Constant(6, 4, T(-777)),
               dv = RowMatrix<T>::Constant(6, 3, T(-777));
  const auto throws = [&](const ea::Masks<T>& masks, const ea::BackwardTerms<T>& terms,
                          const std::string& what) {
    CAPTURE(what);
    try {
      ea::attention_backward_into(Q, K, V, out, lse, dO, dq, dk, dv, {}, masks, terms);
      CHECK_MESSAGE(false, "no exception");
    } catch (const std::invalid_argument& e) {
      CHECK_MESSAGE(std::string(e.what()).find(what) != std::string::npos, e.what());
    }
    CHECK((dq.array() == T(-777)).all());
  };
  T d_sink = 0;
  ea::BackwardTerms<T> terms;
  terms.d_sinks = &d_sink;
  throws({}, terms, "d_sinks is given but masks.sinks is not");
  const Vec<T> short_d_lse = Vec<T>::Zero(4);
  ea::BackwardTerms<T> bad_lse;
  bad_lse.d_lse = ea::HeadsView<const T>::single(short_d_lse);
  throws({}, bad_lse, "d_lse");
}

}  // namespace test_sinks
