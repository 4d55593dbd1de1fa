// SPDX-License-Identifier: MIT
// Ring attention against the single-process call on the whole sequence: every mask option,
// T_q != T_k with either alignment, GQA/MQA, key lengths, balanced, uneven and empty shards and
// ZigZag (problem.hpp's forward_cases and splits_for), in float and double.
#include "problem.hpp"

namespace ea_mpi {
namespace test_ring {

EA_MPI_CASE(ring_forward_float, "ring: forward vs the single-process call (float)") {
  std::uint64_t seed = 100;
  for (const Case& c : forward_cases(world().size)) check_case<float>(Method::Ring, c, false, seed++);
}

EA_MPI_CASE(ring_forward_double, "ring: forward vs the single-process call (double)") {
  std::uint64_t seed = 200;
  for (const Case& c : forward_cases(world().size)) check_case<double>(Method::Ring, c, false, seed++);
}

}  // namespace test_ring
}  // namespace ea_mpi
