// SPDX-License-Identifier: MIT
/// \file support.hpp
/// The harness of eigen_attention_mpi_tests: test cases that every rank runs, in the same order
/// (they call collectives), checks that record a failure on the rank that sees it, and the few
/// collectives the cases use to compare ranks (gathering strings, summing counts).
///
/// doctest is not used: a case must never stop early on one rank only (the others would wait in
/// a collective for it), and every rank's failures are gathered and printed by rank 0 after each
/// case, so that the output of N processes does not interleave. An exception that escapes a case
/// aborts the whole job (MPI_Abort): the other ranks may be blocked in a collective.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace ea_mpi {

/// The communicator the cases run on (a duplicate of MPI_COMM_WORLD), its size and this rank.
struct World {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
};
const World& world();

/// Records a failure on this rank; the message is prefixed with the current Scope()s.
void fail(const std::string& what);

/// Context for the failures recorded while it lives (as doctest's CAPTURE): "float", "ring", ...
class Scope {
 public:
  explicit Scope(std::string what);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
};

using CaseFunction = void (*)();
/// Registers a case at static initialisation; main() runs them sorted by name, so the order is
/// the same on every rank whatever the order of initialisation.
struct Registrar {
  Registrar(const char* name, CaseFunction function);
};

/// Every rank of the same communicator: the strings of every rank, in rank order, on `root`
/// (empty elsewhere).
std::vector<std::string> gather_strings(const std::string& mine, MPI_Comm comm, int root = 0);
/// Sum, minimum and maximum over the ranks of `comm` (every rank gets the result).
std::int64_t sum_over_ranks(std::int64_t mine, MPI_Comm comm);
std::int64_t min_over_ranks(std::int64_t mine, MPI_Comm comm);
std::int64_t max_over_ranks(std::int64_t mine, MPI_Comm comm);

}  // namespace ea_mpi

/// Defines a case `name` (a string) with body `{...}` following the macro.
#define EA_MPI_CASE(ident, name)                                          \
  static void ident();                                                    \
  static const ::ea_mpi::Registrar ident##_registrar_{name, &ident}; /**/ \
  static void ident()

/// Records a failure (with file, line and the streamed message) when `cond` is false.
#define EA_MPI_CHECK(cond, message)                                                         \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::ostringstream ea_mpi_s_;                                                         \
      ea_mpi_s_ << __FILE__ << ":" << __LINE__ << ": CHECK(" #cond ") failed: " << message; \
      ::ea_mpi::fail(ea_mpi_s_.str());                                                      \
    }                                                                                       \
  } while (false)
