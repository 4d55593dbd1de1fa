/// \file backward_golden.hpp
/// The backward golden cases of test/data/backward/ (PyTorch autograd, float64; written by
/// test/data/backward/make_backward_golden.py), a long-double reference of the gradients, and
/// the error model that sets the tolerances of test/backward_golden.cpp.
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
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "multihead_golden.hpp"
#include "reference.hpp"
#include "tolerance.hpp"

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

/// Whether query i may see key j in sequence b, head h of a [*, *, tq, tk] problem: the mask,
/// key padding, causal and window rows of step 5 (reference.hpp's reference_heads states the
/// same rule).
inline bool backward_visible(const MultiHeadSpec& spec, Eigen::Index b, Eigen::Index h, Eigen::Index i,
                             Eigen::Index j, Eigen::Index tq, Eigen::Index tk) {
  const Eigen::Index len = spec.key_lengths.empty() ? tk : static_cast<Eigen::Index>(spec.key_lengths[b]);
  const Eigen::Index pos = i + (spec.bottom_right ? len - tq : 0);
  if (j >= len) return false;
  if (spec.mask) {
    const Array4& m = *spec.mask;
    if (m(m.n[0] == 1 ? 0 : b, m.n[1] == 1 ? 0 : h, i, j) == 0) return false;
  }
  if (spec.causal && j > pos) return false;
  if (spec.window_left >= 0 && j < pos - spec.window_left) return false;
  if (spec.window_right >= 0 && j > pos + spec.window_right) return false;
  return true;
}

/// The gradients in long double, and for each of them an element-wise first-order error bound
/// in units of the unit roundoff u (the bound of precision T is (u_T + u_double) times it; see
/// backward_tolerance()).
///
/// THE COMPUTATION (per sequence b and query head h reading K/V head kh; P the weights of
/// reference_heads, s_ij = scale q_i . k_j the scaled logit before the soft-cap, c the soft-cap):
///   dP_ij = dO_i . V_j + D_SCORES_ij,   Delta_i = sum_j P_ij dP_ij,
///   dS_ij = P_ij (dP_ij - Delta_i)      (dL/d(logit after soft-cap, ALiBi and bias): D_BIAS)
///   dR_ij = dS_ij (1 - tanh^2(s_ij / c)) when soft-capped, else dS_ij   (dL/ds_ij)
///   dQ_i = scale sum_j dR_ij K_j,  dK_j = scale sum_{h in group} sum_i dR_ij Q_i,
///   dV_j = sum_{h in group} sum_i P_ij dO_i,  D_BIAS = dS summed over its broadcast axes.
/// Masked (i, j) have P_ij = 0 and contribute nothing (D_SCORES there is never read).
///
/// THE ERROR MODEL (Higham-style, first order, in units of u; a backward kernel recomputes P
/// from Q, K and the given LSE, as FlashAttention-2 does). Per (b, h), with A the effective
/// logit magnitude of the forward model (multihead_budget: it covers soft-cap, ALiBi and bias):
///   - delta = (d_k + 4) A bounds the error of a recomputed logit, as in the forward;
///   - rel_P = 2 delta + 2 T_k + 4 bounds the relative error of a recomputed weight
///     exp(s - LSE): delta for s, u |LSE| <= delta / 4 + log T_k for rounding the given LSE
///     (|LSE| <= max |s| + log T_k and delta >= 4 |s|), and the float64 golden's own LSE error,
///     exp and the subtraction; this is the forward's weight bound (tolerance.hpp);
///   - m_dP = sum_c |dO_ic V_jc| + |D_SCORES_ij| (visible only); dP is off by (d_v + 4) m_dP:
///     the dot product, rounding dO, V and D_SCORES to T, and the addition;
///   - m_Delta = sum_j P_ij m_dP (it also bounds sum_c |dO_ic O_ic| + sum_j P_ij |D_SCORES_ij|,
///     so either way of forming Delta is covered); Delta is off by (rel_P + T_k + d_v + 6)
///     m_Delta: the weights, the sums over j and c, and rounding O and dO;
///   - |dS| <= m_dS = P (m_dP + m_Delta), off by (rel_P + 2) m_dS + P (err dP + err Delta);
///   - soft-cap: 1 - t^2 (t = tanh(s / c), |t| <= 1) is off by 2 |dt| + 3 u, dt <= 1.25 delta / c
///     + 5 u (s / c off by delta / c plus its rounding, which is at most delta / (4 c), and
///     tanh's own few ulps): dR is off by err dS + (3 delta / c + 14) m_dS;
///   - dQ is off by scale (sum_j err dR |K| + (T_k + 4) sum_j m_dS |K|): the propagated errors,
///     the sum of T_k terms, rounding K, the product and the scale to T; dK the same over the
///     G T_q terms of its group (G = H / H_kv query heads); dV by sum (rel_P + G T_q + 3) P |dO|;
///     D_BIAS by the sum of err dS over its n broadcast terms plus (n + 1) sum m_dS.
struct BackwardReference {
  Array4 out, lse;            ///< the forward (reference_heads, per sequence in varlen)
  Array4 dq, dk, dv, d_bias;  ///< the gradients (d_bias only when the case has a bias)
  Array4 bq, bk, bv, bbias;   ///< their element-wise error bounds, in units of u
  /// Per query row and head, [B, H, T_q, 1]: 1 when the row sees no key (its dQ row is 0).
  Array4 dead;
  /// The forward model's data: parts[0] for the whole problem (single and heads modes), or
  /// parts[s] for sequence s (varlen); groups are (sequence, head) as in multihead_budget.
  std::vector<MultiHeadReference> parts;
};

