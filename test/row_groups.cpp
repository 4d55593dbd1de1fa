// SPDX-License-Identifier: MIT
// Row groups (src/kernels/row_groups.hpp): where a problem's rows fall into groups that see
// disjoint keys (packed documents through a block mask's row ranges, the built-in chunks), the
// forward and the backward compute each group as a problem of its own, its tiles from the group's
// first row and first key. Their results are then the varlen call's on the same documents, bit
// for bit; with every option the calls take (a bias and dL/dbias, dL/dSCORES, dL/dLSE, sinks,
// ALiBi, the soft-cap, a boolean mask, GQA, key lengths, both alignments, a window within the
// chunks, a score_mod that reads the positions) they lie within the long-double reference's
// bounds, with the same bits for every thread count; and rows that see no key, between groups,
// get zero output and dQ = 0. The groups are at least half a query tile (64 rows), so the
// problems here span several.
#include <doctest/doctest.h>

#include <EigenAttention/EigenAttention.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "support/backward_crosscheck.hpp"
#include "support/multihead_crosscheck.hpp"

namespace test_row_groups {

using namespace ea_test;
using namespace ea_test::crosscheck;
namespace bw = ea_test::backward;

TEST_CASE_TEMPLATE("row groups: packed documents as a mask_mod give the varlen backward's gradients bitwise",
                   T, float, double) {
  Rng rng(3001);
  // Five causal documents of 70, 130, 64, 200 and 90 tokens, none on a tile's edge; GQA.
  const std::vector<std::int64_t> cu{0, 70, 200, 264, 464, 554};
  const Eigen::Index total = 554, H = 4, Hkv = 2, dk = 16, dv = 8;
  std::vector<int> doc(static_cast<size_t>(total));
  for (size_t d = 0; d + 1 < cu.size(); ++d)
    for (std::int64_t t = cu[d]; t < cu[d + 1]; ++t) doc[static_cast<size_t>(t)] = static_cast<int>(d);
  const Array4 Q = random_array<T>(rng, 1, H, total, dk), K = random_array<T>(rng, 1, Hkv, total, dk),
               V = random_array<T>(rng, 1, Hkv, total, dv), dO = random_array<T>(rng, 1, H, total, dv);
  const HeadsBuffer<T> q(Q, mh::Layout::BHTD), k(K, mh::Layout::BHTD), v(V, mh::Layout::BHTD),
      d_out(dO, mh::Layout::BHTD);
  const auto mm = ea::mask_mod([&](auto, auto, auto qi, auto kj) {
    return kj <= qi && doc[static_cast<size_t>(qi)] == doc[static_cast<size_t>(kj)];
  });
  const ea::BlockMask bm = ea::block_mask(mm, 1, 1, total, total);
  REQUIRE(bm.exact_line(0, 0));  // the rows' key ranges, which the groups are found from
  // The tiled kernels (the reference kernel sums each gradient over the whole problem at once,
  // in its own order, and is checked against the long-double reference below).
  for (const auto kernel : kernels_under_test()) {
    if (kernel == mh::Kernel::Reference) continue;
    const std::string kname = mh::kernel_name(kernel);
    CAPTURE(kname);
    for (const int threads : {1, 2}) {
      CAPTURE(threads);
      mh::Options opt;
      opt.kernel = kernel;
      opt.threads = threads;
      mh::Options causal = opt;
      causal.causal = true;
      HeadsBuffer<T> out(mh::Layout::BHTD, 1, H, total, dv, T(0)),
          lse(mh::Layout::BHTD, 1, H, total, 1, T(0));
      mh::attention_varlen_into(q.cview(), k.cview(), v.cview(), cu.data(), cu.data(), 5, out.view(),
                                lse.view(), causal);
      {  // The forwards: the same bits (the documents are row groups of the forward too).
        HeadsBuffer<T> out_b(mh::Layout::BHTD, 1, H, total, dv, T(0)),
            lse_b(mh::Layout::BHTD, 1, H, total, 1, T(0));
        mh::Masks<T> masks;
        masks.mask_mod = mm;
        masks.block_mask = bm;
        mh::attention_heads_into(q.cview(), k.cview(), v.cview(), out_b.view(), lse_b.view(), opt, masks);
        check_heads_equal(out_b.view(), out.view(), "OUT: documents as a mask_mod vs varlen");
        check_heads_equal(lse_b.view(), lse.view(), "LSE: documents as a mask_mod vs varlen");
      }
      // The varlen forward's OUT and LSE for both backward calls.
      const auto grads = [&](bool varlen) {
        bw::Gradients<T> g;
        g.dq = HeadsBuffer<T>(mh::Layout::BHTD, 1, H, total, dk, kSentinel<T>);
        g.dk = HeadsBuffer<T>(mh::Layout::BHTD, 1, Hkv, total, dk, kSentinel<T>);
        g.dv = HeadsBuffer<T>(mh::Layout::BHTD, 1, Hkv, total, dv, kSentinel<T>);
        if (varlen) {
          mh::attention_varlen_backward_into(q.cview(), k.cview(), v.cview(), out.cview(), lse.cview(),
                                             d_out.cview(), cu.data(), cu.data(), 5, g.dq.view(), g.dk.view(),
                                             g.dv.view(), causal);
        } else {
          mh::Masks<T> masks;
          masks.mask_mod = mm;
          masks.block_mask = bm;
          mh::attention_heads_backward_into(q.cview(), k.cview(), v.cview(), out.cview(), lse.cview(),
                                            d_out.cview(), {}, g.dq.view(), g.dk.view(), g.dv.view(), {}, opt,
                                            masks, {});
        }
        return g;
      };
      bw::check_equal(grads(false), grads(true), "documents as a mask_mod vs varlen");
    }
  }
}

struct Case {
  std::string name;
  Config config;
};

std::vector<Case> chunk_cases() {
  std::vector<Case> cases;
  {
    Config c{"", 2, 4, 2, 300, 300, 16, 8};
    c.chunk = 70;
    c.causal = true;
    c.bias = "BxH";
    c.sinks = true;
    cases.push_back({"causal chunks, bias, sinks, GQA", c});
  }
  {
    Config c{"", 3, 2, 1, 200, 330, 8, 12};
    c.chunk = 90;
    c.causal = true;
    c.bottom_right = true;
    c.alibi = true;
    c.softcap = 4;
    c.key_lengths = true;
    c.magnitude = 1.5;
    cases.push_back({"bottom-right chunks, T_k > T_q, ALiBi, soft-cap, key lengths", c});
  }
  {
    Config c{"", 1, 2, 2, 260, 260, 12, 6};
    c.chunk = 100;
    c.window_left = 30;
    c.window_right = 5;
    c.mask = "1xH";
    cases.push_back({"chunks with a window and a boolean mask", c});
  }
  {
    Config c{"", 1, 3, 3, 257, 257, 9, 17};
    c.chunk = 64;
    cases.push_back({"bidirectional chunks of 64, d_v > d_k", c});
  }
  return cases;
}

/// The forward and the backward of p (with `program` added to its masks) against the reference,
/// on every kernel, the backward with and without dL/dSCORES, 1 and 3 threads with the same bits.
template <class T>
void check_groups(const Problem& p, Rng& rng, const std::function<void(mh::Masks<T>&)>& program = {}) {
  const auto ref = reference_heads(p.Q, p.K, p.V, p.spec);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = mh::kernel_name(kernel);
    CAPTURE(kname);
    const Run<T> one = run_heads<T>(p, options_for(p.spec, kernel, 1), mh::Layout::BHTD, false, program);
    check_against(one, ref, 1, "forward: row groups vs reference");
    check_runs_equal(run_heads<T>(p, options_for(p.spec, kernel, 3), mh::Layout::BHTD, false, program), one,
                     "forward: 3 threads vs 1");
  }
  for (const bool with_d_scores : {false, true}) {
    CAPTURE(with_d_scores);
    const bw::Seeds seeds = bw::make_seeds<T>(p, rng, with_d_scores);
    const BackwardReference ref =
        reference_heads_backward<T>(p.Q, p.K, p.V, p.spec, seeds.d_out, seeds.d_scores, seeds.d_lse);
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = mh::kernel_name(kernel);
      CAPTURE(kname);
      const bw::Gradients<T> one =
          bw::run_backward<T>(p, seeds, options_for(p.spec, kernel, 1), mh::Layout::BHTD, true, program);
      bw::check_against(one, ref, "row groups vs reference");
      const bw::Gradients<T> three =
          bw::run_backward<T>(p, seeds, options_for(p.spec, kernel, 3), mh::Layout::BHTD, true, program);
      bw::check_equal(three, one, "3 threads vs 1");
    }
  }
}

