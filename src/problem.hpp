// SPDX-License-Identifier: MIT
// One validated attention problem: a batch of sequences with H query heads each, as the
// kernels run it. Every public call becomes one Problem: the single-head calls are the batch = 1,
// heads = 1 case (Form::Matrix only changes how messages print shapes), attention_heads_into* a
// batch, attention_varlen_into* a packed batch. Internal to the library.
#pragma once

#include <cstdint>
#include <optional>
#include <type_traits>

#include <EigenAttention/HeadsView.hpp>
#include <EigenAttention/Kernels.hpp>
#include <EigenAttention/Masks.hpp>

#include "kernels/abi.hpp"
#include "kernels/convert.hpp"
#include "paged_keys.hpp"

namespace EigenAttention {
namespace internal {

/// How the caller sees its arrays, for messages only: T x d matrices ("3x7") or [B, H, T, d]
/// views ("[1, 2, 3, 7]").
enum class Form { Matrix, Heads };

/// A T x d matrix as the [1, 1, T, d] view of one sequence with one head: how the single-head
/// calls pass their matrices.
template <typename T>
HeadsView<T> one_head(const MatrixView<T>& m) {
  return {m.data, 1, 1, m.rows, m.cols, 0, 0, m.row_stride, m.col_stride};
}

/// T: the element type of the arrays (float, double, BFloat16Bits, HalfBits); Compute: the type of
/// the arithmetic, and of the log-sum-exps (and of SCORES when scores_compute).
template <typename T>
struct Problem {
  using Compute = ComputeScalar<T>;
  HeadsView<const T> q, k, v;         // [B, H, T_q, d_k], [B, H_kv, T_k, d_k], [B, H_kv, T_k, d_v]
  HeadsView<T> out, scores;           // [B, H, T_q, d_v], [B, H, T_q, T_k]
  HeadsView<Compute> lse;             // [B, H, T_q, 1]
  HeadsView<Compute> compute_scores;  // SCORES in the compute type, when scores_compute
  bool want_out = false, want_lse = false, want_scores = false, scores_compute = false;
  Masks<T> masks;
  Compute scale = 0;
  bool causal = false, bottom_right = false;
  bool fixed_offset = false;  // Options::diagonal_offset was set: offset is used as given
  index_t offset = 0;
  index_t window_left = -1, window_right = -1;
  index_t chunk = 0, chunk_origin = 0;  // Options::chunk_size and chunk_origin
  Compute softcap = 0;
  Kernel kernel = Kernel::Auto;  // resolved: never Auto once validated
  // Packed variable-length batch (attention_varlen_into): sequence b owns query rows
  // [cu_q[b], cu_q[b+1]) and key rows [cu_k[b], cu_k[b+1]) of the single batch entry.
  const std::int64_t* cu_q = nullptr;
  const std::int64_t* cu_k = nullptr;
  index_t sequences = 0;  // B (the batch, or the number of varlen sequences)
  // attention_varlen_decomposed_into: packed weights, sequence b's heads from packed_scores +
  // score_offsets[b] (see MultiHead.hpp).
  T* packed_scores = nullptr;
  const index_t* score_offsets = nullptr;
  // The backward pass (attention_*backward*): the forward's results, dL/dATTN and, optionally,
  // dL/dSCORES [B, H, T_q, T_k] to read; the gradients to write, dL/dbias (when d_bias.data is
  // not null) of the bias's own broadcast shape.
  bool backward = false;
  HeadsView<const T> fwd_out, d_out, d_scores;
  HeadsView<const Compute> fwd_lse;
  HeadsView<T> dq, dk, dv, d_bias;
  // Where the kernels accumulate those gradients, in the compute type (execute_backward sets
  // them): dq, dk, dv and d_bias themselves for float and double; for bfloat16 and half a float
  // workspace of the same shapes, rounded into them once at the end.
  HeadsView<Compute> grad_dq, grad_dk, grad_dv, grad_d_bias;
  // BackwardTerms: dL/dLSE [B, H, T_q, 1] to read (data null: none), and where dL/dsinks goes (H
  // values; null: not wanted), summed by execute_backward from each row's share in grad_d_sink_rows
  // ([B, H, T_q, 1], its workspace).
  HeadsView<const Compute> d_lse;
  Compute* d_sinks = nullptr;
  HeadsView<Compute> grad_d_sink_rows;
  // BackwardTerms::logit_grad: called with each problem's dL/dz, tile by tile (empty: none).
  LogitGradRef<Compute> logit_grad;
  // Decode (KVCache.hpp): keys and values in pages, `sequences` of them (cu_q: each one's query
  // tokens; k and v then hold the sizes only: [1, kv_heads, 0, d_k] and [1, kv_heads, 0, d_v]).
  std::optional<PagedKeys<Compute>> paged;

