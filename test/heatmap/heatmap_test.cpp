// SPDX-License-Identifier: MIT
// The heatmap renderer (src/cli/heatmap.cpp): render, decode the PNG back with libpng, check the
// size, the format, the colours under known cells, the colour bar and legend, and that failures
// throw and leave no file behind.
//
//   eigen_attention_heatmap_test [--out DIR] [--sample PATH]
// --out DIR keeps the images in DIR (otherwise a fresh temporary directory, removed at the end);
// --sample PATH also writes an example heatmap to PATH.
#include "heatmap.hpp"

#include <png.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/stat.h>
#include <unistd.h>
#endif

namespace fs = std::filesystem;
using EigenAttention::cli::HeatmapOptions;
using EigenAttention::cli::HeatmapScale;
using EigenAttention::cli::write_heatmap_png;
using EigenAttention::cli::detail::colour_map;
using EigenAttention::cli::detail::colour_scale;
using EigenAttention::cli::detail::heatmap_geometry;
using EigenAttention::cli::detail::HeatmapGeometry;
using EigenAttention::cli::detail::kMaskedColour;
using EigenAttention::cli::detail::kNanColour;
using EigenAttention::cli::detail::Rgb;

namespace {

int failures = 0;

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      ++failures;                                                                   \
      std::cerr << __FILE__ << ":" << __LINE__ << ": CHECK failed: " #cond << "\n"; \
    }                                                                               \
  } while (0)

std::ostream& operator<<(std::ostream& os, Rgb c) {
  return os << "(" << int(c.r) << ", " << int(c.g) << ", " << int(c.b) << ")";
}

#define CHECK_COLOUR(actual, expected)                                                                     \
  do {                                                                                                     \
    const Rgb a_ = (actual), e_ = (expected);                                                              \
    if (a_ != e_) {                                                                                        \
      ++failures;                                                                                          \
      std::cerr << __FILE__ << ":" << __LINE__ << ": colour " << a_ << " != " << e_ << " (" #actual ")\n"; \
    }                                                                                                      \
  } while (0)

constexpr Rgb kTop{253, 231, 37};  // the colour map's top (the largest weight)
constexpr Rgb kBottom{68, 1, 84};  // and its bottom

double luminance(Rgb c) { return 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b; }

struct Image {
  int width = 0, height = 0;
  std::vector<unsigned char> rgb;
  Rgb at(int x, int y) const {
    const unsigned char* p = &rgb[(static_cast<std::size_t>(y) * width + x) * 3];
    return Rgb{p[0], p[1], p[2]};
  }
};

// The IHDR as stored (bit depth and colour type), then the pixels through libpng's reader.
Image read_png(const fs::path& path, bool* rgb8) {
  unsigned char header[33] = {};
  {
    std::ifstream in(path, std::ios::binary);
    in.read(reinterpret_cast<char*>(header), sizeof header);
    if (!in) throw std::runtime_error(path.string() + ": too short for a PNG");
  }
  static const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  const bool ihdr = std::memcmp(header, signature, 8) == 0 && std::memcmp(header + 12, "IHDR", 4) == 0;
  *rgb8 = ihdr && header[24] == 8 && header[25] == 2;  // bit depth 8, colour type 2 (RGB)

  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&image, path.string().c_str())) {
    throw std::runtime_error(path.string() + ": " + image.message);
  }
  *rgb8 = *rgb8 && image.format == PNG_FORMAT_RGB;
  image.format = PNG_FORMAT_RGB;
  Image out;
  out.width = static_cast<int>(image.width);
  out.height = static_cast<int>(image.height);
  out.rgb.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, out.rgb.data(), 0, nullptr)) {
    png_image_free(&image);
    throw std::runtime_error(path.string() + ": " + image.message);
  }
  return out;
}

