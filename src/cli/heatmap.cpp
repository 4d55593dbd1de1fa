// SPDX-License-Identifier: MIT
// PNG heatmaps of attention weights (heatmap.hpp): lay out (heatmap_layout), draw into an RGB
// buffer (heatmap_raster, heatmap_text), encode with libpng (heatmap_png) into an AtomicFile.
#include "heatmap.hpp"

#include <stdexcept>
#include <string>
#include <vector>

#include <EigenAttention/AtomicFile.hpp>

#include "../index.hpp"
#include "../text.hpp"
#include "heatmap_layout.hpp"
#include "heatmap_png.hpp"
#include "heatmap_raster.hpp"

namespace EigenAttention {
namespace cli {

namespace {

struct Image {
  std::vector<unsigned char> rgb;
  int width, height;
};

// The checks and the picture: everything before the file is touched. Failures name `path`.
Image draw(const std::string& path, const double* weights, index_t rows, index_t cols, index_t row_stride,
           const HeatmapOptions& options) {
  const detail::Plan plan = detail::make_plan(path, rows, cols, options);
  if (weights == nullptr) throw detail::heatmap_failure(path, "no weights (null pointer)");
  if (rows > 1 && row_stride < cols) {
    throw detail::heatmap_failure(path, "row stride " + std::to_string(row_stride) + " is less than the " +
                                            EigenAttention::internal::counted(cols, "column"));
  }
  return Image{detail::render(plan, weights, rows, cols, row_stride), plan.g.width, plan.g.height};
}

}  // namespace

namespace detail {

HeatmapGeometry heatmap_geometry(const std::string& path, index_t rows, index_t cols,
                                 const HeatmapOptions& options) {
  return make_plan(path, rows, cols, options).g;
}

}  // namespace detail

void write_heatmap_png(AtomicFile& file, const double* weights, index_t rows, index_t cols,
                       index_t row_stride, const HeatmapOptions& options) {
  const Image image = draw(file.path(), weights, rows, cols, row_stride, options);
  detail::write_png(file, image.rgb.data(), image.width, image.height);
}

void write_heatmap_png(const std::string& path, const double* weights, index_t rows, index_t cols,
                       index_t row_stride, const HeatmapOptions& options) {
  if (path.empty()) throw std::runtime_error("heatmap: empty output path");
  // Everything that can run out of memory happens before the file is created.
  const Image image = draw(path, weights, rows, cols, row_stride, options);
  AtomicFile file(path.c_str());
  detail::write_png(file, image.rgb.data(), image.width, image.height);
  file.commit();
}

}  // namespace cli
}  // namespace EigenAttention
