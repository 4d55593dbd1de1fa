// SPDX-License-Identifier: MIT
// The 0.2 forms of the multi-head calls (Deprecated.hpp) still compile and give the same bits as
// the 0.3 calls they forward to (docs/migration.md), in every scalar type; and a non-const view,
// 16-bit ones included, converts wherever a const one is taken.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <EigenAttention/EigenAttention.hpp>

namespace test_migration {

namespace ea = EigenAttention;

namespace {

// Deterministic inputs in [-2, 2) (exact in every type: multiples of 1/64).
template <typename T>
std::vector<T> filled(std::size_t n, std::uint32_t seed) {
  std::vector<T> v(n);
  std::uint32_t s = seed * 2654435761u + 1;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<T>(static_cast<float>(static_cast<int>(s >> 24) - 128) / 64.0f);
  }
  return v;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// One multi-head problem: B = 2, H = 4 query heads on H_kv = 2 K/V heads, T_q = 5, T_k = 7,
// d_k = 3, d_v = 6 (BHTD), causal with a bias, and a two-sequence packing of the same buffers.
template <typename T>
struct Case {
  using L = ea::ComputeScalar<T>;
  static constexpr std::ptrdiff_t B = 2, H = 4, Hkv = 2, tq = 5, tk = 7, dk = 3, dv = 6;
  std::vector<T> q = filled<T>(B * H * tq * dk, 1), k = filled<T>(B * Hkv * tk * dk, 2),
                 v = filled<T>(B * Hkv * tk * dv, 3), bias = filled<T>(tq * tk, 4),
                 d_attn = filled<T>(B * H * tq * dv, 5), d_scores = filled<T>(B * H * tq * tk, 6);
  std::int64_t cu_q[3] = {0, 4, 10}, cu_k[3] = {0, 7, 14};
  ea::Options opt;
  ea::Masks<T> masks;
  Case() {
    opt.causal = true;
    masks.bias = ea::BroadcastView<T>::matrix(bias.data(), tq, tk);
  }
  ea::HeadsView<T> Q() { return ea::HeadsView<T>::bhtd(q.data(), B, H, tq, dk); }  // non-const
  ea::HeadsView<const T> K() const { return ea::HeadsView<const T>::bhtd(k.data(), B, Hkv, tk, dk); }
  ea::HeadsView<const T> Vv() const { return ea::HeadsView<const T>::bhtd(v.data(), B, Hkv, tk, dv); }
  template <typename U>
  static ea::HeadsView<U> out(std::vector<U>& s, std::ptrdiff_t b, std::ptrdiff_t h, std::ptrdiff_t t,
                              std::ptrdiff_t d) {
    return ea::HeadsView<U>::bhtd(s.data(), b, h, t, d);
  }
  // The packed view of the same buffers: [1, H, 10, d] queries and [1, H_kv, 14, d] keys.
  ea::HeadsView<T> packed_q() { return ea::HeadsView<T>::bthd(q.data(), 1, B * tq, H, dk); }
  ea::HeadsView<const T> packed_k() const {
    return ea::HeadsView<const T>::bthd(k.data(), 1, B * tk, Hkv, dk);
  }
  ea::HeadsView<const T> packed_v() const {
    return ea::HeadsView<const T>::bthd(v.data(), 1, B * tk, Hkv, dv);
  }
};

}  // namespace

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

TEST_CASE_TEMPLATE("migration: every 0.2 multi-head form gives the bits of its 0.3 call", T, float, double,
                   Eigen::bfloat16, Eigen::half) {
  using C = Case<T>;
  using L = typename C::L;
  C c;
  const auto B = C::B, H = C::H, Hkv = C::Hkv, tq = C::tq, tk = C::tk, dk = C::dk, dv = C::dv;

  // attention_heads -> attention_heads_into
  std::vector<T> o_old(B * H * tq * dv), o_new(o_old.size());
  std::vector<L> l_old(B * H * tq), l_new(l_old.size());
  ea::attention_heads(c.Q(), c.K(), c.Vv(), C::out(o_old, B, H, tq, dv), c.opt, c.masks,
                      C::out(l_old, B, H, tq, 1));
  ea::attention_heads_into(c.Q(), c.K(), c.Vv(), C::out(o_new, B, H, tq, dv), C::out(l_new, B, H, tq, 1),
                           c.opt, c.masks);
  CHECK(same_bits(o_old, o_new));
  CHECK(same_bits(l_old, l_new));

  // attention_heads_decomposed -> attention_heads_decomposed_into
  std::vector<T> s_old(B * H * tq * tk), s_new(s_old.size()), a_old(B * tq * tk), a_new(a_old.size());
  ea::attention_heads_decomposed(c.Q(), c.K(), c.Vv(), C::out(s_old, B, H, tq, tk),
                                 C::out(o_old, B, H, tq, dv), c.opt, c.masks, C::out(l_old, B, H, tq, 1),
                                 C::out(a_old, B, 1, tq, tk));
  ea::attention_heads_decomposed_into(c.Q(), c.K(), c.Vv(), C::out(s_new, B, H, tq, tk),
                                      C::out(o_new, B, H, tq, dv), C::out(l_new, B, H, tq, 1),
                                      C::out(a_new, B, 1, tq, tk), c.opt, c.masks);
  CHECK(same_bits(s_old, s_new));
  CHECK(same_bits(o_old, o_new));
  CHECK(same_bits(l_old, l_new));
  CHECK(same_bits(a_old, a_new));

  // attention_heads_backward -> attention_heads_backward_into (with d_scores and d_bias)
  const auto attn = ea::HeadsView<const T>::bhtd(o_new.data(), B, H, tq, dv);
  const auto lse = ea::HeadsView<const L>::bhtd(l_new.data(), B, H, tq, 1);
  const auto d_attn = ea::HeadsView<const T>::bhtd(c.d_attn.data(), B, H, tq, dv);
  const auto d_scores = ea::HeadsView<const T>::bhtd(c.d_scores.data(), B, H, tq, tk);
  std::vector<T> dq_old(c.q.size()), dk_old(c.k.size()), dv_old(c.v.size()), db_old(tq * tk);
  std::vector<T> dq_new(c.q.size()), dk_new(c.k.size()), dv_new(c.v.size()), db_new(tq * tk);
  ea::attention_heads_backward(c.Q(), c.K(), c.Vv(), attn, lse, d_attn, C::out(dq_old, B, H, tq, dk),
                               C::out(dk_old, B, Hkv, tk, dk), C::out(dv_old, B, Hkv, tk, dv), c.opt, c.masks,
                               d_scores, C::out(db_old, 1, 1, tq, tk));
  ea::attention_heads_backward_into(c.Q(), c.K(), c.Vv(), attn, lse, d_attn, d_scores,
                                    C::out(dq_new, B, H, tq, dk), C::out(dk_new, B, Hkv, tk, dk),
                                    C::out(dv_new, B, Hkv, tk, dv), C::out(db_new, 1, 1, tq, tk), c.opt,
                                    c.masks);
  CHECK(same_bits(dq_old, dq_new));
  CHECK(same_bits(dk_old, dk_new));
  CHECK(same_bits(dv_old, dv_new));
  CHECK(same_bits(db_old, db_new));

  // merge_attention -> merge_attention_into: the two halves of the keys.
  ea::Options plain;
  auto first = c.K(), vfirst = c.Vv(), second = c.K(), vsecond = c.Vv();
  first.tokens = vfirst.tokens = 3;
  second.tokens = vsecond.tokens = tk - 3;
  second.data += 3 * dk;
  vsecond.data += 3 * dv;
  std::vector<T> oa(o_new.size()), ob(o_new.size());
  std::vector<L> la(l_new.size()), lb(l_new.size());
  ea::attention_heads_into(c.Q(), first, vfirst, C::out(oa, B, H, tq, dv), C::out(la, B, H, tq, 1), plain);
  ea::attention_heads_into(c.Q(), second, vsecond, C::out(ob, B, H, tq, dv), C::out(lb, B, H, tq, 1), plain);
  ea::merge_attention(C::out(oa, B, H, tq, dv), C::out(la, B, H, tq, 1), C::out(ob, B, H, tq, dv),
                      C::out(lb, B, H, tq, 1), C::out(o_old, B, H, tq, dv), C::out(l_old, B, H, tq, 1));
  ea::merge_attention_into(C::out(oa, B, H, tq, dv), C::out(la, B, H, tq, 1), C::out(ob, B, H, tq, dv),
                           C::out(lb, B, H, tq, 1), C::out(o_new, B, H, tq, dv), C::out(l_new, B, H, tq, 1));
  CHECK(same_bits(o_old, o_new));
  CHECK(same_bits(l_old, l_new));

  // The varlen family on the packed buffers (ALiBi only: per-sequence shapes differ).
  const std::vector<T> slopes = {T(0.5f), T(0.25f), T(0.125f), T(0.0625f)};
  ea::Masks<T> alibi;
  alibi.alibi_slopes = slopes.data();
  std::vector<T> po_old(10 * H * dv), po_new(po_old.size());
  std::vector<L> pl_old(10 * H), pl_new(pl_old.size());
  const auto packed_out = [&](std::vector<T>& s) { return ea::HeadsView<T>::bthd(s.data(), 1, 10, H, dv); };
  const auto packed_lse = [&](std::vector<L>& s) { return ea::HeadsView<L>::bhtd(s.data(), 1, H, 10, 1); };
  ea::attention_varlen(c.packed_q(), c.packed_k(), c.packed_v(), packed_out(po_old), c.cu_q, c.cu_k, 2, c.opt,
                       alibi, packed_lse(pl_old));
  ea::attention_varlen_into(c.packed_q(), c.packed_k(), c.packed_v(), c.cu_q, c.cu_k, 2, packed_out(po_new),
                            packed_lse(pl_new), c.opt, alibi);
  CHECK(same_bits(po_old, po_new));
  CHECK(same_bits(pl_old, pl_new));

  const std::size_t n = ea::varlen_scores_size(c.cu_q, c.cu_k, 2, H);
  std::vector<T> ps_old(n), ps_new(n);
  ea::attention_varlen_decomposed(c.packed_q(), c.packed_k(), c.packed_v(), ps_old.data(), n,
                                  packed_out(po_old), c.cu_q, c.cu_k, 2, c.opt, alibi, packed_lse(pl_old));
  ea::attention_varlen_decomposed_into(c.packed_q(), c.packed_k(), c.packed_v(), c.cu_q, c.cu_k, 2,
                                       ps_new.data(), n, packed_out(po_new), packed_lse(pl_new), c.opt,
                                       alibi);
  CHECK(same_bits(ps_old, ps_new));
  CHECK(same_bits(po_old, po_new));
  CHECK(same_bits(pl_old, pl_new));

  const auto pd_attn = ea::HeadsView<const T>::bthd(c.d_attn.data(), 1, 10, H, dv);
  std::vector<T> pdq_old(10 * H * dk), pdk_old(14 * Hkv * dk), pdv_old(14 * Hkv * dv);
  std::vector<T> pdq_new(pdq_old.size()), pdk_new(pdk_old.size()), pdv_new(pdv_old.size());
  const auto pdq = [&](std::vector<T>& s) { return ea::HeadsView<T>::bthd(s.data(), 1, 10, H, dk); };
  const auto pdk = [&](std::vector<T>& s) { return ea::HeadsView<T>::bthd(s.data(), 1, 14, Hkv, dk); };
  const auto pdv = [&](std::vector<T>& s) { return ea::HeadsView<T>::bthd(s.data(), 1, 14, Hkv, dv); };
  ea::attention_varlen_backward(c.packed_q(), c.packed_k(), c.packed_v(), packed_out(po_new),
                                packed_lse(pl_new), pd_attn, pdq(pdq_old), pdk(pdk_old), pdv(pdv_old), c.cu_q,
                                c.cu_k, 2, c.opt, alibi);
  ea::attention_varlen_backward_into(c.packed_q(), c.packed_k(), c.packed_v(), packed_out(po_new),
                                     packed_lse(pl_new), pd_attn, c.cu_q, c.cu_k, 2, pdq(pdq_new),
                                     pdk(pdk_new), pdv(pdv_new), c.opt, alibi);
  CHECK(same_bits(pdq_old, pdq_new));
  CHECK(same_bits(pdk_old, pdk_new));
  CHECK(same_bits(pdv_old, pdv_new));

  // The forms with their optional arguments left out agree with those given empty.
  ea::attention_heads(c.Q(), c.K(), c.Vv(), C::out(o_old, B, H, tq, dv));
  ea::attention_heads_into(c.Q(), c.K(), c.Vv(), C::out(o_new, B, H, tq, dv));
  CHECK(same_bits(o_old, o_new));
}

namespace {

/// attn [1, H, T_q, d] (BHTD, contiguous) against T_q x (H d), heads side by side, bit for bit.
bool same_heads(const ea::RowMatrix<float>& side, const std::vector<float>& bhtd, Eigen::Index H) {
  const Eigen::Index tq = side.rows(), d = side.cols() / H;
  if (static_cast<Eigen::Index>(bhtd.size()) != H * tq * d) return false;
  for (Eigen::Index h = 0; h < H; ++h)
    for (Eigen::Index t = 0; t < tq; ++t)
      for (Eigen::Index c = 0; c < d; ++c)
        if (std::memcmp(&side(t, h * d + c), &bhtd[static_cast<std::size_t>((h * tq + t) * d + c)],
                        sizeof(float)) != 0)
          return false;
  return true;
}

bool same_matrix(const ea::RowMatrix<float>& a, const ea::RowMatrix<float>& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<std::size_t>(a.size())) == 0;
}

}  // namespace

