/// \file multihead_golden.hpp
/// The multi-head golden cases of test/data/multihead/ (PyTorch, float64; written by
/// test/data/multihead/make_multihead_golden.py), and the glue that lays the tests' arrays out
/// as the library's HeadsView / Masks / Options.
///
/// FILE FORMAT (text, whitespace-separated tokens; one case per *.txt file):
///
///     eigen_attention_multihead_golden 1
///     mode heads|varlen
///     causal 0|1
///     align top_left|bottom_right
///     scale default|<number>           default = 1/sqrt(d_k)
///     window <left> <right>            -1 = unbounded side
///     softcap <number>                 0 = off
///     then arrays, each "<NAME> <rank> <n_0> ... <n_rank-1>" followed by the elements in
///     row-major (C) order ("-inf" where infinite):
///       optional, in this order: MASK 4 b h T_q T_k (0/1; b in {1, B}, h in {1, H}),
///         BIAS 4 b h T_q T_k, KEY_LENGTHS 1 B, ALIBI 1 H,
///         CU_SEQLENS_Q 1 n+1 and CU_SEQLENS_K 1 n+1 (varlen only, both)
///       Q 4 B H T_q d_k, K 4 B H_kv T_k d_k, V 4 B H_kv T_k d_v   (always BHTD)
///       OUT 4 B H T_q d_v, LSE 4 B H T_q 1 (-inf: the row sees no key)
///       heads mode only: SCORES 4 B H T_q T_k, AVG_SCORES 4 B 1 T_q T_k (mean over heads)
///     end
///
/// In varlen mode B = 1 and T_q, T_k are the packed totals; sequence s owns query rows
/// [CU_SEQLENS_Q[s], CU_SEQLENS_Q[s+1]) and key rows [CU_SEQLENS_K[s], CU_SEQLENS_K[s+1]).
#pragma once

#include <doctest/doctest.h>

#include <EigenAttention/HeadsView.hpp>
#include <EigenAttention/Masks.hpp>
#include <EigenAttention/MultiHead.hpp>
#include <EigenAttention/Options.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference.hpp"

#ifndef EIGEN_ATTENTION_TEST_DATA_DIR
#error "EIGEN_ATTENTION_TEST_DATA_DIR must name test/data (set by test/CMakeLists.txt)"
#endif

