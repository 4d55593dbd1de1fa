// SPDX-License-Identifier: MIT
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
///                                      or ALiBi (the Eigen front door attention_backward; a
///                                      sink is allowed)
///     causal 0|1
///     align top_left|bottom_right
///     scale default|<number>           default = 1/sqrt(d_k)
///     window <left> <right>            -1 = unbounded side
///     chunk <n>                        optional: Options::chunk_size (absent = 0, off)
///     softcap <number>                 0 = off
///     then arrays, each "<NAME> <rank> <n_0> ... <n_rank-1>" followed by the elements in
///     row-major (C) order ("-inf" where infinite):
///       optional, in this order: MASK 4 b h T_q T_k (0/1; b in {1, B}, h in {1, H}),
///         BIAS 4 b h T_q T_k, KEY_LENGTHS 1 B, ALIBI 1 H, SINKS 1 H (Masks::sinks),
///         CU_SEQLENS_Q 1 n+1 and CU_SEQLENS_K 1 n+1 (varlen only, both)
///       Q 4 B H T_q d_k, K 4 B H_kv T_k d_k, V 4 B H_kv T_k d_v   (always BHTD)
///       OUT 4 B H T_q d_v, LSE 4 B H T_q 1 (-inf: the row sees no key)   the forward's results
///       D_OUT 4 B H T_q d_v                          dL/dOUT
///       D_SCORES 4 B H T_q T_k                       optional, not in varlen: dL/dSCORES; ~1e8
///                                                    where the key is masked (no effect)
///       D_LSE 4 B H T_q 1                            optional: dL/dLSE (BackwardTerms::d_lse);
///                                                    ~1e8 on rows with LSE = -inf (no effect)
///       DQ 4 B H T_q d_k, DK 4 B H_kv T_k d_k, DV 4 B H_kv T_k d_v   the gradients of
///                                                    L = sum(OUT D_OUT) + sum(SCORES D_SCORES)
///                                                    + sum(LSE D_LSE) (rows with a finite LSE)
///       D_BIAS 4 b h T_q T_k                         optional (with BIAS): dL/dBIAS, BIAS's shape
///       D_SINKS 1 H                                  with SINKS, and only then: dL/dsinks
///                                                    (BackwardTerms::d_sinks)
///     end
///
/// In varlen mode B = 1 and T_q, T_k are the packed totals; sequence s owns query rows
/// [CU_SEQLENS_Q[s], CU_SEQLENS_Q[s+1]) and key rows [CU_SEQLENS_K[s], CU_SEQLENS_K[s+1]).
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "golden_format.hpp"
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
                                                 "varlen_window_softcap_alibi",
                                                 "single_chunk_causal",
                                                 "chunk_causal_gqa_d_scores",
                                                 "chunk_bottom_right_key_lengths",
                                                 "varlen_chunk_causal",
                                                 "single_dk192_dv128_causal",
                                                 "single_sinks_d_lse_causal",
                                                 "sinks_gqa_d_scores_d_lse",
                                                 "d_lse_zloss_causal_bottom_right",
                                                 "varlen_sinks_d_lse"};
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
  std::optional<Array4> d_lse;           ///< dL/dLSE [B, H, T_q, 1]
  Array4 dq, dk, dv;                     ///< the gradients
  std::optional<Array4> d_bias;          ///< dL/dBIAS, the shape of spec.bias
  std::optional<Array4> d_sinks;         ///< dL/dsinks as [1, 1, H, 1] (with spec.sinks)

  bool varlen() const { return mode == BackwardMode::Varlen; }
};

