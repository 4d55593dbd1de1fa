// How the backward pass of a set of problems is spread over the kernels and threads, so that the
// result is bitwise identical for every thread count. Internal to the library.
//
// Problems that add into the same gradients (the query heads of one GQA group add into one dK
// and dV; the heads or sequences that share a broadcast bias add into one dbias) form a unit,
// run in a fixed order. Within a problem, the gradients are sums in a fixed order too: dK and
// dV of each key tile over the query tiles in order, dQ of each query tile over the key tiles in
// order (BackwardKernel in abi.hpp). The work is then split one of two ways, with the same bits:
//   - whole units per thread, when there are enough of them: a thread runs each problem key
//     tile by key tile, adding each share of dQ into it as it comes;
//   - otherwise units one after another, each problem query tile by query tile, with its key
//     tiles spread over the threads: each thread owns its keys' dK and dV rows, and writes its
//     share of the query tile's dQ to a slot; the slots are then added in key order.
#pragma once

#include <algorithm>
#include <vector>

#include "kernels/kernels.hpp"

namespace EigenAttention {
namespace internal {

/// A calling thread's workspace of at least n elements, grown on demand and kept.
template <typename T>
T* backward_workspace(int which, index_t n) {
  thread_local std::vector<T> buffers[2];
  std::vector<T>& b = buffers[which];
  if (static_cast<index_t>(b.size()) < n) b.resize(static_cast<std::size_t>(n));
  return b.data();
}

template <typename T>
void zero_rows(const RawMatrix<T>& m) {
  for (index_t i = 0; i < m.rows; ++i)
    for (index_t c = 0; c < m.cols; ++c) m.data[i * m.row_stride + c * m.col_stride] = T(0);
}

/// One problem on the calling thread, key tile by key tile.
template <typename T>
void backward_alone(const BackwardKernel<T>& kernel, const RawProblem<T>& p) {
  zero_rows(p.grad.dq);
  const index_t tq = p.q.rows, tk = p.k.rows;
  if (tq == 0 || tk == 0) return;
  T* const terms = backward_workspace<T>(0, tq);
  kernel.rows(p, 0, tq, terms);
  const index_t tiles = (tq + kBackwardRows - 1) / kBackwardRows;
  for (index_t j0 = 0; j0 < tk; j0 += kBackwardCols)
    kernel.keys(p, terms, j0, std::min(kBackwardCols, tk - j0), 0, tiles, nullptr);
}

/// One problem over `threads` threads, query tile by query tile, its key tiles spread over them.
template <typename T>
void backward_split(const BackwardKernel<T>& kernel, const RawProblem<T>& p, int threads) {
  zero_rows(p.grad.dq);
  const index_t tq = p.q.rows, tk = p.k.rows, dk = p.q.cols, R = kBackwardRows, C = kBackwardCols;
  if (tq == 0 || tk == 0) return;
  T* const terms = backward_workspace<T>(0, tq);
  const index_t tiles = (tq + R - 1) / R, key_tiles = (tk + C - 1) / C;
  ThreadPool::instance().run(
      tiles, threads, [&](index_t tile) { kernel.rows(p, tile * R, std::min(R, tq - tile * R), terms); });
  T* const slots = backward_workspace<T>(1, key_tiles * R * dk);
  for (index_t tile = 0; tile < tiles; ++tile) {
    const index_t i0 = tile * R, rows = std::min(R, tq - i0);
    const index_t begin = p.first_key(i0), end = p.end_key(i0 + rows - 1);
    if (begin >= end) continue;
    const index_t first = begin / C, last = (end + C - 1) / C;
    ThreadPool::instance().run(last - first, threads, [&](index_t t) {
      const index_t j0 = (first + t) * C;
      kernel.keys(p, terms, j0, std::min(C, tk - j0), tile, tile + 1, slots + t * R * dk);
    });
    for (index_t t = 0; t < last - first; ++t) {
      const index_t j0 = (first + t) * C;
      if (!p.sees(i0, rows, j0, std::min(C, tk - j0))) continue;
      const T* slot = slots + t * R * dk;
      for (index_t r = 0; r < rows; ++r) {
        T* row = p.grad.dq.data + (i0 + r) * p.grad.dq.row_stride;
        for (index_t c = 0; c < dk; ++c) row[c * p.grad.dq.col_stride] += slot[r * dk + c];
      }
    }
  }
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
  const BackwardKernel<T> tiled = tiled_backward_kernel<T>(kernel);
  double work = 0;  // multiply-adds: five products of T_q T_k d
  for (index_t u = 0; u < units; ++u) {
    for (index_t t = 0; t < unit_size; ++t) {
      const RawProblem<T> p = problem(u, t);
      work += 2.5 * static_cast<double>(p.q.rows) * p.k.rows * (p.q.cols + p.v.cols);
    }
  }
  const int n = useful_threads(threads, work);
  const auto run_unit = [&](index_t u) {
    prepare(u);
    for (index_t t = 0; t < unit_size; ++t) backward_alone(tiled, problem(u, t));
  };
  if (n == 1) {
    for (index_t u = 0; u < units; ++u) run_unit(u);
  } else if (units >= 2 * n || units % n == 0) {
    ThreadPool::instance().run(units, n, run_unit);
  } else {
    for (index_t u = 0; u < units; ++u) {
      prepare(u);
      for (index_t t = 0; t < unit_size; ++t) backward_split(tiled, problem(u, t), n);
    }
  }
}

}  // namespace internal
}  // namespace EigenAttention
