/// \file backward_golden.hpp
/// The backward golden cases of test/data/backward/ (PyTorch autograd, float64; written by
/// test/data/backward/make_backward_golden.py): their loader, and the glue to the long-double
/// reference of the gradients and its error model (reference_backward.hpp, the one reference
/// of the backward tests), which set the bounds of test/backward_golden.cpp.
///
/// FILE FORMAT (text, whitespace-separated tokens; one case per *.txt file), the multi-head
/// forward format (multihead_golden.hpp) extended by the upstream gradients and the results:
///
///     eigen_attention_backward_golden 1
///     mode single|heads|varlen         single: B = H = H_kv = 1 and no mask, bias, lengths
///                                      or ALiBi (the Eigen front door attention_backward)
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
///       OUT 4 B H T_q d_v, LSE 4 B H T_q 1 (-inf: the row sees no key)   the forward's results
///       D_OUT 4 B H T_q d_v                          dL/dOUT
///       D_SCORES 4 B H T_q T_k                       optional, not in varlen: dL/dSCORES; ~1e8
///                                                    where the key is masked (no effect)
///       DQ 4 B H T_q d_k, DK 4 B H_kv T_k d_k, DV 4 B H_kv T_k d_v   the gradients of
///                                                    L = sum(OUT D_OUT) + sum(SCORES D_SCORES)
///       D_BIAS 4 b h T_q T_k                         optional (with BIAS): dL/dBIAS, BIAS's shape
///     end
///
/// In varlen mode B = 1 and T_q, T_k are the packed totals; sequence s owns query rows
/// [CU_SEQLENS_Q[s], CU_SEQLENS_Q[s+1]) and key rows [CU_SEQLENS_K[s], CU_SEQLENS_K[s+1]).
#pragma once

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

#include "multihead_golden.hpp"
#include "reference.hpp"
#include "reference_backward.hpp"

namespace ea_test {

// ============================================================================ the loader

/// The directory holding the backward cases (test/data/backward of the source tree).
inline std::filesystem::path backward_data_dir() {
  return std::filesystem::path(EIGEN_ATTENTION_TEST_DATA_DIR) / "backward";
}

/// The cases the suite expects to find there (make_backward_golden.py writes exactly these).
inline const std::vector<std::string>& expected_backward_files() {
  static const std::vector<std::string> names = {"single_plain",
                                                 "single_causal_top_left_square",
                                                 "single_causal_bottom_right",
                                                 "single_causal_top_left_more_queries",
                                                 "single_causal_bottom_right_more_queries",
                                                 "single_scale",
                                                 "single_dv_differs",
                                                 "single_one_token",
                                                 "single_softcap",
                                                 "single_window",
                                                 "single_window_bottom_right_dead_rows",
                                                 "single_d_scores",
                                                 "single_d_scores_d_out_zero",
                                                 "single_large_logits",
                                                 "gqa_4_2",
                                                 "mqa_4_1",
                                                 "mask_per_head_dead_row",
                                                 "bias_2d_d_bias",
                                                 "bias_per_head_d_bias",
                                                 "bias_per_batch_d_bias",
                                                 "alibi_causal_bottom_right",
                                                 "key_lengths",
                                                 "window_causal",
                                                 "softcap_alibi_bias",
                                                 "d_scores_mask_gqa",
                                                 "combo_all",
                                                 "varlen_causal_bottom_right_gqa",
                                                 "varlen_window_softcap_alibi"};
  return names;
}

enum class BackwardMode { Single, Heads, Varlen };

struct BackwardGolden {
  std::string name;
  BackwardMode mode = BackwardMode::Heads;
  MultiHeadSpec spec;
  std::vector<std::int64_t> cu_q, cu_k;  ///< varlen only
  Array4 Q, K, V;                        ///< the forward's inputs
  Array4 out, lse;                       ///< the forward's results
  Array4 d_out;                          ///< dL/dOUT
  std::optional<Array4> d_scores;        ///< dL/dSCORES [B, H, T_q, T_k]
  Array4 dq, dk, dv;                     ///< the gradients
  std::optional<Array4> d_bias;          ///< dL/dBIAS, the shape of spec.bias

