// SPDX-License-Identifier: MIT
/// \file KVCache.hpp
/// Serving: a paged key/value cache (PagedKVCache), a view of pages the caller manages itself
/// (PagedKVView), and decode attention over either (attention_decode): new query tokens against
/// a sequence's cached keys, split over the threads along the keys and merged exactly, with
/// bitwise the same result for every thread count. See docs/decode.md.
#pragma once

// Lets the detail/ headers in (each refuses to be included on its own); never undefined, so
// that any public header may include them, in any order.
#ifndef EIGEN_ATTENTION_PUBLIC_HEADER
#define EIGEN_ATTENTION_PUBLIC_HEADER
#endif

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include <EigenAttention/Compiled.hpp>
#include <EigenAttention/HeadsView.hpp>
#include <EigenAttention/Masks.hpp>
#include <EigenAttention/Options.hpp>
#include <EigenAttention/Types.hpp>
#include <EigenAttention/detail/Decode.hpp>
#include <EigenAttention/detail/FrontDoor.hpp>
#include <EigenAttention/export.hpp>

namespace EigenAttention {

/// 0.2's name of the element type of cached keys and values: the library's one ScalarType
/// (Scalars.hpp), whose enumerators it shares.
using KVStorage [[deprecated("EigenAttention 0.3: KVStorage is ScalarType (Scalars.hpp)")]] = ScalarType;

/// 0.2's traits of a storage type: its tag (ScalarTraits<T>::type) and compute type
/// (ComputeScalar<T>).
template <typename T>
struct [[deprecated(
    "EigenAttention 0.3: use ScalarTraits<T>::type and ComputeScalar<T> (Scalars.hpp)")]] KVStorageTraits {
  static constexpr ScalarType storage = ScalarTraits<T>::type;  ///< the tag
  using Compute = ComputeScalar<T>;                             ///< queries, outputs, arithmetic
};

/// Keys and values in pages that the caller owns and manages (vLLM's and FlashInfer's paged
/// layout): page p, slot t (0 <= t < page_size), KV head h, element c of a key is at
/// `k_pages[p * k_page_stride + t * k_token_stride + h * k_head_stride + c]` (values likewise),
/// and sequence b holds lengths[b] tokens, token n in page block_tables[b * block_table_stride +
/// n / page_size], slot n % page_size. Nothing is copied; the caller's memory must outlive the call.
///
/// \code
/// // vLLM-style NHD pages: [num_pages, page_size, kv_heads, d]
/// auto kv = EigenAttention::PagedKVView<float>::nhd(k.data(), v.data(), num_pages, 16, 8, 128, 128,
///                                                   tables.data(), max_pages, lengths.data(), batch);
/// \endcode
///
/// Quantized pages (T = Int8, Float8E4M3, Float8E5M2) come with a float scale per token and KV
/// head for the keys and for the values, set by with_scales(): element c of key (p, t, h) stands
/// for `k_scales[p * scale_page_stride + t * scale_token_stride + h * scale_head_stride] * value`.
/// The factories set the scale strides of their layout with d = 1 (nhd: [num_pages, page_size,
/// kv_heads]; hnd: [num_pages, kv_heads, page_size]; latent: [num_pages, page_size]).
template <typename T>
struct PagedKVView {
  static_assert(
      std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Eigen::bfloat16> ||
          std::is_same_v<T, Eigen::half> || kIsQuantized<T>,
      "EigenAttention: cached keys and values are float, double, Eigen::bfloat16, Eigen::half, Int8, "
      "Float8E4M3 or Float8E5M2");
  const T* k_pages = nullptr;  ///< key page 0, slot 0, head 0, element 0
  const T* v_pages = nullptr;  ///< value page 0, slot 0, head 0, element 0
  ///@{
  /// Pages in the pool, tokens per page (>= 1), KV heads (>= 1), key and value dims.
  std::ptrdiff_t num_pages = 0, page_size = 0, kv_heads = 0, d_k = 0, d_v = 0;
  ///@}
  ///@{
  /// Strides in elements between pages, slots and heads (the dim stride is 1).
  std::ptrdiff_t k_page_stride = 0, k_token_stride = 0, k_head_stride = 0;
  std::ptrdiff_t v_page_stride = 0, v_token_stride = 0, v_head_stride = 0;
  ///@}
  /// Page indices of sequence b: block_tables[b * block_table_stride + n], n < ceil(lengths[b] /
  /// page_size); each must lie in [0, num_pages).
  const std::int32_t* block_tables = nullptr;
  std::ptrdiff_t block_table_stride = 0;  ///< entries per sequence in block_tables
  const std::int64_t* lengths = nullptr;  ///< tokens of each sequence, batch entries
  std::ptrdiff_t batch = 0;               ///< sequences
  ///@{
  /// The scales of quantized keys and values (with_scales()); null for the other types.
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;
  ///@}
  ///@{
  /// Strides in floats of the scales between pages, slots and heads (set by the factories).
  std::ptrdiff_t scale_page_stride = 0, scale_token_stride = 0, scale_head_stride = 0;
  ///@}

  /// The same view with the scales of its quantized keys and values (of a latent view, the one
  /// array of the keys, given twice).
  PagedKVView with_scales(const float* keys, const float* values) const {
    PagedKVView v = *this;
    v.k_scales = keys;
    v.v_scales = values;
    return v;
  }