// Decodes, checks the size against the geometry and the format; the image.
Image load_checked(const fs::path& path, const HeatmapGeometry& g) {
  bool rgb8 = false;
  Image image = read_png(path, &rgb8);
  CHECK(rgb8);
  CHECK(image.width == g.width);
  CHECK(image.height == g.height);
  return image;
}

Rgb cell_colour(const Image& image, const HeatmapGeometry& g, long i, long j) {
  return image.at(g.heat_x + static_cast<int>(j) * g.cell_w + g.cell_w / 2,
                  g.heat_y + static_cast<int>(i) * g.cell_h + g.cell_h / 2);
}

bool inside_heat(const HeatmapGeometry& g, int x, int y) {
  return x >= g.heat_x && x < g.heat_x + g.cell_cols * g.cell_w && y >= g.heat_y &&
         y < g.heat_y + g.cell_rows * g.cell_h;
}

// Pixels of colour c outside the cells (legend swatches, the colour bar).
long count_outside_heat(const Image& image, const HeatmapGeometry& g, Rgb c) {
  long n = 0;
  for (int y = 0; y < image.height; ++y) {
    for (int x = 0; x < image.width; ++x) {
      if (!inside_heat(g, x, y) && image.at(x, y) == c) ++n;
    }
  }
  return n;
}

long count_in(const Image& image, int x0, int y0, int x1, int y1, Rgb c) {
  long n = 0;
  for (int y = std::max(y0, 0); y < std::min(y1, image.height); ++y) {
    for (int x = std::max(x0, 0); x < std::min(x1, image.width); ++x) n += image.at(x, y) == c;
  }
  return n;
}

void check_colour_bar(const Image& image, const HeatmapGeometry& g) {
  const int x = g.bar_x + g.bar_w / 2;
  CHECK_COLOUR(image.at(x, g.bar_y), kTop);
  CHECK_COLOUR(image.at(x, g.bar_y + g.bar_h - 1), kBottom);
  CHECK(luminance(image.at(x, g.bar_y)) > 200);
  CHECK(luminance(image.at(x, g.bar_y + g.bar_h - 1)) < 40);
  // Labels right of the bar.
  CHECK(count_in(image, g.bar_x + g.bar_w + 1, g.bar_y - 8, g.width, g.bar_y + g.bar_h + 8, Rgb{0, 0, 0}) >
        20);
}

std::set<std::string> listing(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename().string());
  return names;
}

bool throws_with_prefix(const std::string& path, const double* w, long rows, long cols, long stride,
                        const HeatmapOptions& options) {
  try {
    write_heatmap_png(path, w, rows, cols, stride, options);
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    if (what.rfind(path + ": ", 0) == 0) return true;
    std::cerr << "unexpected message: " << what << "\n";
    return false;
  }
  return false;
}

std::vector<double> causal(int n) {
  std::vector<double> w(static_cast<std::size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j <= i; ++j) w[static_cast<std::size_t>(i) * n + j] = 1.0 / (i + 1);
  }
  return w;
}