namespace bw_golden_detail {

/// The reference and bounds of one [Bp, H, tq, tk] part of the golden (the whole problem in
/// heads mode, one sequence in varlen mode), added into r at query row q0 and key row k0.
inline void reference_part(const BackwardGolden& g, const Array4& Q, const Array4& K, const Array4& V,
                           const Array4& dO, const MultiHeadReference& fwd, Eigen::Index q0, Eigen::Index k0,
                           BackwardReference& r) {
  const MultiHeadSpec& spec = g.spec;
  const Eigen::Index Bp = Q.n[0], H = Q.n[1], tq = Q.n[2], dk = Q.n[3];
  const Eigen::Index hkv = K.n[1], tk = K.n[2], dv = V.n[3];
  const Eigen::Index G = H / hkv;
  const long double scale = fwd.scale, cap = spec.softcap;
  const long double TK = static_cast<long double>(tk), DK = static_cast<long double>(dk),
                    DV = static_cast<long double>(dv);
  const long double n_kv = static_cast<long double>(G * tq);  // terms of a dK or dV element
  // Accumulators of dK / dV / D_BIAS: propagated error and magnitude, summed over the group.
  Array4 pk(Bp, hkv, tk, dk), mk(Bp, hkv, tk, dk), pv(Bp, hkv, tk, dv), mv(Bp, hkv, tk, dv);
  Array4 pb, mb;
  if (spec.bias) pb = mb = Array4(spec.bias->n[0], spec.bias->n[1], tq, tk);
  for (Eigen::Index b = 0; b < Bp; ++b)
    for (Eigen::Index h = 0; h < H; ++h) {
      const Eigen::Index kh = h / G;
      const size_t grp = static_cast<size_t>(b * H + h);
      const long double delta = (DK + 4) * fwd.logit_magnitude[grp];
      const long double rel_p = 2 * delta + 2 * TK + 4;
      const MatrixLD P = fwd.scores.slice(b, h);
      MatrixLD dP = MatrixLD::Zero(tq, tk), m_dP = MatrixLD::Zero(tq, tk), t = MatrixLD::Zero(tq, tk);
      VectorLD Delta = VectorLD::Zero(tq), m_Delta = VectorLD::Zero(tq);
      for (Eigen::Index i = 0; i < tq; ++i) {
        bool any = false;
        for (Eigen::Index j = 0; j < tk; ++j) {
          if (!backward_visible(spec, b, h, i, j, tq, tk)) continue;
          any = true;
          long double dot = 0, mag = 0, qk = 0;
          for (Eigen::Index c = 0; c < dv; ++c) {
            dot += dO(b, h, i, c) * V(b, kh, j, c);
            mag += std::fabs(dO(b, h, i, c) * V(b, kh, j, c));
          }
          if (g.d_scores) {
            // Heads/single mode only (varlen has no D_SCORES): b is the global batch.
            const long double x = (*g.d_scores)(b, h, q0 + i, k0 + j);
            dot += x;
            mag += std::fabs(x);
          }
          for (Eigen::Index c = 0; c < dk; ++c) qk += Q(b, h, i, c) * K(b, kh, j, c);
          if (cap > 0) t(i, j) = std::tanh(scale * qk / cap);
          dP(i, j) = dot;
          m_dP(i, j) = mag;
          Delta(i) += P(i, j) * dot;
          m_Delta(i) += P(i, j) * mag;
        }
        r.dead(b, h, q0 + i, 0) = any ? 0 : 1;
      }
      for (Eigen::Index i = 0; i < tq; ++i) {
        const long double e_delta = (rel_p + TK + DV + 6) * m_Delta(i);
        for (Eigen::Index j = 0; j < tk; ++j) {
          if (!backward_visible(spec, b, h, i, j, tq, tk)) continue;
          const long double p = P(i, j);
          const long double ds = p * (dP(i, j) - Delta(i));
          const long double m_ds = p * (m_dP(i, j) + m_Delta(i));
          const long double e_ds = (rel_p + 2) * m_ds + p * ((DV + 4) * m_dP(i, j) + e_delta);
          long double dr = ds, e_dr = e_ds;
          if (cap > 0) {
            dr = ds * (1 - t(i, j) * t(i, j));
            e_dr = e_ds + (3 * delta / cap + 14) * m_ds;
          }
          for (Eigen::Index c = 0; c < dk; ++c) {
            r.dq(b, h, q0 + i, c) += scale * dr * K(b, kh, j, c);
            r.bq(b, h, q0 + i, c) += scale * (e_dr + (TK + 4) * m_ds) * std::fabs(K(b, kh, j, c));
            r.dk(b, kh, k0 + j, c) += scale * dr * Q(b, h, i, c);
            pk(b, kh, j, c) += scale * e_dr * std::fabs(Q(b, h, i, c));
            mk(b, kh, j, c) += scale * m_ds * std::fabs(Q(b, h, i, c));
          }
          for (Eigen::Index c = 0; c < dv; ++c) {
            r.dv(b, kh, k0 + j, c) += p * dO(b, h, i, c);
            pv(b, kh, j, c) += rel_p * p * std::fabs(dO(b, h, i, c));
            mv(b, kh, j, c) += p * std::fabs(dO(b, h, i, c));
          }
          if (spec.bias) {
            const Eigen::Index bb = spec.bias->n[0] == 1 ? 0 : b, hb = spec.bias->n[1] == 1 ? 0 : h;
            r.d_bias(bb, hb, i, j) += ds;
            pb(bb, hb, i, j) += e_ds;
            mb(bb, hb, i, j) += m_ds;
          }
        }
      }
    }
  for (Eigen::Index b = 0; b < Bp; ++b)
    for (Eigen::Index kh = 0; kh < hkv; ++kh)
      for (Eigen::Index j = 0; j < tk; ++j) {
        for (Eigen::Index c = 0; c < dk; ++c)
          r.bk(b, kh, k0 + j, c) = pk(b, kh, j, c) + (n_kv + 4) * mk(b, kh, j, c);
        for (Eigen::Index c = 0; c < dv; ++c)
          r.bv(b, kh, k0 + j, c) = pv(b, kh, j, c) + (n_kv + 3) * mv(b, kh, j, c);
      }
  if (spec.bias) {
    // Each D_BIAS element sums (B / b) (H / h) terms.
    const long double n = static_cast<long double>((Bp / pb.n[0]) * (H / pb.n[1]));
    for (Eigen::Index e = 0; e < pb.size(); ++e)
      r.bbias.v[static_cast<size_t>(e)] =
          pb.v[static_cast<size_t>(e)] + (n + 1) * mb.v[static_cast<size_t>(e)];
  }
}

}  // namespace bw_golden_detail

