// SPDX-License-Identifier: MIT
// Programmable attention in the kernels (Masks::score_mod, mask_mod, block_mask;
// Programmable.hpp): the one place that calls the caller's tile loops and reads the block mask's
// tile classes. Every kernel (the tiled forward and backward, decode, the reference) applies the
// score modification and finds the keys a row's mask_mod hides through these functions;
// header-only, always inlined (key_range.hpp says why). Internal to the library.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

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

/// visible[r * ld + t] for rows [r0, r1) and keys [a, b) of programmed_visibility's tile:
/// mask_mod's answers (or all 1 without one: a block mask with no Partial tile). (A function, not
/// a lambda: a lambda in this shared code is an inline function of its own that the compiler may
/// leave out of line, in an instruction-set kernel's object and a baseline one alike.)
template <typename T>
EIGEN_ATTENTION_SHARED_INLINE void ask_mask_mod_tile(const RawProblem<T>& p, index_t i0, index_t j_first,
                                                     unsigned char* visible, index_t ld, index_t r0,
                                                     index_t r1, index_t a, index_t b) {
  if (p.mask_mod == nullptr) {
    for (index_t r = r0; r < r1; ++r)
      for (index_t t = a; t < b; ++t) visible[r * ld + t] = 1;
    return;
  }
  const MaskTile tile{
      visible + r0 * ld + a,       ld,   p.batch_index, p.head_index, p.query_position(i0 + r0), r1 - r0,
      p.key_position(j_first + a), b - a};
  p.mask_mod->apply(p.mask_mod->callable, tile);
}

/// visible[r * ld + t] = does the programmable mask let row i0 + r (r < rows) see key j_first + t
/// (t < n)? The block mask's Empty tiles give 0 and its Full ones 1 without asking (or, with
/// `cut_only`, are left as they are: the ShownKeys functions below read only the cut tiles'
/// answers); its Partial ones (every key, without a block mask) are asked of mask_mod, one call
/// of its tile loop per (row block, key block) piece.
template <typename T>
EIGEN_ATTENTION_SHARED_INLINE void programmed_visibility(const RawProblem<T>& p, index_t i0, index_t rows,
                                                         index_t j_first, index_t n, unsigned char* visible,
                                                         index_t ld, bool cut_only = false) {
  if (rows <= 0 || n <= 0) return;
  if (p.blocks == nullptr) {
    ask_mask_mod_tile(p, i0, j_first, visible, ld, 0, rows, 0, n);
    return;
  }
  for (index_t r0 = 0; r0 < rows;) {
    const index_t rb = (i0 + r0) / p.block_rows;
    const index_t r1 = (rb + 1) * p.block_rows - i0 < rows ? (rb + 1) * p.block_rows - i0 : rows;
    const std::uint8_t* row = p.blocks + rb * p.col_blocks;
    for (index_t t = 0; t < n;) {
      const index_t cb = (j_first + t) / p.block_cols;
      const index_t end = (cb + 1) * p.block_cols - j_first < n ? (cb + 1) * p.block_cols - j_first : n;
      if (row[cb] == kBlockPartial) {
        ask_mask_mod_tile(p, i0, j_first, visible, ld, r0, r1, t, end);
      } else if (!cut_only) {
        const unsigned char seen = row[cb] == kBlockFull ? 1 : 0;
        for (index_t r = r0; r < r1; ++r)
          for (index_t u = t; u < end; ++u) visible[r * ld + u] = seen;
      }
      t = end;
    }
    r0 = r1;
  }
}

/// hidden(t) for each key j_first + t (t < n) that the programmable mask hides from row i:
/// programmed_visibility's answers for that row, kMaskChunk keys at a time.
template <typename T, class Hidden>
EIGEN_ATTENTION_SHARED_INLINE void for_each_programmed_hidden(const RawProblem<T>& p, index_t i,
                                                              index_t j_first, index_t n, Hidden&& hidden) {
  unsigned char visible[kMaskChunk];
  for (index_t c0 = 0; c0 < n; c0 += kMaskChunk) {
    const index_t m = n - c0 < kMaskChunk ? n - c0 : kMaskChunk;
    programmed_visibility(p, i, 1, j_first + c0, m, visible, m);
    for (index_t t = 0; t < m; ++t) {
      if (!visible[t]) hidden(c0 + t);
    }
  }
}

