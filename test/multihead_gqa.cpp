// SPDX-License-Identifier: MIT
// Grouped-query and multi-query attention: H_kv < H key/value heads == K/V copied per query
// head.
#include <doctest/doctest.h>

#include "multihead_crosscheck.hpp"

namespace test_multihead_gqa {

using namespace ea_test;
using namespace ea_test::crosscheck;

TEST_CASE_TEMPLATE("multihead crosscheck: GQA/MQA == K/V copied per query head", T, float, double) {
  Rng rng(13);
  for (const Eigen::Index hkv : {1, 2, 4}) {
    CAPTURE(hkv);
    Config c{"", 2, 8, hkv, 7, 10, 8, 6};
    c.causal = c.bottom_right = c.alibi = true;
    c.mask = "BxH";
    c.softcap = 3.0;
    const Problem gqa = make_problem<T>(c, rng);
    Problem rep = gqa;
    rep.K = Array4(c.B, c.H, c.Tk, c.dk);
    rep.V = Array4(c.B, c.H, c.Tk, c.dv);
    for (Eigen::Index b = 0; b < c.B; ++b)
      for (Eigen::Index h = 0; h < c.H; ++h) {
        const Eigen::Index kh = h / (c.H / hkv);
        for (Eigen::Index j = 0; j < c.Tk; ++j) {
          for (Eigen::Index d = 0; d < c.dk; ++d) rep.K(b, h, j, d) = gqa.K(b, kh, j, d);
          for (Eigen::Index d = 0; d < c.dv; ++d) rep.V(b, h, j, d) = gqa.V(b, kh, j, d);
        }
      }
    const auto ref = reference_heads(gqa.Q, gqa.K, gqa.V, gqa.spec);
    const auto ref_rep = reference_heads(rep.Q, rep.K, rep.V, rep.spec);
    EA_CHECK_EQUAL(ref_rep.out.slice(1, 5),
                   ref.out.slice(1, 5));  // the reference indexes K/V heads as stated
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      for (const mh::Layout layout : {mh::Layout::BHTD, mh::Layout::BTHD}) {
        const std::string lname = layout_name(layout);
        CAPTURE(lname);
        for (const bool decomposed : {false, true}) {
          CAPTURE(decomposed);
          const Run<T> a = run_heads<T>(gqa, options_for(gqa.spec, kernel), layout, decomposed);
          const Run<T> b = run_heads<T>(rep, options_for(rep.spec, kernel), layout, decomposed);
          check_runs_near(a, b, ref, "GQA vs repeated K/V");
          check_against(a, ref, 1, "GQA vs reference");
        }
      }
    }
  }
}

}  // namespace test_multihead_gqa