/// The long-double reference of a golden case and its error bounds (see BackwardReference).
inline BackwardReference reference_backward(const BackwardGolden& g) {
  const Eigen::Index B = g.Q.n[0], H = g.Q.n[1], tq = g.Q.n[2], dk = g.Q.n[3];
  const Eigen::Index hkv = g.K.n[1], tk = g.K.n[2], dv = g.V.n[3];
  const long double inf = std::numeric_limits<long double>::infinity();
  BackwardReference r;
  r.out = Array4(B, H, tq, dv, 0);
  r.lse = Array4(B, H, tq, 1, -inf);
  r.dq = r.bq = Array4(B, H, tq, dk);
  r.dk = r.bk = Array4(B, hkv, tk, dk);
  r.dv = r.bv = Array4(B, hkv, tk, dv);
  r.dead = Array4(B, H, tq, 1);
  if (g.spec.bias) r.d_bias = r.bbias = Array4(g.spec.bias->n[0], g.spec.bias->n[1], tq, tk);
  if (!g.varlen()) {
    r.parts.push_back(reference_heads(g.Q, g.K, g.V, g.spec));
    r.out = r.parts[0].out;
    r.lse = r.parts[0].lse;
    bw_golden_detail::reference_part(g, g.Q, g.K, g.V, g.d_out, r.parts[0], 0, 0, r);
    return r;
  }
  for (size_t s = 0; s + 1 < g.cu_q.size(); ++s) {
    const Eigen::Index q0 = g.cu_q[s], lq = g.cu_q[s + 1] - q0, k0 = g.cu_k[s], lk = g.cu_k[s + 1] - k0;
    const Array4 Q = g.Q.token_range(q0, lq), K = g.K.token_range(k0, lk), V = g.V.token_range(k0, lk);
    r.parts.push_back(reference_heads(Q, K, V, g.spec));
    const MultiHeadReference& part = r.parts.back();
    for (Eigen::Index h = 0; h < H; ++h)
      for (Eigen::Index i = 0; i < lq; ++i) {
        r.lse(0, h, q0 + i, 0) = part.lse(0, h, i, 0);
        for (Eigen::Index c = 0; c < dv; ++c) r.out(0, h, q0 + i, c) = part.out(0, h, i, c);
      }
    bw_golden_detail::reference_part(g, Q, K, V, g.d_out.token_range(q0, lq), part, q0, k0, r);
  }
  return r;
}

