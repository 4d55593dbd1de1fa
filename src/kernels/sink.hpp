// SPDX-License-Identifier: MIT
// The attention sink (Masks::sinks): one more logit in each row's softmax that carries no value.
// The one definition, used by every forward path after its row's log-sum-exp over the keys is
// known (the tiled and reference kernels, decode's merge of split-K chunks, the ring's merge of
// key blocks), and by the backward's row terms; header-only. Internal to the library.
#pragma once

#include <cmath>
#include <limits>

#include "kernels/key_range.hpp"  // EIGEN_ATTENTION_SHARED_INLINE

namespace EigenAttention {
namespace internal {

/// What adding a sink logit to a row does: the row's weights and ATTN are multiplied by
/// `factor`, and its log-sum-exp becomes `lse`.
template <typename T>
struct SinkStep {
  T factor, lse;
};

/// The sink step of a row whose log-sum-exp over its visible keys is `lse` (-inf: it sees none):
/// lse' = log(exp(lse) + exp(sink)) and factor = exp(lse - lse'), i.e. a merge (lse_merge.hpp)
/// with a part that has no value. A row that sees no key gets factor 0 and lse' = sink; a NaN on
/// either side makes both NaN.
template <typename T>
EIGEN_ATTENTION_SHARED_INLINE SinkStep<T> sink_step(T lse, T sink) {
  const T minus_inf = -std::numeric_limits<T>::infinity();
  if (lse == minus_inf) return {T(0), sink};
  if (std::isnan(lse) || std::isnan(sink)) {
    const T nan = std::numeric_limits<T>::quiet_NaN();
    return {nan, nan};
  }
  const T max = lse > sink ? lse : sink;
  const T a = std::exp(lse - max), b = std::exp(sink - max);
  const T sum = a + b;
  return {a / sum, max + std::log(sum)};
}

}  // namespace internal
}  // namespace EigenAttention
