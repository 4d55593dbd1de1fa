// SPDX-License-Identifier: MIT
// Relations the gradients must satisfy, each between two calls of the library: the decomposed
// and the fused forward give the same gradients; GQA's dK and dV are the sums of multi-head
// attention's with K and V copied per query head; a batch of one head is the single-head call;
// a packed variable-length batch is its sequences called one by one. Equal computations are
// compared bitwise; different computations of one function within twice the reference's
// per-element bound (each is within one bound of the exact value).
#include <doctest/doctest.h>

#include "backward_crosscheck.hpp"

namespace test_backward_identities {

using namespace ea_test;
using namespace ea_test::backward;

namespace {

// |a - b| <= 2 tol element-wise (a, b: two computed results, tol: the reference's bound).
template <class S>
void check_pair(const mh::HeadsView<S>& a, const mh::HeadsView<S>& b, const Array4& tol, const char* what) {
  Array4 twice = tol;
  for (auto& x : twice.v) x *= 2;
  Array4 expected(b.batch, b.heads, b.tokens, b.dim);
  for (Eigen::Index i = 0; i < b.batch; ++i)
    for (Eigen::Index h = 0; h < b.heads; ++h)
      for (Eigen::Index t = 0; t < b.tokens; ++t)
        for (Eigen::Index c = 0; c < b.dim; ++c)
          expected(i, h, t, c) = static_cast<long double>(b.head(i, h)(t, c));
  check_within(a, expected, twice, what);
}

}  // namespace

TEST_CASE_TEMPLATE("backward identities: the decomposed forward's LSE gives the fused forward's gradients", T,
                   float, double) {
  Rng rng(5);
  for (const bool causal : {false, true}) {
    CAPTURE(causal);
    const Eigen::Index tq = 150, tk = 170, dk = 12, dv = 7;
    const RowMatrix<T> Q = random_matrix<RowMatrix<T>>(rng, tq, dk),
                       K = random_matrix<RowMatrix<T>>(rng, tk, dk),
                       V = random_matrix<RowMatrix<T>>(rng, tk, dv),
                       dO = random_matrix<RowMatrix<T>>(rng, tq, dv);
    ea::Options opt;
    opt.causal = causal;
    opt.alignment = ea::CausalAlignment::BottomRight;
    RowMatrix<T> out;
    ea::Vector<T> lse;
    ea::attention_into(Q, K, V, out, lse, opt);
    const auto dec = ea::attention_decomposed(Q, K, V, opt);
    const auto fused = ea::attention_backward(Q, K, V, out, lse, dO, opt);
    const auto from_dec = ea::attention_backward(Q, K, V, dec.attn, dec.lse, dO, opt);
    // The bound of one computation, from the reference.
    crosscheck::Problem p;
    p.Q = Array4::one_head(to_long_double(Q));
    p.K = Array4::one_head(to_long_double(K));
    p.V = Array4::one_head(to_long_double(V));
    p.spec.causal = causal;
    p.spec.bottom_right = true;
    const BackwardReference ref =
        reference_heads_backward<T>(p.Q, p.K, p.V, p.spec, Array4::one_head(to_long_double(dO)));
    using View = mh::HeadsView<const T>;
    check_pair(View::single(from_dec.dq), View::single(fused.dq), ref.dq_tol, "dQ");
    check_pair(View::single(from_dec.dk), View::single(fused.dk), ref.dk_tol, "dK");
    check_pair(View::single(from_dec.dv), View::single(fused.dv), ref.dv_tol, "dV");
  }
}

TEST_CASE_TEMPLATE("backward identities: GQA's dK and dV are sums over the query heads of copied K and V", T,
                   float, double) {
  Rng rng(6);
  Config c{"GQA 6:2, causal bottom-right, ALiBi, bias 1xH", 2, 6, 2, 140, 150, 9, 5};
  c.causal = c.bottom_right = c.alibi = true;
  c.bias = "1xH";
  const Problem gqa = crosscheck::make_problem<T>(c, rng);
  Problem mha = gqa;  // K and V copied per query head
  mha.K = Array4(c.B, c.H, c.Tk, c.dk);
  mha.V = Array4(c.B, c.H, c.Tk, c.dv);
  for (Eigen::Index b = 0; b < c.B; ++b)
    for (Eigen::Index h = 0; h < c.H; ++h)
      for (Eigen::Index j = 0; j < c.Tk; ++j) {
        for (Eigen::Index d = 0; d < c.dk; ++d) mha.K(b, h, j, d) = gqa.K(b, h / 3, j, d);
        for (Eigen::Index d = 0; d < c.dv; ++d) mha.V(b, h, j, d) = gqa.V(b, h / 3, j, d);
      }
  const Seeds s = make_seeds<T>(gqa, rng, true);
  const mh::Options opt = options_for(gqa.spec);
  const Gradients<T> g = run_backward<T>(gqa, s, opt), m = run_backward<T>(mha, s, opt);
  // dQ and dbias: the same function of the same numbers, computed the same way.
  check_heads_equal(g.dq.view(), m.dq.view(), "dQ");
  check_heads_equal(g.d_bias.view(), m.d_bias.view(), "dbias");
  // dK, dV: the GQA call adds the heads in the kernel, the test adds MHA's per-head results.
  HeadsBuffer<T> dk_sum(mh::Layout::BHTD, c.B, c.Hkv, c.Tk, c.dk, T(0)),
      dv_sum(mh::Layout::BHTD, c.B, c.Hkv, c.Tk, c.dv, T(0));
  for (Eigen::Index b = 0; b < c.B; ++b)
    for (Eigen::Index h = 0; h < c.H; ++h) {
      dk_sum.view().head(b, h / 3) += m.dk.view().head(b, h);
      dv_sum.view().head(b, h / 3) += m.dv.view().head(b, h);
    }
  const BackwardReference ref =
      reference_heads_backward<T>(gqa.Q, gqa.K, gqa.V, gqa.spec, s.d_out, s.d_scores, s.d_lse);
  check_pair(g.dk.view(), dk_sum.view(), ref.dk_tol, "dK");
  check_pair(g.dv.view(), dv_sum.view(), ref.dv_tol, "dV");
}

TEST_CASE_TEMPLATE("backward identities: attention_heads_backward_into of one head is attention_backward", T,
                   float, double) {
  Rng rng(7);
  Config c{"one head, window, soft-cap", 1, 1, 1, 131, 129, 10, 6};
  c.window_left = 40;
  c.window_right = 3;
  c.softcap = 2.5;
  const Problem p = crosscheck::make_problem<T>(c, rng);
  const Seeds s = make_seeds<T>(p, rng, true);
  const mh::Options opt = options_for(p.spec);
  const Gradients<T> g = run_backward<T>(p, s, opt);
  const auto matrix = [](const Array4& a) {
    RowMatrix<T> m(a.n[2], a.n[3]);
    for (Eigen::Index i = 0; i < m.rows(); ++i)
      for (Eigen::Index j = 0; j < m.cols(); ++j) m(i, j) = static_cast<T>(a(0, 0, i, j));
    return m;
  };
  const RowMatrix<T> out = g.out.view().head(0, 0), lse = g.lse.view().head(0, 0);
  const RowMatrix<T> d_lse = matrix(*s.d_lse);  // dL/dLSE too, through the single-head call's terms
  ea::BackwardTerms<T> terms;
  terms.d_lse = mh::HeadsView<const T>::single(d_lse);
  const auto single = ea::attention_backward(matrix(p.Q), matrix(p.K), matrix(p.V), out, lse, matrix(s.d_out),
                                             matrix(*s.d_scores), opt, {}, terms);
  using View = mh::HeadsView<const T>;
  check_heads_equal(g.dq.view(), View::single(single.dq), "dQ");
  check_heads_equal(g.dk.view(), View::single(single.dk), "dK");
  check_heads_equal(g.dv.view(), View::single(single.dv), "dV");
}

TEST_CASE_TEMPLATE("backward identities: attention_varlen_backward_into is its sequences one by one", T,
                   float, double) {
  Rng rng(8);
  const Eigen::Index H = 4, Hkv = 2, dk = 8, dv = 5;
  const std::vector<std::int64_t> cu_q = {0, 3, 3, 140, 141}, cu_k = {0, 5, 9, 200, 200};
  const Eigen::Index total_q = 150, total_k = 210;  // rows past the last sequence are left alone
  Config c{"varlen", 1, H, Hkv, total_q, total_k, dk, dv};
  c.causal = c.bottom_right = c.alibi = true;
  c.window_left = 60;
  const Problem p = crosscheck::make_problem<T>(c, rng);
  const Seeds s = make_seeds<T>(p, rng, false);
  const mh::Options opt = options_for(p.spec, ea::Kernel::Auto, 2);
  const HeadsBuffer<T> Q(p.Q, mh::Layout::BTHD), K(p.K, mh::Layout::BTHD), V(p.V, mh::Layout::BTHD),
      dO(s.d_out, mh::Layout::BTHD);
  const MasksBuffer<T> masks(p.spec);
  const T sentinel = crosscheck::kSentinel<T>;
  HeadsBuffer<T> out(mh::Layout::BTHD, 1, H, total_q, dv, T(0)),
      lse(mh::Layout::BTHD, 1, H, total_q, 1, T(0));
  HeadsBuffer<T> dq(mh::Layout::BTHD, 1, H, total_q, dk, sentinel),
      dkv(mh::Layout::BTHD, 1, Hkv, total_k, dk, sentinel),
      dvv(mh::Layout::BTHD, 1, Hkv, total_k, dv, sentinel);
  const auto batch = static_cast<std::ptrdiff_t>(cu_q.size()) - 1;
  mh::attention_varlen_into(Q.cview(), K.cview(), V.cview(), cu_q.data(), cu_k.data(), batch, out.view(),
                            lse.view(), opt, masks.masks);
  mh::attention_varlen_backward_into(Q.cview(), K.cview(), V.cview(), out.cview(), lse.cview(), dO.cview(),
                                     cu_q.data(), cu_k.data(), batch, dq.view(), dkv.view(), dvv.view(), opt,
                                     masks.masks);
  for (std::ptrdiff_t b = 0; b < batch; ++b) {
    CAPTURE(b);
    const Eigen::Index q0 = cu_q[b], nq = cu_q[b + 1] - q0, k0 = cu_k[b], nk = cu_k[b + 1] - k0;
    HeadsBuffer<T> gq(mh::Layout::BHTD, 1, H, nq, dk, sentinel),
        gk(mh::Layout::BHTD, 1, Hkv, nk, dk, sentinel), gv(mh::Layout::BHTD, 1, Hkv, nk, dv, sentinel);
    mh::attention_heads_backward_into(token_subview(Q.cview(), q0, nq), token_subview(K.cview(), k0, nk),
                                      token_subview(V.cview(), k0, nk), token_subview(out.cview(), q0, nq),
                                      token_subview(lse.cview(), q0, nq), token_subview(dO.cview(), q0, nq),
                                      gq.view(), gk.view(), gv.view(), opt, masks.masks);
    check_heads_equal(token_subview(dq.view(), q0, nq), gq.view(), "dQ");
    check_heads_equal(token_subview(dkv.view(), k0, nk), gk.view(), "dK");
    check_heads_equal(token_subview(dvv.view(), k0, nk), gv.view(), "dV");
  }
  // Packed rows after the last sequence: untouched.
  const auto untouched = [&](const HeadsBuffer<T>& buf, Eigen::Index first) {
    for (Eigen::Index h = 0; h < buf.heads; ++h)
      for (Eigen::Index t = first; t < buf.tokens; ++t)
        for (Eigen::Index d = 0; d < buf.dim; ++d)
          if (buf.view().head(0, h)(t, d) != sentinel) return false;
    return true;
  };
  CHECK(untouched(dq, cu_q.back()));
  CHECK(untouched(dkv, cu_k.back()));
  CHECK(untouched(dvv, cu_k.back()));
}

}  // namespace test_backward_identities
