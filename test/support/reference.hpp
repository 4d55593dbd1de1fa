// SPDX-License-Identifier: MIT
/// \file reference.hpp
/// The long-double reference of the tests: a naive attention written from the specification in
/// loops that read like it, independent of the library (it includes nothing from EigenAttention).
/// One implementation of the attention math, reference_heads (batches, GQA/MQA, boolean masks,
/// additive biases, key lengths, sliding windows, ALiBi, soft-capping); packed variable-length
/// batches (reference_varlen) and the single-head reference (reference_attention) are calls of
/// it, the latter the one-sequence, one-head case; reference_merge states merge_attention_into.
///
/// Q [B, H, T_q, d_k], K [B, H_kv, T_k, d_k], V [B, H_kv, T_k, d_v]; query head h reads K/V
/// head h / (H / H_kv). For sequence b: Tk_b = key_lengths ? key_lengths[b] : T_k, and
/// offset = 0 (top-left) or Tk_b - T_q (bottom-right). The logit of query i and key j:
///   1. s = scale * q_i . k_j                       (scale default 1/sqrt(d_k))
///   2. s = softcap * tanh(s / softcap)              when softcap > 0
///   3. s -= slope_h * |i + offset - j|              when ALiBi slopes are given
///   4. s += bias(b, h, i, j)                        (batch/head axes of size 1 broadcast)
///   5. s = -inf when mask(b, h, i, j) is false; when causal and j > i + offset; when
///      window_left >= 0 and j < i + offset - window_left; when window_right >= 0 and
///      j > i + offset + window_right; when chunk > 0 and floor((j + chunk_origin) / chunk) !=
///      floor((i + offset + chunk_origin) / chunk); when j >= Tk_b
///   6. row softmax subtracting the row maximum; a row without a finite logit gets zero
///      weights, a zero output row and LSE = -inf; a NaN logit makes the row NaN
///   7. OUT = weights V over the visible keys; LSE = max + log(sum)
/// For the single-head call (causal mask only) this is the order the specification states:
/// raw logits Q K^T, causal mask (-inf), scale, row softmax subtracting the row maximum; a row
/// that sees no key gets zero SCORES, zero ATTN and LSE = -inf.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tolerance.hpp"

namespace ea_test {

using MatrixLD = Eigen::Matrix<long double, Eigen::Dynamic, Eigen::Dynamic>;
using VectorLD = Eigen::Matrix<long double, Eigen::Dynamic, 1>;

/// The mask, described without the library's types.
struct MaskSpec {
  bool causal = false;
  bool bottom_right = false;  ///< alignment of the causal frontier; ignored when !causal
};

/// Whether query i (of tq) may see key j (of tk).
inline bool key_visible(Eigen::Index i, Eigen::Index j, Eigen::Index tq, Eigen::Index tk,
                        const MaskSpec& mask) {
  if (!mask.causal) return true;
  const Eigen::Index offset = mask.bottom_right ? tk - tq : 0;
  return j <= i + offset;
}

/// Everything the reference computes, plus the magnitudes the tolerance model needs.
struct ReferenceResult {
  MatrixLD scores;  ///< T_q x T_k
  MatrixLD attn;    ///< T_q x d_v
  VectorLD lse;     ///< T_q
  long double scale = 0;
  /// max over visible (i, j) of |scale| * sum_k |Q(i,k) K(j,k)|: bounds every scaled logit and
  /// sets the size of its rounding error (the softmax's condition number).
  long double logit_magnitude = 0;
  /// max |V(j, c)| (1 when V is empty).
  long double max_abs_v = 0;
};

/// Copies any dense Eigen expression into long double, element by element (exact for float
/// and double entries).
template <class Derived>
MatrixLD to_long_double(const Eigen::MatrixBase<Derived>& m) {
  MatrixLD r(m.rows(), m.cols());
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j) r(i, j) = static_cast<long double>(m(i, j));
  return r;
}

/// A dense row-major rank-4 array of long double: [n0, n1, n2, n3] (for the multi-head
/// tensors: [batch, heads, tokens, dim], the BHTD order).
struct Array4 {
  std::array<Eigen::Index, 4> n{{0, 0, 0, 0}};
  std::vector<long double> v;