  /// Pages laid out [num_pages, page_size, kv_heads, d] (vLLM's, FlashInfer's "NHD").
  static PagedKVView nhd(const T* k, const T* v, std::ptrdiff_t num_pages, std::ptrdiff_t page_size,
                         std::ptrdiff_t kv_heads, std::ptrdiff_t d_k, std::ptrdiff_t d_v,
                         const std::int32_t* block_tables, std::ptrdiff_t block_table_stride,
                         const std::int64_t* lengths, std::ptrdiff_t batch) {
    PagedKVView view{k,
                     v,
                     num_pages,
                     page_size,
                     kv_heads,
                     d_k,
                     d_v,
                     page_size * kv_heads * d_k,
                     kv_heads * d_k,
                     d_k,
                     page_size * kv_heads * d_v,
                     kv_heads * d_v,
                     d_v,
                     block_tables,
                     block_table_stride,
                     lengths,
                     batch};
    view.set_scale_strides(page_size * kv_heads, kv_heads, 1);
    return view;
  }
  /// Pages laid out [num_pages, kv_heads, page_size, d] (FlashInfer's "HND").
  static PagedKVView hnd(const T* k, const T* v, std::ptrdiff_t num_pages, std::ptrdiff_t page_size,
                         std::ptrdiff_t kv_heads, std::ptrdiff_t d_k, std::ptrdiff_t d_v,
                         const std::int32_t* block_tables, std::ptrdiff_t block_table_stride,
                         const std::int64_t* lengths, std::ptrdiff_t batch) {
    const abi::PageStrides ks = abi::hnd_strides(kv_heads, page_size, d_k),
                           vs = abi::hnd_strides(kv_heads, page_size, d_v);
    PagedKVView view{k,       v,        num_pages, page_size,    kv_heads,
                     d_k,     d_v,      ks.page,   ks.token,     ks.head,
                     vs.page, vs.token, vs.head,   block_tables, block_table_stride,
                     lengths, batch};
    const abi::PageStrides ss = abi::hnd_strides(kv_heads, page_size, 1);
    view.set_scale_strides(ss.page, ss.token, ss.head);
    return view;
  }

  /// Latent pages (MLA, as PagedKVCache::latent): one KV head whose values are the first d_v
  /// elements of its keys, each token stored once, pages laid out [num_pages, page_size, d_k].
  static PagedKVView latent(const T* pages, std::ptrdiff_t num_pages, std::ptrdiff_t page_size,
                            std::ptrdiff_t d_k, std::ptrdiff_t d_v, const std::int32_t* block_tables,
                            std::ptrdiff_t block_table_stride, const std::int64_t* lengths,
                            std::ptrdiff_t batch) {
    PagedKVView view{pages,
                     pages,
                     num_pages,
                     page_size,
                     1,
                     d_k,
                     d_v,
                     page_size * d_k,
                     d_k,
                     d_k,
                     page_size * d_k,
                     d_k,
                     d_k,
                     block_tables,
                     block_table_stride,
                     lengths,
                     batch};
    view.set_scale_strides(page_size, 1, 1);
    return view;
  }

  /// The same view without its type (what the compiled library takes).
  abi::PagedKV raw() const {
    return {k_pages,
            v_pages,
            kScalarType<T>,
            num_pages,
            page_size,
            kv_heads,
            d_k,
            d_v,
            k_page_stride,
            k_token_stride,
            k_head_stride,
            v_page_stride,
            v_token_stride,
            v_head_stride,
            block_tables,
            block_table_stride,
            lengths,
            batch,
            k_scales,
            v_scales,
            scale_page_stride,
            scale_token_stride,
            scale_head_stride};
  }

 private:
  void set_scale_strides(std::ptrdiff_t page, std::ptrdiff_t token, std::ptrdiff_t head) {
    scale_page_stride = page, scale_token_stride = token, scale_head_stride = head;
  }
};

/// A sequence of a PagedKVCache: a handle that is valid from create() or fork() until release().
/// An id is never valid again after its release: the cache reuses the sequence's slot for a later
/// sequence, but with another id, so a stale copy throws std::invalid_argument ("... is not in the
/// cache: it was released") in every member and decode instead of naming the new sequence.
///
/// The value is a non-negative 32-bit integer: the slot in its low 16 bits (at most 65,536
/// sequences at once) and the slot's generation in the next 15, advanced by each release of the
/// slot. Slots are reused oldest-released first. A generation wraps after 32,768 releases of one
/// slot: an id kept across all of them would name the slot's sequence of that time again. The
/// value is opaque otherwise (the first ids of a fresh cache happen to be 0, 1, 2, ...).
struct SequenceId {
  std::int32_t value = -1;  ///< the id; -1 (the default) names no sequence
  /// Same id?
  friend bool operator==(SequenceId a, SequenceId b) { return a.value == b.value; }
  /// Different ids?
  friend bool operator!=(SequenceId a, SequenceId b) { return a.value != b.value; }
};
static_assert(sizeof(SequenceId) == sizeof(std::int32_t), "SequenceId must be a plain int32");

/// A pool of fixed-size pages holding the keys and values of `kv_heads` heads for many
/// sequences, which grow by appending without moving what they hold, share pages when forked
/// (reference counted; the last, partly filled page is copied on the first write: shared
/// prompts, beam search) and shrink by truncation (speculative decoding).
///
/// T is the storage type: float, double, Eigen::bfloat16 or Eigen::half (the last two halve
/// the bytes each decode step reads; queries, outputs and arithmetic are then float), or a
/// quantized type, Int8, Float8E4M3 or Float8E5M2 (a quarter of float's bytes, plus one float
/// scale per token and KV head for the keys and one for the values): append() quantizes float,
/// bfloat16 or half rows on the way in (scale = max |x| of the token's head over the type's
/// largest value, elements rounded to nearest even, saturating; a NaN or infinity throws, naming
/// the token and head, and nothing is appended), and decode reads scale x element in registers
/// (docs/decode.md, "Quantized caches"). Pages are
/// laid out [num_pages, kv_heads, page_size, d] (FlashInfer's "HND": a decode reads one head's
/// keys at a time, contiguous within a page) and allocated once, at construction: the
/// capacity is fixed, and running out is an error (std::invalid_argument) that changes nothing.
///
/// Thread safety: decoding (attention_decode) and the const members may run concurrently from
/// any number of threads; append, create, fork, truncate and release lock the pool and wait for
/// running decodes. Every member that fails throws and leaves the cache as it was: an unknown
/// or released sequence (see SequenceId), a wrong shape or type of tokens throw
/// std::invalid_argument.
///
/// \code
/// EigenAttention::PagedKVCache<float> cache(8, 128, 128, 16, 65536);  // 8 KV heads, d = 128
/// auto s = cache.create();
/// cache.append(s, K_prompt, V_prompt);                // T x (8 * 128) each
/// cache.append(s, k_new, v_new);                       // one more token
/// auto out = EigenAttention::attention_decode(cache, s, q_new, opt);  // 1 x (H * 128)
/// \endcode
template <typename T>
class PagedKVCache {
 public:
  using Storage = T;                 ///< the stored element type
  using Compute = ComputeScalar<T>;  ///< queries, outputs and arithmetic