  index_t heads() const { return q.heads; }
  index_t problems() const { return sequences * q.heads; }
  bool varlen() const { return cu_q != nullptr; }

  /// The programmable parts of the masks (score_mod, mask_mod, block_mask) for sequence b and
  /// query head h.
  template <typename R>
  void program(R& p, index_t b, index_t h) const {
    p.batch_index = b, p.head_index = h;
    if (!masks.score_mod.empty()) p.score_mod = &masks.score_mod;
    if (!masks.mask_mod.empty()) p.mask_mod = &masks.mask_mod;
    const BlockMaskView& bm = masks.block_mask;
    if (bm.empty()) return;
    const index_t rows = bm.row_blocks(), cols = bm.col_blocks();
    p.blocks = reinterpret_cast<const std::uint8_t*>(bm.blocks) + bm.line(b, h) * rows * cols;
    p.block_rows = bm.block_rows, p.block_cols = bm.block_cols, p.col_blocks = cols;
    p.block_head_stride = bm.heads == 1 ? 0 : rows * cols;
  }
  /// program(), and where the block mask holds the rows' key ranges of sequence b and head h
  /// (BlockMask::exact_line), those ranges instead of mask_mod and the block mask: the kernels
  /// compute them as they compute a built-in mask's, asking nothing. (Not for decode, whose rows
  /// are a group's heads.)
  template <typename R>
  void program_rows(R& p, index_t b, index_t h) const {
    program(p, b, h);
    const BlockMaskView& bm = masks.block_mask;
    if (bm.exact_lines == nullptr || bm.exact_lines[bm.line(b, h)] == 0) return;
    p.row_keys = bm.ranges + 2 * bm.line(b, h) * bm.rows;
    p.mask_mod = nullptr, p.blocks = nullptr;
  }

