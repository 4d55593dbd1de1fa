// SPDX-License-Identifier: MIT
/// \file golden.hpp
/// Loads the golden cases of test/data/ (computed by PyTorch in float64). Format:
///
///     causal 0|1
///     align top_left|bottom_right
///     scale default|<number>
///     Q rows cols        then `rows` lines of `cols` numbers
///     K ..., V ..., SCORES ..., ATTN ..., LSE ... (T_q x 1; "-inf" for a fully masked row)
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "golden_format.hpp"
#include "reference.hpp"

#ifndef EIGEN_ATTENTION_TEST_DATA_DIR
#error "EIGEN_ATTENTION_TEST_DATA_DIR must name test/data (set by test/CMakeLists.txt)"
#endif

namespace ea_test {

/// The directory holding the golden cases (test/data of the source tree).
inline std::filesystem::path golden_data_dir() {
  return std::filesystem::path(EIGEN_ATTENTION_TEST_DATA_DIR);
}

/// The cases the suite expects to find there.
inline const std::vector<std::string>& expected_golden_files() {
  static const std::vector<std::string> names = {"dv_differs.txt",
                                                 "large_logits.txt",
                                                 "more_queries_bottom_right.txt",
                                                 "odd_block_edges.txt",
                                                 "one_token.txt",
                                                 "rect_keys.txt",
                                                 "rect_keys_causal_bottom_right.txt",
                                                 "rect_keys_causal_top_left.txt",
                                                 "scale_two.txt",
                                                 "seed_3x4.txt",
                                                 "seed_3x4_causal.txt"};
  return names;
}

struct GoldenCase {
  std::string name;
  MaskSpec mask;
  std::optional<double> scale;  ///< empty: default 1/sqrt(d_k)
  MatrixLD Q, K, V, scores, attn, lse;
};

namespace golden_detail {

inline MatrixLD read_matrix(golden_format::Reader& r, const std::string& name) {
  r.expect(name);
  const std::string rows_t = r.token("rows"), cols_t = r.token("cols");
  const long rows = std::stol(rows_t), cols = std::stol(cols_t);
  if (rows < 0 || cols < 0) r.fail("negative shape for " + name);
  MatrixLD m(rows, cols);
  for (long i = 0; i < rows; ++i)
    for (long j = 0; j < cols; ++j) m(i, j) = r.number(r.token(name));
  return m;
}

}  // namespace golden_detail

/// Parses one golden file; throws std::runtime_error naming the file on any format error.
inline GoldenCase load_golden(const std::filesystem::path& path) {
  using golden_detail::read_matrix;
  golden_format::Reader r(path, "golden file");
  GoldenCase g;
  g.name = path.stem().string();

  r.expect("causal");
  const std::string causal = r.token("causal flag");
  if (causal != "0" && causal != "1") r.fail("causal must be 0 or 1, found '" + causal + "'");
  g.mask.causal = causal == "1";

  r.expect("align");
  const std::string align = r.token("alignment");
  if (align != "top_left" && align != "bottom_right") r.fail("bad alignment '" + align + "'");
  g.mask.bottom_right = align == "bottom_right";

  r.expect("scale");
  const std::string scale = r.token("scale");
  if (scale != "default") g.scale = static_cast<double>(r.number(scale));

  g.Q = read_matrix(r, "Q");
  g.K = read_matrix(r, "K");
  g.V = read_matrix(r, "V");
  g.scores = read_matrix(r, "SCORES");
  g.attn = read_matrix(r, "ATTN");
  g.lse = read_matrix(r, "LSE");

  r.end_of_file();
  const auto tq = g.Q.rows(), tk = g.K.rows(), dk = g.Q.cols(), dv = g.V.cols();
  if (g.K.cols() != dk || g.V.rows() != tk || g.scores.rows() != tq || g.scores.cols() != tk ||
      g.attn.rows() != tq || g.attn.cols() != dv || g.lse.rows() != tq || g.lse.cols() != 1)
    r.fail("inconsistent shapes");
  return g;
}

/// Every *.txt under golden_data_dir(), sorted by name.
inline std::vector<std::filesystem::path> golden_files() { return golden_txt_files(golden_data_dir()); }

}  // namespace ea_test
