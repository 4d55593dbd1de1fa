// SPDX-License-Identifier: MIT
/// \file golden_format.hpp
/// What the text formats of the golden cases in test/data/ share: reading whitespace-separated
/// tokens with errors that name the file (golden.hpp, multihead_golden.hpp,
/// backward_golden.hpp), and, for the two multi-head formats (multihead_golden.hpp and
/// backward_golden.hpp, which extends it), the options lines, the arrays
/// "<NAME> <rank> <n_0> ... <n_rank-1>" with their row-major elements up to "end", the shapes
/// of Q, K and V, and the optional inputs MASK, BIAS, KEY_LENGTHS, ALIBI, SINKS and
/// CU_SEQLENS_Q/_K.
/// Each loader adds what is its own: its header, its modes, which arrays it takes (and in what
/// order), its results and their shapes. Also the listing and the presence check of a data
/// directory's cases.
#pragma once

#include <doctest/doctest.h>

#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "reference.hpp"

namespace ea_test {

/// Every *.txt in `dir`, sorted by name (the golden cases of a data directory).
inline std::vector<std::filesystem::path> golden_txt_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".txt") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

/// CHECKs that `dir` holds "<name><suffix>" for each of `names` (the cases a suite expects).
inline void check_golden_dir(const std::filesystem::path& dir, const std::vector<std::string>& names,
                             const std::string& suffix) {
  CAPTURE(dir.string());
  REQUIRE(std::filesystem::is_directory(dir));
  for (const auto& name : names) {
    CAPTURE(name);
    CHECK(std::filesystem::is_regular_file(dir / (name + suffix)));
  }
}

namespace golden_format {

/// An array as read: its sizes and its elements in row-major order.
struct RawArray {
  std::vector<Eigen::Index> dims;
  std::vector<long double> data;
};

/// The arrays of a case by name.
using Arrays = std::map<std::string, RawArray>;

/// The sizes of a multi-head case, from Q [B, H, T_q, d_k], K [., H_kv, T_k, .] and V [..., d_v].
struct Dims {
  Eigen::Index B, H, tq, dk, hkv, tk, dv;

  Dims(const Array4& Q, const Array4& K, const Array4& V)
      : B(Q.n[0]), H(Q.n[1]), tq(Q.n[2]), dk(Q.n[3]), hkv(K.n[1]), tk(K.n[2]), dv(V.n[3]) {}

  /// Whether K, V and the forward's OUT and LSE have the shapes Q implies.
  bool forward_shapes(const Array4& K, const Array4& V, const Array4& out, const Array4& lse) const {
    using Shape = std::array<Eigen::Index, 4>;
    return K.n == Shape{{B, hkv, tk, dk}} && V.n == Shape{{B, hkv, tk, dv}} &&
           out.n == Shape{{B, H, tq, dv}} && lse.n == Shape{{B, H, tq, 1}};
  }
};

/// A case file being read; every error throws std::runtime_error "<kind> <path>: <what>".
class Reader {
 public:
  Reader(const std::filesystem::path& path, std::string kind)
      : path_(path), kind_(std::move(kind)), in_(path) {
    if (!in_) fail("cannot open");
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(kind_ + " " + path_.string() + ": " + what);
  }

  /// The next token (`what`: what was wanted, for the error at the end of the file).
  std::string token(const std::string& what) {
    std::string t;
    if (!(in_ >> t)) fail("unexpected end of file, wanted " + what);
    return t;
  }

  long double number(const std::string& t) const {
    char* end = nullptr;
    const long double x = std::strtold(t.c_str(), &end);  // accepts "inf", "-inf" and "nan"
    if (end == t.c_str() || *end != '\0') fail("not a number: '" + t + "'");
    return x;
  }

  long integer(const std::string& t) const {
    char* end = nullptr;
    const long x = std::strtol(t.c_str(), &end, 10);
    if (end == t.c_str() || *end != '\0') fail("not an integer: '" + t + "'");
    return x;
  }

  /// The next token must be `key`.
  void expect(const std::string& key) {
    const std::string t = token(key);
    if (t != key) fail("expected '" + key + "', found '" + t + "'");
  }

  /// The token after `key`.
  std::string value_of(const std::string& key) {
    expect(key);
    return token("the value of " + key);
  }

  /// Nothing may follow.
  void end_of_file() {
    std::string extra;
    if (in_ >> extra) fail("trailing content '" + extra + "'");
  }

  // -------------------------------------------------------------- the multi-head formats

  /// The first line, "<header> 1".
  void version(const std::string& header) {
    if (value_of(header) != "1") fail("unknown format version");
  }

