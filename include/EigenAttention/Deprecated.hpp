// SPDX-License-Identifier: MIT
/// \file Deprecated.hpp
/// The multi-head calls of version 0.2 under their old names and argument orders, as inline
/// forwarders to the calls of version 0.3 (MultiHead.hpp), for one minor version: they are
/// removed in 0.4. Each gives the same bits as the call it names; the compiler warns at every
/// use. The table of old and new forms is docs/migration.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <EigenAttention/HeadsView.hpp>
#include <EigenAttention/Masks.hpp>
#include <EigenAttention/MultiHead.hpp>
#include <EigenAttention/Options.hpp>

namespace EigenAttention {

/// 0.2's attention_heads(q, k, v, out, opt, masks, lse).
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfHeadsScalar<Q> = 0>
[[deprecated("EigenAttention 0.3: use attention_heads_into(q, k, v, attn, lse, opt, masks)")]] void
attention_heads(const HeadsView<Q>& q, detail::In<T> k, detail::In<T> v, detail::Out<T> out,
                const Options& opt = {}, const detail::NoDeduce<Masks<T>>& masks = {},
                detail::Out<detail::LseOf<T>> lse = {}) {
  attention_heads_into(q, k, v, out, lse, opt, masks);
}

/// 0.2's attention_heads_decomposed(q, k, v, scores, out, opt, masks, lse, average_scores).
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfHeadsScalar<Q> = 0>
[[deprecated(
    "EigenAttention 0.3: use attention_heads_decomposed_into(q, k, v, scores, attn, lse, average_scores, "
    "opt, "
    "masks)")]] void
attention_heads_decomposed(const HeadsView<Q>& q, detail::In<T> k, detail::In<T> v, detail::Out<T> scores,
                           detail::Out<T> out, const Options& opt = {},
                           const detail::NoDeduce<Masks<T>>& masks = {},
                           detail::Out<detail::LseOf<T>> lse = {}, detail::Out<T> average_scores = {}) {
  attention_heads_decomposed_into(q, k, v, scores, out, lse, average_scores, opt, masks);
}

/// 0.2's attention_varlen(q, k, v, out, cu_seqlens_q, cu_seqlens_k, batch, opt, masks, lse).
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfHeadsScalar<Q> = 0>
[[deprecated(
    "EigenAttention 0.3: use attention_varlen_into(q, k, v, cu_seqlens_q, cu_seqlens_k, batch, attn, lse, "
    "opt, "
    "masks)")]] void
attention_varlen(const HeadsView<Q>& q, detail::In<T> k, detail::In<T> v, detail::Out<T> out,
                 const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k, std::ptrdiff_t batch,
                 const Options& opt = {}, const detail::NoDeduce<Masks<T>>& masks = {},
                 detail::Out<detail::LseOf<T>> lse = {}) {
  attention_varlen_into(q, k, v, cu_seqlens_q, cu_seqlens_k, batch, out, lse, opt, masks);
}

/// 0.2's attention_varlen_decomposed(q, k, v, scores, scores_size, out, cu_seqlens_q,
/// cu_seqlens_k, batch, opt, masks, lse).
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfHeadsScalar<Q> = 0>
[[deprecated(
    "EigenAttention 0.3: use attention_varlen_decomposed_into(q, k, v, cu_seqlens_q, cu_seqlens_k, batch, "
    "scores, "
    "scores_size, attn, lse, opt, masks)")]] void
attention_varlen_decomposed(const HeadsView<Q>& q, detail::In<T> k, detail::In<T> v,
                            detail::NoDeduce<T*> scores, std::size_t scores_size, detail::Out<T> out,
                            const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k,
                            std::ptrdiff_t batch, const Options& opt = {},
                            const detail::NoDeduce<Masks<T>>& masks = {},
                            detail::Out<detail::LseOf<T>> lse = {}) {
  attention_varlen_decomposed_into(q, k, v, cu_seqlens_q, cu_seqlens_k, batch, scores, scores_size, out, lse,
                                   opt, masks);
}

/// 0.2's attention_heads_backward(q, k, v, out, lse, d_out, dq, dk, dv, opt, masks, d_scores,
/// d_bias).
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfHeadsScalar<Q> = 0>
[[deprecated(
    "EigenAttention 0.3: use attention_heads_backward_into(q, k, v, attn, lse, d_attn, d_scores, dq, dk, dv, "
    "d_bias, opt, masks)")]] void
attention_heads_backward(const HeadsView<Q>& q, detail::In<T> k, detail::In<T> v, detail::In<T> out,
                         detail::In<detail::LseOf<T>> lse, detail::In<T> d_out, detail::Out<T> dq,
                         detail::Out<T> dk, detail::Out<T> dv, const Options& opt = {},
                         const detail::NoDeduce<Masks<T>>& masks = {}, detail::In<T> d_scores = {},
                         detail::Out<T> d_bias = {}) {
  attention_heads_backward_into(q, k, v, out, lse, d_out, d_scores, dq, dk, dv, d_bias, opt, masks);
}

/// 0.2's attention_varlen_backward(q, k, v, out, lse, d_out, dq, dk, dv, cu_seqlens_q,
/// cu_seqlens_k, batch, opt, masks).
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfHeadsScalar<Q> = 0>
[[deprecated(
    "EigenAttention 0.3: use attention_varlen_backward_into(q, k, v, attn, lse, d_attn, cu_seqlens_q, "
    "cu_seqlens_k, batch, dq, dk, dv, opt, masks)")]] void
attention_varlen_backward(const HeadsView<Q>& q, detail::In<T> k, detail::In<T> v, detail::In<T> out,
                          detail::In<detail::LseOf<T>> lse, detail::In<T> d_out, detail::Out<T> dq,
                          detail::Out<T> dk, detail::Out<T> dv, const std::int64_t* cu_seqlens_q,
                          const std::int64_t* cu_seqlens_k, std::ptrdiff_t batch, const Options& opt = {},
                          const detail::NoDeduce<Masks<T>>& masks = {}) {
  attention_varlen_backward_into(q, k, v, out, lse, d_out, cu_seqlens_q, cu_seqlens_k, batch, dq, dk, dv, opt,
                                 masks);
}

/// 0.2's merge_attention(out_a, lse_a, out_b, lse_b, out, lse).
template <typename A, typename T = std::remove_const_t<A>, detail::EnableIfHeadsScalar<A> = 0>
[[deprecated("EigenAttention 0.3: use merge_attention_into(attn_a, lse_a, attn_b, lse_b, attn, lse)")]] void
merge_attention(const HeadsView<A>& out_a, detail::In<detail::LseOf<T>> lse_a, detail::In<T> out_b,
                detail::In<detail::LseOf<T>> lse_b, detail::Out<T> out, detail::Out<detail::LseOf<T>> lse) {
  merge_attention_into(out_a, lse_a, out_b, lse_b, out, lse);
}

}  // namespace EigenAttention
