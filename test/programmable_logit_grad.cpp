// SPDX-License-Identifier: MIT
// The backward's gradient callback (BackwardTerms::logit_grad, Programmable.hpp): it receives
// dL/dz, z the logit score_mod returned, for each visible (query, key) pair exactly once, at the
// positions the masks see; its values are the bits the same call writes to dL/dbias (both are
// dZ) and lie within the long-double reference's bound of dZ; what it accumulates has the same
// bits for every thread count; hidden and Empty-tile pairs are never passed; every row's values
// sum to 0 (the softmax's Jacobian), in the varlen and single-head calls and the 16-bit types too.
#include <doctest/doctest.h>

#include <EigenAttention/EigenAttention.hpp>

#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "support/backward_crosscheck.hpp"
#include "support/multihead_crosscheck.hpp"

namespace test_programmable_logit_grad {

using namespace ea_test;
using namespace ea_test::crosscheck;
namespace bw = ea_test::backward;

/// What a callback saw: g at each (b, h, i, j) (i = q, j = k: top-left, no offset), how often
/// each was passed, and the relative-position table's gradient it accumulated.
template <class C>
struct Seen {
  Eigen::Index B, H, tq, tk;
  std::vector<C> g;
  std::vector<int> calls;
  std::vector<C> d_table;
  Seen(Eigen::Index B_, Eigen::Index H_, Eigen::Index tq_, Eigen::Index tk_)
      : B(B_),
        H(H_),
        tq(tq_),
        tk(tk_),
        g(static_cast<size_t>(B_ * H_ * tq_ * tk_), C(0)),
        calls(g.size(), 0),
        d_table(static_cast<size_t>(tq_ + tk_ - 1), C(0)) {}
  size_t at(long b, long h, long q, long k) const {
    return static_cast<size_t>(((b * H + h) * tq + q) * tk + k);
  }
};

TEST_CASE_TEMPLATE("logit_grad: dL/dz tile by tile, the bits of dL/dbias, the same for every thread count", T,
                   float, double) {
  Rng rng(2809);
  // Two query tiles of the tiled backward (128 rows), T_q != T_k, GQA, a bias to compare with.
  Config c{"", 2, 4, 2, 150, 170, 16, 8};
  c.bias = "BxH";
  c.magnitude = 1.5;
  Problem p = make_problem<T>(c, rng);
  const long tq = 150, tk = 170;
  std::vector<T> table(static_cast<size_t>(tq + tk - 1));
  for (auto& x : table) x = static_cast<T>(0.5 * rng.normal());
  const auto f = [&](auto s, auto, auto h, auto q, auto k) {
    return s + table[static_cast<size_t>(q - k + tk - 1)] * static_cast<T>(h % 2 == 0 ? 1 : -1);
  };
  // A prefix-LM over documents: keys [0, prefix) seen by all, then causal within [0, 70) and
  // [70, 170). Without a prefix, the documents are row groups (src/kernels/row_groups.hpp) that
  // the backward computes one at a time, each from its own first row and key.
  for (const long prefix : {7L, 0L}) {
    CAPTURE(prefix);
    const auto keep = [prefix](long q, long k) { return k < prefix || (k <= q && (q < 70) == (k < 70)); };
    const auto g = [&](auto, auto, auto q, auto k) {
      return keep(static_cast<long>(q), static_cast<long>(k));
    };
    p.spec.score = [&](long double s, long, long h, long q, long k) {
      return s + static_cast<long double>(table[static_cast<size_t>(q - k + tk - 1)]) * (h % 2 == 0 ? 1 : -1);
    };
    p.spec.score_slope = [](long double, long, long, long, long) { return 1.0L; };
    p.spec.keep = [&](long, long, long q, long k) { return keep(q, k); };
    const auto sm = ea::score_mod(f);
    const auto mm = ea::mask_mod(g);
    // 32 x 32 tiles: those above the diagonal, and those of the first document's rows and the
    // second's keys past them, are Empty (never computed).
    const ea::BlockMask bm = ea::block_mask(mm, 1, 1, c.Tq, c.Tk, 32, 32);
    const bw::Seeds seeds = bw::make_seeds<T>(p, rng, true);
    const auto ref =
        reference_heads_backward<T>(p.Q, p.K, p.V, p.spec, seeds.d_out, seeds.d_scores, seeds.d_lse);
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = mh::kernel_name(kernel);
      CAPTURE(kname);
      for (const bool blocks : {false, true}) {
        CAPTURE(blocks);
        std::vector<T> first_table;
        for (const int threads : {1, 2, 3}) {
          CAPTURE(threads);
          Seen<T> seen(c.B, c.H, tq, tk);
          const auto lg = ea::logit_grad([&](T dz, auto b, auto h, auto q, auto k) {
            const size_t a = seen.at(static_cast<long>(b), static_cast<long>(h), static_cast<long>(q),
                                     static_cast<long>(k));
            seen.g[a] = dz;
            ++seen.calls[a];
            seen.d_table[static_cast<size_t>(q - k + tk - 1)] += dz * static_cast<T>(h % 2 == 0 ? 1 : -1);
          });
          const bw::Gradients<T> grads = bw::run_backward<T>(
              p, seeds, options_for(p.spec, kernel, threads), mh::Layout::BHTD, true,
              [&](mh::Masks<T>& m) {
                m.score_mod = sm;
                m.mask_mod = mm;
                if (blocks) m.block_mask = bm;
              },
              [&](mh::BackwardTerms<T>& terms) { terms.logit_grad = lg; });
          bw::check_against(grads, ref, "backward with a gradient callback vs reference");
          // Each visible pair once, none hidden; the values dL/dbias holds, bit for bit.
          long wrong_calls = 0, hidden_calls = 0, differ = 0;
          for (long b = 0; b < c.B; ++b)
            for (long h = 0; h < c.H; ++h)
              for (long q = 0; q < tq; ++q)
                for (long k = 0; k < tk; ++k) {
                  const size_t a = seen.at(b, h, q, k);
                  const T bias_grad = grads.d_bias.view().head(b, h)(q, k);
                  if (seen.calls[a] > 1 || (seen.calls[a] == 0 && bias_grad != T(0))) ++wrong_calls;
                  if (!keep(q, k) && seen.calls[a] != 0) ++hidden_calls;
                  if (std::memcmp(&seen.g[a], &bias_grad, sizeof(T)) != 0) ++differ;
                }
          CHECK(wrong_calls == 0);
          CHECK(hidden_calls == 0);
          CHECK(differ == 0);
          // The table's gradient: the same bits for every thread count (a fixed order of calls).
          if (threads == 1) {
            first_table = seen.d_table;
          } else {
            CHECK(std::memcmp(first_table.data(), seen.d_table.data(), sizeof(T) * first_table.size()) == 0);
          }
          // ... and the reference's, the sum of its dZ along each diagonal, within the sum of bounds.
          long outside = 0;
          for (long m = 0; m < tq + tk - 1; ++m) {
            long double exact = 0, bound = 0;
            for (long b = 0; b < c.B; ++b)
              for (long h = 0; h < c.H; ++h)
                for (long q = 0; q < tq; ++q) {
                  const long k = q - (m - (tk - 1));
                  if (k < 0 || k >= tk) continue;
                  exact += ref.d_bias(b, h, q, k) * (h % 2 == 0 ? 1 : -1);
                  bound += ref.d_bias_tol(b, h, q, k) +
                           std::fabs(ref.d_bias(b, h, q, k)) * tq * tk * std::numeric_limits<T>::epsilon();
                }
            if (!(std::fabs(static_cast<long double>(seen.d_table[static_cast<size_t>(m)]) - exact) <= bound))
              ++outside;
          }
          CHECK(outside == 0);
        }
      }
    }
  }
}