  Array4() = default;
  Array4(Eigen::Index n0, Eigen::Index n1, Eigen::Index n2, Eigen::Index n3, long double fill = 0)
      : n{{n0, n1, n2, n3}}, v(static_cast<size_t>(n0 * n1 * n2 * n3), fill) {}

  Eigen::Index size() const { return n[0] * n[1] * n[2] * n[3]; }
  Eigen::Index index(Eigen::Index a, Eigen::Index b, Eigen::Index c, Eigen::Index d) const {
    return ((a * n[1] + b) * n[2] + c) * n[3] + d;
  }
  long double& operator()(Eigen::Index a, Eigen::Index b, Eigen::Index c, Eigen::Index d) {
    return v[static_cast<size_t>(index(a, b, c, d))];
  }
  long double operator()(Eigen::Index a, Eigen::Index b, Eigen::Index c, Eigen::Index d) const {
    return v[static_cast<size_t>(index(a, b, c, d))];
  }
  /// The n3 contiguous entries (a, b, c, 0 .. n3 - 1): the inner loops of the references read
  /// rows through these (under the sanitizers, valgrind and qemu an element access that is not
  /// inlined cost half their run time).
  const long double* row(Eigen::Index a, Eigen::Index b, Eigen::Index c) const {
    return v.data() + index(a, b, c, 0);
  }
  long double* row(Eigen::Index a, Eigen::Index b, Eigen::Index c) { return v.data() + index(a, b, c, 0); }
  /// A matrix as the one slice of a [1, 1, rows, cols] array.
  static Array4 one_head(const MatrixLD& m) {
    Array4 r(1, 1, m.rows(), m.cols());
    for (Eigen::Index i = 0; i < m.rows(); ++i)
      for (Eigen::Index j = 0; j < m.cols(); ++j) r(0, 0, i, j) = m(i, j);
    return r;
  }
  /// Slice (a, b) as an n2 x n3 matrix.
  MatrixLD slice(Eigen::Index a, Eigen::Index b) const {
    MatrixLD m(n[2], n[3]);
    for (Eigen::Index i = 0; i < n[2]; ++i)
      for (Eigen::Index j = 0; j < n[3]; ++j) m(i, j) = (*this)(a, b, i, j);
    return m;
  }
  /// Rows [first, first + count) of slice (a, b).
  MatrixLD rows(Eigen::Index a, Eigen::Index b, Eigen::Index first, Eigen::Index count) const {
    MatrixLD m(count, n[3]);
    for (Eigen::Index i = 0; i < count; ++i)
      for (Eigen::Index j = 0; j < n[3]; ++j) m(i, j) = (*this)(a, b, first + i, j);
    return m;
  }
  /// A new array holding tokens [first, first + count) of every (a, b) slice.
  Array4 token_range(Eigen::Index first, Eigen::Index count) const {
    Array4 r(n[0], n[1], count, n[3]);
    for (Eigen::Index a = 0; a < n[0]; ++a)
      for (Eigen::Index b = 0; b < n[1]; ++b)
        for (Eigen::Index i = 0; i < count; ++i)
          for (Eigen::Index j = 0; j < n[3]; ++j) r(a, b, i, j) = (*this)(a, b, first + i, j);
    return r;
  }
  /// A new array holding columns [first, first + count) of every (a, b) slice.
  Array4 col_range(Eigen::Index first, Eigen::Index count) const {
    Array4 r(n[0], n[1], n[2], count);
    for (Eigen::Index a = 0; a < n[0]; ++a)
      for (Eigen::Index b = 0; b < n[1]; ++b)
        for (Eigen::Index i = 0; i < n[2]; ++i)
          for (Eigen::Index j = 0; j < count; ++j) r(a, b, i, j) = (*this)(a, b, i, first + j);
    return r;
  }
};

/// floor(x / n) for n > 0 and either sign of x: the chunk of chunked-local attention that holds
/// position x (Options::chunk_size n), written here as the tests' own definition.
inline long floor_div(long x, long n) { return x >= 0 ? x / n : -((-x - 1) / n) - 1; }

