// SPDX-License-Identifier: MIT
/// \file detail/AbiMultiHead.hpp
/// What the multi-head front doors of MultiHead.hpp call across the boundary into the compiled
/// library: one exported function per call and per boundary scalar type (float, double,
/// BFloat16Bits, HalfBits), every optional output present (an empty view: not wanted), in the
/// order of the public call. Not part of the documented API: call the front doors.
#pragma once

#ifndef EIGEN_ATTENTION_PUBLIC_HEADER
#error \
    "EigenAttention: <EigenAttention/detail/AbiMultiHead.hpp> is internal, include <EigenAttention/EigenAttention.hpp> (or another public header) instead"
#endif

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <EigenAttention/BackwardTerms.hpp>
#include <EigenAttention/HeadsView.hpp>
#include <EigenAttention/Masks.hpp>
#include <EigenAttention/Options.hpp>
#include <EigenAttention/Scalars.hpp>
#include <EigenAttention/Types.hpp>
#include <EigenAttention/export.hpp>

namespace EigenAttention {
namespace abi {

// The eight multi-head calls on views of T, whose log-sum-exps are of type L (T itself, or float
// for the 16-bit types). Written once and declared for each type below. attention_heads_lse_into
// is the LSE-only form: the log-sum-exps [B, H, T_q, 1] of attention_heads_into() alone, from Q
// and K (no V, no ATTN), checked as attention_heads_into() is; what a blockwise backward (the
// MPI component's ring) needs for the weights of one block of keys.
#define EIGEN_ATTENTION_ABI_MULTIHEAD(T, L)                                                                  \
  EIGEN_ATTENTION_EXPORT void attention_heads_into(                                                          \
      HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, HeadsView<T> attn, HeadsView<L> lse, \
      const Options& opt, const Masks<T>& masks);                                                            \
  EIGEN_ATTENTION_EXPORT void attention_heads_lse_into(HeadsView<const T> q, HeadsView<const T> k,           \
                                                       HeadsView<L> lse, const Options& opt,                 \
                                                       const Masks<T>& masks);                               \
  EIGEN_ATTENTION_EXPORT void attention_heads_decomposed_into(                                               \
      HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, HeadsView<T> scores,                 \
      HeadsView<T> attn, HeadsView<L> lse, HeadsView<T> average_scores, const Options& opt,                  \
      const Masks<T>& masks);                                                                                \
  EIGEN_ATTENTION_EXPORT void attention_varlen_into(                                                         \
      HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, const std::int64_t* cu_seqlens_q,    \
      const std::int64_t* cu_seqlens_k, std::ptrdiff_t batch, HeadsView<T> attn, HeadsView<L> lse,           \
      const Options& opt, const Masks<T>& masks);                                                            \
  EIGEN_ATTENTION_EXPORT void attention_varlen_decomposed_into(                                              \
      HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, const std::int64_t* cu_seqlens_q,    \
      const std::int64_t* cu_seqlens_k, std::ptrdiff_t batch, T* scores, std::size_t scores_size,            \
      HeadsView<T> attn, HeadsView<L> lse, const Options& opt, const Masks<T>& masks);                       \
  EIGEN_ATTENTION_EXPORT void attention_heads_backward_into(                                                 \
      HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, HeadsView<const T> attn,             \
      HeadsView<const L> lse, HeadsView<const T> d_attn, HeadsView<const T> d_scores, HeadsView<T> dq,       \
      HeadsView<T> dk, HeadsView<T> dv, HeadsView<T> d_bias, const Options& opt, const Masks<T>& masks,      \
      const BackwardTerms<T>& terms);                                                                        \
  EIGEN_ATTENTION_EXPORT void attention_varlen_backward_into(                                                \
      HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, HeadsView<const T> attn,             \
      HeadsView<const L> lse, HeadsView<const T> d_attn, const std::int64_t* cu_seqlens_q,                   \
      const std::int64_t* cu_seqlens_k, std::ptrdiff_t batch, HeadsView<T> dq, HeadsView<T> dk,              \
      HeadsView<T> dv, const Options& opt, const Masks<T>& masks, const BackwardTerms<T>& terms);            \
  EIGEN_ATTENTION_EXPORT void merge_attention_into(HeadsView<const T> attn_a, HeadsView<const L> lse_a,      \
                                                   HeadsView<const T> attn_b, HeadsView<const L> lse_b,      \
                                                   HeadsView<T> attn, HeadsView<L> lse, const Options& opt);

EIGEN_ATTENTION_ABI_MULTIHEAD(float, float)
EIGEN_ATTENTION_ABI_MULTIHEAD(double, double)
EIGEN_ATTENTION_ABI_MULTIHEAD(BFloat16Bits, float)
EIGEN_ATTENTION_ABI_MULTIHEAD(HalfBits, float)
#undef EIGEN_ATTENTION_ABI_MULTIHEAD

}  // namespace abi

namespace detail {

/// T itself, in a parameter whose type is not deduced (std::type_identity_t of C++20): the front
/// doors deduce the scalar type from their first view only, so that every other argument
/// converts (a non-const view to a const one, `{}` to an empty view or default masks).
template <typename T>
struct TypeIdentity {
  using type = T;
};
template <typename T>
using NoDeduce = typename TypeIdentity<T>::type;

/// An input view of T, not deduced.
template <typename T>
using In = HeadsView<const NoDeduce<T>>;
/// An output view of T, not deduced.
template <typename T>
using Out = HeadsView<NoDeduce<T>>;
/// The type of the log-sum-exps of a call on T: the compute type (float for the 16-bit types).
template <typename T>
using LseOf = ComputeScalar<T>;

/// Enables a multi-head front door for a view of float, double, Eigen::bfloat16 or Eigen::half
/// (const or not).
template <typename Q>
using EnableIfHeadsScalar = std::enable_if_t<std::is_same_v<std::remove_const_t<Q>, float> ||
                                                 std::is_same_v<std::remove_const_t<Q>, double> ||
                                                 kIsLowPrecision<std::remove_const_t<Q>>,
                                             int>;

/// A view as one of the boundary type (the 16 bits of Eigen::bfloat16 or Eigen::half; float and
/// double as they are).
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

/// Masks as those of the boundary type.
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
  b.sinks = reinterpret_cast<const AbiScalar<T>*>(m.sinks);
  b.score_mod = m.score_mod;  // (the same compute type on both sides)
  b.mask_mod = m.mask_mod;
  b.block_mask = m.block_mask;
  return b;
}

/// BackwardTerms as those of the boundary type (the same compute-type pointers).
template <typename T>
BackwardTerms<AbiScalar<T>> bits(const BackwardTerms<T>& t) {
  BackwardTerms<AbiScalar<T>> b;
  b.d_lse = t.d_lse;
  b.d_sinks = t.d_sinks;
  b.logit_grad = t.logit_grad;
  return b;
}

}  // namespace detail
}  // namespace EigenAttention
