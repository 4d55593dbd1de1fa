/// \file MultiHead.hpp
/// Batched multi-head attention, with grouped/multi-query K/V, masks, biases, key padding,
/// packed variable-length batches, and the merge of partial results.
///
/// Every call takes Q [B, H, T_q, d_k], K [B, H_kv, T_k, d_k], V [B, H_kv, T_k, d_v] and writes
/// ATTN [B, H, T_q, d_v], all as HeadsView (any layout and strides, nothing copied). H must be a
/// multiple of H_kv: query head h reads K/V head h / (H / H_kv) (GQA; H_kv = 1 is MQA), and
/// K/V are never copied per head. What is applied to the logit of query i and key j (scale,
/// soft-cap, ALiBi, bias, the masks, the causal and window alignment under `key_lengths`), in
/// FlashAttention's order, and what a row with no visible key gives, is the one table of
/// [Semantics](docs/semantics.md); the layouts, GQA, varlen and merging are explained in
/// [Multi-head attention](docs/multihead.md), and determinism under Options::threads in
/// [Guarantees](docs/guarantees.md).
///
/// Errors (std::invalid_argument naming the sizes, nothing written): inconsistent batch, head,
/// token or dim sizes between Q, K, V and the outputs; H not a multiple of H_kv; a mask or bias
/// whose shape is not [T_q, T_k] with batch 1 or B and heads 1 or H; a negative window other than
/// -1; a negative or non-finite softcap; key lengths outside [0, T_k]; varlen offsets that
/// decrease or exceed the buffers; outputs that overlap the inputs (Q, K, V, and the mask, bias,
/// ALiBi slopes, key lengths and offsets) or each other (the one overlap rule of all calls:
/// exact for blocks of one parent array, by byte range otherwise; see docs/guarantees.md).
///
/// Every call takes float, double, Eigen::bfloat16 or Eigen::half views; the 16-bit types are
/// computed in float, their log-sum-exps (lse) are float views, and masks.bias and
/// masks.alibi_slopes are of the input type ([Low precision](docs/low_precision.md)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <Eigen/Core>

#include <EigenAttention/HeadsView.hpp>
#include <EigenAttention/Masks.hpp>
#include <EigenAttention/Options.hpp>
#include <EigenAttention/Types.hpp>
#include <EigenAttention/export.hpp>

