// SPDX-License-Identifier: MIT
// The heatmap's layout (heatmap.hpp): where the cells, labels, ticks, titles, colour bar and
// legend go, for given dimensions and options (it does not depend on the values).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "../index.hpp"
#include "heatmap.hpp"
#include "heatmap_text.hpp"

namespace EigenAttention {
namespace cli {
namespace detail {

inline constexpr int kMargin = 12;
inline constexpr int kTick = 4;  // tick length
inline constexpr int kGap = 4;   // between a tick and its label
inline constexpr std::size_t kMaxLabelChars = 16;
inline constexpr std::size_t kMinTitleChars = 24;  // a title may widen the image to this many characters
inline constexpr int kMaxSide = 16384;
inline constexpr index_t kImageTarget =
    1400;                                 // chosen cells keep the image within this many pixels a side...
inline constexpr index_t kHeatMin = 120;  // ...and, that allowing, make the cells at least this many
inline constexpr int kMaxCellPixels = 24;
inline constexpr int kBarGap = 24;
inline constexpr int kBarW = 18;
inline constexpr int kBarMinH = 200;
inline constexpr int kBarMaxH = 400;
inline constexpr int kBarLabelChars = 8;  // "%.3g" of a weight: "0.000123" at the longest
inline constexpr int kSwatch = 14;
inline constexpr int kLegendPitch = kLineH + 6;

// std::runtime_error("<path>: <problem>").
std::runtime_error heatmap_failure(const std::string& path, const std::string& problem);

struct Tick {
  index_t cell;
  std::string text;
};

struct Axis {
  index_t size = 0, block = 1, cells = 0;
  bool tokens = false;              // token labels (given, and not pooled), else indices
  std::vector<std::string> labels;  // every cell's label, printable and cut to kMaxLabelChars
  std::size_t max_label_chars = 0;  // over all of them (the layout does not depend on the ticks)
  std::vector<Tick> ticks;
};

struct Plan {
  HeatmapGeometry g;
  HeatmapScale scale = HeatmapScale::Linear;
  Axis rows, cols;
  bool col_labels_vertical = false;
  std::string title;
  int title_y = 0;
  std::string pool_note;
  int pool_note_y = 0;
  int col_label_y = 0;  // top of the column labels
  int key_title_y = 0;
  int query_title_x = 0, query_title_bottom = 0;
  int legend_x = 0, legend_y = 0;
};

// The plan for these dimensions and options. Throws heatmap_failure(path, ...) for the argument
// errors write_heatmap_png throws for (heatmap.hpp).
Plan make_plan(const std::string& path, index_t rows, index_t cols, const HeatmapOptions& options);

}  // namespace detail
}  // namespace cli
}  // namespace EigenAttention
