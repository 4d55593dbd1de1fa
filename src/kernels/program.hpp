// SPDX-License-Identifier: MIT
// Programmable attention in the kernels (Masks::score_mod, mask_mod, block_mask;
// Programmable.hpp): the one place that calls the caller's tile loops and reads the block mask's
// tile classes. Every kernel (the tiled forward and backward, decode, the reference) applies the
// score modification and finds the keys a row's mask_mod hides through these functions;
// header-only, always inlined (key_range.hpp says why). Internal to the library.
#pragma once

#include <limits>

#include "kernels/abi.hpp"

namespace EigenAttention {
namespace internal {

/// Keys the programmable mask asks about in one call of its tile loop, at most.
constexpr index_t kMaskChunk = 256;

/// Row i's logits s[0, n) of keys j_first, j_first + 1, ... become f(s, b, h, q, k); with
/// `derivative` (the backward), df/ds goes there too.
template <typename T>
EIGEN_ATTENTION_SHARED_INLINE void apply_score_mod(const RawProblem<T>& p, index_t i, index_t j_first,
                                                   ComputeScalar<T>* s, index_t n,
                                                   ComputeScalar<T>* derivative = nullptr) {
  if (n <= 0) return;
  const ScoreTile<ComputeScalar<T>> tile{
      s, derivative, n, p.batch_index, p.head_index, p.query_position(i), 1, p.key_position(j_first), n};
  if (derivative == nullptr) {
    p.score_mod->apply(p.score_mod->callable, tile);
  } else {
    p.score_mod->apply_with_derivative(p.score_mod->callable, tile);
  }
}

/// hidden(t) for each key j_first + t (t < n) that the programmable mask hides from row i: the
/// block mask's Empty tiles whole, its Partial ones (or every key, without a block mask) as
/// mask_mod says, in chunks of kMaskChunk keys; its Full tiles never ask.
template <typename T, class Hidden>
EIGEN_ATTENTION_SHARED_INLINE void for_each_programmed_hidden(const RawProblem<T>& p, index_t i,
                                                              index_t j_first, index_t n, Hidden&& hidden) {
  const auto ask = [&](index_t a, index_t b) {  // mask_mod over keys [a, b) of the segment
    bool visible[kMaskChunk];
    for (index_t c0 = a; c0 < b; c0 += kMaskChunk) {
      const index_t m = b - c0 < kMaskChunk ? b - c0 : kMaskChunk;
      const MaskTile tile{
          visible, m, p.batch_index, p.head_index, p.query_position(i), 1, p.key_position(j_first + c0), m};
      p.mask_mod->apply(p.mask_mod->callable, tile);
      for (index_t t = 0; t < m; ++t) {
        if (!visible[t]) hidden(c0 + t);
      }
    }
  };
  if (p.blocks == nullptr) {
    if (p.mask_mod != nullptr) ask(0, n);
    return;
  }
  const std::uint8_t* row = p.blocks + (i / p.block_rows) * p.col_blocks;
  for (index_t t = 0; t < n;) {
    const index_t j = j_first + t, cb = j / p.block_cols;
    const index_t end = (cb + 1) * p.block_cols - j_first < n ? (cb + 1) * p.block_cols - j_first : n;
    if (row[cb] == kBlockEmpty) {
      for (index_t u = t; u < end; ++u) hidden(u);
    } else if (row[cb] == kBlockPartial) {
      ask(t, end);
    }
    t = end;
  }
}

/// Does the block mask leave some key of [j0, j0 + cols) to some row of [i0, i0 + rows)? (Always,
/// without one.)
template <typename T>
EIGEN_ATTENTION_SHARED_INLINE bool blocks_show(const RawProblem<T>& p, index_t i0, index_t rows, index_t j0,
                                               index_t cols) {
  if (p.blocks == nullptr || rows <= 0 || cols <= 0) return true;
  for (index_t rb = i0 / p.block_rows; rb <= (i0 + rows - 1) / p.block_rows; ++rb) {
    const std::uint8_t* row = p.blocks + rb * p.col_blocks;
    for (index_t cb = j0 / p.block_cols; cb <= (j0 + cols - 1) / p.block_cols; ++cb) {
      if (row[cb] != kBlockEmpty) return true;
    }
  }
  return false;
}

/// The keys [a, b) of [j0, j0 + cols) outside which the block mask hides every key from every row of
/// [i0, i0 + rows) (a == b: it hides them all); [0, cols) without one.
template <typename T>
EIGEN_ATTENTION_SHARED_INLINE void blocks_extent(const RawProblem<T>& p, index_t i0, index_t rows, index_t j0,
                                                 index_t cols, index_t& a, index_t& b) {
  a = 0, b = cols;
  if (p.blocks == nullptr || rows <= 0 || cols <= 0) return;
  index_t first = cols, last = 0;
  const index_t cb0 = j0 / p.block_cols, cb1 = (j0 + cols - 1) / p.block_cols;
  for (index_t rb = i0 / p.block_rows; rb <= (i0 + rows - 1) / p.block_rows; ++rb) {
    const std::uint8_t* row = p.blocks + rb * p.col_blocks;
    for (index_t cb = cb0; cb <= cb1; ++cb) {
      if (row[cb] == kBlockEmpty) continue;
      const index_t lo = cb * p.block_cols - j0, hi = (cb + 1) * p.block_cols - j0;
      if (lo < first) first = lo;
      if (hi > last) last = hi;
    }
  }
  if (first < 0) first = 0;
  if (last > cols) last = cols;
  if (first >= last) first = last = 0;
  a = first, b = last;
}

}  // namespace internal
}  // namespace EigenAttention
