// SPDX-License-Identifier: MIT
// Config::stats: the visible pairs each rank computed (its own query rows with every key for the
// ring, every row of its query heads for Ulysses), and ZigZag's balance of the causal work.
#include <algorithm>

#include "problem.hpp"

namespace ea_mpi {
namespace test_stats {
namespace {

template <class T>
void check_visible_pairs_per_rank(Method method) {
  const World& w = world();
  Scope scope(std::string(type_name<T>()) + ", " + method_name(method));
  Shape s;
  s.H = w.size == 3 ? 6 : 4;
  s.Hkv = 2;
  s.Tq = 19;
  s.Tk = 27;
  ea::Options opt;
  opt.causal = true;
  opt.alignment = ea::CausalAlignment::BottomRight;
  opt.window_left = 7;
  const Problem<T> p = make_problem<T>(s, opt, {{27, 15}, false}, 23);
  for (const Split& split : splits_for(s, w.size)) {
    Scope inner(split.name);
    const Local<T> l = local_part(p, split, w.comm);
    const Run<T> r = run_distributed(method, w.comm, p, l, false, opt);
    check_stats("stats", p, r.stats, w.comm);
    // Ring: this rank's queries against every key. Ulysses: every query of H / P heads.
    const std::int64_t expected =
        method == Method::Ring ? p.visible_pairs(&l.q_segments) : p.visible_pairs() / w.size;
    EA_MPI_CHECK(r.stats.visible_pairs == expected,
                 "visible_pairs " << r.stats.visible_pairs << " on this rank, expected " << expected);
  }
}

}  // namespace

EA_MPI_CASE(stats_visible_pairs, "stats: visible pairs per rank and over the ranks, ring and ulysses") {
  check_visible_pairs_per_rank<float>(Method::Ring);
  check_visible_pairs_per_rank<double>(Method::Ring);
  check_visible_pairs_per_rank<float>(Method::Ulysses);
}

EA_MPI_CASE(stats_zigzag_balance,
            "stats: ZigZag gives every rank the same causal work, Contiguous skips blocks") {
  const World& w = world();
  Shape s;
  s.B = 1;
  s.H = 2;
  s.Hkv = 2;
  s.Tq = s.Tk = 2 * w.size * 6;  // divisible by 2P
  ea::Options opt;
  opt.causal = true;
  const Problem<float> p = make_problem<float>(s, opt, {}, 29);
  for (const Split& split : splits_for(s, w.size)) {
    if (!split.q_counts.empty()) continue;  // balanced contiguous and ZigZag
    Scope inner(split.name);
    const Local<float> l = local_part(p, split, w.comm);
    const Run<float> r = run_distributed(Method::Ring, w.comm, p, l, false, opt);
    check_stats("stats", p, r.stats, w.comm);
    const std::int64_t lo = min_over_ranks(r.stats.visible_pairs, w.comm);
    const std::int64_t hi = max_over_ranks(r.stats.visible_pairs, w.comm);
    const std::int64_t skipped = sum_over_ranks(r.stats.blocks_skipped, w.comm);
    if (split.sharding == dist::Sharding::ZigZag) {
      EA_MPI_CHECK(10 * (hi - lo) <= hi,
                   "visible_pairs per rank from " << lo << " to " << hi << ": not within 10%");
    } else if (w.size > 1) {
      // Rank 0's queries see none of the keys of the ranks after it: at least those blocks skip.
      EA_MPI_CHECK(skipped >= w.size - 1,
                   skipped << " blocks skipped over the ranks, expected at least " << w.size - 1);
    }
  }
}

}  // namespace test_stats
}  // namespace ea_mpi
