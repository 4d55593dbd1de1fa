// Running a validated problem: every (sequence, query head) on the kernel it resolved to, split
// over threads (run_problems in kernel.hpp). The one way every public call computes. Internal.
#pragma once

#include "kernels/kernels.hpp"
#include "problem.hpp"

namespace EigenAttention {
namespace internal {

template <typename T>
void execute(const Problem<T>& p, int threads) {
  // A packed batch's sequences have their own query counts; otherwise every head has T_q rows.
  const index_t rows = p.varlen() ? -1 : p.q.tokens;
  run_problems<T>(
      p.kernel, p.problems(), rows, [&](index_t which) { return p.problem(which); }, threads);
}

}  // namespace internal
}  // namespace EigenAttention
