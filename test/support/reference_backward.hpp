// SPDX-License-Identifier: MIT
/// \file reference_backward.hpp
/// The long-double reference of the backward pass: the gradients of L = sum(OUT o dOUT) +
/// sum(SCORES o dSCORES) with respect to Q, K, V and the bias, written from the chain rule in
/// loops over the forward reference (reference.hpp: the same logits, reference_logit, and the
/// same weights). Independent of the library. For every element, also the error bound a
/// computation in precision T is held to (BackwardReference::tol).
/// Packed variable-length batches (reference_varlen_backward) are calls of
/// reference_heads_backward, one per sequence, as reference_varlen is of reference_heads.
///
/// With P the weights, per (sequence b, query head h, reading K/V head kh):
///   dP_ij = dOUT_i . V_j + dSCORES_ij          (visible pairs; hidden pairs take no part)
///   D_i   = sum_j P_ij dP_ij - dLSE_i           (dLSE: BackwardTerms::d_lse, 0 when not given)
///   dZ_ij = P_ij (dP_ij - D_i)                  the gradient of the final logit (= dL/dbias)
///   dsink_h = -sum_{b,i} P_sink,i D_i           P_sink,i = exp(sink_h - LSE_i) (Masks::sinks)
///   dS_ij = scale * c'_ij * dZ_ij               c' = 1 - tanh^2(s / softcap), 1 without soft-cap
///   dQ_i  = sum_j dS_ij K_j,  dK_j += sum_i dS_ij Q_i,  dV_j += sum_i P_ij dOUT_i
/// (dK and dV add over the query heads of a GQA group; dbias over the axes the bias broadcasts.)
///
/// Error model (first order, in the spirit of tolerance.hpp's attention_budget): a computed
/// weight is off by the relative error rel_weight = 2 delta + (2 T_k + 4) u of the forward's
/// budget (delta = (d_k + 4) u A_eff, multihead_budget's effective logit magnitude), which also
/// covers the error of the forward's LSE it is recomputed from; every other step is a sum of
/// at most max(d_k, d_v, T_q, T_k) products, each adding gamma_n = n u of the sum of the
/// absolute values of its terms. Running the same recursions on absolute values gives, per
/// element, a magnitude M (|dP| -> sum |dOUT||V| + |dSCORES|, D -> sum P |dP|, dZ -> P (|dP| + |D|),
/// and so on), and the bound is
///   tol = 2 (rel_weight + (d_k + d_v + T_q + T_k + 10) u) M  [+ the soft-cap term below],
/// doubled as the forward's for the first-order model; each weight's error also has an absolute
/// part, 2 x T's smallest normal number, for weights that underflow. With soft-capping, c' is computed from
/// the rounded logit: its absolute error is at most |d c'/dx| |dx| + 8 u <= delta / softcap + 8 u
/// (|d c'/dx| = 2 |tanh sech^2| < 1), which adds 2 (delta / softcap + 8 u) scale sum |dZ||K| (or |Q|).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "reference.hpp"

