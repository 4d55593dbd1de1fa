// SPDX-License-Identifier: MIT
// Degenerate problems: no query, no key, all keys padded: empty or zero results, never NaN.
#include <doctest/doctest.h>

#include "multihead_crosscheck.hpp"

namespace test_multihead_empty {

using namespace ea_test;
using namespace ea_test::crosscheck;

TEST_CASE_TEMPLATE("multihead crosscheck: no query, no key, all keys padded: empty/zero results, never NaN",
                   T, float, double) {
  Rng rng(20);
  const Eigen::Index B = 2, H = 4, Hkv = 2, dk = 5, dv = 3;
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    for (const auto& shape : {std::pair<Eigen::Index, Eigen::Index>{0, 6}, {4, 0}, {0, 0}}) {
      const Eigen::Index tq = shape.first, tk = shape.second;  // CAPTURE cannot name bindings (C++17)
      CAPTURE(tq);
      CAPTURE(tk);
      Problem p;
      p.Q = random_array<T>(rng, B, H, tq, dk);
      p.K = random_array<T>(rng, B, Hkv, tk, dk);
      p.V = random_array<T>(rng, B, Hkv, tk, dv);
      p.spec.causal = true;
      p.spec.bottom_right = true;
      for (const bool decomposed : {false, true}) {
        CAPTURE(decomposed);
        const Run<T> r = run_heads<T>(p, options_for(p.spec, kernel), mh::Layout::BTHD, decomposed);
        CHECK(r.out.all_equal_to(T(0)));
        CHECK(r.lse.all_equal_to(-std::numeric_limits<T>::infinity()));
      }
      // The same with a boolean mask and a bias (each head's is an empty block: no offset is taken
      // from them), and more threads than there is work.
      Config c{"", B, H, Hkv, tq, tk, dk, dv};
      c.mask = "BxH";
      c.bias = "Bx1";
      const Problem pm = make_problem<T>(c, rng);
      for (const bool decomposed : {false, true}) {
        CAPTURE(decomposed);
        const Run<T> r = run_heads<T>(pm, options_for(pm.spec, kernel, 2), mh::Layout::BHTD, decomposed);
        CHECK(r.out.all_equal_to(T(0)));
        CHECK(r.lse.all_equal_to(-std::numeric_limits<T>::infinity()));
      }
    }
    // key_lengths all 0
    Config c{"", B, H, Hkv, 4, 6, dk, dv};
    Problem p = make_problem<T>(c, rng);
    p.spec.key_lengths = {0, 0};
    for (const bool decomposed : {false, true}) {
      CAPTURE(decomposed);
      const Run<T> r = run_heads<T>(p, options_for(p.spec, kernel), mh::Layout::BHTD, decomposed);
      CHECK(r.out.all_equal_to(T(0)));
      CHECK(r.lse.all_equal_to(-std::numeric_limits<T>::infinity()));
      if (decomposed) {
        CHECK(r.scores.all_equal_to(T(0)));
        CHECK(r.avg.all_equal_to(T(0)));
      }
    }
  }
}

}  // namespace test_multihead_empty
