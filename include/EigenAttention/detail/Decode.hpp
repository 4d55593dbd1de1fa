// SPDX-License-Identifier: MIT
/// \file detail/Decode.hpp
/// What the decode front doors of KVCache.hpp share: outputs given as a HeadsView or an Eigen
/// matrix (the heads side by side), the one path that validates, sizes and runs a decode call,
/// and the compile-time checks of its scalar types. Not part of the documented API: call
/// attention_decode and attention_decode_into. Included by KVCache.hpp after KVStorage, which the
/// boundary's types name.
#pragma once

#ifndef EIGEN_ATTENTION_PUBLIC_HEADER
#error \
    "EigenAttention: <EigenAttention/detail/Decode.hpp> is internal, include <EigenAttention/EigenAttention.hpp> (or another public header) instead"
#endif

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <EigenAttention/HeadsView.hpp>
#include <EigenAttention/Masks.hpp>
#include <EigenAttention/Options.hpp>
#include <EigenAttention/Scalars.hpp>
#include <EigenAttention/Types.hpp>
#include <EigenAttention/detail/AbiMultiHead.hpp>
#include <EigenAttention/detail/CheckedArithmetic.hpp>
#include <EigenAttention/detail/FrontDoor.hpp>
#include <EigenAttention/export.hpp>