  /// A pool of ceil(capacity_tokens / page_size) pages of page_size tokens (a power of two from
  /// 16 to 256) for kv_heads >= 1 heads of d_k-element keys and d_v-element values (d_k >= 1).
  /// \throws std::invalid_argument for sizes outside these ranges; std::bad_alloc.
  PagedKVCache(std::ptrdiff_t kv_heads, std::ptrdiff_t d_k, std::ptrdiff_t d_v, std::ptrdiff_t page_size,
               std::ptrdiff_t capacity_tokens)
      : pool_(abi::kv_pool_create(kScalarType<T>, kv_heads, d_k, d_v, page_size, capacity_tokens)),
        layout_(abi::kv_pool_layout(pool_.get())) {}

  /// A latent cache (MLA absorbed decode: DeepSeek V2/V3, Kimi): one KV head whose key is a
  /// token's latent vector and rotary part, [c; k_rope] (d_k elements, 576 in DeepSeek V3), and
  /// whose value is the first d_v elements of that key (the latent c, 512), so that each token is
  /// stored once: d_k numbers instead of d_k + d_v (1.9x less memory, and less for each decode to
  /// read). append(s, latent) takes the T_new x d_k rows alone; decode is then the same call, with
  /// H query heads (W_UK absorbed into the queries) over the one KV head, bitwise equal to a cache
  /// that holds the same keys and values apart. Page sizes and capacity as the constructor.
  /// \code
  /// auto cache = EigenAttention::PagedKVCache<Eigen::bfloat16>::latent(576, 512, 64, 1 << 16);
  /// cache.append(s, latent_rows);                                        // T x 576
  /// EigenAttention::Options opt;
  /// opt.scale = 1 / std::sqrt(192.0f);                                   // the unabsorbed head dim
  /// auto out = EigenAttention::attention_decode(cache, s, q_absorbed, opt);  // 1 x (H * 512)
  /// \endcode
  /// \throws std::invalid_argument when d_v > d_k or for the constructor's reasons; std::bad_alloc.
  static PagedKVCache latent(std::ptrdiff_t d_k, std::ptrdiff_t d_v, std::ptrdiff_t page_size,
                             std::ptrdiff_t capacity_tokens) {
    return PagedKVCache(abi::kv_pool_create_latent(kScalarType<T>, d_k, d_v, page_size, capacity_tokens),
                        true);
  }

  /// A new, empty sequence, with an id no earlier sequence had (see SequenceId).
  /// \throws std::length_error when 65,536 sequences are live.
  SequenceId create() { return {abi::kv_pool_create_sequence(pool_.get())}; }

  /// Appends T_new tokens to sequence s: k is T_new x (kv_heads d_k) and v T_new x (kv_heads
  /// d_v), one row per token with the heads side by side (what a K or V projection gives), of
  /// the storage type or of float (rounded to nearest on the way in). Any Eigen dense expression.
  /// Work O(T_new kv_heads d); existing pages never move.
  /// \throws std::invalid_argument (shapes, types, unknown sequence, not enough free pages).
  template <class DK, class DV>
  void append(SequenceId s, const Eigen::MatrixBase<DK>& k, const Eigen::MatrixBase<DV>& v) {
    static_assert(std::is_same_v<typename DK::Scalar, typename DV::Scalar>,
                  "EigenAttention: append's keys and values must have one scalar type");
    check_input_type<typename DK::Scalar>();
    detail::InputView<DK> kk(k.derived());
    detail::InputView<DV> vv(v.derived());
    using S = typename DK::Scalar;
    const auto km = kk.map();
    const auto vm = vv.map();
    abi::kv_pool_append(
        pool_.get(), s.value,
        detail::bits(detail::side_by_side<const S>(km.data(), km.rows(), km.cols(), km.outerStride(),
                                                   km.innerStride(), layout_.kv_heads, layout_.d_k)),
        km.cols(),
        detail::bits(detail::side_by_side<const S>(vm.data(), vm.rows(), vm.cols(), vm.outerStride(),
                                                   vm.innerStride(), layout_.kv_heads, layout_.d_v)),
        vm.cols());
  }
  /// append() from [1, kv_heads, T_new, d] views (batch 1) of the storage type or of float.
  template <typename S>
  void append(SequenceId s, HeadsView<const S> k, HeadsView<const S> v) {
    check_input_type<S>();
    abi::kv_pool_append(pool_.get(), s.value, detail::bits(k), -1, detail::bits(v), -1);
  }
  /// Appends T_new tokens to sequence s of a latent cache (latent()): `latent` is T_new x d_k, each
  /// row a token's key [c; k_rope], whose first d_v elements are its value. Otherwise as append(s,
  /// k, v), which a latent cache refuses (and a cache made by the constructor refuses this one).
  template <class DK>
  void append(SequenceId s, const Eigen::MatrixBase<DK>& latent) {
    using S = typename DK::Scalar;
    check_input_type<S>();
    detail::InputView<DK> kk(latent.derived());
    const auto km = kk.map();
    abi::kv_pool_append_latent(
        pool_.get(), s.value,
        detail::bits(detail::side_by_side<const S>(km.data(), km.rows(), km.cols(), km.outerStride(),
                                                   km.innerStride(), layout_.kv_heads, layout_.d_k)),
        km.cols());
  }
  /// append(s, latent) from a [1, 1, T_new, d_k] view (batch 1) of the storage type or of float.
  template <typename S>
  void append(SequenceId s, HeadsView<const S> latent) {
    check_input_type<S>();
    abi::kv_pool_append_latent(pool_.get(), s.value, detail::bits(latent), -1);
  }