namespace EigenAttention {

///@{
/// ATTN for every sequence and query head, never forming T_q x T_k.
/// \param q queries [B, H, T_q, d_k].
/// \param k keys [B, H_kv, T_k, d_k].
/// \param v values [B, H_kv, T_k, d_v].
/// \param out [B, H, T_q, d_v]: receives ATTN.
/// \param opt causal mask and its alignment, scale, window, soft-cap, kernel, threads.
/// \param masks optional boolean mask, bias, key lengths and ALiBi slopes (default: none).
/// \param lse optional [B, H, T_q, 1]: the log-sum-exp per row (default: empty, not written).
/// \code
/// auto Q = EigenAttention::HeadsView<const float>::bhtd(q.data(), B, H, T, D);
/// auto K = EigenAttention::HeadsView<const float>::bhtd(k.data(), B, H_kv, T, D);
/// auto V = EigenAttention::HeadsView<const float>::bhtd(v.data(), B, H_kv, T, D);
/// auto O = EigenAttention::HeadsView<float>::bhtd(o.data(), B, H, T, D);
/// EigenAttention::Options opt;
/// opt.causal = true;
/// EigenAttention::attention_heads(Q, K, V, O, opt);
/// \endcode
EIGEN_ATTENTION_EXPORT void attention_heads(HeadsView<const float> q, HeadsView<const float> k,
                                            HeadsView<const float> v, HeadsView<float> out,
                                            const Options& opt = {}, const Masks<float>& masks = {},
                                            HeadsView<float> lse = {});
EIGEN_ATTENTION_EXPORT void attention_heads(HeadsView<const double> q, HeadsView<const double> k,
                                            HeadsView<const double> v, HeadsView<double> out,
                                            const Options& opt = {}, const Masks<double>& masks = {},
                                            HeadsView<double> lse = {});
///@}

///@{
/// attention_heads() that also writes the weights of every head into `scores` [B, H, T_q, T_k]
/// (a HeadsView whose `tokens` is T_q and `dim` is T_k) and, when `average_scores` is not empty,
/// their mean over the heads into it ([B, 1, T_q, T_k], as nn.MultiheadAttention's
/// average_attn_weights=True). `out` may be empty when only the weights are wanted; `scores`
/// may be empty when only `out` is (then it is attention_heads()), but not with
/// `average_scores`, which is computed from it (std::invalid_argument).
EIGEN_ATTENTION_EXPORT void attention_heads_decomposed(HeadsView<const float> q, HeadsView<const float> k,
                                                       HeadsView<const float> v, HeadsView<float> scores,
                                                       HeadsView<float> out, const Options& opt = {},
                                                       const Masks<float>& masks = {},
                                                       HeadsView<float> lse = {},
                                                       HeadsView<float> average_scores = {});
EIGEN_ATTENTION_EXPORT void attention_heads_decomposed(HeadsView<const double> q, HeadsView<const double> k,
                                                       HeadsView<const double> v, HeadsView<double> scores,
                                                       HeadsView<double> out, const Options& opt = {},
                                                       const Masks<double>& masks = {},
                                                       HeadsView<double> lse = {},
                                                       HeadsView<double> average_scores = {});
///@}

///@{
/// Packed variable-length batch without padding (FlashAttention's varlen interface). Q is
/// [1, H, total_q, d_k] (e.g. HeadsView::bthd(q, 1, total_q, H, d_k)), K and V
/// [1, H_kv, total_k, d], out [1, H, total_q, d_v]; sequence b owns query rows
/// [cu_seqlens_q[b], cu_seqlens_q[b+1]) and key rows [cu_seqlens_k[b], cu_seqlens_k[b+1]), each
/// array holding batch + 1 non-decreasing offsets from 0. Each sequence is attended on its own
/// (its own T_q, T_k and alignment offset). Masks may use ALiBi only; mask, bias and
/// key_lengths must be empty (their shapes would differ per sequence). Packed rows after
/// cu_seqlens_q[batch] belong to no sequence and are left untouched.
EIGEN_ATTENTION_EXPORT void attention_varlen(HeadsView<const float> q, HeadsView<const float> k,
                                             HeadsView<const float> v, HeadsView<float> out,
                                             const std::int64_t* cu_seqlens_q,
                                             const std::int64_t* cu_seqlens_k, std::ptrdiff_t batch,
                                             const Options& opt = {}, const Masks<float>& masks = {},
                                             HeadsView<float> lse = {});
EIGEN_ATTENTION_EXPORT void attention_varlen(HeadsView<const double> q, HeadsView<const double> k,
                                             HeadsView<const double> v, HeadsView<double> out,
                                             const std::int64_t* cu_seqlens_q,
                                             const std::int64_t* cu_seqlens_k, std::ptrdiff_t batch,
                                             const Options& opt = {}, const Masks<double>& masks = {},
                                             HeadsView<double> lse = {});
///@}

/// The number of elements attention_varlen_decomposed() writes to `scores`: heads times the sum
/// over sequences of T_q,b * T_k,b. Throws std::invalid_argument for bad offsets.
EIGEN_ATTENTION_EXPORT std::size_t varlen_scores_size(const std::int64_t* cu_seqlens_q,
                                                      const std::int64_t* cu_seqlens_k, std::ptrdiff_t batch,
                                                      std::ptrdiff_t heads);

///@{
/// attention_varlen() that also writes every sequence's per-head weights, packed: sequence b's
/// head h is a row-major T_q,b x T_k,b matrix starting at element
/// H * sum_{b' < b} T_q,b' T_k,b' + h * T_q,b T_k,b of `scores`, which must hold exactly
/// varlen_scores_size(...) elements.
EIGEN_ATTENTION_EXPORT void attention_varlen_decomposed(
    HeadsView<const float> q, HeadsView<const float> k, HeadsView<const float> v, float* scores,
    std::size_t scores_size, HeadsView<float> out, const std::int64_t* cu_seqlens_q,
    const std::int64_t* cu_seqlens_k, std::ptrdiff_t batch, const Options& opt = {},
    const Masks<float>& masks = {}, HeadsView<float> lse = {});
EIGEN_ATTENTION_EXPORT void attention_varlen_decomposed(
    HeadsView<const double> q, HeadsView<const double> k, HeadsView<const double> v, double* scores,
    std::size_t scores_size, HeadsView<double> out, const std::int64_t* cu_seqlens_q,
    const std::int64_t* cu_seqlens_k, std::ptrdiff_t batch, const Options& opt = {},
    const Masks<double>& masks = {}, HeadsView<double> lse = {});
///@}

///@{
/// The backward pass of attention_heads(): the gradients of a scalar loss L given
/// d_out = dL/dATTN [B, H, T_q, d_v], from the forward's `out` and `lse` ([B, H, T_q, 1]),
/// written into dq [B, H, T_q, d_k], dk [B, H_kv, T_k, d_k] and dv [B, H_kv, T_k, d_v]. `opt`
/// and `masks` must be the forward's. With GQA/MQA, dk and dv of a shared K/V head are the
/// sums over its query heads; padded keys (beyond key_lengths) get zero gradients.
/// \param q, k, v the forward's inputs.
/// \param out the forward's ATTN [B, H, T_q, d_v].
/// \param lse the forward's log-sum-exps [B, H, T_q, 1].
/// \param d_out dL/dATTN [B, H, T_q, d_v].
/// \param dq receives dL/dQ [B, H, T_q, d_k].
/// \param dk receives dL/dK [B, H_kv, T_k, d_k].
/// \param dv receives dL/dV [B, H_kv, T_k, d_v].
/// \param opt the forward's Options.
/// \param masks the forward's masks.
/// \param d_scores optional dL/dSCORES [B, H, T_q, T_k] (a loss on the weights themselves;
/// entries at masked positions have no effect).
/// \param d_bias optional dL/dbias, of the bias's own broadcast shape [b, h, T_q, T_k] (b is 1
/// or B, h is 1 or H as in masks.bias, which must be given): summed over the axes it broadcasts.
/// Bitwise identical for every Options::threads. Errors as attention_heads(), naming the
/// gradient views too; nothing is written then.
EIGEN_ATTENTION_EXPORT void attention_heads_backward(
    HeadsView<const float> q, HeadsView<const float> k, HeadsView<const float> v, HeadsView<const float> out,
    HeadsView<const float> lse, HeadsView<const float> d_out, HeadsView<float> dq, HeadsView<float> dk,
    HeadsView<float> dv, const Options& opt = {}, const Masks<float>& masks = {},
    HeadsView<const float> d_scores = {}, HeadsView<float> d_bias = {});
EIGEN_ATTENTION_EXPORT void attention_heads_backward(
    HeadsView<const double> q, HeadsView<const double> k, HeadsView<const double> v,
    HeadsView<const double> out, HeadsView<const double> lse, HeadsView<const double> d_out,
    HeadsView<double> dq, HeadsView<double> dk, HeadsView<double> dv, const Options& opt = {},
    const Masks<double>& masks = {}, HeadsView<const double> d_scores = {}, HeadsView<double> d_bias = {});
///@}

///@{
/// The backward pass of attention_varlen() (packed sequences, views as there): dq, dk and dv
/// of every sequence's rows; packed rows after the last sequence are left untouched.
EIGEN_ATTENTION_EXPORT void attention_varlen_backward(
    HeadsView<const float> q, HeadsView<const float> k, HeadsView<const float> v, HeadsView<const float> out,
    HeadsView<const float> lse, HeadsView<const float> d_out, HeadsView<float> dq, HeadsView<float> dk,
    HeadsView<float> dv, const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k,
    std::ptrdiff_t batch, const Options& opt = {}, const Masks<float>& masks = {});
EIGEN_ATTENTION_EXPORT void attention_varlen_backward(
    HeadsView<const double> q, HeadsView<const double> k, HeadsView<const double> v,
    HeadsView<const double> out, HeadsView<const double> lse, HeadsView<const double> d_out,
    HeadsView<double> dq, HeadsView<double> dk, HeadsView<double> dv, const std::int64_t* cu_seqlens_q,
    const std::int64_t* cu_seqlens_k, std::ptrdiff_t batch, const Options& opt = {},
    const Masks<double>& masks = {});
///@}

///@{
/// Merges two partial results over disjoint key sets into the exact result over their union:
/// with m = max(lse_a, lse_b), w_a = exp(lse_a - m), w_b = exp(lse_b - m),
/// out = (w_a out_a + w_b out_b) / (w_a + w_b) and lse = m + log(w_a + w_b), row by row. A row
/// with lse = -inf on one side takes the other side; on both, zeros and -inf. This is what
/// chunked prefill, split-K decoding and sequence-parallel attention need. out/lse may be the
/// very views out_a/lse_a or out_b/lse_b (merging in place); any other overlap throws.
/// Shapes: out_* [B, H, T, d_v], lse_* [B, H, T, 1].
EIGEN_ATTENTION_EXPORT void merge_attention(HeadsView<const float> out_a, HeadsView<const float> lse_a,
                                            HeadsView<const float> out_b, HeadsView<const float> lse_b,
                                            HeadsView<float> out, HeadsView<float> lse);
EIGEN_ATTENTION_EXPORT void merge_attention(HeadsView<const double> out_a, HeadsView<const double> lse_a,
                                            HeadsView<const double> out_b, HeadsView<const double> lse_b,
                                            HeadsView<double> out, HeadsView<double> lse);
///@}

/// \name bfloat16 and half
/// The calls above for Eigen::bfloat16 and Eigen::half views, computed in float (tiles widened
/// as they are loaded, results rounded once; the backward passes on float copies); `lse` is a
/// float view. They forward to the compiled forms in namespace compiled, which take the views
/// of the 16-bit types as their bits.
///@{

namespace compiled {

/// \name Compiled 16-bit forms
/// The multi-head calls on BFloat16Bits and HalfBits views (the 16 bits of Eigen::bfloat16 and
/// Eigen::half), as the front doors below pass them. Semantics as the float calls.
///@{
/// attention_heads() on 16-bit views (see the front door below).
EIGEN_ATTENTION_EXPORT void attention_heads(HeadsView<const BFloat16Bits> q, HeadsView<const BFloat16Bits> k,
                                            HeadsView<const BFloat16Bits> v, HeadsView<BFloat16Bits> out,
                                            const Options& opt, const Masks<BFloat16Bits>& masks,
                                            HeadsView<float> lse);
/// attention_heads() on 16-bit views (see the front door below).
EIGEN_ATTENTION_EXPORT void attention_heads(HeadsView<const HalfBits> q, HeadsView<const HalfBits> k,
                                            HeadsView<const HalfBits> v, HeadsView<HalfBits> out,
                                            const Options& opt, const Masks<HalfBits>& masks,
                                            HeadsView<float> lse);
/// attention_heads_decomposed() on 16-bit views.
EIGEN_ATTENTION_EXPORT void attention_heads_decomposed(
    HeadsView<const BFloat16Bits> q, HeadsView<const BFloat16Bits> k, HeadsView<const BFloat16Bits> v,
    HeadsView<BFloat16Bits> scores, HeadsView<BFloat16Bits> out, const Options& opt,
    const Masks<BFloat16Bits>& masks, HeadsView<float> lse, HeadsView<BFloat16Bits> average_scores);
/// attention_heads_decomposed() on 16-bit views.
EIGEN_ATTENTION_EXPORT void attention_heads_decomposed(
    HeadsView<const HalfBits> q, HeadsView<const HalfBits> k, HeadsView<const HalfBits> v,
    HeadsView<HalfBits> scores, HeadsView<HalfBits> out, const Options& opt, const Masks<HalfBits>& masks,
    HeadsView<float> lse, HeadsView<HalfBits> average_scores);
/// attention_varlen() on 16-bit views.
EIGEN_ATTENTION_EXPORT void attention_varlen(HeadsView<const BFloat16Bits> q, HeadsView<const BFloat16Bits> k,
                                             HeadsView<const BFloat16Bits> v, HeadsView<BFloat16Bits> out,
                                             const std::int64_t* cu_seqlens_q,
                                             const std::int64_t* cu_seqlens_k, std::ptrdiff_t batch,
                                             const Options& opt, const Masks<BFloat16Bits>& masks,
                                             HeadsView<float> lse);
/// attention_varlen() on 16-bit views.
EIGEN_ATTENTION_EXPORT void attention_varlen(HeadsView<const HalfBits> q, HeadsView<const HalfBits> k,
                                             HeadsView<const HalfBits> v, HeadsView<HalfBits> out,
                                             const std::int64_t* cu_seqlens_q,
                                             const std::int64_t* cu_seqlens_k, std::ptrdiff_t batch,
                                             const Options& opt, const Masks<HalfBits>& masks,
                                             HeadsView<float> lse);
/// attention_varlen_decomposed() on 16-bit views.
EIGEN_ATTENTION_EXPORT void attention_varlen_decomposed(
    HeadsView<const BFloat16Bits> q, HeadsView<const BFloat16Bits> k, HeadsView<const BFloat16Bits> v,
    BFloat16Bits* scores, std::size_t scores_size, HeadsView<BFloat16Bits> out,
    const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k, std::ptrdiff_t batch,
    const Options& opt, const Masks<BFloat16Bits>& masks, HeadsView<float> lse);
/// attention_varlen_decomposed() on 16-bit views.
EIGEN_ATTENTION_EXPORT void attention_varlen_decomposed(
    HeadsView<const HalfBits> q, HeadsView<const HalfBits> k, HeadsView<const HalfBits> v, HalfBits* scores,
    std::size_t scores_size, HeadsView<HalfBits> out, const std::int64_t* cu_seqlens_q,
    const std::int64_t* cu_seqlens_k, std::ptrdiff_t batch, const Options& opt, const Masks<HalfBits>& masks,
    HeadsView<float> lse);
/// attention_heads_backward() on 16-bit views.
EIGEN_ATTENTION_EXPORT void attention_heads_backward(
    HeadsView<const BFloat16Bits> q, HeadsView<const BFloat16Bits> k, HeadsView<const BFloat16Bits> v,
    HeadsView<const BFloat16Bits> out, HeadsView<const float> lse, HeadsView<const BFloat16Bits> d_out,
    HeadsView<BFloat16Bits> dq, HeadsView<BFloat16Bits> dk, HeadsView<BFloat16Bits> dv, const Options& opt,
    const Masks<BFloat16Bits>& masks, HeadsView<const BFloat16Bits> d_scores, HeadsView<BFloat16Bits> d_bias);
/// attention_heads_backward() on 16-bit views.
EIGEN_ATTENTION_EXPORT void attention_heads_backward(
    HeadsView<const HalfBits> q, HeadsView<const HalfBits> k, HeadsView<const HalfBits> v,
    HeadsView<const HalfBits> out, HeadsView<const float> lse, HeadsView<const HalfBits> d_out,
    HeadsView<HalfBits> dq, HeadsView<HalfBits> dk, HeadsView<HalfBits> dv, const Options& opt,
    const Masks<HalfBits>& masks, HeadsView<const HalfBits> d_scores, HeadsView<HalfBits> d_bias);
/// attention_varlen_backward() on 16-bit views.
EIGEN_ATTENTION_EXPORT void attention_varlen_backward(
    HeadsView<const BFloat16Bits> q, HeadsView<const BFloat16Bits> k, HeadsView<const BFloat16Bits> v,
    HeadsView<const BFloat16Bits> out, HeadsView<const float> lse, HeadsView<const BFloat16Bits> d_out,
    HeadsView<BFloat16Bits> dq, HeadsView<BFloat16Bits> dk, HeadsView<BFloat16Bits> dv,
    const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k, std::ptrdiff_t batch,
    const Options& opt, const Masks<BFloat16Bits>& masks);
/// attention_varlen_backward() on 16-bit views.
EIGEN_ATTENTION_EXPORT void attention_varlen_backward(
    HeadsView<const HalfBits> q, HeadsView<const HalfBits> k, HeadsView<const HalfBits> v,
    HeadsView<const HalfBits> out, HeadsView<const float> lse, HeadsView<const HalfBits> d_out,
    HeadsView<HalfBits> dq, HeadsView<HalfBits> dk, HeadsView<HalfBits> dv, const std::int64_t* cu_seqlens_q,
    const std::int64_t* cu_seqlens_k, std::ptrdiff_t batch, const Options& opt, const Masks<HalfBits>& masks);
/// merge_attention() of 16-bit partial results.
EIGEN_ATTENTION_EXPORT void merge_attention(HeadsView<const BFloat16Bits> out_a, HeadsView<const float> lse_a,
                                            HeadsView<const BFloat16Bits> out_b, HeadsView<const float> lse_b,
                                            HeadsView<BFloat16Bits> out, HeadsView<float> lse);
/// merge_attention() of 16-bit partial results.
EIGEN_ATTENTION_EXPORT void merge_attention(HeadsView<const HalfBits> out_a, HeadsView<const float> lse_a,
                                            HeadsView<const HalfBits> out_b, HeadsView<const float> lse_b,
                                            HeadsView<HalfBits> out, HeadsView<float> lse);
///@}

}  // namespace compiled

namespace detail {

/// Enables the front doors of Eigen::bfloat16 and Eigen::half.
template <typename T>
using EnableIfEigen16 = std::enable_if_t<kIsLowPrecision<T> && !std::is_same_v<T, AbiScalar<T>>, int>;

/// A view of Eigen::bfloat16 or Eigen::half as one of its bits.
template <typename T>
HeadsView<AbiScalar<T>> bits(const HeadsView<T>& v) {
  return {reinterpret_cast<AbiScalar<T>*>(v.data),
          v.batch,
          v.heads,
          v.tokens,
          v.dim,
          v.batch_stride,
          v.head_stride,
          v.token_stride,
          v.dim_stride};
}

/// The masks of Eigen::bfloat16 or Eigen::half calls as their bits.
template <typename T>
Masks<AbiScalar<T>> bits(const Masks<T>& m) {
  Masks<AbiScalar<T>> b;
  b.mask = m.mask;
  b.bias = {reinterpret_cast<const AbiScalar<T>*>(m.bias.data),
            m.bias.batch,
            m.bias.heads,
            m.bias.rows,
            m.bias.cols,
            m.bias.batch_stride,
            m.bias.head_stride,
            m.bias.row_stride,
            m.bias.col_stride};
  b.key_lengths = m.key_lengths;
  b.alibi_slopes = reinterpret_cast<const AbiScalar<T>*>(m.alibi_slopes);
  return b;
}

}  // namespace detail

/// attention_heads() on bfloat16 or half views (lse in float).
template <typename T, detail::EnableIfEigen16<T> = 0>
void attention_heads(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, HeadsView<T> out,
                     const Options& opt = {}, const Masks<T>& masks = {}, HeadsView<float> lse = {}) {
  compiled::attention_heads(detail::bits(q), detail::bits(k), detail::bits(v), detail::bits(out), opt,
                            detail::bits(masks), lse);
}

/// attention_heads_decomposed() on bfloat16 or half views (scores and average_scores in the input
/// type, lse in float).
template <typename T, detail::EnableIfEigen16<T> = 0>
void attention_heads_decomposed(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                                HeadsView<T> scores, HeadsView<T> out, const Options& opt = {},
                                const Masks<T>& masks = {}, HeadsView<float> lse = {},
                                HeadsView<T> average_scores = {}) {
  compiled::attention_heads_decomposed(detail::bits(q), detail::bits(k), detail::bits(v),
                                       detail::bits(scores), detail::bits(out), opt, detail::bits(masks), lse,
                                       detail::bits(average_scores));
}

/// attention_varlen() on bfloat16 or half views (lse in float).
template <typename T, detail::EnableIfEigen16<T> = 0>
void attention_varlen(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, HeadsView<T> out,
                      const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k,
                      std::ptrdiff_t batch, const Options& opt = {}, const Masks<T>& masks = {},
                      HeadsView<float> lse = {}) {
  compiled::attention_varlen(detail::bits(q), detail::bits(k), detail::bits(v), detail::bits(out),
                             cu_seqlens_q, cu_seqlens_k, batch, opt, detail::bits(masks), lse);
}

/// attention_varlen_decomposed() on bfloat16 or half views (packed scores in the input type).
template <typename T, detail::EnableIfEigen16<T> = 0>
void attention_varlen_decomposed(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, T* scores,
                                 std::size_t scores_size, HeadsView<T> out, const std::int64_t* cu_seqlens_q,
                                 const std::int64_t* cu_seqlens_k, std::ptrdiff_t batch,
                                 const Options& opt = {}, const Masks<T>& masks = {},
                                 HeadsView<float> lse = {}) {
  compiled::attention_varlen_decomposed(
      detail::bits(q), detail::bits(k), detail::bits(v), reinterpret_cast<AbiScalar<T>*>(scores), scores_size,
      detail::bits(out), cu_seqlens_q, cu_seqlens_k, batch, opt, detail::bits(masks), lse);
}

/// attention_heads_backward() on bfloat16 or half views (lse in float): computed in float on
/// copies of the inputs, gradients rounded to the input type.
template <typename T, detail::EnableIfEigen16<T> = 0>
void attention_heads_backward(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                              HeadsView<const T> out, HeadsView<const float> lse, HeadsView<const T> d_out,
                              HeadsView<T> dq, HeadsView<T> dk, HeadsView<T> dv, const Options& opt = {},
                              const Masks<T>& masks = {}, HeadsView<const T> d_scores = {},
                              HeadsView<T> d_bias = {}) {
  compiled::attention_heads_backward(detail::bits(q), detail::bits(k), detail::bits(v), detail::bits(out),
                                     lse, detail::bits(d_out), detail::bits(dq), detail::bits(dk),
                                     detail::bits(dv), opt, detail::bits(masks), detail::bits(d_scores),
                                     detail::bits(d_bias));
}

/// attention_varlen_backward() on bfloat16 or half views (lse in float).
template <typename T, detail::EnableIfEigen16<T> = 0>
void attention_varlen_backward(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                               HeadsView<const T> out, HeadsView<const float> lse, HeadsView<const T> d_out,
                               HeadsView<T> dq, HeadsView<T> dk, HeadsView<T> dv,
                               const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k,
                               std::ptrdiff_t batch, const Options& opt = {}, const Masks<T>& masks = {}) {
  compiled::attention_varlen_backward(detail::bits(q), detail::bits(k), detail::bits(v), detail::bits(out),
                                      lse, detail::bits(d_out), detail::bits(dq), detail::bits(dk),
                                      detail::bits(dv), cu_seqlens_q, cu_seqlens_k, batch, opt,
                                      detail::bits(masks));
}

/// merge_attention() of bfloat16 or half partial results (lse in float), merged in float.
template <typename T, detail::EnableIfEigen16<T> = 0>
void merge_attention(HeadsView<const T> out_a, HeadsView<const float> lse_a, HeadsView<const T> out_b,
                     HeadsView<const float> lse_b, HeadsView<T> out, HeadsView<float> lse) {
  compiled::merge_attention(detail::bits(out_a), lse_a, detail::bits(out_b), lse_b, detail::bits(out), lse);
}
///@}

}  // namespace EigenAttention
