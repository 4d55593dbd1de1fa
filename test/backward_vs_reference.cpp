// SPDX-License-Identifier: MIT
// The backward pass against the long-double reference (support/reference_backward.hpp): the
// multi-head configurations that together use every forward option, then random ones, with and
// without a loss on the weights (d_scores) and dL/dbias, on every kernel, one and several
// threads, both layouts. Every gradient element must lie within its own error bound.
#include <doctest/doctest.h>

#include "backward_crosscheck.hpp"

namespace test_backward_vs_reference {

using namespace ea_test;
using namespace ea_test::backward;

TEST_CASE_TEMPLATE("backward crosscheck: every option vs the long-double reference", T, float, double) {
  Rng rng(1201);
  for (const Config& c : crosscheck::feature_configs()) {
    const std::string config = c.name;
    CAPTURE(config);
    const Problem p = crosscheck::make_problem<T>(c, rng);
    for (const bool with_d_scores : {false, true}) {
      CAPTURE(with_d_scores);
      const Seeds seeds = make_seeds<T>(p, rng, with_d_scores);
      const BackwardReference ref =
          reference_heads_backward<T>(p.Q, p.K, p.V, p.spec, seeds.d_out, seeds.d_scores, seeds.d_lse);
      for (const auto kernel : kernels_under_test()) {
        const std::string kname = ea::kernel_name(kernel);
        CAPTURE(kname);
        for (const int threads : {1, 3}) {
          CAPTURE(threads);
          const mh::Layout layout = threads == 1 ? mh::Layout::BHTD : mh::Layout::BTHD;
          check_against(run_backward<T>(p, seeds, options_for(p.spec, kernel, threads), layout), ref,
                        "attention_heads_backward_into vs reference");
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("backward crosscheck: random configurations vs the long-double reference", T, float,
                   double) {
  // Seeded random shapes and options; one in eight spans several query and key tiles (128 x 256).
  Rng rng(4242);
  const auto kernels = kernels_under_test();
  for (int n = 0; n < 48; ++n) {
    Config c = crosscheck::random_config(rng, n % 8 == 7, {3, 2, 3, 30, 13, 130, 300, 130, 400, 8, 200});
    CAPTURE(n);
    const Problem p = crosscheck::make_problem<T>(c, rng);
    const Seeds seeds = make_seeds<T>(p, rng, rng.integer(0, 1) == 1);
    const BackwardReference ref =
        reference_heads_backward<T>(p.Q, p.K, p.V, p.spec, seeds.d_out, seeds.d_scores, seeds.d_lse);
    const auto kernel = kernels[static_cast<size_t>(rng.integer(0, static_cast<long>(kernels.size()) - 1))];
    const int threads = static_cast<int>(rng.integer(1, 3));
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    CAPTURE(threads);
    check_against(run_backward<T>(p, seeds, options_for(p.spec, kernel, threads)), ref,
                  "attention_heads_backward_into vs reference");
  }
}

}  // namespace test_backward_vs_reference
