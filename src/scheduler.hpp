// SPDX-License-Identifier: MIT
// The one scheduler: what a pass costs (work), how many threads it gets, and which thread runs
// which of its tasks. Every parallel pass of the library goes through it: the forward
// (run_problems, kernels/kernels.hpp), the backward (kernels/backward.hpp), decode (decode.cpp)
// and the O(rows) passes after them (the head-averaged SCORES, merges, the zeroing of padded
// SCORES, the rounding of float results into 16-bit outputs). Internal.
//
// Determinism. A pass is cut into tasks by its own shape alone (tiles of query rows, key tiles,
// split-K chunks, blocks of rows), never by the thread count; no two tasks write one element,
// and every sum is taken within one task or in a fixed order afterwards. So which thread runs a
// task changes no bit: the result is the same for every Options::threads.
#pragma once

#include <algorithm>

#include "index.hpp"
#include "kernels/abi.hpp"
#include "thread_pool.hpp"

namespace EigenAttention {
namespace internal {

/// The one work model: what a pass costs, in multiply-adds, a byte moved to or from memory
/// counting as one (a pass bound by memory moves about a byte per core in the time of a
/// multiply-add). `pairs` (query, key) pairs taking `per_pair` multiply-adds each, plus `bytes`
/// streamed: the keys and values a decode chunk reads, the elements an O(rows) pass reads and
/// writes.
constexpr double work_of(double pairs, double per_pair, double bytes = 0) { return pairs * per_pair + bytes; }

/// The passes over (query, key) pairs, and what each costs per visible pair (work_of()).
enum class Pass {
  Forward,   // Q K^T and P V: d_k + d_v, plus the exp
  Backward,  // five products, 3 d_k + 2 d_v: taken as 2.5 (d_k + d_v)
  Decode,    // Q K^T and P V: d_k + d_v (the bytes of K and V are counted apart)
};
constexpr double per_pair(Pass pass, index_t d_k, index_t d_v) {
  switch (pass) {
    case Pass::Forward:
      return static_cast<double>(d_k + d_v + 1);
    case Pass::Backward:
      return 2.5 * static_cast<double>(d_k + d_v);
    case Pass::Decode:
      return static_cast<double>(d_k + d_v);
  }
  return 0;
}

/// The (query, key) pairs of a problem within its key range (the boolean mask not counted): the
/// pairs its tiles compute, up to their edges.
template <typename T>
double visible_pairs(const RawProblem<T>& p) {
  const KeyRange range = p.key_range();
  double pairs = 0;
  for (index_t i = 0; i < p.q.rows; ++i) pairs += static_cast<double>(range.end_key(i) - range.first_key(i));
  return pairs;
}

/// The work of problem p's forward or backward pass.
template <typename T>
double problem_work(const RawProblem<T>& p, Pass pass) {
  return work_of(visible_pairs(p), per_pair(pass, p.q.cols, p.v.cols));
}

/// Below this much work per thread, another thread costs more than it saves (waking a pool
/// thread and waiting for it is some microseconds).
constexpr double kMinWorkPerThread = 1 << 20;

/// How many threads a pass of `work` (work_of()) gets when `requested` were asked for
/// (Options::threads, 0: every hardware thread): at most one per kMinWorkPerThread of work, so
/// that small problems use fewer threads (for_tasks then uses no more than its tasks).
inline int threads_for(int requested, double work) {
  const double useful = std::min<double>(work / kMinWorkPerThread + 1, 1 << 16);
  return std::max(1, std::min(resolve_threads(requested), static_cast<int>(useful)));
}

/// The one task splitter: task(t) for every t in [0, count), on n = min(threads, count) threads
/// (threads from threads_for). On the calling thread alone, in order, when n is 1; else as n pool
/// tasks, pool task k taking one task of each round of n in turn, the k-th from the front in
/// even rounds and from the back in odd ones (k, 2n - 1 - k, 2n + k, ...). The mapping is fixed:
/// a pass whose steps share data (the backward's weights, written by one step of a key tile and
/// read by the next) finds it in the same thread's cache, as the pool hands pool task k to the
/// same thread from one call to the next as a rule; and tasks in decreasing order of cost (a
/// causal problem's tiles, last first) fall evenly on the threads.
template <class Task>
void for_tasks(index_t count, int threads, const Task& task) {
  const index_t n = std::min<index_t>(threads, count);
  if (n <= 1) {
    for (index_t t = 0; t < count; ++t) task(t);
    return;
  }
  ThreadPool::instance().run(n, static_cast<int>(n), [&](index_t k) {
    for (index_t round = 0; round * n < count; ++round) {
      const index_t t = round * n + (round % 2 == 0 ? k : n - 1 - k);
      if (t < count) task(t);
    }
  });
}

/// Rows of an O(rows) pass per task: the blocks are cut by the row count alone.
constexpr index_t kPassRows = 64;

/// An O(rows) pass over rows [0, rows) whose rows move `bytes_per_row` bytes each, on up to
/// `requested` threads (Options::threads): f(first, count) for each block of kPassRows rows,
/// which must compute each row by itself (the same operations in the same order, whichever
/// block holds it).
template <class F>
void for_row_blocks(index_t rows, int requested, double bytes_per_row, const F& f) {
  const index_t blocks = (rows + kPassRows - 1) / kPassRows;
  const int threads = threads_for(requested, work_of(0, 0, bytes_per_row * static_cast<double>(rows)));
  for_tasks(blocks, threads, [&](index_t b) {
    const index_t first = b * kPassRows;
    f(first, std::min(kPassRows, rows - first));
  });
}

}  // namespace internal
}  // namespace EigenAttention
