// SPDX-License-Identifier: MIT
// The backward pass is bitwise identical for every thread count and from run to run
// (Options::threads' guarantee, and what GPU implementations with atomics cannot give). The
// problems cover both ways the work is split (kernels/backward.hpp): whole units per thread when
// there are many (GQA heads), key tiles over threads when there are few (one head), and the
// units that a broadcast bias merges.
#include <doctest/doctest.h>

#include "backward_crosscheck.hpp"

namespace test_backward_threads {

using namespace ea_test;
using namespace ea_test::backward;

TEST_CASE_TEMPLATE("backward threads: every thread count and every run give the same bits", T, float,
                   double) {
  Rng rng(12);
  std::vector<Config> configs;
  configs.push_back(Config{"one head over several key tiles, causal", 1, 1, 1, 260, 300, 16, 8});
  configs.back().causal = true;
  configs.push_back(Config{"many GQA units, window + soft-cap", 3, 8, 4, 140, 150, 8, 8});
  configs.back().window_left = 50;
  configs.back().softcap = 3;  // (double's tanh is scalar: keep this one small)
  configs.back().Tq = 40;
  configs.push_back(Config{"bias 1x1 merges every unit, mask, key lengths", 2, 4, 2, 140, 270, 8, 4});
  configs.back().bias = "1x1";
  configs.back().mask = "BxH";
  configs.back().key_lengths = true;
  configs.push_back(Config{"bias Bx1: one unit per sequence, ALiBi, bottom-right", 2, 3, 1, 130, 270, 12, 6});
  configs.back().bias = "Bx1";
  configs.back().alibi = configs.back().causal = configs.back().bottom_right = true;
  for (const Config& c : configs) {
    const std::string config = c.name;
    CAPTURE(config);
    const Problem p = crosscheck::make_problem<T>(c, rng);
    const Seeds s = make_seeds<T>(p, rng, true);
    for (const auto kernel : ea::available_kernels()) {
      if (kernel == ea::Kernel::Reference) continue;  // sequential by construction
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      const Gradients<T> one = run_backward<T>(p, s, options_for(p.spec, kernel, 1));
      for (const int threads : {1, 2, 3, 4, 0}) {
        CAPTURE(threads);
        check_equal(run_backward<T>(p, s, options_for(p.spec, kernel, threads)), one, "vs one thread");
      }
    }
  }
}

}  // namespace test_backward_threads
