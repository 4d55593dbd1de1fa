// SPDX-License-Identifier: MIT
// Which keys each query row sees: the causal frontier and the sliding window about the diagonal
// of row i, key i + offset. The one definition, read by the kernels (RawProblem::first_key and
// end_key in abi.hpp) and by the MPI component (the visible pairs of a block); header-only.
// Internal to the library.
#pragma once

#include <algorithm>
#include <cstddef>

namespace EigenAttention {
namespace internal {

/// Query row i of a problem with `keys` keys sees the keys [first_key(i), end_key(i)) (both
/// non-decreasing in i), before any boolean mask.
struct KeyRange {
  std::ptrdiff_t keys;                       // T_k
  std::ptrdiff_t offset;                     // the diagonal of row i is key i + offset
  bool causal;                               // no key past the diagonal
  std::ptrdiff_t window_left, window_right;  // -1: unbounded

  /// The first key query i may see. (Written so that no window size, up to PTRDIFF_MAX, can
  /// overflow: |i + offset| is at most 2^60 + T_q, as validation bounds diagonal_offset.)
  std::ptrdiff_t first_key(std::ptrdiff_t i) const {
    const std::ptrdiff_t c = i + offset;
    if (window_left < 0 || window_left >= c) return 0;
    return std::min<std::ptrdiff_t>(c - window_left, keys);
  }
  /// One past the last key query i may see (never below first_key(i)).
  std::ptrdiff_t end_key(std::ptrdiff_t i) const {
    const std::ptrdiff_t c = i + offset;
    std::ptrdiff_t end = keys;
    if (causal) end = std::min(end, c + 1);
    if (window_right >= 0 && window_right < keys - c) end = std::min(end, c + window_right + 1);
    return std::clamp<std::ptrdiff_t>(end, first_key(i), keys);
  }
};

}  // namespace internal
}  // namespace EigenAttention
