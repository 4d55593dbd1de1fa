// SPDX-License-Identifier: MIT
#include "plot.hpp"

#include <stdexcept>

#include <EigenAttention/Npy.hpp>

#include <cstdio>
#include <filesystem>
#include <type_traits>

#include <Eigen/Core>

#include "../index.hpp"
#include "commands.hpp"
#include "heatmap.hpp"
#include "util.hpp"

namespace EigenAttention {
namespace cli {

namespace {

// A weight as a double, exactly (bfloat16 and half through float).
template <typename T>
double widen(T x) {
  if constexpr (std::is_same_v<T, Eigen::bfloat16> || std::is_same_v<T, Eigen::half>) {
    return static_cast<double>(static_cast<float>(x));
  } else {
    return static_cast<double>(x);
  }
}

}  // namespace

template <typename T>
void draw_weights(AtomicFile& file, const T* weights, std::int64_t rows, std::int64_t cols,
                  std::int64_t row_stride, const std::vector<std::string>& tokens, const std::string& title,
                  HeatmapScale scale) {
  if (rows < 1 || cols < 1) {
    throw Failure(file.path(), "the weights are " + std::to_string(rows) + " x " + std::to_string(cols) +
                                   "; there is nothing to draw");
  }
  // The renderer takes doubles: copy the rows x cols block (contiguous), widened exactly.
  std::vector<double> block(static_cast<std::size_t>(rows * cols));
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j)
      block[static_cast<std::size_t>(i * cols + j)] = widen(weights[i * row_stride + j]);