/// What a callback saw, keyed by (b, h, q, k).
template <class C>
using Calls = std::map<std::array<long, 4>, C>;

template <class C>
auto recorder(Calls<C>& calls, long& repeated) {
  return [&calls, &repeated](C g, auto b, auto h, auto q, auto k) {
    const auto [it, inserted] = calls.emplace(std::array<long, 4>{static_cast<long>(b), static_cast<long>(h),
                                                                  static_cast<long>(q), static_cast<long>(k)},
                                              g);
    if (!inserted) ++repeated;
  };
}

TEST_CASE_TEMPLATE("logit_grad: a varlen sequence is b, its positions its own, its values the single call's",
                   T, float, double) {
  Rng rng(2810);
  const std::vector<std::int64_t> cu{0, 13, 13, 40, 47};
  const Eigen::Index total = 47, H = 2, dk = 8, dv = 5;
  const Array4 Q = random_array<T>(rng, 1, H, total, dk), K = random_array<T>(rng, 1, H, total, dk),
               V = random_array<T>(rng, 1, H, total, dv), dO = random_array<T>(rng, 1, H, total, dv);
  const HeadsBuffer<T> q(Q, mh::Layout::BHTD), k(K, mh::Layout::BHTD), v(V, mh::Layout::BHTD),
      d_out(dO, mh::Layout::BHTD);
  const auto sm = ea::score_mod([](auto s, auto, auto, auto q_, auto k_) { return s + T(0.1) * T(q_ - k_); });
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = mh::kernel_name(kernel);
    CAPTURE(kname);
    mh::Options opt;
    opt.kernel = kernel;
    opt.causal = true;
    opt.threads = 2;
    mh::Masks<T> masks;
    masks.score_mod = sm;
    HeadsBuffer<T> out(mh::Layout::BHTD, 1, H, total, dv, T(0)), lse(mh::Layout::BHTD, 1, H, total, 1, T(0));
    mh::attention_varlen_into(q.cview(), k.cview(), v.cview(), cu.data(), cu.data(), 4, out.view(),
                              lse.view(), opt, masks);
    Calls<T> packed;
    long repeated = 0;
    const auto lg = ea::logit_grad(recorder(packed, repeated));
    mh::BackwardTerms<T> terms;
    terms.logit_grad = lg;
    HeadsBuffer<T> dq(mh::Layout::BHTD, 1, H, total, dk, T(0)), dkk(mh::Layout::BHTD, 1, H, total, dk, T(0)),
        dvv(mh::Layout::BHTD, 1, H, total, dv, T(0));
    mh::attention_varlen_backward_into(q.cview(), k.cview(), v.cview(), out.cview(), lse.cview(),
                                       d_out.cview(), cu.data(), cu.data(), 4, dq.view(), dkk.view(),
                                       dvv.view(), opt, masks, terms);
    CHECK(repeated == 0);
    // Each sequence and head alone through the single-head call: the same values at the same
    // positions, with b = 0 there.
    Calls<T> alone;
    for (long b = 0; b < 4; ++b) {
      const Eigen::Index first = cu[static_cast<size_t>(b)], n = cu[static_cast<size_t>(b) + 1] - first;
      if (n == 0) continue;
      for (long h = 0; h < H; ++h) {
        Calls<T> one;
        long again = 0;
        const auto lg1 = ea::logit_grad(recorder(one, again));
        ea::BackwardTerms<T> t1;
        t1.logit_grad = lg1;
        const auto rows = [&](const HeadsBuffer<T>& x) { return x.cview().head(0, h).middleRows(first, n); };
        (void)ea::attention_backward(rows(q), rows(k), rows(v), rows(out), rows(lse), rows(d_out), opt, masks,
                                     t1);
        CHECK(again == 0);
        for (const auto& [where, g] : one) alone[{b, h, where[2], where[3]}] = g;
      }
    }
    CHECK(packed.size() == alone.size());
    long differ = 0;
    for (const auto& [where, g] : packed) {
      const auto it = alone.find(where);
      if (it == alone.end() || std::memcmp(&it->second, &g, sizeof(T)) != 0) ++differ;
    }
    CHECK(differ == 0);
    CHECK(packed.size() > static_cast<size_t>(H * 47));  // (most of the 2 x 484 visible pairs)
  }
}

