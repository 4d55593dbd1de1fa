// PNG heatmaps of attention weights (heatmap.hpp): lay out, draw into an RGB buffer, encode with
// libpng into an AtomicFile.
#include "heatmap.hpp"

#include <png.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <EigenAttention/AtomicFile.hpp>
#include <EigenAttention/detail/Text.hpp>

#include "font5x8.hpp"

namespace EigenAttention {
namespace cli {

using detail::HeatmapGeometry;
using detail::Rgb;

namespace {

// Text is the 5x8 font drawn at twice its size.
constexpr int kScale = 2;
constexpr int kCharW = font5x8::kAdvance * kScale;      // 12: advance per character
constexpr int kGlyphH = font5x8::kGlyphHeight * kScale;  // 16: height of a line's ink
constexpr int kLineH = font5x8::kLineHeight * kScale;    // 18: line pitch

constexpr int kMargin = 12;
constexpr int kTick = 4;  // tick length
constexpr int kGap = 4;   // between a tick and its label
constexpr std::size_t kMaxLabelChars = 16;
constexpr std::size_t kMinTitleChars = 24;  // a title may widen the image to this many characters
constexpr int kMaxSide = 16384;
constexpr long kImageTarget = 1400;  // chosen cells keep the image within this many pixels a side...
constexpr long kHeatMin = 120;       // ...and, that allowing, make the cells at least this many
constexpr int kMaxCellPixels = 24;
constexpr int kBarGap = 24;
constexpr int kBarW = 18;
constexpr int kBarMinH = 200;
constexpr int kBarMaxH = 400;
constexpr int kBarLabelChars = 8;  // "%.3g" of a weight: "0.000123" at the longest
constexpr int kSwatch = 14;
constexpr int kLegendPitch = kLineH + 6;

constexpr Rgb kBlack{0, 0, 0};
constexpr Rgb kTickColour{64, 64, 64};

// Perceptually ordered, dark purple -> blue -> teal -> green -> yellow, evenly spaced in t.
constexpr Rgb kColourStops[] = {
    {68, 1, 84},    {72, 38, 119},  {63, 71, 136},  {50, 100, 142}, {38, 127, 142},
    {31, 154, 138}, {60, 187, 117}, {140, 213, 69}, {253, 231, 37},
};
constexpr int kColourStopCount = static_cast<int>(sizeof kColourStops / sizeof kColourStops[0]);

std::runtime_error failure(const std::string& path, const std::string& problem) {
  return std::runtime_error(path + ": " + problem);
}

using internal::printable;

// At most `max_chars` characters; a longer text keeps its first max_chars - 1 and ends in '.'.
std::string fit(std::string text, std::size_t max_chars) {
  if (text.size() > max_chars) {
    text.resize(max_chars - 1);
    text += '.';
  }
  return text;
}

int text_width(const std::string& text) { return static_cast<int>(text.size()) * kCharW - kScale; }

struct Tick {
  long cell;
  std::string text;
};

struct Axis {
  long size = 0, block = 1, cells = 0;
  bool tokens = false;                // token labels (given, and not pooled), else indices
  std::vector<std::string> labels;    // every cell's label, printable and cut to kMaxLabelChars
  std::size_t max_label_chars = 0;    // over all of them (the layout does not depend on the ticks)
  std::vector<Tick> ticks;
};

long ceil_div(long a, long b) { return (a + b - 1) / b; }

// The smallest of 1, 2, 5, 10, 20, 50, ... that is at least `at_least`.
long nice_step(long at_least) {
  for (long base = 1;; base *= 10) {
    for (const long m : {1L, 2L, 5L}) {
      if (base * m >= at_least) return base * m;
    }
    if (base > std::numeric_limits<long>::max() / 100) return at_least;
  }
}

void make_axis(Axis& axis, long size, int max_cells, const std::vector<std::string>& labels) {
  axis.size = size;
  axis.block = ceil_div(size, max_cells);
  axis.cells = ceil_div(size, axis.block);
  axis.tokens = !labels.empty() && axis.block == 1;
  axis.labels.clear();
  for (long c = 0; c < axis.cells; ++c) {
    axis.labels.push_back(axis.tokens ? fit(printable(labels[static_cast<std::size_t>(c)]), kMaxLabelChars)
                                      : std::to_string(c * axis.block));
    axis.max_label_chars = std::max(axis.max_label_chars, axis.labels.back().size());
  }
}

// Ticks every `step` cells from 0, at least `spacing_px` apart: every `need`-th token, or indices
// (of each block's first element) at 1, 2, 5, 10, 20, ... steps.
void make_ticks(Axis& axis, int cell_px, int spacing_px) {
  const long need = std::max<long>(1, ceil_div(spacing_px, cell_px));
  const long step = axis.tokens ? need : nice_step(need);
  axis.ticks.clear();
  for (long c = 0; c < axis.cells; c += step) axis.ticks.push_back(Tick{c, axis.labels[static_cast<std::size_t>(c)]});
}

struct Plan {
  HeatmapGeometry g;
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

// Places everything for cells of cell_w x cell_h pixels.
void lay_out(Plan& p, const std::string& full_title, int cell_w, int cell_h) {
  HeatmapGeometry& g = p.g;
  g.cell_w = cell_w;
  g.cell_h = cell_h;
  // Every row when each has room for a line, else (indices) ticks at least two lines apart.
  make_ticks(p.rows, cell_h, p.rows.tokens || cell_h >= kLineH + 2 ? kLineH + 2 : 2 * kLineH);
  // Column tokens lie horizontally when every one fits its column, else vertically (reading upwards).
  p.col_labels_vertical = p.cols.tokens && static_cast<int>(p.cols.max_label_chars) * kCharW + kCharW / 2 > cell_w;
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
    p.pool_note = "pooled: " + std::to_string(p.rows.size) + "x" + std::to_string(p.cols.size) + " shown as " +
                  std::to_string(g.cell_rows) + "x" + std::to_string(g.cell_cols) + " (mean of " +
                  std::to_string(g.block_rows) + "x" + std::to_string(g.block_cols) + " blocks)";
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
  extend(p.legend_x + kSwatch + 8 + text_width("0 (masked)"), p.legend_y + 2 * kLegendPitch);

  // The title, from the left of the cells, is cut to the width the rest takes.
  if (!p.title.empty()) {
    const auto room = static_cast<std::size_t>(std::max(0, right - g.heat_x + kScale) / kCharW);
    p.title = fit(p.title, std::max(room, kMinTitleChars));
    extend(g.heat_x + text_width(p.title), p.title_y + kGlyphH);
  }

  g.width = right + kMargin;
  g.height = bottom + kMargin;
}

Plan make_plan(const std::string& path, long rows, long cols, const HeatmapOptions& options) {
  if (rows < 1 || cols < 1) {
    throw failure(path, "cannot draw a " + std::to_string(rows) + " x " + std::to_string(cols) + " matrix");
  }
  if (options.max_cells < 1) throw failure(path, "max_cells must be at least 1");
  if (options.cell_pixels < 0) throw failure(path, "cell_pixels must not be negative");
  if (!options.row_labels.empty() && static_cast<long>(options.row_labels.size()) != rows) {
    throw failure(path, std::to_string(options.row_labels.size()) + " row labels for " + std::to_string(rows) +
                            " rows");
  }
  if (!options.col_labels.empty() && static_cast<long>(options.col_labels.size()) != cols) {
    throw failure(path, std::to_string(options.col_labels.size()) + " column labels for " +
                            std::to_string(cols) + " columns");
  }

  Plan p;
  HeatmapGeometry& g = p.g;
  make_axis(p.rows, rows, options.max_cells, options.row_labels);
  make_axis(p.cols, cols, options.max_cells, options.col_labels);
  g.block_rows = p.rows.block;
  g.block_cols = p.cols.block;
  g.cell_rows = p.rows.cells;
  g.cell_cols = p.cols.cells;

  const auto too_large = [&path]() {
    return failure(path, "the image would exceed " + std::to_string(kMaxSide) + " pixels a side");
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
    const long room_w = std::max(1L, kImageTarget - (g.width - g.cell_cols));
    const long room_h = std::max(1L, kImageTarget - (g.height - g.cell_rows));
    const long base = std::clamp(std::min(room_w / g.cell_cols, room_h / g.cell_rows), 1L, long{kMaxCellPixels});
    const auto grown = [base](long cells, long room) {
      return static_cast<int>(std::max(base, std::min({long{kMaxCellPixels}, kHeatMin / cells, room / cells})));
    };
    lay_out(p, options.title, grown(g.cell_cols, room_w), grown(g.cell_rows, room_h));
  }
  if (g.width > kMaxSide || g.height > kMaxSide) throw too_large();
  return p;
}

class Canvas {
 public:
  Canvas(int width, int height)
      : width_(width), height_(height), rgb_(static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * 3, 255) {}