  bool varlen() const { return mode == BackwardMode::Varlen; }
};

namespace bw_golden_detail {

[[noreturn]] inline void fail(const std::filesystem::path& path, const std::string& what) {
  throw std::runtime_error("backward golden file " + path.string() + ": " + what);
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

}  // namespace bw_golden_detail

/// Parses one case; throws std::runtime_error naming the file on any format error.
inline BackwardGolden load_backward_golden(const std::filesystem::path& path) {
  using namespace bw_golden_detail;
  using Shape = std::array<Eigen::Index, 4>;
  std::ifstream in(path);
  if (!in) fail(path, "cannot open");
  BackwardGolden g;
  g.name = path.stem().string();
  if (value_of(in, path, "eigen_attention_backward_golden") != "1") fail(path, "unknown format version");
  const std::string mode = value_of(in, path, "mode");
  if (mode == "single") {
    g.mode = BackwardMode::Single;
  } else if (mode == "heads") {
    g.mode = BackwardMode::Heads;
  } else if (mode == "varlen") {
    g.mode = BackwardMode::Varlen;
  } else {
    fail(path, "bad mode '" + mode + "'");
  }
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

  // The arrays, which must come in the documented order.
  const std::vector<std::string> order = {
      "MASK", "BIAS", "KEY_LENGTHS", "ALIBI",    "CU_SEQLENS_Q", "CU_SEQLENS_K", "Q",  "K",     "V",
      "OUT",  "LSE",  "D_OUT",       "D_SCORES", "DQ",           "DK",           "DV", "D_BIAS"};
  std::map<std::string, RawArray> arrays;
  size_t next = 0;  // arrays before order[next] may no longer come
  for (;;) {
    const std::string name = token(in, path, "an array name or 'end'");
    if (name == "end") break;
    const auto at = std::find(order.begin(), order.end(), name);
    if (at == order.end()) fail(path, "unknown array " + name);
    const size_t pos = static_cast<size_t>(at - order.begin());
    if (pos < next) fail(path, "array " + name + " given twice or out of order");
    next = pos + 1;
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
    arrays.emplace(name, std::move(a));
  }
  std::string extra;
  if (in >> extra) fail(path, "trailing content '" + extra + "'");

  auto need = [&](const std::string& n) -> Array4 {
    const auto it = arrays.find(n);
    if (it == arrays.end()) fail(path, "missing array " + n);
    return as_array4(it->second, path, n);
  };
  g.Q = need("Q");
  g.K = need("K");
  g.V = need("V");
  g.out = need("OUT");
  g.lse = need("LSE");
  g.d_out = need("D_OUT");
  g.dq = need("DQ");
  g.dk = need("DK");
  g.dv = need("DV");
  const Eigen::Index B = g.Q.n[0], H = g.Q.n[1], tq = g.Q.n[2], dk = g.Q.n[3];
  const Eigen::Index hkv = g.K.n[1], tk = g.K.n[2], dv = g.V.n[3];
  if (g.K.n != Shape{{B, hkv, tk, dk}} || g.V.n != Shape{{B, hkv, tk, dv}} ||
      g.out.n != Shape{{B, H, tq, dv}} || g.lse.n != Shape{{B, H, tq, 1}} ||
      g.d_out.n != Shape{{B, H, tq, dv}} || g.dq.n != g.Q.n || g.dk.n != g.K.n || g.dv.n != g.V.n)
    fail(path, "inconsistent Q/K/V/OUT/LSE/D_OUT/DQ/DK/DV shapes");
  if (hkv == 0 || H % hkv != 0) fail(path, "H is not a multiple of H_kv");

  auto broadcast = [&](const std::string& n) {
    Array4 a = need(n);
    if ((a.n[0] != 1 && a.n[0] != B) || (a.n[1] != 1 && a.n[1] != H) || a.n[2] != tq || a.n[3] != tk)
      fail(path, n + " has a bad shape");
    return a;
  };
  if (arrays.count("MASK")) g.spec.mask = broadcast("MASK");
  if (arrays.count("BIAS")) g.spec.bias = broadcast("BIAS");
  if (arrays.count("D_BIAS")) {
    if (!g.spec.bias) fail(path, "D_BIAS without BIAS");
    g.d_bias = need("D_BIAS");
    if (g.d_bias->n != g.spec.bias->n) fail(path, "D_BIAS and BIAS differ in shape");
  }
  if (arrays.count("D_SCORES")) {
    g.d_scores = need("D_SCORES");
    if (g.d_scores->n != Shape{{B, H, tq, tk}}) fail(path, "D_SCORES has a bad shape");
  }
  if (arrays.count("KEY_LENGTHS")) {
    const auto& a = arrays.at("KEY_LENGTHS");
    if (a.dims != std::vector<Eigen::Index>{B}) fail(path, "KEY_LENGTHS must hold B entries");
    for (const long double x : a.data) {
      if (x < 0 || x > tk) fail(path, "a key length is outside [0, T_k]");
      g.spec.key_lengths.push_back(static_cast<std::int64_t>(x));
    }
  }
  if (arrays.count("ALIBI")) {
    const auto& a = arrays.at("ALIBI");
    if (a.dims != std::vector<Eigen::Index>{H}) fail(path, "ALIBI must hold H entries");
    g.spec.alibi = a.data;
  }
  const bool has_cu = arrays.count("CU_SEQLENS_Q") || arrays.count("CU_SEQLENS_K");
  switch (g.mode) {
    case BackwardMode::Single:
      if (B != 1 || H != 1 || hkv != 1) fail(path, "single mode needs B = H = H_kv = 1");
      if (g.spec.mask || g.spec.bias || !g.spec.key_lengths.empty() || !g.spec.alibi.empty() || has_cu)
        fail(path, "single mode takes no mask, bias, key lengths, ALiBi or offsets");
      break;
    case BackwardMode::Heads:
      if (has_cu) fail(path, "CU_SEQLENS outside varlen");
      break;
    case BackwardMode::Varlen:
      if (B != 1) fail(path, "varlen needs B = 1");
      if (g.spec.mask || g.spec.bias || !g.spec.key_lengths.empty() || g.d_scores)
        fail(path, "varlen takes no mask, bias, key lengths or D_SCORES");
      for (auto [n, cu] : {std::pair{"CU_SEQLENS_Q", &g.cu_q}, std::pair{"CU_SEQLENS_K", &g.cu_k}}) {
        const auto it = arrays.find(n);
        if (it == arrays.end()) fail(path, std::string("missing array ") + n);
        for (const long double x : it->second.data) cu->push_back(static_cast<std::int64_t>(x));
      }
      if (g.cu_q.size() != g.cu_k.size() || g.cu_q.size() < 2 || g.cu_q.front() != 0 || g.cu_k.front() != 0 ||
          g.cu_q.back() != tq || g.cu_k.back() != tk)
        fail(path, "bad CU_SEQLENS");
      for (size_t s = 0; s + 1 < g.cu_q.size(); ++s)
        if (g.cu_q[s + 1] < g.cu_q[s] || g.cu_k[s + 1] < g.cu_k[s]) fail(path, "decreasing CU_SEQLENS");
      break;
  }
  return g;
}

/// Every *.txt under backward_data_dir(), sorted by name.
inline std::vector<std::filesystem::path> backward_golden_files() {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(backward_data_dir()))
    if (e.is_regular_file() && e.path().extension() == ".txt") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

// ============================================================================ the reference

/// The long-double reference of a golden case, with its error bounds for a computation in T:
/// reference_backward.hpp's reference_heads_backward (single and heads modes, with the case's
/// D_SCORES) or reference_varlen_backward (varlen mode), on the case's Q, K, V and D_OUT.
template <class T>
BackwardReference golden_reference(const BackwardGolden& g) {
  if (g.varlen()) return reference_varlen_backward<T>(g.Q, g.K, g.V, g.spec, g.cu_q, g.cu_k, g.d_out);
  return reference_heads_backward<T>(g.Q, g.K, g.V, g.spec, g.d_out, g.d_scores);
}

/// The element-wise bounds a result computed in T is held to against the GOLDEN values (not
/// against the exact ones):
///     |actual - golden| <= tol_T + tol_double
/// where tol_T is reference_backward.hpp's bound for T (|actual - exact| <= tol_T) and tol_double
/// the same model's bound in double. The golden values are themselves a float64 computation
/// (PyTorch autograd) of the same sums, so they carry their own rounding error; the same first
/// order model in double bounds it, |golden - exact| <= tol_double, and backward_golden.cpp's
/// "PyTorch agrees with the long-double reference" test case checks exactly that, element by
/// element, for every case. The triangle inequality then gives the bound above; the slack is
/// explicit and the model itself is not loosened. For T = float tol_double is about 2^-29 of
/// tol_T (negligible); for T = double it doubles the bound (both sides round in double).
/// The library is given the golden's inputs and its OUT and LSE rounded to T; tol_T covers
/// that: the logit error delta of the forward model includes rounding Q and K (tolerance.hpp),
/// the weight's error the LSE's (within the forward budget: u |LSE| <= delta / 4 + u log T_k),
/// and rounding dOUT, V, D_SCORES, the bias or a slope adds u per term, within the model's
/// spare (d_k + d_v + T_q + T_k + 10) u and its factor 2.
struct GoldenBounds {
  Array4 dq, dk, dv, d_bias;  ///< d_bias: the bias's shape (when the case has a bias)
};

template <class T>
GoldenBounds golden_bounds(const BackwardGolden& g) {
  const BackwardReference t = golden_reference<T>(g), d = golden_reference<double>(g);
  auto plus = [](Array4 a, const Array4& b) {
    for (size_t e = 0; e < a.v.size(); ++e) a.v[e] += b.v[e];
    return a;
  };
  return {plus(t.dq_tol, d.dq_tol), plus(t.dk_tol, d.dk_tol), plus(t.dv_tol, d.dv_tol),
          plus(t.d_bias_tol, d.d_bias_tol)};
}

}  // namespace ea_test