void test_causal(const fs::path& dir) {
  const std::vector<double> w = causal(6);
  HeatmapOptions options;
  options.row_labels = {"The", "cat", "sat", "on", "the", "mat"};
  options.col_labels = options.row_labels;
  options.title = "batch 0, head 3";
  const fs::path path = dir / "causal.png";
  write_heatmap_png(path.string(), w.data(), 6, 6, 6, options);
  const HeatmapGeometry g = heatmap_geometry(path.string(), 6, 6, options);
  CHECK(g.block_rows == 1 && g.block_cols == 1 && g.cell_rows == 6 && g.cell_cols == 6);
  CHECK(g.cell_w == g.cell_h && g.cell_w >= 4 && g.cell_w <= 24);
  CHECK(g.width <= 1400 && g.height <= 1400);
  const Image image = load_checked(path, g);
  CHECK_COLOUR(colour_map(1.0), kTop);
  CHECK_COLOUR(colour_map(0.0), kBottom);
  CHECK_COLOUR(cell_colour(image, g, 0, 0), kTop);           // the max weight
  CHECK_COLOUR(cell_colour(image, g, 0, 5), kMaskedColour);  // masked
  CHECK(luminance(cell_colour(image, g, 0, 0)) > 200);
  CHECK(luminance(cell_colour(image, g, 0, 5)) < 40);
  CHECK(kMaskedColour != kBottom && kMaskedColour != kNanColour);
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 6; ++j) {
      CHECK_COLOUR(cell_colour(image, g, i, j), j <= i ? colour_map(1.0 / (i + 1)) : kMaskedColour);
    }
  }
  // Whole cells are filled: the cell's corners have its colour too.
  CHECK_COLOUR(image.at(g.heat_x, g.heat_y), kTop);
  CHECK_COLOUR(image.at(g.heat_x + g.cell_w - 1, g.heat_y + g.cell_h - 1), kTop);
  check_colour_bar(image, g);
  CHECK(count_outside_heat(image, g, kMaskedColour) > 0);  // legend swatch
  CHECK(count_outside_heat(image, g, kNanColour) == 0);    // no NaN, no NaN legend
  // Text: the title above, row labels left, column labels below.
  const Rgb black{0, 0, 0};
  CHECK(count_in(image, 0, 0, image.width, g.heat_y - 2, black) > 50);
  CHECK(count_in(image, 0, g.heat_y, g.heat_x - 2, g.heat_y + 6 * g.cell_h, black) > 100);
  CHECK(count_in(image, g.heat_x, g.heat_y + 6 * g.cell_h + 2, g.heat_x + 6 * g.cell_w, image.height, black) >
        100);
}

void test_one_by_one(const fs::path& dir) {
  const double w = 0.7;
  const fs::path path = dir / "one.png";
  write_heatmap_png(path.string(), &w, 1, 1, 1, HeatmapOptions{});
  const HeatmapGeometry g = heatmap_geometry(path.string(), 1, 1, HeatmapOptions{});
  CHECK(g.cell_rows == 1 && g.cell_cols == 1 && g.cell_w == 24 && g.cell_h == 24);
  CHECK(g.width < 400 && g.height < 400);
  const Image image = load_checked(path, g);
  CHECK_COLOUR(cell_colour(image, g, 0, 0), kTop);  // the scale tops out at the max, 0.7
  check_colour_bar(image, g);
  CHECK(count_outside_heat(image, g, kMaskedColour) == 0);  // no zeros, no legend
}