  HeatmapOptions options;
  options.title = title;
  options.scale = scale;
  if (!tokens.empty()) {
    options.col_labels = axis_labels(tokens, cols);
    if (rows == cols) options.row_labels = options.col_labels;
  }
  try {
    write_heatmap_png(file, block.data(), static_cast<index_t>(rows), static_cast<index_t>(cols),
                      static_cast<index_t>(cols), options);
  } catch (const npy::Error&) {
    throw;  // an I/O error, naming the file
  } catch (const std::runtime_error& e) {
    throw Failure(e.what());  // the renderer's refusal, naming the file: reported as the tool's own
  }
}

template void draw_weights<float>(AtomicFile&, const float*, std::int64_t, std::int64_t, std::int64_t,
                                  const std::vector<std::string>&, const std::string&, HeatmapScale);
template void draw_weights<double>(AtomicFile&, const double*, std::int64_t, std::int64_t, std::int64_t,
                                   const std::vector<std::string>&, const std::string&, HeatmapScale);
template void draw_weights<Eigen::half>(AtomicFile&, const Eigen::half*, std::int64_t, std::int64_t,
                                        std::int64_t, const std::vector<std::string>&, const std::string&,
                                        HeatmapScale);
template void draw_weights<Eigen::bfloat16>(AtomicFile&, const Eigen::bfloat16*, std::int64_t, std::int64_t,
                                            std::int64_t, const std::vector<std::string>&, const std::string&,
                                            HeatmapScale);

// ---------------------------------------------------------------------------------------------
// eigen-attention heatmap

namespace {

template <typename T>
void draw_from(const npy::Array& a, AtomicFile& file, std::int64_t offset, std::int64_t rows,
               std::int64_t cols, std::int64_t row_stride, const std::vector<std::string>& tokens,
               const std::string& title, HeatmapScale scale) {
  draw_weights<T>(file, a.data<T>() + offset, rows, cols, row_stride, tokens, title, scale);
}

std::string range_text(std::int64_t n, const char* one, const char* many) {
  return n == 1 ? "1 " + std::string(one) + " (0)"
                : std::to_string(n) + " " + many + " (0.." + std::to_string(n - 1) + ")";
}

}  // namespace

int heatmap_command(const HeatmapArgs& a) {
  if (a.scores.empty()) throw usage_error("--scores", "missing: the weights (SCORES.npy) are required");
  if (a.png.empty()) throw usage_error("--png", "missing: the output file (out.png) is required");
  Layout layout = Layout::BHTD;
  if (a.layout == "bthd") {
    layout = Layout::BTHD;
  } else if (a.layout != "bhtd") {
    throw usage_error("--layout", "'" + a.layout + "' is neither bhtd nor bthd");
  }
  HeatmapScale scale = HeatmapScale::Linear;
  if (a.scale == "log") {
    scale = HeatmapScale::Log;
  } else if (a.scale != "linear") {
    throw usage_error("--scale", "'" + a.scale + "' is neither linear nor log");
  }
  std::int64_t batch = 0, head = 0;
  if (!a.batch.empty()) {
    batch = parse_integer("--batch", a.batch);
    if (batch < 0) throw usage_error("--batch", "must be >= 0, got " + a.batch);
  }
  if (!a.head.empty()) {
    head = parse_integer("--head", a.head);
    if (head < 0) throw usage_error("--head", "must be >= 0, got " + a.head);
  }
  Progress progress(a.quiet);
  OutputFiles files;
  AtomicFile& png = files.add("--png", a.png);

  progress.phase("reading");
  const npy::Array s = npy::read(a.scores);
  if (s.dtype != npy::DType::Float32 && s.dtype != npy::DType::Float64 && s.dtype != npy::DType::Float16) {
    throw Failure(a.scores,
                  std::string("dtype ") + dtype_name(s.dtype) + "; weights are float16, float32 or float64");
  }
  const auto& d = s.shape;
  std::int64_t B = 1, H = 1, rows = 0, cols = 0, offset = 0, row_stride = 0;
  std::string title;
  if (d.size() == 2) {
    rows = d[0], cols = d[1];
  } else if (d.size() == 3) {  // [B, T_q, T_k]: averaged over heads
    B = d[0], rows = d[1], cols = d[2];
  } else if (d.size() == 4) {
    B = d[0];
    if (layout == Layout::BHTD) {
      H = d[1], rows = d[2], cols = d[3];
    } else {
      rows = d[1], H = d[2], cols = d[3];
    }
  } else {
    throw Failure(a.scores,
                  "shape " + shape_string(d) +
                      "; expected (T_q, T_k), (batch, T_q, T_k) (averaged over heads) or 4-D (" +
                      (layout == Layout::BHTD ? "batch, heads, T_q, T_k" : "batch, T_q, heads, T_k") + ")");
  }
  if (batch >= B) {
    throw usage_error("--batch", std::to_string(batch) + " is out of range: " + a.scores + " has " +
                                     range_text(B, "batch entry", "batch entries"));
  }
  if (head >= H) {
    throw usage_error("--head", std::to_string(head) + " is out of range: " + a.scores + " has " +
                                    range_text(H, "head", "heads"));
  }
  row_stride = d.size() == 4 && layout == Layout::BTHD ? H * cols : cols;
  offset = d.size() == 4 && layout == Layout::BTHD ? batch * rows * H * cols + head * cols
                                                   : (batch * H + head) * rows * cols;
  const std::string file = std::filesystem::path(a.scores).filename().string();
  if (d.size() == 2) {
    title = file;
  } else if (d.size() == 3) {
    title = file + ": batch " + std::to_string(batch) + ", mean over heads";
  } else {
    title = file + ": batch " + std::to_string(batch) + ", head " + std::to_string(head);
  }
  const std::vector<std::string> tokens =
      a.tokens.empty() ? std::vector<std::string>() : read_tokens(a.tokens);

  progress.phase("drawing");
  if (s.dtype == npy::DType::Float32) {
    draw_from<float>(s, png, offset, rows, cols, row_stride, tokens, title, scale);
  } else if (s.dtype == npy::DType::Float16) {
    draw_from<Eigen::half>(s, png, offset, rows, cols, row_stride, tokens, title, scale);
  } else {
    draw_from<double>(s, png, offset, rows, cols, row_stride, tokens, title, scale);
  }
  files.commit();
  progress.stop();
  if (!a.quiet) {
    std::printf("%s: heatmap of %s (%lld x %lld)\n", a.png.c_str(), title.c_str(),
                static_cast<long long>(rows), static_cast<long long>(cols));
  }
  return 0;
}

}  // namespace cli
}  // namespace EigenAttention
