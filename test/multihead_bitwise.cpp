// SPDX-License-Identifier: MIT
// What must not change a single bit: the number of threads (1, 2 and 0; the forward, the
// head-averaged SCORES and the merge), and BHTD vs BTHD buffers (the same problem, addressed
// differently).
#include <doctest/doctest.h>

#include <limits>

#include "multihead_crosscheck.hpp"

namespace test_multihead_bitwise {

using namespace ea_test;
using namespace ea_test::crosscheck;

TEST_CASE_TEMPLATE("multihead crosscheck: threads 1, 2 and 0 give bitwise the same results", T, float,
                   double) {
  Rng rng(17);
  Config c{"", 2, 4, 2, 150, 170, 32, 16};
  c.causal = c.bottom_right = c.alibi = c.key_lengths = true;
  c.window_left = 100;
  c.softcap = 6;
  c.mask = "Bx1";
  c.bias = "1xH";
  const Problem p = make_problem<T>(c, rng);
  std::vector<std::int64_t> cu_q{0, 70, 71, 150}, cu_k{0, 90, 90, 170};
  Problem pv;
  pv.Q = random_array<T>(rng, 1, 4, 150, 32);
  pv.K = random_array<T>(rng, 1, 2, 170, 32);
  pv.V = random_array<T>(rng, 1, 2, 170, 16);
  pv.spec.causal = true;
  pv.spec.alibi = p.spec.alibi;
  pv.spec.window_left = 30;
  const MasksBuffer<T> vmasks(pv.spec);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    for (const mh::Layout layout : {mh::Layout::BHTD, mh::Layout::BTHD}) {
      const std::string lname = layout_name(layout);
      CAPTURE(lname);
      const Run<T> f1 = run_heads<T>(p, options_for(p.spec, kernel, 1), layout, false);
      const Run<T> d1 = run_heads<T>(p, options_for(p.spec, kernel, 1), layout, true);
      const HeadsBuffer<T> Q(pv.Q, layout), K(pv.K, layout), V(pv.V, layout);
      auto varlen = [&](int threads) {
        Run<T> r;
        r.out = HeadsBuffer<T>(layout, 1, 4, 150, 16, kSentinel<T>);
        r.lse = HeadsBuffer<T>(layout, 1, 4, 150, 1, kSentinel<T>);
        mh::attention_varlen_into(Q.cview(), K.cview(), V.cview(), cu_q.data(), cu_k.data(), 3, r.out.view(),
                                  r.lse.view(), options_for(pv.spec, kernel, threads), vmasks.masks);
        return r;
      };
      const Run<T> v1 = varlen(1);
      for (const int threads : {2, 0}) {
        CAPTURE(threads);
        check_runs_equal(run_heads<T>(p, options_for(p.spec, kernel, threads), layout, false), f1,
                         "attention_heads_into");
        check_runs_equal(run_heads<T>(p, options_for(p.spec, kernel, threads), layout, true), d1,
                         "attention_heads_decomposed_into");
        check_runs_equal(varlen(threads), v1, "attention_varlen_into");
      }
    }
  }
}

TEST_CASE_TEMPLATE("multihead crosscheck: merge_attention_into gives the same bits for every thread count", T,
                   float, double) {
  Rng rng(19);
  // 2 x 4 x 600 rows of d_v = 96: enough to be spread over several threads. Row 0 of the second
  // part saw no key (lse -inf); the first part is BTHD, the rest BHTD.
  const Eigen::Index B = 2, H = 4, tq = 600, dv = 96;
  const HeadsBuffer<T> a(random_array<T>(rng, B, H, tq, dv), mh::Layout::BTHD),
      b(random_array<T>(rng, B, H, tq, dv), mh::Layout::BHTD);
  const HeadsBuffer<T> la(random_array<T>(rng, B, H, tq, 1), mh::Layout::BTHD);
  HeadsBuffer<T> lb(random_array<T>(rng, B, H, tq, 1), mh::Layout::BHTD);
  lb.view().data[0] = -std::numeric_limits<T>::infinity();
  const auto merged = [&](int threads) {
    Run<T> r;
    r.out = HeadsBuffer<T>(mh::Layout::BHTD, B, H, tq, dv, kSentinel<T>);
    r.lse = HeadsBuffer<T>(mh::Layout::BHTD, B, H, tq, 1, kSentinel<T>);
    mh::Options opt;
    opt.threads = threads;
    mh::merge_attention_into(a.cview(), la.cview(), b.cview(), lb.cview(), r.out.view(), r.lse.view(), opt);
    return r;
  };
  const Run<T> r1 = merged(1);
  for (const int threads : {2, 3, 0}) {
    CAPTURE(threads);
    check_runs_equal(merged(threads), r1, "merge_attention_into");
  }
}

TEST_CASE_TEMPLATE("multihead crosscheck: more threads than tasks give the one-thread bits", T, float,
                   double) {
  Rng rng(18);
  // One head, one query tile: one task, with enough work (1100 keys) that more threads would be used.
  Config c{"", 1, 1, 1, 100, 1100, 64, 32};
  c.causal = true;
  const Problem p = make_problem<T>(c, rng);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    for (const bool decomposed : {false, true}) {
      CAPTURE(decomposed);
      const Run<T> r1 = run_heads<T>(p, options_for(p.spec, kernel, 1), mh::Layout::BHTD, decomposed);
      for (const int threads : {4, 0}) {
        CAPTURE(threads);
        check_runs_equal(run_heads<T>(p, options_for(p.spec, kernel, threads), mh::Layout::BHTD, decomposed),
                         r1, decomposed ? "attention_heads_decomposed_into" : "attention_heads_into");
      }
    }
  }
}

TEST_CASE_TEMPLATE("multihead crosscheck: BHTD and BTHD buffers give bitwise the same results", T, float,
                   double) {
  Rng rng(18);
  for (const Config& c : feature_configs()) {
    if (c.Tq > 20) continue;  // the small ones suffice here
    const std::string config = c.name;
    CAPTURE(config);
    const Problem p = make_problem<T>(c, rng);
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      for (const bool decomposed : {false, true}) {
        CAPTURE(decomposed);
        const mh::Options opt = options_for(p.spec, kernel, 2);
        const Run<T> a = run_heads<T>(p, opt, mh::Layout::BHTD, decomposed);
        const Run<T> b = run_heads<T>(p, opt, mh::Layout::BTHD, decomposed);
        check_runs_equal(b, a, "BTHD vs BHTD");
      }
    }
  }
}

}  // namespace test_multihead_bitwise
