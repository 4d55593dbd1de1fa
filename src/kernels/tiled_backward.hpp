// SPDX-License-Identifier: MIT
// The tiled backward kernel (FlashAttention-2's algorithm), written once and compiled once per
// kernel of the table next to the forward (tiled_isa.cpp.in); same rules as tiled.hpp, whose
// helpers it uses. Internal.
//
// With the forward's log-sum-exps, the weights of query row i and key j are recomputed as the
// forward had them: P_ij = exp(z_ij - lse_i) r_i, z the final logit (scaled, soft-capped, ALiBi,
// bias, masks) and r_i = 1 / sum_j exp(z_ij - lse_i), which renormalises the row: a weight
// computed from a rounded LSE alone is off by the LSE's rounding (half an ulp of |lse_i|, for
// large logits far above the weight's own rounding; the naive expression normalises exactly).
// With dP = dO V^T and D_i = dO_i . O_i, the gradient of the logits is dZ = P o (dP - D)
// (o: element-wise), and
//   dV = P^T dO,   dQ = scale (dZ o c') K,   dK = scale (dZ o c')^T Q,   dbias = dZ,
// c' = 1 - tanh^2(s / softcap) being the soft-cap's derivative (1 without one). A loss on the
// weights adds d_scores to dP and sum_j P_ij d_scores_ij to D_i (the softmax's Jacobian).
//
// One tile of kBackwardRows query rows at a time, in three steps over its key tiles
// (kBackwardCols keys each), which the scheduler (backward.hpp) runs, each key tile on any thread:
//   backward_weights: S = scale Q K^T and exp(z - lse) of one key tile, into the query tile's
//     row of weights (kBackwardRows x T_k: O(T) memory, like the decomposed forward's rows), and
//     the tile's partial row sums;
//   backward_terms: r_i and D_i from the partial sums, added in key-tile order;
//   backward_pair: one key tile against the query tile: dP = dO V^T, dZ row by row, then
//     dV += P^T dO and dK += dZ^T Q (into the key tile's gradient rows) and the query tile's
//     share of dQ, dZ K, into a tile the scheduler adds in key order.
// Five products of T_q T_k d in all, one exp per weight; nothing T_q x T_k. Every product runs on
// the forward's register-blocked micro-kernel (micro_kernel.hpp): S and dP as the forward forms
// its logits (K and V packed into panels), dV and dK with the weights and dZ as its transposed
// operand (read in place, down a strip of MR columns), dZ K as the forward's P V. Each
// element of a gradient is one chain of multiply-adds in a fixed order (the query rows of a tile
// in order, the tiles in order), whichever thread runs the tile.
//
// bfloat16 and half (E, the element type of the arrays) compute in float (T), as the forward
// does: each tile of Q, K, V, O and dO is widened as it is loaded into the thread's scratch
// (tile_rows in tiled.hpp), as are the row of d_scores and the bias values in use, and the
// gradients accumulate in float (RawGradient in abi.hpp), rounded once by the caller. Widening
// is exact and every operation is the float kernel's, so a 16-bit result is bitwise the float
// pass on the widened inputs, rounded once.
//
// Keys a row does not see weigh exactly 0 and get exactly zero gradient: P and dZ are set, not
// multiplied, outside each row's key range and where the boolean mask hides a key. A pair that
// hides keys and holds a non-finite Q, dO or K row sums over visible pairs only (as the forward
// does for V), so that a hidden NaN never reaches a gradient that does not depend on it.
#pragma once

#include <numeric>

#include "kernels/tiled.hpp"

