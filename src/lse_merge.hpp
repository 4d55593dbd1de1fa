// SPDX-License-Identifier: MIT
// The exact merge of partial attention results over disjoint key sets by their log-sum-exp:
// what merge_attention_into (merge.cpp) does for two parts and decode's split-K (decode.cpp) for a
// row's chunks. Internal to the library.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include "index.hpp"

namespace EigenAttention {
namespace internal {

/// Merges `parts` partial results of one row: lse(p) is part p's log-sum-exp, value(p, c) its
/// element c (of dim). Writes out[c * stride] and returns the merged log-sum-exp:
///   - parts that saw no key (lse = -inf) take no part, whatever their values hold;
///   - none left: zeros and -inf; one left: that part exactly;
///   - otherwise, with w_p = exp(lse_p - max lse) (`weights`, room for `parts`):
///     out = sum_p w_p value_p / sum_p w_p in part order, lse = max + log(sum_p w_p); a NaN lse
///     makes the row NaN.
/// The parts are added one after the other into `sums` (room for dim), each read along its
/// elements, and out is written last: out may be a part (merging in place).
template <typename T, class Lse, class Value>
T merge_lse_row(index_t parts, const Lse& lse, const Value& value, index_t dim, T* out, index_t stride,
                T* weights, T* sums) {
  const T minus_inf = -std::numeric_limits<T>::infinity();
  index_t live = 0, only = 0;
  T max = minus_inf;
  bool nan = false;
  for (index_t p = 0; p < parts; ++p) {
    const T l = lse(p);
    if (l == minus_inf) continue;
    ++live;
    only = p;
    if (std::isnan(l)) nan = true;
    if (l > max) max = l;
  }
  if (live == 0) {
    for (index_t c = 0; c < dim; ++c) out[c * stride] = T(0);
    return minus_inf;
  }
  if (live == 1) {
    for (index_t c = 0; c < dim; ++c) out[c * stride] = value(only, c);
    return lse(only);
  }
  if (nan) {
    const T q = std::numeric_limits<T>::quiet_NaN();
    for (index_t c = 0; c < dim; ++c) out[c * stride] = q;
    return q;
  }
  T sum = 0;
  bool first = true;
  for (index_t p = 0; p < parts; ++p) {
    const T l = lse(p);
    weights[p] = l == minus_inf ? T(0) : std::exp(l - max);
    if (l == minus_inf) continue;
    sum = first ? weights[p] : sum + weights[p];
    first = false;
  }
  // The parts one after the other, each read along its elements, into `sums`.
  bool first_part = true;
  for (index_t p = 0; p < parts; ++p) {
    if (lse(p) == minus_inf) continue;
    const T w = weights[p];
    if (first_part) {
      for (index_t c = 0; c < dim; ++c) sums[c] = w * value(p, c);
    } else {
      for (index_t c = 0; c < dim; ++c) sums[c] = sums[c] + w * value(p, c);
    }
    first_part = false;
  }
  for (index_t c = 0; c < dim; ++c) out[c * stride] = sums[c] / sum;
  return max + std::log(sum);
}

}  // namespace internal
}  // namespace EigenAttention
