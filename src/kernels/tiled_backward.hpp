// The tiled backward kernel (FlashAttention-2's algorithm), written once and compiled once per
// kernel of the table next to the forward (tiled_isa.cpp.in); same rules as tiled.hpp, whose
// helpers it uses. Internal.
//
// With the forward's log-sum-exps, the weights of any tile of query rows i and keys j are
// recomputed exactly as the forward had them: P_ij = exp(z_ij - lse_i), z the final logit
// (scaled, soft-capped, ALiBi, bias, masks). With dP = dO V^T and D_i = dO_i . O_i, the gradient
// of the logits is dZ = P o (dP - D) (o: element-wise), and
//   dV = P^T dO,   dQ = scale (dZ o c') K,   dK = scale (dZ o c')^T Q,   dbias = dZ,
// c' = 1 - tanh^2(s / softcap) being the soft-cap's derivative (1 without one). A loss on the
// weights adds d_scores to dP and sum_j P_ij d_scores_ij to D_i (the softmax's Jacobian).
//
// Two steps, which the scheduler (backward.hpp) runs:
//   backward_row_terms: D_i for a range of query rows (one pass over dO, O and, with d_scores,
//     one pass over the keys to recompute P: O(T_q) memory);
//   backward_keys: one tile of keys (kBackwardCols) against query tiles (kBackwardRows rows):
//     per pair, S = scale Q K^T and dP = dO V^T (two GEMMs), then P and dZ row by row in
//     place, then dV += P^T dO, dK += dZ^T Q (accumulated in per-thread tiles) and the pair's
//     share of dQ, dZ K (three GEMMs): five products of T_q T_k d per pass, nothing T_q x T_k.
// The share of dQ goes either straight into dq (added) or into a tile the scheduler adds in key
// order later; both give the same bits.
//
// Keys a row does not see weigh exactly 0 and get exactly zero gradient: P and dZ are set, not
// multiplied, outside each row's key range and where the boolean mask hides a key. A pair that
// hides keys and holds a non-finite Q, dO or K row sums over visible pairs only (as the forward
// does for V), so that a hidden NaN never reaches a gradient that does not depend on it.
#pragma once

#include "kernels/tiled.hpp"