/// Everything a multi-head call may be given besides Q, K, V, without the library's types.
struct MultiHeadSpec {
  bool causal = false;
  bool bottom_right = false;         ///< alignment of the causal frontier, the window and ALiBi
  std::optional<long double> scale;  ///< empty: 1/sqrt(d_k)
  long window_left = -1, window_right = -1;
  long chunk = 0, chunk_origin = 0;  ///< chunked-local attention (Options::chunk_size, chunk_origin)
  long double softcap = 0;
  std::optional<Array4> mask;             ///< 0/1 (1 = may attend), [1|B, 1|H, T_q, T_k]
  std::optional<Array4> bias;             ///< [1|B, 1|H, T_q, T_k]
  std::vector<std::int64_t> key_lengths;  ///< empty: not used
  std::vector<long double> alibi;         ///< one slope per query head; empty: not used
  std::vector<long double> sinks;         ///< one sink logit per query head; empty: not used
  /// Programmable attention (Masks::score_mod, mask_mod), at positions q = pos + chunk_origin,
  /// k = j + chunk_origin (pos: query i's diagonal key): score(s, b, h, q, k) after soft-capping
  /// (step 2b) with its derivative in s, score_slope, and keep(b, h, q, k) (step 5). Empty: not
  /// used.
  std::function<long double(long double, long, long, long, long)> score, score_slope;
  std::function<bool(long, long, long, long)> keep;
  long double score_curvature = 0;  ///< a bound on |d^2 score / ds^2| (the backward's error model)
};

/// The reference's results and, per problem (group g: sequence b and query head h,
/// g = b * H + h), what the error model needs.
struct MultiHeadReference {
  Array4 out;         ///< [B, H, T_q, d_v]
  Array4 lse;         ///< [B, H, T_q, 1]
  Array4 scores;      ///< [B, H, T_q, T_k] (not for varlen)
  Array4 avg_scores;  ///< [B, 1, T_q, T_k] (not for varlen)
  Eigen::Index heads = 0;
  /// Effective logit magnitude A_eff per group (see multihead_budget) and max |V| of the K/V
  /// head the group reads (at least 1), and the group's number of keys T_k.
  std::vector<long double> logit_magnitude, max_abs_v;
  std::vector<Eigen::Index> keys;
  Eigen::Index d_k = 0;
  long double scale = 0;  ///< the scale used
  /// Per group, max over visible (i, j) of A_ij = |scale| sum_k |q_ik k_jk| alone (no E_ij):
  /// the single-head error model's logit magnitude (ReferenceResult::logit_magnitude).
  std::vector<long double> dot_magnitude;
};

/// Error budget of one (sequence, head) problem in precision T.
///
/// It is tolerance.hpp's attention_budget (a logit off by at most delta = (d_k + 4) u A) with
/// A replaced by an effective magnitude A_eff = max over visible (i, j) of
///     A_ij + E_ij / (d_k + 4),   A_ij = |scale| sum_k |q_ik k_jk|,
///     E_ij = 2 |s_scaled| + 8 |s_capped| (soft-cap on) + 4 |alibi_ij| + 4 |bias_ij|,
/// so that delta covers every rounding the new steps add to the logit, each bounded by u times
/// the magnitude it rounds:
///   - the additions of the ALiBi term and of the bias round results of magnitude at most
///     |s_scaled| + |alibi| + |bias| (two roundings: the 2 |s_scaled| and part of the 4s);
///   - ALiBi: the slope rounded to T and the product slope * distance (distance exact);
///   - bias: rounding it to T;
///   - soft-cap c tanh(s / c): |tanh'| <= 1 passes the dot product's error on unamplified, and
///     since x sech^2(x) <= tanh(x) for x >= 0, rounding s / c, rounding c itself, the final
///     product and up to 4 ulps of a vectorised tanh each cost at most u |s_capped|: 7, rounded
///     up to 8.
/// With none of these steps (E_ij = 2 |s_scaled| <= 2 A_ij) this is at most (d_k + 6)/(d_k + 4)
/// times the single-head budget.
template <class T>
Budget multihead_budget(const MultiHeadReference& ref, Eigen::Index group) {
  const auto g = static_cast<size_t>(group);
  return attention_budget<T>(ref.logit_magnitude[g], ref.max_abs_v[g], ref.d_k, ref.keys[g]);
}