// ============================================================================ tolerances

/// The safety factor on the first-order model (as tolerance.hpp doubles attention_budget).
constexpr long double kBackwardSafety = 2;

/// The tolerance of a gradient slice in precision T, for near(): kBackwardSafety times the
/// slice's largest element bound, in units of u_T + u_double: the library's error in T plus
/// the float64 golden's own (PyTorch forms the same sums in float64, within the same model with
/// u_double). For T = double that is twice the double bound; for float the golden's share is
/// negligible. near()'s (1 + |expected|) makes it no tighter than this absolute bound.
template <class T>
long double backward_tolerance(long double max_bound_in_u) {
  return kBackwardSafety * (unit_roundoff<T>() + unit_roundoff<double>()) * max_bound_in_u;
}

/// The worst comparisons seen, for the report (MESSAGE) of a test case.
struct GradientStats {
  long double worst_excess = 0;  ///< max |a - b| / (tol (1 + |b|)): must stay <= 1
  std::string worst_excess_at;
  long double worst_abs = 0;  ///< max |a - b|
  std::string worst_abs_at;
  long double worst_rel = 0;  ///< max |a - b| / max |expected of its slice|
  std::string worst_rel_at;
  long double loosest_tol = 0;  ///< the largest tolerance used
  long compared = 0, exact_zeros = 0;
};

/// CHECKs `actual` against `expected` (equal shapes): where the element bound is 0 (no term
/// reaches the element: a row that sees no key, a key no query sees, a zero D_OUT) the result
/// must be exactly 0; elsewhere near(a, b, backward_tolerance<T>(max of the slice's bounds)).
template <class T, class M>
void check_gradient(const M& actual, const MatrixLD& expected, const MatrixLD& bound, const std::string& what,
                    GradientStats& stats) {
  REQUIRE(actual.rows() == expected.rows());
  REQUIRE(actual.cols() == expected.cols());
  const long double max_bound = bound.size() ? bound.maxCoeff() : 0;
  const long double tol = backward_tolerance<T>(max_bound);
  const long double scale = expected.size() ? expected.cwiseAbs().maxCoeff() : 0;
  long failures = 0;
  std::string first;
  for (Eigen::Index i = 0; i < expected.rows(); ++i)
    for (Eigen::Index j = 0; j < expected.cols(); ++j) {
      const long double a = static_cast<long double>(actual(i, j)), b = expected(i, j);
      const std::string at = what + " (" + std::to_string(i) + ", " + std::to_string(j) + ")";
      bool ok;
      if (bound(i, j) == 0) {
        ok = a == 0 && b == 0;
        ++stats.exact_zeros;
      } else {
        ok = near(a, b, tol);
        ++stats.compared;
        const long double diff = std::fabs(a - b);
        const long double excess = diff / (tol * (1 + std::fabs(b)));
        if (!(excess <= stats.worst_excess)) {  // NaN counts as the worst
          stats.worst_excess = excess;
          stats.worst_excess_at = at;
        }
        if (!(diff <= stats.worst_abs)) {
          stats.worst_abs = diff;
          stats.worst_abs_at = at;
        }
        if (scale > 0 && !(diff / scale <= stats.worst_rel)) {
          stats.worst_rel = diff / scale;
          stats.worst_rel_at = at;
        }
      }
      if (!ok && failures++ == 0) {
        std::ostringstream s;
        s.precision(21);
        s << at << ": actual " << a << " expected " << b << " |diff| " << std::fabs(a - b) << " tol*(1+|b|) "
          << tol * (1 + std::fabs(b)) << (bound(i, j) == 0 ? " (must be exactly 0)" : "");
        first = s.str();
      }
    }
  stats.loosest_tol = std::max(stats.loosest_tol, tol);
  CHECK_MESSAGE(failures == 0, what << ": " << failures << " of " << expected.size() << " elements off (tol "
                                    << static_cast<double>(tol) << "); first " << first);
}

}  // namespace ea_test
