// SPDX-License-Identifier: MIT
/// \file BlockMask.hpp
/// Block masks: which (query block, key block) tiles of a call a mask hides whole (never
/// computed), shows whole (the mask never asked) or cuts (the mask asked per pair). Built once
/// from a mask_mod (block_mask(), evaluated in parallel) or from your own block lists
/// (BlockMask::from_blocks, block-sparse attention), then reused across calls and layers: a
/// value.
///
/// \code
/// auto mm = EigenAttention::mask_mod([](auto, auto, auto q, auto k) { return k <= q; });
/// EigenAttention::Options opt;
/// auto bm = EigenAttention::block_mask(mm, 1, 1, T, T);  // 128 x 128 tiles, top-left positions
/// EigenAttention::Masks<float> masks;
/// masks.mask_mod = mm;
/// masks.block_mask = bm;  // bm must outlive the call
/// \endcode
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <EigenAttention/Options.hpp>
#include <EigenAttention/Programmable.hpp>
#include <EigenAttention/export.hpp>

namespace EigenAttention {

/// How a mask treats one tile of query rows x keys.
enum class BlockKind : std::uint8_t {
  Empty = 0,    ///< no pair is visible: the tile is never computed
  Partial = 1,  ///< some are: the mask_mod decides pair by pair (it must be given)
  Full = 2      ///< every pair is visible: the mask_mod is not called
};

class BlockMask;

/// What a call holds of a BlockMask (Masks::block_mask): plain pointers and sizes, so that it
/// crosses into the compiled library whatever the flags on either side. Tile (b, h, rb, cb)
/// covers query rows [rb * block_rows, (rb + 1) * block_rows) and keys [cb * block_cols, ...) of
/// sequence b (or every sequence when batch is 1) and query head h (every head when heads is 1).
struct BlockMaskView {
  const BlockKind* blocks = nullptr;  ///< [batch, heads, row_blocks, col_blocks], row-major
  ///@{
  /// Sequences and query heads (1: the same classes for all).
  std::ptrdiff_t batch = 1, heads = 1;
  ///@}
  ///@{
  /// T_q and T_k it was made for.
  std::ptrdiff_t rows = 0, cols = 0;
  ///@}
  ///@{
  /// The tile's sizes (> 0).
  std::ptrdiff_t block_rows = 0, block_cols = 0;
  ///@}
  ///@{
  /// The query position offset and the key origin it was evaluated with (Programmable.hpp:
  /// q = i + offset + origin, k = j + origin); a call must measure positions the same way.
  std::ptrdiff_t offset = 0, origin = 0;
  ///@}
  ///@{
  /// The rows' key ranges that block_mask() found (null: none; BlockMask::exact_line): for a
  /// line (b, h) with exact_lines[b * heads + h] != 0, query row i sees exactly the keys
  /// [ranges[2 (line rows + i)], ranges[2 (line rows + i) + 1]), both ends non-decreasing in i.
  const std::int64_t* ranges = nullptr;
  const std::uint8_t* exact_lines = nullptr;
  ///@}