/// Budget of AVG_SCORES of sequence b: the mean of H weights p_h >= 0, each within its head's
/// bound tiny + rel_h p_h, is within tiny + max_h rel_h mean; summing H terms and dividing by
/// H add (H + 1) u relative.
template <class T>
Tol average_scores_budget(const MultiHeadReference& ref, Eigen::Index b) {
  long double rel = 0;
  for (Eigen::Index h = 0; h < ref.heads; ++h)
    rel = std::max(rel, multihead_budget<T>(ref, b * ref.heads + h).scores.rel);
  return Tol{tiny_weight<T>(), rel + static_cast<long double>(ref.heads + 1) * unit_roundoff<T>()};
}

namespace mh_detail {

inline void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("multihead reference: " + what);
}

}  // namespace mh_detail

/// The logit of query i and key j of sequence b and query head h, steps 1-5 of the header.
struct Logit {
  bool visible = false;
  long double value = 0;      ///< the final logit (when visible)
  long double cap_slope = 1;  ///< d(capped)/d(scaled): 1 - tanh^2(s / softcap), 1 without soft-cap
  long double abs_dot = 0;    ///< |scale| sum_k |q_ik k_jk|
  long double extra = 0;      ///< E_ij of multihead_budget
};

inline Logit reference_logit(const Array4& Q, const Array4& K, const MultiHeadSpec& spec, long double scale,
                             Eigen::Index b, Eigen::Index h, Eigen::Index i, Eigen::Index j) {
  const Eigen::Index H = Q.n[1], tq = Q.n[2], dk = Q.n[3], tk = K.n[2];
  const Eigen::Index kh = h / (H / K.n[1]);
  const Eigen::Index len = spec.key_lengths.empty() ? tk : static_cast<Eigen::Index>(spec.key_lengths[b]);
  const Eigen::Index pos = i + (spec.bottom_right ? len - tq : 0);
  Logit l;
  long double dot = 0, abs_dot = 0;
  const long double *q = Q.row(b, h, i), *k = K.row(b, kh, j);
  for (Eigen::Index c = 0; c < dk; ++c) {
    dot += q[c] * k[c];
    abs_dot += std::fabs(q[c] * k[c]);
  }
  l.abs_dot = std::fabs(scale) * abs_dot;
  long double s = scale * dot;  // 1.
  l.extra = 2 * std::fabs(s);
  if (spec.softcap > 0) {  // 2.
    const long double t = std::tanh(s / spec.softcap);
    s = spec.softcap * t;
    l.cap_slope = 1 - t * t;
    l.extra += 8 * std::fabs(s);
  }
  const long qpos = static_cast<long>(pos) + spec.chunk_origin,
             kpos = static_cast<long>(j) + spec.chunk_origin;
  if (spec.score) {  // 2b. (its own rounding: a few ulps of its result, as the soft-cap's)
    l.cap_slope *= spec.score_slope(s, static_cast<long>(b), static_cast<long>(h), qpos, kpos);
    s = spec.score(s, static_cast<long>(b), static_cast<long>(h), qpos, kpos);
    l.extra += 8 * std::fabs(s);
  }
  if (!spec.alibi.empty()) {  // 3.
    const long double a = spec.alibi[static_cast<size_t>(h)] * std::fabs(static_cast<long double>(pos - j));
    s -= a;
    l.extra += 4 * std::fabs(a);
  }
  if (spec.bias) {  // 4.
    const Array4& bs = *spec.bias;
    const long double x = bs(bs.n[0] == 1 ? 0 : b, bs.n[1] == 1 ? 0 : h, i, j);
    s += x;
    if (std::isfinite(x)) l.extra += 4 * std::fabs(x);
  }
  bool visible = j < len;  // 5.
  if (spec.mask) {
    const Array4& ms = *spec.mask;
    visible = visible && ms(ms.n[0] == 1 ? 0 : b, ms.n[1] == 1 ? 0 : h, i, j) != 0;
  }
  if (spec.keep) visible = visible && spec.keep(static_cast<long>(b), static_cast<long>(h), qpos, kpos);
  if (spec.causal) visible = visible && j <= pos;
  if (spec.window_left >= 0) visible = visible && j >= pos - spec.window_left;
  if (spec.window_right >= 0) visible = visible && j <= pos + spec.window_right;
  if (spec.chunk > 0) {  // the same chunk of positions: floor((x + origin) / chunk), x = j and pos
    const long o = spec.chunk_origin;  // |x + o| <= 2^60 + T: no overflow
    visible = visible && floor_div(static_cast<long>(j) + o, spec.chunk) ==
                             floor_div(static_cast<long>(pos) + o, spec.chunk);
  }
  l.visible = visible;
  l.value = s;
  return l;
}

