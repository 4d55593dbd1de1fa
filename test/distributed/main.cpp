// SPDX-License-Identifier: MIT
// The runner of eigen_attention_mpi_tests, started by mpirun on every rank: runs every case (or
// those whose name contains argv[1], the same on every rank) in name order, prints each rank's failures
// through rank 0 after each case, and exits non-zero on every rank when any rank failed anywhere.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "support.hpp"

namespace ea_mpi {
namespace {

World g_world;
std::vector<std::string> g_scopes;
std::vector<std::string> g_failures;  // of the running case, on this rank

std::vector<std::pair<std::string, CaseFunction>>& registry() {
  static std::vector<std::pair<std::string, CaseFunction>> cases;
  return cases;
}

}  // namespace

const World& world() { return g_world; }

void fail(const std::string& what) {
  std::string where;
  for (const auto& s : g_scopes) where += "[" + s + "] ";
  g_failures.push_back(where + what);
}

// EA_MPI_TEST_TRACE set: every rank prints each scope it enters, to find where a crash or a hang is.
Scope::Scope(std::string what) {
  g_scopes.push_back(std::move(what));
  static const bool trace = std::getenv("EA_MPI_TEST_TRACE") != nullptr;
  if (!trace) return;
  std::string where;
  for (const auto& s : g_scopes) where += "[" + s + "] ";
  std::fprintf(stderr, "rank %d: %s\n", g_world.rank, where.c_str());
}
Scope::~Scope() { g_scopes.pop_back(); }

Registrar::Registrar(const char* name, CaseFunction function) { registry().emplace_back(name, function); }

std::vector<std::string> gather_strings(const std::string& mine, MPI_Comm comm, int root) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, root, comm);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    displs[static_cast<size_t>(r)] = total;
    total += lengths[static_cast<size_t>(r)];
  }
  std::string all(static_cast<size_t>(rank == root ? std::max(total, 1) : 1), '\0');
  MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), displs.data(), MPI_CHAR, root, comm);
  std::vector<std::string> out;
  if (rank != root) return out;
  for (int r = 0; r < size; ++r)
    out.push_back(all.substr(static_cast<size_t>(displs[static_cast<size_t>(r)]),
                             static_cast<size_t>(lengths[static_cast<size_t>(r)])));
  return out;
}

namespace {
std::int64_t reduce(std::int64_t mine, MPI_Op op, MPI_Comm comm) {
  std::int64_t out = 0;
  MPI_Allreduce(&mine, &out, 1, MPI_INT64_T, op, comm);
  return out;
}
}  // namespace

std::int64_t sum_over_ranks(std::int64_t mine, MPI_Comm comm) { return reduce(mine, MPI_SUM, comm); }
std::int64_t min_over_ranks(std::int64_t mine, MPI_Comm comm) { return reduce(mine, MPI_MIN, comm); }
std::int64_t max_over_ranks(std::int64_t mine, MPI_Comm comm) { return reduce(mine, MPI_MAX, comm); }

}  // namespace ea_mpi

int main(int argc, char** argv) {
  using namespace ea_mpi;
  MPI_Init(&argc, &argv);
  // The first guard against a hang (`timeout` and ctest's TIMEOUT, longer, are the next): SIGALRM
  // ends this process after EA_MPI_TEST_ALARM seconds (default 240), and mpirun the others.
  const char* alarm_seconds = std::getenv("EA_MPI_TEST_ALARM");
  alarm(static_cast<unsigned>(alarm_seconds ? std::atoi(alarm_seconds) : 240));
  MPI_Comm_dup(MPI_COMM_WORLD, &g_world.comm);
  MPI_Comm_rank(g_world.comm, &g_world.rank);
  MPI_Comm_size(g_world.comm, &g_world.size);
  const std::string filter = argc > 1 ? argv[1] : "";

  auto cases = registry();
  std::sort(cases.begin(), cases.end());
  const auto start = std::chrono::steady_clock::now();
  int failed_cases = 0, run = 0;
  for (const auto& [name, function] : cases) {
    if (name.find(filter) == std::string::npos) continue;
    ++run;
    g_failures.clear();
    const auto case_start = std::chrono::steady_clock::now();
    try {
      function();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: case '%s' threw %s; aborting (other ranks may be in a collective)\n",
                   g_world.rank, name.c_str(), e.what());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
    std::string mine;
    for (const auto& f : g_failures) mine += "  rank " + std::to_string(g_world.rank) + ": " + f + "\n";
    const auto all = gather_strings(mine, g_world.comm);
    const bool case_failed = sum_over_ranks(static_cast<std::int64_t>(g_failures.size()), g_world.comm) > 0;
    failed_cases += case_failed ? 1 : 0;
    if (g_world.rank == 0) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - case_start).count();
      std::printf("[%s] %s (%d ranks, %.2f s)\n", case_failed ? "FAIL" : " ok ", name.c_str(), g_world.size,
                  seconds);
      for (const auto& s : all) std::fputs(s.c_str(), stdout);
      std::fflush(stdout);
    }
  }
  if (g_world.rank == 0) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%d of %d cases failed on %d ranks (%.1f s)\n", failed_cases, run, g_world.size, seconds);
  }
  const bool none = run == 0;  // a filter that matches nothing is a mistake, not a pass
  MPI_Comm_free(&g_world.comm);
  MPI_Finalize();
  return failed_cases > 0 || none ? 1 : 0;
}
