// SPDX-License-Identifier: MIT
// Every public call accepts Eigen::bfloat16 and Eigen::half, and each is the float call on the
// widened inputs, rounded once: the 16-bit path is the float pipeline with tiles widened as they
// load, so its results are bitwise those of the float call on the same (exactly widened)
// values, rounded to the 16-bit type. (Except the fused bf16 forward on Kernel::Avx512Bf16, which
// rounds the weights to bf16: within its bound of the float call, check_pairs().) Checked for the single-head
// forms (returned and _into, SCORES of either type), column-major inputs, maps and blocks, the multi-head,
// varlen and merge calls with every option, the backward passes and decode; plus the errors.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "common.hpp"
#include "inputs.hpp"
#include "low_precision.hpp"

namespace test_low_precision_api {

using namespace ea_test;

namespace {

template <class T16>
Row16<T16> random16(Rng& rng, Eigen::Index rows, Eigen::Index cols, double magnitude = 1.0) {
  return round_to<T16>(random_matrix<RowMatrix<float>>(rng, rows, cols, magnitude));
}

template <class D16, class DF>
void check_rounded(const Eigen::MatrixBase<D16>& actual, const Eigen::MatrixBase<DF>& wide) {
  using T16 = typename D16::Scalar;
  EA_CHECK_EQUAL(actual.template cast<float>(), round_to<T16>(wide).template cast<float>());
}

/// A fused forward's result: check_rounded(), or on bf16 pairs (`kernel`) check_pairs() with V's
/// largest magnitude v_max.
template <class D16, class DF>
void check_fused(ea::Kernel kernel, const Eigen::MatrixBase<D16>& actual, const Eigen::MatrixBase<DF>& wide,
                 float v_max) {
  if (bf16_pairs<typename D16::Scalar>(kernel)) {
    check_pairs(actual, wide, v_max);
  } else {
    check_rounded(actual, wide);
  }
}

/// A fused forward's LSE: the float call's bit for bit, or on bf16 pairs (logits summed in another
/// order, from exact products) within a few float roundings of it.
template <class D, class DF>
void check_fused_lse(bool pairs, const Eigen::MatrixBase<D>& lse, const Eigen::MatrixBase<DF>& wide) {
  if (pairs) {
    CHECK(((lse - wide).array().abs() <= 1e-5f * (1 + wide.array().abs())).all());
  } else {
    EA_CHECK_EQUAL(lse, wide);
  }
}

template <class T>
std::vector<T> random_vector(Rng& rng, std::size_t n) {
  std::vector<T> v(n);
  for (auto& x : v) x = T(static_cast<float>(rng.normal()));
  return v;
}

template <class T>
std::vector<float> widened(const std::vector<T>& v) {
  std::vector<float> w(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) w[i] = static_cast<float>(v[i]);
  return w;
}

}  // namespace

TEST_CASE_TEMPLATE("low precision api: the single-head calls are the float calls rounded once", T16,
                   Eigen::bfloat16, Eigen::half) {
  Rng rng(1410);
  const Row16<T16> Q = random16<T16>(rng, 37, 24), K = random16<T16>(rng, 70, 24),
                   V = random16<T16>(rng, 70, 12);
  const RowMatrix<float> Qf = Q.template cast<float>(), Kf = K.template cast<float>(),
                         Vf = V.template cast<float>();
  for (const ea::Kernel kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt = make_options({true, true}, 0.3, kernel);
    opt.softcap = 5;
    const ea::DecomposedResult<float> wide = ea::attention_decomposed(Qf, Kf, Vf, opt);
    const float v_max = Vf.cwiseAbs().maxCoeff();
    check_fused(kernel, ea::attention(Q, K, V, opt), ea::attention(Qf, Kf, Vf, opt), v_max);
    const ea::DecomposedResult<T16> r = ea::attention_decomposed(Q, K, V, opt);
    check_rounded(r.scores, wide.scores);
    check_rounded(r.attn, wide.attn);
    EA_CHECK_EQUAL(r.lse, wide.lse);
    check_rounded(ea::attention_scores(Q, K, opt), ea::attention_scores(Qf, Kf, opt));

    // _into: SCORES of the input type or of float, LSE in float; column-major outputs, blocks.
    Eigen::Matrix<T16, Eigen::Dynamic, Eigen::Dynamic> out, scores16;
    Eigen::MatrixXf scores_float;
    Eigen::VectorXf lse;
    ea::attention_into(Q, K, V, out, lse, opt);
    check_fused(kernel, out, ea::attention(Qf, Kf, Vf, opt), v_max);
    check_fused_lse(bf16_pairs<T16>(kernel), lse, wide.lse);
    ea::attention_decomposed_into(Q, K, V, scores16, out, lse, opt);
    check_rounded(scores16, wide.scores);
    ea::attention_decomposed_into(Q, K, V, scores_float, out, opt);
    EA_CHECK_EQUAL(scores_float, wide.scores);
    check_rounded(out, wide.attn);
    Eigen::MatrixXf big = Eigen::MatrixXf::Constant(50, 80, 7.0f);
    ea::attention_scores_into(Q, K, big.block(3, 2, 37, 70), opt);
    EA_CHECK_EQUAL(big.block(3, 2, 37, 70), wide.scores);
    CHECK(big(0, 0) == 7.0f);
  }
}

TEST_CASE_TEMPLATE("low precision api: column-major inputs, maps and blocks", T16, Eigen::bfloat16,
                   Eigen::half) {
  Rng rng(1411);
  const Eigen::Matrix<T16, Eigen::Dynamic, Eigen::Dynamic> Qc = random16<T16>(rng, 20, 16);
  const Row16<T16> Kbig = random16<T16>(rng, 40, 30), V = random16<T16>(rng, 33, 9);
  const auto K = Kbig.block(5, 3, 33, 16);
  std::vector<T16> vbuf(static_cast<std::size_t>(V.size()));
  Eigen::Map<Row16<T16>>(vbuf.data(), 33, 9) = V;
  const Eigen::Map<const Row16<T16>> Vmap(vbuf.data(), 33, 9);
  const ea::Options opt = make_options({true, false});
  const RowMatrix<float> Qf = Qc.template cast<float>(), Kf = K.template cast<float>(),
                         Vf = V.template cast<float>();
  const float v_max = Vf.cwiseAbs().maxCoeff();
  check_fused(opt.kernel, ea::attention(Qc, K, Vmap, opt), ea::attention(Qf, Kf, Vf, opt), v_max);
  // An expression of 16-bit type is evaluated once into a temporary.
  check_fused(opt.kernel, ea::attention(Qc, K, Vmap * T16(1.0f), opt), ea::attention(Qf, Kf, Vf, opt), v_max);
}

TEST_CASE_TEMPLATE("low precision api: multi-head, varlen and merge with every option", T16, Eigen::bfloat16,
                   Eigen::half) {
  Rng rng(1412);
  const Eigen::Index B = 2, H = 4, Hkv = 2, tq = 9, tk = 21, d = 16, dv = 8;
  std::vector<T16> q = random_vector<T16>(rng, B * H * tq * d), k = random_vector<T16>(rng, B * Hkv * tk * d),
                   v = random_vector<T16>(rng, B * Hkv * tk * dv),
                   bias = random_vector<T16>(rng, H * tq * tk), slopes = random_vector<T16>(rng, H);
  std::vector<float> qf = widened(q), kf = widened(k), vf = widened(v), biasf = widened(bias),
                     slopesf = widened(slopes);
  using V16 = ea::HeadsView<const T16>;
  using VF = ea::HeadsView<const float>;
  ea::Masks<T16> masks;
  masks.bias = ea::BroadcastView<T16>::per_head(bias.data(), 1, H, tq, tk);
  masks.alibi_slopes = slopes.data();
  ea::Masks<float> masksf;
  masksf.bias = ea::BroadcastView<float>::per_head(biasf.data(), 1, H, tq, tk);
  masksf.alibi_slopes = slopesf.data();
  for (const ea::Kernel kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt = make_options({true, true}, std::nullopt, kernel);
    opt.softcap = 4;
    opt.window_left = 6;
    std::vector<T16> out(B * H * tq * dv), scores(B * H * tq * tk), average(B * tq * tk);
    std::vector<float> outf(out.size()), scoresf(scores.size()), averagef(average.size()), lse(B * H * tq),
        lsef(lse.size());
    ea::attention_heads_into(V16::bthd(q.data(), B, tq, H, d), V16::bthd(k.data(), B, tk, Hkv, d),
                             V16::bthd(v.data(), B, tk, Hkv, dv),
                             ea::HeadsView<T16>::bthd(out.data(), B, tq, H, dv),
                             ea::HeadsView<float>::bhtd(lse.data(), B, H, tq, 1), opt, masks);
    ea::attention_heads_into(VF::bthd(qf.data(), B, tq, H, d), VF::bthd(kf.data(), B, tk, Hkv, d),
                             VF::bthd(vf.data(), B, tk, Hkv, dv),
                             ea::HeadsView<float>::bthd(outf.data(), B, tq, H, dv),
                             ea::HeadsView<float>::bhtd(lsef.data(), B, H, tq, 1), opt, masksf);
    const auto as_matrix = [](auto& buf) {
      return Eigen::Map<RowMatrix<std::remove_reference_t<decltype(buf[0])>>>(buf.data(), 1, buf.size());
    };
    const float v_max = as_matrix(vf).cwiseAbs().maxCoeff();
    check_fused(kernel, as_matrix(out), as_matrix(outf), v_max);
    check_fused_lse(bf16_pairs<T16>(kernel), as_matrix(lse), as_matrix(lsef));

    ea::attention_heads_decomposed_into(V16::bhtd(q.data(), B, H, tq, d), V16::bhtd(k.data(), B, Hkv, tk, d),
                                        V16::bhtd(v.data(), B, Hkv, tk, dv),
                                        ea::HeadsView<T16>::bhtd(scores.data(), B, H, tq, tk),
                                        ea::HeadsView<T16>::bhtd(out.data(), B, H, tq, dv), {},
                                        ea::HeadsView<T16>::bhtd(average.data(), B, 1, tq, tk), opt, masks);
    ea::attention_heads_decomposed_into(
        VF::bhtd(qf.data(), B, H, tq, d), VF::bhtd(kf.data(), B, Hkv, tk, d),
        VF::bhtd(vf.data(), B, Hkv, tk, dv), ea::HeadsView<float>::bhtd(scoresf.data(), B, H, tq, tk),
        ea::HeadsView<float>::bhtd(outf.data(), B, H, tq, dv), {},
        ea::HeadsView<float>::bhtd(averagef.data(), B, 1, tq, tk), opt, masksf);
    check_rounded(as_matrix(scores), as_matrix(scoresf));
    check_rounded(as_matrix(out), as_matrix(outf));
    // The 16-bit average is the float mean of the H weights each rounded to T16 (the same float
    // weights as the float call's), rounded to T16. With u16 = eps16 / 2 the unit roundoff of
    // T16 and u the float one: the weights' roundings move the mean by at most u16 mean (all
    // weights are >= 0), the final rounding by u16 |average|, and the two float means (H
    // additions and a division each) differ by at most 2 (H + 1) u mean. Weights below T16's
    // smallest normal round absolutely, by at most half its smallest subnormal each time.
    const long double avg_rel = static_cast<long double>(epsilon16<T16>()) + 2.0L * (H + 1) * 0x1p-24L;
    const long double avg_abs = static_cast<long double>(std::numeric_limits<T16>::denorm_min());
    const Tol avg_tol{avg_abs, avg_rel};
    for (std::size_t i = 0; i < average.size(); ++i) {
      CAPTURE(i);
      CHECK(near(static_cast<float>(average[i]), averagef[i], avg_tol));
    }

    // varlen: two sequences packed into the first batch entry's rows.
    const std::int64_t cu_q[3] = {0, 4, 9}, cu_k[3] = {0, 12, 21};
    ea::Masks<T16> alibi_only;
    alibi_only.alibi_slopes = slopes.data();
    ea::Masks<float> alibi_onlyf;
    alibi_onlyf.alibi_slopes = slopesf.data();
    std::vector<T16> vout(H * tq * dv, T16(9.0f));
    std::vector<float> voutf(vout.size(), 9.0f);
    ea::attention_varlen_into(V16::bthd(q.data(), 1, tq, H, d), V16::bthd(k.data(), 1, tk, Hkv, d),
                              V16::bthd(v.data(), 1, tk, Hkv, dv), cu_q, cu_k, 2,
                              ea::HeadsView<T16>::bthd(vout.data(), 1, tq, H, dv), opt, alibi_only);
    ea::attention_varlen_into(VF::bthd(qf.data(), 1, tq, H, d), VF::bthd(kf.data(), 1, tk, Hkv, d),
                              VF::bthd(vf.data(), 1, tk, Hkv, dv), cu_q, cu_k, 2,
                              ea::HeadsView<float>::bthd(voutf.data(), 1, tq, H, dv), opt, alibi_onlyf);
    check_fused(kernel, as_matrix(vout), as_matrix(voutf), v_max);
    const std::size_t packed = ea::varlen_scores_size(cu_q, cu_k, 2, H);
    std::vector<T16> vscores(packed);
    std::vector<float> vscoresf(packed);
    ea::attention_varlen_decomposed_into(V16::bthd(q.data(), 1, tq, H, d), V16::bthd(k.data(), 1, tk, Hkv, d),
                                         V16::bthd(v.data(), 1, tk, Hkv, dv), cu_q, cu_k, 2, vscores.data(),
                                         packed, ea::HeadsView<T16>::bthd(vout.data(), 1, tq, H, dv), opt,
                                         alibi_only);
    ea::attention_varlen_decomposed_into(VF::bthd(qf.data(), 1, tq, H, d), VF::bthd(kf.data(), 1, tk, Hkv, d),
                                         VF::bthd(vf.data(), 1, tk, Hkv, dv), cu_q, cu_k, 2, vscoresf.data(),
                                         packed, ea::HeadsView<float>::bthd(voutf.data(), 1, tq, H, dv), opt,
                                         alibi_onlyf);
    check_rounded(as_matrix(vscores), as_matrix(vscoresf));
  }

  // merge_attention_into: two halves of the keys merged in float, rounded once.
  const ea::Options opt;
  const Eigen::Index half_k = tk / 2;
  std::vector<T16> oa(H * tq * dv), ob(oa.size()), merged(oa.size());
  std::vector<float> la(H * tq), lb(la.size()), lm(la.size()), whole(oa.size()), lw(la.size());
  const auto q1 = V16::bhtd(q.data(), 1, H, tq, d);
  const auto k1 = V16::bhtd(k.data(), 1, Hkv, tk, d), v1 = V16::bhtd(v.data(), 1, Hkv, tk, dv);
  auto first = k1, second = k1, vfirst = v1, vsecond = v1;
  first.tokens = vfirst.tokens = half_k;
  second.tokens = vsecond.tokens = tk - half_k;
  second.data += half_k * d;
  vsecond.data += half_k * dv;
  ea::attention_heads_into(q1, first, vfirst, ea::HeadsView<T16>::bhtd(oa.data(), 1, H, tq, dv),
                           ea::HeadsView<float>::bhtd(la.data(), 1, H, tq, 1), opt);
  ea::attention_heads_into(q1, second, vsecond, ea::HeadsView<T16>::bhtd(ob.data(), 1, H, tq, dv),
                           ea::HeadsView<float>::bhtd(lb.data(), 1, H, tq, 1), opt);
  ea::merge_attention_into(V16::bhtd(oa.data(), 1, H, tq, dv), VF::bhtd(la.data(), 1, H, tq, 1),
                           V16::bhtd(ob.data(), 1, H, tq, dv), VF::bhtd(lb.data(), 1, H, tq, 1),
                           ea::HeadsView<T16>::bhtd(merged.data(), 1, H, tq, dv),
                           ea::HeadsView<float>::bhtd(lm.data(), 1, H, tq, 1));
  std::vector<T16> direct(oa.size());
  ea::attention_heads_into(q1, k1, v1, ea::HeadsView<T16>::bhtd(direct.data(), 1, H, tq, dv),
                           ea::HeadsView<float>::bhtd(lw.data(), 1, H, tq, 1), opt);
  // Each half was rounded (u |o_a|, u |o_b|), the merge rounds once more (u |merged|) and the
  // direct result once (u |direct|): with eps = 2u, eps (max(|o_a|, |o_b|) + |direct|) bounds it.
  const float eps = epsilon16<T16>();
  for (std::size_t i = 0; i < merged.size(); ++i) {
    const float m = static_cast<float>(merged[i]), w = static_cast<float>(direct[i]);
    const float parts = std::max(std::fabs(static_cast<float>(oa[i])), std::fabs(static_cast<float>(ob[i])));
    CHECK(std::fabs(m - w) <= eps * (parts + std::fabs(w)));
  }
  for (std::size_t i = 0; i < lm.size(); ++i)
    CHECK(std::fabs(lm[i] - lw[i]) <= 1e-5f * (1 + std::fabs(lw[i])));
}

TEST_CASE_TEMPLATE("low precision api: the backward passes are the float passes on the widened values", T16,
                   Eigen::bfloat16, Eigen::half) {
  Rng rng(1413);
  const Row16<T16> Q = random16<T16>(rng, 13, 8), K = random16<T16>(rng, 17, 8),
                   V = random16<T16>(rng, 17, 5), dO = random16<T16>(rng, 13, 5),
                   dS = random16<T16>(rng, 13, 17);
  ea::Options opt = make_options({true, true});
  // The widening backward (the bf16 pairs round P and dZ: test/bf16_dot_product.cpp).
  if (bf16_pairs<T16>(opt.kernel)) opt.kernel = ea::Kernel::Avx512;
  Eigen::VectorXf lse;
  Row16<T16> out;
  ea::attention_into(Q, K, V, out, lse, opt);
  const RowMatrix<float> Qf = Q.template cast<float>(), Kf = K.template cast<float>(),
                         Vf = V.template cast<float>(), Of = out.template cast<float>(),
                         dOf = dO.template cast<float>(), dSf = dS.template cast<float>();
  const ea::Gradients<float> wide = ea::attention_backward(Qf, Kf, Vf, Of, lse, dOf, opt);
  const ea::Gradients<T16> g = ea::attention_backward(Q, K, V, out, lse, dO, opt);
  check_rounded(g.dq, wide.dq);
  check_rounded(g.dk, wide.dk);
  check_rounded(g.dv, wide.dv);
  const ea::Gradients<float> wide_s = ea::attention_backward(Qf, Kf, Vf, Of, lse, dOf, dSf, opt);
  Row16<T16> dq, dk, dv;
  ea::attention_backward_into(Q, K, V, out, lse, dO, dS, dq, dk, dv, opt);
  check_rounded(dq, wide_s.dq);
  check_rounded(dk, wide_s.dk);
  check_rounded(dv, wide_s.dv);

  // Multi-head with GQA and a broadcast bias with its gradient.
  const Eigen::Index H = 2, tq = 6, tk = 7, d = 4;
  std::vector<T16> q = random_vector<T16>(rng, H * tq * d), k = random_vector<T16>(rng, tk * d),
                   v = random_vector<T16>(rng, tk * d), o(H * tq * d),
                   d_out = random_vector<T16>(rng, H * tq * d), bias = random_vector<T16>(rng, tq * tk),
                   gq(q.size()), gk(k.size()), gv(v.size()), gbias(bias.size());
  std::vector<float> l(H * tq);
  using V16 = ea::HeadsView<const T16>;
  using W16 = ea::HeadsView<T16>;
  ea::Masks<T16> masks;
  masks.bias = ea::BroadcastView<T16>::matrix(bias.data(), tq, tk);
  ea::attention_heads_into(V16::bhtd(q.data(), 1, H, tq, d), V16::bhtd(k.data(), 1, 1, tk, d),
                           V16::bhtd(v.data(), 1, 1, tk, d), W16::bhtd(o.data(), 1, H, tq, d),
                           ea::HeadsView<float>::bhtd(l.data(), 1, H, tq, 1), opt, masks);
  ea::attention_heads_backward_into(
      V16::bhtd(q.data(), 1, H, tq, d), V16::bhtd(k.data(), 1, 1, tk, d), V16::bhtd(v.data(), 1, 1, tk, d),
      V16::bhtd(o.data(), 1, H, tq, d), ea::HeadsView<const float>::bhtd(l.data(), 1, H, tq, 1),
      V16::bhtd(d_out.data(), 1, H, tq, d), {}, W16::bhtd(gq.data(), 1, H, tq, d),
      W16::bhtd(gk.data(), 1, 1, tk, d), W16::bhtd(gv.data(), 1, 1, tk, d),
      W16::bhtd(gbias.data(), 1, 1, tq, tk), opt, masks);
  std::vector<float> qf = widened(q), kf = widened(k), vf = widened(v), of = widened(o), dof = widened(d_out),
                     biasf = widened(bias), fq(q.size()), fk(k.size()), fv(v.size()), fbias(bias.size());
  using VF = ea::HeadsView<const float>;
  using WF = ea::HeadsView<float>;
  ea::Masks<float> masksf;
  masksf.bias = ea::BroadcastView<float>::matrix(biasf.data(), tq, tk);
  ea::attention_heads_backward_into(
      VF::bhtd(qf.data(), 1, H, tq, d), VF::bhtd(kf.data(), 1, 1, tk, d), VF::bhtd(vf.data(), 1, 1, tk, d),
      VF::bhtd(of.data(), 1, H, tq, d), VF::bhtd(l.data(), 1, H, tq, 1), VF::bhtd(dof.data(), 1, H, tq, d),
      {}, WF::bhtd(fq.data(), 1, H, tq, d), WF::bhtd(fk.data(), 1, 1, tk, d),
      WF::bhtd(fv.data(), 1, 1, tk, d), WF::bhtd(fbias.data(), 1, 1, tq, tk), opt, masksf);
  const auto as_matrix = [](auto& buf) {
    return Eigen::Map<RowMatrix<std::remove_reference_t<decltype(buf[0])>>>(buf.data(), 1, buf.size());
  };
  check_rounded(as_matrix(gq), as_matrix(fq));
  check_rounded(as_matrix(gk), as_matrix(fk));
  check_rounded(as_matrix(gv), as_matrix(fv));
  check_rounded(as_matrix(gbias), as_matrix(fbias));

  // varlen backward, two sequences (queries 0-1 on keys 0-2, queries 2-4 on keys 3-6): dQ, dK
  // and dV are the float varlen backward's on the widened values, rounded once; the query row
  // after the last sequence stays untouched.
  const std::int64_t cu_q[3] = {0, 2, 5}, cu_k[3] = {0, 3, 7};
  std::vector<T16> vq(q.size(), T16(3.0f));
  ea::attention_varlen_backward_into(
      V16::bthd(q.data(), 1, tq, H, d), V16::bthd(k.data(), 1, tk, 1, d), V16::bthd(v.data(), 1, tk, 1, d),
      V16::bthd(o.data(), 1, tq, H, d), ea::HeadsView<const float>::bhtd(l.data(), 1, H, tq, 1),
      V16::bthd(d_out.data(), 1, tq, H, d), cu_q, cu_k, 2, W16::bthd(vq.data(), 1, tq, H, d),
      W16::bthd(gk.data(), 1, tk, 1, d), W16::bthd(gv.data(), 1, tk, 1, d), opt);
  std::vector<float> wq(q.size(), 3.0f);
  ea::attention_varlen_backward_into(VF::bthd(qf.data(), 1, tq, H, d), VF::bthd(kf.data(), 1, tk, 1, d),
                                     VF::bthd(vf.data(), 1, tk, 1, d), VF::bthd(of.data(), 1, tq, H, d),
                                     VF::bhtd(l.data(), 1, H, tq, 1), VF::bthd(dof.data(), 1, tq, H, d), cu_q,
                                     cu_k, 2, WF::bthd(wq.data(), 1, tq, H, d),
                                     WF::bthd(fk.data(), 1, tk, 1, d), WF::bthd(fv.data(), 1, tk, 1, d), opt);
  check_rounded(as_matrix(vq), as_matrix(wq));
  check_rounded(as_matrix(gk), as_matrix(fk));
  check_rounded(as_matrix(gv), as_matrix(fv));
  for (std::size_t i = 5 * H * d; i < vq.size(); ++i) CHECK(static_cast<float>(vq[i]) == 3.0f);
  // The gradients are those of the sequences' own problems: sequence 1's keys get nothing from
  // sequence 0's queries (a float varlen backward of sequence 1 alone gives its dK rows).
  std::vector<float> sq(3 * H * d), sk(4 * d), sv(4 * d);
  const std::int64_t one_q[2] = {0, 3}, one_k[2] = {0, 4};
  ea::attention_varlen_backward_into(
      VF::bthd(qf.data() + 2 * H * d, 1, 3, H, d), VF::bthd(kf.data() + 3 * d, 1, 4, 1, d),
      VF::bthd(vf.data() + 3 * d, 1, 4, 1, d), VF::bthd(of.data() + 2 * H * d, 1, 3, H, d),
      VF{l.data() + 2, 1, H, 3, 1, H * tq, tq, 1, 1}, VF::bthd(dof.data() + 2 * H * d, 1, 3, H, d), one_q,
      one_k, 1, WF::bthd(sq.data(), 1, 3, H, d), WF::bthd(sk.data(), 1, 4, 1, d),
      WF::bthd(sv.data(), 1, 4, 1, d), opt);
  for (std::size_t i = 0; i < sk.size(); ++i) {
    CAPTURE(i);
    CHECK(static_cast<float>(gk[3 * d + i]) == static_cast<float>(T16(sk[i])));
    CHECK(static_cast<float>(gv[3 * d + i]) == static_cast<float>(T16(sv[i])));
  }
}

TEST_CASE_TEMPLATE(
    "low precision api: the 16-bit backward is the float backward on the widened values for "
    "every kernel and thread count",
    T16, Eigen::bfloat16, Eigen::half) {
  Rng rng(1415);
  // Three query tiles and two key tiles of the backward (kBackwardRows 128, kBackwardCols 256),
  // so that its tiles widen partial tiles too and its key tiles are spread over the threads.
  const Eigen::Index tq = 260, tk = 300;
  const Row16<T16> Q = random16<T16>(rng, tq, 16), K = random16<T16>(rng, tk, 16),
                   V = random16<T16>(rng, tk, 8), dO = random16<T16>(rng, tq, 8),
                   dS = random16<T16>(rng, tq, tk), bias = random16<T16>(rng, tq, tk);
  const RowMatrix<float> Qf = Q.template cast<float>(), Kf = K.template cast<float>(),
                         Vf = V.template cast<float>(), dOf = dO.template cast<float>(),
                         dSf = dS.template cast<float>(), biasf = bias.template cast<float>();
  ea::Masks<T16> masks;
  masks.bias = ea::BroadcastView<T16>::matrix(bias.data(), tq, tk);
  ea::Masks<float> masksf;
  masksf.bias = ea::BroadcastView<float>::matrix(biasf.data(), tq, tk);
  ea::Options opt = make_options({true, true});
  opt.softcap = 4;
  Eigen::VectorXf lse;
  Row16<T16> out;
  ea::attention_into(Q, K, V, out, lse, opt, masks);
  const RowMatrix<float> Of = out.template cast<float>();
  // (The bf16 backward of Avx512Bf16 and Amx rounds P and dZ to bf16: test/bf16_dot_product.cpp
  // holds it to its bound of the float backward instead.)
  for (const ea::Kernel kernel : ea::available_kernels()) {
    if (bf16_pairs<T16>(kernel)) continue;
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    opt.kernel = kernel;
    opt.threads = 1;
    const ea::Gradients<float> wide = ea::attention_backward(Qf, Kf, Vf, Of, lse, dOf, dSf, opt, masksf);
    for (const int threads : {1, 3}) {
      CAPTURE(threads);
      opt.threads = threads;
      Row16<T16> dq(tq, 16), dk(tk, 16), dv(tk, 8);
      ea::attention_backward_into(Q, K, V, out, lse, dO, dS, dq, dk, dv, opt, masks);
      check_rounded(dq, wide.dq);
      check_rounded(dk, wide.dk);
      check_rounded(dv, wide.dv);
    }
  }
}

TEST_CASE_TEMPLATE("low precision api: decode takes queries of the cache's 16-bit type", T16, Eigen::bfloat16,
                   Eigen::half) {
  Rng rng(1414);
  const Eigen::Index Hkv = 2, H = 4, d = 16, len = 40;
  ea::PagedKVCache<T16> cache(Hkv, d, d, 16, 256);
  const ea::SequenceId s = cache.create();
  const Row16<T16> K = random16<T16>(rng, len, Hkv * d), V = random16<T16>(rng, len, Hkv * d);
  cache.append(s, K, V);
  const Row16<T16> Q = random16<T16>(rng, 3, H * d);
  ea::Options opt;
  opt.causal = true;
  const Row16<T16> out = ea::attention_decode(cache, s, Q, opt);
  const RowMatrix<float> Qf = Q.template cast<float>();
  const RowMatrix<float> wide = ea::attention_decode(cache, s, Qf, opt);
  check_rounded(out, wide);

  // The _into forms take 16-bit query views and write a 16-bit attn (any layout, or a matrix with
  // the heads side by side) and a float lse [1, H, T_q, 1]: the float result, rounded.
  const std::int64_t cu[2] = {0, 3};
  RowMatrix<float> lse_f;
  ea::attention_decode_into(cache, &s, 1, ea::HeadsView<const float>::side_by_side(Qf, d), cu,
                            RowMatrix<float>(3, H * d), lse_f, opt);
  std::vector<T16> q_bhtd(static_cast<std::size_t>(H * 3 * d)), attn_bhtd(q_bhtd.size());
  std::vector<float> lse_bhtd(static_cast<std::size_t>(H * 3));
  for (Eigen::Index h = 0; h < H; ++h)
    for (Eigen::Index t = 0; t < 3; ++t)
      for (Eigen::Index c = 0; c < d; ++c)
        q_bhtd[static_cast<std::size_t>((h * 3 + t) * d + c)] = Q(t, h * d + c);
  ea::attention_decode_into(cache, &s, 1, ea::HeadsView<T16>::bhtd(q_bhtd.data(), 1, H, 3, d), cu,
                            ea::HeadsView<T16>::bhtd(attn_bhtd.data(), 1, H, 3, d),
                            ea::HeadsView<float>::bhtd(lse_bhtd.data(), 1, H, 3, 1), opt);
  Row16<T16> attn_side(3, H * d);
  for (Eigen::Index h = 0; h < H; ++h)
    for (Eigen::Index t = 0; t < 3; ++t)
      for (Eigen::Index c = 0; c < d; ++c)
        attn_side(t, h * d + c) = attn_bhtd[static_cast<std::size_t>((h * 3 + t) * d + c)];
  check_rounded(attn_side, wide);
  for (Eigen::Index h = 0; h < H; ++h)
    for (Eigen::Index t = 0; t < 3; ++t) CHECK(lse_bhtd[static_cast<std::size_t>(h * 3 + t)] == lse_f(t, h));
  Row16<T16> attn_matrix;  // resized to T_q x (H d), heads side by side
  ea::attention_decode_into(cache, &s, 1, ea::HeadsView<const T16>::side_by_side(Q, d), cu, attn_matrix, opt);
  check_rounded(attn_matrix, wide);
}

TEST_CASE_TEMPLATE("low precision api: errors name the shapes", T16, Eigen::bfloat16, Eigen::half) {
  const Row16<T16> Q = Row16<T16>::Zero(3, 4), K = Row16<T16>::Zero(5, 6), V = Row16<T16>::Zero(5, 2);
  CHECK_THROWS_WITH_AS(ea::attention(Q, K, V), doctest::Contains("Q is 3x4, K is 5x6"),
                       std::invalid_argument);
  Row16<T16> out = Row16<T16>::Constant(2, 2, T16(1.0f));
  const Row16<T16> K2 = Row16<T16>::Zero(5, 4);
  CHECK_THROWS_WITH_AS(ea::attention_into(Q, K2, V, out.block(0, 0, 2, 2)), doctest::Contains("3x2"),
                       std::invalid_argument);
  CHECK(static_cast<float>(out(0, 0)) == 1.0f);
  ea::Options opt;
  opt.scale = 1e-60;  // 0 in float, the compute type
  CHECK_THROWS_WITH_AS(ea::attention(Q, K2, V, opt), doctest::Contains("scale must be finite and > 0"),
                       std::invalid_argument);
}

}  // namespace test_low_precision_api