  /// A new sequence that shares every page of s (no copy), with a new id.
  /// \throws std::invalid_argument when s is not in the cache; std::length_error as create().
  SequenceId fork(SequenceId s) { return {abi::kv_pool_fork(pool_.get(), s.value)}; }
  /// Keeps the first `length` tokens of s (0 <= length <= this->length(s)).
  void truncate(SequenceId s, std::int64_t length) { abi::kv_pool_truncate(pool_.get(), s.value, length); }
  /// Removes tokens [begin, end) of s (0 <= begin <= end <= this->length(s)); the tokens after
  /// them move down by end - begin, so that s keeps its first `begin` tokens and its last
  /// length - end, in order: StreamingLLM's "sink tokens and a window" (examples/streaming.cpp).
  /// When end - begin is a whole number of pages, the pages inside the range are freed and at
  /// most begin % page_size tokens are copied; otherwise the tokens after `end` are copied down
  /// and the pages past the new length freed. A page s shares with a fork is copied before it is
  /// written (copy-on-write), which may need free pages.
  /// 	hrows std::invalid_argument when s is not in the cache, the range is not within its tokens,
  /// or a copy-on-write needs more free pages than there are; nothing has changed then.
  void erase(SequenceId s, std::int64_t begin, std::int64_t end) {
    abi::kv_pool_erase(pool_.get(), s.value, begin, end);
  }
  /// Frees s and its pages that no other sequence shares. s (and every copy of it) is then stale:
  /// every use throws std::invalid_argument, even after create() reuses its slot.
  void release(SequenceId s) { abi::kv_pool_release(pool_.get(), s.value); }
  /// Tokens held by s.
  std::int64_t length(SequenceId s) const { return abi::kv_pool_length(pool_.get(), s.value); }
  /// The page indices of s, in token order.
  std::vector<std::int32_t> pages(SequenceId s) const {
    std::vector<std::int32_t> p(
        static_cast<std::size_t>(abi::kv_pool_pages(pool_.get(), s.value, nullptr, 0)));
    abi::kv_pool_pages(pool_.get(), s.value, p.data(), static_cast<std::ptrdiff_t>(p.size()));
    return p;
  }
  /// Pages not held by any sequence: what appends can still take.
  std::ptrdiff_t free_pages() const { return abi::kv_pool_free_pages(pool_.get()); }
  /// The free pages that appending n tokens to s would take: the new pages its tokens reach, plus
  /// one when its last page is partly filled and shared with another sequence (after fork()):
  /// that page is copied before it is written (copy-on-write). 0 for n = 0. The append succeeds
  /// exactly when this is at most free_pages() (and no other call changes the cache in between).
  /// \throws std::invalid_argument when s is not in the cache or n is negative.
  /// \code
  /// if (cache.pages_needed(s, 1) > cache.free_pages()) preempt_some_sequence();
  /// \endcode
  std::ptrdiff_t pages_needed(SequenceId s, std::int64_t n) const {
    return abi::kv_pool_pages_needed(pool_.get(), s.value, n);
  }

  std::ptrdiff_t kv_heads() const { return layout_.kv_heads; }    ///< KV heads
  std::ptrdiff_t d_k() const { return layout_.d_k; }              ///< key dim
  std::ptrdiff_t d_v() const { return layout_.d_v; }              ///< value dim
  std::ptrdiff_t page_size() const { return layout_.page_size; }  ///< tokens per page
  std::ptrdiff_t num_pages() const { return layout_.num_pages; }  ///< pages in the pool
  /// The key pages, [num_pages, kv_heads, page_size, d_k] (read-only: for inspection, or for a
  /// PagedKVView::hnd with block tables from pages()).
  const T* key_pages() const { return static_cast<const T*>(layout_.k); }
  /// The value pages, [num_pages, kv_heads, page_size, d_v]; of a latent cache, the key pages
  /// (each value the first d_v elements of its key: value_pages() == key_pages()).
  const T* value_pages() const { return static_cast<const T*>(layout_.v); }
  /// The scales of a quantized cache's keys (Int8, Float8E4M3, Float8E5M2: key element c of page p,
  /// head h, slot t stands for key_scales()[(p * kv_heads + h) * page_size + t] times its value),
  /// [num_pages, kv_heads, page_size]; null for the other storage types.
  const float* key_scales() const { return layout_.k_scales; }
  /// The scales of a quantized cache's values, as key_scales(); of a latent cache, key_scales().
  const float* value_scales() const { return layout_.v_scales; }
  /// Is this a latent cache (latent()): are the values the first d_v elements of the keys?
  bool values_in_keys() const { return values_in_keys_; }