namespace EigenAttention {
namespace internal {
namespace {

static_assert(3 * kBackwardRows + 5 * kBackwardCols + 64 < kScratchRows,
              "backward tiles too large for the scratch size limit");

/// Are all entries of a tile finite? (x * 0 is NaN for NaN or +-inf.)
template <class Tile>
bool finite(const Tile& m) {
  using T = typename Tile::Scalar;
  const T sum = (m.array() * T(0)).sum();
  return sum == sum;
}

/// dL/dSCORES of row i, keys [j, j + n), as a strided row of the compute type: in place for
/// float and double; bfloat16 and half widened into `buffer` (n elements) first, and read
/// through the same strided map (so the same sums in the same order).
template <typename S, typename T = ComputeScalar<S>>
Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>, Eigen::Unaligned, Eigen::InnerStride<>> d_scores_row(
    const RawProblem<S>& p, index_t i, index_t j, index_t n, T* buffer) {
  const RawMatrix<const S>& g = p.grad.d_scores;
  if constexpr (std::is_same_v<S, T>) {
    (void)buffer;
    return {g.data + i * g.row_stride + j * g.col_stride, n, Eigen::InnerStride<>(g.col_stride)};
  } else {
    widen(g.data + i * g.row_stride + j * g.col_stride, g.col_stride, n, buffer);
    return {buffer, n, Eigen::InnerStride<>(1)};
  }
}

/// Row r of a tile of logits S (keys [j0, j0 + cols), query row i) becomes the weights
/// exp(z - lse_i), and `cap` (when soft-capping) the soft-cap's derivative: zero
/// outside [span.a, span.b), and for the keys `shown` (when given) does not show.
template <typename S, typename T>
void weights_row(const RawProblem<S>& p, index_t i, index_t j0, index_t cols, const Span& span, T* s, T* cap,
                 const ShownKeys* shown = nullptr) {
  const T lse = p.grad.lse.data[i * p.grad.lse.row_stride];
  Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>> row(s, cols);
  row.head(span.a).setZero();
  row.tail(cols - span.b).setZero();
  auto seg = row.segment(span.a, span.b - span.a);
  if (span.a == span.b || lse == -std::numeric_limits<T>::infinity()) {  // the row sees no key
    seg.setZero();
    return;
  }
  if (p.softcap > 0) {
    seg = (p.softcap * (seg.array() / p.softcap).tanh()).matrix();
    Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>>(cap + span.a, span.b - span.a) =
        (T(1) - (seg.array() / p.softcap).square()).matrix();
  }
  if (p.score_mod != nullptr) {  // f(s) and df/ds, chained onto the soft-cap's derivative
    T derivative[kMaskChunk];
    for (index_t c0 = span.a; c0 < span.b; c0 += kMaskChunk) {
      const index_t n = std::min(kMaskChunk, span.b - c0);
      apply_score_mod(p, i, j0 + c0, s + c0, n, derivative);
      for (index_t t = 0; t < n; ++t)
        cap[c0 + t] = p.softcap > 0 ? cap[c0 + t] * derivative[t] : derivative[t];
    }
  }
  if (p.has_alibi || p.bias.data != nullptr) apply_additive(p, i, j0 + span.a, seg);  // (p has no masks)
  if (shown != nullptr) shown->hide(s, span.a, span.b);
  exp_in_packets<Shift::Any>(s, span.a, span.b, lse);  // hidden keys (-inf) give exactly 0
}

/// Rows [first, first + n) of m in the compute type, as rows of `width` >= m.cols elements
/// whose columns past m.cols are 0, `ld` elements apart: in place when m's rows already are
/// such rows, else copied (widened, for 16-bit types) into `scratch` (n x width). An input (S
/// const) is read through the result; a gradient (S the compute type) is added into through it,
/// and store_rows() writes rows that were copied back.
template <typename S, typename T>
std::conditional_t<std::is_const_v<S>, const T*, T*> padded_rows(const RawMatrix<S>& m, index_t first,
                                                                 index_t n, index_t width, T* scratch,
                                                                 index_t& ld) {
  using E = std::remove_const_t<S>;
  if constexpr (std::is_same_v<E, T>) {
    if (m.cols > 0 && m.cols == width && m.col_stride == 1 && m.row_stride >= m.cols) {
      ld = m.row_stride;
      return m.data + first * m.row_stride;
    }
  }
  // (With no columns, m's data may be null (an empty Eigen::Matrix) and is never offset: the
  // caller offsets the result by whole rows, which must then be the scratch.)
  for (index_t i = 0; i < n; ++i) {
    T* dst = scratch + i * width;
    if (m.cols > 0) {
      const E* src = m.data + (first + i) * m.row_stride;
      if constexpr (std::is_same_v<E, T>) {
        for (index_t c = 0; c < m.cols; ++c) dst[c] = src[c * m.col_stride];
      } else {
        widen(src, m.col_stride, m.cols, dst);
      }
    }
    std::fill(dst + m.cols, dst + width, T(0));
  }
  ld = std::max<index_t>(width, 1);
  return scratch;
}

/// Writes the rows of a gradient m that padded_rows() copied back into m (nothing when they were
/// m's own).
template <typename T>
void store_rows(const RawMatrix<T>& m, index_t first, index_t n, const T* rows, index_t ld) {
  if (n == 0 || m.cols == 0 || rows == m.data + first * m.row_stride) return;
  for (index_t i = 0; i < n; ++i)
    for (index_t c = 0; c < m.cols; ++c)
      m.data[(first + i) * m.row_stride + c * m.col_stride] = rows[i * ld + c];
}

/// The K panels (values false; depth d_k) or V panels (true; depth d_v) from the panel that holds
/// key j0 (panel_offset(j0): j0's column in it) in its tile of the grid of multiples of
/// kBackwardCols, as pack_panels lays them out:
/// the whole tile packed once per call and thread into the thread's PackCache (tiled.hpp) when
/// the call has a number and all its tiles fit, so that the call's later query tiles and the
/// other query heads of a GQA group find them packed; else packed into `scratch` (whole panels of
/// kBackwardCols keys). `rows` takes the tile's rows when they must be gathered or widened first.
template <typename T>
constexpr index_t panel_offset(index_t j0) {
  return j0 % kBackwardCols % Micro<T>::kCols;
}
template <typename E, typename T = ComputeScalar<E>>
const T* key_panels(const RawProblem<E>& p, index_t j0, bool values, T* rows, T* scratch) {
  constexpr index_t C = kBackwardCols, room = Micro<T>::whole_panels(C);
  const index_t dk = p.k.cols, dv = p.v.cols, tiles = (p.k.rows + C - 1) / C, t = j0 / C;
  const std::size_t need = static_cast<std::size_t>(tiles * room) * static_cast<std::size_t>(dk + dv);
  // The whole key tile is packed (a step may start past its first key, at a whole packet).
  const index_t base = t * C, keys = std::min(C, p.k.rows - base);
  const index_t skip = (j0 - base - panel_offset<T>(j0)) * (values ? dv : dk);
  T* dst = scratch;
  // The layout's name, -C, is one the forward's key tiles (> 0) never take.
  if (PackCache<T>* c = PackCache<T>::open(p, -C, dv, tiles, need)) {
    dst = c->data + (values ? tiles * room * dk + t * room * dv : t * room * dk);
    const unsigned char bit = values ? PackCache<T>::kValuesCopied : PackCache<T>::kKeysPacked;
    if (c->ready[t] & bit) return dst + skip;
    c->ready[t] |= bit;
  }
  const RawMatrix<const E>& m = values ? p.v : p.k;
  const auto M = tile_rows(m, base, keys, rows);
  pack_panels(M.data(), M.outerStride(), keys, m.cols, dst);
  return dst + skip;
}

#if defined(__AVX512BF16__)
/// key_panels on bf16 pairs (kPairs, tiled.hpp): the K (values false) or V (true) panels from key
/// j0 on (its tile packed whole) as pack_panels_pairs lays them out, pairs along d_k or d_v (whole blocks of
/// kPairBlock, the padding 0), kept in the thread's PackCache of pairs like key_panels', else
/// packed into `scratch`.
inline const Pair* key_panels_pairs(const RawProblem<BFloat16Bits>& p, index_t j0, bool values,
                                    Pair* scratch) {
  constexpr index_t C = kBackwardCols, room = Micro<float>::whole_panels(C);
  const index_t kp = whole_pair_blocks((p.k.cols + 1) / 2), vp = whole_pair_blocks((p.v.cols + 1) / 2);
  const index_t tiles = (p.k.rows + C - 1) / C, t = j0 / C;
  const std::size_t need = static_cast<std::size_t>(tiles * room) * static_cast<std::size_t>(kp + vp);
  // The whole key tile is packed (a step may start past its first key, at a whole panel).
  const index_t base = t * C, keys = std::min(C, p.k.rows - base), skip = (j0 - base) * (values ? vp : kp);
  Pair* dst = scratch;
  if (PackCache<Pair>* c = PackCache<Pair>::open(p, -C, p.v.cols, tiles, need)) {
    dst = c->data + (values ? tiles * room * kp + t * room * vp : t * room * kp);
    const unsigned char bit = values ? PackCache<Pair>::kValuesCopied : PackCache<Pair>::kKeysPacked;
    if (c->ready[t] & bit) return dst + skip;
    c->ready[t] |= bit;
  }
  const RawMatrix<const BFloat16Bits>& m = values ? p.v : p.k;
  pack_panels_pairs(m.data + base * m.row_stride, m.row_stride, m.col_stride, keys, m.cols, dst,
                    values ? vp : kp);
  return dst + skip;
}
#endif

/// A backward step may start past its key tile's first key at a multiple of this many keys: whole
/// packets (logits_strip starts within a panel), whole panels for the pairs (kPairs), and whole
/// 64-byte lines of the weights. (A block of 128 keys starts where it starts.)
template <typename E>
constexpr index_t kBackwardColumnUnit = std::lcm(kPairs<E> ? Micro<ComputeScalar<E>>::kCols
                                                           : Micro<ComputeScalar<E>>::kLanes,
                                                 index_t(64 / sizeof(ComputeScalar<E>)));

/// Row i's keys in the key tile [j0, j0 + cols) (cols <= kBackwardCols) that both steps compute,
/// and whether the masks were asked which of them they show (then `shown` says).
struct RowKeys {
  Span span;
  bool asked;
  ShownKeys shown;
};

/// span_in_tile, narrowed to the first and the last key the masks (boolean and programmable) show
/// the row, whose answers go to `seen` (asked; not when the block mask calls every tile Full and
/// there is no boolean mask: nothing is hidden). So a mask_mod that states a built-in mask, or the
/// boolean mask, computes the built-in's weights over the built-in's keys, to the bit; a row of a
/// packed document computes its own document's keys only; and each step asks the masks once per
/// row.
template <typename E>
RowKeys backward_keys(const RawProblem<E>& p, index_t i, index_t j0, index_t cols, unsigned char* seen) {
  const Span s = span_in_tile(p, i, j0, cols);
  const index_t n = s.b - s.a;
  if (!p.hides_some() || n <= 0) return {s, false, {}};
  if (p.mask.data == nullptr && blocks_all_full(p, i, 1, j0 + s.a, n)) return {s, false, {}};
  unsigned char* const v = seen + s.a;
  // With a boolean mask, every key of the span gets an answer, which the boolean mask's joins
  // (no tile class stands for them); else only the block mask's cut tiles are asked.
  const bool boolean = p.mask.data != nullptr;
  if (p.mask_mod != nullptr || p.blocks != nullptr) {
    programmed_visibility(p, i, 1, j0 + s.a, n, v, n, !boolean);
  } else {
    std::fill_n(v, n, static_cast<unsigned char>(1));
  }
  if (boolean) {
    const bool* m = p.mask.data + i * p.mask.row_stride + (j0 + s.a) * p.mask.col_stride;
    for (index_t t = 0; t < n; ++t) v[t] = v[t] & static_cast<unsigned char>(m[t * p.mask.col_stride]);
  }
  const ShownKeys shown = boolean ? ShownKeys{nullptr, 1, j0, seen} : shown_keys(p, i, j0, seen);
  const index_t a = shown.first(s.a, s.b);
  return {{a, shown.last_end(a, s.b)}, true, shown};
}

/// backward_keys of the strip's rows [i, i + rows) into keys[r] (their answers in seen, a row of
/// kBackwardCols each), and the keys from the first that one of them sees to the last ([cols, 0):
/// none).
template <typename E>
Span strip_row_keys(const RawProblem<E>& p, index_t i, index_t rows, index_t j0, index_t cols,
                    unsigned char* seen, RowKeys* keys) {
  Span all{cols, 0};
  for (index_t r = 0; r < rows; ++r) {
    keys[r] = backward_keys(p, i + r, j0, cols, seen + r * kBackwardCols);
    const Span span = keys[r].span;
    if (span.a < span.b) all.a = std::min(all.a, span.a), all.b = std::max(all.b, span.b);
  }
  return all;
}

/// The logits alpha a kᵀ of a strip's `rows` rows (a: lda apart, `depth` columns) with a backward
/// step's keys [keys.a, keys.b), from the packed panels kp of its key tile, in which the step's
/// first key lies `from` keys into its panel: from keys.a rounded down to a whole packet, which
/// it returns (from is a whole packet too), to keys.b, into c (key t in column t), ldc apart.
template <typename T>
index_t step_logits(index_t rows, Span keys, index_t from, index_t depth, const T* a, index_t lda,
                    const T* kp, T* c, index_t ldc, T alpha) {
  const index_t lo = keys.a / Micro<T>::kLanes * Micro<T>::kLanes;
  logits_strip(rows, from + keys.b, depth, a, lda, kp, c + lo, ldc, alpha, from + lo, false);
  return lo;
}

/// p without its masks that hide keys within a row's key range (the boolean mask, mask_mod, a
/// block mask): backward_keys' answers stand for them.
template <typename E>
RawProblem<E> without_masks(const RawProblem<E>& p) {
  RawProblem<E> q = p;
  q.mask.data = nullptr, q.mask_mod = nullptr, q.blocks = nullptr;
  return q;
}

/// Step 1, query tile `tile`, keys [j0, j0 + cols): the weights exp(z - lse) of its rows into
/// w (row r at w + r * ldw, column t for key j0 + t; w 64-byte aligned and ldw a whole number
/// of 64-byte lines), the soft-cap's derivative into cap (same layout) when soft-capping, and
/// partial[2 r], partial[2 r + 1] = the sums over row r's keys in the tile of the weights and of
/// the weights times d_scores. The logits come from the forward's micro-kernel (K packed into
/// panels), a strip of MR rows at a time, and are copied into w: the micro-kernel writes whole
/// panels, more columns than a row of w holds.
template <typename E, typename T = ComputeScalar<E>>
void backward_weights(const RawProblem<E>& p, index_t tile, index_t j0, index_t cols, T* w, T* cap,
                      index_t ldw, T* partial) {
  // Strips of MR rows, or the pairs' own (AMX: 16, this thread's tiles configured for the call).
  constexpr index_t MR = kPairs<E> ? kPairStripRows : Micro<T>::kRows;
  [[maybe_unused]] const PairTiles<E> amx_tiles;
  const index_t dk = p.q.cols, R = kBackwardRows;
  const index_t i0 = tile * R, rows = std::min(R, p.q.rows - i0);
  // The logits from key j0, panel_offset(j0) into its panel (0 for the pairs), whole panels on.
  const index_t from = kPairs<E> ? 0 : panel_offset<T>(j0);
  const index_t panels = Micro<T>::whole_panels(from + cols);
  // (K's rows and panels: of the whole key tile, which key_panels packs.)
  constexpr index_t C = kBackwardCols, room = Micro<T>::whole_panels(C);
  Arena<T> arena(Arena<T>::round(R * dk) + Arena<T>::round(C * dk) + Arena<T>::round(room * dk) +
                 Arena<T>::round(cols) + Arena<T>::round(MR * panels));
  T* const q_buf = arena.take(R * dk);
  T* const k_buf = arena.take(C * dk);
  T* const kp = arena.take(room * dk);
  T* const ds_buf = arena.take(cols);  // a widened row of d_scores (16-bit)
  T* const strip = arena.take(MR * panels);
  // Strip by strip: its rows' keys, then its logits over the keys from the first that one of its
  // rows sees to the last (all of the tile's for the pairs), copied into w (weights_row zeroes
  // each row outside its own keys), then each row's weights and partial sums.
#if defined(__AVX512BF16__)
  const Pair* k_pairs = nullptr;
  Pair* q_pairs = nullptr;
  index_t qp = 0;
  Arena<Pair> pairs(kPairs<E> ? Arena<Pair>::round(R * whole_pair_blocks((dk + 1) / 2)) +
                                    Arena<Pair>::round(room * whole_pair_blocks((dk + 1) / 2))
                              : 0);
  if constexpr (kPairs<E>) {  // Q and K as bf16 pairs along d_k (tiled.hpp)
    static_assert(kBackwardRows % MR == 0, "a query tile is whole strips");
    qp = whole_pair_blocks((dk + 1) / 2);
    q_pairs = pairs.take(R * qp);
    Pair* const k_scratch = pairs.take(room * qp);
    pair_strip_rows(p.q, i0, rows, q_pairs, qp);
    k_pairs = key_panels_pairs(p, j0, false, k_scratch);
  }
#endif
  const auto Q = tile_rows(p.q, i0, kPairs<E> ? 0 : rows, q_buf);
  const T* const k_panels = kPairs<E> ? nullptr : key_panels(p, j0, false, k_buf, kp);
  TileMap<T> S(w, rows, cols, Eigen::OuterStride<>(ldw));
  std::fill_n(partial, 2 * R, T(0));
  const RawProblem<E> unmasked = without_masks(p);
  unsigned char seen[MR * kBackwardCols];  // the strip's rows' answers, a row of the tile each
  RowKeys strip_keys[MR];
  for (index_t r0 = 0; r0 < rows; r0 += MR) {
    const index_t n = std::min(MR, rows - r0);
    const Span shown = strip_row_keys(p, i0 + r0, n, j0, cols, seen, strip_keys);
    index_t lo = shown.a, hi = shown.b;
    if constexpr (kPairs<E>) {
#if defined(__AVX512BF16__)
      lo = 0, hi = cols;
      pairs_logits(n, cols, qp, q_pairs + r0 * qp, qp, k_pairs, strip, panels, p.scale);
#endif
    } else if (lo < hi) {
      lo = step_logits(n, shown, from, dk, Q.data() + r0 * Q.outerStride(), Q.outerStride(), k_panels, strip,
                       panels, p.scale);
    }
    for (index_t r = 0; r < n && lo < hi; ++r)
      std::copy(strip + r * panels + lo, strip + r * panels + hi, w + (r0 + r) * ldw + lo);
    for (index_t r = 0; r < n; ++r) {
      const index_t i = i0 + r0 + r;
      const RowKeys& keys = strip_keys[r];
      const Span span = keys.span;
      T* const row = w + (r0 + r) * ldw;
      weights_row(unmasked, i, j0, cols, span, row, cap != nullptr ? cap + (r0 + r) * ldw : nullptr,
                  keys.asked ? &keys.shown : nullptr);
      const index_t m = span.b - span.a;
      if (m == 0) continue;
      const auto P = S.row(r0 + r).segment(span.a, m);
      partial[2 * (r0 + r)] = P.sum();
      if (p.grad.d_scores.data == nullptr) continue;
      const auto G = d_scores_row(p, i, j0 + span.a, m, ds_buf);
      if (!keys.asked) {
        partial[2 * (r0 + r) + 1] = P.cwiseProduct(G).sum();
      } else {  // a hidden key's d_scores (even NaN) has no effect: the shown keys, in key order
        T sum = 0;
        for (index_t a = span.a, end = a; a < span.b; a = end) {
          const std::uint8_t kind = keys.shown.piece(a, span.b, end);
          for (index_t t = a; t < end && kind != kBlockEmpty; ++t) {
            if (kind == kBlockFull || keys.shown.v[t]) sum += P(t - span.a) * G(t - span.a);
          }
        }
        partial[2 * (r0 + r) + 1] = sum;
      }
    }
  }
}

/// Step 2: from the partial sums of `tiles` key tiles (2 kBackwardRows each, in key order), the
/// row terms of query tile `tile`: terms[2 r] = D_i (less d_lse_i), terms[2 r + 1] = r_i. A sink
/// is one more term of the renormalising sum, and its row's share of dL/dsink goes to
/// grad.d_sink_rows.
template <typename E, typename T = ComputeScalar<E>>
void backward_terms(const RawProblem<E>& p, index_t tile, const T* partials, index_t tiles, T* terms) {
  const RawGradient<E>& g = p.grad;
  const index_t dv = p.v.cols, R = kBackwardRows;
  const index_t i0 = tile * R, rows = std::min(R, p.q.rows - i0);
  Arena<T> arena(Arena<T>::round(R * dv) * 2);
  T* const o_buf = arena.take(R * dv);
  T* const do_buf = arena.take(R * dv);
  const auto O = tile_rows(p.grad.out, i0, rows, o_buf);
  const auto dO = tile_rows(p.grad.d_out, i0, rows, do_buf);
  for (index_t r = 0; r < rows; ++r) {
    T sum = 0, with_scores = 0;
    for (index_t t = 0; t < tiles; ++t) {
      sum += partials[t * 2 * R + 2 * r];
      with_scores += partials[t * 2 * R + 2 * r + 1];
    }
    const index_t i = i0 + r;
    // The sink's weight before renormalising, exp(sink - lse_i); a sink of -inf is none.
    const T sink = p.has_sink && p.sink != -std::numeric_limits<T>::infinity()
                       ? std::exp(p.sink - g.lse.data[i * g.lse.row_stride])
                       : T(0);
    sum += sink;
    const T scale = sum == T(0) ? T(0) : T(1) / sum;  // 0: the row sees no key (NaN stays NaN)
    T D = O.row(r).dot(dO.row(r)) + scale * with_scores;
    if (g.d_lse.data != nullptr) D -= g.d_lse.data[i * g.d_lse.row_stride];
    terms[2 * r] = D;
    terms[2 * r + 1] = scale;
    if (g.d_sink_rows.data != nullptr) g.d_sink_rows.data[i * g.d_sink_rows.row_stride] = -(scale * sink) * D;
  }
}

/// Step 3: query tile `tile` against the keys [j0, j0 + cols), whose weights step 1 left in w
/// (and cap): adds to the keys' dk and dv rows (and d_bias) and writes the query tile's share of
/// dq to dq_tile (kBackwardRows x d_k, row-major). All four products run on the micro-kernel
/// (micro_kernel.hpp): dP = dO Vᵀ as the logits are formed (V packed into panels), dV += Pᵀ dO and
/// dK += dZᵀ Q with the transposed weights read in place (a strip of MR keys, the query tile's
/// rows as the depth), and dZ K into the share; the key tile's gradient rows, Q, dO and K are
/// held as rows of whole packets (their padding 0, never stored).
template <typename E, typename T = ComputeScalar<E>>
void backward_pair(const RawProblem<E>& p, index_t tile, index_t j0, index_t cols, T* w, const T* cap,
                   index_t ldw, const T* terms, T* dq_tile) {
  using M = Micro<T>;
  constexpr index_t MR = M::kRows;
  const index_t dk = p.q.cols, dv = p.v.cols, R = kBackwardRows;
  const index_t dkp = M::whole_packets(dk), dvp = M::whole_packets(dv);
  const index_t i0 = tile * R, rows = std::min(R, p.q.rows - i0);
  // dP from key j0, panel_offset(j0) into its panel (0 for the pairs), whole panels on.
  const index_t from = kPairs<E> ? 0 : panel_offset<T>(j0);
  const index_t panels = Micro<T>::whole_panels(from + cols);
  constexpr index_t C = kBackwardCols, room = Micro<T>::whole_panels(C);
  // dP's strips write whole panels; dZ is read down its columns too (dK), as the weights are.
  const index_t lds = odd_lines<T>(panels);
  Arena<T> arena(Arena<T>::round(R * dkp) * 2 + Arena<T>::round(R * dvp) + Arena<T>::round(cols * dkp) * 2 +
                 Arena<T>::round(C * dv) + Arena<T>::round(room * dv) + Arena<T>::round(cols * dvp) +
                 Arena<T>::round(R * lds) + Arena<T>::round(cols));
  T* const q_buf = arena.take(R * dkp);
  T* const do_buf = arena.take(R * dvp);
  T* const dq_buf = arena.take(R * dkp);
  T* const k_buf = arena.take(cols * dkp);
  T* const v_buf = arena.take(C * dv);  // V's rows and panels: of the whole key tile (key_panels)
  T* const vp = arena.take(room * dv);
  T* const ds_buf = arena.take(R * lds);  // dP, then dZ
  T* const dk_buf = arena.take(cols * dkp);
  T* const dv_buf = arena.take(cols * dvp);
  T* const ds_row = arena.take(cols);  // a widened row of d_scores (16-bit)

  index_t ldq = 0, ldo = 0, ldk = 0;
  const T* const q = padded_rows(p.q, i0, rows, dkp, q_buf, ldq);
  const T* const d_out = padded_rows(p.grad.d_out, i0, rows, dvp, do_buf, ldo);
  const T* const k = padded_rows(p.k, j0, cols, dkp, k_buf, ldk);
  using Rows = Eigen::Map<RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
  using ConstRows = Eigen::Map<const RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
  const ConstRows Q(q, rows, dk, Eigen::OuterStride<>(ldq)), dO(d_out, rows, dv, Eigen::OuterStride<>(ldo)),
      K(k, cols, dk, Eigen::OuterStride<>(ldk));
  // The key tile's gradients so far (earlier query tiles and heads added theirs), added into in
  // place where their rows allow it.
  index_t lddk = 0, lddv = 0;
  T* const dk_rows = padded_rows(p.grad.dk, j0, cols, dkp, dk_buf, lddk);
  T* const dv_rows = padded_rows(p.grad.dv, j0, cols, dvp, dv_buf, lddv);
  Rows dK(dk_rows, cols, dk, Eigen::OuterStride<>(lddk)), dV(dv_rows, cols, dv, Eigen::OuterStride<>(lddv)),
      dQ(dq_buf, rows, dk, Eigen::OuterStride<>(std::max<index_t>(dkp, 1)));
  TileMap<T> P(w, rows, cols, Eigen::OuterStride<>(ldw)), dZ(ds_buf, rows, cols, Eigen::OuterStride<>(lds));
#if defined(__AVX512BF16__)
  // bf16 pairs (kPairs): dP from dO and V paired along d_v; the weights and dZ rounded to bf16 and
  // paired along the query rows (dV += Pᵀ dO, dK += dZᵀ Q, with dO and Q paired so) and dZ along the
  // keys (dZ K, K paired so), all on the pair micro-tile, or on AMX tiles (kAmx: depths in whole
  // blocks of pairs, the padding 0; strips of 16 rows or keys; Pᵀ and dZᵀ paired along the query
  // rows and transposed, AMX's A operand; a last block of fewer than 16 keys through `edge`).
  constexpr index_t SR = kPairStripRows;
  [[maybe_unused]] const PairTiles<E> amx_tiles;
  const index_t vpairs = whole_pair_blocks((dv + 1) / 2), qn = (rows + 1) / 2, cp = (cols + 1) / 2;
  const index_t qnp = whole_pair_blocks(qn), cpp = whole_pair_blocks(cp);
  const index_t keys16 = (cols + 15) / 16 * 16;  // AMX: the transposed weights' rows
  Arena<Pair> pairs(kPairs<E> ? Arena<Pair>::round(R * vpairs) + Arena<Pair>::round(room * vpairs) +
                                    2 * Arena<Pair>::round(kAmx ? keys16 * qnp : qn * cols) +
                                    Arena<Pair>::round(R * cpp) + Arena<Pair>::round(qnp * dvp) +
                                    Arena<Pair>::round(qnp * dkp) + Arena<Pair>::round(cpp * dkp)
                              : 0);
  Arena<T> edge_arena(kPairs<E> && kAmx ? Arena<T>::round(16 * std::max(dkp, dvp)) : 0);
#endif
  // Strip by strip: its rows' keys, then its dP over the keys from the first that one of its rows
  // sees to the last (all of the tile's for the pairs), then each row's P and dZ; spans[r] keeps
  // row r's keys (none when its weights here are all 0) for the products.
#if defined(__AVX512BF16__)
  const Pair* v_pairs = nullptr;
  Pair* do_pairs = nullptr;
  if constexpr (kPairs<E>) {
    do_pairs = pairs.take(R * vpairs);
    Pair* const v_scratch = pairs.take(room * vpairs);
    pair_strip_rows(p.grad.d_out, i0, rows, do_pairs, vpairs);
    v_pairs = key_panels_pairs(p, j0, true, v_scratch);
  }
#endif
  const T* const v_panels = kPairs<E> ? nullptr : key_panels(p, j0, true, v_buf, vp);
  constexpr index_t kStrip = kPairs<E> ? kPairStripRows : MR;
  // Does some row not see some key of the step? (A row the masks were not asked about sees its
  // whole span: backward_keys asks wherever a mask may hide a key.)
  bool hides = false;
  const RawMatrix<T>& d_logits = p.grad.d_logits;  // the gradient callback's, when given
  unsigned char seen[kStrip * kBackwardCols];      // the strip's rows' answers, a row of the tile each
  RowKeys strip_keys[kStrip];
  Span spans[kBackwardRows];
  for (index_t r0 = 0; r0 < rows; r0 += kStrip) {
    const index_t strip_rows = std::min(kStrip, rows - r0);
    const Span shown = strip_row_keys(p, i0 + r0, strip_rows, j0, cols, seen, strip_keys);
    if constexpr (kPairs<E>) {
#if defined(__AVX512BF16__)
      pairs_logits(strip_rows, cols, vpairs, do_pairs + r0 * vpairs, vpairs, v_pairs, ds_buf + r0 * lds, lds,
                   1.0f);
#endif
    } else if (shown.a < shown.b) {
      step_logits(strip_rows, shown, from, dv, d_out + r0 * ldo, ldo, v_panels, ds_buf + r0 * lds, lds, T(1));
    }
    for (index_t rs = 0; rs < strip_rows; ++rs) {
      const index_t r = r0 + rs, i = i0 + r;
      const RowKeys& keys = strip_keys[rs];
      const Span span = keys.span;
      hides = hides || keys.asked || span.a > 0 || span.b < cols;
      auto dz = dZ.row(r);
      const index_t n = span.b - span.a;
      spans[r] = span;
      if (n == 0 || terms[2 * r + 1] == T(0)) {  // the row sees no key here, or none at all
        spans[r] = Span{0, 0};
        P.row(r).setZero();
        dz.setZero();
        if (d_logits.data != nullptr) std::fill_n(d_logits.data + r * d_logits.row_stride + j0, cols, T(0));
        continue;
      }
      P.row(r).segment(span.a, n) *= terms[2 * r + 1];
      // Keys the masks hide (backward_keys' answers): 0, even when the factor is NaN.
      if (keys.asked) keys.shown.hide(P.row(r).data(), span.a, span.b, T(0));
      dz.head(span.a).setZero();
      dz.tail(cols - span.b).setZero();
      auto seg = dz.segment(span.a, n);
      if (p.grad.d_scores.data != nullptr) seg += d_scores_row(p, i, j0 + span.a, n, ds_row);
      seg = (P.row(r).segment(span.a, n).array() * (seg.array() - terms[2 * r])).matrix();
      if (keys.asked) keys.shown.hide(dz.data(), span.a, span.b, T(0));  // exactly 0, whatever dP held
      if (p.grad.d_bias.data != nullptr) {
        const RawMatrix<T>& b = p.grad.d_bias;  // the compute type
        Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>, Eigen::Unaligned, Eigen::InnerStride<>>(
            b.data + i * b.row_stride + (j0 + span.a) * b.col_stride, n,
            Eigen::InnerStride<>(b.col_stride)) += seg;
      }
      if (d_logits.data != nullptr)
        Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>>(d_logits.data + r * d_logits.row_stride + j0, cols) =
            dz;
      if (p.softcap > 0 || p.score_mod != nullptr)
        seg.array() *= Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>>(cap + r * ldw + span.a, n);
      seg *= p.scale;
    }
  }

  dQ.setZero();
  // One product per gradient, or (a strip hides keys and some input is not finite) the visible
  // pairs one by one.
  const bool products = !hides || (finite(K) && finite(Q) && finite(dO));
  if (products && kPairs<E>) {
#if defined(__AVX512BF16__)
    Pair* const z_k = pairs.take(R * cpp);     // dZ, pairs of keys
    Pair* const do_q = pairs.take(qnp * dvp);  // dO, pairs of query rows
    Pair* const q_q = pairs.take(qnp * dkp);   // Q, pairs of query rows
    Pair* const k_k = pairs.take(cpp * dkp);   // K, pairs of keys
    for (index_t k2 = 0; k2 < qn; ++k2) {
      const index_t r = 2 * k2;
      const bool second = r + 1 < rows;
      const BFloat16Bits* g = p.grad.d_out.data + (i0 + r) * p.grad.d_out.row_stride;
      pair_rows(g, second ? g + p.grad.d_out.row_stride : nullptr, p.grad.d_out.col_stride, dv, dvp,
                do_q + k2 * dvp);
      const BFloat16Bits* qr = p.q.data + (i0 + r) * p.q.row_stride;
      pair_rows(qr, second ? qr + p.q.row_stride : nullptr, p.q.col_stride, dk, dkp, q_q + k2 * dkp);
    }
    std::fill(do_q + qn * dvp, do_q + qnp * dvp, Pair(0));
    std::fill(q_q + qn * dkp, q_q + qnp * dkp, Pair(0));
    weights_to_pairs(rows, 0, cols, ds_buf, lds, z_k, cpp);
    for (index_t r = 0; r < whole_pair_strips(rows); ++r)
      std::fill(z_k + r * cpp + (r < rows ? cp : 0), z_k + (r + 1) * cpp, Pair(0));
    for (index_t t2 = 0; t2 < cp; ++t2) {
      const BFloat16Bits* kr = p.k.data + (j0 + 2 * t2) * p.k.row_stride;
      pair_rows(kr, 2 * t2 + 1 < cols ? kr + p.k.row_stride : nullptr, p.k.col_stride, dk, dkp,
                k_k + t2 * dkp);
    }
    std::fill(k_k + cp * dkp, k_k + cpp * dkp, Pair(0));
#if defined(__AMX_BF16__)
    Pair* const p_t = pairs.take(keys16 * qnp);  // Pᵀ: row t holds the pairs of query rows of key t
    Pair* const z_t = pairs.take(keys16 * qnp);  // dZᵀ, the same
    T* const edge = edge_arena.take(16 * std::max(dkp, dvp));
    transpose_rows_to_pairs(w, ldw, rows, cols, p_t, qnp);
    transpose_rows_to_pairs(ds_buf, lds, rows, cols, z_t, qnp);
    // C += A B for 16 keys at a time into a gradient's rows (ld apart, n wide); the last block of
    // fewer keys through `edge`, whose rows past the tile nothing reads.
    const auto key_rows = [&](const Pair* a, const Pair* b, index_t n, T* c, index_t ldc) {
      for (index_t t0 = 0; t0 < cols; t0 += 16) {
        const index_t keys = std::min<index_t>(16, cols - t0);
        if (keys == 16) {
          amx_product_strip(n, qnp, a + t0 * qnp, qnp, b, n, c + t0 * ldc, ldc);
          continue;
        }
        for (index_t t = 0; t < keys; ++t)
          std::copy(c + (t0 + t) * ldc, c + (t0 + t) * ldc + n, edge + t * n);
        amx_product_strip(n, qnp, a + t0 * qnp, qnp, b, n, edge, n);
        for (index_t t = 0; t < keys; ++t) std::copy(edge + t * n, edge + (t + 1) * n, c + (t0 + t) * ldc);
      }
    };
    key_rows(p_t, do_q, dvp, dv_rows, lddv);
    key_rows(z_t, q_q, dkp, dk_rows, lddk);
#else
    Pair* const p_t = pairs.take(qn * cols);  // P, pairs of query rows
    Pair* const z_t = pairs.take(qn * cols);  // dZ, pairs of query rows
    for (index_t k2 = 0; k2 < qn; ++k2) {
      const index_t r = 2 * k2;
      const bool second = r + 1 < rows;
      round_rows_to_pairs(w + r * ldw, second ? w + (r + 1) * ldw : nullptr, cols, p_t + k2 * cols);
      round_rows_to_pairs(ds_buf + r * lds, second ? ds_buf + (r + 1) * lds : nullptr, cols, z_t + k2 * cols);
    }
    for (index_t t0 = 0; t0 < cols; t0 += MR)
      product_strip_pairs<true>(std::min(MR, cols - t0), dvp, qn, p_t + t0, cols, do_q, dvp,
                                dv_rows + t0 * lddv, lddv);
    for (index_t t0 = 0; t0 < cols; t0 += MR)
      product_strip_pairs<true>(std::min(MR, cols - t0), dkp, qn, z_t + t0, cols, q_q, dkp,
                                dk_rows + t0 * lddk, lddk);
#endif
    for (index_t r0 = 0; r0 < rows; r0 += SR)
      pairs_product(std::min(SR, rows - r0), dkp, cpp, z_k + r0 * cpp, cpp, k_k, dkp, dq_buf + r0 * dkp, dkp);
#endif
  } else if (products) {
    // Each product's depth only over the rows (or keys) whose weights may not be 0: a strip of
    // keys takes the rows from the first to the last that sees one of its keys, a strip of rows
    // the keys from its first row's first to its last's last (the terms left out are exactly 0).
    Span depth[kBackwardCols / MR + 1];  // per strip of keys: the rows that see one of its keys
    for (index_t t0 = 0; t0 < cols; t0 += MR) {
      Span& d = depth[t0 / MR];
      d = Span{rows, 0};
      for (index_t r = 0; r < rows; ++r) {
        if (spans[r].a < t0 + MR && spans[r].b > t0) d.a = std::min(d.a, r), d.b = r + 1;
      }
    }
    // dO, then Q, stays in L1 for all the strips of keys.
    for (index_t t0 = 0; t0 < cols; t0 += MR) {
      const Span d = depth[t0 / MR];
      if (d.a < d.b)
        product_strip<true>(std::min(MR, cols - t0), dvp, d.b - d.a, w + d.a * ldw + t0, ldw,
                            d_out + d.a * ldo, ldo, dv_rows + t0 * lddv, lddv);
    }
    for (index_t t0 = 0; t0 < cols; t0 += MR) {
      const Span d = depth[t0 / MR];
      if (d.a < d.b)
        product_strip<true>(std::min(MR, cols - t0), dkp, d.b - d.a, ds_buf + d.a * lds + t0, lds,
                            q + d.a * ldq, ldq, dk_rows + t0 * lddk, lddk);
    }
    for (index_t r0 = 0; r0 < rows; r0 += MR) {
      index_t lo = cols, hi = 0;
      for (index_t r = r0; r < std::min(r0 + MR, rows); ++r) {
        if (spans[r].a < spans[r].b) lo = std::min(lo, spans[r].a), hi = std::max(hi, spans[r].b);
      }
      if (lo < hi)
        product_strip(std::min(MR, rows - r0), dkp, hi - lo, ds_buf + r0 * lds + lo, lds, k + lo * ldk, ldk,
                      dq_buf + r0 * dkp, dkp);
    }
  } else {  // sum over the visible pairs only
    for_each_visible(p, i0, rows, j0, cols, [&](index_t r, index_t t) {
      dV.row(t).noalias() += P(r, t) * dO.row(r);
      dK.row(t).noalias() += dZ(r, t) * Q.row(r);
      dQ.row(r).noalias() += dZ(r, t) * K.row(t);
    });
  }
  Eigen::Map<RowMat<T>>(dq_tile, rows, dk) = dQ;
  store_rows(p.grad.dk, j0, cols, dk_rows, lddk);
  store_rows(p.grad.dv, j0, cols, dv_rows, lddv);
}

}  // namespace
}  // namespace internal
}  // namespace EigenAttention
