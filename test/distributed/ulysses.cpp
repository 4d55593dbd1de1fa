// SPDX-License-Identifier: MIT
// Ulysses attention against the single-process call on the whole sequence: the cases of the
// ring (problem.hpp's forward_cases and splits_for), and K/V heads that the ranks share (H_kv
// not divisible by P: a K/V head goes to every rank whose query heads read it).
#include "problem.hpp"

namespace ea_mpi {
namespace test_ulysses {

EA_MPI_CASE(ulysses_forward_float, "ulysses: forward vs the single-process call (float)") {
  std::uint64_t seed = 300;
  for (const Case& c : forward_cases(world().size)) check_case<float>(Method::Ulysses, c, false, seed++);
}

EA_MPI_CASE(ulysses_forward_double, "ulysses: forward vs the single-process call (double)") {
  std::uint64_t seed = 400;
  for (const Case& c : forward_cases(world().size)) check_case<double>(Method::Ulysses, c, false, seed++);
}

namespace {
/// H = 12 query heads (divisible by 1, 2, 3 and 4 ranks) over H_kv = 1, 2, 3 or 4 K/V heads: on
/// 3 or 4 ranks a rank's query heads read one or two K/V heads that other ranks read too.
template <class T>
void check_shared_kv_heads(bool backward, std::uint64_t seed) {
  for (const std::ptrdiff_t hkv : {1, 2, 3, 4}) {
    Case c;
    c.name = "H 12, H_kv " + std::to_string(hkv);
    c.s.B = 1;
    c.s.H = 12;
    c.s.Hkv = hkv;
    c.s.Tq = 14;
    c.s.Tk = 17;
    c.opt.causal = true;
    c.opt.alignment = ea::CausalAlignment::BottomRight;
    c.m.alibi = true;
    check_case<T>(Method::Ulysses, c, backward, seed++);
  }
}
}  // namespace

EA_MPI_CASE(ulysses_shared_kv_float,
            "ulysses: K/V heads shared between ranks, forward and backward (float)") {
  check_shared_kv_heads<float>(true, 500);
}

EA_MPI_CASE(ulysses_shared_kv_double,
            "ulysses: K/V heads shared between ranks, forward and backward (double)") {
  check_shared_kv_heads<double>(true, 600);
}

}  // namespace test_ulysses
}  // namespace ea_mpi