void test_pooled(const fs::path& dir) {
  const long rows = 1000, cols = 700, stride = 704;
  // Padding holds NaN: reading it would show magenta.
  std::vector<double> w(static_cast<std::size_t>(rows * stride), std::numeric_limits<double>::quiet_NaN());
  for (long i = 0; i < rows; ++i) {
    for (long j = 0; j < cols; ++j) w[static_cast<std::size_t>(i * stride + j)] = 0.001;
  }
  const auto set = [&](long i, long j, double v) { w[static_cast<std::size_t>(i * stride + j)] = v; };
  for (long i = 20; i < 22; ++i) {
    for (long j = 40; j < 42; ++j) set(i, j, 0.9);  // block (10, 20): the max
  }
  set(6, 8, 0.8), set(6, 9, 0.0), set(7, 8, 0.0), set(7, 9, 0.0);  // block (3, 4): mean 0.2
  for (long i = 998; i < 1000; ++i) {
    for (long j = 698; j < 700; ++j) set(i, j, 0.0);  // block (499, 349): masked
  }
  const fs::path path = dir / "pooled.png";
  HeatmapOptions options;
  options.title = "pooled";
  write_heatmap_png(path.string(), w.data(), rows, cols, stride, options);
  const HeatmapGeometry g = heatmap_geometry(path.string(), rows, cols, options);
  CHECK(g.block_rows == 2 && g.block_cols == 2 && g.cell_rows == 500 && g.cell_cols == 350);
  CHECK(g.cell_w == g.cell_h && g.cell_w >= 1);
  CHECK(g.width <= 1500 && g.height <= 1500);
  const Image image = load_checked(path, g);
  CHECK_COLOUR(cell_colour(image, g, 10, 20), kTop);
  CHECK_COLOUR(cell_colour(image, g, 3, 4), colour_map(0.2 / 0.9));
  CHECK_COLOUR(cell_colour(image, g, 499, 349), kMaskedColour);
  CHECK_COLOUR(cell_colour(image, g, 0, 0), colour_map(0.001 / 0.9));
  CHECK_COLOUR(cell_colour(image, g, 499, 0), colour_map(0.001 / 0.9));
  CHECK(count_in(image, 0, 0, image.width, image.height, kNanColour) == 0);
  check_colour_bar(image, g);
  // The largest pooled dimension is not over max_cells, and a custom max_cells is honoured.
  options.max_cells = 100;
  const HeatmapGeometry g100 = heatmap_geometry(path.string(), rows, cols, options);
  CHECK(g100.block_rows == 10 && g100.block_cols == 7 && g100.cell_rows == 100 && g100.cell_cols == 100);
  options.max_cells = 300;  // 1000 / 300 -> blocks of 4, the last one short
  const HeatmapGeometry g300 = heatmap_geometry(path.string(), rows, cols, options);
  CHECK(g300.block_rows == 4 && g300.cell_rows == 250 && g300.block_cols == 3 && g300.cell_cols == 234);
  const fs::path path300 = dir / "pooled300.png";
  write_heatmap_png(path300.string(), w.data(), rows, cols, stride, options);
  const Image image300 = load_checked(path300, g300);
  // The last column block holds column 699 alone: 0.001 in most rows, 0 at rows 998-999.
  CHECK_COLOUR(cell_colour(image300, g300, 0, 233), colour_map(0.001 / (0.9 * 4 / 12 + 0.001 * 8 / 12)));
}

void test_nan(const fs::path& dir) {
  std::vector<double> w(4 * 5);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 5; ++j) w[static_cast<std::size_t>(i * 5 + j)] = 0.1 + 0.1 * ((i + j) % 4);
  }
  w[2 * 5 + 3] = std::numeric_limits<double>::quiet_NaN();
  const fs::path path = dir / "nan.png";
  HeatmapOptions options;
  options.col_labels = {"a", "b", "c", "d", "e"};
  write_heatmap_png(path.string(), w.data(), 4, 5, 5, options);
  const HeatmapGeometry g = heatmap_geometry(path.string(), 4, 5, options);
  const Image image = load_checked(path, g);
  CHECK_COLOUR(cell_colour(image, g, 2, 3), kNanColour);
  CHECK_COLOUR(cell_colour(image, g, 0, 3), kTop);  // 0.4, the largest finite weight
  CHECK_COLOUR(cell_colour(image, g, 0, 0), colour_map(0.25));
  CHECK(count_outside_heat(image, g, kNanColour) > 0);      // legend swatch
  CHECK(count_outside_heat(image, g, kMaskedColour) == 0);  // no zeros
  check_colour_bar(image, g);
}