TEST_CASE(
    "migration: each 0.2 decode form gives the bits of its 0.3 form (views, LSE [1, H, T_q, 1], Masks)") {
  using M = ea::RowMatrix<float>;
  using V = ea::HeadsView<float>;
  const Eigen::Index H = 4, Hkv = 2, d = 8, dv = 6, tk = 11, tq = 3;
  ea::PagedKVCache<float> cache(Hkv, d, dv, /*page_size=*/16, /*capacity_tokens=*/64);
  const auto s = cache.create();
  const std::vector<float> kk = filled<float>(static_cast<std::size_t>(tk * Hkv * d), 9),
                           vv = filled<float>(static_cast<std::size_t>(tk * Hkv * dv), 11),
                           q = filled<float>(static_cast<std::size_t>(tq * H * d), 10);
  const Eigen::Map<const M> K(kk.data(), tk, Hkv * d), Vm(vv.data(), tk, Hkv * dv), Q(q.data(), tq, H * d);
  cache.append(s, K, Vm);
  const float slopes[4] = {0.5f, 0.25f, 0.125f, 0.0625f};
  ea::Masks<float> masks;
  masks.alibi_slopes = slopes;
  ea::Options opt;
  opt.causal = true;
  const std::int64_t cu[2] = {0, tq};
  const auto q_view = ea::HeadsView<const float>::side_by_side(Q, d);
  // The page layout of the cache as a PagedKVView (one sequence).
  const auto pages = cache.pages(s);
  const std::int64_t length = tk;
  const auto view =
      ea::PagedKVView<float>::hnd(cache.key_pages(), cache.value_pages(), cache.num_pages(), 16, Hkv, d, dv,
                                  pages.data(), static_cast<std::ptrdiff_t>(pages.size()), &length, 1);

  // The 0.3 forms: views of [1, H, T_q, d] (BHTD buffers, not the heads side by side) and LSE
  // [1, H, T_q, 1]; with and without the slopes.
  for (const bool alibi : {false, true}) {
    CAPTURE(alibi);
    const ea::Masks<float> m = alibi ? masks : ea::Masks<float>{};
    std::vector<float> attn(static_cast<std::size_t>(H * tq * dv)), lse(static_cast<std::size_t>(H * tq)),
        attn_view(attn.size()), lse_view(lse.size()), attn_only(attn.size());
    ea::attention_decode_into(cache, &s, 1, q_view, cu, V::bhtd(attn.data(), 1, H, tq, dv),
                              V::bhtd(lse.data(), 1, H, tq, 1), opt, m);
    ea::attention_decode_into(cache, &s, 1, q_view, cu, V::bhtd(attn_only.data(), 1, H, tq, dv), opt, m);
    ea::attention_decode_into(view, q_view, cu, V::bhtd(attn_view.data(), 1, H, tq, dv),
                              V::bhtd(lse_view.data(), 1, H, tq, 1), opt, m);
    CHECK(same_bits(attn, attn_only));
    CHECK(same_bits(attn, attn_view));
    CHECK(same_bits(lse, lse_view));
    // LSE [1, H, T_q, 1] contiguous is H x T_q: the 0.2 T_q x H transposed.
    M lse_t(tq, H);
    for (Eigen::Index h = 0; h < H; ++h)
      for (Eigen::Index t = 0; t < tq; ++t) lse_t(t, h) = lse[static_cast<std::size_t>(h * tq + t)];

    // 0.2: Q as a matrix, out T_q x (H d_v), lse T_q x H; the slopes as a pointer after Options.
    M out1, lse1, out2, out3, lse3, out4;
    if (alibi) {
      ea::attention_decode_into(cache, &s, 1, Q, cu, out1, lse1, opt, slopes);
      ea::attention_decode_into(cache, &s, 1, Q, cu, out2, opt, slopes);
      ea::attention_decode_into(view, Q, cu, out3, lse3, opt, slopes);
      ea::attention_decode_into(view, Q, cu, out4, opt, slopes);
    } else {
      ea::attention_decode_into(cache, &s, 1, Q, cu, out1, lse1, opt);
      ea::attention_decode_into(cache, &s, 1, Q, cu, out2, opt);
      ea::attention_decode_into(view, Q, cu, out3, lse3, opt);
      ea::attention_decode_into(view, Q, cu, out4, opt);
    }
    CHECK(same_heads(out1, attn, H));
    CHECK(same_heads(out2, attn, H));
    CHECK(same_heads(out3, attn, H));
    CHECK(same_heads(out4, attn, H));
    CHECK(same_matrix(lse1, lse_t));
    CHECK(same_matrix(lse3, lse_t));
    // The returning forms (the 0.2 pointer ones and the 0.3 ones): heads side by side.
    const M r1 =
        alibi ? ea::attention_decode(cache, s, Q, opt, slopes) : ea::attention_decode(cache, s, Q, opt);
    const M r2 = alibi ? ea::attention_decode(cache, std::vector<ea::SequenceId>{s}, Q, {0, tq}, opt, slopes)
                       : ea::attention_decode(cache, std::vector<ea::SequenceId>{s}, Q, {0, tq}, opt);
    const M r3 =
        alibi ? ea::attention_decode(view, Q, cu, opt, slopes) : ea::attention_decode(view, Q, cu, opt);
    CHECK(same_heads(r1, attn, H));
    CHECK(same_heads(r2, attn, H));
    CHECK(same_heads(r3, attn, H));
    CHECK(same_heads(ea::attention_decode(cache, s, Q, opt, m), attn, H));
  }
  // The slopes do act.
  CHECK(!ea::attention_decode(cache, s, Q, opt).isApprox(ea::attention_decode(cache, s, Q, opt, masks)));
  // Decode's keys are the cache's: a mask, bias or key lengths in its masks throw.
  const std::int64_t five = 5;
  ea::Masks<float> lengths;
  lengths.key_lengths = &five;
  CHECK_THROWS_AS(ea::attention_decode(cache, s, Q, opt, lengths), std::invalid_argument);
}

