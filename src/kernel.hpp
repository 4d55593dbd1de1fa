// What every kernel receives, and the kernels the library holds. Internal to the library.
#pragma once

#include <EigenAttention/Kernels.hpp>
#include <EigenAttention/Types.hpp>

#include "problem.hpp"

namespace EigenAttention {
namespace internal {

/// Where a kernel writes. Shapes are checked and the outputs are disjoint from the inputs and
/// each other. `scores` null: the fused call (ATTN only). `attn` null: SCORES only.
/// `lse` null: not wanted.
template <typename T>
struct Outputs {
  StridedMap<T>* scores;  // T_q x T_k
  StridedMap<T>* attn;    // T_q x d_v
  StridedMap<T>* lse;     // T_q x 1
};

/// The yardstick: plain Eigen expressions in the order of the formula (reference_kernel.cpp).
template <typename T>
void reference_kernel(const Problem<T>& p, const Outputs<T>& out);

/// The kernel `requested` resolves to on this CPU (Auto: the fastest available).
/// Throws std::invalid_argument when it is not available here.
Kernel resolve_kernel(const char* api, Kernel requested);

/// Runs `kernel` (already resolved) on p with up to `threads` threads (Options::threads).
template <typename T>
void run_kernel(Kernel kernel, const Problem<T>& p, const Outputs<T>& out, int threads);

}  // namespace internal
}  // namespace EigenAttention
