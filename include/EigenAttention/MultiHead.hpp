// SPDX-License-Identifier: MIT
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

// Lets the detail/ headers in (see HeadsView.hpp).
#ifndef EIGEN_ATTENTION_PUBLIC_HEADER
#define EIGEN_ATTENTION_PUBLIC_HEADER
#endif

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <Eigen/Core>

#include <EigenAttention/BackwardTerms.hpp>
#include <EigenAttention/HeadsView.hpp>
#include <EigenAttention/Masks.hpp>
#include <EigenAttention/Options.hpp>
#include <EigenAttention/Types.hpp>
#include <EigenAttention/detail/AbiMultiHead.hpp>
#include <EigenAttention/export.hpp>

namespace EigenAttention {

/// \name The multi-head calls
/// Each is a template over the scalar type of its first view (float, double, Eigen::bfloat16 or
/// Eigen::half, const or not); every other view converts to the type the call names (a
/// non-const view to a const one, `{}` to an empty view). Optional outputs come after the
/// required ones, before `opt` and `masks`, in overloads that leave them out. The log-sum-exps
/// (`lse`) are of the compute type: float for the 16-bit types (detail::LseOf).
///@{

/// ATTN for every sequence and query head, never forming T_q x T_k.
/// \param q queries [B, H, T_q, d_k].
/// \param k keys [B, H_kv, T_k, d_k].
/// \param v values [B, H_kv, T_k, d_v].
/// \param attn [B, H, T_q, d_v]: receives ATTN.
/// \param lse optional [B, H, T_q, 1]: receives the log-sum-exp of each row.
/// \param opt causal mask and its alignment, scale, window, soft-cap, kernel, threads.
/// \param masks optional boolean mask, bias, key lengths and ALiBi slopes (default: none).
/// \code
/// auto Q = EigenAttention::HeadsView<const float>::bhtd(q.data(), B, H, T, D);
/// auto K = EigenAttention::HeadsView<const float>::bhtd(k.data(), B, H_kv, T, D);
/// auto V = EigenAttention::HeadsView<const float>::bhtd(v.data(), B, H_kv, T, D);
/// auto O = EigenAttention::HeadsView<float>::bhtd(o.data(), B, H, T, D);
/// EigenAttention::Options opt;
/// opt.causal = true;
/// EigenAttention::attention_heads_into(Q, K, V, O, opt);
/// \endcode
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfHeadsScalar<Q> = 0>
void attention_heads_into(const HeadsView<Q>& q, detail::In<T> k, detail::In<T> v, detail::Out<T> attn,
                          detail::Out<detail::LseOf<T>> lse, const Options& opt = {},
                          const detail::NoDeduce<Masks<T>>& masks = {}) {
  abi::attention_heads_into(detail::bits<const T>(q), detail::bits(k), detail::bits(v), detail::bits(attn),
                            lse, opt, detail::bits(masks));
}
/// attention_heads_into() without the log-sum-exps.
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfHeadsScalar<Q> = 0>
void attention_heads_into(const HeadsView<Q>& q, detail::In<T> k, detail::In<T> v, detail::Out<T> attn,
                          const Options& opt = {}, const detail::NoDeduce<Masks<T>>& masks = {}) {
  attention_heads_into(q, k, v, attn, detail::Out<detail::LseOf<T>>{}, opt, masks);
}

/// attention_heads_into() that also writes the weights of every head into `scores`
/// [B, H, T_q, T_k] (a HeadsView whose `tokens` is T_q and `dim` is T_k) and, when
/// `average_scores` is not empty, their mean over the heads into it ([B, 1, T_q, T_k], as
/// nn.MultiheadAttention's average_attn_weights=True). `attn` may be empty when only the weights
/// are wanted; `scores` may be empty when only `attn` is (then it is attention_heads_into()), but
/// not with `average_scores`, which is computed from it (std::invalid_argument).
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfHeadsScalar<Q> = 0>
void attention_heads_decomposed_into(const HeadsView<Q>& q, detail::In<T> k, detail::In<T> v,
                                     detail::Out<T> scores, detail::Out<T> attn,
                                     detail::Out<detail::LseOf<T>> lse, detail::Out<T> average_scores,
                                     const Options& opt = {}, const detail::NoDeduce<Masks<T>>& masks = {}) {
  abi::attention_heads_decomposed_into(detail::bits<const T>(q), detail::bits(k), detail::bits(v),
                                       detail::bits(scores), detail::bits(attn), lse,
                                       detail::bits(average_scores), opt, detail::bits(masks));
}
/// attention_heads_decomposed_into() without the mean over heads.
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfHeadsScalar<Q> = 0>
void attention_heads_decomposed_into(const HeadsView<Q>& q, detail::In<T> k, detail::In<T> v,
                                     detail::Out<T> scores, detail::Out<T> attn,
                                     detail::Out<detail::LseOf<T>> lse, const Options& opt = {},
                                     const detail::NoDeduce<Masks<T>>& masks = {}) {
  attention_heads_decomposed_into(q, k, v, scores, attn, lse, detail::Out<T>{}, opt, masks);
}
/// attention_heads_decomposed_into() without the log-sum-exps and the mean over heads.
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfHeadsScalar<Q> = 0>
void attention_heads_decomposed_into(const HeadsView<Q>& q, detail::In<T> k, detail::In<T> v,
                                     detail::Out<T> scores, detail::Out<T> attn, const Options& opt = {},
                                     const detail::NoDeduce<Masks<T>>& masks = {}) {
  attention_heads_decomposed_into(q, k, v, scores, attn, detail::Out<detail::LseOf<T>>{}, detail::Out<T>{},
                                  opt, masks);
}

/// Packed variable-length batch without padding (FlashAttention's varlen interface). Q is
/// [1, H, total_q, d_k] (e.g. HeadsView::bthd(q, 1, total_q, H, d_k)), K and V
/// [1, H_kv, total_k, d], attn [1, H, total_q, d_v]; sequence b owns query rows
/// [cu_seqlens_q[b], cu_seqlens_q[b+1]) and key rows [cu_seqlens_k[b], cu_seqlens_k[b+1]), each
/// array holding batch + 1 non-decreasing offsets from 0 (required when batch > 1). Each
/// sequence is attended on its own (its own T_q, T_k and alignment offset). Masks may use ALiBi
/// only; mask, bias and key_lengths must be empty (their shapes would differ per sequence).
/// Packed rows after cu_seqlens_q[batch] belong to no sequence and are left untouched.
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfHeadsScalar<Q> = 0>
void attention_varlen_into(const HeadsView<Q>& q, detail::In<T> k, detail::In<T> v,
                           const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k,
                           std::ptrdiff_t batch, detail::Out<T> attn, detail::Out<detail::LseOf<T>> lse,
                           const Options& opt = {}, const detail::NoDeduce<Masks<T>>& masks = {}) {
  abi::attention_varlen_into(detail::bits<const T>(q), detail::bits(k), detail::bits(v), cu_seqlens_q,
                             cu_seqlens_k, batch, detail::bits(attn), lse, opt, detail::bits(masks));
}
/// attention_varlen_into() without the log-sum-exps.
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfHeadsScalar<Q> = 0>
void attention_varlen_into(const HeadsView<Q>& q, detail::In<T> k, detail::In<T> v,
                           const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k,
                           std::ptrdiff_t batch, detail::Out<T> attn, const Options& opt = {},
                           const detail::NoDeduce<Masks<T>>& masks = {}) {
  attention_varlen_into(q, k, v, cu_seqlens_q, cu_seqlens_k, batch, attn, detail::Out<detail::LseOf<T>>{},
                        opt, masks);
}

/// The number of elements attention_varlen_decomposed_into() writes to `scores`: heads times the
/// sum over sequences of T_q,b * T_k,b. Throws std::invalid_argument for bad offsets.
EIGEN_ATTENTION_EXPORT std::size_t varlen_scores_size(const std::int64_t* cu_seqlens_q,
                                                      const std::int64_t* cu_seqlens_k, std::ptrdiff_t batch,
                                                      std::ptrdiff_t heads);

/// attention_varlen_into() that also writes every sequence's per-head weights, packed: sequence
/// b's head h is a row-major T_q,b x T_k,b matrix starting at element
/// H * sum_{b' < b} T_q,b' T_k,b' + h * T_q,b T_k,b of `scores`, which must hold exactly
/// varlen_scores_size(...) elements.
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfHeadsScalar<Q> = 0>
void attention_varlen_decomposed_into(const HeadsView<Q>& q, detail::In<T> k, detail::In<T> v,
                                      const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k,
                                      std::ptrdiff_t batch, detail::NoDeduce<T*> scores,
                                      std::size_t scores_size, detail::Out<T> attn,
                                      detail::Out<detail::LseOf<T>> lse, const Options& opt = {},
                                      const detail::NoDeduce<Masks<T>>& masks = {}) {
  abi::attention_varlen_decomposed_into(detail::bits<const T>(q), detail::bits(k), detail::bits(v),
                                        cu_seqlens_q, cu_seqlens_k, batch,
                                        reinterpret_cast<AbiScalar<T>*>(scores), scores_size,
                                        detail::bits(attn), lse, opt, detail::bits(masks));
}
/// attention_varlen_decomposed_into() without the log-sum-exps.
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfHeadsScalar<Q> = 0>
void attention_varlen_decomposed_into(const HeadsView<Q>& q, detail::In<T> k, detail::In<T> v,
                                      const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k,
                                      std::ptrdiff_t batch, detail::NoDeduce<T*> scores,
                                      std::size_t scores_size, detail::Out<T> attn, const Options& opt = {},
                                      const detail::NoDeduce<Masks<T>>& masks = {}) {
  attention_varlen_decomposed_into(q, k, v, cu_seqlens_q, cu_seqlens_k, batch, scores, scores_size, attn,
                                   detail::Out<detail::LseOf<T>>{}, opt, masks);
}

/// The backward pass of attention_heads_into(): the gradients of a scalar loss L given
/// d_attn = dL/dATTN [B, H, T_q, d_v], from the forward's `attn` and `lse` ([B, H, T_q, 1]),
/// written into dq [B, H, T_q, d_k], dk [B, H_kv, T_k, d_k] and dv [B, H_kv, T_k, d_v]. `opt`
/// and `masks` must be the forward's. With GQA/MQA, dk and dv of a shared K/V head are the
/// sums over its query heads; padded keys (beyond key_lengths) get zero gradients. The 16-bit
/// types are computed in float, their tiles widened as they are loaded and the gradients
/// accumulated in float, then rounded once.
/// \param q, k, v the forward's inputs.
/// \param attn the forward's ATTN [B, H, T_q, d_v].
/// \param lse the forward's log-sum-exps [B, H, T_q, 1].
/// \param d_attn dL/dATTN [B, H, T_q, d_v].
/// \param d_scores dL/dSCORES [B, H, T_q, T_k] (a loss on the weights themselves; entries at
/// masked positions have no effect), or empty.
/// \param dq receives dL/dQ [B, H, T_q, d_k].
/// \param dk receives dL/dK [B, H_kv, T_k, d_k].
/// \param dv receives dL/dV [B, H_kv, T_k, d_v].
/// \param d_bias receives dL/dbias, of the bias's own broadcast shape [b, h, T_q, T_k] (b is 1
/// or B, h is 1 or H as in masks.bias, which must be given), summed over the axes it
/// broadcasts; or empty.
/// \param opt the forward's Options.
/// \param masks the forward's masks.
/// \param terms dL/dLSE [B, H, T_q, 1] to add, and where dL/dsinks goes (H values), both optional
/// (BackwardTerms.hpp).
/// Bitwise identical for every Options::threads. Errors as attention_heads_into(), naming the
/// gradient views too; nothing is written then.
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfHeadsScalar<Q> = 0>
void attention_heads_backward_into(const HeadsView<Q>& q, detail::In<T> k, detail::In<T> v,
                                   detail::In<T> attn, detail::In<detail::LseOf<T>> lse, detail::In<T> d_attn,
                                   detail::In<T> d_scores, detail::Out<T> dq, detail::Out<T> dk,
                                   detail::Out<T> dv, detail::Out<T> d_bias, const Options& opt = {},
                                   const detail::NoDeduce<Masks<T>>& masks = {},
                                   const detail::NoDeduce<BackwardTerms<T>>& terms = {}) {
  abi::attention_heads_backward_into(detail::bits<const T>(q), detail::bits(k), detail::bits(v),
                                     detail::bits(attn), lse, detail::bits(d_attn), detail::bits(d_scores),
                                     detail::bits(dq), detail::bits(dk), detail::bits(dv),
                                     detail::bits(d_bias), opt, detail::bits(masks), detail::bits(terms));
}
/// attention_heads_backward_into() without dL/dSCORES and dL/dbias.
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfHeadsScalar<Q> = 0>
void attention_heads_backward_into(const HeadsView<Q>& q, detail::In<T> k, detail::In<T> v,
                                   detail::In<T> attn, detail::In<detail::LseOf<T>> lse, detail::In<T> d_attn,
                                   detail::Out<T> dq, detail::Out<T> dk, detail::Out<T> dv,
                                   const Options& opt = {}, const detail::NoDeduce<Masks<T>>& masks = {},
                                   const detail::NoDeduce<BackwardTerms<T>>& terms = {}) {
  attention_heads_backward_into(q, k, v, attn, lse, d_attn, detail::In<T>{}, dq, dk, dv, detail::Out<T>{},
                                opt, masks, terms);
}

/// The backward pass of attention_varlen_into() (packed sequences, views as there): dq, dk and
/// dv of every sequence's rows; packed rows after the last sequence are left untouched.
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfHeadsScalar<Q> = 0>
void attention_varlen_backward_into(const HeadsView<Q>& q, detail::In<T> k, detail::In<T> v,
                                    detail::In<T> attn, detail::In<detail::LseOf<T>> lse,
                                    detail::In<T> d_attn, const std::int64_t* cu_seqlens_q,
                                    const std::int64_t* cu_seqlens_k, std::ptrdiff_t batch, detail::Out<T> dq,
                                    detail::Out<T> dk, detail::Out<T> dv, const Options& opt = {},
                                    const detail::NoDeduce<Masks<T>>& masks = {},
                                    const detail::NoDeduce<BackwardTerms<T>>& terms = {}) {
  abi::attention_varlen_backward_into(detail::bits<const T>(q), detail::bits(k), detail::bits(v),
                                      detail::bits(attn), lse, detail::bits(d_attn), cu_seqlens_q,
                                      cu_seqlens_k, batch, detail::bits(dq), detail::bits(dk),
                                      detail::bits(dv), opt, detail::bits(masks), detail::bits(terms));
}

/// Merges two partial results over disjoint key sets into the exact result over their union:
/// with m = max(lse_a, lse_b), w_a = exp(lse_a - m), w_b = exp(lse_b - m),
/// attn = (w_a attn_a + w_b attn_b) / (w_a + w_b) and lse = m + log(w_a + w_b), row by row. A
/// row with lse = -inf on one side takes the other side; on both, zeros and -inf. This is what
/// chunked prefill, split-K decoding and sequence-parallel attention need. attn/lse may be the
/// very views attn_a/lse_a or attn_b/lse_b (merging in place); any other overlap throws.
/// Shapes: attn_* [B, H, T, d_v], lse_* [B, H, T, 1]; the 16-bit types merge in float. Of `opt`
/// only `threads` is used: the rows are spread over up to that many threads (the same bits for
/// every count; a negative count throws std::invalid_argument).
template <typename A, typename T = std::remove_const_t<A>, detail::EnableIfHeadsScalar<A> = 0>
void merge_attention_into(const HeadsView<A>& attn_a, detail::In<detail::LseOf<T>> lse_a,
                          detail::In<T> attn_b, detail::In<detail::LseOf<T>> lse_b, detail::Out<T> attn,
                          detail::Out<detail::LseOf<T>> lse, const Options& opt = {}) {
  abi::merge_attention_into(detail::bits<const T>(attn_a), lse_a, detail::bits(attn_b), lse_b,
                            detail::bits(attn), lse, opt);
}
///@}

}  // namespace EigenAttention

#include <EigenAttention/Deprecated.hpp>
