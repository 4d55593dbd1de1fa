// SPDX-License-Identifier: MIT
// The programmable parts of a distributed call (Masks::score_mod, mask_mod, block_mask and
// BackwardTerms::logit_grad, Programmable.hpp) in the single-process calls it makes on blocks of
// the whole problem. A block call sees batch entries and query heads of its own, numbered from 0,
// and (through Options::diagonal_offset and chunk_origin) the whole sequence's positions; the
// user's callables must see the whole call's b and h too. BlockProgram hands the block call tile
// loops of its own that shift a tile's batch and head by the block's first ones and call the
// user's; the whole sequence's block mask, whose tiles a block's rows and keys need not fit,
// becomes part of the block's mask: each position takes its tile's class (Empty: hidden, Full:
// seen, Partial: mask_mod's answer). Internal to EigenAttention::MPI.
#pragma once

#include <EigenAttention/BackwardTerms.hpp>
#include <EigenAttention/Masks.hpp>

#include "index.hpp"

namespace EigenAttention {
namespace distributed {
namespace internal {

using EigenAttention::internal::index_t;

/// The programmable masks of one block call, for the batch entries from batch0 and the query heads
/// from head0 of the whole call. It must outlive the block call (the masks refer to it).
template <typename T>
class BlockProgram {
 public:
  using C = ComputeScalar<T>;
  BlockProgram(const Masks<T>& whole, const LogitGradRef<C>& logit_grad, index_t batch0, index_t head0)
      : whole_(whole), logit_grad_(logit_grad), batch0_(batch0), head0_(head0) {}
  BlockProgram(const BlockProgram&) = delete;
  BlockProgram& operator=(const BlockProgram&) = delete;

  /// The block call's masks: `masks` with the shifted score_mod and mask_mod (the block mask in
  /// the latter), when the whole call has them.
  Masks<T> masks(Masks<T> masks) const {
    if (!whole_.score_mod.empty()) {
      masks.score_mod.callable = this;
      masks.score_mod.apply = &BlockProgram::score;
      masks.score_mod.apply_with_derivative = &BlockProgram::score_with_derivative;
    }
    if (!whole_.mask_mod.empty() || !whole_.block_mask.empty()) {
      masks.mask_mod.callable = this;
      masks.mask_mod.apply = &BlockProgram::mask;
    }
    masks.block_mask = {};
    return masks;
  }
  /// The block call's backward terms: `terms` with the shifted gradient callback, when given.
  BackwardTerms<T> terms(BackwardTerms<T> terms) const {
    if (!logit_grad_.empty()) {
      terms.logit_grad.callable = this;
      terms.logit_grad.apply = &BlockProgram::grad;
    }
    return terms;
  }

 private:
  template <class Tile>
  Tile shifted(const Tile& t) const {
    Tile u = t;
    u.batch += batch0_, u.head += head0_;
    return u;
  }
  static void score(const void* self, const ScoreTile<C>& t) {
    const auto& p = *static_cast<const BlockProgram*>(self);
    p.whole_.score_mod.apply(p.whole_.score_mod.callable, p.shifted(t));
  }
  static void score_with_derivative(const void* self, const ScoreTile<C>& t) {
    const auto& p = *static_cast<const BlockProgram*>(self);
    p.whole_.score_mod.apply_with_derivative(p.whole_.score_mod.callable, p.shifted(t));
  }
  static void grad(const void* self, const LogitGradTile<C>& t) {
    const auto& p = *static_cast<const BlockProgram*>(self);
    p.logit_grad_.apply(p.logit_grad_.callable, p.shifted(t));
  }
  /// mask_mod's answers, then each position's tile class of the block mask over them: the tile of
  /// whole-call row q - offset - origin and key k - origin.
  static void mask(const void* self, const MaskTile& t) {
    const auto& p = *static_cast<const BlockProgram*>(self);
    const MaskTile u = p.shifted(t);
    if (!p.whole_.mask_mod.empty()) p.whole_.mask_mod.apply(p.whole_.mask_mod.callable, u);
    const BlockMaskView& bm = p.whole_.block_mask;
    if (bm.empty()) return;
    const BlockKind* const tiles = bm.blocks + bm.line(u.batch, u.head) * bm.row_blocks() * bm.col_blocks();
    for (index_t r = 0; r < u.rows; ++r) {
      const index_t i = u.query + r - bm.offset - bm.origin;
      const BlockKind* const row = tiles + i / bm.block_rows * bm.col_blocks();
      unsigned char* const v = u.visible + r * u.ld;
      for (index_t c = 0; c < u.cols; ++c) {
        const BlockKind kind = row[(u.key + c - bm.origin) / bm.block_cols];
        if (kind != BlockKind::Partial) v[c] = kind == BlockKind::Full ? 1 : 0;
      }
    }
  }

  const Masks<T>& whole_;
  const LogitGradRef<C>& logit_grad_;
  index_t batch0_, head0_;
};

}  // namespace internal
}  // namespace distributed
}  // namespace EigenAttention