TEST_CASE_TEMPLATE("migration: the 0.2 compiled:: single-head forms give the bits of the 0.3 calls", T, float,
                   double) {
  using M = ea::RowMatrix<T>;
  using C = ea::ConstStridedMap<T>;
  using W = ea::StridedMap<T>;
  using S = Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>;
  const Eigen::Index tq = 5, tk = 7, dk = 3, dv = 6;
  const std::vector<T> qs = filled<T>(tq * dk, 11), ks = filled<T>(tk * dk, 12), vs = filled<T>(tk * dv, 13),
                       gs = filled<T>(tq * dv, 14);
  const C q(qs.data(), tq, dk, S(dk, 1)), k(ks.data(), tk, dk, S(dk, 1)), v(vs.data(), tk, dv, S(dv, 1)),
      g(gs.data(), tq, dv, S(dv, 1));
  ea::Options opt;
  opt.causal = true;
  const auto same = [](const auto& a, const auto& b) {
    return a.rows() == b.rows() && a.cols() == b.cols() &&
           std::memcmp(a.data(), b.data(), sizeof(T) * static_cast<std::size_t>(a.size())) == 0;
  };
  const M attn = ea::attention(q, k, v, opt);
  CHECK(same(ea::compiled::attention<T>(q, k, v, opt), attn));
  const auto r = ea::attention_decomposed(q, k, v, opt);
  const auto r_old = ea::compiled::attention_decomposed<T>(q, k, v, opt);
  CHECK(same(r_old.scores, r.scores));
  CHECK(same(r_old.attn, r.attn));
  CHECK(same(ea::compiled::attention_scores<T>(q, k, opt), r.scores));
  M out(tq, dv), lse(tq, 1), scores(tq, tk), new_lse;
  const W o(out.data(), tq, dv, S(dv, 1)), l(lse.data(), tq, 1, S(1, 1)), sc(scores.data(), tq, tk, S(tk, 1));
  ea::compiled::attention_into<T>(q, k, v, o, &l, opt);
  CHECK(same(out, attn));
  ea::attention_into(q, k, v, M(), new_lse, opt);
  CHECK(same(lse, new_lse));
  ea::compiled::attention_decomposed_into<T>(q, k, v, sc, o, nullptr, opt);
  CHECK(same(scores, r.scores));
  scores.setZero();
  ea::compiled::attention_scores_into<T>(q, k, sc, &l, opt);
  CHECK(same(scores, r.scores));
  CHECK(same(lse, new_lse));
  // The plain-view entry points.
  out.setZero();
  const ea::MatrixView<const T> qv = ea::compiled::view(q), kv = ea::compiled::view(k),
                                vv = ea::compiled::view(v);
  const ea::MatrixView<T> ov{out.data(), tq, dv, dv, 1};
  ea::compiled::run("attention_into", qv, kv, &vv, nullptr, &ov, nullptr, opt, ea::Masks<T>{});
  CHECK(same(out, attn));
  const ea::Gradients<T> grads = ea::attention_backward(q, k, v, attn, new_lse, g, opt);
  M dq(tq, dk), dk_(tk, dk), dv_(tk, dv);
  ea::compiled::BackwardInputs<T> in;
  in.q = qv, in.k = kv, in.v = vv, in.d_attn = ea::compiled::view(g);
  in.attn = {attn.data(), tq, dv, dv, 1};
  in.lse = {new_lse.data(), tq, 1, 1, 1};
  ea::compiled::backward("attention_backward", in, ea::MatrixView<T>{dq.data(), tq, dk, dk, 1},
                         ea::MatrixView<T>{dk_.data(), tk, dk, dk, 1},
                         ea::MatrixView<T>{dv_.data(), tk, dv, dv, 1}, opt, ea::Masks<T>{});
  CHECK(same(dq, grads.dq));
  CHECK(same(dk_, grads.dk));
  CHECK(same(dv_, grads.dv));
}

