/// \file golden.hpp
/// Loads the golden cases of test/data/ (computed by PyTorch in float64). Format:
///
///     causal 0|1
///     align top_left|bottom_right
///     scale default|<number>
///     Q rows cols        then `rows` lines of `cols` numbers
///     K ..., V ..., SCORES ..., ATTN ..., LSE ... (T_q x 1; "-inf" for a fully masked row)
#pragma once

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

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

[[noreturn]] inline void fail(const std::filesystem::path& path, const std::string& what) {
  throw std::runtime_error("golden file " + path.string() + ": " + what);
}

inline std::string next_token(std::istream& in, const std::filesystem::path& path, const char* what) {
  std::string t;
  if (!(in >> t)) fail(path, std::string("unexpected end of file, wanted ") + what);
  return t;
}

inline long double parse_number(const std::string& t, const std::filesystem::path& path) {
  // strtold accepts "inf", "-inf" and "nan", which operator>> does not.
  char* end = nullptr;
  const long double x = std::strtold(t.c_str(), &end);
  if (end == t.c_str() || *end != '\0') fail(path, "not a number: '" + t + "'");
  return x;
}

inline void expect_key(std::istream& in, const std::filesystem::path& path, const std::string& key) {
  const std::string t = next_token(in, path, key.c_str());
  if (t != key) fail(path, "expected '" + key + "', found '" + t + "'");
}

inline MatrixLD read_matrix(std::istream& in, const std::filesystem::path& path, const std::string& name) {
  expect_key(in, path, name);
  const std::string r = next_token(in, path, "rows"), c = next_token(in, path, "cols");
  const long rows = std::stol(r), cols = std::stol(c);
  if (rows < 0 || cols < 0) fail(path, "negative shape for " + name);
  MatrixLD m(rows, cols);
  for (long i = 0; i < rows; ++i)
    for (long j = 0; j < cols; ++j) m(i, j) = parse_number(next_token(in, path, name.c_str()), path);
  return m;
}

}  // namespace golden_detail

/// Parses one golden file; throws std::runtime_error naming the file on any format error.
inline GoldenCase load_golden(const std::filesystem::path& path) {
  using namespace golden_detail;
  std::ifstream in(path);
  if (!in) fail(path, "cannot open");
  GoldenCase g;
  g.name = path.stem().string();

  expect_key(in, path, "causal");
  const std::string causal = next_token(in, path, "causal flag");
  if (causal != "0" && causal != "1") fail(path, "causal must be 0 or 1, found '" + causal + "'");
  g.mask.causal = causal == "1";

  expect_key(in, path, "align");
  const std::string align = next_token(in, path, "alignment");
  if (align != "top_left" && align != "bottom_right") fail(path, "bad alignment '" + align + "'");
  g.mask.bottom_right = align == "bottom_right";

  expect_key(in, path, "scale");
  const std::string scale = next_token(in, path, "scale");
  if (scale != "default") g.scale = static_cast<double>(parse_number(scale, path));

  g.Q = read_matrix(in, path, "Q");
  g.K = read_matrix(in, path, "K");
  g.V = read_matrix(in, path, "V");
  g.scores = read_matrix(in, path, "SCORES");
  g.attn = read_matrix(in, path, "ATTN");
  g.lse = read_matrix(in, path, "LSE");

  std::string extra;
  if (in >> extra) fail(path, "trailing content '" + extra + "'");
  const auto tq = g.Q.rows(), tk = g.K.rows(), dk = g.Q.cols(), dv = g.V.cols();
  if (g.K.cols() != dk || g.V.rows() != tk || g.scores.rows() != tq || g.scores.cols() != tk ||
      g.attn.rows() != tq || g.attn.cols() != dv || g.lse.rows() != tq || g.lse.cols() != 1)
    fail(path, "inconsistent shapes");
  return g;
}

/// Every *.txt under golden_data_dir(), sorted by name.
inline std::vector<std::filesystem::path> golden_files() {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(golden_data_dir()))
    if (e.is_regular_file() && e.path().extension() == ".txt") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace ea_test