  /// The lines causal, align, scale, window, chunk (optional) and softcap, into `spec`.
  void options(MultiHeadSpec& spec) {
    const std::string causal = value_of("causal");
    if (causal != "0" && causal != "1") fail("causal must be 0 or 1");
    spec.causal = causal == "1";
    const std::string align = value_of("align");
    if (align != "top_left" && align != "bottom_right") fail("bad alignment '" + align + "'");
    spec.bottom_right = align == "bottom_right";
    const std::string scale = value_of("scale");
    if (scale != "default") spec.scale = number(scale);
    spec.window_left = integer(value_of("window"));
    spec.window_right = integer(token("window right"));
    std::string next = token("chunk or softcap");
    if (next == "chunk") {  // optional: chunked-local attention
      spec.chunk = integer(token("the value of chunk"));
      next = token("softcap");
    }
    if (next != "softcap") fail("expected 'softcap', found '" + next + "'");
    spec.softcap = number(token("the value of softcap"));
  }

  /// The arrays up to "end", which must end the file. admit(name, arrays so far) is called
  /// with each name before its array is read (to reject it with fail()).
  template <class Admit>
  Arrays arrays(Admit admit) {
    Arrays arrays;
    for (;;) {
      const std::string name = token("an array name or 'end'");
      if (name == "end") break;
      admit(name, static_cast<const Arrays&>(arrays));
      arrays.emplace(name, array(name));
    }
    end_of_file();
    return arrays;
  }

  /// Array `name` as rank 4; it must be there.
  Array4 need(const Arrays& arrays, const std::string& name) const {
    return as_array4(raw(arrays, name), name);
  }

  /// The optional inputs MASK and BIAS ([1|B, 1|H, T_q, T_k]), KEY_LENGTHS ([B]), ALIBI ([H])
  /// and SINKS ([H], Masks::sinks), into `spec`.
  void masks(const Arrays& arrays, const Dims& d, MultiHeadSpec& spec) const {
    for (auto [n, to] : {std::pair{"MASK", &spec.mask}, std::pair{"BIAS", &spec.bias}}) {
      if (!arrays.count(n)) continue;
      Array4 a = need(arrays, n);
      if ((a.n[0] != 1 && a.n[0] != d.B) || (a.n[1] != 1 && a.n[1] != d.H) || a.n[2] != d.tq ||
          a.n[3] != d.tk)
        fail(std::string(n) + " has a bad shape");
      *to = std::move(a);
    }
    if (arrays.count("KEY_LENGTHS")) {
      const auto& a = arrays.at("KEY_LENGTHS");
      if (a.dims != std::vector<Eigen::Index>{d.B}) fail("KEY_LENGTHS must hold B entries");
      for (const long double x : a.data) spec.key_lengths.push_back(static_cast<std::int64_t>(x));
    }
    if (arrays.count("ALIBI")) {
      const auto& a = arrays.at("ALIBI");
      if (a.dims != std::vector<Eigen::Index>{d.H}) fail("ALIBI must hold H entries");
      spec.alibi = a.data;
    }
    if (arrays.count("SINKS")) {
      const auto& a = arrays.at("SINKS");
      if (a.dims != std::vector<Eigen::Index>{d.H}) fail("SINKS must hold H entries");
      spec.sinks = a.data;
    }
  }

  /// CU_SEQLENS_Q and CU_SEQLENS_K (varlen): as many offsets each, from 0 to T_q and T_k.
  void cu_seqlens(const Arrays& arrays, const Dims& d, std::vector<std::int64_t>& cu_q,
                  std::vector<std::int64_t>& cu_k) const {
    for (auto [n, cu] : {std::pair{"CU_SEQLENS_Q", &cu_q}, std::pair{"CU_SEQLENS_K", &cu_k}})
      for (const long double x : raw(arrays, n).data) cu->push_back(static_cast<std::int64_t>(x));
    if (cu_q.size() != cu_k.size() || cu_q.size() < 2 || cu_q.front() != 0 || cu_k.front() != 0 ||
        cu_q.back() != d.tq || cu_k.back() != d.tk)
      fail("bad CU_SEQLENS");
  }

 private:
  /// After the name: the rank, the sizes and the elements.
  RawArray array(const std::string& name) {
    RawArray a;
    const long rank = integer(token(name + " rank"));
    if (rank < 1 || rank > 4) fail("bad rank for " + name);
    Eigen::Index count = 1;
    for (long k = 0; k < rank; ++k) {
      const long d = integer(token(name + " size"));
      if (d < 0) fail("negative size for " + name);
      a.dims.push_back(d);
      count *= d;
    }
    a.data.reserve(static_cast<size_t>(count));
    for (Eigen::Index e = 0; e < count; ++e) a.data.push_back(number(token(name + " element")));
    return a;
  }

  const RawArray& raw(const Arrays& arrays, const std::string& name) const {
    const auto it = arrays.find(name);
    if (it == arrays.end()) fail("missing array " + name);
    return it->second;
  }

  Array4 as_array4(const RawArray& a, const std::string& name) const {
    if (a.dims.size() != 4) fail(name + " must have rank 4");
    Array4 r(a.dims[0], a.dims[1], a.dims[2], a.dims[3]);
    r.v = a.data;
    return r;
  }

  std::filesystem::path path_;
  std::string kind_;
  std::ifstream in_;
};

}  // namespace golden_format
}  // namespace ea_test
