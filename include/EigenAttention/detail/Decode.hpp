// SPDX-License-Identifier: MIT
/// \file detail/Decode.hpp
/// What the decode front doors of KVCache.hpp share: outputs given as a HeadsView or an Eigen
/// matrix (the heads side by side), the one path that validates, sizes and runs a decode call,
/// and the compile-time checks of its scalar types. Not part of the documented API: call
/// attention_decode and attention_decode_into.
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
#include <EigenAttention/detail/SingleHead.hpp>
#include <EigenAttention/export.hpp>

namespace EigenAttention {

template <typename T>
class PagedKVCache;
template <typename T>
struct PagedKVView;

namespace abi {

/// The strides, in elements, of pages laid out [num_pages, kv_heads, page_size, dim]
/// (FlashInfer's "HND", a PagedKVCache's layout): the one definition of that layout.
struct PageStrides {
  std::ptrdiff_t page, token, head;  ///< between pages, slots (tokens) and heads
};
/// The HND strides of pages of `kv_heads` heads, `page_size` slots and `dim` elements.
constexpr PageStrides hnd_strides(std::ptrdiff_t kv_heads, std::ptrdiff_t page_size, std::ptrdiff_t dim) {
  return {kv_heads * page_size * dim, dim, page_size * dim};
}

/// A PagedKVView as it crosses into the compiled library: its fields, and the element type of
/// the pages as the library's one scalar name.
struct PagedKV {
  const void* k = nullptr;                   ///< PagedKVView::k_pages
  const void* v = nullptr;                   ///< PagedKVView::v_pages
  ScalarType storage = ScalarType::Float32;  ///< the element type of the pages
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
  ///@{
  /// Quantized storage (scalar_type_quantized): the scale of each token and KV head of the keys
  /// and of the values, at page * scale_page_stride + slot * scale_token_stride + head *
  /// scale_head_stride (floats), as PagedKVView's.
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;
  std::ptrdiff_t scale_page_stride = 0, scale_token_stride = 0, scale_head_stride = 0;
  ///@}
};

struct KVPool;  ///< the state of a PagedKVCache, opaque here

/// The keys and values of a decode call, the paged input form of the one pipeline: `batch`
/// sequences of a cache's pool (`pool`, `sequences`), or a caller's view (`view`; pool null).
struct PagedKeys {
  const KVPool* pool = nullptr;
  const std::int32_t* sequences = nullptr;  ///< SequenceId values, batch of them
  std::ptrdiff_t batch = 0;
  const PagedKV* view = nullptr;
};

/// An output of a decode call: a view [1, H, T_q, d] (matrix null), or the caller's Eigen matrix
/// holding the heads side by side, T_q x (H d) (Output of detail/AbiSingleHead.hpp: resized by
/// the call, through the caller's translation unit, once everything else has passed).
template <typename S>
struct DecodeOutput {
  HeadsView<S> view{};
  Output<S>* matrix = nullptr;
};

/// PagedKVCache's constructor. \throws std::invalid_argument, std::bad_alloc.
EIGEN_ATTENTION_EXPORT KVPool* kv_pool_create(ScalarType storage, std::ptrdiff_t kv_heads, std::ptrdiff_t d_k,
                                              std::ptrdiff_t d_v, std::ptrdiff_t page_size,
                                              std::ptrdiff_t capacity_tokens);
/// PagedKVCache::latent: one KV head whose values are the first d_v elements of its keys, stored
/// once. \throws std::invalid_argument, std::bad_alloc.
EIGEN_ATTENTION_EXPORT KVPool* kv_pool_create_latent(ScalarType storage, std::ptrdiff_t d_k,
                                                     std::ptrdiff_t d_v, std::ptrdiff_t page_size,
                                                     std::ptrdiff_t capacity_tokens);
/// PagedKVCache's destructor.
EIGEN_ATTENTION_EXPORT void kv_pool_destroy(KVPool* pool) noexcept;
/// PagedKVCache::create.
EIGEN_ATTENTION_EXPORT std::int32_t kv_pool_create_sequence(KVPool* pool);
/// PagedKVCache::append: k and v are [1, kv_heads, T_new, d] of the storage type or float (a view
/// of another shape is reported as the caller's matrix when `matrix_cols` >= 0: T_new x
/// matrix_cols); kv_pool_append_latent: the keys alone, for a latent cache.
#define EIGEN_ATTENTION_KV_POOL_APPEND(S)                                                               \
  EIGEN_ATTENTION_EXPORT void kv_pool_append(KVPool* pool, std::int32_t sequence, HeadsView<const S> k, \
                                             std::ptrdiff_t k_matrix_cols, HeadsView<const S> v,        \
                                             std::ptrdiff_t v_matrix_cols);                             \
  EIGEN_ATTENTION_EXPORT void kv_pool_append_latent(KVPool* pool, std::int32_t sequence,                \
                                                    HeadsView<const S> k, std::ptrdiff_t k_matrix_cols);
EIGEN_ATTENTION_KV_POOL_APPEND(float)
EIGEN_ATTENTION_KV_POOL_APPEND(double)
EIGEN_ATTENTION_KV_POOL_APPEND(BFloat16Bits)
EIGEN_ATTENTION_KV_POOL_APPEND(HalfBits)
#undef EIGEN_ATTENTION_KV_POOL_APPEND
/// PagedKVCache::fork.
EIGEN_ATTENTION_EXPORT std::int32_t kv_pool_fork(KVPool* pool, std::int32_t sequence);
/// PagedKVCache::truncate.
EIGEN_ATTENTION_EXPORT void kv_pool_truncate(KVPool* pool, std::int32_t sequence, std::int64_t length);
EIGEN_ATTENTION_EXPORT void kv_pool_erase(KVPool* pool, std::int32_t sequence, std::int64_t begin,
                                          std::int64_t end);
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
EIGEN_ATTENTION_EXPORT PagedKV kv_pool_layout(const KVPool* pool);

/// Decode attention of the queries q ([1, H, T_q, d_k], element type S; sequence b's are tokens
/// cu_seqlens_q[b] .. cu_seqlens_q[b + 1]) against `keys`, into attn (and lse when not null), with
/// the ALiBi slopes of `masks` (of the compute type L; a mask, bias or key lengths throw). Validates
/// everything, sizes the outputs that are the caller's resizable matrices, then computes.
#define EIGEN_ATTENTION_ABI_DECODE(S, L)                                                           \
  EIGEN_ATTENTION_EXPORT void decode(const char* api, const PagedKeys& keys, HeadsView<const S> q, \
                                     const std::int64_t* cu_seqlens_q, DecodeOutput<S>& attn,      \
                                     DecodeOutput<L>* lse, const Options& opt, const Masks<L>& masks);
EIGEN_ATTENTION_ABI_DECODE(float, float)
EIGEN_ATTENTION_ABI_DECODE(double, double)
EIGEN_ATTENTION_ABI_DECODE(BFloat16Bits, float)
EIGEN_ATTENTION_ABI_DECODE(HalfBits, float)
#undef EIGEN_ATTENTION_ABI_DECODE

}  // namespace abi

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

/// No LSE output.
template <typename S>
HeadsView<ComputeScalar<S>>* no_lse() {
  return nullptr;
}

/// An output argument as it crosses the boundary: a HeadsView as it is; an Eigen matrix (heads
/// side by side) as its abi::Output, kept in `matrix`.
template <typename S, class O>
abi::DecodeOutput<AbiScalar<S>> decode_output(O& out, abi::Output<AbiScalar<S>>& matrix) {
  if constexpr (kIsHeadsView<O>) {
    return {bits(HeadsView<S>(out)), nullptr};
  } else {
    matrix = abi_output(out);
    return {HeadsView<AbiScalar<S>>{}, &matrix};
  }
}

/// The decode calls' one path: the check that no output to be resized is an input or another
/// output, then one call into the library, which validates, sizes the resizable outputs through
/// this translation unit and computes. d_v: the keys' value dim (for the resize check).
template <typename S, class A, class L>
void decode_into(const char* api, const abi::PagedKeys& keys, const HeadsView<const S>& q,
                 const std::int64_t* cu, A& attn, L* lse, const Masks<ComputeScalar<S>>& masks,
                 std::ptrdiff_t d_v, const Options& opt) {
  using C = ComputeScalar<S>;
  const std::ptrdiff_t H = q.heads, T = q.tokens;
  if (decode_will_resize(attn, H, T, d_v) || (lse != nullptr && decode_will_resize(*lse, H, T, 1))) {
    if (lse != nullptr) {
      check_resizable_apart(api, {view_extent("Q", q)},
                            {decode_extent("attn", attn), decode_extent("lse", *lse)}, mask_extents(masks));
    } else {
      check_resizable_apart(api, {view_extent("Q", q)}, {decode_extent("attn", attn)}, mask_extents(masks));
    }
  }
  abi::Output<AbiScalar<S>> attn_matrix;
  abi::Output<AbiScalar<C>> lse_matrix;
  abi::DecodeOutput<AbiScalar<S>> a = decode_output<S>(attn, attn_matrix);
  if (lse != nullptr) {
    abi::DecodeOutput<AbiScalar<C>> l = decode_output<C>(*lse, lse_matrix);
    abi::decode(api, keys, bits(q), cu, a, &l, opt, masks);
  } else {
    abi::decode(api, keys, bits(q), cu, a, nullptr, opt, masks);
  }
}

/// The keys of a decode call on `batch` sequences of a cache.
template <typename T, typename Id>
abi::PagedKeys cache_keys(const PagedKVCache<T>& cache, const Id* sequences, std::ptrdiff_t batch) {
  static_assert(sizeof(Id) == sizeof(std::int32_t), "a SequenceId is a plain int32");
  return {cache.pool(), reinterpret_cast<const std::int32_t*>(sequences), batch, nullptr};
}

/// Decode queries (and attn) are of the cache's compute type, or of its 16-bit storage type.
template <typename T, typename S>
struct DecodeQueryCheck {
  static constexpr bool ok =
      std::is_same_v<S, ComputeScalar<T>> || (std::is_same_v<S, T> && !kIsQuantized<T>);
  static_assert(
      ok,
      "EigenAttention: decode queries and attn are of the cache's compute type (float for float, "
      "bfloat16, half and quantized caches, double for double caches) or of its 16-bit storage type");
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