  std::vector<unsigned char> take() { return std::move(rgb_); }

  void set(int x, int y, Rgb c) {
    if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
    unsigned char* p = &rgb_[(static_cast<std::size_t>(y) * static_cast<std::size_t>(width_) + static_cast<std::size_t>(x)) * 3];
    p[0] = c.r;
    p[1] = c.g;
    p[2] = c.b;
  }

  void fill(int x, int y, int w, int h, Rgb c) {
    const int x0 = std::max(x, 0), x1 = std::min(x + w, width_);
    const int y0 = std::max(y, 0), y1 = std::min(y + h, height_);
    for (int yy = y0; yy < y1; ++yy) {
      for (int xx = x0; xx < x1; ++xx) set(xx, yy, c);
    }
  }

  // A 1-pixel frame just outside the rectangle.
  void frame(int x, int y, int w, int h, Rgb c) {
    fill(x - 1, y - 1, w + 2, 1, c);
    fill(x - 1, y + h, w + 2, 1, c);
    fill(x - 1, y, 1, h, c);
    fill(x + w, y, 1, h, c);
  }

  // Horizontal text, (x, y) the top-left of the first glyph.
  void text(int x, int y, const std::string& s, Rgb c) {
    for (std::size_t k = 0; k < s.size(); ++k) {
      const std::uint8_t* rows = font5x8::glyph(static_cast<unsigned char>(s[k]));
      for (int gy = 0; gy < font5x8::kGlyphHeight; ++gy) {
        for (int gx = 0; gx < font5x8::kGlyphWidth; ++gx) {
          if ((rows[gy] >> (font5x8::kGlyphWidth - 1 - gx)) & 1) {
            fill(x + static_cast<int>(k) * kCharW + gx * kScale, y + gy * kScale, kScale, kScale, c);
          }
        }
      }
    }
  }