void test_odd_labels(const fs::path& dir) {
  // Long, non-ASCII and control characters; an empty label; a pooled dimension with labels.
  std::vector<double> w(3 * 600, 1.0 / 600);
  HeatmapOptions options;
  options.row_labels = {"\xE6\x97\xA5\xE6\x9C\xAC", "a label far too long to be shown whole", "\t"};
  options.col_labels.assign(600, "tok");
  options.title = std::string(300, 'T') + "\xC3\xA9";
  const fs::path path = dir / "labels.png";
  write_heatmap_png(path.string(), w.data(), 3, 600, 600, options);
  const HeatmapGeometry g = heatmap_geometry(path.string(), 3, 600, options);
  CHECK(g.block_cols == 2 && g.cell_cols == 300 && g.block_rows == 1);
  CHECK(g.cell_h > g.cell_w);  // a thin side grows
  const Image image = load_checked(path, g);
  CHECK_COLOUR(cell_colour(image, g, 1, 100), kTop);  // all equal: all at the max
  CHECK(g.width <= 1600);
  // Uniform vertical token labels, and a tiny cell_pixels.
  std::vector<double> u(40 * 40, 1.0 / 40);
  HeatmapOptions tiny;
  tiny.cell_pixels = 1;
  tiny.col_labels.assign(40, "key");
  const fs::path path_tiny = dir / "tiny.png";
  write_heatmap_png(path_tiny.string(), u.data(), 40, 40, 40, tiny);
  const HeatmapGeometry gt = heatmap_geometry(path_tiny.string(), 40, 40, tiny);
  CHECK(gt.cell_w == 1 && gt.cell_h == 1);
  load_checked(path_tiny, gt);
}