TEST_CASE_TEMPLATE("row groups: built-in chunks with every backward option vs the long-double reference", T,
                   float, double) {
  Rng rng(3002);
  for (const Case& cs : chunk_cases()) {
    CAPTURE(cs.name);
    check_groups<T>(make_problem<T>(cs.config, rng), rng);
  }
}

TEST_CASE_TEMPLATE("row groups: documents with rows that see no key, and a score_mod at their positions", T,
                   float, double) {
  Rng rng(3003);
  Config c{"", 2, 2, 1, 290, 290, 16, 8};
  Problem p = make_problem<T>(c, rng);
  // Documents [0, 80), [80, 150), [150, 290); the rows [150, 170) see no key.
  const auto keep = [](long q, long k) {
    const auto doc = [](long x) { return x < 80 ? 0 : x < 150 ? 1 : 2; };
    return k <= q && doc(q) == doc(k) && !(q >= 150 && q < 170);
  };
  p.spec.keep = [=](long, long, long q, long k) { return keep(q, k); };
  p.spec.score = [](long double s, long, long h, long q, long k) {
    return s + 0.01L * (h + 1) * (q - 2 * k);
  };
  p.spec.score_slope = [](long double, long, long, long, long) { return 1.0L; };
  const auto mm = ea::mask_mod(
      [=](auto, auto, auto q, auto k) { return keep(static_cast<long>(q), static_cast<long>(k)); });
  const auto sm = ea::score_mod(
      [](auto s, auto, auto h, auto q, auto k) { return s + T(0.01) * T(h + 1) * T(q - 2 * k); });
  const ea::BlockMask bm = ea::block_mask(mm, 1, 1, c.Tq, c.Tk, 32, 32);
  REQUIRE(bm.exact_line(0, 0));
  check_groups<T>(p, rng, [&](mh::Masks<T>& m) {
    m.mask_mod = mm;
    m.block_mask = bm;
    m.score_mod = sm;
  });
}

}  // namespace test_row_groups
