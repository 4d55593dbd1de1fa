// SPDX-License-Identifier: MIT
// A packed variable-length batch (attention_varlen_into) == separate attention_heads_into calls per
// sequence.
#include <doctest/doctest.h>

#include "multihead_crosscheck.hpp"

namespace test_multihead_varlen {

using namespace ea_test;
using namespace ea_test::crosscheck;

TEST_CASE_TEMPLATE("multihead crosscheck: varlen == separate attention_heads_into calls per sequence", T,
                   float, double) {
  Rng rng(15);
  struct VarlenConfig {
    const char* name;
    std::vector<std::int64_t> q_lens, k_lens;
    Eigen::Index H, Hkv;
    bool causal, bottom_right, alibi;
    long wl, wr;
    double softcap;
  };
  const std::vector<VarlenConfig> configs = {
      {"plain GQA", {5, 0, 9, 1, 3}, {7, 3, 9, 4, 0}, 4, 2, false, false, false, -1, -1, 0},
      {"causal bottom-right + ALiBi", {3, 8, 2, 0}, {9, 4, 2, 5}, 3, 3, true, true, true, -1, -1, 0},
      {"causal top-left + window + softcap", {70, 1, 6}, {90, 5, 66}, 2, 1, true, false, false, 9, -1, 2.5},
      {"window both sides, bottom-right", {4, 11, 7}, {10, 6, 7}, 4, 1, false, true, true, 2, 1, 0},
  };
  const Eigen::Index dk = 8, dv = 5;
  for (const auto& vc : configs) {
    const std::string config = vc.name;
    CAPTURE(config);
    std::vector<std::int64_t> cu_q{0}, cu_k{0};
    for (size_t s = 0; s < vc.q_lens.size(); ++s) {
      cu_q.push_back(cu_q.back() + vc.q_lens[s]);
      cu_k.push_back(cu_k.back() + vc.k_lens[s]);
    }
    const Eigen::Index tq = cu_q.back(), tk = cu_k.back(), n = static_cast<Eigen::Index>(vc.q_lens.size());
    Problem p;
    p.Q = random_array<T>(rng, 1, vc.H, tq, dk);
    p.K = random_array<T>(rng, 1, vc.Hkv, tk, dk);
    p.V = random_array<T>(rng, 1, vc.Hkv, tk, dv);
    p.spec.causal = vc.causal;
    p.spec.bottom_right = vc.bottom_right;
    p.spec.window_left = vc.wl;
    p.spec.window_right = vc.wr;
    p.spec.softcap = vc.softcap;
    if (vc.alibi)
      for (Eigen::Index h = 0; h < vc.H; ++h) p.spec.alibi.push_back(static_cast<T>(0.3 * (h + 1)));
    const auto ref = reference_varlen(p.Q, p.K, p.V, cu_q, cu_k, p.spec);
    const MasksBuffer<T> masks(p.spec);
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      const mh::Options opt = options_for(p.spec, kernel);
      for (const mh::Layout layout : {mh::Layout::BHTD, mh::Layout::BTHD}) {
        const std::string lname = layout_name(layout);
        CAPTURE(lname);
        const HeadsBuffer<T> Q(p.Q, layout), K(p.K, layout), V(p.V, layout);
        HeadsBuffer<T> out(layout, 1, vc.H, tq, dv, kSentinel<T>), lse(layout, 1, vc.H, tq, 1, kSentinel<T>);
        mh::attention_varlen_into(Q.cview(), K.cview(), V.cview(), cu_q.data(), cu_k.data(), n, out.view(),
                                  lse.view(), opt, masks.masks);
        // The decomposed form: the same ATTN, and packed weights equal to each sequence's own.
        const std::size_t packed_size = mh::varlen_scores_size(cu_q.data(), cu_k.data(), n, vc.H);
        std::vector<T> packed(packed_size, kSentinel<T>);
        HeadsBuffer<T> out_d(layout, 1, vc.H, tq, dv, kSentinel<T>);
        mh::attention_varlen_decomposed_into(Q.cview(), K.cview(), V.cview(), cu_q.data(), cu_k.data(), n,
                                             packed.data(), packed.size(), out_d.view(), opt, masks.masks);
        CHECK_THROWS_AS(mh::attention_varlen_decomposed_into(Q.cview(), K.cview(), V.cview(), cu_q.data(),
                                                             cu_k.data(), n, packed.data(), packed.size() + 1,
                                                             out_d.view(), opt, masks.masks),
                        std::invalid_argument);
        std::size_t packed_offset = 0;
        for (Eigen::Index s = 0; s < n; ++s) {
          CAPTURE(s);
          const Eigen::Index q0 = cu_q[s], lq = cu_q[s + 1] - q0, k0 = cu_k[s], lk = cu_k[s + 1] - k0;
          HeadsBuffer<T> o(layout, 1, vc.H, lq, dv, kSentinel<T>), l(layout, 1, vc.H, lq, 1, kSentinel<T>);
          mh::attention_heads_into(token_subview(Q.cview(), q0, lq), token_subview(K.cview(), k0, lk),
                                   token_subview(V.cview(), k0, lk), o.view(), l.view(), opt, masks.masks);
          for (Eigen::Index h = 0; h < vc.H; ++h) {
            CAPTURE(h);
            const Budget bud = multihead_budget<T>(ref, s * vc.H + h);
            // separate call vs the reference, and the varlen rows vs the separate call
            EA_CHECK_NEAR(o.view().head(0, h), ref.out.rows(0, h, q0, lq), bud.attn);
            EA_CHECK_NEAR(l.view().head(0, h), ref.lse.rows(0, h, q0, lq), bud.lse);
            const MatrixLD o_sep = to_long_double(o.view().head(0, h)),
                           l_sep = to_long_double(l.view().head(0, h));
            EA_CHECK_NEAR(out.view().head(0, h).middleRows(q0, lq), o_sep, 2 * bud.attn);
            EA_CHECK_NEAR(lse.view().head(0, h).middleRows(q0, lq), l_sep, 2 * bud.lse);
            EA_CHECK_NEAR(out_d.view().head(0, h).middleRows(q0, lq), o_sep, 2 * bud.attn);
          }
          HeadsBuffer<T> sc(mh::Layout::BHTD, 1, vc.H, lq, lk, kSentinel<T>);
          HeadsBuffer<T> o2(layout, 1, vc.H, lq, dv, kSentinel<T>);
          mh::attention_heads_decomposed_into(
              token_subview(Q.cview(), q0, lq), token_subview(K.cview(), k0, lk),
              token_subview(V.cview(), k0, lk), sc.view(), o2.view(), opt, masks.masks);
          for (Eigen::Index h = 0; h < vc.H; ++h) {
            CAPTURE(h);
            const Budget bud = multihead_budget<T>(ref, s * vc.H + h);
            const Eigen::Map<const ea::RowMatrix<T>> block(packed.data() + packed_offset, lq, lk);
            EA_CHECK_NEAR(block, to_long_double(sc.view().head(0, h)), 2 * bud.scores);
            packed_offset += static_cast<std::size_t>(lq * lk);
          }
        }
        CHECK(packed_offset == packed_size);
      }
    }
  }
}

}  // namespace test_multihead_varlen