// --scale log: colours by log10(w) from the smallest positive weight (at most 6 decades below the
// largest) to the largest; smaller weights at the bottom colour with a legend entry, zeros masked.
void test_log_scale(const fs::path& dir) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Row 0: the top, 1e-2, 1e-3 (the middle of 6 decades), 1e-6 (the bottom); row 1: 1e-9 (below
  // the range: the bottom colour), 0 (masked), NaN, 10^-4.5.
  const std::vector<double> w = {1.0, 1e-2, 1e-3, 1e-6, 1e-9, 0.0, nan, std::pow(10.0, -4.5)};
  HeatmapOptions log_options;
  log_options.scale = HeatmapScale::Log;
  const fs::path path = dir / "log.png", linear_path = dir / "log_linear.png";
  write_heatmap_png(path.string(), w.data(), 2, 4, 4, log_options);
  write_heatmap_png(linear_path.string(), w.data(), 2, 4, 4, HeatmapOptions{});
  const HeatmapGeometry g = heatmap_geometry(path.string(), 2, 4, log_options);
  const HeatmapGeometry gl = heatmap_geometry(linear_path.string(), 2, 4, HeatmapOptions{});
  const Image image = load_checked(path, g), linear = load_checked(linear_path, gl);
  const auto expected = [](double v) { return colour_map((std::log10(v) + 6) / 6); };  // [1e-6, 1]
  CHECK_COLOUR(cell_colour(image, g, 0, 0), kTop);
  CHECK_COLOUR(cell_colour(image, g, 0, 1), expected(1e-2));
  CHECK_COLOUR(cell_colour(image, g, 0, 2), colour_map(0.5));
  CHECK_COLOUR(cell_colour(image, g, 0, 3), kBottom);
  CHECK_COLOUR(cell_colour(image, g, 1, 0), kBottom);  // clamped
  CHECK_COLOUR(cell_colour(image, g, 1, 1), kMaskedColour);
  CHECK_COLOUR(cell_colour(image, g, 1, 2), kNanColour);
  CHECK_COLOUR(cell_colour(image, g, 1, 3), colour_map(0.25));
  // On the linear scale all but the top are at (or next to) the bottom: dark.
  for (long j = 1; j < 4; ++j) CHECK(luminance(cell_colour(linear, gl, 0, j)) < 40);
  CHECK(luminance(cell_colour(image, g, 0, 1)) > 100);
  check_colour_bar(image, g);
  // The colour bar's labels are weights at quarters of the log range: 1e-06, 3.16e-05, 0.001,
  // 0.0316, 1 (they differ from the linear bar's 0, 0.25, ...).
  const auto scale = colour_scale(HeatmapScale::Log, w);
  CHECK(scale.log && scale.high == 1.0 && std::abs(scale.low - 1e-6) < 1e-20);
  CHECK(std::abs(scale.weight_at(0.5) - 1e-3) < 1e-15);
  CHECK(std::abs(scale.weight_at(0.25) - std::pow(10.0, -4.5)) < 1e-18);
  const auto label_pixels = [](const Image& im, const HeatmapGeometry& gg) {
    std::vector<Rgb> px;
    for (int y = gg.bar_y - 8; y < gg.bar_y + gg.bar_h + 8; ++y)
      for (int x = gg.bar_x + gg.bar_w + 2; x < gg.width; ++x) px.push_back(im.at(x, y));
    return px;
  };
  CHECK(g.bar_y == gl.bar_y && g.bar_h == gl.bar_h);
  const auto a = label_pixels(image, g), b = label_pixels(linear, gl);
  CHECK(!std::equal(a.begin(), a.end(), b.begin(), b.end()));
  // The legend: "log scale" (text under the bar), then swatches for 0, NaN and "< 1e-06" (the
  // bottom colour): a 14 x 14 swatch of it besides the bar's bottom row.
  const Rgb black{0, 0, 0};
  const int legend_top = g.bar_y + g.bar_h + 2;
  CHECK(count_in(image, g.bar_x, legend_top, g.width, legend_top + 14, black) > 20);
  CHECK(count_in(linear, gl.bar_x, legend_top, gl.width, legend_top + 14, black) <
        count_in(image, g.bar_x, legend_top, g.width, legend_top + 14, black));
  CHECK(count_outside_heat(image, g, kBottom) >= g.bar_w + 14 * 14);
  CHECK(count_outside_heat(linear, gl, kBottom) < gl.bar_w + 14 * 14);
  CHECK(count_outside_heat(image, g, kMaskedColour) > 0);
  CHECK(count_outside_heat(image, g, kNanColour) > 0);
  CHECK(g.height >= gl.height);
  // Without a weight below the range there is no "<" entry.
  const std::vector<double> w2 = {1.0, 1e-2, 1e-3, 1e-6};
  const fs::path path2 = dir / "log_full.png";
  write_heatmap_png(path2.string(), w2.data(), 1, 4, 4, log_options);
  const HeatmapGeometry g2 = heatmap_geometry(path2.string(), 1, 4, log_options);
  const Image image2 = load_checked(path2, g2);
  CHECK(count_outside_heat(image2, g2, kBottom) < g2.bar_w + 14 * 14);
  CHECK_COLOUR(cell_colour(image2, g2, 0, 3), kBottom);
  CHECK_COLOUR(cell_colour(image2, g2, 0, 2), colour_map(0.5));
  // A narrower range: the smallest positive weight is the bottom (1e-2 .. 1e-1: 1 decade).
  const std::vector<double> w3 = {0.1, 0.01, std::pow(10.0, -1.5), 0.0};
  const fs::path path3 = dir / "log_narrow.png";
  write_heatmap_png(path3.string(), w3.data(), 1, 4, 4, log_options);
  const HeatmapGeometry g3 = heatmap_geometry(path3.string(), 1, 4, log_options);
  const Image image3 = load_checked(path3, g3);
  CHECK_COLOUR(cell_colour(image3, g3, 0, 0), kTop);
  CHECK_COLOUR(cell_colour(image3, g3, 0, 1), kBottom);
  CHECK_COLOUR(cell_colour(image3, g3, 0, 2), colour_map(0.5));
  CHECK_COLOUR(cell_colour(image3, g3, 0, 3), kMaskedColour);
  // One positive value: it is the top, the bar spans the decade below it; no positive value: 0.1 .. 1.
  const auto one = colour_scale(HeatmapScale::Log, std::vector<double>{0.25, 0.0, 0.25});
  CHECK(one.high == 0.25 && one.low == 0.025 && one.position(0.25) == 1.0);
  const auto none = colour_scale(HeatmapScale::Log, std::vector<double>{0.0, nan});
  CHECK(none.high == 1.0 && none.low == 0.1);
  const auto lin = colour_scale(HeatmapScale::Linear, w);
  CHECK(!lin.log && lin.high == 1.0 && lin.position(0.5) == 0.5);
}

