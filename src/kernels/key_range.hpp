// SPDX-License-Identifier: MIT
// Which keys each query row sees: the causal frontier, the sliding window about the diagonal
// of row i, key i + offset, and the chunk that holds it (chunked-local attention). The one definition, read
// by the kernels (RawProblem::first_key and end_key in abi.hpp) and by the MPI component (the visible pairs
// of a block); header-only. Internal to the library.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

// The inline code that the instruction-set kernels share with the rest of the library (this
// file, RawProblem in abi.hpp) is always inlined: an out-of-line (weak) copy compiled in a
// kernel's translation unit, with AVX2 or AVX-512, could be the one copy the linker keeps for
// every caller, and crash a CPU without those units (test/isa_symbols.cmake checks the objects;
// GCC at -O3 inlined these anyway, Clang at -O1 under the sanitizers did not). For the same
// reason the kernels' own code is in anonymous namespaces, and Eigen is renamed per kernel.
#if defined(__GNUC__) || defined(__clang__)
#define EIGEN_ATTENTION_SHARED_INLINE inline __attribute__((always_inline))
#elif defined(_MSC_VER)
#define EIGEN_ATTENTION_SHARED_INLINE __forceinline
#else
#define EIGEN_ATTENTION_SHARED_INLINE inline
#endif

namespace EigenAttention {
namespace internal {

/// std::clamp(x, lo, hi) for indices (lo <= hi), always inlined.
EIGEN_ATTENTION_SHARED_INLINE std::ptrdiff_t clamp_index(std::ptrdiff_t x, std::ptrdiff_t lo,
                                                         std::ptrdiff_t hi) {
  return x < lo ? lo : (hi < x ? hi : x);
}

/// Query row i of a problem with `keys` keys sees the keys [first_key(i), end_key(i)) (both
/// non-decreasing in i), before any boolean mask.
struct KeyRange {
  std::ptrdiff_t keys;                       // T_k
  std::ptrdiff_t offset;                     // the diagonal of row i is key i + offset
  bool causal;                               // no key past the diagonal
  std::ptrdiff_t window_left, window_right;  // -1: unbounded
  std::ptrdiff_t chunk = 0;                  // chunked-local attention: keys per chunk (0: off)
  std::ptrdiff_t chunk_origin = 0;           // the chunk grid's position of key 0
  // Row i's own key range [rows[2 i], rows[2 i + 1]) (a block mask's, BlockMask::exact_line; both
  // ends non-decreasing in i), within the others; null: none.
  const std::int64_t* rows = nullptr;

  /// The first key of the chunk that holds key position c (chunk > 0; may lie outside
  /// [0, keys)). Validation bounds |c|, chunk and |chunk_origin| by 2^60 + T_q, so nothing
  /// overflows.
  EIGEN_ATTENTION_SHARED_INLINE std::ptrdiff_t chunk_start(std::ptrdiff_t c) const {
    const std::ptrdiff_t x = c + chunk_origin;
    const std::ptrdiff_t n = x >= 0 ? x / chunk : -((-x - 1) / chunk) - 1;  // floor(x / chunk)
    return n * chunk - chunk_origin;
  }

  /// The first key query i may see. (Written so that no window size, up to PTRDIFF_MAX, can
  /// overflow: |i + offset| is at most 2^60 + T_q, as validation bounds diagonal_offset.)
  EIGEN_ATTENTION_SHARED_INLINE std::ptrdiff_t first_key(std::ptrdiff_t i) const {
    const std::ptrdiff_t c = i + offset;
    std::ptrdiff_t first = 0;
    if (window_left >= 0 && window_left < c) first = c - window_left < keys ? c - window_left : keys;
    if (chunk > 0) {
      const std::ptrdiff_t s = chunk_start(c);
      if (s > first) first = s < keys ? s : keys;
    }
    if (rows != nullptr && rows[2 * i] > first) first = rows[2 * i] < keys ? rows[2 * i] : keys;
    return first;
  }
  /// One past the last key query i may see (never below first_key(i)).
  EIGEN_ATTENTION_SHARED_INLINE std::ptrdiff_t end_key(std::ptrdiff_t i) const {
    const std::ptrdiff_t c = i + offset;
    std::ptrdiff_t end = keys;
    if (causal && c + 1 < end) end = c + 1;
    if (window_right >= 0 && window_right < keys - c && c + window_right + 1 < end)
      end = c + window_right + 1;
    if (chunk > 0) {
      const std::ptrdiff_t s = chunk_start(c);  // s + chunk > c + chunk_origin - chunk_origin
      if (s < end && chunk < end - s) end = s + chunk;
    }
    if (rows != nullptr && rows[2 * i + 1] < end) end = rows[2 * i + 1];
    return clamp_index(end, first_key(i), keys);
  }
};

}  // namespace internal
}  // namespace EigenAttention