// KVStorage and KVStorageTraits are 0.2's names of ScalarType and ScalarTraits/ComputeScalar.
static_assert(std::is_same_v<ea::KVStorage, ea::ScalarType>, "KVStorage is ScalarType");
static_assert(ea::KVStorage::Float32 == ea::ScalarType::Float32 &&
                  ea::KVStorage::Float16 == ea::ScalarType::Float16,
              "KVStorage's enumerators are ScalarType's");
static_assert(ea::KVStorageTraits<Eigen::bfloat16>::storage == ea::ScalarType::BFloat16 &&
                  ea::KVStorageTraits<double>::storage == ea::ScalarType::Float64 &&
                  std::is_same_v<ea::KVStorageTraits<Eigen::half>::Compute, float> &&
                  std::is_same_v<ea::KVStorageTraits<double>::Compute, double>,
              "KVStorageTraits gives 0.2's tag and compute type");

TEST_CASE("migration: a 0.2 KVStorage tag names the scalar type of its 0.3 ScalarType") {
  // 0.2 code that named a storage type by KVStorageTraits<T>::storage keeps compiling, same meaning.
  constexpr ea::KVStorage tag = ea::KVStorageTraits<Eigen::bfloat16>::storage;
  CHECK(std::string(ea::scalar_type_name(tag)) == "bfloat16");
  CHECK(ea::scalar_type_bytes(tag) == 2);
}

