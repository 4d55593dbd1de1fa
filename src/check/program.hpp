// SPDX-License-Identifier: MIT
// The programmable parts of a call's masks (Masks::score_mod, mask_mod, block_mask;
// Programmable.hpp, BlockMask.hpp). Internal to the library (src/check/).
#pragma once

#include <algorithm>

#include "check/call.hpp"
#include "check/options.hpp"

namespace EigenAttention {
namespace internal {

/// Checks the block mask against the call: its batch (1 or B) and heads (1 or H, the query heads),
/// its T_q x T_k (each packed or decoded sequence's within them), the positions it was evaluated
/// at (its offset and origin against each sequence's), and that a Partial tile has a mask_mod to
/// decide it. \throws std::invalid_argument naming `c.api`.
template <typename T>
void check_program(const Call<T>& c, const ResolvedOptions<ComputeScalar<T>>& o);

/// Has the block mask a Partial tile (one that needs a mask_mod to decide it)? The single-process
/// check above and the distributed calls' (distributed/collective.cpp) both ask.
inline bool has_partial_tiles(const BlockMaskView& bm) {
  const BlockKind* const end = bm.blocks + bm.batch * bm.heads * bm.row_blocks() * bm.col_blocks();
  return std::find(bm.blocks, end, BlockKind::Partial) != end;
}

}  // namespace internal
}  // namespace EigenAttention