namespace ea_test {

// ============================================================================ the loader

/// The directory holding the multi-head cases (test/data/multihead of the source tree).
inline std::filesystem::path multihead_data_dir() {
  return std::filesystem::path(EIGEN_ATTENTION_TEST_DATA_DIR) / "multihead";
}

/// The cases the suite expects to find there (make_multihead_golden.py writes exactly these).
inline const std::vector<std::string>& expected_multihead_files() {
  static const std::vector<std::string> names = {"plain",
                                                 "plain_scale_odd",
                                                 "plain_wide",
                                                 "gqa_8_2",
                                                 "mqa_8_1",
                                                 "gqa_8_2_causal",
                                                 "causal_top_left",
                                                 "causal_bottom_right",
                                                 "causal_top_left_more_queries",
                                                 "causal_bottom_right_more_queries",
                                                 "mask_2d",
                                                 "mask_per_batch",
                                                 "mask_per_head",
                                                 "bias_2d",
                                                 "bias_per_batch",
                                                 "bias_per_head",
                                                 "mask_and_bias",
                                                 "mask_and_bias_causal",
                                                 "key_lengths",
                                                 "key_lengths_causal_bottom_right",
                                                 "key_lengths_causal_top_left",
                                                 "window_both",
                                                 "window_left_causal_top_left",
                                                 "window_left_causal_bottom_right",
                                                 "window_bottom_right",
                                                 "window_right_only_top_left",
                                                 "window_zero_zero_bottom_right",
                                                 "alibi",
                                                 "alibi_top_left_rect",
                                                 "alibi_bottom_right_rect",
                                                 "alibi_causal_bottom_right",
                                                 "softcap",
                                                 "softcap_causal_gqa",
                                                 "combo_all",
                                                 "combo_mqa_window",
                                                 "combo_no_softcap",
                                                 "varlen_gqa",
                                                 "varlen_causal_bottom_right_alibi",
                                                 "varlen_window_softcap_top_left"};
  return names;
}

struct MultiHeadGolden {
  std::string name;
  bool varlen = false;
  MultiHeadSpec spec;
  std::vector<std::int64_t> cu_q, cu_k;  ///< varlen only
  Array4 Q, K, V;
  Array4 out, lse;
  Array4 scores, avg_scores;  ///< heads mode only
};

namespace mh_golden_detail {

[[noreturn]] inline void fail(const std::filesystem::path& path, const std::string& what) {
  throw std::runtime_error("multihead golden file " + path.string() + ": " + what);
}

inline std::string token(std::istream& in, const std::filesystem::path& path, const std::string& what) {
  std::string t;
  if (!(in >> t)) fail(path, "unexpected end of file, wanted " + what);
  return t;
}

inline long double number(const std::string& t, const std::filesystem::path& path) {
  char* end = nullptr;
  const long double x = std::strtold(t.c_str(), &end);  // accepts "-inf"
  if (end == t.c_str() || *end != '\0') fail(path, "not a number: '" + t + "'");
  return x;
}

inline long integer(const std::string& t, const std::filesystem::path& path) {
  char* end = nullptr;
  const long x = std::strtol(t.c_str(), &end, 10);
  if (end == t.c_str() || *end != '\0') fail(path, "not an integer: '" + t + "'");
  return x;
}

inline std::string value_of(std::istream& in, const std::filesystem::path& path, const std::string& key) {
  const std::string t = token(in, path, key);
  if (t != key) fail(path, "expected '" + key + "', found '" + t + "'");
  return token(in, path, "the value of " + key);
}

struct RawArray {
  std::vector<Eigen::Index> dims;
  std::vector<long double> data;
};

inline Array4 as_array4(const RawArray& a, const std::filesystem::path& path, const std::string& name) {
  if (a.dims.size() != 4) fail(path, name + " must have rank 4");
  Array4 r(a.dims[0], a.dims[1], a.dims[2], a.dims[3]);
  r.v = a.data;
  return r;
}

}  // namespace mh_golden_detail

/// Parses one case; throws std::runtime_error naming the file on any format error.
inline MultiHeadGolden load_multihead_golden(const std::filesystem::path& path) {
  using namespace mh_golden_detail;
  std::ifstream in(path);
  if (!in) fail(path, "cannot open");
  MultiHeadGolden g;
  g.name = path.stem().string();
  if (value_of(in, path, "eigen_attention_multihead_golden") != "1") fail(path, "unknown format version");
  const std::string mode = value_of(in, path, "mode");
  if (mode != "heads" && mode != "varlen") fail(path, "bad mode '" + mode + "'");
  g.varlen = mode == "varlen";
  const std::string causal = value_of(in, path, "causal");
  if (causal != "0" && causal != "1") fail(path, "causal must be 0 or 1");
  g.spec.causal = causal == "1";
  const std::string align = value_of(in, path, "align");
  if (align != "top_left" && align != "bottom_right") fail(path, "bad alignment '" + align + "'");
  g.spec.bottom_right = align == "bottom_right";
  const std::string scale = value_of(in, path, "scale");
  if (scale != "default") g.spec.scale = number(scale, path);
  g.spec.window_left = integer(value_of(in, path, "window"), path);
  g.spec.window_right = integer(token(in, path, "window right"), path);
  g.spec.softcap = number(value_of(in, path, "softcap"), path);

  std::map<std::string, RawArray> arrays;
  std::vector<std::string> order;
  for (;;) {
    const std::string name = token(in, path, "an array name or 'end'");
    if (name == "end") break;
    if (arrays.count(name)) fail(path, "array " + name + " given twice");
    RawArray a;
    const long rank = integer(token(in, path, name + " rank"), path);
    if (rank < 1 || rank > 4) fail(path, "bad rank for " + name);
    Eigen::Index count = 1;
    for (long k = 0; k < rank; ++k) {
      const long d = integer(token(in, path, name + " size"), path);
      if (d < 0) fail(path, "negative size for " + name);
      a.dims.push_back(d);
      count *= d;
    }
    a.data.reserve(static_cast<size_t>(count));
    for (Eigen::Index e = 0; e < count; ++e)
      a.data.push_back(number(token(in, path, name + " element"), path));
    order.push_back(name);
    arrays.emplace(name, std::move(a));
  }
  std::string extra;
  if (in >> extra) fail(path, "trailing content '" + extra + "'");

  const std::vector<std::string> allowed = {"MASK",         "BIAS",   "KEY_LENGTHS", "ALIBI", "CU_SEQLENS_Q",
                                            "CU_SEQLENS_K", "Q",      "K",           "V",     "OUT",
                                            "LSE",          "SCORES", "AVG_SCORES"};
  for (const auto& n : order)
    if (std::find(allowed.begin(), allowed.end(), n) == allowed.end()) fail(path, "unknown array " + n);
  auto need = [&](const std::string& n) -> const RawArray& {
    const auto it = arrays.find(n);
    if (it == arrays.end()) fail(path, "missing array " + n);
    return it->second;
  };
  g.Q = as_array4(need("Q"), path, "Q");
  g.K = as_array4(need("K"), path, "K");
  g.V = as_array4(need("V"), path, "V");
  g.out = as_array4(need("OUT"), path, "OUT");
  g.lse = as_array4(need("LSE"), path, "LSE");
  const Eigen::Index B = g.Q.n[0], H = g.Q.n[1], tq = g.Q.n[2], dk = g.Q.n[3];
  const Eigen::Index hkv = g.K.n[1], tk = g.K.n[2], dv = g.V.n[3];
  if (g.K.n[0] != B || g.K.n[3] != dk || g.V.n[0] != B || g.V.n[1] != hkv || g.V.n[2] != tk ||
      g.out.n != std::array<Eigen::Index, 4>{{B, H, tq, dv}} ||
      g.lse.n != std::array<Eigen::Index, 4>{{B, H, tq, 1}})
    fail(path, "inconsistent Q/K/V/OUT/LSE shapes");
  if (hkv == 0 || H % hkv != 0) fail(path, "H is not a multiple of H_kv");

  auto broadcast = [&](const std::string& n) {
    Array4 a = as_array4(arrays.at(n), path, n);
    if ((a.n[0] != 1 && a.n[0] != B) || (a.n[1] != 1 && a.n[1] != H) || a.n[2] != tq || a.n[3] != tk)
      fail(path, n + " has a bad shape");
    return a;
  };
  if (arrays.count("MASK")) g.spec.mask = broadcast("MASK");
  if (arrays.count("BIAS")) g.spec.bias = broadcast("BIAS");
  if (arrays.count("KEY_LENGTHS")) {
    const auto& a = arrays.at("KEY_LENGTHS");
    if (a.dims != std::vector<Eigen::Index>{B}) fail(path, "KEY_LENGTHS must hold B entries");
    for (const long double x : a.data) g.spec.key_lengths.push_back(static_cast<std::int64_t>(x));
  }
  if (arrays.count("ALIBI")) {
    const auto& a = arrays.at("ALIBI");
    if (a.dims != std::vector<Eigen::Index>{H}) fail(path, "ALIBI must hold H entries");
    g.spec.alibi = a.data;
  }
  if (g.varlen) {
    if (B != 1) fail(path, "varlen needs B = 1");
    if (g.spec.mask || g.spec.bias || !g.spec.key_lengths.empty())
      fail(path, "varlen takes no mask/bias/lengths");
    for (auto [n, cu] : {std::pair{"CU_SEQLENS_Q", &g.cu_q}, std::pair{"CU_SEQLENS_K", &g.cu_k}})
      for (const long double x : need(n).data) cu->push_back(static_cast<std::int64_t>(x));
    if (g.cu_q.size() != g.cu_k.size() || g.cu_q.size() < 2 || g.cu_q.front() != 0 || g.cu_k.front() != 0 ||
        g.cu_q.back() != tq || g.cu_k.back() != tk)
      fail(path, "bad CU_SEQLENS");
    if (arrays.count("SCORES") || arrays.count("AVG_SCORES")) fail(path, "varlen has no SCORES");
  } else {
    if (arrays.count("CU_SEQLENS_Q") || arrays.count("CU_SEQLENS_K")) fail(path, "CU_SEQLENS outside varlen");
    g.scores = as_array4(need("SCORES"), path, "SCORES");
    g.avg_scores = as_array4(need("AVG_SCORES"), path, "AVG_SCORES");
    if (g.scores.n != std::array<Eigen::Index, 4>{{B, H, tq, tk}} ||
        g.avg_scores.n != std::array<Eigen::Index, 4>{{B, 1, tq, tk}})
      fail(path, "inconsistent SCORES/AVG_SCORES shapes");
  }
  return g;
}

/// Every *.txt under multihead_data_dir(), sorted by name.
inline std::vector<std::filesystem::path> multihead_golden_files() {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(multihead_data_dir()))
    if (e.is_regular_file() && e.path().extension() == ".txt") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

// ============================================================================ library glue

namespace mh = EigenAttention;

inline const char* layout_name(mh::Layout l) { return l == mh::Layout::BHTD ? "BHTD" : "BTHD"; }

/// A contiguous multi-head buffer of T in either layout, with its view.
template <class T>
struct HeadsBuffer {
  std::vector<T> data;
  mh::Layout layout = mh::Layout::BHTD;
  Eigen::Index batch = 0, heads = 0, tokens = 0, dim = 0;

