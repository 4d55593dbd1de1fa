// SPDX-License-Identifier: MIT
// The multi-head call == a loop of single-head attention calls, one per (sequence, head).
#include <doctest/doctest.h>

#include "multihead_crosscheck.hpp"

namespace test_multihead_vs_single {

using namespace ea_test;
using namespace ea_test::crosscheck;

TEST_CASE_TEMPLATE("multihead crosscheck: multi-head == a loop of single-head attention calls", T, float,
                   double) {
  Rng rng(14);
  for (const int mode : {0, 1, 2}) {  // no mask, causal top-left, causal bottom-right
    for (const auto& shape : {std::pair<Eigen::Index, Eigen::Index>{9, 9}, {6, 13}, {13, 6}}) {
      const Eigen::Index tq = shape.first, tk = shape.second;  // CAPTURE cannot name bindings (C++17)
      CAPTURE(mode);
      CAPTURE(tq);
      CAPTURE(tk);
      Config c{"", 2, 6, 3, tq, tk, 12, 7};
      c.causal = mode > 0;
      c.bottom_right = mode == 2;
      if (tq == 6) c.scale = 0.7;
      const Problem p = make_problem<T>(c, rng);
      const auto ref = reference_heads(p.Q, p.K, p.V, p.spec);
      for (const auto kernel : kernels_under_test()) {
        const std::string kname = ea::kernel_name(kernel);
        CAPTURE(kname);
        const mh::Options opt = options_for(p.spec, kernel);
        for (const mh::Layout layout : {mh::Layout::BHTD, mh::Layout::BTHD}) {
          const std::string lname = layout_name(layout);
          CAPTURE(lname);
          const Run<T> multi = run_heads<T>(p, opt, layout, true);
          const HeadsBuffer<T> Q(p.Q, layout), K(p.K, layout), V(p.V, layout);
          Run<T> single;
          single.out = HeadsBuffer<T>(layout, c.B, c.H, tq, c.dv, kSentinel<T>);
          single.lse = HeadsBuffer<T>(layout, c.B, c.H, tq, 1, kSentinel<T>);
          single.scores = HeadsBuffer<T>(layout, c.B, c.H, tq, tk, kSentinel<T>);
          for (Eigen::Index b = 0; b < c.B; ++b)
            for (Eigen::Index h = 0; h < c.H; ++h) {
              const Eigen::Index kh = h / (c.H / c.Hkv);
              auto o = single.out.view().head(b, h);
              auto l = single.lse.view().head(b, h);
              ea::attention_into(Q.cview().head(b, h), K.cview().head(b, kh), V.cview().head(b, kh), o, l,
                                 opt);
              auto s = single.scores.view().head(b, h);
              auto dec = ea::attention_decomposed(Q.cview().head(b, h), K.cview().head(b, kh),
                                                  V.cview().head(b, kh), opt);
              s = dec.scores;
            }
          check_runs_near(multi, single, ref, "multi-head vs single-head loop");
          check_against(single, ref, 1, "single-head loop vs reference (sanity)");
        }
      }
    }
  }
}

}  // namespace test_multihead_vs_single
