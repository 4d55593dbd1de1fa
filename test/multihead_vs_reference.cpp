// SPDX-License-Identifier: MIT
// The multi-head calls against the long-double reference (support/reference.hpp): the
// configurations that together use every feature, and random configurations, through
// attention_heads_into and attention_heads_decomposed_into (which must also agree with each other).
#include <doctest/doctest.h>

#include "multihead_crosscheck.hpp"

namespace test_multihead_vs_reference {

using namespace ea_test;
using namespace ea_test::crosscheck;

TEST_CASE_TEMPLATE("multihead crosscheck: the long-double reference vs attention_heads_into and _decomposed",
                   T, float, double) {
  Rng rng(9001);
  for (const Config& c : feature_configs()) {
    const std::string config = c.name;
    CAPTURE(config);
    const Problem p = make_problem<T>(c, rng);
    const auto ref = reference_heads(p.Q, p.K, p.V, p.spec);
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      for (const int threads : {1, 2}) {
        CAPTURE(threads);
        const mh::Options opt = options_for(p.spec, kernel, threads);
        const Run<T> fused = run_heads<T>(p, opt, mh::Layout::BHTD, false);
        const Run<T> dec = run_heads<T>(p, opt, mh::Layout::BHTD, true);
        check_against(fused, ref, 1, "attention_heads_into vs reference");
        check_against(dec, ref, 1, "attention_heads_decomposed_into vs reference");
        // the fused OUT/LSE vs the decomposed ones: two computations of one function
        check_runs_near(fused, dec, ref, "attention_heads_into vs attention_heads_decomposed_into");
      }
    }
  }
}

TEST_CASE_TEMPLATE("multihead crosscheck: random configurations vs the long-double reference", T, float,
                   double) {
  // Seeded random shapes and options (every combination of features is likely to come up); each
  // against the reference, fused and decomposed, on a kernel and thread count drawn at random.
  Rng rng(777);
  const auto kernels = kernels_under_test();
  for (int n = 0; n < 200; ++n) {
    // one in 10 spans several query tiles (128 rows) and key tiles (512 keys)
    Config c = random_config(rng, n % 10 == 9, {3, 3, 3, 40, 17, 100, 300, 400, 1100, 8, 600});
    c.magnitude = 0.5 + (rng.uniform() + 1);
    const Problem p = make_problem<T>(c, rng);
    const auto kernel = kernels[static_cast<size_t>(rng.integer(0, static_cast<long>(kernels.size()) - 1))];
    const int threads = static_cast<int>(rng.integer(0, 2));
    CAPTURE(n);
    CAPTURE(c.B);
    CAPTURE(c.H);
    CAPTURE(c.Hkv);
    CAPTURE(c.Tq);
    CAPTURE(c.Tk);
    CAPTURE(c.dk);
    CAPTURE(c.dv);
    CAPTURE(c.causal);
    CAPTURE(c.bottom_right);
    CAPTURE(c.window_left);
    CAPTURE(c.window_right);
    CAPTURE(c.chunk);
    CAPTURE(c.softcap);
    CAPTURE(c.mask);
    CAPTURE(c.bias);
    CAPTURE(c.key_lengths);
    CAPTURE(c.alibi);
    CAPTURE(c.scale);
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    CAPTURE(threads);
    const auto ref = reference_heads(p.Q, p.K, p.V, p.spec);
    const mh::Options opt = options_for(p.spec, kernel, threads);
    const mh::Layout layout = rng.integer(0, 1) == 0 ? mh::Layout::BHTD : mh::Layout::BTHD;
    check_against(run_heads<T>(p, opt, layout, false), ref, 1, "attention_heads_into vs reference");
    check_against(run_heads<T>(p, opt, layout, true), ref, 1, "attention_heads_decomposed_into vs reference");
  }
}

}  // namespace test_multihead_vs_reference
