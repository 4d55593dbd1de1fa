// A validated batched multi-head problem, and the single-head problem of each (sequence, query
// head) that the kernels run. Internal to the library.
#pragma once

#include <cstdint>

#include <EigenAttention/HeadsView.hpp>
#include <EigenAttention/Masks.hpp>
#include <EigenAttention/Options.hpp>

#include "kernel_abi.hpp"

namespace EigenAttention {
namespace internal {

template <typename T>
struct HeadsProblem {
  HeadsView<const T> q, k, v;
  HeadsView<T> out, lse, scores;  // empty when not wanted
  Masks<T> masks;
  T scale;
  bool causal, bottom_right;
  index_t window_left, window_right;
  T softcap;
  // Packed variable-length batch (attention_varlen): sequence b owns query rows
  // [cu_q[b], cu_q[b+1]) and key rows [cu_k[b], cu_k[b+1]) of the single batch entry.
  const std::int64_t* cu_q = nullptr;
  const std::int64_t* cu_k = nullptr;
  index_t sequences = 0;  // B (the batch, or the number of varlen sequences)
  // attention_varlen_decomposed: packed weights, sequence b's heads from packed_scores +
  // score_offsets[b] (see MultiHead.hpp).
  T* packed_scores = nullptr;
  const index_t* score_offsets = nullptr;

  index_t heads() const { return q.heads; }
  index_t problems() const { return sequences * q.heads; }

  /// The problem of sequence b = which / H and query head h = which % H.
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
      return raw_matrix<Element>(view.data + batch_index * view.batch_stride + head * view.head_stride +
                                     first * view.token_stride,
                                 rows, view.dim, view.token_stride, view.dim_stride);
    };
    const auto broadcast = [&](const auto& m) {
      using Element = std::remove_const_t<std::remove_pointer_t<decltype(m.data)>>;
      if (m.data == nullptr) return RawMatrix<const Element>{nullptr, 0, 0, 0, 0};
      if (tq == 0 || tk == 0) return raw_matrix<const Element>(m.data, tq, tk, 0, 0);
      const index_t mb = m.batch == 1 ? 0 : b, mh = m.heads == 1 ? 0 : h;
      return raw_matrix<const Element>(m.data + mb * m.batch_stride + mh * m.head_stride, tq, tk, m.row_stride,
                                       m.col_stride);
    };
    RawProblem<T> p{head_of(q, h, q_first, tq),
                    head_of(k, kv, k_first, tk),
                    head_of(v, kv, k_first, tk),
                    scale,
                    causal,
                    bottom_right ? tk - tq : 0,
                    window_left,
                    window_right,
                    softcap,
                    masks.alibi_slopes != nullptr,
                    masks.alibi_slopes != nullptr ? masks.alibi_slopes[h] : T(0),
                    broadcast(masks.bias),
                    broadcast(masks.mask),
                    RawMatrix<T>{nullptr, 0, 0, 0, 0},
                    RawMatrix<T>{nullptr, 0, 0, 0, 0},
                    RawMatrix<T>{nullptr, 0, 0, 0, 0},
                    !scores.empty(),
                    !out.empty(),
                    !lse.empty()};
    if (packed_scores != nullptr) {
      p.scores = tq * tk == 0 ? raw_matrix<T>(packed_scores, tq, tk, 0, 0)
                              : raw_matrix<T>(packed_scores + score_offsets[b] + h * tq * tk, tq, tk, tk, 1);
      p.want_scores = true;
    }
    if (!out.empty()) p.attn = head_of(out, h, q_first, tq);
    if (!lse.empty()) p.lse = head_of(lse, h, q_first, tq);
    if (!scores.empty()) {
      // SCORES keep the full T_k columns: padded keys get weight 0.
      p.scores = head_of(scores, h, q_first, tq);
      p.scores.cols = tk;
      if (tk == 0) p.scores = raw_matrix<T>(p.scores.data, tq, 0, 0, 0);
    }
    return p;
  }
};

}  // namespace internal
}  // namespace EigenAttention
