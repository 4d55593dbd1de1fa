// SPDX-License-Identifier: MIT
// PNG heatmaps of attention weights for the eigen-attention tool.
#pragma once

#include <string>
#include <vector>

#include <EigenAttention/AtomicFile.hpp>
#include "../index.hpp"

namespace EigenAttention {
namespace cli {

// How a weight maps to a colour (see write_heatmap_png).
enum class HeatmapScale { Linear, Log };

struct HeatmapOptions {
  std::vector<std::string> row_labels;        // query tokens (optional; empty = numbers)
  std::vector<std::string> col_labels;        // key tokens (optional)
  std::string title;                          // e.g. "batch 0, head 3" (optional)
  int max_cells = 512;                        // rows/cols above this are pooled (mean over blocks) to fit
  int cell_pixels = 0;                        // 0 = choose (about 4..24 px per cell, image <= ~1400 px)
  HeatmapScale scale = HeatmapScale::Linear;  // linear in w, or in log10(w)
};

// Writes a PNG heatmap of a rows x cols matrix of weights in [0, 1] (element (i, j) at
// weights[i * row_stride + j]), with a colour bar (0..max, labelled), axis ticks and labels
// (token labels when given, else indices), pooling when larger than max_cells, atomically
// (an AtomicFile: a temporary file beside `path`, then renamed). Throws
// std::runtime_error("<path>: <problem>") on failure (npy::Error, derived from it, for an I/O
// error; no file left behind).
//
// Details:
// - Rows are queries (top to bottom), columns keys (left to right). A dimension above max_cells
//   is pooled in blocks of ceil(n / max_cells) (the last block may be shorter; each pooled cell is
//   the mean of its block: NaN when one is NaN, 0 only when all are) and its ticks show the index
//   of each block's first row or column; a note under the image says how it was pooled.
//   Token labels are used only for a dimension that is not pooled; when given they must number
//   exactly rows (cols). Labels are cut to 16 characters (the last one shown as '.'); bytes outside
//   printable ASCII show as '?' (one '?' per UTF-8 character). The title is cut likewise to the
//   width of the rest of the image (24 characters at least).
// - Colours run from dark purple (0) through blue and green to yellow (the largest finite weight
//   shown, the top of the colour bar; 1 when there is none above 0). Exactly 0 (masked) is
//   near-black, NaN magenta; each has a legend entry when it occurs.
// - HeatmapScale::Log: the colour follows log10(w) from `low` (dark purple) to the largest finite
//   weight shown, `high` (yellow), where low is the smallest positive weight shown but at least
//   high * 10^-kLogDecades (a tenth of high when every positive weight equals it). Positive
//   weights below low take low's colour (a legend entry "< low" says so when one occurs); exactly
//   0 stays the masked colour and NaN magenta. The colour bar runs over [low, high] in log10,
//   its labels are the weights at its ticks, and the legend says "log scale".
// - Throws for rows or cols < 1, a null `weights`, row_stride < cols (when rows > 1), a label count
//   that does not match, max_cells < 1, cell_pixels < 0 or an image above 16384 px a side.
void write_heatmap_png(const std::string& path, const double* weights, index_t rows, index_t cols,
                       index_t row_stride, const HeatmapOptions& options);
// The same, written to `file` (one of several outputs committed together); the caller commits
// it. Failures name file.path().
void write_heatmap_png(AtomicFile& file, const double* weights, index_t rows, index_t cols,
                       index_t row_stride, const HeatmapOptions& options);

namespace detail {

// For the tests: the colours and the layout write_heatmap_png uses.
struct Rgb {
  unsigned char r, g, b;
};
inline bool operator==(Rgb a, Rgb b) { return a.r == b.r && a.g == b.g && a.b == b.b; }
inline bool operator!=(Rgb a, Rgb b) { return !(a == b); }

constexpr Rgb kMaskedColour{16, 16, 16};  // exactly 0
constexpr Rgb kNanColour{255, 0, 255};    // NaN
Rgb colour_map(double t);                 // t in [0, 1] (clamped; NaN gives kNanColour)

// The most decades a log-scale heatmap shows below its largest weight.
constexpr double kLogDecades = 6;
// The mapping of weights to colour-map positions: linear over [0, high] or log10 over [low, high].
struct ColourScale {
  bool log = false;
  double low = 0.0, high = 1.0;
  // The colour-map position of weight v > 0, in [0, 1].
  double position(double v) const;
  // The weight at colour-map position t in [0, 1] (the colour bar's labels).
  double weight_at(double t) const;
};
// The scale for these (pooled) cells: `high` their largest finite value (1 when none is above 0);
// with `scale` Log, `low` their smallest positive one, within kLogDecades of high.
ColourScale colour_scale(HeatmapScale scale, const std::vector<double>& cells);

struct HeatmapGeometry {
  int width = 0, height = 0;                       // the whole image, in pixels
  index_t block_rows = 1, block_cols = 1;          // pooling block (1 = not pooled)
  index_t cell_rows = 0, cell_cols = 0;            // cells drawn (after pooling)
  int cell_w = 0, cell_h = 0;                      // pixels per cell
  int heat_x = 0, heat_y = 0;                      // top-left pixel of cell (0, 0)
  int bar_x = 0, bar_y = 0, bar_w = 0, bar_h = 0;  // the colour bar (top = largest value)
};
// The layout for these dimensions and options (it does not depend on the values). Throws
// std::runtime_error("<path>: <problem>") for the argument errors write_heatmap_png throws for.
HeatmapGeometry heatmap_geometry(const std::string& path, index_t rows, index_t cols,
                                 const HeatmapOptions& options);

}  // namespace detail

}  // namespace cli
}  // namespace EigenAttention