/// The reference for attention_heads_into / attention_heads_decomposed_into.
inline MultiHeadReference reference_heads(const Array4& Q, const Array4& K, const Array4& V,
                                          const MultiHeadSpec& spec) {
  using mh_detail::require;
  const Eigen::Index B = Q.n[0], H = Q.n[1], tq = Q.n[2], dk = Q.n[3];
  const Eigen::Index hkv = K.n[1], tk = K.n[2], dv = V.n[3];
  require(K.n[0] == B && V.n[0] == B && V.n[1] == hkv && V.n[2] == tk && K.n[3] == dk, "shapes");
  require(hkv > 0 && H % hkv == 0, "H not a multiple of H_kv");
  require(spec.key_lengths.empty() || static_cast<Eigen::Index>(spec.key_lengths.size()) == B, "key_lengths");
  require(spec.alibi.empty() || static_cast<Eigen::Index>(spec.alibi.size()) == H, "alibi");
  require(spec.sinks.empty() || static_cast<Eigen::Index>(spec.sinks.size()) == H, "sinks");
  for (const auto* m : {spec.mask ? &*spec.mask : nullptr, spec.bias ? &*spec.bias : nullptr})
    if (m)
      require(
          (m->n[0] == 1 || m->n[0] == B) && (m->n[1] == 1 || m->n[1] == H) && m->n[2] == tq && m->n[3] == tk,
          "mask/bias shape");
  const long double inf = std::numeric_limits<long double>::infinity();
  const long double scale = spec.scale ? *spec.scale : 1.0L / std::sqrt(static_cast<long double>(dk));
  const Eigen::Index group_size = H / hkv;

  MultiHeadReference r;
  r.heads = H;
  r.d_k = dk;
  r.scale = scale;
  r.out = Array4(B, H, tq, dv, 0);
  r.lse = Array4(B, H, tq, 1, -inf);
  r.scores = Array4(B, H, tq, tk, 0);
  r.avg_scores = Array4(B, 1, tq, tk, 0);
  r.logit_magnitude.assign(static_cast<size_t>(B * H), 0);
  r.dot_magnitude.assign(static_cast<size_t>(B * H), 0);
  r.max_abs_v.assign(static_cast<size_t>(B * H), 1);
  r.keys.assign(static_cast<size_t>(B * H), tk);

  std::vector<long double> logits(static_cast<size_t>(tk));
  for (Eigen::Index b = 0; b < B; ++b) {
    if (!spec.key_lengths.empty())
      require(spec.key_lengths[b] >= 0 && spec.key_lengths[b] <= tk, "key length out of range");
    for (Eigen::Index h = 0; h < H; ++h) {
      const Eigen::Index kh = h / group_size;
      const size_t g = static_cast<size_t>(b * H + h);
      for (Eigen::Index j = 0; j < tk; ++j)
        for (Eigen::Index c = 0; c < dv; ++c)
          r.max_abs_v[g] = std::max(r.max_abs_v[g], std::fabs(V(b, kh, j, c)));
      for (Eigen::Index i = 0; i < tq; ++i) {
        for (Eigen::Index j = 0; j < tk; ++j) {
          const Logit l = reference_logit(Q, K, spec, scale, b, h, i, j);
          logits[static_cast<size_t>(j)] = l.visible ? l.value : -inf;
          if (l.visible) {
            r.logit_magnitude[g] =
                std::max(r.logit_magnitude[g], l.abs_dot + l.extra / static_cast<long double>(dk + 4));
            r.dot_magnitude[g] = std::max(r.dot_magnitude[g], l.abs_dot);
          }
        }
        // 6. The softmax over the visible keys and the sink (Masks::sinks), which has no value.
        const long double sink = spec.sinks.empty() ? -inf : spec.sinks[static_cast<size_t>(h)];
        // (A NaN logit makes the maximum NaN, and with it the row: std::max would skip it, and a
        // row whose every logit is NaN would pass for one that sees no key.)
        long double m = sink;
        for (const long double x : logits) m = std::isnan(x) || x > m ? x : m;
        if (m == -inf) continue;  // no visible key and no sink: zeros and -inf, already set
        long double sum = sink == -inf ? 0 : std::exp(sink - m);
        for (const long double x : logits) sum += std::exp(x - m);
        for (Eigen::Index j = 0; j < tk; ++j)
          r.scores(b, h, i, j) = std::exp(logits[static_cast<size_t>(j)] - m) / sum;
        r.lse(b, h, i, 0) = m + std::log(sum);
        long double* out = r.out.row(b, h, i);  // 7. (zeros, summed over j in order)
        const long double* w = r.scores.row(b, h, i);
        for (Eigen::Index j = 0; j < tk; ++j) {
          const long double* v = V.row(b, kh, j);
          for (Eigen::Index c = 0; c < dv; ++c) out[c] += w[j] * v[c];
        }
      }
    }
    for (Eigen::Index i = 0; i < tq; ++i)
      for (Eigen::Index j = 0; j < tk; ++j) {
        long double acc = 0;
        for (Eigen::Index h = 0; h < H; ++h) acc += r.scores(b, h, i, j);
        r.avg_scores(b, 0, i, j) = H > 0 ? acc / static_cast<long double>(H) : 0;
      }
  }
  return r;
}

