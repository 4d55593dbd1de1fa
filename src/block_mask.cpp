// SPDX-License-Identifier: MIT
// block_mask() (BlockMask.hpp): the classes of a mask_mod's tiles, evaluated in parallel.
#include <EigenAttention/BlockMask.hpp>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>

#include "index.hpp"
#include "scheduler.hpp"

namespace EigenAttention {
namespace abi {

void classify_blocks(const MaskModRef& mask, const BlockMaskView& target, BlockKind* out, int threads) {
  using internal::index_t;
  if (mask.empty()) throw std::invalid_argument("EigenAttention::block_mask: the mask_mod is empty");
  if (threads < 0)
    throw std::invalid_argument("EigenAttention::block_mask: Options::threads is " + std::to_string(threads) +
                                " (must be >= 0)");
  const index_t rb_count = target.row_blocks(), cb_count = target.col_blocks();
  const index_t tiles = target.batch * target.heads * rb_count * cb_count;
  if (tiles == 0) return;
  const index_t R = target.block_rows, C = target.block_cols;
  // A tile's pairs are asked a band of rows at a time, at most kBand pairs.
  constexpr index_t kBand = index_t(1) << 16;
  const index_t band_rows = std::max<index_t>(1, std::min(R, kBand / C));
  const double work = static_cast<double>(target.batch * target.heads) * static_cast<double>(target.rows) *
                      static_cast<double>(target.cols);
  const int n = internal::threads_for(threads, work * 8);
  internal::for_tasks(tiles, n, [&](index_t t) {
    thread_local std::unique_ptr<unsigned char[]> band;
    thread_local index_t band_size = 0;
    const index_t need = band_rows * std::min(C, std::max<index_t>(target.cols, 1));
    if (band_size < need) band.reset(new unsigned char[static_cast<std::size_t>(need)]), band_size = need;
    const index_t cb = t % cb_count, rb = t / cb_count % rb_count, bh = t / (cb_count * rb_count);
    const index_t i0 = rb * R, i1 = std::min(target.rows, i0 + R);
    const index_t j0 = cb * C, j1 = std::min(target.cols, j0 + C);
    bool any_visible = false, any_hidden = false;
    for (index_t r0 = i0; r0 < i1 && !(any_visible && any_hidden); r0 += band_rows) {
      const index_t rows = std::min(band_rows, i1 - r0), cols = j1 - j0;
      const MaskTile tile{band.get(),
                          cols,
                          bh / target.heads,
                          bh % target.heads,
                          r0 + target.offset + target.origin,
                          rows,
                          j0 + target.origin,
                          cols};
      mask.apply(mask.callable, tile);
      for (index_t e = 0; e < rows * cols; ++e) (band[e] != 0 ? any_visible : any_hidden) = true;
    }
    out[t] = !any_visible ? BlockKind::Empty : any_hidden ? BlockKind::Partial : BlockKind::Full;
  });
}

}  // namespace abi
}  // namespace EigenAttention