/// Parses one case (golden_format.hpp reads what the multi-head formats share); throws
/// std::runtime_error naming the file on any format error.
inline BackwardGolden load_backward_golden(const std::filesystem::path& path) {
  using Shape = std::array<Eigen::Index, 4>;
  golden_format::Reader r(path, "backward golden file");
  BackwardGolden g;
  g.name = path.stem().string();
  r.version("eigen_attention_backward_golden");
  const std::string mode = r.value_of("mode");
  if (mode == "single") {
    g.mode = BackwardMode::Single;
  } else if (mode == "heads") {
    g.mode = BackwardMode::Heads;
  } else if (mode == "varlen") {
    g.mode = BackwardMode::Varlen;
  } else {
    r.fail("bad mode '" + mode + "'");
  }
  r.options(g.spec);

  // The arrays, which must come in the documented order.
  const std::vector<std::string> order = {
      "MASK",  "BIAS", "KEY_LENGTHS", "ALIBI", "SINKS",  "CU_SEQLENS_Q", "CU_SEQLENS_K",
      "Q",     "K",    "V",           "OUT",   "LSE",    "D_OUT",        "D_SCORES",
      "D_LSE", "DQ",   "DK",          "DV",    "D_BIAS", "D_SINKS"};
  size_t next = 0;  // arrays before order[next] may no longer come
  const golden_format::Arrays arrays = r.arrays([&](const std::string& name, const golden_format::Arrays&) {
    const auto at = std::find(order.begin(), order.end(), name);
    if (at == order.end()) r.fail("unknown array " + name);
    const size_t pos = static_cast<size_t>(at - order.begin());
    if (pos < next) r.fail("array " + name + " given twice or out of order");
    next = pos + 1;
  });

  g.Q = r.need(arrays, "Q");
  g.K = r.need(arrays, "K");
  g.V = r.need(arrays, "V");
  g.out = r.need(arrays, "OUT");
  g.lse = r.need(arrays, "LSE");
  g.d_out = r.need(arrays, "D_OUT");
  g.dq = r.need(arrays, "DQ");
  g.dk = r.need(arrays, "DK");
  g.dv = r.need(arrays, "DV");
  const golden_format::Dims d(g.Q, g.K, g.V);
  if (!d.forward_shapes(g.K, g.V, g.out, g.lse) || g.d_out.n != Shape{{d.B, d.H, d.tq, d.dv}} ||
      g.dq.n != g.Q.n || g.dk.n != g.K.n || g.dv.n != g.V.n)
    r.fail("inconsistent Q/K/V/OUT/LSE/D_OUT/DQ/DK/DV shapes");
  if (d.hkv == 0 || d.H % d.hkv != 0) r.fail("H is not a multiple of H_kv");
  r.masks(arrays, d, g.spec);
  if (arrays.count("KEY_LENGTHS"))  // this format also bounds them
    for (const long double x : arrays.at("KEY_LENGTHS").data)
      if (x < 0 || x > d.tk) r.fail("a key length is outside [0, T_k]");
  if (arrays.count("D_BIAS")) {
    if (!g.spec.bias) r.fail("D_BIAS without BIAS");
    g.d_bias = r.need(arrays, "D_BIAS");
    if (g.d_bias->n != g.spec.bias->n) r.fail("D_BIAS and BIAS differ in shape");
  }
  if (arrays.count("D_SCORES")) {
    g.d_scores = r.need(arrays, "D_SCORES");
    if (g.d_scores->n != Shape{{d.B, d.H, d.tq, d.tk}}) r.fail("D_SCORES has a bad shape");
  }
  if (arrays.count("D_LSE")) {
    g.d_lse = r.need(arrays, "D_LSE");
    if (g.d_lse->n != Shape{{d.B, d.H, d.tq, 1}}) r.fail("D_LSE has a bad shape");
  }
  if (arrays.count("D_SINKS") != (g.spec.sinks.empty() ? 0u : 1u))
    r.fail("D_SINKS comes with SINKS, and only then");
  if (arrays.count("D_SINKS")) {
    const auto& a = arrays.at("D_SINKS");
    if (a.dims != std::vector<Eigen::Index>{d.H}) r.fail("D_SINKS must hold H entries");
    g.d_sinks = Array4(1, 1, d.H, 1);
    g.d_sinks->v = a.data;
  }
  const bool has_cu = arrays.count("CU_SEQLENS_Q") || arrays.count("CU_SEQLENS_K");
  switch (g.mode) {
    case BackwardMode::Single:
      if (d.B != 1 || d.H != 1 || d.hkv != 1) r.fail("single mode needs B = H = H_kv = 1");
      if (g.spec.mask || g.spec.bias || !g.spec.key_lengths.empty() || !g.spec.alibi.empty() || has_cu)
        r.fail("single mode takes no mask, bias, key lengths, ALiBi or offsets");
      break;
    case BackwardMode::Heads:
      if (has_cu) r.fail("CU_SEQLENS outside varlen");
      break;
    case BackwardMode::Varlen:
      if (d.B != 1) r.fail("varlen needs B = 1");
      if (g.spec.mask || g.spec.bias || !g.spec.key_lengths.empty() || g.d_scores)
        r.fail("varlen takes no mask, bias, key lengths or D_SCORES");
      r.cu_seqlens(arrays, d, g.cu_q, g.cu_k);
      for (size_t s = 0; s + 1 < g.cu_q.size(); ++s)
        if (g.cu_q[s + 1] < g.cu_q[s] || g.cu_k[s + 1] < g.cu_k[s]) r.fail("decreasing CU_SEQLENS");
      break;
  }
  return g;
}

