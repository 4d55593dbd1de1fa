// SPDX-License-Identifier: MIT
// The kernels the library holds, and how a set of problems is spread over them and over
// threads. Internal to the library.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <EigenAttention/Kernels.hpp>
#include <EigenAttention/Types.hpp>

#include "kernels/abi.hpp"
#include "kernels/row_groups.hpp"
#include "scheduler.hpp"

namespace EigenAttention {
namespace internal {

using Eigen::Index;

/// The yardstick: plain Eigen expressions in the order of the formula (reference.cpp).
/// Computes the whole problem on the calling thread.
template <typename T>
void reference_kernel(const RawProblem<T>& p);
/// 16-bit arrays: the formula in float on the widened inputs, the results rounded once.
template <>
void reference_kernel<BFloat16Bits>(const RawProblem<BFloat16Bits>& p);
template <>
void reference_kernel<HalfBits>(const RawProblem<HalfBits>& p);

/// The yardstick of the backward pass: the gradients written as the formula (reference_backward.cpp),
/// with the weights recomputed whole. Accumulates into dk, dv and d_bias, writes dq.
template <typename T>
void reference_backward(const RawProblem<T>& p);
/// 16-bit arrays: the formula in float on the widened inputs, into the float gradients.
template <>
void reference_backward<BFloat16Bits>(const RawProblem<BFloat16Bits>& p);
template <>
void reference_backward<HalfBits>(const RawProblem<HalfBits>& p);

/// The kernel `requested` resolves to on this CPU (Auto: the fastest available).
/// Throws std::invalid_argument when it is not available here.
Kernel resolve_kernel(const char* api, Kernel requested);

/// The entry points of `kernel`, one of the table's that this build holds (kernels.cmake); the
/// portable kernel's for any other (Kernel::Reference has no tiled entry points).
const KernelSet& kernel_set(Kernel kernel);

/// A KernelSet's forward, backward and decode entry points for element type T: the one place
/// that maps a type to its field.
template <typename T>
RowsKernel<T> rows_kernel(const KernelSet& s) {
  if constexpr (std::is_same_v<T, float>) return s.rows_float;
  if constexpr (std::is_same_v<T, double>) return s.rows_double;
  if constexpr (std::is_same_v<T, BFloat16Bits>) return s.rows_bfloat16;
  if constexpr (std::is_same_v<T, HalfBits>) return s.rows_half;
}
template <typename T>
BackwardKernel<T> backward_kernel(const KernelSet& s) {
  if constexpr (std::is_same_v<T, float>) return s.backward_float;
  if constexpr (std::is_same_v<T, double>) return s.backward_double;
  if constexpr (std::is_same_v<T, BFloat16Bits>) return s.backward_bfloat16;
  if constexpr (std::is_same_v<T, HalfBits>) return s.backward_half;
}
template <typename T>
DecodeKernel<T> decode_kernel(const KernelSet& s) {
  if constexpr (std::is_same_v<T, float>) return s.decode_float;
  if constexpr (std::is_same_v<T, double>) return s.decode_double;
}

/// A number for a new forward call, never 0 and never the same twice in a process
/// (RawProblem::call).
std::uint64_t next_call();

/// Query rows per task handed to a thread.
constexpr index_t kTaskRows = 128;

/// Runs `count` problems, problem(p) returning the p-th RawProblem, with `kernel` (already
/// resolved) on up to `threads` threads (Options::threads), as many as their work gives
/// (scheduler.hpp). Tasks are (problem, tile of kTaskRows query rows); with a causal mask each
/// problem's last tiles, which see the most keys, come first. A problem whose rows fall into row
/// groups (row_groups.hpp: packed documents, chunks; not the decomposed call, whose SCORES rows
/// span every key) runs each group as a problem of its own, its tiles from its first row and its
/// keys from its first key, as varlen's sequences. Each output row is computed the same way
/// however the tasks fall, so results do not depend on `threads`.
template <typename T, class ProblemAt>
void run_problems(Kernel kernel, index_t count, const ProblemAt& problem, int threads) {
  if (count == 0) return;
  if (kernel == Kernel::Reference) {
    for (index_t i = 0; i < count; ++i) reference_kernel(problem(i));
    return;
  }
  const RowsKernel<T> run_rows = rows_kernel<T>(kernel_set(kernel));
  // Units (a problem, or one of its row groups) and their first tasks (prefix sums over their
  // tiles), in buffers of the calling thread kept from call to call (the _into calls allocate
  // nothing once warm). The tasks read them through these references: named in the lambda, a
  // thread_local would be the pool thread's own.
  struct Unit {
    index_t problem;
    RowGroup group;
    bool whole;  // the problem itself (one group)
  };
  thread_local std::vector<Unit> units_kept;
  thread_local std::vector<index_t> first_task_kept;
  thread_local std::vector<RowGroup> groups_kept;
  std::vector<Unit>& units = units_kept;
  std::vector<index_t>& first_task = first_task_kept;
  units.clear();
  first_task.assign(1, 0);
  double work = 0;
  for (index_t i = 0; i < count; ++i) {
    const RawProblem<T> p = problem(i);
    work += problem_work(p, Pass::Forward);
    if (p.want_scores) {
      groups_kept.assign(1, RowGroup{0, p.q.rows, 0, p.k.rows});
    } else {
      row_groups(p, kTaskRows / 2, groups_kept);
    }
    for (const RowGroup& g : groups_kept) {
      units.push_back({i, g, groups_kept.size() == 1});
      first_task.push_back(first_task.back() + (g.rows + kTaskRows - 1) / kTaskRows);
    }
  }
  const index_t tasks = first_task.back();
  if (tasks == 0) return;
  const std::uint64_t call = next_call();
  for_tasks(tasks, threads_for(threads, work), [&](index_t task) {
    const index_t which = static_cast<index_t>(std::upper_bound(first_task.begin(), first_task.end(), task) -
                                               first_task.begin()) -
                          1;
    const Unit& u = units[static_cast<std::size_t>(which)];
    index_t tile = task - first_task[which];
    const index_t tiles = first_task[which + 1] - first_task[which];
    RawProblem<T> p = problem(u.problem);
    p.call = call;
    if (p.causal) tile = tiles - 1 - tile;  // the heaviest tiles first
    const index_t first = tile * kTaskRows;
    if (u.whole) {
      run_rows(p, first, std::min(kTaskRows, p.q.rows - first));
      return;
    }
    // (The group's rows' ranges, on the running thread.)
    thread_local std::vector<std::int64_t> ranges;
    ranges.resize(static_cast<std::size_t>(2 * u.group.rows));
    const RawProblem<T> g = group_problem(p, u.group, ranges.data());
    run_rows(g, first, std::min(kTaskRows, g.q.rows - first));
  });
}

}  // namespace internal
}  // namespace EigenAttention