  BlockMaskView() = default;
  /// Refers to `m`, which must outlive the calls that use it.
  BlockMaskView(const BlockMask& m);  // NOLINT: implicit, `masks.block_mask = bm;`
  /// A temporary would be gone before the call: keep the BlockMask in a variable.
  BlockMaskView(const BlockMask&&) = delete;
  /// Is no block mask given?
  bool empty() const { return blocks == nullptr; }
  /// The line, b' * heads + h', that sequence b and query head h read (b' = 0 when batch is 1,
  /// h' = 0 when heads is 1).
  std::ptrdiff_t line(std::ptrdiff_t b, std::ptrdiff_t h) const {
    return (batch == 1 ? 0 : b) * heads + (heads == 1 ? 0 : h);
  }
  ///@{
  /// Tiles along the queries and along the keys (the last ones may be cut short).
  std::ptrdiff_t row_blocks() const { return block_rows > 0 ? (rows + block_rows - 1) / block_rows : 0; }
  std::ptrdiff_t col_blocks() const { return block_cols > 0 ? (cols + block_cols - 1) / block_cols : 0; }
  ///@}
};

namespace abi {
/// Classifies every tile of `target` (sizes set, blocks writable) by asking `mask` about each of
/// its pairs, the tiles spread over `threads` threads (Options::threads). Throws
/// std::invalid_argument when the mask is empty or `threads` is negative.
EIGEN_ATTENTION_EXPORT void classify_blocks(const MaskModRef& mask, const BlockMaskView& target,
                                            BlockKind* out, int threads);
/// For each line (b, h) of `target` (classified: blocks set), whether every query row's visible
/// keys form one range [first, end) whose ends never decrease from a row to the next (causal
/// masks, windows, chunks, packed documents, prefix-LM): then exact[line] = 1 and the ranges go to
/// ranges[2 (line rows + i)] and [2 (line rows + i) + 1] (a row that sees nothing takes an empty
/// range at the previous row's end); else exact[line] = 0. Asks `mask` about the pairs of the
/// Partial tiles (not those of Empty and Full ones), a line no further than its first row that
/// is not a range. `threads` as classify_blocks.
EIGEN_ATTENTION_EXPORT void find_row_ranges(const MaskModRef& mask, const BlockMaskView& target,
                                            std::int64_t* ranges, std::uint8_t* exact, int threads);
}  // namespace abi

/// The classes of a [batch, heads, T_q, T_k] mask's tiles; owns them. batch and heads of 1
/// stand for every sequence and every head.
class BlockMask {
 public:
  BlockMask() = default;
  /// Every tile Partial (the mask decides everywhere), to be refined with set(). Throws
  /// std::invalid_argument for sizes < 0, batch, heads or block sizes < 1.
  BlockMask(std::ptrdiff_t batch, std::ptrdiff_t heads, std::ptrdiff_t rows, std::ptrdiff_t cols,
            std::ptrdiff_t block_rows = 128, std::ptrdiff_t block_cols = 128, std::ptrdiff_t offset = 0,
            std::ptrdiff_t origin = 0) {
    if (batch < 1 || heads < 1 || rows < 0 || cols < 0 || block_rows < 1 || block_cols < 1) {
      throw std::invalid_argument("EigenAttention::BlockMask: batch " + std::to_string(batch) + ", heads " +
                                  std::to_string(heads) + ", T_q " + std::to_string(rows) + ", T_k " +
                                  std::to_string(cols) + ", blocks " + std::to_string(block_rows) + "x" +
                                  std::to_string(block_cols) +
                                  ": batch, heads and block sizes must be >= 1, T_q and T_k >= 0");
    }
    view_.batch = batch, view_.heads = heads, view_.rows = rows, view_.cols = cols;
    view_.block_rows = block_rows, view_.block_cols = block_cols, view_.offset = offset,
    view_.origin = origin;
    blocks_.assign(static_cast<std::size_t>(batch * heads * view_.row_blocks() * view_.col_blocks()),
                   BlockKind::Partial);
  }

  /// A block-sparse mask from block lists (compressed sparse rows, as FlashInfer's BSR): for
  /// sequence b, head h and query block rb (row = (b * heads + h) * row_blocks + rb), the key
  /// blocks columns[row_offsets[row] .. row_offsets[row + 1]) are Full, and those of
  /// partial_columns[partial_offsets[row] ..) Partial (the call's mask_mod decides them); every
  /// other tile is Empty. row_offsets has batch * heads * row_blocks + 1 entries, as has
  /// partial_offsets unless it is empty (no Partial tile). Throws std::invalid_argument for an
  /// offset or a column out of range, or a tile listed twice.
  static BlockMask from_blocks(std::ptrdiff_t batch, std::ptrdiff_t heads, std::ptrdiff_t rows,
                               std::ptrdiff_t cols, std::ptrdiff_t block_rows, std::ptrdiff_t block_cols,
                               const std::vector<std::int64_t>& row_offsets,
                               const std::vector<std::int64_t>& columns,
                               const std::vector<std::int64_t>& partial_offsets = {},
                               const std::vector<std::int64_t>& partial_columns = {}) {
    BlockMask m(batch, heads, rows, cols, block_rows, block_cols);
    std::fill(m.blocks_.begin(), m.blocks_.end(), BlockKind::Empty);
    const std::ptrdiff_t lines = batch * heads * m.row_blocks(), nk = m.col_blocks();
    const auto fill = [&](const char* name, const std::vector<std::int64_t>& offsets,
                          const std::vector<std::int64_t>& cols_of, BlockKind kind) {
      const auto bad = [&](const std::string& what) {
        throw std::invalid_argument(std::string("EigenAttention::BlockMask::from_blocks: ") + name + ": " +
                                    what);
      };
      if (static_cast<std::ptrdiff_t>(offsets.size()) != lines + 1) {
        bad("has " + std::to_string(offsets.size()) +
            " offsets but batch x heads x query blocks + 1 = " + std::to_string(lines + 1));
      }
      if (offsets[0] != 0 || offsets[lines] != static_cast<std::int64_t>(cols_of.size()))
        bad("offsets must start at 0 and end at the number of columns (" + std::to_string(cols_of.size()) +
            ")");
      for (std::ptrdiff_t line = 0; line < lines; ++line) {
        if (offsets[line + 1] < offsets[line])
          bad("offsets must not decrease (at " + std::to_string(line) + ")");
        for (std::int64_t t = offsets[line]; t < offsets[line + 1]; ++t) {
          const std::int64_t c = cols_of[static_cast<std::size_t>(t)];
          if (c < 0 || c >= nk)
            bad("key block " + std::to_string(c) + " is outside [0, " + std::to_string(nk) + ")");
          BlockKind& k = m.blocks_[static_cast<std::size_t>(line * nk + c)];
          if (k != BlockKind::Empty) bad("key block " + std::to_string(c) + " is listed twice in one row");
          k = kind;
        }
      }
    };
    fill("columns", row_offsets, columns, BlockKind::Full);
    if (!partial_offsets.empty() || !partial_columns.empty())
      fill("partial_columns", partial_offsets, partial_columns, BlockKind::Partial);
    return m;
  }

