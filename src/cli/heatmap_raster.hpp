// SPDX-License-Identifier: MIT
// The heatmap's pixels (heatmap.hpp): an RGB canvas with rectangles and frames, the picture of
// the weights drawn on it, and the colour map (detail::colour_map, declared in heatmap.hpp).
#pragma once

#include <cstddef>
#include <vector>

#include "../index.hpp"
#include "heatmap.hpp"
#include "heatmap_layout.hpp"

namespace EigenAttention {
namespace cli {
namespace detail {

constexpr Rgb kBlack{0, 0, 0};
constexpr Rgb kTickColour{64, 64, 64};

// A width x height RGB image (8 bits a channel, rows top to bottom), white to begin with.
// Drawing outside it is clipped.
class Canvas {
 public:
  Canvas(int width, int height);

  std::vector<unsigned char> take() { return std::move(rgb_); }

  void set(int x, int y, Rgb c);
  void fill(int x, int y, int w, int h, Rgb c);
  // A 1-pixel frame just outside the rectangle.
  void frame(int x, int y, int w, int h, Rgb c);

 private:
  int width_, height_;
  std::vector<unsigned char> rgb_;
};

// The picture of the rows x cols weights (rows row_stride apart) as `plan` lays it out: the
// cells (pooled), the frame, title, ticks and labels, the colour bar and the legend, as RGB.
std::vector<unsigned char> render(const Plan& plan, const double* weights, index_t rows, index_t cols,
                                  index_t row_stride);

}  // namespace detail
}  // namespace cli
}  // namespace EigenAttention