/// The single-head reference: reference_heads on one sequence and one head (B = H = H_kv = 1).
/// `scale` empty means 1/sqrt(d_k).
template <class DQ, class DK, class DV>
ReferenceResult reference_attention(const Eigen::MatrixBase<DQ>& Q_in, const Eigen::MatrixBase<DK>& K_in,
                                    const Eigen::MatrixBase<DV>& V_in, const MaskSpec& mask,
                                    std::optional<long double> scale = std::nullopt) {
  MultiHeadSpec spec;
  spec.causal = mask.causal;
  spec.bottom_right = mask.causal && mask.bottom_right;
  spec.scale = scale;
  const MultiHeadReference m =
      reference_heads(Array4::one_head(to_long_double(Q_in)), Array4::one_head(to_long_double(K_in)),
                      Array4::one_head(to_long_double(V_in)), spec);
  ReferenceResult r;
  r.scale = m.scale;
  r.scores = m.scores.slice(0, 0);
  r.attn = m.out.slice(0, 0);
  r.lse = m.lse.slice(0, 0).col(0);
  r.logit_magnitude = m.dot_magnitude[0];
  r.max_abs_v = m.max_abs_v[0];
  return r;
}

/// `spec` for sequence s of a packed batch, attended on its own (batch 1): its programmable
/// functions see s as their batch index.
inline MultiHeadSpec sequence_spec(const MultiHeadSpec& spec, long s) {
  MultiHeadSpec seq = spec;
  if (spec.score) {
    seq.score = [&spec, s](long double x, long, long h, long q, long k) { return spec.score(x, s, h, q, k); };
    seq.score_slope = [&spec, s](long double x, long, long h, long q, long k) {
      return spec.score_slope(x, s, h, q, k);
    };
  }
  if (spec.keep) seq.keep = [&spec, s](long, long h, long q, long k) { return spec.keep(s, h, q, k); };
  return seq;
}

