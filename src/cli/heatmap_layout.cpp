// SPDX-License-Identifier: MIT
// The heatmap's layout (heatmap_layout.hpp).
#include "heatmap_layout.hpp"

#include <algorithm>
#include <limits>

#include "../index.hpp"
#include "../text.hpp"

namespace EigenAttention {
namespace cli {
namespace detail {

using internal::counted;
using internal::printable;

std::runtime_error heatmap_failure(const std::string& path, const std::string& problem) {
  return std::runtime_error(path + ": " + problem);
}

namespace {

index_t ceil_div(index_t a, index_t b) { return (a + b - 1) / b; }

// The smallest of 1, 2, 5, 10, 20, 50, ... that is at least `at_least`.
index_t nice_step(index_t at_least) {
  for (index_t base = 1;; base *= 10) {
    for (const index_t m : {1L, 2L, 5L}) {
      if (base * m >= at_least) return base * m;
    }
    if (base > std::numeric_limits<index_t>::max() / 100) return at_least;
  }
}

void make_axis(Axis& axis, index_t size, int max_cells, const std::vector<std::string>& labels) {
  axis.size = size;
  axis.block = ceil_div(size, max_cells);
  axis.cells = ceil_div(size, axis.block);
  axis.tokens = !labels.empty() && axis.block == 1;
  axis.labels.clear();
  for (index_t c = 0; c < axis.cells; ++c) {
    axis.labels.push_back(axis.tokens ? fit(printable(labels[static_cast<std::size_t>(c)]), kMaxLabelChars)
                                      : std::to_string(c * axis.block));
    axis.max_label_chars = std::max(axis.max_label_chars, axis.labels.back().size());
  }
}

// Ticks every `step` cells from 0, at least `spacing_px` apart: every `need`-th token, or indices
// (of each block's first element) at 1, 2, 5, 10, 20, ... steps.
void make_ticks(Axis& axis, int cell_px, int spacing_px) {
  const index_t need = std::max<index_t>(1, ceil_div(spacing_px, cell_px));
  const index_t step = axis.tokens ? need : nice_step(need);
  axis.ticks.clear();
  for (index_t c = 0; c < axis.cells; c += step)
    axis.ticks.push_back(Tick{c, axis.labels[static_cast<std::size_t>(c)]});
}

// Places everything for cells of cell_w x cell_h pixels.
void lay_out(Plan& p, const std::string& full_title, int cell_w, int cell_h) {
  HeatmapGeometry& g = p.g;
  g.cell_w = cell_w;
  g.cell_h = cell_h;
  // Every row when each has room for a line, else (indices) ticks at least two lines apart.
  make_ticks(p.rows, cell_h, p.rows.tokens || cell_h >= kLineH + 2 ? kLineH + 2 : 2 * kLineH);
  // Column tokens lie horizontally when every one fits its column, else vertically (reading upwards).
  p.col_labels_vertical =
      p.cols.tokens && static_cast<int>(p.cols.max_label_chars) * kCharW + kCharW / 2 > cell_w;
  make_ticks(p.cols, cell_w,
             p.col_labels_vertical ? kLineH : static_cast<int>(p.cols.max_label_chars + 1) * kCharW);

  const int heat_w = static_cast<int>(g.cell_cols) * g.cell_w;
  const int heat_h = static_cast<int>(g.cell_rows) * g.cell_h;
  int right = 0, bottom = 0;
  const auto extend = [&right, &bottom](int x, int y) {
    right = std::max(right, x);
    bottom = std::max(bottom, y);
  };

  // Top: the title.
  int y = kMargin;
  p.title = printable(full_title);
  if (!p.title.empty()) {
    p.title_y = y;
    y += kLineH + 8;
  }
  g.heat_y = y;

  // Left: "query" (vertical), the row labels, their ticks, the 1-pixel frame.
  int x = kMargin;
  p.query_title_x = x;
  x += kGlyphH + 10;
  x += static_cast<int>(p.rows.max_label_chars) * kCharW + kGap + kTick + 1;
  g.heat_x = x;
  const std::string query = "query";
  p.query_title_bottom = g.heat_y + std::max(heat_h / 2 + text_width(query) / 2, text_width(query));
  extend(g.heat_x + heat_w + 1, std::max(g.heat_y + heat_h + 1, p.query_title_bottom));

  // Below: the column ticks and labels, then "key", then the pooling note.
  y = g.heat_y + heat_h + 1 + kTick + kGap;
  p.col_label_y = y;
  for (const Tick& tick : p.cols.ticks) {
    const int centre = g.heat_x + static_cast<int>(tick.cell) * g.cell_w + g.cell_w / 2;
    extend(p.col_labels_vertical ? centre + kGlyphH / 2 : centre + text_width(tick.text) / 2 + 1, y);
  }
  y += p.col_labels_vertical ? static_cast<int>(p.cols.max_label_chars) * kCharW : kGlyphH;
  y += 10;
  p.key_title_y = y;
  y += kGlyphH;
  extend(g.heat_x + heat_w / 2 + text_width("key") / 2 + 1, y);
  p.pool_note.clear();
  if (g.block_rows > 1 || g.block_cols > 1) {
    y += 12;
    p.pool_note = "pooled: " + std::to_string(p.rows.size) + "x" + std::to_string(p.cols.size) +
                  " shown as " + std::to_string(g.cell_rows) + "x" + std::to_string(g.cell_cols) +
                  " (mean of " + std::to_string(g.block_rows) + "x" + std::to_string(g.block_cols) +
                  " blocks)";
    p.pool_note_y = y;
    y += kGlyphH;
    extend(kMargin + text_width(p.pool_note), y);
  }

  // Right: the colour bar, its ticks and labels, the legend below it.
  g.bar_x = g.heat_x + heat_w + 1 + kBarGap;
  g.bar_y = g.heat_y;
  g.bar_w = kBarW;
  g.bar_h = std::clamp(heat_h, kBarMinH, kBarMaxH);
  extend(g.bar_x + g.bar_w + 1 + kTick + kGap + kBarLabelChars * kCharW, g.bar_y + g.bar_h + 1 + kGlyphH / 2);
  p.legend_x = g.bar_x;
  p.legend_y = g.bar_y + g.bar_h + 1 + kGlyphH;
  // Up to two entries ("0 (masked)", "NaN"); on a log scale a line "log scale" and one entry more
  // ("< 1.23e-05", as wide as "0 (masked)").
  const int legend_lines = p.scale == HeatmapScale::Log ? 4 : 2;
  extend(p.legend_x + kSwatch + 8 + text_width("0 (masked)"), p.legend_y + legend_lines * kLegendPitch);

  // The title, from the left of the cells, is cut to the width the rest takes.
  if (!p.title.empty()) {
    const auto room = static_cast<std::size_t>(std::max(0, right - g.heat_x + kScale) / kCharW);
    p.title = fit(p.title, std::max(room, kMinTitleChars));
    extend(g.heat_x + text_width(p.title), p.title_y + kGlyphH);
  }

  g.width = right + kMargin;
  g.height = bottom + kMargin;
}

}  // namespace

Plan make_plan(const std::string& path, index_t rows, index_t cols, const HeatmapOptions& options) {
  if (rows < 1 || cols < 1) {
    throw heatmap_failure(path,
                          "cannot draw a " + std::to_string(rows) + " x " + std::to_string(cols) + " matrix");
  }
  if (options.max_cells < 1) throw heatmap_failure(path, "max_cells must be at least 1");
  if (options.cell_pixels < 0) throw heatmap_failure(path, "cell_pixels must not be negative");
  if (!options.row_labels.empty() && static_cast<index_t>(options.row_labels.size()) != rows) {
    throw heatmap_failure(path, counted(static_cast<long long>(options.row_labels.size()), "row label") +
                                    " for " + counted(rows, "row"));
  }
  if (!options.col_labels.empty() && static_cast<index_t>(options.col_labels.size()) != cols) {
    throw heatmap_failure(path, counted(static_cast<long long>(options.col_labels.size()), "column label") +
                                    " for " + counted(cols, "column"));
  }

  Plan p;
  p.scale = options.scale;
  HeatmapGeometry& g = p.g;
  make_axis(p.rows, rows, options.max_cells, options.row_labels);
  make_axis(p.cols, cols, options.max_cells, options.col_labels);
  g.block_rows = p.rows.block;
  g.block_cols = p.cols.block;
  g.cell_rows = p.rows.cells;
  g.cell_cols = p.cols.cells;

  const auto too_large = [&path]() {
    return heatmap_failure(path, "the image would exceed " + std::to_string(kMaxSide) + " pixels a side");
  };
  if (options.cell_pixels > 0) {
    if (g.cell_rows * options.cell_pixels > kMaxSide || g.cell_cols * options.cell_pixels > kMaxSide) {
      throw too_large();
    }
    lay_out(p, options.title, options.cell_pixels, options.cell_pixels);
  } else {
    // Square cells as large as fit kImageTarget with what surrounds them (measured with 1-pixel
    // cells, when column tokens stand upright, their tallest), at most kMaxCellPixels; a thin side
    // then grows towards kHeatMin pixels within the same room.
    lay_out(p, options.title, 1, 1);
    const index_t room_w = std::max(1L, kImageTarget - (g.width - g.cell_cols));
    const index_t room_h = std::max(1L, kImageTarget - (g.height - g.cell_rows));
    const index_t base =
        std::clamp(std::min(room_w / g.cell_cols, room_h / g.cell_rows), 1L, index_t{kMaxCellPixels});
    const auto grown = [base](index_t cells, index_t room) {
      return static_cast<int>(
          std::max(base, std::min({index_t{kMaxCellPixels}, kHeatMin / cells, room / cells})));
    };
    lay_out(p, options.title, grown(g.cell_cols, room_w), grown(g.cell_rows, room_h));
  }
  if (g.width > kMaxSide || g.height > kMaxSide) throw too_large();
  return p;
}

}  // namespace detail
}  // namespace cli
}  // namespace EigenAttention