/// The first t in [a, b) with v[t] (b when none), and one past the last (a when none): eight
/// flags a word where whole words fit.
EIGEN_ATTENTION_SHARED_INLINE index_t first_seen(const unsigned char* v, index_t a, index_t b) {
  while (a < b && (a % 8 != 0 || b - a < 8) && !v[a]) ++a;
  while (b - a >= 8) {
    std::uint64_t w;
    std::memcpy(&w, v + a, 8);
    if (w != 0) break;
    a += 8;
  }
  while (a < b && !v[a]) ++a;
  return a;
}
EIGEN_ATTENTION_SHARED_INLINE index_t last_seen_end(const unsigned char* v, index_t a, index_t b) {
  while (b > a && (b % 8 != 0 || b - a < 8) && !v[b - 1]) --b;
  while (b - a >= 8) {
    std::uint64_t w;
    std::memcpy(&w, v + b - 8, 8);
    if (w != 0) break;
    b -= 8;
  }
  while (b > a && !v[b - 1]) --b;
  return b;
}

/// row[t] = `hidden` (-inf by default: a logit) where v[t] is 0, t in [a, b), whatever row[t] held
/// (NaN too).
template <typename T>
EIGEN_ATTENTION_SHARED_INLINE void hide_unseen(T* row, const unsigned char* v, index_t a, index_t b,
                                               T hidden = -std::numeric_limits<T>::infinity()) {
  for (index_t t = a; t < b; ++t) row[t] = v[t] != 0 ? row[t] : hidden;
}

/// Which keys j_first + t of one query row the programmable mask shows, from the row's line of
/// block-mask classes and the answers `v` (v[t] for key j_first + t) that programmed_visibility
/// gave for its cut tiles: a Full tile shows every key, an Empty one none, a Partial one (every
/// key, when `line` is null: no block mask, or answers that hold more than the block mask's, as
/// the backward's with a boolean mask do) those v shows. So Full and Empty tiles are neither
/// asked, filled nor read.
struct ShownKeys {
  const std::uint8_t* line;  ///< the row's tile classes (p.blocks' line of its block row), or null
  index_t block_cols, j_first;
  const unsigned char* v;
  /// The class of the tile that holds key t, and the end of that tile's keys (at most b).
  EIGEN_ATTENTION_SHARED_INLINE std::uint8_t piece(index_t t, index_t b, index_t& end) const {
    if (line == nullptr) {
      end = b;
      return kBlockPartial;
    }
    const index_t cb = (j_first + t) / block_cols, e = (cb + 1) * block_cols - j_first;
    end = e < b ? e : b;
    return line[cb];
  }
  /// The first key in [a, b) shown (b when none).
  EIGEN_ATTENTION_SHARED_INLINE index_t first(index_t a, index_t b) const {
    if (line == nullptr) return first_seen(v, a, b);
    index_t cb = (j_first + a) / block_cols, end = (cb + 1) * block_cols - j_first;
    for (; a < b; a = end, end += block_cols, ++cb) {
      const index_t e = end < b ? end : b;
      if (line[cb] == kBlockFull) return a;
      if (line[cb] == kBlockPartial) {
        const index_t t = first_seen(v, a, e);
        if (t < e) return t;
      }
    }
    return b;
  }
  /// One past the last key in [a, b) shown (a when none).
  EIGEN_ATTENTION_SHARED_INLINE index_t last_end(index_t a, index_t b) const {
    if (line == nullptr || b <= a) return last_seen_end(v, a, b);
    index_t cb = (j_first + b - 1) / block_cols, start = cb * block_cols - j_first;
    for (; b > a; b = start, start -= block_cols, --cb) {  // the tiles from the last
      const index_t s = start > a ? start : a;
      if (line[cb] == kBlockFull) return b;
      if (line[cb] == kBlockPartial) {
        const index_t t = last_seen_end(v, s, b);
        if (t > s) return t;
      }
    }
    return a;
  }
  /// row[t] = `hidden` for the keys t in [a, b) not shown, whatever row[t] held (NaN too).
  template <typename S>
  EIGEN_ATTENTION_SHARED_INLINE void hide(S* row, index_t a, index_t b,
                                          S hidden = -std::numeric_limits<S>::infinity()) const {
    if (line == nullptr) return hide_unseen(row, v, a, b, hidden);
    if (b <= a) return;
    index_t cb = (j_first + a) / block_cols, end = (cb + 1) * block_cols - j_first;
    for (; a < b; a = end, end += block_cols, ++cb) {
      const index_t e = end < b ? end : b;
      if (line[cb] == kBlockEmpty) {
        for (index_t t = a; t < e; ++t) row[t] = hidden;
      } else if (line[cb] == kBlockPartial) {
        hide_unseen(row, v, a, e, hidden);
      }
    }
  }
};