/// The reference for attention_varlen_into: Q [1, H, total_q, d_k], K/V [1, H_kv, total_k, d];
/// sequence s is rows [cu_q[s], cu_q[s+1]) and [cu_k[s], cu_k[s+1]), attended on its own with
/// `spec` (which may use ALiBi, causal, window, soft-cap and scale only). Groups are
/// (sequence, head): g = s * H + h. scores/avg_scores stay empty.
inline MultiHeadReference reference_varlen(const Array4& Q, const Array4& K, const Array4& V,
                                           const std::vector<std::int64_t>& cu_q,
                                           const std::vector<std::int64_t>& cu_k, const MultiHeadSpec& spec) {
  using mh_detail::require;
  require(!spec.mask && !spec.bias && spec.key_lengths.empty(), "varlen takes no mask, bias or key lengths");
  require(Q.n[0] == 1 && K.n[0] == 1 && V.n[0] == 1, "varlen batch must be 1");
  require(cu_q.size() == cu_k.size() && !cu_q.empty(), "cu_seqlens");
  const Eigen::Index n = static_cast<Eigen::Index>(cu_q.size()) - 1, H = Q.n[1];
  const long double inf = std::numeric_limits<long double>::infinity();
  MultiHeadReference r;
  r.heads = H;
  r.d_k = Q.n[3];
  r.scale = spec.scale ? *spec.scale : 1.0L / std::sqrt(static_cast<long double>(Q.n[3]));
  r.out = Array4(1, H, Q.n[2], V.n[3], 0);
  r.lse = Array4(1, H, Q.n[2], 1, -inf);
  r.logit_magnitude.assign(static_cast<size_t>(n * H), 0);
  r.dot_magnitude.assign(static_cast<size_t>(n * H), 0);
  r.max_abs_v.assign(static_cast<size_t>(n * H), 1);
  r.keys.assign(static_cast<size_t>(n * H), 0);
  for (Eigen::Index s = 0; s < n; ++s) {
    const Eigen::Index q0 = cu_q[s], lq = cu_q[s + 1] - cu_q[s], k0 = cu_k[s], lk = cu_k[s + 1] - cu_k[s];
    require(lq >= 0 && lk >= 0 && q0 + lq <= Q.n[2] && k0 + lk <= K.n[2], "cu_seqlens out of range");
    const auto part = reference_heads(Q.token_range(q0, lq), K.token_range(k0, lk), V.token_range(k0, lk),
                                      sequence_spec(spec, static_cast<long>(s)));
    for (Eigen::Index h = 0; h < H; ++h) {
      const size_t g = static_cast<size_t>(s * H + h);
      r.logit_magnitude[g] = part.logit_magnitude[static_cast<size_t>(h)];
      r.dot_magnitude[g] = part.dot_magnitude[static_cast<size_t>(h)];
      r.max_abs_v[g] = part.max_abs_v[static_cast<size_t>(h)];
      r.keys[g] = lk;
      for (Eigen::Index i = 0; i < lq; ++i) {
        r.lse(0, h, q0 + i, 0) = part.lse(0, h, i, 0);
        for (Eigen::Index c = 0; c < V.n[3]; ++c) r.out(0, h, q0 + i, c) = part.out(0, h, i, c);
      }
    }
  }
  return r;
}

/// merge_attention_into's specification, row by row, in long double.
inline void reference_merge(const Array4& out_a, const Array4& lse_a, const Array4& out_b,
                            const Array4& lse_b, Array4& out, Array4& lse) {
  const long double inf = std::numeric_limits<long double>::infinity();
  out = Array4(out_a.n[0], out_a.n[1], out_a.n[2], out_a.n[3], 0);
  lse = Array4(lse_a.n[0], lse_a.n[1], lse_a.n[2], 1, -inf);
  for (Eigen::Index b = 0; b < out_a.n[0]; ++b)
    for (Eigen::Index h = 0; h < out_a.n[1]; ++h)
      for (Eigen::Index i = 0; i < out_a.n[2]; ++i) {
        const long double la = lse_a(b, h, i, 0), lb = lse_b(b, h, i, 0);
        const long double m = std::max(la, lb);
        if (m == -inf) continue;
        const long double wa = std::exp(la - m), wb = std::exp(lb - m);
        for (Eigen::Index c = 0; c < out_a.n[3]; ++c)
          out(b, h, i, c) = (wa * out_a(b, h, i, c) + wb * out_b(b, h, i, c)) / (wa + wb);
        lse(b, h, i, 0) = m + std::log(wa + wb);
      }
}

}  // namespace ea_test