  ///@{
  /// Its sizes: sequences, query heads, T_q, T_k, the tiles' sizes and their counts
  /// (BlockMaskView's members).
  std::ptrdiff_t batch() const { return view_.batch; }
  std::ptrdiff_t heads() const { return view_.heads; }
  std::ptrdiff_t rows() const { return view_.rows; }
  std::ptrdiff_t cols() const { return view_.cols; }
  std::ptrdiff_t block_rows() const { return view_.block_rows; }
  std::ptrdiff_t block_cols() const { return view_.block_cols; }
  std::ptrdiff_t row_blocks() const { return view_.row_blocks(); }
  std::ptrdiff_t col_blocks() const { return view_.col_blocks(); }
  ///@}
  ///@{
  /// The query position offset and key origin of the positions it was evaluated at.
  std::ptrdiff_t offset() const { return view_.offset; }
  std::ptrdiff_t origin() const { return view_.origin; }
  ///@}
  ///@{
  /// Tile (b, h, rb, cb), read or set; b and h within batch() and heads() (std::out_of_range
  /// otherwise).
  BlockKind block(std::ptrdiff_t b, std::ptrdiff_t h, std::ptrdiff_t rb, std::ptrdiff_t cb) const {
    return blocks_[index(b, h, rb, cb)];
  }
  void set(std::ptrdiff_t b, std::ptrdiff_t h, std::ptrdiff_t rb, std::ptrdiff_t cb, BlockKind kind) {
    blocks_[index(b, h, rb, cb)] = kind;
    forget_ranges();
  }
  ///@}
  /// The fraction of tiles that are not Empty (0 for no tile).
  double density() const {
    std::size_t seen = 0;
    for (BlockKind k : blocks_) seen += k != BlockKind::Empty;
    return blocks_.empty() ? 0.0 : static_cast<double>(seen) / static_cast<double>(blocks_.size());
  }
  ///@{
  /// The classes, [batch, heads, row_blocks, col_blocks] row-major. (Writable classes: the rows'
  /// ranges are forgotten.)
  const BlockKind* data() const { return blocks_.data(); }
  BlockKind* data() {
    forget_ranges();
    return blocks_.data();
  }
  ///@}
  /// Does line (b, h) hold its rows' key ranges? block_mask() records them where every query
  /// row's visible keys form one range whose ends never decrease from a row to the next (causal
  /// masks of both alignments, windows, chunks, packed documents, prefix-LM); the kernels then
  /// compute each row's range as they do a built-in mask's and never call the mask_mod. A block
  /// mask built from_blocks() or changed with set() or data() holds none.
  bool exact_line(std::ptrdiff_t b, std::ptrdiff_t h) const {
    if (b < 0 || b >= view_.batch || h < 0 || h >= view_.heads)
      throw std::out_of_range("EigenAttention::BlockMask::exact_line: (" + std::to_string(b) + ", " +
                              std::to_string(h) + ") is outside [" + std::to_string(view_.batch) + ", " +
                              std::to_string(view_.heads) + "]");
    return !exact_.empty() && exact_[static_cast<std::size_t>(b * view_.heads + h)] != 0;
  }
  /// Asks `mask` for the rows' key ranges of its lines (block_mask() does, after classifying).
  template <class G>
  void find_ranges(const MaskMod<G>& mask, int threads) {
    const std::size_t lines = static_cast<std::size_t>(view_.batch * view_.heads);
    ranges_.assign(lines * static_cast<std::size_t>(view_.rows) * 2, 0);
    exact_.assign(lines, 0);
    BlockMaskView view(view_);
    view.blocks = blocks_.data();
    if (!blocks_.empty())
      abi::find_row_ranges(MaskModRef(mask), view, ranges_.data(), exact_.data(), threads);
    bool any = false;
    for (std::uint8_t e : exact_) any = any || e != 0;
    if (!any) forget_ranges();
  }

