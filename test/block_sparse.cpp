// SPDX-License-Identifier: MIT
// Block-sparse attention (BlockMask::from_blocks) through the fused forward's gathered passes
// (src/kernels/tiled.hpp): a strip of query rows whose shown tiles are all Full takes the logits of
// its runs of blocks side by side, across key tiles, in batches of at most a key tile's keys (a
// run longer than that in pieces), and goes through the online softmax once per batch. Against
// the long-double reference with the equivalent boolean mask, within the budget: blocks of 128
// and of 40 keys (runs that do not start on a packet, which take the tile-by-tile passes), T_k
// past one key tile, a last block that is not whole packets, a run longer than a key tile, row
// blocks that see nothing, strips that the causal diagonal cuts (both paths in one query tile),
// Partial tiles asked of a mask_mod, sinks,
// GQA, T_q != T_k; the same bits for every thread count; and a NaN in the values of a block that
// a row does not see stays out of it.
#include <doctest/doctest.h>

#include <EigenAttention/EigenAttention.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "support/multihead_crosscheck.hpp"

namespace test_block_sparse {

using namespace ea_test;
using namespace ea_test::crosscheck;

/// A block mask of R x C tiles for H heads (the same for every sequence), from a chooser of each
/// tile's class (0 Empty, 1 Partial: the top-left half of its keys, 2 Full), and the boolean mask
/// it stands for.
struct Blocks {
  ea::BlockMask mask;
  Array4 boolean;
};

template <class Choose>
Blocks make_blocks(Eigen::Index H, Eigen::Index tq, Eigen::Index tk, Eigen::Index R, Eigen::Index C,
                   Choose choose) {
  const Eigen::Index nq = (tq + R - 1) / R, nk = (tk + C - 1) / C;
  ea::BlockMask bm = ea::BlockMask::from_blocks(1, H, tq, tk, R, C,
                                                std::vector<std::int64_t>(static_cast<size_t>(H * nq + 1), 0),
                                                std::vector<std::int64_t>{});
  Blocks b{bm, Array4(1, H, tq, tk, 0)};
  for (Eigen::Index h = 0; h < H; ++h)
    for (Eigen::Index rb = 0; rb < nq; ++rb)
      for (Eigen::Index cb = 0; cb < nk; ++cb) {
        const int kind = choose(h, rb, cb);
        b.mask.set(0, h, rb, cb,
                   kind == 0   ? ea::BlockKind::Empty
                   : kind == 1 ? ea::BlockKind::Partial
                               : ea::BlockKind::Full);
        for (Eigen::Index i = rb * R; i < std::min(tq, (rb + 1) * R); ++i)
          for (Eigen::Index j = cb * C; j < std::min(tk, (cb + 1) * C); ++j)
            b.boolean(0, h, i, j) = kind == 2 || (kind == 1 && j - cb * C < C / 2) ? 1 : 0;
      }
  return b;
}

TEST_CASE_TEMPLATE("block sparse: gathered passes vs the long-double reference with the boolean mask", T,
                   float, double) {
  Rng rng(3101);
  struct Case {
    std::string name;
    Config config;
    Eigen::Index R, C;
    double density;
    bool partial;  // a Partial tile in some row blocks (a mask_mod then decides: the top-left half)
  };
  std::vector<Case> cases;
  cases.push_back({"blocks of 128, T_k past a key tile, a last block of 76 keys",
                   {"", 1, 2, 2, 300, 1100, 16, 8},
                   128,
                   128,
                   0.35,
                   false});
  cases.push_back({"blocks of 40 keys (runs not on a packet), GQA, sinks",
                   {"", 1, 4, 2, 200, 700, 12, 20},
                   32,
                   40,
                   0.3,
                   false});
  cases.push_back({"dense rows: a run longer than a key tile, row blocks that see nothing",
                   {"", 1, 2, 1, 260, 2000, 8, 8},
                   64,
                   64,
                   1.0,
                   false});
  cases.push_back({"Partial tiles asked of a mask_mod (tile-by-tile passes)",
                   {"", 1, 2, 2, 256, 900, 16, 16},
                   16,
                   128,
                   0.4,
                   true});
  {
    Config c{"", 1, 2, 2, 400, 400, 16, 8};
    c.causal = true;  // strips that the diagonal cuts take the tile-by-tile passes, the others gather
    cases.push_back({"causal, blocks of 64", c, 64, 64, 0.5, false});
  }
  for (Case& cs : cases) {
    CAPTURE(cs.name);
    if (cs.name.find("sinks") != std::string::npos) cs.config.sinks = true;
    const Config& c = cs.config;
    const Problem p = make_problem<T>(c, rng);
    const Blocks b =
        make_blocks(c.H, c.Tq, c.Tk, cs.R, cs.C, [&](Eigen::Index, Eigen::Index rb, Eigen::Index) {
          if (cs.density >= 1.0) return rb % 3 == 1 ? 0 : 2;  // every third row block sees nothing
          if (rng.uniform() * 0.5 + 0.5 >= cs.density) return 0;
          return cs.partial && rb % 4 == 1 ? 1 : 2;
        });
    Problem with_mask = p;
    with_mask.spec.mask = b.boolean;
    const auto ref = reference_heads(with_mask.Q, with_mask.K, with_mask.V, with_mask.spec);
    const auto half = [C = cs.C](auto, auto, auto, auto k) { return k % C < C / 2; };
    const auto mm = ea::mask_mod(half);
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = mh::kernel_name(kernel);
      CAPTURE(kname);
      Run<T> first;
      for (const int threads : {1, 2, 3}) {
        CAPTURE(threads);
        const Run<T> r = run_heads<T>(p, options_for(p.spec, kernel, threads), mh::Layout::BHTD, false,
                                      [&](mh::Masks<T>& m) {
                                        m.block_mask = b.mask;
                                        if (cs.partial) m.mask_mod = mm;
                                      });
        check_against(r, ref, 1, "block-sparse vs reference");
        if (threads == 1) {
          first = r;
        } else {
          check_runs_equal(r, first, "threads vs 1");
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("block sparse: a NaN in the values of a block a row does not see stays out of it", T,
                   float, double) {
  Rng rng(3102);
  Config c{"", 1, 1, 1, 256, 1024, 16, 8};
  Problem p = make_problem<T>(c, rng);
  // Row block 0 sees key blocks 0 and 2, row block 1 sees key blocks 1 and 3 (128 x 128 tiles);
  // V of key 130 (block 1) is NaN.
  const Blocks b = make_blocks(1, 256, 1024, 128, 128, [](Eigen::Index, Eigen::Index rb, Eigen::Index cb) {
    return cb % 2 == rb && cb < 4 ? 2 : 0;
  });
  p.V(0, 0, 130, 3) = std::numeric_limits<long double>::quiet_NaN();
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = mh::kernel_name(kernel);
    CAPTURE(kname);
    const Run<T> r = run_heads<T>(p, options_for(p.spec, kernel, 2), mh::Layout::BHTD, false,
                                  [&](mh::Masks<T>& m) { m.block_mask = b.mask; });
    long finite_rows = 0, nan_rows = 0;
    for (Eigen::Index i = 0; i < 256; ++i) {
      const auto row = r.out.view().head(0, 0).row(i);
      if (i < 128 && row.allFinite()) ++finite_rows;
      if (i >= 128 && std::isnan(static_cast<double>(row(3)))) ++nan_rows;
    }
    CHECK(finite_rows == 128);
    CHECK(nan_rows == 128);
  }
}

}  // namespace test_block_sparse