  HeadsBuffer() = default;
  HeadsBuffer(mh::Layout l, Eigen::Index b, Eigen::Index h, Eigen::Index t, Eigen::Index d, T fill)
      : data(static_cast<size_t>(b * h * t * d), fill), layout(l), batch(b), heads(h), tokens(t), dim(d) {}
  /// `a` rounded to T, laid out in `l`.
  HeadsBuffer(const Array4& a, mh::Layout l) : HeadsBuffer(l, a.n[0], a.n[1], a.n[2], a.n[3], T(0)) {
    const auto v = view();
    for (Eigen::Index b = 0; b < batch; ++b)
      for (Eigen::Index h = 0; h < heads; ++h)
        for (Eigen::Index t = 0; t < tokens; ++t)
          for (Eigen::Index d = 0; d < dim; ++d) v.head(b, h)(t, d) = static_cast<T>(a(b, h, t, d));
  }

  mh::HeadsView<T> view() {
    return mh::HeadsView<T>::contiguous(data.empty() ? dummy() : data.data(), layout, batch, heads, tokens,
                                        dim);
  }
  mh::HeadsView<T> view() const { return const_cast<HeadsBuffer*>(this)->view(); }
  mh::HeadsView<const T> cview() const { return view(); }
  /// Back to a BHTD long double array (exact).
  Array4 to_array() const {
    Array4 a(batch, heads, tokens, dim);
    const auto v = view();
    for (Eigen::Index b = 0; b < batch; ++b)
      for (Eigen::Index h = 0; h < heads; ++h)
        for (Eigen::Index t = 0; t < tokens; ++t)
          for (Eigen::Index d = 0; d < dim; ++d) a(b, h, t, d) = static_cast<long double>(v.head(b, h)(t, d));
    return a;
  }
  bool all_equal_to(T x) const {
    return std::all_of(data.begin(), data.end(), [x](T y) { return y == x; });
  }

