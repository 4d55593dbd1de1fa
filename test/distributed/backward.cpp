// SPDX-License-Identifier: MIT
// The backward passes of ring and Ulysses attention against attention_heads_backward_into on the whole
// sequence, each from its own forward's OUT and LSE, on every case and split of the forward.
#include "problem.hpp"

namespace ea_mpi {
namespace test_backward {

EA_MPI_CASE(backward_ring_float, "backward: ring vs the single-process call (float)") {
  std::uint64_t seed = 700;
  for (const Case& c : forward_cases(world().size)) check_case<float>(Method::Ring, c, true, seed++);
}

EA_MPI_CASE(backward_ring_double, "backward: ring vs the single-process call (double)") {
  std::uint64_t seed = 800;
  for (const Case& c : forward_cases(world().size)) check_case<double>(Method::Ring, c, true, seed++);
}

EA_MPI_CASE(backward_ulysses_float, "backward: ulysses vs the single-process call (float)") {
  std::uint64_t seed = 900;
  for (const Case& c : forward_cases(world().size)) check_case<float>(Method::Ulysses, c, true, seed++);
}

EA_MPI_CASE(backward_ulysses_double, "backward: ulysses vs the single-process call (double)") {
  std::uint64_t seed = 1000;
  for (const Case& c : forward_cases(world().size)) check_case<double>(Method::Ulysses, c, true, seed++);
}

}  // namespace test_backward
}  // namespace ea_mpi