namespace EigenAttention {
namespace internal {
namespace {

static_assert(4 * kBackwardRows + 4 * kBackwardCols < kScratchRows,
              "backward tiles too large for the scratch size limit");

/// Are all entries of a tile finite? (x * 0 is NaN for NaN or +-inf.)
template <class Tile>
bool finite(const Tile& m) {
  using T = typename Tile::Scalar;
  const T sum = (m.array() * T(0)).sum();
  return sum == sum;
}

/// dL/dSCORES of row i, keys [j, j + n), as a strided row.
template <typename T>
Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>, Eigen::Unaligned, Eigen::InnerStride<>> d_scores_row(
    const RawProblem<T>& p, index_t i, index_t j, index_t n) {
  const RawMatrix<const T>& g = p.grad.d_scores;
  return {g.data + i * g.row_stride + j * g.col_stride, n, Eigen::InnerStride<>(g.col_stride)};
}

/// Row r of a tile of logits S (keys [j0, j0 + cols), query row i) becomes the weights P, and
/// `cap` (when soft-capping) the soft-cap's derivative: zero outside [span.a, span.b).
template <typename T>
void weights_row(const RawProblem<T>& p, index_t i, index_t j0, index_t cols, const Span& span, T* s,
                 T* cap) {
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
  apply_additive(p, i, j0 + span.a, seg);
  exp_in_packets(s, span.a, span.b, lse);  // hidden keys (-inf) give exactly 0
}

/// D_i = dO_i . O_i (+ sum_j P_ij d_scores_ij) for the query rows [first, first + count),
/// written to row_terms[i].
template <typename T>
void backward_row_terms(const RawProblem<T>& p, index_t first, index_t count, T* row_terms) {
  const index_t dk = p.q.cols, dv = p.v.cols, R = kBackwardRows, C = kBackwardCols;
  const bool with_scores = p.grad.d_scores.data != nullptr;
  const index_t lds = static_cast<index_t>(Arena<T>::round(C));
  Blocking<T> qk(R, C, dk);
  Arena<T> arena(Arena<T>::round(R * dv) * 2 + Arena<T>::round(R * dk) + Arena<T>::round(C * dk) +
                 Arena<T>::round(R * lds) * 2 + Arena<T>::round(qk.size_a()) + Arena<T>::round(qk.size_b()));
  T* const o_buf = arena.take(R * dv);
  T* const do_buf = arena.take(R * dv);
  T* const q_buf = arena.take(R * dk);
  T* const k_buf = arena.take(C * dk);
  T* const s_buf = arena.take(R * lds);
  T* const cap_buf = arena.take(R * lds);
  T* const block_a = arena.take(qk.size_a());
  T* const block_b = arena.take(qk.size_b());
  qk.use(block_a, block_b);

  for (index_t i0 = first; i0 < first + count; i0 += R) {
    const index_t rows = std::min(R, first + count - i0);
    const auto O = rows_of(p.grad.out, i0, rows, o_buf);
    const auto dO = rows_of(p.grad.d_out, i0, rows, do_buf);
    for (index_t r = 0; r < rows; ++r) row_terms[i0 + r] = O.row(r).dot(dO.row(r));
    if (!with_scores) continue;
    // The weights' own term: sum_j P_ij d_scores_ij over the keys row i sees.
    const auto Q = rows_of(p.q, i0, rows, q_buf);
    const index_t key_begin = p.first_key(i0), key_end = p.end_key(i0 + rows - 1);
    for (index_t j0 = key_begin; j0 < key_end; j0 += C) {
      const index_t cols = std::min(C, key_end - j0);
      const auto K = rows_of(p.k, j0, cols, k_buf);
      TileMap<T> S(s_buf, rows, cols, Eigen::OuterStride<>(lds));
      S.setZero();
      gemm_abt(rows, cols, dk, Q.data(), Q.outerStride(), K.data(), K.outerStride(), s_buf, lds, p.scale, qk);
      for (index_t r = 0; r < rows; ++r) {
        const index_t i = i0 + r;
        const Span span = span_in_tile(p, i, j0, cols);
        weights_row(p, i, j0, cols, span, s_buf + r * lds, cap_buf + r * lds);
        const index_t n = span.b - span.a;
        if (n == 0) continue;
        const auto P = S.row(r).segment(span.a, n);
        const auto G = d_scores_row(p, i, j0 + span.a, n);
        T sum = 0;
        if (p.mask.data == nullptr) {
          sum = P.cwiseProduct(G).sum();
        } else {  // a hidden key's d_scores (even NaN) has no effect
          const bool* m = p.mask.data + i * p.mask.row_stride + (j0 + span.a) * p.mask.col_stride;
          for (index_t t = 0; t < n; ++t) {
            if (m[t * p.mask.col_stride]) sum += P(t) * G(t);
          }
        }
        row_terms[i] += sum;
      }
    }
  }
}

/// The keys [j0, j0 + cols) against the query tiles [first_tile, end_tile) that see them: adds
/// to their dk and dv rows (and d_bias), and adds each tile's share of dq to grad.dq, or writes it
/// to dq_tile (then [first_tile, end_tile) is one tile).
template <typename T>
void backward_keys(const RawProblem<T>& p, const T* row_terms, index_t j0, index_t cols, index_t first_tile,
                   index_t end_tile, T* dq_tile) {
  const index_t dk = p.q.cols, dv = p.v.cols, R = kBackwardRows;
  const index_t lds = static_cast<index_t>(Arena<T>::round(std::max<index_t>(cols, 1)));
  Blocking<T> b_s(R, cols, dk), b_dp(R, cols, dv), b_dv(cols, dv, R), b_dk(cols, dk, R), b_dq(R, dk, cols);
  index_t pack_a = 0, pack_b = 0;
  for (const Blocking<T>* b : {&b_s, &b_dp, &b_dv, &b_dk, &b_dq}) {
    pack_a = std::max(pack_a, b->size_a());
    pack_b = std::max(pack_b, b->size_b());
  }
  const index_t cap_size = p.softcap > 0 ? R * lds : 0;
  Arena<T> arena(Arena<T>::round(R * dk) * 2 + Arena<T>::round(R * dv) + Arena<T>::round(cols * dk) * 2 +
                 Arena<T>::round(cols * dv) * 2 + Arena<T>::round(R * lds) * 2 + Arena<T>::round(cap_size) +
                 Arena<T>::round(pack_a) + Arena<T>::round(pack_b));
  T* const q_buf = arena.take(R * dk);
  T* const do_buf = arena.take(R * dv);
  T* const k_buf = arena.take(cols * dk);
  T* const v_buf = arena.take(cols * dv);
  T* const s_buf = arena.take(R * lds);   // S, then P
  T* const ds_buf = arena.take(R * lds);  // dP, then dZ
  T* const cap_buf = arena.take(cap_size);
  T* const dk_buf = arena.take(cols * dk);
  T* const dv_buf = arena.take(cols * dv);
  T* const dq_buf = arena.take(R * dk);
  T* const block_a = arena.take(pack_a);
  T* const block_b = arena.take(pack_b);
  for (Blocking<T>* b : {&b_s, &b_dp, &b_dv, &b_dk, &b_dq}) b->use(block_a, block_b);

  const auto K = rows_of(p.k, j0, cols, k_buf);
  const auto V = rows_of(p.v, j0, cols, v_buf);
  // This key tile's gradients so far (other query heads of a GQA group added theirs already).
  Eigen::Map<RowMat<T>> dK(dk_buf, cols, dk), dV(dv_buf, cols, dv), dQ(dq_buf, R, dk);
  dK = map_of(p.grad.dk).middleRows(j0, cols);
  dV = map_of(p.grad.dv).middleRows(j0, cols);
  int k_finite = -1;  // unknown until a tile that hides keys asks

  for (index_t tile = first_tile; tile < end_tile; ++tile) {
    const index_t i0 = tile * R, rows = std::min(R, p.q.rows - i0);
    if (!p.sees(i0, rows, j0, cols)) {
      if (dq_tile != nullptr) std::fill_n(dq_tile, R * dk, T(0));
      continue;
    }
    const auto Q = rows_of(p.q, i0, rows, q_buf);
    const auto dO = rows_of(p.grad.d_out, i0, rows, do_buf);
    TileMap<T> P(s_buf, rows, cols, Eigen::OuterStride<>(lds)),
        dZ(ds_buf, rows, cols, Eigen::OuterStride<>(lds));
    P.setZero();
    dZ.setZero();
    gemm_abt(rows, cols, dk, Q.data(), Q.outerStride(), K.data(), K.outerStride(), s_buf, lds, p.scale, b_s);
    gemm_abt(rows, cols, dv, dO.data(), dO.outerStride(), V.data(), V.outerStride(), ds_buf, lds, T(1), b_dp);

    bool hides = p.mask.data != nullptr;
    for (index_t r = 0; r < rows; ++r) {
      const index_t i = i0 + r;
      const Span span = span_in_tile(p, i, j0, cols);
      hides = hides || span.a > 0 || span.b < cols;
      weights_row(p, i, j0, cols, span, s_buf + r * lds, cap_buf + r * lds);
      auto dz = dZ.row(r);
      const index_t n = span.b - span.a;
      const T lse = p.grad.lse.data[i * p.grad.lse.row_stride];
      if (n == 0 || lse == -std::numeric_limits<T>::infinity()) {
        dz.setZero();
        continue;
      }
      dz.head(span.a).setZero();
      dz.tail(cols - span.b).setZero();
      auto seg = dz.segment(span.a, n);
      if (p.grad.d_scores.data != nullptr) seg += d_scores_row(p, i, j0 + span.a, n);
      seg = (P.row(r).segment(span.a, n).array() * (seg.array() - row_terms[i])).matrix();
      zero_masked(p, i, j0 + span.a, seg);  // hidden keys: exactly 0, whatever dP held
      if (p.grad.d_bias.data != nullptr) {
        const RawMatrix<T>& b = p.grad.d_bias;
        Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>, Eigen::Unaligned, Eigen::InnerStride<>>(
            b.data + i * b.row_stride + (j0 + span.a) * b.col_stride, n,
            Eigen::InnerStride<>(b.col_stride)) += seg;
      }
      if (p.softcap > 0)
        seg.array() *= Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>>(cap_buf + r * lds + span.a, n);
      seg *= p.scale;
    }

    dQ.setZero();
    if (hides && k_finite < 0) k_finite = finite(K) ? 1 : 0;
    if (!hides || (k_finite == 1 && finite(Q) && finite(dO))) {
      gemm_atb(cols, dv, rows, s_buf, lds, dO.data(), dO.outerStride(), dv_buf, dv, T(1), b_dv);
      gemm_atb(cols, dk, rows, ds_buf, lds, Q.data(), Q.outerStride(), dk_buf, dk, T(1), b_dk);
      gemm_ab(rows, dk, cols, ds_buf, lds, K.data(), K.outerStride(), dq_buf, dk, b_dq);
    } else {  // sum over the visible pairs only
      for (index_t r = 0; r < rows; ++r) {
        const index_t i = i0 + r;
        const Span span = span_in_tile(p, i, j0, cols);
        const bool* m =
            p.mask.data != nullptr ? p.mask.data + i * p.mask.row_stride + j0 * p.mask.col_stride : nullptr;
        for (index_t t = span.a; t < span.b; ++t) {
          if (m != nullptr && !m[t * p.mask.col_stride]) continue;
          dV.row(t).noalias() += P(r, t) * dO.row(r);
          dK.row(t).noalias() += dZ(r, t) * Q.row(r);
          dQ.row(r).noalias() += dZ(r, t) * K.row(t);
        }
      }
    }
    if (dq_tile != nullptr) {
      Eigen::Map<RowMat<T>>(dq_tile, R, dk) = dQ;
    } else {
      map_of(p.grad.dq).middleRows(i0, rows) += dQ.topRows(rows);
    }
  }
  map_of(p.grad.dk).middleRows(j0, cols) = dK;
  map_of(p.grad.dv).middleRows(j0, cols) = dV;
}

}  // namespace
}  // namespace internal
}  // namespace EigenAttention