#pragma GCC diagnostic pop

TEST_CASE_TEMPLATE("migration: non-const views of every scalar type convert to the const views a call takes",
                   T, float, double, Eigen::bfloat16, Eigen::half) {
  // 0.2 could not take a non-const bfloat16 or half view for Q, K or V (the template forms
  // deduced from them): every view here is non-const.
  using C = Case<T>;
  using L = typename C::L;
  C c;
  const auto B = C::B, H = C::H, Hkv = C::Hkv, tq = C::tq, tk = C::tk, dk = C::dk, dv = C::dv;
  auto K = ea::HeadsView<T>::bhtd(c.k.data(), B, Hkv, tk, dk);
  auto V = ea::HeadsView<T>::bhtd(c.v.data(), B, Hkv, tk, dv);
  std::vector<T> o1(B * H * tq * dv), o2(o1.size());
  std::vector<L> l(B * H * tq);
  ea::attention_heads_into(c.Q(), K, V, C::out(o1, B, H, tq, dv), C::out(l, B, H, tq, 1), c.opt, c.masks);
  ea::attention_heads_into(ea::HeadsView<const T>(c.Q()), c.K(), c.Vv(), C::out(o2, B, H, tq, dv), c.opt,
                           c.masks);
  CHECK(same_bits(o1, o2));
  std::vector<T> dq(c.q.size()), dk_(c.k.size()), dv_(c.v.size());
  auto attn = C::out(o1, B, H, tq, dv);
  auto d_attn = ea::HeadsView<T>::bhtd(c.d_attn.data(), B, H, tq, dv);
  auto lse = C::out(l, B, H, tq, 1);
  ea::attention_heads_backward_into(c.Q(), K, V, attn, lse, d_attn, C::out(dq, B, H, tq, dk),
                                    C::out(dk_, B, Hkv, tk, dk), C::out(dv_, B, Hkv, tk, dv), c.opt, c.masks);
  std::vector<T> dq2(c.q.size()), dk2(c.k.size()), dv2(c.v.size());
  ea::attention_heads_backward_into(ea::HeadsView<const T>(c.Q()), c.K(), c.Vv(),
                                    ea::HeadsView<const T>(attn), ea::HeadsView<const L>(lse),
                                    ea::HeadsView<const T>(d_attn), C::out(dq2, B, H, tq, dk),
                                    C::out(dk2, B, Hkv, tk, dk), C::out(dv2, B, Hkv, tk, dv), c.opt, c.masks);
  CHECK(same_bits(dq, dq2));
  CHECK(same_bits(dk_, dk2));
  CHECK(same_bits(dv_, dv2));
}

}  // namespace test_migration