namespace ea_test {

/// The exact gradients and, for each element, the error bound in T.
struct BackwardReference {
  Array4 dq, dk, dv, d_bias;  ///< d_bias: the bias's shape (when the spec has a bias)
  Array4 dq_tol, dk_tol, dv_tol, d_bias_tol;
  std::vector<long double> d_sinks, d_sinks_tol;  ///< H values, when the spec has sinks
  MultiHeadReference forward;                     ///< OUT, LSE, SCORES
};

/// The reference gradients of attention_heads_into(Q, K, V, spec) for dOUT [B, H, T_q, d_v] and,
/// optionally, dSCORES [B, H, T_q, T_k] and dLSE [B, H, T_q, 1], with error bounds in T.
/// `product_rounding` > 0: the weights and dS are rounded (relative error at most that) before
/// their products with dOUT, Q and K, as Kernel::Avx512Bf16's bf16 pairs round them to bf16
/// (2^-9): each bound gains twice that relative error of its terms, 2 rho p |dOUT| (dV) and
/// 2 rho |dS| |K| or |Q| (dQ, dK).
template <class T>
BackwardReference reference_heads_backward(const Array4& Q, const Array4& K, const Array4& V,
                                           const MultiHeadSpec& spec, const Array4& d_out,
                                           const std::optional<Array4>& d_scores = std::nullopt,
                                           const std::optional<Array4>& d_lse = std::nullopt,
                                           long double product_rounding = 0) {
  const long double rho2 = 2 * product_rounding;
  const Eigen::Index B = Q.n[0], H = Q.n[1], tq = Q.n[2], dk = Q.n[3];
  const Eigen::Index hkv = K.n[1], tk = K.n[2], dv = V.n[3];
  const Eigen::Index group = H / hkv;
  BackwardReference r;
  r.forward = reference_heads(Q, K, V, spec);
  const MultiHeadReference& f = r.forward;
  const long double scale = f.scale, u = unit_roundoff<T>();
  // A weight below T's smallest normal number may come out as 0 or a subnormal: an absolute
  // error of up to twice that number, whatever the relative model says.
  const long double tiny = 2 * static_cast<long double>(std::numeric_limits<T>::min());
  r.dq = r.dq_tol = Array4(B, H, tq, dk);
  r.dk = r.dk_tol = Array4(B, hkv, tk, dk);
  r.dv = r.dv_tol = Array4(B, hkv, tk, dv);
  if (spec.bias) r.d_bias = r.d_bias_tol = Array4(spec.bias->n[0], spec.bias->n[1], tq, tk);
  if (!spec.sinks.empty()) r.d_sinks.assign(static_cast<size_t>(H), 0), r.d_sinks_tol = r.d_sinks;

  std::vector<long double> dp(static_cast<size_t>(tk)), dp_abs(static_cast<size_t>(tk));
  std::vector<Logit> logits(static_cast<size_t>(tk));
  for (Eigen::Index b = 0; b < B; ++b) {
    for (Eigen::Index h = 0; h < H; ++h) {
      const Eigen::Index kh = h / group;
      const size_t g = static_cast<size_t>(b * H + h);
      const long double delta = static_cast<long double>(dk + 4) * u * f.logit_magnitude[g];
      const long double rel_weight = 2 * delta + static_cast<long double>(2 * tk + 4) * u;
      const long double factor = 2 * (rel_weight + static_cast<long double>(dk + dv + tq + tk + 10) * u);
      const long double cap_error = spec.softcap > 0 ? 2 * (delta / spec.softcap + 8 * u) : 0;
      for (Eigen::Index i = 0; i < tq; ++i) {
        long double D = 0, D_abs = 0;
        const long double* g_out = d_out.row(b, h, i);
        for (Eigen::Index j = 0; j < tk; ++j) {
          const size_t js = static_cast<size_t>(j);
          dp[js] = dp_abs[js] = 0;
          logits[js] = reference_logit(Q, K, spec, scale, b, h, i, j);
          if (!logits[js].visible) continue;
          const long double* v = V.row(b, kh, j);
          for (Eigen::Index c = 0; c < dv; ++c) {
            dp[js] += g_out[c] * v[c];
            dp_abs[js] += std::fabs(g_out[c] * v[c]);
          }
          if (d_scores) {
            dp[js] += (*d_scores)(b, h, i, j);
            dp_abs[js] += std::fabs((*d_scores)(b, h, i, j));
          }
          D += f.scores(b, h, i, j) * dp[js];
          D_abs += f.scores(b, h, i, j) * dp_abs[js];
        }
        if (d_lse) {
          D -= (*d_lse)(b, h, i, 0);
          D_abs += std::fabs((*d_lse)(b, h, i, 0));
        }
        if (!spec.sinks.empty()) {  // the sink's weight (its own dP is 0: it has no value)
          const long double sink = spec.sinks[static_cast<size_t>(h)], lse = f.lse(b, h, i, 0);
          const long double p_sink = sink == -INFINITY ? 0 : std::exp(sink - lse);
          r.d_sinks[static_cast<size_t>(h)] -= p_sink * D;
          r.d_sinks_tol[static_cast<size_t>(h)] += (factor * p_sink + tiny) * D_abs + p_sink * D_abs * factor;
        }
        const long double* q = Q.row(b, h, i);
        long double *dq = r.dq.row(b, h, i), *dq_tol = r.dq_tol.row(b, h, i);
        for (Eigen::Index j = 0; j < tk; ++j) {
          const size_t js = static_cast<size_t>(j);
          const Logit& l = logits[js];
          if (!l.visible) continue;
          const long double p = f.scores(b, h, i, j);
          const long double p_error = factor * p + tiny;  // a weight's error, underflow included
          const long double dz = p * (dp[js] - D), dz_error = p_error * (dp_abs[js] + D_abs);
          if (spec.bias) {
            const Eigen::Index bb = spec.bias->n[0] == 1 ? 0 : b, bh = spec.bias->n[1] == 1 ? 0 : h;
            r.d_bias(bb, bh, i, j) += dz;
            r.d_bias_tol(bb, bh, i, j) += dz_error;
          }
          const long double ds = scale * l.cap_slope * dz;
          // A score modification's slope is off by its own rounding (8 ulps of it) and by the logit's
          // error delta times its curvature (MultiHeadSpec::score_curvature).
          const long double slope_error =
              cap_error +
              (spec.score ? 2 * (delta * spec.score_curvature + 8 * u * std::fabs(l.cap_slope)) : 0);
          const long double ds_error =
              std::fabs(scale) * (dz_error * std::fabs(l.cap_slope) + p * (dp_abs[js] + D_abs) * slope_error);
          const long double* k = K.row(b, kh, j);
          long double *dk_j = r.dk.row(b, kh, j), *dk_tol = r.dk_tol.row(b, kh, j);
          for (Eigen::Index c = 0; c < dk; ++c) {
            dq[c] += ds * k[c];
            dq_tol[c] += (ds_error + rho2 * std::fabs(ds)) * std::fabs(k[c]);
            dk_j[c] += ds * q[c];
            dk_tol[c] += (ds_error + rho2 * std::fabs(ds)) * std::fabs(q[c]);
          }
          long double *dv_j = r.dv.row(b, kh, j), *dv_tol = r.dv_tol.row(b, kh, j);
          for (Eigen::Index c = 0; c < dv; ++c) {
            dv_j[c] += p * g_out[c];
            dv_tol[c] += (p_error + rho2 * p) * std::fabs(g_out[c]);
          }
        }
      }
    }
  }
  return r;
}

namespace bw_ref_detail {

/// Writes every (a, b) slice of `src` into `dst` at token `first` (the inverse of token_range).
inline void put_tokens(Array4& dst, const Array4& src, Eigen::Index first) {
  for (Eigen::Index a = 0; a < src.n[0]; ++a)
    for (Eigen::Index b = 0; b < src.n[1]; ++b)
      for (Eigen::Index i = 0; i < src.n[2]; ++i)
        for (Eigen::Index c = 0; c < src.n[3]; ++c) dst(a, b, first + i, c) = src(a, b, i, c);
}

}  // namespace bw_ref_detail

/// The reference gradients of attention_varlen_into(Q, K, V) (reference.hpp's reference_varlen:
/// Q [1, H, total_q, d_k], K/V [1, H_kv, total_k, d]; sequence s is query rows
/// [cu_q[s], cu_q[s+1]) and key rows [cu_k[s], cu_k[s+1]), attended on its own with `spec`)
/// for dOUT [1, H, total_q, d_v], with error bounds in T. Each sequence is
/// reference_heads_backward on its token ranges, with that function's error model, its
/// gradients and bounds put back at the sequence's rows (a key row no sequence owns keeps 0
/// and bound 0). `forward` is reference_varlen's (groups (sequence, head), no scores). No
/// d_scores and no bias: varlen takes neither.
template <class T>
BackwardReference reference_varlen_backward(const Array4& Q, const Array4& K, const Array4& V,
                                            const MultiHeadSpec& spec, const std::vector<std::int64_t>& cu_q,
                                            const std::vector<std::int64_t>& cu_k, const Array4& d_out,
                                            const std::optional<Array4>& d_lse = std::nullopt) {
  BackwardReference r;
  r.forward = reference_varlen(Q, K, V, cu_q, cu_k, spec);  // checks spec, shapes and offsets
  const Eigen::Index H = Q.n[1], tq = Q.n[2], dk = Q.n[3];
  const Eigen::Index hkv = K.n[1], tk = K.n[2], dv = V.n[3];
  mh_detail::require(d_out.n == std::array<Eigen::Index, 4>{{1, H, tq, dv}}, "d_out shape");
  r.dq = r.dq_tol = Array4(1, H, tq, dk);
  r.dk = r.dk_tol = Array4(1, hkv, tk, dk);
  r.dv = r.dv_tol = Array4(1, hkv, tk, dv);
  if (!spec.sinks.empty()) r.d_sinks.assign(static_cast<size_t>(H), 0), r.d_sinks_tol = r.d_sinks;
  for (size_t s = 0; s + 1 < cu_q.size(); ++s) {
    const Eigen::Index q0 = cu_q[s], lq = cu_q[s + 1] - q0, k0 = cu_k[s], lk = cu_k[s + 1] - k0;
    std::optional<Array4> part_d_lse;
    if (d_lse) part_d_lse = d_lse->token_range(q0, lq);
    const BackwardReference part = reference_heads_backward<T>(
        Q.token_range(q0, lq), K.token_range(k0, lk), V.token_range(k0, lk),
        sequence_spec(spec, static_cast<long>(s)), d_out.token_range(q0, lq), std::nullopt, part_d_lse);
    for (size_t h = 0; h < r.d_sinks.size(); ++h) {
      r.d_sinks[h] += part.d_sinks[h];
      r.d_sinks_tol[h] += part.d_sinks_tol[h];
    }
    bw_ref_detail::put_tokens(r.dq, part.dq, q0);
    bw_ref_detail::put_tokens(r.dq_tol, part.dq_tol, q0);
    bw_ref_detail::put_tokens(r.dk, part.dk, k0);
    bw_ref_detail::put_tokens(r.dk_tol, part.dk_tol, k0);
    bw_ref_detail::put_tokens(r.dv, part.dv, k0);
    bw_ref_detail::put_tokens(r.dv_tol, part.dv_tol, k0);
  }
  return r;
}

}  // namespace ea_test