/// ShownKeys of query row i for keys from j_first, whose cut tiles' answers are in v.
template <typename T>
EIGEN_ATTENTION_SHARED_INLINE ShownKeys shown_keys(const RawProblem<T>& p, index_t i, index_t j_first,
                                                   const unsigned char* v) {
  if (p.blocks == nullptr) return {nullptr, 1, j_first, v};
  return {p.blocks + (i / p.block_rows) * p.col_blocks, p.block_cols, j_first, v};
}

/// Is some tile of the block mask that rows [i0, i0 + rows) and keys [j0, j0 + cols) touch of a
/// class other than `kind`? (A block mask given, rows and cols > 0.)
template <typename T>
EIGEN_ATTENTION_SHARED_INLINE bool some_tile_not(const RawProblem<T>& p, index_t i0, index_t rows, index_t j0,
                                                 index_t cols, std::uint8_t kind) {
  for (index_t rb = i0 / p.block_rows; rb <= (i0 + rows - 1) / p.block_rows; ++rb) {
    const std::uint8_t* row = p.blocks + rb * p.col_blocks;
    for (index_t cb = j0 / p.block_cols; cb <= (j0 + cols - 1) / p.block_cols; ++cb) {
      if (row[cb] != kind) return true;
    }
  }
  return false;
}

/// Does the block mask leave some key of [j0, j0 + cols) to some row of [i0, i0 + rows)? (Always,
/// without one.)
template <typename T>
EIGEN_ATTENTION_SHARED_INLINE bool blocks_show(const RawProblem<T>& p, index_t i0, index_t rows, index_t j0,
                                               index_t cols) {
  return p.blocks == nullptr || rows <= 0 || cols <= 0 || some_tile_not(p, i0, rows, j0, cols, kBlockEmpty);
}

/// Does the block mask call every tile that rows [i0, i0 + rows) and keys [j0, j0 + cols) touch
/// Full (so that the programmable mask hides none of those keys from those rows)? False without
/// one.
template <typename T>
EIGEN_ATTENTION_SHARED_INLINE bool blocks_all_full(const RawProblem<T>& p, index_t i0, index_t rows,
                                                   index_t j0, index_t cols) {
  return p.blocks != nullptr && rows > 0 && cols > 0 && !some_tile_not(p, i0, rows, j0, cols, kBlockFull);
}

/// pass(run) for each run of the keys [keys.a, keys.b) of the key tile at j0 (relative to j0) in
/// tiles of the block mask that some row of [i0, i0 + rows) sees, in key order, each from the panel
/// that holds its first key (keys.a a whole panel; two runs that this would overlap are one).
template <typename T, class Span, class Pass>
EIGEN_ATTENTION_SHARED_INLINE void for_each_shown_run(const RawProblem<T>& p, index_t i0, index_t rows,
                                                      index_t j0, Span keys, index_t panel, Pass&& pass) {
  const index_t rb0 = i0 / p.block_rows, rb1 = (i0 + rows - 1) / p.block_rows;
  Span run{0, 0};
  bool open = false;
  for (index_t cb = (j0 + keys.a) / p.block_cols; cb * p.block_cols < j0 + keys.b; ++cb) {
    bool shown = false;
    for (index_t rb = rb0; rb <= rb1 && !shown; ++rb) shown = p.blocks[rb * p.col_blocks + cb] != kBlockEmpty;
    if (!shown) continue;
    const index_t lo = cb * p.block_cols - j0, hi = (cb + 1) * p.block_cols - j0;
    const index_t a = (lo > keys.a ? lo : keys.a) / panel * panel, b = hi < keys.b ? hi : keys.b;
    if (open && a <= run.b) {
      run.b = b;
    } else {
      if (open) pass(run);
      run = Span{a, b};
      open = true;
    }
  }
  if (open) pass(run);
}

}  // namespace internal
}  // namespace EigenAttention
