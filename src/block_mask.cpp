// SPDX-License-Identifier: MIT
// block_mask() (BlockMask.hpp): the classes of a mask_mod's tiles, evaluated in parallel.
#include <EigenAttention/BlockMask.hpp>

#include <algorithm>
#include <atomic>
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

void find_row_ranges(const MaskModRef& mask, const BlockMaskView& target, std::int64_t* ranges,
                     std::uint8_t* exact, int threads) {
  using internal::index_t;
  if (mask.empty()) throw std::invalid_argument("EigenAttention::block_mask: the mask_mod is empty");
  const index_t lines = target.batch * target.heads, rows = target.rows, cols = target.cols;
  const index_t rb_count = target.row_blocks(), cb_count = target.col_blocks();
  const index_t R = target.block_rows, C = target.block_cols;
  // One row of a Partial tile is asked at a time; a task is one block row of a line, which stops
  // at its first row that is not a range (`broken`, shared by the line's tasks).
  std::unique_ptr<std::atomic<bool>[]> broken(new std::atomic<bool>[static_cast<std::size_t>(lines)]);
  for (index_t l = 0; l < lines; ++l) broken[l] = false;
  const double work = static_cast<double>(lines) * static_cast<double>(rows) * static_cast<double>(cols);
  const int n = internal::threads_for(threads, work);
  internal::for_tasks(lines * rb_count, n, [&](index_t task) {
    const index_t line = task / rb_count, rb = task % rb_count;
    thread_local std::unique_ptr<unsigned char[]> seen;
    thread_local index_t seen_size = 0;
    if (seen_size < C) seen.reset(new unsigned char[static_cast<std::size_t>(C)]), seen_size = C;
    const auto* classes =
        reinterpret_cast<const std::uint8_t*>(target.blocks) + (line * rb_count + rb) * cb_count;
    for (index_t i = rb * R; i < std::min(rows, (rb + 1) * R) && !broken[line]; ++i) {
      // The row's visible keys, tile by tile: one range, or broken.
      index_t first = -1, end = -1;
      bool range = true;
      const auto visible = [&](index_t a, index_t b) {  // keys [a, b) are visible: they must extend it
        if (first < 0) {
          first = a, end = b;
        } else if (a == end) {
          end = b;
        } else {
          range = false;
        }
      };
      for (index_t cb = 0; cb < cb_count && range; ++cb) {
        const index_t j0 = cb * C, j1 = std::min(cols, j0 + C);
        const auto kind = static_cast<BlockKind>(classes[cb]);
        if (kind == BlockKind::Empty) continue;
        if (kind == BlockKind::Full) {
          visible(j0, j1);
          continue;
        }
        const MaskTile tile{seen.get(),
                            j1 - j0,
                            line / target.heads,
                            line % target.heads,
                            i + target.offset + target.origin,
                            1,
                            j0 + target.origin,
                            j1 - j0};
        mask.apply(mask.callable, tile);
        for (index_t t = 0; t < j1 - j0 && range; ++t) {
          if (seen[t] != 0) visible(j0 + t, j0 + t + 1);
        }
      }
      if (!range) {
        broken[line] = true;
        break;
      }
      std::int64_t* r = ranges + 2 * (line * rows + i);
      r[0] = first < 0 ? -1 : first;  // (-1: nothing; filled in below)
      r[1] = first < 0 ? -1 : end;
    }
  });
  // Each line: rows that see nothing take an empty range at the previous row's end, and both
  // ends must not decrease.
  for (index_t line = 0; line < lines; ++line) {
    exact[line] = 0;
    if (broken[line]) continue;
    std::int64_t* r = ranges + 2 * line * rows;
    std::int64_t last_first = 0, last_end = 0;
    bool ok = true;
    for (index_t i = 0; i < rows && ok; ++i) {
      if (r[2 * i] < 0) r[2 * i] = r[2 * i + 1] = last_end;
      ok = r[2 * i] >= last_first && r[2 * i + 1] >= last_end;
      last_first = r[2 * i], last_end = r[2 * i + 1];
    }
    exact[line] = ok ? 1 : 0;
  }
}

}  // namespace abi
}  // namespace EigenAttention
