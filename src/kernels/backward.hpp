// SPDX-License-Identifier: MIT
// How the backward pass of a set of problems is spread over the kernels and threads, so that the
// result is bitwise identical for every thread count. Internal to the library.
//
// Problems that add into the same gradients (the query heads of one GQA group add into one dK
// and dV; the heads or sequences that share a broadcast bias add into one dbias) form a unit,
// run in a fixed order. A problem runs row group after row group (row_groups.hpp: packed
// documents, chunks), each as a problem of its own. Within one, query tiles go in order, and
// each step of a query tile (BackwardKernel in abi.hpp) takes its key tiles in any order or on
// any thread: each key tile writes its own columns of the weights, its own partial sums, its own
// dK and dV rows and its own share of dQ, and the partial sums are added in key order
// afterwards, the shares in key order as they come (a share that comes early waits in its slot
// for the ones before it). So the work is split one of two ways with the same bits:
//   - whole units per thread, when there are enough of them;
//   - otherwise units one after another, the key tiles of each step spread over the threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <vector>

#include "kernels/kernels.hpp"
#include "kernels/program.hpp"
#include "kernels/row_groups.hpp"
#include "kernels/tile_policy.hpp"

namespace EigenAttention {
namespace internal {

/// The calling thread's workspace `which` of at least n elements, grown on demand and kept.
template <typename T>
T* backward_workspace(int which, index_t n) {
  thread_local std::vector<T> buffers[10];
  std::vector<T>& b = buffers[which];
  if (static_cast<index_t>(b.size()) < n) b.resize(static_cast<std::size_t>(n));
  return b.data();
}

template <typename T>
void zero_rows(const RawMatrix<T>& m) {
  for (index_t i = 0; i < m.rows; ++i) {
    T* const row = m.data + i * m.row_stride;
    if (m.col_stride == 1) {  // (element by element, 1.6 % of a block-sparse backward)
      std::fill_n(row, m.cols, T(0));
      continue;
    }
    for (index_t c = 0; c < m.cols; ++c) row[c * m.col_stride] = T(0);
  }
}

/// One problem (or row group, row_groups.hpp), query tile by query tile, the key tiles of each
/// step over `threads` threads. S is the element type of its arrays, T the compute type of its
/// gradients and workspaces.
template <typename S, typename T = ComputeScalar<S>>
void backward_group(const BackwardKernel<S>& kernel, const RawProblem<S>& given, int threads) {
  // With a gradient callback, the query tile's dL/dz (R x T_k) goes to a workspace of the calling
  // thread, handed to the callback key tile after key tile once the step has run.
  RawProblem<S> p = given;
  if (p.logit_grad != nullptr && p.q.rows > 0 && p.k.rows > 0)
    p.grad.d_logits = {backward_workspace<T>(9, kBackwardRows * p.k.rows), kBackwardRows, p.k.rows, p.k.rows,
                       1};
  zero_rows(p.grad.dq);
  const index_t tq = p.q.rows, tk = p.k.rows, dk = p.q.cols, R = kBackwardRows, C = kBackwardCols;
  // A row that sees no key has LSE = sink, the sink's weight 1 and its share of dL/dsink d_lse_i
  // (0 without d_lse); a sink of -inf is no sink (weight 0, share 0, as the reference kernel). Step
  // 2 overwrites the rows of the query tiles it runs.
  const RawMatrix<T>& sink_rows = p.grad.d_sink_rows;
  const bool sink_weighs = p.has_sink && p.sink != -std::numeric_limits<T>::infinity();
  for (index_t i = 0; sink_rows.data != nullptr && i < tq; ++i)
    sink_rows.data[i * sink_rows.row_stride] =
        sink_weighs && p.grad.d_lse.data != nullptr ? p.grad.d_lse.data[i * p.grad.d_lse.row_stride] : T(0);
  if (tq == 0 || tk == 0) return;
  // A query tile's weights: R rows of all T_k keys, held key tile by key tile (R x C each, so that
  // a step reads a compact block rather than rows T_k apart, a page each at long T_k), each row
  // starting on a 64-byte line, rows odd_lines() apart; while they take at most
  // kMaxHeldWeightsBytes (tile_policy.hpp). Beyond it, step 1 writes each key tile's weights into
  // one block of the running thread and step 3 computes them again there before the pair: the
  // same function of the same inputs, so the same bits, for one more product per pair and O(1)
  // memory, not O(T_k).
  constexpr index_t kLine = 64 / static_cast<index_t>(sizeof(T));
  const index_t ldw = odd_lines<T>(C), key_tiles = (tk + C - 1) / C;
  const index_t block = R * ldw;  // one key tile's weights
  const bool hold =
      static_cast<double>(key_tiles * block) * sizeof(T) <= static_cast<double>(kMaxHeldWeightsBytes);
  const auto aligned = [&](T* b) {
    return b + (kLine - reinterpret_cast<std::uintptr_t>(b) / sizeof(T) % kLine) % kLine;
  };
  T* const weights = hold ? aligned(backward_workspace<T>(0, key_tiles * block + kLine)) : nullptr;
  // The derivative of the final logit in the scaled one (the soft-cap's and score_mod's).
  const bool chain = p.softcap > 0 || p.score_mod != nullptr;
  T* const cap = hold && chain ? aligned(backward_workspace<T>(1, key_tiles * block + kLine)) : nullptr;
  // Key tile kt's block of weights (and of the soft-cap's derivative): its own, or the running
  // thread's one block.
  const auto weights_of = [&](index_t kt) {
    return hold ? weights + kt * block : aligned(backward_workspace<T>(6, block + kLine));
  };
  const auto cap_of = [&](index_t kt) -> T* {
    if (!chain) return nullptr;
    return hold ? cap + kt * block : aligned(backward_workspace<T>(7, block + kLine));
  };
  T* const partials = backward_workspace<T>(2, key_tiles * 2 * R);
  T* const terms = backward_workspace<T>(3, 2 * R);
  T* const slots = backward_workspace<T>(4, key_tiles * R * dk);
  unsigned char* const parked = backward_workspace<unsigned char>(0, key_tiles);
  std::mutex order;  // guards `next`, `parked` and the query tile's dQ rows
  const index_t tiles = (tq + R - 1) / R;
  for (index_t tile = 0; tile < tiles; ++tile) {
    const index_t i0 = tile * R, rows = std::min(R, tq - i0);
    const index_t begin = p.first_key(i0), end = p.end_key(i0 + rows - 1);
    if (begin >= end) continue;  // no key: dQ rows stay 0
    const index_t first = begin / C, count = (end + C - 1) / C - first;
    const auto keys = [&](index_t t) { return std::min(C, tk - (first + t) * C); };
    // The keys [a, b) of key tile t (relative to its first) that the steps compute: with a block
    // mask, from the first to the last of its tiles that some row of the query tile sees
    // (for_each_shown_run's runs), the first from a whole column unit of the kernel; none when it
    // hides the tile whole (never computed: no weight). Found once per query tile, here.
    struct Columns {
      index_t a, b;
    };
    Columns* const columns = backward_workspace<Columns>(0, count);
    for (index_t t = 0; t < count; ++t) {
      const index_t n = keys(t);
      columns[t] = {0, n};
      if (p.blocks == nullptr) continue;
      index_t lo = n, hi = 0;
      for_each_shown_run(p, i0, rows, (first + t) * C, Columns{0, n}, 1, [&](Columns run) {
        lo = std::min(lo, run.a);
        hi = std::max(hi, run.b);
      });
      columns[t] = lo < hi ? Columns{lo / kernel.column_unit * kernel.column_unit, hi} : Columns{0, 0};
    }
    const auto offset = [](T* buffer, index_t a) { return buffer == nullptr ? nullptr : buffer + a; };
    for_tasks(count, threads, [&](index_t t) {
      const index_t kt = first + t;
      const Columns c = columns[t];
      if (c.a >= c.b) {
        std::fill_n(partials + t * 2 * R, 2 * R, T(0));
        return;
      }
      kernel.weights(p, tile, kt * C + c.a, c.b - c.a, weights_of(kt) + c.a, offset(cap_of(kt), c.a), ldw,
                     partials + t * 2 * R);
    });
    kernel.terms(p, tile, partials, count, terms);
    // The shares of dQ are added to its rows in key order, each element getting them one after
    // the other (0 + s_0 + s_1 + ...), as they come: a task whose share is next adds it, and then
    // those that came early and were parked in their slots. One thread adds every share as soon
    // as it is made (from its own cache); threads park few.
    const RawMatrix<T>& dq = p.grad.dq;
    const auto add = [&](const T* share) {
      for (index_t r = 0; r < rows; ++r) {
        T* row = dq.data + (i0 + r) * dq.row_stride;
        if (dq.col_stride == 1) {
          Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>(row, dk) +=
              Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(share + r * dk, dk);
        } else {
          for (index_t c = 0; c < dk; ++c) row[c * dq.col_stride] += share[r * dk + c];
        }
      }
    };
    index_t next = 0;
    std::fill_n(parked, count, static_cast<unsigned char>(0));
    for_tasks(count, threads, [&](index_t t) {
      const index_t kt = first + t;
      const Columns c = columns[t];
      const index_t j0 = kt * C + c.a, n = c.b - c.a;
      const bool sees = n > 0 && p.sees(i0, rows, j0, n);
      T* const share = backward_workspace<T>(5, R * dk);  // the running thread's
      if (sees) {
        T* const w = weights_of(kt) + c.a;
        T* const derivative = offset(cap_of(kt), c.a);
        if (!hold) kernel.weights(p, tile, j0, n, w, derivative, ldw, backward_workspace<T>(8, 2 * R));
        kernel.pair(p, tile, j0, n, w, derivative, ldw, terms, share);
      }
      const std::lock_guard<std::mutex> lock(order);
      if (t != next) {  // an earlier key tile's share is still to come: park this one
        if (sees) std::copy(share, share + rows * dk, slots + t * R * dk);
        parked[t] = sees ? 2 : 1;
        return;
      }
      if (sees) add(share);
      for (++next; next < count && parked[next] != 0; ++next)
        if (parked[next] == 2) add(slots + next * R * dk);
    });
    if (p.grad.d_logits.data != nullptr) {
      for (index_t t = 0; t < count; ++t) {
        const Columns c = columns[t];
        const index_t j0 = (first + t) * C + c.a, n = c.b - c.a;
        if (!(n > 0 && p.sees(i0, rows, j0, n))) continue;
        const LogitGradTile<T> g{p.grad.d_logits.data + j0,
                                 p.grad.d_logits.row_stride,
                                 p.batch_index,
                                 p.head_index,
                                 p.query_position(i0),
                                 rows,
                                 p.key_position(j0),
                                 n};
        p.logit_grad->apply(p.logit_grad->callable, g);
      }
    }
  }
}

/// One problem, row group after row group (row_groups.hpp; groups of fewer than half a query tile
/// go with the next).
template <typename S>
void backward_problem(const BackwardKernel<S>& kernel, const RawProblem<S>& p, int threads) {
  thread_local std::vector<RowGroup> groups;
  row_groups(p, kBackwardRows / 2, groups);
  if (groups.size() == 1) {
    backward_group(kernel, p, threads);
    return;
  }
  index_t most = 0;
  for (const RowGroup& g : groups) most = std::max(most, g.rows);
  std::int64_t* const ranges = backward_workspace<std::int64_t>(0, 2 * most);
  for (const RowGroup& g : groups) backward_group(kernel, group_problem(p, g, ranges), threads);
}

/// Runs the backward pass of `units` units of `unit_size` problems each: prepare(u) zeroes the
/// gradients unit u adds into, problem(u, t) is its t-th problem (in the order they add up).
template <typename T, class ProblemAt, class Prepare>
void run_backward(Kernel kernel, index_t units, index_t unit_size, const ProblemAt& problem,
                  const Prepare& prepare, int threads) {
  if (units == 0) return;
  if (kernel == Kernel::Reference) {
    for (index_t u = 0; u < units; ++u) {
      prepare(u);
      for (index_t t = 0; t < unit_size; ++t) reference_backward(problem(u, t));
    }
    return;
  }
  const BackwardKernel<T> tiled = backward_kernel<T>(kernel_set(kernel));
  double work = 0;
  for (index_t u = 0; u < units; ++u)
    for (index_t t = 0; t < unit_size; ++t) work += problem_work(problem(u, t), Pass::Backward);
  const int n = threads_for(threads, work);
  // The call's number: the kernels keep packed keys per thread for it (PackCache, tiled.hpp).
  const std::uint64_t call = next_call();
  const auto numbered = [&](index_t u, index_t t) {
    auto p = problem(u, t);
    p.call = call;
    return p;
  };
  // A gradient callback is called from one thread at a time, in the units' order: whole units
  // per thread would call it from several at once.
  const bool callback = problem(0, 0).logit_grad != nullptr;
  if (n == 1 || (!callback && (units >= 2 * n || units % n == 0))) {
    for_tasks(units, n, [&](index_t u) {
      prepare(u);
      for (index_t t = 0; t < unit_size; ++t) backward_problem(tiled, numbered(u, t), 1);
    });
  } else {
    // Two waits per query tile: more threads than the hardware runs at once would make each wait
    // for a thread that is not running (any count gives the same bits).
    const int split = std::min(n, resolve_threads(0));
    for (index_t u = 0; u < units; ++u) {
      prepare(u);
      for (index_t t = 0; t < unit_size; ++t) backward_problem(tiled, numbered(u, t), split);
    }
  }
}

}  // namespace internal
}  // namespace EigenAttention
