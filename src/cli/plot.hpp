// Drawing attention weights as a PNG (on heatmap.hpp's renderer), for `eigen-attention heatmap`
// and `eigen-attention run --heatmap`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace EigenAttention {
namespace cli {

/// Draws the rows x cols weights at `weights` (rows `row_stride` elements apart) into the PNG
/// `path`. `tokens` (from a tokens file; empty: none given) label both axes when rows == cols,
/// else the keys (columns) only; positions beyond the tokens are labelled by their index.
/// Throws Failure naming `name` (the PNG the user asked for; `path` may be a temporary name)
/// when there is nothing to draw or the renderer fails.
template <typename T>
void draw_weights(const std::string& name, const std::string& path, const T* weights, std::int64_t rows,
                  std::int64_t cols, std::int64_t row_stride, const std::vector<std::string>& tokens,
                  const std::string& title);

}  // namespace cli
}  // namespace EigenAttention
