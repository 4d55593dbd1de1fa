// The backward pass against the long-double reference (support/reference_backward.hpp): the
// multi-head configurations that together use every forward option, then random ones, with and
// without a loss on the weights (d_scores) and dL/dbias, on every kernel, one and several
// threads, both layouts. Every gradient element must lie within its own error bound.
#include <doctest/doctest.h>

#include "backward_crosscheck.hpp"

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
          reference_heads_backward<T>(p.Q, p.K, p.V, p.spec, seeds.d_out, seeds.d_scores);
      for (const auto kernel : kernels_under_test()) {
        const std::string kname = ea::kernel_name(kernel);
        CAPTURE(kname);
        for (const int threads : {1, 3}) {
          CAPTURE(threads);
          const mh::Layout layout = threads == 1 ? mh::Layout::BHTD : mh::Layout::BTHD;
          check_against(run_backward<T>(p, seeds, options_for(p.spec, kernel, threads), layout), ref,
                        "attention_heads_backward vs reference");
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("backward crosscheck: random configurations vs the long-double reference", T, float,
                   double) {
  // Seeded random shapes and options; one in eight spans several query and key tiles (128 each).
  Rng rng(4242);
  const auto kernels = kernels_under_test();
  for (int n = 0; n < 48; ++n) {
    Config c{"random", 0, 0, 0, 0, 0, 0, 0};
    const bool big = n % 8 == 7;
    c.B = big ? 1 : rng.integer(1, 3);
    c.Hkv = big ? 1 : rng.integer(1, 2);
    c.H = c.Hkv * rng.integer(1, big ? 2 : 3);
    c.Tq = big ? rng.integer(130, 300) : rng.integer(0, 30);
    c.Tk = big ? rng.integer(130, 400) : rng.integer(0, 30);
    c.dk = rng.integer(1, big ? 8 : 13);
    c.dv = rng.integer(1, 9);
    c.causal = rng.integer(0, 1) == 1;
    c.bottom_right = rng.integer(0, 1) == 1;
    c.window_left = rng.integer(0, 2) == 0 ? rng.integer(0, big ? 200 : 10) : -1;
    c.window_right = rng.integer(0, 2) == 0 ? rng.integer(0, big ? 200 : 10) : -1;
    c.softcap = rng.integer(0, 2) == 0 ? 0.5 + 5 * (rng.uniform() + 1) : 0.0;
    const char* shapes[] = {"", "1x1", "Bx1", "1xH", "BxH"};
    c.mask = shapes[rng.integer(0, 4)];
    c.bias = shapes[rng.integer(0, 4)];
    c.key_lengths = rng.integer(0, 2) == 0;
    c.alibi = rng.integer(0, 2) == 0;
    if (rng.integer(0, 3) == 0) c.scale = 0.1 + (rng.uniform() + 1);
    CAPTURE(n);
    const Problem p = crosscheck::make_problem<T>(c, rng);
    const Seeds seeds = make_seeds<T>(p, rng, rng.integer(0, 1) == 1);
    const BackwardReference ref =
        reference_heads_backward<T>(p.Q, p.K, p.V, p.spec, seeds.d_out, seeds.d_scores);
    const auto kernel = kernels[static_cast<size_t>(rng.integer(0, static_cast<long>(kernels.size()) - 1))];
    const int threads = static_cast<int>(rng.integer(1, 3));
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    CAPTURE(threads);
    check_against(run_backward<T>(p, seeds, options_for(p.spec, kernel, threads)), ref,
                  "attention_heads_backward vs reference");
  }
}