 private:
  friend struct BlockMaskView;
  std::size_t index(std::ptrdiff_t b, std::ptrdiff_t h, std::ptrdiff_t rb, std::ptrdiff_t cb) const {
    if (b < 0 || b >= view_.batch || h < 0 || h >= view_.heads || rb < 0 || rb >= row_blocks() || cb < 0 ||
        cb >= col_blocks()) {
      throw std::out_of_range("EigenAttention::BlockMask: tile (" + std::to_string(b) + ", " +
                              std::to_string(h) + ", " + std::to_string(rb) + ", " + std::to_string(cb) +
                              ") is outside [" + std::to_string(view_.batch) + ", " +
                              std::to_string(view_.heads) + ", " + std::to_string(row_blocks()) + ", " +
                              std::to_string(col_blocks()) + "]");
    }
    return static_cast<std::size_t>(((b * view_.heads + h) * row_blocks() + rb) * col_blocks() + cb);
  }
  void forget_ranges() {
    ranges_.clear();
    exact_.clear();
  }
  BlockMaskView view_;  // sizes (blocks not set)
  std::vector<BlockKind> blocks_;
  std::vector<std::int64_t> ranges_;  // [batch, heads, rows, 2] when some line is exact, else empty
  std::vector<std::uint8_t> exact_;   // [batch, heads]
};

inline BlockMaskView::BlockMaskView(const BlockMask& m) : BlockMaskView(m.view_) {
  blocks = m.blocks_.empty() ? nullptr : m.blocks_.data();
  if (!m.exact_.empty()) ranges = m.ranges_.data(), exact_lines = m.exact_.data();
  if (blocks == nullptr && m.view_.block_rows > 0) {
    // A mask with no tile (T_q or T_k of 0) is still a mask: point at something that is not null.
    static const BlockKind none = BlockKind::Empty;
    blocks = &none;
  }
}

/// Classifies the [batch, heads, T_q, T_k] tiles of block_rows x block_cols of `mask`
/// (Programmable.hpp) for calls with options `opt`: the positions are measured as such a call measures them
/// (its alignment, diagonal_offset and chunk_origin), and opt.threads threads evaluate the mask. A tile's
/// pairs are asked until its class is known, then the Partial tiles' pairs again for the rows' key ranges
/// (BlockMask::exact_line); the result is a value, for every call with the same sizes and options. batch or
/// heads of 1 stand for every sequence or head (the mask must then not depend on b or h).
template <class G>
BlockMask block_mask(const MaskMod<G>& mask, std::ptrdiff_t batch, std::ptrdiff_t heads, std::ptrdiff_t rows,
                     std::ptrdiff_t cols, std::ptrdiff_t block_rows = 128, std::ptrdiff_t block_cols = 128,
                     const Options& opt = {}) {
  const std::ptrdiff_t offset = opt.diagonal_offset.has_value()                 ? *opt.diagonal_offset
                                : opt.alignment == CausalAlignment::BottomRight ? cols - rows
                                                                                : 0;
  BlockMask m(batch, heads, rows, cols, block_rows, block_cols, offset, opt.chunk_origin);
  abi::classify_blocks(MaskModRef(mask), BlockMaskView(m), m.data(), opt.threads);
  m.find_ranges(mask, opt.threads);
  return m;
}

}  // namespace EigenAttention