/// Every *.txt under backward_data_dir(), sorted by name.
inline std::vector<std::filesystem::path> backward_golden_files() {
  return golden_txt_files(backward_data_dir());
}

// ============================================================================ the reference

/// The long-double reference of a golden case, with its error bounds for a computation in T:
/// reference_backward.hpp's reference_heads_backward (single and heads modes, with the case's
/// D_SCORES) or reference_varlen_backward (varlen mode), on the case's Q, K, V, D_OUT and D_LSE
/// (and its sinks, in spec).
template <class T>
BackwardReference golden_reference(const BackwardGolden& g) {
  if (g.varlen())
    return reference_varlen_backward<T>(g.Q, g.K, g.V, g.spec, g.cu_q, g.cu_k, g.d_out, g.d_lse);
  return reference_heads_backward<T>(g.Q, g.K, g.V, g.spec, g.d_out, g.d_scores, g.d_lse);
}

/// H values (the reference's d_sinks or their bounds) as a [1, 1, H, 1] array, the shape
/// BackwardGolden::d_sinks has.
inline Array4 sinks_array(const std::vector<long double>& v) {
  Array4 a(1, 1, static_cast<Eigen::Index>(v.size()), 1);
  a.v = v;
  return a;
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
/// and rounding dOUT, V, D_SCORES, D_LSE, the bias or a slope adds u per term, within the
/// model's spare (d_k + d_v + T_q + T_k + 10) u and its factor 2 (the sinks are exact in float).
/// dL/dsinks is held to the same sum of its bounds, tol_T + tol_double.
struct GoldenBounds {
  Array4 dq, dk, dv, d_bias;  ///< d_bias: the bias's shape (when the case has a bias)
  Array4 d_sinks;             ///< [1, 1, H, 1] (when the case has sinks)
};

template <class T>
GoldenBounds golden_bounds(const BackwardGolden& g) {
  const BackwardReference t = golden_reference<T>(g), d = golden_reference<double>(g);
  auto plus = [](Array4 a, const Array4& b) {
    for (size_t e = 0; e < a.v.size(); ++e) a.v[e] += b.v[e];
    return a;
  };
  return {plus(t.dq_tol, d.dq_tol), plus(t.dk_tol, d.dk_tol), plus(t.dv_tol, d.dv_tol),
          plus(t.d_bias_tol, d.d_bias_tol), plus(sinks_array(t.d_sinks_tol), sinks_array(d.d_sinks_tol))};
}

}  // namespace ea_test