  /// The single-head problem of sequence b = which / H and query head h = which % H.
  RawProblem<T> problem(index_t which) const {
    const index_t b = which / q.heads, h = which % q.heads;
    const index_t kv = h / (q.heads / k.heads);  // GQA: query heads share K/V heads in groups
    // Rows of this sequence in the (possibly packed) token axis.
    index_t q_first = 0, tq = q.tokens, k_first = 0, tk = k.tokens, batch_index = b;
    if (cu_q != nullptr) {
      q_first = cu_q[b];
      tq = cu_q[b + 1] - cu_q[b];
      k_first = cu_k[b];
      tk = cu_k[b + 1] - cu_k[b];
      batch_index = 0;
    } else if (masks.key_lengths != nullptr) {
      tk = masks.key_lengths[b];  // padded keys are never visible: drop them
    }
    const auto head_of = [&](const auto& view, index_t head, index_t first, index_t rows) {
      using Element = std::remove_pointer_t<decltype(view.data)>;
      // An empty head takes no offset: the view's data may be null.
      if (rows == 0 || view.dim == 0) return raw_matrix<Element>(view.data, rows, view.dim, 0, 0);
      return raw_matrix<Element>(
          view.data + batch_index * view.batch_stride + head * view.head_stride + first * view.token_stride,
          rows, view.dim, view.token_stride, view.dim_stride);
    };
    const auto broadcast = [&](const auto& m) {
      using Element = std::remove_const_t<std::remove_pointer_t<decltype(m.data)>>;
      if (m.data == nullptr) return RawMatrix<const Element>{nullptr, 0, 0, 0, 0};
      if (tq == 0 || tk == 0) return raw_matrix<const Element>(m.data, tq, tk, 0, 0);
      const index_t mb = m.batch == 1 ? 0 : b, mh = m.heads == 1 ? 0 : h;
      return raw_matrix<const Element>(m.data + mb * m.batch_stride + mh * m.head_stride, tq, tk,
                                       m.row_stride, m.col_stride);
    };
    const RawMatrix<T> none{nullptr, 0, 0, 0, 0};
    const RawMatrix<Compute> none_compute{nullptr, 0, 0, 0, 0};
    RawProblem<T> p{head_of(q, h, q_first, tq),
                    head_of(k, kv, k_first, tk),
                    head_of(v, kv, k_first, tk),
                    scale,
                    causal,
                    fixed_offset   ? offset
                    : bottom_right ? tk - tq
                                   : 0,
                    window_left,
                    window_right,
                    softcap,
                    masks.alibi_slopes != nullptr,
                    masks.alibi_slopes != nullptr ? to_compute(masks.alibi_slopes[h]) : Compute(0),
                    broadcast(masks.bias),
                    broadcast(masks.mask),
                    none,
                    none,
                    none_compute,
                    want_scores,
                    want_out,
                    want_lse,
                    {}};
    p.chunk = chunk, p.chunk_origin = chunk_origin;
    if (masks.sinks != nullptr) p.has_sink = true, p.sink = to_compute(masks.sinks[h]);
    program_rows(p, b, h);
    if (packed_scores != nullptr) {
      p.scores = tq * tk == 0 ? raw_matrix<T>(packed_scores, tq, tk, 0, 0)
                              : raw_matrix<T>(packed_scores + score_offsets[b] + h * tq * tk, tq, tk, tk, 1);
      p.want_scores = true;
    }
    if (want_out) p.attn = head_of(out, h, q_first, tq);
    if (want_lse) p.lse = head_of(lse, h, q_first, tq);
    if (want_scores && !scores_compute) {
      // SCORES keep the full T_k columns: padded keys get weight 0.
      p.scores = head_of(scores, h, q_first, tq);
      p.scores.cols = tk;
      if (tk == 0) p.scores = raw_matrix<T>(p.scores.data, tq, 0, 0, 0);
    }
    if (want_scores && scores_compute) {
      p.scores_compute = true;
      p.compute_scores = head_of(compute_scores, h, q_first, tq);
      p.compute_scores.cols = tk;
      if (tk == 0) p.compute_scores = raw_matrix<Compute>(p.compute_scores.data, tq, 0, 0, 0);
    }
    if (backward) {
      RawGradient<T>& g = p.grad;
      g.out = head_of(fwd_out, h, q_first, tq);
      g.lse = head_of(fwd_lse, h, q_first, tq);
      g.d_out = head_of(d_out, h, q_first, tq);
      g.dq = head_of(grad_dq, h, q_first, tq);
      g.dk = head_of(grad_dk, kv, k_first, tk);
      g.dv = head_of(grad_dv, kv, k_first, tk);
      g.d_scores = {nullptr, 0, 0, 0, 0};
      if (d_scores.data != nullptr) {  // full T_k columns, of which the first tk are seen
        g.d_scores = head_of(d_scores, h, q_first, tq);
        g.d_scores.cols = tk;
        if (tk == 0) g.d_scores = raw_matrix<const T>(g.d_scores.data, tq, 0, 0, 0);
      }
      if (d_lse.data != nullptr) g.d_lse = head_of(d_lse, h, q_first, tq);
      if (grad_d_sink_rows.data != nullptr) g.d_sink_rows = head_of(grad_d_sink_rows, h, q_first, tq);
      if (!logit_grad.empty()) p.logit_grad = &logit_grad;
      g.d_bias = {nullptr, 0, 0, 0, 0};
      if (grad_d_bias.data != nullptr) {
        const HeadsView<Compute>& gb = grad_d_bias;
        const index_t db = gb.batch == 1 ? 0 : b, dh = gb.heads == 1 ? 0 : h;
        g.d_bias = tq == 0 || tk == 0
                       ? raw_matrix<Compute>(gb.data, tq, tk, 0, 0)
                       : raw_matrix<Compute>(gb.data + db * gb.batch_stride + dh * gb.head_stride, tq, tk,
                                             gb.token_stride, gb.dim_stride);
      }
    }
    return p;
  }
};

}  // namespace internal
}  // namespace EigenAttention