 private:
  // A non-null address for an empty buffer (a null data pointer means "not wanted").
  static T* dummy() {
    static T d[1] = {T(0)};
    return d;
  }
};

/// A read-only BHTD view of a long double array (for comparing the reference's results).
inline mh::HeadsView<const long double> array_view(const Array4& a) {
  return mh::HeadsView<const long double>::bhtd(a.v.data(), a.n[0], a.n[1], a.n[2], a.n[3]);
}

/// The tokens [first, first + count) of every head of a view (a sub-view, nothing copied).
template <class S>
mh::HeadsView<S> token_subview(mh::HeadsView<S> v, Eigen::Index first, Eigen::Index count) {
  v.data += first * v.token_stride;
  v.tokens = count;
  return v;
}

/// MultiHeadSpec's masks as the library's Masks<T>, owning the storage.
template <class T>
struct MasksBuffer {
  std::unique_ptr<bool[]> mask;
  std::vector<T> bias, alibi;
  std::vector<std::int64_t> key_lengths;
  mh::Masks<T> masks;

  explicit MasksBuffer(const MultiHeadSpec& spec) {
    if (spec.mask) {
      const Array4& m = *spec.mask;
      mask.reset(new bool[static_cast<size_t>(std::max<Eigen::Index>(1, m.size()))]);
      for (Eigen::Index e = 0; e < m.size(); ++e)
        mask[static_cast<size_t>(e)] = m.v[static_cast<size_t>(e)] != 0;
      masks.mask = broadcast_view<bool>(mask.get(), m);
    }
    if (spec.bias) {
      const Array4& b = *spec.bias;
      for (const long double x : b.v) bias.push_back(static_cast<T>(x));
      masks.bias = broadcast_view<T>(bias.data(), b);
    }
    if (!spec.key_lengths.empty()) {
      key_lengths = spec.key_lengths;
      masks.key_lengths = key_lengths.data();
    }
    if (!spec.alibi.empty()) {
      for (const long double x : spec.alibi) alibi.push_back(static_cast<T>(x));
      masks.alibi_slopes = alibi.data();
    }
  }
  MasksBuffer(const MasksBuffer&) = delete;
  MasksBuffer& operator=(const MasksBuffer&) = delete;

