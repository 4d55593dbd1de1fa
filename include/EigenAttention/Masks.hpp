// SPDX-License-Identifier: MIT
/// \file Masks.hpp
/// Per-call masks and biases of the multi-head calls: a boolean mask, an additive bias, key
/// lengths (right padding), ALiBi slopes and attention sinks. Window, soft-capping and chunks are
/// in Options.
#pragma once

// Lets the detail/ headers in (each refuses to be included on its own); never undefined, so
// that any public header may include them, in any order.
#ifndef EIGEN_ATTENTION_PUBLIC_HEADER
#define EIGEN_ATTENTION_PUBLIC_HEADER
#endif

#include <cstddef>

#include <cstdint>

#include <Eigen/Core>

#include <EigenAttention/BlockMask.hpp>
#include <EigenAttention/Programmable.hpp>
#include <EigenAttention/Types.hpp>
#include <EigenAttention/detail/StrideProduct.hpp>

namespace EigenAttention {

/// A T_q x T_k matrix per (sequence, head), broadcast where a size is 1: shape
/// [batch, heads, T_q, T_k] with batch 1 or B and heads 1 or H (the query heads). Element
/// (b, h, i, j) is at `data[b * batch_stride + h * head_stride + i * row_stride + j * col_stride]`;
/// a broadcast axis has stride 0 by construction.
template <typename Element>
struct BroadcastView {
  /// Element (0, 0, 0, 0). Null (the default) makes the view empty(): the mask or bias is not used.
  const Element* data = nullptr;
  ///@{
  /// Sizes: batch (1 or B) and heads (1 or H, the query heads), where 1 broadcasts that axis;
  /// rows (T_q) and cols (T_k). Default: batch = heads = 1, rows = cols = 0.
  std::ptrdiff_t batch = 1, heads = 1, rows = 0, cols = 0;
  ///@}
  ///@{
  /// Strides: the distance between neighbours along each axis, in elements (not bytes); any sign.
  /// Default: 0, except col_stride = 1.
  std::ptrdiff_t batch_stride = 0, head_stride = 0, row_stride = 0, col_stride = 1;
  ///@}

  /// One contiguous row-major [T_q, T_k] matrix for every sequence and head.
  static BroadcastView matrix(const Element* data, std::ptrdiff_t rows, std::ptrdiff_t cols) {
    return {data, 1, 1, rows, cols, 0, 0, cols, 1};
  }
  /// A contiguous [batch, 1, T_q, T_k] array: one matrix per sequence, shared by its heads.
  /// (This and per_head throw std::invalid_argument when a stride overflows std::ptrdiff_t.)
  static BroadcastView per_sequence(const Element* data, std::ptrdiff_t batch, std::ptrdiff_t rows,
                                    std::ptrdiff_t cols) {
    return {
        data, batch, 1,
        rows, cols,  detail::stride_product("BroadcastView::per_sequence", {batch, rows, cols}, {rows, cols}),
        0,    cols,  1};
  }
  /// A contiguous [batch, heads, T_q, T_k] array: one matrix per sequence and head.
  static BroadcastView per_head(const Element* data, std::ptrdiff_t batch, std::ptrdiff_t heads,
                                std::ptrdiff_t rows, std::ptrdiff_t cols) {
    const auto sizes = {batch, heads, rows, cols};
    return {data,
            batch,
            heads,
            rows,
            cols,
            detail::stride_product("BroadcastView::per_head", sizes, {heads, rows, cols}),
            detail::stride_product("BroadcastView::per_head", sizes, {rows, cols}),
            cols,
            1};
  }
  /// An Eigen matrix (any storage order, direct access) for every sequence and head.
  template <class Derived>
  static BroadcastView of(const Eigen::DenseBase<Derived>& m) {
    return {m.derived().data(),
            1,
            1,
            static_cast<std::ptrdiff_t>(m.rows()),
            static_cast<std::ptrdiff_t>(m.cols()),
            0,
            0,
            static_cast<std::ptrdiff_t>(m.derived().rowStride()),
            static_cast<std::ptrdiff_t>(m.derived().colStride())};
  }
  /// Is this the empty view (data null), i.e. no mask or bias?
  bool empty() const { return data == nullptr; }
};

/// Masks and biases of a call; every member is optional (empty/null = not used). They apply in
/// the order of the table of [Semantics](docs/semantics.md): the scaled, soft-capped logits,
/// then `score_mod`, plus ALiBi and `bias`, then every mask (`mask`, `mask_mod`, causal, window,
/// chunks, `key_lengths`) sets -inf, then the row softmax (over the visible keys and the sink,
/// when `sinks` is given).
template <typename Scalar>
struct Masks {
  /// Boolean mask, true = may attend (PyTorch SDPA's convention), [T_q, T_k] broadcastable. In
  /// the decode calls, a tree mask [B or 1, H or 1, M, M] relating each sequence's T_q <= M queries
  /// to its last T_q cached tokens (speculative decoding; attention_decode_into).
  BroadcastView<bool> mask;
  /// Additive bias on the logits, [T_q, T_k] broadcastable.
  BroadcastView<Scalar> bias;
  /// Right padding: sequence b has key_lengths[b] real keys (0 <= length <= T_k); keys from
  /// there on are masked, and the causal/window alignment uses that length as T_k.
  /// `batch` entries.
  const std::int64_t* key_lengths = nullptr;
  /// ALiBi: one slope per query head; adds -slope_h * |i + offset - j| to the logits.
  const Scalar* alibi_slopes = nullptr;
  /// Attention sinks (gpt-oss): one logit per query head that joins every row's softmax and
  /// carries no value. Row i's weights become exp(z_ij - L_i) with
  /// L_i = log(exp(sinks[h]) + sum_j exp(z_ij)), so that they sum to less than 1; LSE is L_i (the
  /// sink included); a row that sees no key gets ATTN = 0 and LSE = sinks[h]. Its gradient is
  /// BackwardTerms::d_sinks. H entries (one for the single-head calls).
  const Scalar* sinks = nullptr;
  /// Your score modification f(s, b, h, q, k) (score_mod(), Programmable.hpp), called on the
  /// scaled, soft-capped logits, in the compute type (float for bfloat16 and half). The
  /// ScoreMod it refers to must outlive the call.
  ScoreModRef<ComputeScalar<Scalar>> score_mod;
  /// Your mask g(b, h, q, k), true = may attend (mask_mod(), Programmable.hpp); combines with
  /// every other mask. The MaskMod it refers to must outlive the call.
  MaskModRef mask_mod;
  /// Which tiles `mask_mod` hides or shows whole (BlockMask.hpp): Empty tiles are never computed
  /// and Full ones never ask `mask_mod`. Must be of the call's batch (or 1), query heads (or 1),
  /// T_q and T_k, with the call's positions; a Partial tile needs `mask_mod`.
  BlockMaskView block_mask;
};

}  // namespace EigenAttention