  // Text turned a quarter turn anticlockwise (reading upwards): x the left edge (the glyphs'
  // tops), `bottom` one past the lowest pixel row of the first glyph.
  void text_up(int x, int bottom, const std::string& s, Rgb c) {
    for (std::size_t k = 0; k < s.size(); ++k) {
      const std::uint8_t* rows = font5x8::glyph(static_cast<unsigned char>(s[k]));
      for (int gy = 0; gy < font5x8::kGlyphHeight; ++gy) {
        for (int gx = 0; gx < font5x8::kGlyphWidth; ++gx) {
          if ((rows[gy] >> (font5x8::kGlyphWidth - 1 - gx)) & 1) {
            fill(x + gy * kScale, bottom - static_cast<int>(k) * kCharW - (gx + 1) * kScale, kScale, kScale, c);
          }
        }
      }
    }
  }

 private:
  int width_, height_;
  std::vector<unsigned char> rgb_;
};

std::string format_weight(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3g", v);
  return buffer;
}

// The cells after pooling (means over blocks), row-major.
std::vector<double> pool(const double* weights, long rows, long cols, long row_stride, const HeatmapGeometry& g) {
  const auto cells = static_cast<std::size_t>(g.cell_rows * g.cell_cols);
  std::vector<double> sum(cells, 0.0);
  for (long i = 0; i < rows; ++i) {
    const double* row = weights + i * row_stride;
    double* out = &sum[static_cast<std::size_t>((i / g.block_rows) * g.cell_cols)];
    for (long j = 0; j < cols; ++j) out[j / g.block_cols] += row[j];
  }
  for (long ci = 0; ci < g.cell_rows; ++ci) {
    const long h = std::min(g.block_rows, rows - ci * g.block_rows);
    for (long cj = 0; cj < g.cell_cols; ++cj) {
      const long w = std::min(g.block_cols, cols - cj * g.block_cols);
      sum[static_cast<std::size_t>(ci * g.cell_cols + cj)] /= static_cast<double>(h * w);
    }
  }
  return sum;
}

std::vector<unsigned char> render(const Plan& p, const double* weights, long rows, long cols, long row_stride) {
  const HeatmapGeometry& g = p.g;
  const std::vector<double> cells = pool(weights, rows, cols, row_stride, g);
  double vmax = 0.0;
  bool any_nan = false, any_zero = false;
  for (const double v : cells) {
    if (std::isnan(v)) any_nan = true;
    if (v == 0.0) any_zero = true;
    if (std::isfinite(v)) vmax = std::max(vmax, v);
  }
  if (!(vmax > 0.0)) vmax = 1.0;

  Canvas canvas(g.width, g.height);
  const auto colour_of = [vmax](double v) {
    if (std::isnan(v)) return detail::kNanColour;
    if (v == 0.0) return detail::kMaskedColour;
    return detail::colour_map(v / vmax);
  };
  for (long i = 0; i < g.cell_rows; ++i) {
    for (long j = 0; j < g.cell_cols; ++j) {
      canvas.fill(g.heat_x + static_cast<int>(j) * g.cell_w, g.heat_y + static_cast<int>(i) * g.cell_h, g.cell_w,
                  g.cell_h, colour_of(cells[static_cast<std::size_t>(i * g.cell_cols + j)]));
    }
  }
  const int heat_w = static_cast<int>(g.cell_cols) * g.cell_w;
  const int heat_h = static_cast<int>(g.cell_rows) * g.cell_h;
  canvas.frame(g.heat_x, g.heat_y, heat_w, heat_h, kBlack);

  if (!p.title.empty()) canvas.text(g.heat_x, p.title_y, p.title, kBlack);

  // Rows: ticks left of the frame, labels right-aligned against them.
  for (const Tick& tick : p.rows.ticks) {
    const int centre = g.heat_y + static_cast<int>(tick.cell) * g.cell_h + g.cell_h / 2;
    canvas.fill(g.heat_x - 1 - kTick, centre, kTick, 1, kTickColour);
    canvas.text(g.heat_x - 1 - kTick - kGap - text_width(tick.text), centre - kGlyphH / 2, tick.text, kBlack);
  }
  const std::string query = "query";
  canvas.text_up(p.query_title_x, p.query_title_bottom, query, kBlack);

  // Columns: ticks below the frame, labels centred (or reading upwards, ending at the tick).
  for (const Tick& tick : p.cols.ticks) {
    const int centre = g.heat_x + static_cast<int>(tick.cell) * g.cell_w + g.cell_w / 2;
    canvas.fill(centre, g.heat_y + heat_h + 1, 1, kTick, kTickColour);
    if (p.col_labels_vertical) {
      canvas.text_up(centre - kGlyphH / 2 + 1, p.col_label_y + text_width(tick.text), tick.text, kBlack);
    } else {
      canvas.text(centre - text_width(tick.text) / 2, p.col_label_y, tick.text, kBlack);
    }
  }
  canvas.text(g.heat_x + heat_w / 2 - text_width("key") / 2, p.key_title_y, "key", kBlack);
  if (!p.pool_note.empty()) canvas.text(kMargin, p.pool_note_y, p.pool_note, kBlack);

  // The colour bar: top = vmax, bottom = 0; ticks at quarters (halves when short).
  for (int yy = 0; yy < g.bar_h; ++yy) {
    const double t = g.bar_h > 1 ? 1.0 - static_cast<double>(yy) / (g.bar_h - 1) : 1.0;
    canvas.fill(g.bar_x, g.bar_y + yy, g.bar_w, 1, detail::colour_map(t));
  }
  canvas.frame(g.bar_x, g.bar_y, g.bar_w, g.bar_h, kBlack);
  const int quarters = g.bar_h >= 5 * kLineH ? 4 : 2;
  for (int q = 0; q <= quarters; ++q) {
    const double f = static_cast<double>(q) / quarters;
    const int yy = g.bar_y + static_cast<int>(std::lround((1.0 - f) * (g.bar_h - 1)));
    canvas.fill(g.bar_x + g.bar_w + 1, yy, kTick, 1, kTickColour);
    canvas.text(g.bar_x + g.bar_w + 1 + kTick + kGap, yy - kGlyphH / 2, format_weight(f * vmax), kBlack);
  }

  // Legend: only what occurs.
  int legend_y = p.legend_y;
  const auto entry = [&](Rgb colour, const std::string& label) {
    canvas.fill(p.legend_x, legend_y, kSwatch, kSwatch, colour);
    canvas.frame(p.legend_x, legend_y, kSwatch, kSwatch, kBlack);
    canvas.text(p.legend_x + kSwatch + 8, legend_y, label, kBlack);
    legend_y += kLegendPitch;
  };
  if (any_zero) entry(detail::kMaskedColour, "0 (masked)");
  if (any_nan) entry(detail::kNanColour, "NaN");

  return canvas.take();
}

// ---- PNG encoding (libpng reports errors by longjmp: nothing with a destructor lives between its
// setjmp and its calls, and the write callback stores the file's exception and leaves by png_error).

struct PngState {
  AtomicFile* file;
  std::exception_ptr write_error;  // the file's own error, rethrown as it is
  char message[256];
};

void on_error(png_structp png, png_const_charp message) {
  auto* state = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(state->message, sizeof state->message, "%s", message ? message : "libpng error");
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}

void on_write(png_structp png, png_bytep data, png_size_t size) {
  auto* state = static_cast<PngState*>(png_get_io_ptr(png));
  bool failed = false;
  try {
    state->file->write(data, size);
  } catch (...) {
    state->write_error = std::current_exception();
    failed = true;
  }
  if (failed) png_error(png, "write error");
}

void on_flush(png_structp) {}

bool encode(PngState* state, const unsigned char* rgb, int width, int height) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, state, on_error, on_warning);
  if (png == nullptr) {
    std::snprintf(state->message, sizeof state->message, "cannot start libpng");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_write_struct(&png, nullptr);
    std::snprintf(state->message, sizeof state->message, "cannot start libpng");
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, state, on_write, on_flush);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8, PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  const std::size_t stride = static_cast<std::size_t>(width) * 3;
  for (int y = 0; y < height; ++y) png_write_row(png, rgb + static_cast<std::size_t>(y) * stride);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

// Appends the PNG of the RGB image to `file`.
void write_png(AtomicFile& file, const unsigned char* rgb, int width, int height) {
  PngState state{&file, nullptr, {}};
  if (!encode(&state, rgb, width, height)) {
    if (state.write_error) std::rethrow_exception(state.write_error);
    throw std::runtime_error(std::string(file.path()) + ": cannot write the PNG: " + state.message);
  }
}

struct Image {
  std::vector<unsigned char> rgb;
  int width, height;
};

// The checks and the picture: everything before the file is touched. Failures name `path`.
Image draw(const std::string& path, const double* weights, long rows, long cols, long row_stride,
           const HeatmapOptions& options) {
  const Plan plan = make_plan(path, rows, cols, options);
  if (weights == nullptr) throw failure(path, "no weights (null pointer)");
  if (rows > 1 && row_stride < cols) {
    throw failure(path, "row stride " + std::to_string(row_stride) + " is less than the " + std::to_string(cols) +
                            " columns");
  }
  return Image{render(plan, weights, rows, cols, row_stride), plan.g.width, plan.g.height};
}

}  // namespace

namespace detail {

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

HeatmapGeometry heatmap_geometry(const std::string& path, long rows, long cols, const HeatmapOptions& options) {
  return make_plan(path, rows, cols, options).g;
}

}  // namespace detail

void write_heatmap_png(AtomicFile& file, const double* weights, long rows, long cols, long row_stride,
                       const HeatmapOptions& options) {
  const Image image = draw(file.path(), weights, rows, cols, row_stride, options);
  write_png(file, image.rgb.data(), image.width, image.height);
}

void write_heatmap_png(const std::string& path, const double* weights, long rows, long cols, long row_stride,
                       const HeatmapOptions& options) {
  if (path.empty()) throw std::runtime_error("heatmap: empty output path");
  // Everything that can run out of memory happens before the file is created.
  const Image image = draw(path, weights, rows, cols, row_stride, options);
  AtomicFile file(path.c_str());
  write_png(file, image.rgb.data(), image.width, image.height);
  file.commit();
}

}  // namespace cli
}  // namespace EigenAttention