  /// A contiguous [b, h, T_q, T_k] array as a BroadcastView (stride 0 on an axis of size 1).
  template <class E>
  static mh::BroadcastView<E> broadcast_view(const E* data, const Array4& shape) {
    const Eigen::Index b = shape.n[0], h = shape.n[1], r = shape.n[2], c = shape.n[3];
    return {data, b, h, r, c, b == 1 ? 0 : h * r * c, h == 1 ? 0 : r * c, c, 1};
  }
};

/// The library's Options for a spec.
inline mh::Options options_for(const MultiHeadSpec& spec, mh::Kernel kernel = mh::Kernel::Auto,
                               int threads = 1) {
  mh::Options opt;
  opt.causal = spec.causal;
  opt.alignment = spec.bottom_right ? mh::CausalAlignment::BottomRight : mh::CausalAlignment::TopLeft;
  if (spec.scale) opt.scale = static_cast<double>(*spec.scale);
  opt.window_left = spec.window_left;
  opt.window_right = spec.window_right;
  opt.softcap = static_cast<double>(spec.softcap);
  opt.kernel = kernel;
  opt.threads = threads;
  return opt;
}

/// CHECK every (b, h) slice of `actual` against `expected` with the budget of its group
/// (budget_of(b, h) returns the tolerance).
template <class S, class F>
void check_heads_near(const mh::HeadsView<S>& actual, const Array4& expected, F budget_of,
                      const std::string& what) {
  CAPTURE(what);
  const bool shape_ok = actual.batch == expected.n[0] && actual.heads == expected.n[1] &&
                        actual.tokens == expected.n[2] && actual.dim == expected.n[3];
  CHECK_MESSAGE(shape_ok, what << ": view shape [" << actual.batch << ", " << actual.heads << ", "
                               << actual.tokens << ", " << actual.dim << "] differs from the expected ["
                               << expected.n[0] << ", " << expected.n[1] << ", " << expected.n[2] << ", "
                               << expected.n[3] << "]");
  if (!shape_ok) return;
  for (Eigen::Index b = 0; b < expected.n[0]; ++b)
    for (Eigen::Index h = 0; h < expected.n[1]; ++h) {
      CAPTURE(b);
      CAPTURE(h);
      const long double tol = budget_of(b, h);
      EA_CHECK_NEAR(actual.head(b, h), expected.slice(b, h), tol);
    }
}

/// CHECK two views element for element equal (bitwise for finite values).
template <class S1, class S2>
void check_heads_equal(const mh::HeadsView<S1>& actual, const mh::HeadsView<S2>& expected,
                       const std::string& what) {
  CAPTURE(what);
  REQUIRE(actual.batch == expected.batch);
  REQUIRE(actual.heads == expected.heads);
  REQUIRE(actual.tokens == expected.tokens);
  REQUIRE(actual.dim == expected.dim);
  for (Eigen::Index b = 0; b < expected.batch; ++b)
    for (Eigen::Index h = 0; h < expected.heads; ++h) {
      CAPTURE(b);
      CAPTURE(h);
      EA_CHECK_EQUAL(actual.head(b, h), expected.head(b, h));
    }
}

}  // namespace ea_test
