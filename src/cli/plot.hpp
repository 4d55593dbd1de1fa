// SPDX-License-Identifier: MIT
// Drawing attention weights as a PNG (on heatmap.hpp's renderer), for `eigen-attention heatmap`
// and `eigen-attention run --heatmap`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <EigenAttention/AtomicFile.hpp>

#include "heatmap.hpp"

namespace EigenAttention {
namespace cli {

/// Draws the rows x cols weights at `weights` (T: float, double, Eigen::half or Eigen::bfloat16;
/// rows `row_stride` elements apart) as a PNG into
/// `file` (the caller commits it). `tokens` (from a tokens file; empty: none given) label both
/// axes when rows == cols, else the keys (columns) only; positions beyond the tokens are
/// labelled by their index; `scale` maps weights to colours (heatmap.hpp). Throws Failure naming
/// file.path() when there is nothing to draw or the renderer refuses, npy::Error naming it on an
/// I/O error.
template <typename T>
void draw_weights(AtomicFile& file, const T* weights, std::int64_t rows, std::int64_t cols,
                  std::int64_t row_stride, const std::vector<std::string>& tokens, const std::string& title,
                  HeatmapScale scale = HeatmapScale::Linear);

}  // namespace cli
}  // namespace EigenAttention