void test_overwrite(const fs::path& dir) {
  const fs::path path = dir / "overwrite.png";
  const std::vector<double> a = causal(3), b = causal(9);
  write_heatmap_png(path.string(), a.data(), 3, 3, 3, HeatmapOptions{});
  write_heatmap_png(path.string(), b.data(), 9, 9, 9, HeatmapOptions{});
  load_checked(path, heatmap_geometry(path.string(), 9, 9, HeatmapOptions{}));
}

void test_failures(const fs::path& dir) {
  const std::vector<double> w = causal(4);
  const std::set<std::string> before = listing(dir);
  // A directory that does not exist.
  const std::string missing = (dir / "no such dir" / "x.png").string();
  CHECK(throws_with_prefix(missing, w.data(), 4, 4, 4, HeatmapOptions{}));
  CHECK(!fs::exists(dir / "no such dir"));
  // The path is a directory: the temporary file is written, the rename fails, it is removed.
  fs::create_directory(dir / "a directory");
  const std::string directory = (dir / "a directory").string();
  CHECK(throws_with_prefix(directory, w.data(), 4, 4, 4, HeatmapOptions{}));
  CHECK(fs::is_directory(directory) && fs::is_empty(directory));
  fs::remove(dir / "a directory");
#if defined(__unix__) || defined(__APPLE__)
  // A directory without write permission (root writes anyway, so only checked for others).
  if (::geteuid() != 0) {
    const fs::path locked = dir / "locked";
    fs::create_directory(locked);
    ::chmod(locked.c_str(), 0555);
    CHECK(throws_with_prefix((locked / "x.png").string(), w.data(), 4, 4, 4, HeatmapOptions{}));
    CHECK(fs::is_empty(locked));
    ::chmod(locked.c_str(), 0755);
    fs::remove(locked);
  }
#endif
  // Argument errors.
  const std::string path = (dir / "bad.png").string();
  HeatmapOptions labels;
  labels.row_labels = {"a", "b", "c"};
  CHECK(throws_with_prefix(path, w.data(), 4, 4, 4, labels));
  labels.row_labels.clear();
  labels.col_labels = {"a", "b", "c", "d", "e"};
  CHECK(throws_with_prefix(path, w.data(), 4, 4, 4, labels));
  CHECK(throws_with_prefix(path, w.data(), 0, 4, 4, HeatmapOptions{}));
  CHECK(throws_with_prefix(path, w.data(), 4, 0, 4, HeatmapOptions{}));
  CHECK(throws_with_prefix(path, nullptr, 4, 4, 4, HeatmapOptions{}));
  CHECK(throws_with_prefix(path, w.data(), 4, 4, 3, HeatmapOptions{}));
  HeatmapOptions bad;
  bad.max_cells = 0;
  CHECK(throws_with_prefix(path, w.data(), 4, 4, 4, bad));
  bad.max_cells = 512;
  bad.cell_pixels = -1;
  CHECK(throws_with_prefix(path, w.data(), 4, 4, 4, bad));
  bad.cell_pixels = 5000;
  CHECK(throws_with_prefix(path, w.data(), 4, 4, 4, bad));
  CHECK(listing(dir) == before);
}