TEST_CASE_TEMPLATE("logit_grad: the single-head backward in the four scalar types, each row summing to 0", T,
                   float, double, Eigen::bfloat16, Eigen::half) {
  using M = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  using C = ea::ComputeScalar<T>;
  const Eigen::Index tq = 37, tk = 45, d = 16, dv = 8;
  const M Q = M::Random(tq, d), K = M::Random(tk, d), V = M::Random(tk, dv), dO = M::Random(tq, dv);
  const auto sm =
      ea::score_mod([](auto s, auto, auto, auto q, auto k) { return s * C(0.5) + C(0.01) * C(q - k); });
  const auto wide = [](const M& m) { return m.template cast<double>().eval(); };
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt;
    opt.kernel = kernel;
    opt.causal = true;
    opt.alignment = ea::CausalAlignment::BottomRight;
    ea::Masks<T> masks;
    masks.score_mod = sm;
    EigenAttention::RowMatrix<T> out;
    Eigen::Matrix<C, Eigen::Dynamic, 1> lse;
    ea::attention_into(Q, K, V, out, lse, opt, masks);
    Calls<C> calls;
    long repeated = 0;
    const auto lg = ea::logit_grad(recorder(calls, repeated));
    ea::BackwardTerms<T> terms;
    terms.logit_grad = lg;
    (void)ea::attention_backward(Q, K, V, out, lse, dO, opt, masks, terms);
    CHECK(repeated == 0);
    // Bottom-right: query row i is at position i + T_k - T_q and sees the keys up to it.
    long out_of_range = 0;
    for (const auto& [w, g] : calls)
      if (w[0] != 0 || w[1] != 0 || w[2] < tk - tq || w[2] >= tk || w[3] < 0 || w[3] > w[2]) ++out_of_range;
    CHECK(out_of_range == 0);
    // Row i's values sum to 0 (sum_j P_ij (dP_ij - D_i), D_i = sum_j P_ij dP_ij = O_i . dO_i),
    // within 4 (d + d_v + T_k + 8) u_T M_i, M_i = sum_j P_ij |dP_ij| + sum |O_i| |dO_i|: every
    // term's error is a few roundings of P, dP and D (O itself is rounded to T), relative to M_i.
    const Eigen::MatrixXd P = wide(ea::attention_decomposed(Q, K, V, opt, masks).scores);
    const Eigen::MatrixXd dP = wide(dO) * wide(V).transpose();
    const Eigen::MatrixXd O = wide(out);
    std::vector<long double> sums(static_cast<size_t>(tq), 0);
    for (const auto& [w, g] : calls)
      sums[static_cast<size_t>(w[2] - (tk - tq))] += static_cast<long double>(g);
    const double u = static_cast<double>(Eigen::NumTraits<T>::epsilon());
    long bad = 0;
    for (Eigen::Index i = 0; i < tq; ++i) {
      const double m = P.row(i).cwiseProduct(dP.row(i).cwiseAbs()).sum() +
                       O.row(i).cwiseAbs().dot(wide(dO).row(i).cwiseAbs());
      if (!(std::fabs(static_cast<double>(sums[static_cast<size_t>(i)])) <=
            4 * double(d + dv + tk + 8) * u * m))
        ++bad;
    }
    CHECK(bad == 0);
    CHECK(calls.size() > static_cast<size_t>(tq * 9));  // row i sees 9 + i keys
  }
}

}  // namespace test_programmable_logit_grad
