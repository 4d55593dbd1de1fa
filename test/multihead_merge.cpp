// SPDX-License-Identifier: MIT
// merge_attention_into of the results over a split of the keys == attention over all keys.
#include <doctest/doctest.h>

#include "multihead_crosscheck.hpp"

namespace test_multihead_merge {

using namespace ea_test;
using namespace ea_test::crosscheck;

TEST_CASE_TEMPLATE("multihead crosscheck: merge of a split of the keys == attention over all keys", T, float,
                   double) {
  Rng rng(16);
  Config c{"", 2, 4, 2, 6, 12, 8, 5};
  c.mask = "BxH";
  c.softcap = 5.0;
  c.bias = "Bx1";
  Problem p = make_problem<T>(c, rng);
  // Query row 1 sees only keys >= 7 (its first part is empty for splits <= 7); row 2 sees no key.
  for (Eigen::Index b = 0; b < c.B; ++b)
    for (Eigen::Index h = 0; h < c.H; ++h)
      for (Eigen::Index j = 0; j < c.Tk; ++j) {
        (*p.spec.mask)(b, h, 1, j) = j >= 7 ? 1 : 0;
        (*p.spec.mask)(b, h, 2, j) = 0;
      }
  const auto ref = reference_heads(p.Q, p.K, p.V, p.spec);
  const long double u = unit_roundoff<T>();
  long double max_v = 1, max_lse = 0;
  for (const long double x : p.V.v) max_v = std::max(max_v, std::fabs(x));
  for (const long double x : ref.lse.v)
    if (std::isfinite(x)) max_lse = std::max(max_lse, std::fabs(x));
  long double attn_tol = 0;
  Tol lse_tol;
  for (Eigen::Index g = 0; g < c.B * c.H; ++g) {
    attn_tol = std::max(attn_tol, multihead_budget<T>(ref, g).attn);
    const Tol t = multihead_budget<T>(ref, g).lse;
    lse_tol = Tol{std::max(lse_tol.abs, t.abs), std::max(lse_tol.rel, t.rel)};
  }
  // Merged vs whole: the whole and each part are within one budget (a part's is no larger than
  // the whole's: fewer keys, a subset of the logits); a part's LSE error (at most
  // lse_tol.at(max |LSE|), absolute) becomes that relative error of its merge weight, twice
  // (both weights), times max |V| in OUT; the merge itself rounds a few times (4 u max |V|).
  // The merged LSE is a part's, off by its error, plus the roundings of log(e^a + e^b) (4 u of
  // |LSE|).
  const long double merged_attn_tol = 2 * attn_tol + 2 * lse_tol.at(max_lse) * max_v + 4 * u * max_v;
  const Tol merged_lse_tol{2 * lse_tol.abs, 2 * lse_tol.rel + 4 * u};

  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    const mh::Options opt = options_for(p.spec, kernel);
    const Run<T> whole = run_heads<T>(p, opt, mh::Layout::BHTD, false);
    for (const Eigen::Index split : {Eigen::Index(0), Eigen::Index(1), Eigen::Index(5), Eigen::Index(7),
                                     Eigen::Index(11), Eigen::Index(12)}) {
      CAPTURE(split);
      Problem a = p, b = p;
      a.K = p.K.token_range(0, split);
      a.V = p.V.token_range(0, split);
      a.spec.mask = p.spec.mask->col_range(0, split);
      a.spec.bias = p.spec.bias->col_range(0, split);
      b.K = p.K.token_range(split, c.Tk - split);
      b.V = p.V.token_range(split, c.Tk - split);
      b.spec.mask = p.spec.mask->col_range(split, c.Tk - split);
      b.spec.bias = p.spec.bias->col_range(split, c.Tk - split);
      // An empty key set (split 0 or 12) must give zeros and LSE = -inf.
      const Run<T> ra = run_heads<T>(a, opt, mh::Layout::BHTD, false);
      const Run<T> rb = run_heads<T>(b, opt, mh::Layout::BHTD, false);
      check_against(ra, reference_heads(a.Q, a.K, a.V, a.spec), 1, "part a vs reference");
      check_against(rb, reference_heads(b.Q, b.K, b.V, b.spec), 1, "part b vs reference");

      HeadsBuffer<T> out(mh::Layout::BHTD, c.B, c.H, c.Tq, c.dv, kSentinel<T>);
      HeadsBuffer<T> lse(mh::Layout::BHTD, c.B, c.H, c.Tq, 1, kSentinel<T>);
      mh::merge_attention_into(ra.out.cview(), ra.lse.cview(), rb.out.cview(), rb.lse.cview(), out.view(),
                               lse.view());
      check_heads_near(
          out.view(), whole.out.to_array(), [&](Eigen::Index, Eigen::Index) { return merged_attn_tol; },
          "merged OUT vs whole");
      check_heads_near(
          lse.view(), whole.lse.to_array(), [&](Eigen::Index, Eigen::Index) { return merged_lse_tol; },
          "merged LSE vs whole");
      check_heads_near(
          out.view(), ref.out, [&](Eigen::Index, Eigen::Index) { return merged_attn_tol; },
          "merged OUT vs reference");

      // The merge arithmetic alone, against the formula in long double on the same inputs:
      // exp(lse - m) is off by u (1 + |lse - m|) relative, the rest by a few u.
      Array4 mout, mlse;
      reference_merge(ra.out.to_array(), ra.lse.to_array(), rb.out.to_array(), rb.lse.to_array(), mout, mlse);
      long double spread = 0;
      const Array4 lse_a = ra.lse.to_array(), lse_b = rb.lse.to_array();
      for (size_t e = 0; e < lse_a.v.size(); ++e) {
        const long double la = lse_a.v[e], lb = lse_b.v[e];
        if (std::isfinite(la) && std::isfinite(lb)) spread = std::max(spread, std::fabs(la - lb));
      }
      const long double merge_tol = 8 * u * (1 + spread) * max_v;
      const long double merge_lse_tol = 8 * u * (1 + spread);  // no V in LSE
      check_heads_near(
          out.view(), mout, [&](Eigen::Index, Eigen::Index) { return merge_tol; }, "merge vs formula");
      check_heads_near(
          lse.view(), mlse, [&](Eigen::Index, Eigen::Index) { return merge_lse_tol; },
          "merge LSE vs formula");
      // Rows 2 see no key on either side: zeros and -inf exactly.
      for (Eigen::Index bb = 0; bb < c.B; ++bb)
        for (Eigen::Index h = 0; h < c.H; ++h) {
          CHECK(lse.view().head(bb, h)(2, 0) == -std::numeric_limits<T>::infinity());
          CHECK((out.view().head(bb, h).row(2).array() == T(0)).all());
        }

      // In place: out/lse aliasing out_a/lse_a give the same bits.
      Run<T> inplace = ra;
      mh::merge_attention_into(inplace.out.cview(), inplace.lse.cview(), rb.out.cview(), rb.lse.cview(),
                               inplace.out.view(), inplace.lse.view());
      check_heads_equal(inplace.out.view(), out.view(), "in-place merged OUT");
      check_heads_equal(inplace.lse.view(), lse.view(), "in-place merged LSE");
    }
  }
}

}  // namespace test_multihead_merge
