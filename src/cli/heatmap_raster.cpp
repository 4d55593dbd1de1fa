// SPDX-License-Identifier: MIT
// The heatmap's pixels (heatmap_raster.hpp): the canvas, the colour map, and the picture drawn
// on them (cells pooled, frame, ticks, labels, colour bar, legend).
#include "heatmap_raster.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "../index.hpp"
#include "heatmap_text.hpp"

namespace EigenAttention {
namespace cli {
namespace detail {

namespace {

// Perceptually ordered, dark purple -> blue -> teal -> green -> yellow, evenly spaced in t.
constexpr Rgb kColourStops[] = {
    {68, 1, 84},    {72, 38, 119},  {63, 71, 136},  {50, 100, 142}, {38, 127, 142},
    {31, 154, 138}, {60, 187, 117}, {140, 213, 69}, {253, 231, 37},
};
constexpr int kColourStopCount = static_cast<int>(sizeof kColourStops / sizeof kColourStops[0]);

std::string format_weight(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3g", v);
  return buffer;
}

// The cells after pooling (means over blocks), row-major.
std::vector<double> pool(const double* weights, index_t rows, index_t cols, index_t row_stride,
                         const HeatmapGeometry& g) {
  const auto cells = static_cast<std::size_t>(g.cell_rows * g.cell_cols);
  std::vector<double> sum(cells, 0.0);
  for (index_t i = 0; i < rows; ++i) {
    const double* row = weights + i * row_stride;
    double* out = &sum[static_cast<std::size_t>((i / g.block_rows) * g.cell_cols)];
    for (index_t j = 0; j < cols; ++j) out[j / g.block_cols] += row[j];
  }
  for (index_t ci = 0; ci < g.cell_rows; ++ci) {
    const index_t h = std::min(g.block_rows, rows - ci * g.block_rows);
    for (index_t cj = 0; cj < g.cell_cols; ++cj) {
      const index_t w = std::min(g.block_cols, cols - cj * g.block_cols);
      sum[static_cast<std::size_t>(ci * g.cell_cols + cj)] /= static_cast<double>(h * w);
    }
  }
  return sum;
}

}  // namespace

double ColourScale::position(double v) const {
  if (!log) return v / high;
  if (!(v > low)) return 0.0;  // below or at low (and v < 0, which is no weight)
  return std::min(1.0, (std::log10(v) - std::log10(low)) / (std::log10(high) - std::log10(low)));
}

double ColourScale::weight_at(double t) const {
  if (!log) return t * high;
  return std::pow(10.0, std::log10(low) + t * (std::log10(high) - std::log10(low)));
}

ColourScale colour_scale(HeatmapScale scale, const std::vector<double>& cells) {
  ColourScale s;
  double high = 0.0, low = std::numeric_limits<double>::infinity();
  for (const double v : cells) {
    if (!std::isfinite(v)) continue;
    high = std::max(high, v);
    if (v > 0.0) low = std::min(low, v);
  }
  s.high = high > 0.0 ? high : 1.0;
  if (scale == HeatmapScale::Log) {
    s.log = true;
    s.low = std::max(low, s.high * std::pow(10.0, -kLogDecades));
    if (!(s.low < s.high)) s.low = s.high / 10;  // one positive value (or none): one decade
  }
  return s;
}

Rgb colour_map(double t) {
  if (std::isnan(t)) return kNanColour;
  t = std::clamp(t, 0.0, 1.0) * (kColourStopCount - 1);
  const int k = std::min(static_cast<int>(t), kColourStopCount - 2);
  const double f = t - k;
  const Rgb a = kColourStops[k], b = kColourStops[k + 1];
  const auto mix = [f](unsigned char x, unsigned char y) {
    return static_cast<unsigned char>(std::lround(x + (static_cast<double>(y) - x) * f));
  };
  return Rgb{mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b)};
}

Canvas::Canvas(int width, int height)
    : width_(width),
      height_(height),
      rgb_(static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * 3, 255) {}

void Canvas::set(int x, int y, Rgb c) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
  unsigned char* p =
      &rgb_[(static_cast<std::size_t>(y) * static_cast<std::size_t>(width_) + static_cast<std::size_t>(x)) *
            3];
  p[0] = c.r;
  p[1] = c.g;
  p[2] = c.b;
}

void Canvas::fill(int x, int y, int w, int h, Rgb c) {
  const int x0 = std::max(x, 0), x1 = std::min(x + w, width_);
  const int y0 = std::max(y, 0), y1 = std::min(y + h, height_);
  for (int yy = y0; yy < y1; ++yy) {
    for (int xx = x0; xx < x1; ++xx) set(xx, yy, c);
  }
}

void Canvas::frame(int x, int y, int w, int h, Rgb c) {
  fill(x - 1, y - 1, w + 2, 1, c);
  fill(x - 1, y + h, w + 2, 1, c);
  fill(x - 1, y, 1, h, c);
  fill(x + w, y, 1, h, c);
}

std::vector<unsigned char> render(const Plan& p, const double* weights, index_t rows, index_t cols,
                                  index_t row_stride) {
  const HeatmapGeometry& g = p.g;
  const std::vector<double> cells = pool(weights, rows, cols, row_stride, g);
  const ColourScale scale = colour_scale(p.scale, cells);
  bool any_nan = false, any_zero = false, any_below = false;
  for (const double v : cells) {
    if (std::isnan(v)) any_nan = true;
    if (v == 0.0) any_zero = true;
    if (scale.log && v > 0.0 && v < scale.low) any_below = true;
  }

  Canvas canvas(g.width, g.height);
  const auto colour_of = [&scale](double v) {
    if (std::isnan(v)) return kNanColour;
    if (v == 0.0) return kMaskedColour;
    return colour_map(scale.position(v));
  };
  for (index_t i = 0; i < g.cell_rows; ++i) {
    for (index_t j = 0; j < g.cell_cols; ++j) {
      canvas.fill(g.heat_x + static_cast<int>(j) * g.cell_w, g.heat_y + static_cast<int>(i) * g.cell_h,
                  g.cell_w, g.cell_h, colour_of(cells[static_cast<std::size_t>(i * g.cell_cols + j)]));
    }
  }
  const int heat_w = static_cast<int>(g.cell_cols) * g.cell_w;
  const int heat_h = static_cast<int>(g.cell_rows) * g.cell_h;
  canvas.frame(g.heat_x, g.heat_y, heat_w, heat_h, kBlack);

  if (!p.title.empty()) draw_text(canvas, g.heat_x, p.title_y, p.title, kBlack);

  // Rows: ticks left of the frame, labels right-aligned against them.
  for (const Tick& tick : p.rows.ticks) {
    const int centre = g.heat_y + static_cast<int>(tick.cell) * g.cell_h + g.cell_h / 2;
    canvas.fill(g.heat_x - 1 - kTick, centre, kTick, 1, kTickColour);
    draw_text(canvas, g.heat_x - 1 - kTick - kGap - text_width(tick.text), centre - kGlyphH / 2, tick.text,
              kBlack);
  }
  const std::string query = "query";
  draw_text_up(canvas, p.query_title_x, p.query_title_bottom, query, kBlack);

  // Columns: ticks below the frame, labels centred (or reading upwards, ending at the tick).
  for (const Tick& tick : p.cols.ticks) {
    const int centre = g.heat_x + static_cast<int>(tick.cell) * g.cell_w + g.cell_w / 2;
    canvas.fill(centre, g.heat_y + heat_h + 1, 1, kTick, kTickColour);
    if (p.col_labels_vertical) {
      draw_text_up(canvas, centre - kGlyphH / 2 + 1, p.col_label_y + text_width(tick.text), tick.text,
                   kBlack);
    } else {
      draw_text(canvas, centre - text_width(tick.text) / 2, p.col_label_y, tick.text, kBlack);
    }
  }
  draw_text(canvas, g.heat_x + heat_w / 2 - text_width("key") / 2, p.key_title_y, "key", kBlack);
  if (!p.pool_note.empty()) draw_text(canvas, kMargin, p.pool_note_y, p.pool_note, kBlack);

  // The colour bar: top = the largest weight, bottom = 0 (log: low); ticks at quarters (halves
  // when short), labelled with the weight there.
  for (int yy = 0; yy < g.bar_h; ++yy) {
    const double t = g.bar_h > 1 ? 1.0 - static_cast<double>(yy) / (g.bar_h - 1) : 1.0;
    canvas.fill(g.bar_x, g.bar_y + yy, g.bar_w, 1, colour_map(t));
  }
  canvas.frame(g.bar_x, g.bar_y, g.bar_w, g.bar_h, kBlack);
  const int quarters = g.bar_h >= 5 * kLineH ? 4 : 2;
  for (int q = 0; q <= quarters; ++q) {
    const double f = static_cast<double>(q) / quarters;
    const int yy = g.bar_y + static_cast<int>(std::lround((1.0 - f) * (g.bar_h - 1)));
    canvas.fill(g.bar_x + g.bar_w + 1, yy, kTick, 1, kTickColour);
    draw_text(canvas, g.bar_x + g.bar_w + 1 + kTick + kGap, yy - kGlyphH / 2,
              format_weight(scale.weight_at(f)), kBlack);
  }

  // Legend: only what occurs.
  int legend_y = p.legend_y;
  const auto entry = [&](Rgb colour, const std::string& label) {
    canvas.fill(p.legend_x, legend_y, kSwatch, kSwatch, colour);
    canvas.frame(p.legend_x, legend_y, kSwatch, kSwatch, kBlack);
    draw_text(canvas, p.legend_x + kSwatch + 8, legend_y, label, kBlack);
    legend_y += kLegendPitch;
  };
  if (scale.log) {
    draw_text(canvas, p.legend_x, legend_y, "log scale", kBlack);
    legend_y += kLegendPitch;
  }
  if (any_zero) entry(kMaskedColour, "0 (masked)");
  if (any_nan) entry(kNanColour, "NaN");
  if (any_below) entry(colour_map(0.0), "< " + format_weight(scale.low));

  return canvas.take();
}

}  // namespace detail
}  // namespace cli
}  // namespace EigenAttention