  /// The pool behind this cache, for the compiled library.
  const abi::KVPool* pool() const { return pool_.get(); }

 private:
  struct Deleter {
    void operator()(abi::KVPool* p) const noexcept { abi::kv_pool_destroy(p); }
  };
  template <typename S>
  static void check_input_type() {
    if constexpr (kIsQuantized<T>) {
      static_assert(
          std::is_same_v<S, float> || std::is_same_v<S, Eigen::bfloat16> || std::is_same_v<S, Eigen::half>,
          "EigenAttention: a quantized cache's append takes keys and values of float, Eigen::bfloat16 or "
          "Eigen::half, and quantizes them");
    } else {
      static_assert(std::is_same_v<S, T> || std::is_same_v<S, float>,
                    "EigenAttention: append takes keys and values of the cache's storage type or float");
    }
  }
  PagedKVCache(abi::KVPool* pool, bool values_in_keys)
      : pool_(pool), layout_(abi::kv_pool_layout(pool)), values_in_keys_(values_in_keys) {}
  std::unique_ptr<abi::KVPool, Deleter> pool_;
  abi::PagedKV layout_;
  bool values_in_keys_ = false;
};

/// Writes decode attention for a batch of sequences of `cache` into attn (and lse): sequences[b]'s
/// queries are tokens cu_seqlens_q[b] .. cu_seqlens_q[b + 1] of q (batch + 1 offsets, from 0 to
/// q.tokens; null when batch is 1: all of q). q is [1, H, T_q, d_k], every sequence's tokens packed
/// (a matrix T_q x (H d_k) with the heads side by side is `HeadsView<const float>::side_by_side(Q,
/// d_k)`), H a multiple of kv_heads (query head h reads KV head h / (H / kv_heads)); attn is
/// [1, H, T_q, d_v] and lse [1, H, T_q, 1] (natural log of each row's softmax denominator; -inf for
/// a row that sees no key). Each output is a HeadsView or an Eigen matrix holding the heads side by
/// side (attn T_q x (H d_v), lse T_q x H): a resizable one (an Eigen::Matrix) is resized when
/// needed, once every input and every other output has been checked; a Map, Ref or block must have
/// the shape. q and attn are of the cache's compute type (float for float, bfloat16 and half caches)
/// or of its 16-bit storage type (widened to float, the result rounded back); lse is of the compute
/// type. The new tokens are the last of each sequence's cached keys (append them first): query
/// token i of a sequence with T_q queries and T_k keys is token T_k - T_q + i, and `opt.causal`, the
/// window and ALiBi use that position (bottom-right alignment, whatever opt.alignment says).
/// Options: scale, causal, window_left/right, chunk_size, softcap, kernel, threads. masks: ALiBi
/// slopes and sinks (H of each, or null), and `mask` as a tree mask for speculative decoding:
/// [B or 1, H or 1, M, M] with M >= every sequence's T_q, whose element (b, h, i, j), for i, j <
/// T_q of sequence b, says whether its query i may see its j-th new token (key T_k - T_q + j, the
/// drafts appended just before the call); every earlier cached key stays visible (subject to the
/// options), and causal, the window and chunks still apply. A bias or key lengths throw (each
/// sequence's keys are the cache's). Bitwise identical results for every opt.threads. \throws
/// std::invalid_argument naming the argument and its shape; nothing is written or resized then.
template <typename T, typename Q, class A, class L, detail::EnableIfDecodeOutputs<A, L> = 0>
void attention_decode_into(const PagedKVCache<T>& cache, const SequenceId* sequences, std::ptrdiff_t batch,
                           const HeadsView<Q>& q, const std::int64_t* cu_seqlens_q, A&& attn, L&& lse,
                           const Options& opt = {}, const Masks<ComputeScalar<T>>& masks = {}) {
  using S = std::remove_const_t<Q>;
  (void)detail::DecodeQueryCheck<T, S>{};
  (void)detail::DecodeOutputCheck<S, A>{};
  (void)detail::DecodeOutputCheck<ComputeScalar<S>, L>{};
  const abi::PagedKeys keys = detail::cache_keys(cache, sequences, batch);
  const std::int64_t whole[2] = {0, static_cast<std::int64_t>(q.tokens)};
  detail::decode_into<S>("attention_decode_into", keys, q,
                         cu_seqlens_q != nullptr ? cu_seqlens_q
                         : batch == 1            ? whole
                                                 : nullptr,
                         attn, &lse, masks, cache.d_v(), opt);
}
/// attention_decode_into() without the LSE output.
template <typename T, typename Q, class A, detail::EnableIfDecodeOutputs<A> = 0>
void attention_decode_into(const PagedKVCache<T>& cache, const SequenceId* sequences, std::ptrdiff_t batch,
                           const HeadsView<Q>& q, const std::int64_t* cu_seqlens_q, A&& attn,
                           const Options& opt = {}, const Masks<ComputeScalar<T>>& masks = {}) {
  using S = std::remove_const_t<Q>;
  (void)detail::DecodeQueryCheck<T, S>{};
  (void)detail::DecodeOutputCheck<S, A>{};
  const abi::PagedKeys keys = detail::cache_keys(cache, sequences, batch);
  const std::int64_t whole[2] = {0, static_cast<std::int64_t>(q.tokens)};
  detail::decode_into<S>("attention_decode_into", keys, q,
                         cu_seqlens_q != nullptr ? cu_seqlens_q
                         : batch == 1            ? whole
                                                 : nullptr,
                         attn, detail::no_lse<S>(), masks, cache.d_v(), opt);
}

/// Decode attention over pages the caller manages (PagedKVView): sequence b's queries are tokens
/// cu_seqlens_q[b] .. cu_seqlens_q[b + 1] of q (null when view.batch is 1: all of q). Otherwise
/// as attention_decode_into on a cache.
template <typename T, typename Q, class A, class L, detail::EnableIfDecodeOutputs<A, L> = 0>
void attention_decode_into(const PagedKVView<T>& kv, const HeadsView<Q>& q, const std::int64_t* cu_seqlens_q,
                           A&& attn, L&& lse, const Options& opt = {},
                           const Masks<ComputeScalar<T>>& masks = {}) {
  using S = std::remove_const_t<Q>;
  (void)detail::DecodeQueryCheck<T, S>{};
  (void)detail::DecodeOutputCheck<S, A>{};
  (void)detail::DecodeOutputCheck<ComputeScalar<S>, L>{};
  const std::int64_t whole[2] = {0, static_cast<std::int64_t>(q.tokens)};
  const abi::PagedKV raw = kv.raw();
  const abi::PagedKeys keys{nullptr, nullptr, 0, &raw};
  detail::decode_into<S>("attention_decode_into", keys, q,
                         cu_seqlens_q != nullptr ? cu_seqlens_q
                         : kv.batch == 1         ? whole
                                                 : nullptr,
                         attn, &lse, masks, kv.d_v, opt);
}
/// attention_decode_into() over a PagedKVView, without the LSE output.
template <typename T, typename Q, class A, detail::EnableIfDecodeOutputs<A> = 0>
void attention_decode_into(const PagedKVView<T>& kv, const HeadsView<Q>& q, const std::int64_t* cu_seqlens_q,
                           A&& attn, const Options& opt = {}, const Masks<ComputeScalar<T>>& masks = {}) {
  using S = std::remove_const_t<Q>;
  (void)detail::DecodeQueryCheck<T, S>{};
  (void)detail::DecodeOutputCheck<S, A>{};
  const std::int64_t whole[2] = {0, static_cast<std::int64_t>(q.tokens)};
  const abi::PagedKV raw = kv.raw();
  const abi::PagedKeys keys{nullptr, nullptr, 0, &raw};
  detail::decode_into<S>("attention_decode_into", keys, q,
                         cu_seqlens_q != nullptr ? cu_seqlens_q
                         : kv.batch == 1         ? whole
                                                 : nullptr,
                         attn, detail::no_lse<S>(), masks, kv.d_v, opt);
}

/// Decode attention of Q's rows (T_q x (H d_k), heads side by side: the newest T_q tokens of
/// sequence s, appended already) against the cached keys of s, returned as T_q x (H d_v) with the
/// heads side by side. See attention_decode_into. Q is of the cache's compute type or of its 16-bit
/// storage type (widened to float, the result rounded to that type).
template <typename T, class DQ>
RowMatrix<typename DQ::Scalar> attention_decode(const PagedKVCache<T>& cache, SequenceId s,
                                                const Eigen::MatrixBase<DQ>& Q, const Options& opt = {},
                                                const Masks<ComputeScalar<T>>& masks = {}) {
  using S = typename DQ::Scalar;
  (void)detail::DecodeQueryCheck<T, S>{};
  detail::InputView<DQ> q(Q.derived());
  const std::int64_t cu[2] = {0, static_cast<std::int64_t>(Q.rows())};
  RowMatrix<S> attn;
  const abi::PagedKeys keys = detail::cache_keys(cache, &s, 1);
  detail::decode_into<S>("attention_decode", keys, detail::queries_of(q.map(), cache.d_k()), cu, attn,
                         detail::no_lse<S>(), masks, cache.d_v(), opt);
  return attn;
}

/// Decode attention of several sequences at once (continuous batching): sequences[b]'s queries
/// are rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] of Q (heads side by side); returned as
/// T_q x (H d_v), heads side by side. See attention_decode_into.
template <typename T, class DQ>
RowMatrix<typename DQ::Scalar> attention_decode(const PagedKVCache<T>& cache,
                                                const std::vector<SequenceId>& sequences,
                                                const Eigen::MatrixBase<DQ>& Q,
                                                const std::vector<std::int64_t>& cu_seqlens_q,
                                                const Options& opt = {},
                                                const Masks<ComputeScalar<T>>& masks = {}) {
  using S = typename DQ::Scalar;
  (void)detail::DecodeQueryCheck<T, S>{};
  if (cu_seqlens_q.size() != sequences.size() + 1) {
    throw std::invalid_argument("EigenAttention::attention_decode: cu_seqlens_q has " +
                                std::to_string(cu_seqlens_q.size()) +
                                (cu_seqlens_q.size() == 1 ? " offset" : " offsets") + " but must have " +
                                std::to_string(sequences.size() + 1) + " (sequences + 1)");
  }
  detail::InputView<DQ> q(Q.derived());
  RowMatrix<S> attn;
  const abi::PagedKeys keys =
      detail::cache_keys(cache, sequences.data(), static_cast<std::ptrdiff_t>(sequences.size()));
  detail::decode_into<S>("attention_decode", keys, detail::queries_of(q.map(), cache.d_k()),
                         cu_seqlens_q.data(), attn, detail::no_lse<S>(), masks, cache.d_v(), opt);
  return attn;
}

/// Decode attention over a PagedKVView, returned as T_q x (H d_v), heads side by side (see
/// attention_decode_into). Q may be of the view's 16-bit storage type, as for a cache.
template <typename T, class DQ>
RowMatrix<typename DQ::Scalar> attention_decode(const PagedKVView<T>& kv, const Eigen::MatrixBase<DQ>& Q,
                                                const std::int64_t* cu_seqlens_q = nullptr,
                                                const Options& opt = {},
                                                const Masks<ComputeScalar<T>>& masks = {}) {
  using S = typename DQ::Scalar;
  (void)detail::DecodeQueryCheck<T, S>{};
  detail::InputView<DQ> q(Q.derived());
  RowMatrix<S> attn;
  const std::int64_t whole[2] = {0, static_cast<std::int64_t>(Q.rows())};
  const abi::PagedKV raw = kv.raw();
  const abi::PagedKeys keys{nullptr, nullptr, 0, &raw};
  detail::decode_into<S>("attention_decode", keys, detail::queries_of(q.map(), kv.d_k),
                         cu_seqlens_q != nullptr ? cu_seqlens_q
                         : kv.batch == 1         ? whole
                                                 : nullptr,
                         attn, detail::no_lse<S>(), masks, kv.d_v, opt);
  return attn;
}

/// \name The 0.2 forms of decode
/// The `_into` forms with Q as a matrix T_q x (H d_k) (heads side by side; lse, if given, T_q x H),
/// and the forms with the ALiBi slopes as a pointer after Options: forwarders to the calls above
/// (q as `HeadsView::side_by_side(Q, d_k)`, the slopes as `masks.alibi_slopes`), removed in 0.4
/// (docs/migration.md).
///@{

/// 0.2's attention_decode_into(cache, sequences, batch, Q, cu_seqlens_q, out, lse, opt).
template <typename T, class DQ, class DO, class DL, detail::EnableIfMatrix<DO, DL> = 0>
[[deprecated(
    "EigenAttention 0.3: decode's queries are a HeadsView [1, H, T_q, d_k]: pass "
    "HeadsView<const float>::side_by_side(Q, d_k)")]] void
attention_decode_into(const PagedKVCache<T>& cache, const SequenceId* sequences, std::ptrdiff_t batch,
                      const Eigen::MatrixBase<DQ>& Q, const std::int64_t* cu_seqlens_q, DO&& out, DL&& lse,
                      const Options& opt = {}, const Masks<ComputeScalar<T>>& masks = {}) {
  detail::InputView<DQ> q(Q.derived());
  attention_decode_into(cache, sequences, batch, detail::queries_of(q.map(), cache.d_k()), cu_seqlens_q,
                        std::forward<DO>(out), std::forward<DL>(lse), opt, masks);
}
/// 0.2's attention_decode_into(cache, sequences, batch, Q, cu_seqlens_q, out, opt).
template <typename T, class DQ, class DO, detail::EnableIfMatrix<DO> = 0>
[[deprecated(
    "EigenAttention 0.3: decode's queries are a HeadsView [1, H, T_q, d_k]: pass "
    "HeadsView<const float>::side_by_side(Q, d_k)")]] void
attention_decode_into(const PagedKVCache<T>& cache, const SequenceId* sequences, std::ptrdiff_t batch,
                      const Eigen::MatrixBase<DQ>& Q, const std::int64_t* cu_seqlens_q, DO&& out,
                      const Options& opt = {}, const Masks<ComputeScalar<T>>& masks = {}) {
  detail::InputView<DQ> q(Q.derived());
  attention_decode_into(cache, sequences, batch, detail::queries_of(q.map(), cache.d_k()), cu_seqlens_q,
                        std::forward<DO>(out), opt, masks);
}
/// 0.2's attention_decode_into(view, Q, cu_seqlens_q, out, lse, opt).
template <typename T, class DQ, class DO, class DL, detail::EnableIfMatrix<DO, DL> = 0>
[[deprecated(
    "EigenAttention 0.3: decode's queries are a HeadsView [1, H, T_q, d_k]: pass "
    "HeadsView<const float>::side_by_side(Q, d_k)")]] void
attention_decode_into(const PagedKVView<T>& kv, const Eigen::MatrixBase<DQ>& Q,
                      const std::int64_t* cu_seqlens_q, DO&& out, DL&& lse, const Options& opt = {},
                      const Masks<ComputeScalar<T>>& masks = {}) {
  detail::InputView<DQ> q(Q.derived());
  attention_decode_into(kv, detail::queries_of(q.map(), kv.d_k), cu_seqlens_q, std::forward<DO>(out),
                        std::forward<DL>(lse), opt, masks);
}
/// 0.2's attention_decode_into(view, Q, cu_seqlens_q, out, opt).
template <typename T, class DQ, class DO, detail::EnableIfMatrix<DO> = 0>
[[deprecated(
    "EigenAttention 0.3: decode's queries are a HeadsView [1, H, T_q, d_k]: pass "
    "HeadsView<const float>::side_by_side(Q, d_k)")]] void
attention_decode_into(const PagedKVView<T>& kv, const Eigen::MatrixBase<DQ>& Q,
                      const std::int64_t* cu_seqlens_q, DO&& out, const Options& opt = {},
                      const Masks<ComputeScalar<T>>& masks = {}) {
  detail::InputView<DQ> q(Q.derived());
  attention_decode_into(kv, detail::queries_of(q.map(), kv.d_k), cu_seqlens_q, std::forward<DO>(out), opt,
                        masks);
}

/// 0.2's attention_decode_into(cache, sequences, batch, Q, cu_seqlens_q, out, lse, opt, alibi_slopes).
template <typename T, class DQ, class DO, class DL, detail::EnableIfMatrix<DO, DL> = 0>
[[deprecated(
    "EigenAttention 0.3: pass the queries as a HeadsView and the ALiBi slopes in Masks::alibi_slopes, after "
    "Options")]] void
attention_decode_into(const PagedKVCache<T>& cache, const SequenceId* sequences, std::ptrdiff_t batch,
                      const Eigen::MatrixBase<DQ>& Q, const std::int64_t* cu_seqlens_q, DO&& out, DL&& lse,
                      const Options& opt, const ComputeScalar<T>* alibi_slopes) {
  detail::InputView<DQ> q(Q.derived());
  attention_decode_into(cache, sequences, batch, detail::queries_of(q.map(), cache.d_k()), cu_seqlens_q,
                        std::forward<DO>(out), std::forward<DL>(lse), opt, detail::alibi_masks(alibi_slopes));
}
/// 0.2's attention_decode_into(cache, sequences, batch, Q, cu_seqlens_q, out, opt, alibi_slopes).
template <typename T, class DQ, class DO, detail::EnableIfMatrix<DO> = 0>
[[deprecated(
    "EigenAttention 0.3: pass the queries as a HeadsView and the ALiBi slopes in Masks::alibi_slopes, after "
    "Options")]] void
attention_decode_into(const PagedKVCache<T>& cache, const SequenceId* sequences, std::ptrdiff_t batch,
                      const Eigen::MatrixBase<DQ>& Q, const std::int64_t* cu_seqlens_q, DO&& out,
                      const Options& opt, const ComputeScalar<T>* alibi_slopes) {
  detail::InputView<DQ> q(Q.derived());
  attention_decode_into(cache, sequences, batch, detail::queries_of(q.map(), cache.d_k()), cu_seqlens_q,
                        std::forward<DO>(out), opt, detail::alibi_masks(alibi_slopes));
}
/// 0.2's attention_decode(cache, s, Q, opt, alibi_slopes).
template <typename T, class DQ>
[[deprecated("EigenAttention 0.3: pass the ALiBi slopes in Masks::alibi_slopes, after Options")]] RowMatrix<
    typename DQ::Scalar>
attention_decode(const PagedKVCache<T>& cache, SequenceId s, const Eigen::MatrixBase<DQ>& Q,
                 const Options& opt, const ComputeScalar<T>* alibi_slopes) {
  return attention_decode(cache, s, Q, opt, detail::alibi_masks(alibi_slopes));
}
/// 0.2's attention_decode(cache, sequences, Q, cu_seqlens_q, opt, alibi_slopes).
template <typename T, class DQ>
[[deprecated("EigenAttention 0.3: pass the ALiBi slopes in Masks::alibi_slopes, after Options")]] RowMatrix<
    typename DQ::Scalar>
attention_decode(const PagedKVCache<T>& cache, const std::vector<SequenceId>& sequences,
                 const Eigen::MatrixBase<DQ>& Q, const std::vector<std::int64_t>& cu_seqlens_q,
                 const Options& opt, const ComputeScalar<T>* alibi_slopes) {
  return attention_decode(cache, sequences, Q, cu_seqlens_q, opt, detail::alibi_masks(alibi_slopes));
}
/// 0.2's attention_decode_into(view, Q, cu_seqlens_q, out, lse, opt, alibi_slopes).
template <typename T, class DQ, class DO, class DL, detail::EnableIfMatrix<DO, DL> = 0>
[[deprecated(
    "EigenAttention 0.3: pass the queries as a HeadsView and the ALiBi slopes in Masks::alibi_slopes, after "
    "Options")]] void
attention_decode_into(const PagedKVView<T>& kv, const Eigen::MatrixBase<DQ>& Q,
                      const std::int64_t* cu_seqlens_q, DO&& out, DL&& lse, const Options& opt,
                      const ComputeScalar<T>* alibi_slopes) {
  detail::InputView<DQ> q(Q.derived());
  attention_decode_into(kv, detail::queries_of(q.map(), kv.d_k), cu_seqlens_q, std::forward<DO>(out),
                        std::forward<DL>(lse), opt, detail::alibi_masks(alibi_slopes));
}
/// 0.2's attention_decode_into(view, Q, cu_seqlens_q, out, opt, alibi_slopes).
template <typename T, class DQ, class DO, detail::EnableIfMatrix<DO> = 0>
[[deprecated(
    "EigenAttention 0.3: pass the queries as a HeadsView and the ALiBi slopes in Masks::alibi_slopes, after "
    "Options")]] void
attention_decode_into(const PagedKVView<T>& kv, const Eigen::MatrixBase<DQ>& Q,
                      const std::int64_t* cu_seqlens_q, DO&& out, const Options& opt,
                      const ComputeScalar<T>* alibi_slopes) {
  detail::InputView<DQ> q(Q.derived());
  attention_decode_into(kv, detail::queries_of(q.map(), kv.d_k), cu_seqlens_q, std::forward<DO>(out), opt,
                        detail::alibi_masks(alibi_slopes));
}
/// 0.2's attention_decode(view, Q, cu_seqlens_q, opt, alibi_slopes).
template <typename T, class DQ>
[[deprecated("EigenAttention 0.3: pass the ALiBi slopes in Masks::alibi_slopes, after Options")]] RowMatrix<
    typename DQ::Scalar>
attention_decode(const PagedKVView<T>& kv, const Eigen::MatrixBase<DQ>& Q, const std::int64_t* cu_seqlens_q,
                 const Options& opt, const ComputeScalar<T>* alibi_slopes) {
  return attention_decode(kv, Q, cu_seqlens_q, opt, detail::alibi_masks(alibi_slopes));
}
///@}

}  // namespace EigenAttention