// The argument errors' messages, a count of one in the singular.
void test_messages(const fs::path& dir) {
  const std::string path = (dir / "bad.png").string();
  const std::vector<double> w(4, 0.25);
  const auto message = [&](long rows, long cols, long stride, const HeatmapOptions& options) {
    try {
      write_heatmap_png(path, w.data(), rows, cols, stride, options);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  HeatmapOptions labels;
  labels.row_labels = {"a"};
  CHECK(message(2, 2, 2, labels) == path + ": 1 row label for 2 rows");
  labels.row_labels = {"a", "b"};
  CHECK(message(1, 2, 2, labels) == path + ": 2 row labels for 1 row");
  labels.row_labels.clear();
  labels.col_labels = {"a", "b"};
  CHECK(message(2, 1, 1, labels) == path + ": 2 column labels for 1 column");
  labels.col_labels = {"a"};
  CHECK(message(1, 2, 2, labels) == path + ": 1 column label for 2 columns");
  CHECK(message(2, 1, 0, HeatmapOptions{}) == path + ": row stride 0 is less than the 1 column");
  CHECK(message(2, 2, 1, HeatmapOptions{}) == path + ": row stride 1 is less than the 2 columns");
  CHECK(!fs::exists(path));
}

void write_sample(const std::string& path) {
  // A 12-token causal pattern: attention to the first token, to the previous one, and to itself.
  const std::vector<std::string> tokens = {"<s>",  "The", "quick", "brown", "fox", "jumps",
                                           "over", "the", "lazy",  "dog",   ".",   "\xE2\x9C\x93"};
  const int n = static_cast<int>(tokens.size());
  std::vector<double> w(static_cast<std::size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i) {
    double sum = 0.0;
    for (int j = 0; j <= i; ++j) {
      const double logit = (j == 0 ? 2.0 : 0.0) + (j == i - 1 ? 1.5 : 0.0) + (j == i ? 1.0 : 0.0) +
                           0.3 * std::sin(1.7 * i + 2.3 * j);
      w[static_cast<std::size_t>(i * n + j)] = std::exp(logit);
      sum += std::exp(logit);
    }
    for (int j = 0; j <= i; ++j) w[static_cast<std::size_t>(i * n + j)] /= sum;
  }
  w[static_cast<std::size_t>(5 * n + 2)] = std::numeric_limits<double>::quiet_NaN();
  HeatmapOptions options;
  options.row_labels = tokens;
  options.col_labels = tokens;
  options.title = "batch 0, head 3";
  write_heatmap_png(path, w.data(), n, n, n, options);
}

}  // namespace

int main(int argc, char** argv) {
  fs::path out;
  std::string sample;
  for (int k = 1; k < argc; ++k) {
    const std::string arg = argv[k];
    if (arg == "--out" && k + 1 < argc) {
      out = argv[++k];
    } else if (arg == "--sample" && k + 1 < argc) {
      sample = argv[++k];
    } else {
      std::cerr << "usage: " << argv[0] << " [--out DIR] [--sample PATH]\n";
      return 2;
    }
  }
  const bool keep = !out.empty();
  if (!keep) {
    const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
    out = fs::temp_directory_path() / ("eigen_attention_heatmap_test-" + std::to_string(stamp));
    fs::remove_all(out);
  }
  fs::create_directories(out);

  try {
    test_causal(out);
    test_one_by_one(out);
    test_pooled(out);
    test_nan(out);
    test_odd_labels(out);
    test_log_scale(out);
    test_overwrite(out);
    test_failures(out);
    test_messages(out);
    // Only the images asked for, no temporary files.
    const std::set<std::string> expected = {"causal.png", "one.png",        "pooled.png",   "pooled300.png",
                                            "nan.png",    "labels.png",     "tiny.png",     "overwrite.png",
                                            "log.png",    "log_linear.png", "log_full.png", "log_narrow.png"};
    const std::set<std::string> found = listing(out);
    CHECK(found == expected);
    for (const auto& name : found) {
      if (!expected.count(name)) std::cerr << "unexpected file: " << name << "\n";
    }
    if (!sample.empty()) write_sample(sample);
  } catch (const std::exception& e) {
    ++failures;
    std::cerr << "exception: " << e.what() << "\n";
  }
  if (!keep) fs::remove_all(out);

  if (failures != 0) {
    std::cerr << failures << " check(s) failed\n";
    return 1;
  }
  std::cout << "heatmap: all checks passed\n";
  return 0;
}