namespace EigenAttention {

template <typename T>
class PagedKVCache;
template <typename T>
struct PagedKVView;

namespace compiled {

/// A PagedKVView without its type: what crosses into the compiled library (fields as there).
struct RawPagedKV {
  const void* k = nullptr;                 ///< PagedKVView::k_pages
  const void* v = nullptr;                 ///< PagedKVView::v_pages
  KVStorage storage = KVStorage::Float32;  ///< the element type of the pages
  ///@{
  /// Sizes, as PagedKVView's.
  std::ptrdiff_t num_pages = 0, page_size = 0, kv_heads = 0, d_k = 0, d_v = 0;
  ///@}
  ///@{
  /// Strides in elements, as PagedKVView's.
  std::ptrdiff_t k_page_stride = 0, k_token_stride = 0, k_head_stride = 0;
  std::ptrdiff_t v_page_stride = 0, v_token_stride = 0, v_head_stride = 0;
  ///@}
  const std::int32_t* block_tables = nullptr;  ///< PagedKVView::block_tables
  std::ptrdiff_t block_table_stride = 0;       ///< PagedKVView::block_table_stride
  const std::int64_t* lengths = nullptr;       ///< PagedKVView::lengths
  std::ptrdiff_t batch = 0;                    ///< PagedKVView::batch
};

/// New tokens for PagedKVCache::append, without their type: element (t, h, c) at
/// data[t * token_stride + h * head_stride + c * dim_stride].
struct RawTokens {
  const void* data = nullptr;           ///< element (0, 0, 0)
  KVStorage type = KVStorage::Float32;  ///< its type: the cache's storage type or Float32
  std::ptrdiff_t tokens = 0;            ///< T_new
  std::ptrdiff_t heads = 0;             ///< kv_heads; -1: a matrix of another width; -2: batch != 1
  std::ptrdiff_t dim = 0;               ///< d_k or d_v (the width when heads is -1)
  std::ptrdiff_t token_stride = 0;      ///< elements between tokens
  std::ptrdiff_t head_stride = 0;       ///< elements between heads
  std::ptrdiff_t dim_stride = 1;        ///< elements between a head's elements
};

/// The queries, outputs and ALiBi slopes of one decode call, on Scalar: float, double,
/// BFloat16Bits or HalfBits (16-bit queries and attn go with a 16-bit cache and compute in float).
template <typename Scalar>
struct DecodeArgs {
  using Compute = ComputeScalar<Scalar>;       ///< the type of lse and the ALiBi slopes
  HeadsView<const Scalar> q;                   ///< [1, H, T_q, d_k]
  const std::int64_t* cu_seqlens_q = nullptr;  ///< batch + 1 offsets into q's tokens
  HeadsView<Scalar> attn;                      ///< [1, H, T_q, d_v]
  HeadsView<Compute> lse;                      ///< [1, H, T_q, 1]; empty: not wanted
  const Compute* alibi_slopes = nullptr;       ///< H slopes, or null
  /// Check the keys, queries, offsets, options and the outputs given (not empty) only: the
  /// front doors' check before they resize an output.
  bool inputs_only = false;
};

struct KVPool;  ///< the state of a PagedKVCache, opaque here

/// PagedKVCache's constructor. \throws std::invalid_argument, std::bad_alloc.
EIGEN_ATTENTION_EXPORT KVPool* kv_pool_create(KVStorage storage, std::ptrdiff_t kv_heads, std::ptrdiff_t d_k,
                                              std::ptrdiff_t d_v, std::ptrdiff_t page_size,
                                              std::ptrdiff_t capacity_tokens);
/// PagedKVCache's destructor.
EIGEN_ATTENTION_EXPORT void kv_pool_destroy(KVPool* pool) noexcept;
/// PagedKVCache::create.
EIGEN_ATTENTION_EXPORT std::int32_t kv_pool_create_sequence(KVPool* pool);
/// PagedKVCache::append.
EIGEN_ATTENTION_EXPORT void kv_pool_append(KVPool* pool, std::int32_t sequence, const RawTokens& k,
                                           const RawTokens& v);
/// PagedKVCache::fork.
EIGEN_ATTENTION_EXPORT std::int32_t kv_pool_fork(KVPool* pool, std::int32_t sequence);
/// PagedKVCache::truncate.
EIGEN_ATTENTION_EXPORT void kv_pool_truncate(KVPool* pool, std::int32_t sequence, std::int64_t length);
/// PagedKVCache::release.
EIGEN_ATTENTION_EXPORT void kv_pool_release(KVPool* pool, std::int32_t sequence);
/// PagedKVCache::length.
EIGEN_ATTENTION_EXPORT std::int64_t kv_pool_length(const KVPool* pool, std::int32_t sequence);
/// PagedKVCache::free_pages.
EIGEN_ATTENTION_EXPORT std::ptrdiff_t kv_pool_free_pages(const KVPool* pool);
/// PagedKVCache::pages_needed.
EIGEN_ATTENTION_EXPORT std::ptrdiff_t kv_pool_pages_needed(const KVPool* pool, std::int32_t sequence,
                                                           std::int64_t tokens);
/// Writes up to `capacity` of the sequence's page indices to `out`; returns how many it has.
EIGEN_ATTENTION_EXPORT std::ptrdiff_t kv_pool_pages(const KVPool* pool, std::int32_t sequence,
                                                    std::int32_t* out, std::ptrdiff_t capacity);
/// The pool's pages (pointers, sizes, strides; no sequences).
EIGEN_ATTENTION_EXPORT RawPagedKV kv_pool_layout(const KVPool* pool);

/// Decode over a PagedKVView (float queries: float, bfloat16 or half pages).
EIGEN_ATTENTION_EXPORT void decode(const char* api, const RawPagedKV& kv, const DecodeArgs<float>& args,
                                   const Options& opt);
/// Decode over sequences of a PagedKVCache (float queries: float, bfloat16 or half pages).
EIGEN_ATTENTION_EXPORT void decode(const char* api, const KVPool* pool, const std::int32_t* sequences,
                                   std::ptrdiff_t batch, const DecodeArgs<float>& args, const Options& opt);
/// Decode over a PagedKVView (double queries and pages).
EIGEN_ATTENTION_EXPORT void decode(const char* api, const RawPagedKV& kv, const DecodeArgs<double>& args,
                                   const Options& opt);
/// Decode over sequences of a PagedKVCache (double queries and pages).
EIGEN_ATTENTION_EXPORT void decode(const char* api, const KVPool* pool, const std::int32_t* sequences,
                                   std::ptrdiff_t batch, const DecodeArgs<double>& args, const Options& opt);
/// Decode over a PagedKVView (bfloat16 queries and pages).
EIGEN_ATTENTION_EXPORT void decode(const char* api, const RawPagedKV& kv,
                                   const DecodeArgs<BFloat16Bits>& args, const Options& opt);
/// Decode over sequences of a PagedKVCache (bfloat16 queries and pages).
EIGEN_ATTENTION_EXPORT void decode(const char* api, const KVPool* pool, const std::int32_t* sequences,
                                   std::ptrdiff_t batch, const DecodeArgs<BFloat16Bits>& args,
                                   const Options& opt);
/// Decode over a PagedKVView (half queries and pages).
EIGEN_ATTENTION_EXPORT void decode(const char* api, const RawPagedKV& kv, const DecodeArgs<HalfBits>& args,
                                   const Options& opt);
/// Decode over sequences of a PagedKVCache (half queries and pages).
EIGEN_ATTENTION_EXPORT void decode(const char* api, const KVPool* pool, const std::int32_t* sequences,
                                   std::ptrdiff_t batch, const DecodeArgs<HalfBits>& args,
                                   const Options& opt);

}  // namespace compiled

namespace detail {

/// Is O (references and const removed) a HeadsView?
template <class O>
struct IsHeadsView : std::false_type {};
template <typename S>
struct IsHeadsView<HeadsView<S>> : std::true_type {};
template <class O>
inline constexpr bool kIsHeadsView = IsHeadsView<RemoveCvref<O>>::value;

/// Enables a decode `_into` whose output arguments are each a HeadsView or an Eigen matrix (an
/// Options argument in that place selects the overload without it).
template <class... O>
using EnableIfDecodeOutputs = std::enable_if_t<((kIsHeadsView<O> || kIsMatrix<O>)&&...), int>;

/// The rows of a matrix (tokens) holding `heads` heads of `dim` elements side by side, as the view
/// [1, heads, rows, dim]; when its columns are not heads x dim, the view [1, 1, rows, cols] (one
/// head of every column), whose shape the library then reports.
template <typename S>
HeadsView<S> side_by_side(S* data, std::ptrdiff_t rows, std::ptrdiff_t cols, std::ptrdiff_t row_stride,
                          std::ptrdiff_t col_stride, std::ptrdiff_t heads, std::ptrdiff_t dim) {
  if (heads >= 1 && dim >= 0 && cols == heads * dim)
    return {data, 1, heads, rows, dim, 0, dim * col_stride, row_stride, col_stride};
  return {data, 1, 1, rows, cols, 0, 0, row_stride, col_stride};
}

/// A decode call's queries given as a matrix (T_q x (H d_k), heads side by side), as the view
/// [1, H, T_q, d_k] (a width that is no multiple of d_k is reported by the library).
template <typename S>
HeadsView<const S> queries_of(const ConstStridedMap<S>& q, std::ptrdiff_t d_k) {
  const std::ptrdiff_t cols = q.cols(), heads = d_k > 0 && cols % d_k == 0 ? cols / d_k : 0;
  return side_by_side<const S>(q.data(), q.rows(), cols, q.outerStride(), q.innerStride(), heads, d_k);
}

/// Will decode_output() resize `out` (an Eigen matrix to be T_q x (H dim))?
template <class O>
bool decode_will_resize(const O& out, std::ptrdiff_t heads, std::ptrdiff_t tokens, std::ptrdiff_t dim) {
  if constexpr (kIsHeadsView<O>) {
    (void)out, (void)heads, (void)tokens, (void)dim;
    return false;
  } else {
    return will_resize(out, tokens, heads * dim);
  }
}

/// An output of a decode call as the view [1, H, T_q, dim]: a HeadsView as it is, an Eigen matrix
/// as T_q x (H dim), heads side by side (a resizable one resized to that first).
template <typename S, class O>
HeadsView<S> decode_output(O&& out, std::ptrdiff_t heads, std::ptrdiff_t tokens, std::ptrdiff_t dim) {
  if constexpr (kIsHeadsView<O>) {
    (void)heads, (void)tokens, (void)dim;
    return out;
  } else {
    auto m = output_view(std::forward<O>(out), tokens, heads * dim);
    return side_by_side<S>(m.data(), m.rows(), m.cols(), m.outerStride(), m.innerStride(), heads, dim);
  }
}

/// The Extent of a view (its byte span; none when it does not fit std::ptrdiff_t: the library
/// rejects it, naming it).
template <typename S>
Extent view_extent(const char* name, const HeadsView<S>& v) {
  Extent e{name, nullptr, 0, 0, false};
  if (v.data == nullptr || v.batch <= 0 || v.heads <= 0 || v.tokens <= 0 || v.dim <= 0) return e;
  const std::ptrdiff_t size[4] = {v.batch, v.heads, v.tokens, v.dim},
                       stride[4] = {v.batch_stride, v.head_stride, v.token_stride, v.dim_stride};
  std::ptrdiff_t lo = 0, hi = 0, lo_bytes, hi_bytes;
  for (int axis = 0; axis < 4; ++axis) {
    std::ptrdiff_t d;
    if (!checked_mul(size[axis] - 1, stride[axis], d) || !checked_add(d < 0 ? lo : hi, d, d < 0 ? lo : hi))
      return e;
  }
  const std::ptrdiff_t bytes = sizeof(S);
  if (!checked_mul(lo, bytes, lo_bytes) || !checked_add(hi, 1, hi) || !checked_mul(hi, bytes, hi_bytes))
    return e;
  const auto base = reinterpret_cast<std::uintptr_t>(v.data);
  e.lo = base + static_cast<std::uintptr_t>(lo_bytes);
  e.hi = base + static_cast<std::uintptr_t>(hi_bytes);
  return e;
}

/// The Extent of a decode output as it is now, before any resize.
template <class O>
Extent decode_extent(const char* name, const O& out) {
  if constexpr (kIsHeadsView<O>) {
    return view_extent(name, out);
  } else {
    return output_extent(name, out);
  }
}

/// The ALiBi slopes of a decode call's masks (null: none); a mask, bias or key lengths throw:
/// decode's keys are each sequence's cached tokens, whose lengths the cache holds.
template <typename Scalar>
const Scalar* decode_alibi(const char* api, const Masks<Scalar>& masks) {
  if (!masks.mask.empty() || !masks.bias.empty() || masks.key_lengths != nullptr) {
    throw std::invalid_argument(std::string("EigenAttention::") + api +
                                ": decode takes ALiBi slopes only from masks (masks.mask, masks.bias and "
                                "masks.key_lengths must be empty: each sequence's keys are the cache's)");
  }
  return masks.alibi_slopes;
}

/// No LSE output.
template <typename S>
HeadsView<ComputeScalar<S>>* no_lse() {
  return nullptr;
}

/// The decode calls' one path: validate the inputs and the fixed outputs, size the resizable
/// outputs, run. `keys(api, args, opt)` calls the library on the cache or the view.
template <typename S, class Keys, class A, class L>
void decode_into(const char* api, const Keys& keys, const HeadsView<const S>& q, const std::int64_t* cu,
                 A&& attn, L* lse, const Masks<ComputeScalar<S>>& masks, std::ptrdiff_t d_v,
                 const Options& opt) {
  using C = ComputeScalar<S>;
  compiled::DecodeArgs<AbiScalar<S>> a;
  a.q = bits<const S>(q);
  a.cu_seqlens_q = cu;
  a.alibi_slopes = decode_alibi(api, masks);
  const std::ptrdiff_t H = q.heads, T = q.tokens;
  const bool resize_attn = decode_will_resize(attn, H, T, d_v);
  const bool resize_lse = lse != nullptr && decode_will_resize(*lse, H, T, 1);
  if (resize_attn || resize_lse) {
    // Everything but the outputs to be resized is checked before any is resized.
    a.inputs_only = true;
    if (!resize_attn) a.attn = bits(decode_output<S>(attn, H, T, d_v));
    if (lse != nullptr && !resize_lse) a.lse = decode_output<C>(*lse, H, T, 1);
    keys(api, a, opt);
    a.inputs_only = false;
    a.lse = {};
    if (lse != nullptr) {
      check_resizable_apart(api, {view_extent("Q", q)},
                            {decode_extent("attn", attn), decode_extent("lse", *lse)}, mask_extents(masks));
    } else {
      check_resizable_apart(api, {view_extent("Q", q)}, {decode_extent("attn", attn)}, mask_extents(masks));
    }
  }
  a.attn = bits(decode_output<S>(std::forward<A>(attn), H, T, d_v));
  if (lse != nullptr) a.lse = decode_output<C>(*lse, H, T, 1);
  keys(api, a, opt);
}

template <typename T>
struct CacheKeys {
  const PagedKVCache<T>& cache;
  const std::int32_t* sequences;
  std::ptrdiff_t batch;
  template <typename Scalar>
  void operator()(const char* api, const compiled::DecodeArgs<Scalar>& a, const Options& opt) const {
    compiled::decode(api, cache.pool(), sequences, batch, a, opt);
  }
};

template <typename T>
struct ViewKeys {
  const PagedKVView<T>& view;
  template <typename Scalar>
  void operator()(const char* api, const compiled::DecodeArgs<Scalar>& a, const Options& opt) const {
    compiled::decode(api, view.raw(), a, opt);
  }
};

/// Decode queries (and attn) are of the cache's compute type, or of its 16-bit storage type.
template <typename T, typename S>
struct DecodeQueryCheck {
  static constexpr bool ok = std::is_same_v<S, ComputeScalar<T>> || std::is_same_v<S, T>;
  static_assert(ok,
                "EigenAttention: decode queries and attn are of the cache's compute type (float for float, "
                "bfloat16 and half caches, double for double caches) or of its storage type");
};

/// An output argument O of a decode call whose element type must be S: a writable HeadsView<S> or
/// a non-const Eigen matrix of S.
template <typename S, class O>
constexpr bool decode_output_ok() {
  if constexpr (kIsHeadsView<O>) {
    return std::is_same_v<RemoveCvref<O>, HeadsView<S>>;
  } else {
    return OutputCheck<O>::ok && std::is_same_v<ScalarOf<O>, S>;
  }
}
template <typename S, class O>
struct DecodeOutputCheck {
  static constexpr bool ok = decode_output_ok<S, O>();
  static_assert(ok,
                "EigenAttention: decode's attn is of the queries' type and its lse of their compute type "
                "(float for bfloat16 and half), each a writable HeadsView or Eigen matrix");
};

/// Masks holding these ALiBi slopes only (the 0.2 forms' pointer).
template <typename Scalar>
Masks<Scalar> alibi_masks(const Scalar* alibi_slopes) {
  Masks<Scalar> m;
  m.alibi_slopes = alibi_slopes;
  return m;
}

}  // namespace detail
}  // namespace EigenAttention
