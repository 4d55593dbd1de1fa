// SPDX-License-Identifier: MIT
// PagedKVCache (KVCache.hpp): the pool of pages, its sequences and the decode call on them.
//
// Pages are allocated once, [num_pages, kv_heads, page_size, d] for keys and values alike, and
// handed out from a free list. A sequence is a list of page indices and a length; fork() copies
// the list and counts one more reference to each page; append() copies the last page first
// when it is partly filled and shared (the only page a sequence ever writes into that another
// may read), so pages never move. Every member checks everything first and changes nothing
// when it throws. A shared mutex lets decodes run together and makes the members that change
// the pool wait for them.
//
// A SequenceId is a slot (the low kSlotBits bits: an index into `sequences`) and that slot's
// generation when the id was handed out (the next kGenerationBits bits; the sign bit stays 0, so
// that -1 names no sequence). release() advances the slot's generation, so an id kept after its
// release, or after the slot went to another sequence, no longer matches and throws. Free slots
// are reused oldest-released first.
#include <EigenAttention/KVCache.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "check/array.hpp"
#include "check/options.hpp"
#include "kernels/convert.hpp"
#include "kernels/quantized.hpp"
#include "outputs.hpp"
#include "paged_keys.hpp"
#include "text.hpp"

namespace EigenAttention {
namespace abi {

using internal::index_t;

struct KVPool {
  ScalarType storage;
  index_t bytes;  // per element
  index_t kv_heads, d_k, d_v, page_size, num_pages;
  // A latent cache (MLA): each value is the first d_v elements of its key, stored once in the
  // key pages (v is k, with the key strides).
  bool values_in_keys = false;
  unsigned char* k = nullptr;
  unsigned char* v = nullptr;
  // Quantized storage: a float scale per token and head, [num_pages, kv_heads, page_size], for the
  // keys and for the values (of a latent cache, the keys' only). Null otherwise.
  float* k_scales = nullptr;
  float* v_scales = nullptr;
  std::vector<std::int32_t> refs;  // sequences holding each page
  std::vector<std::int32_t> free;  // free pages; the next one handed out is at the back
  struct Sequence {
    bool live = false;
    bool wrapped = false;          // has the generation gone round (ids of any generation issued)?
    std::uint32_t generation = 0;  // of the id the slot hands out next, or holds while live
    std::vector<std::int32_t> pages;
    index_t length = 0;
  };
  std::vector<Sequence> sequences;  // by slot
  // Released slots, oldest first: the next one handed out is free_slots[free_head].
  std::vector<std::int32_t> free_slots;
  std::size_t free_head = 0;
  mutable std::shared_mutex mutex;

  ~KVPool() {
    std::free(k);
    if (v != k) std::free(v);
    std::free(k_scales);
    if (v_scales != k_scales) std::free(v_scales);
  }
  // Pages are [num_pages, kv_heads, page_size, d] ("HND"): the keys of one head in one page are
  // contiguous, so that a decode, which reads one head at a time, streams through memory.
  PagedKV layout() const {
    PagedKV l;
    l.k = k;
    l.v = v;
    l.storage = storage;
    l.num_pages = num_pages;
    l.page_size = page_size;
    l.kv_heads = kv_heads;
    l.d_k = d_k;
    l.d_v = d_v;
    const PageStrides ks = hnd_strides(kv_heads, page_size, d_k),
                      vs = values_in_keys ? ks : hnd_strides(kv_heads, page_size, d_v);
    l.k_page_stride = ks.page, l.k_token_stride = ks.token, l.k_head_stride = ks.head;
    l.v_page_stride = vs.page, l.v_token_stride = vs.token, l.v_head_stride = vs.head;
    l.k_scales = k_scales;
    l.v_scales = v_scales;
    if (k_scales != nullptr) {
      const PageStrides ss = hnd_strides(kv_heads, page_size, 1);
      l.scale_page_stride = ss.page, l.scale_token_stride = ss.token, l.scale_head_stride = ss.head;
    }
    return l;
  }
};

namespace {

[[noreturn]] void fail(const char* api, const std::string& what) {
  throw std::invalid_argument(std::string("EigenAttention::PagedKVCache::") + api + ": " + what);
}

std::string num(index_t n) { return std::to_string(n); }
using internal::counted;

constexpr int kSlotBits = 16, kGenerationBits = 15;
static_assert(kSlotBits + kGenerationBits == 31, "an id is a non-negative int32");
constexpr std::int32_t kSlots = std::int32_t(1) << kSlotBits;                // sequences at once
constexpr std::uint32_t kGenerations = std::uint32_t(1) << kGenerationBits;  // before a slot's wrap

std::int32_t slot_of(std::int32_t id) { return id & (kSlots - 1); }
std::uint32_t generation_of(std::int32_t id) { return static_cast<std::uint32_t>(id) >> kSlotBits; }
std::int32_t id_of(std::int32_t slot, std::uint32_t generation) {
  return static_cast<std::int32_t>((generation << kSlotBits) | static_cast<std::uint32_t>(slot));
}

/// Is `id` a sequence of the pool now?
bool holds(const KVPool& pool, std::int32_t id) {
  if (id < 0 || slot_of(id) >= static_cast<std::int32_t>(pool.sequences.size())) return false;
  const KVPool::Sequence& s = pool.sequences[static_cast<std::size_t>(slot_of(id))];
  return s.live && s.generation == generation_of(id);
}

/// Why `id` (not held) names no sequence: "sequence 65536 is not in the cache: ...".
std::string not_held(const KVPool& pool, std::int32_t id) {
  const std::string head = "sequence " + std::to_string(id) + " is not in the cache";
  if (id == -1) return head + " (SequenceId{} names no sequence)";
  if (id < 0 || slot_of(id) >= static_cast<std::int32_t>(pool.sequences.size())) {
    return head + " (never created)";
  }
  const std::int32_t slot = slot_of(id);
  const KVPool::Sequence& s = pool.sequences[static_cast<std::size_t>(slot)];
  if (!s.wrapped && generation_of(id) >= s.generation) return head + " (never created)";
  return head + ": it was released" +
         (s.live ? " (its slot " + std::to_string(slot) + " now holds sequence " +
                       std::to_string(id_of(slot, s.generation)) + ")"
                 : std::string());
}

std::int32_t slot_checked(const char* api, const KVPool& pool, std::int32_t id) {
  if (!holds(pool, id)) fail(api, not_held(pool, id));
  return slot_of(id);
}

KVPool::Sequence& live(const char* api, KVPool& pool, std::int32_t id) {
  return pool.sequences[static_cast<std::size_t>(slot_checked(api, pool, id))];
}
const KVPool::Sequence& live(const char* api, const KVPool& pool, std::int32_t id) {
  return pool.sequences[static_cast<std::size_t>(slot_checked(api, pool, id))];
}

/// Rounds a float to the storage type, to nearest (ties to even; convert.hpp): the bits of one
/// element.
void store(ScalarType s, float x, unsigned char* dst) {
  switch (s) {
    case ScalarType::Float32:
      std::memcpy(dst, &x, 4);
      return;
    case ScalarType::Float64: {
      const double d = x;
      std::memcpy(dst, &d, 8);
      return;
    }
    case ScalarType::BFloat16: {
      const BFloat16Bits b = internal::from_compute<BFloat16Bits>(x);
      std::memcpy(dst, &b.bits, 2);
      return;
    }
    case ScalarType::Float16: {
      const HalfBits h = internal::from_compute<HalfBits>(x);
      std::memcpy(dst, &h.bits, 2);
      return;
    }
    case ScalarType::Int8:
    case ScalarType::Float8E4M3:
    case ScalarType::Float8E5M2:
      return;  // quantized with a scale per token and head: quantize_tokens
  }
}

/// The first element of head h of the pool's page `page`, slot `slot` (HND: hnd_strides).
unsigned char* page_row(const KVPool& pool, unsigned char* base, index_t dim, index_t page, index_t h,
                        index_t slot) {
  const PageStrides st = hnd_strides(pool.kv_heads, pool.page_size, dim);
  return base + (page * st.page + h * st.head + slot * st.token) * pool.bytes;
}

/// The scale of head h of the pool's page `page`, slot `slot` (the pages' HND layout with d = 1:
/// [num_pages, kv_heads, page_size]).
float* scale_at(const KVPool& pool, float* scales, index_t page, index_t h, index_t slot) {
  const PageStrides st = hnd_strides(pool.kv_heads, pool.page_size, 1);
  return scales + page * st.page + h * st.head + slot * st.token;
}

/// Element c of head h of token t of `src`, in float.
template <typename S>
float input_value(const HeadsView<const S>& src, index_t t, index_t h, index_t c) {
  return internal::to_compute(src.data[t * src.token_stride + h * src.head_stride + c * src.dim_stride]);
}

/// Quantizes the tokens of `src` ([1, kv_heads, T_new, dim], float, bfloat16 or half; finite) into
/// the pool's pages (`base`) and scales from token `first` of sequence s on: each token's head
/// with its own scale (quantized.hpp).
template <typename Q, typename S>
void quantize_tokens(const KVPool& pool, const KVPool::Sequence& s, unsigned char* base, float* scales,
                     index_t dim, index_t first, const HeadsView<const S>& src) {
  std::vector<float> row(static_cast<std::size_t>(dim));
  for (index_t t = 0; t < src.tokens; ++t) {
    const index_t pos = first + t;
    const index_t page = s.pages[static_cast<std::size_t>(pos / pool.page_size)], slot = pos % pool.page_size;
    for (index_t h = 0; h < src.heads; ++h) {
      for (index_t c = 0; c < dim; ++c) row[static_cast<std::size_t>(c)] = input_value(src, t, h, c);
      *scale_at(pool, scales, page, h, slot) = internal::quantize_row(
          row.data(), dim, reinterpret_cast<Q*>(page_row(pool, base, dim, page, h, slot)));
    }
  }
}

/// Copies the tokens of `src` ([1, kv_heads, T_new, dim], of the storage type or float; of a
/// quantized pool, float, bfloat16 or half, quantized) into the pool's pages (`base`, with
/// `scales` when quantized) from token `first` of sequence s on.
template <typename S>
void write_tokens(const KVPool& pool, const KVPool::Sequence& s, unsigned char* base, float* scales,
                  index_t dim, index_t first, const HeadsView<const S>& src) {
  if constexpr (!std::is_same_v<S, double>) {  // quantized: a scale for every row, d = 0 included
    switch (pool.storage) {
      case ScalarType::Int8:
        quantize_tokens<Int8>(pool, s, base, scales, dim, first, src);
        return;
      case ScalarType::Float8E4M3:
        quantize_tokens<Float8E4M3>(pool, s, base, scales, dim, first, src);
        return;
      case ScalarType::Float8E5M2:
        quantize_tokens<Float8E5M2>(pool, s, base, scales, dim, first, src);
        return;
      default:
        break;
    }
  }
  if (src.dim == 0) return;  // d = 0: nothing to store (and src.data may be null: no offsets from it)
  const bool same = kScalarType<S> == pool.storage;
  for (index_t t = 0; t < src.tokens; ++t) {
    const index_t pos = first + t;
    const index_t page = s.pages[static_cast<std::size_t>(pos / pool.page_size)], slot = pos % pool.page_size;
    for (index_t h = 0; h < src.heads; ++h) {
      unsigned char* row = page_row(pool, base, dim, page, h, slot);
      const S* from = src.data + t * src.token_stride + h * src.head_stride;
      if (same && src.dim_stride == 1) {  // a head's elements side by side: one copy
        std::memcpy(row, from, static_cast<std::size_t>(src.dim * pool.bytes));
        continue;
      }
      for (index_t c = 0; c < src.dim; ++c) {
        if (same) {
          std::memcpy(row + c * pool.bytes, from + c * src.dim_stride, static_cast<std::size_t>(pool.bytes));
        } else if constexpr (std::is_same_v<S, float>) {  // float, rounded to the storage type
          store(pool.storage, from[c * src.dim_stride], row + c * pool.bytes);
        }
      }
    }
  }
}

/// Copies the first `slots` tokens of every head of page `from` to page `to`.
void copy_page(const KVPool& pool, unsigned char* base, index_t dim, std::int32_t from, std::int32_t to,
               index_t slots) {
  const index_t head = pool.page_size * dim * pool.bytes;
  for (index_t h = 0; h < pool.kv_heads; ++h) {
    std::memcpy(base + (to * pool.kv_heads + h) * head, base + (from * pool.kv_heads + h) * head,
                static_cast<std::size_t>(slots * dim * pool.bytes));
  }
}

/// Copies the first `slots` tokens of page `from` to page `to`: keys and values (and their scales).
void copy_kv_page(const KVPool& pool, std::int32_t from, std::int32_t to, index_t slots) {
  copy_page(pool, pool.k, pool.d_k, from, to, slots);
  if (!pool.values_in_keys) copy_page(pool, pool.v, pool.d_v, from, to, slots);
  const auto copy_scales = [&](float* scales) {
    for (index_t h = 0; h < pool.kv_heads; ++h)
      std::copy_n(scale_at(pool, scales, from, h, 0), slots, scale_at(pool, scales, to, h, 0));
  };
  if (pool.k_scales == nullptr) return;
  copy_scales(pool.k_scales);
  if (!pool.values_in_keys) copy_scales(pool.v_scales);
}

/// New keys or values: [1, kv_heads, T_new, dim] of the storage type or float; `matrix_cols`, the
/// columns of the caller's matrix (heads side by side), or -1 for a view.
template <typename S>
void check_tokens(const char* api, const KVPool& pool, const char* name, const HeadsView<const S>& t,
                  index_t matrix_cols, index_t dim, const char* dim_name) {
  if (scalar_type_quantized(pool.storage)) {
    if (kScalarType<S> == ScalarType::Float64) {
      fail(api, std::string(name) + " is float64 but the cache stores " + scalar_type_name(pool.storage) +
                    " (a quantized cache's append takes float32, bfloat16 or float16 and quantizes it)");
    }
  } else if (kScalarType<S> != pool.storage && kScalarType<S> != ScalarType::Float32) {
    fail(api, std::string(name) + " is " + scalar_type_name(kScalarType<S>) + " but the cache stores " +
                  scalar_type_name(pool.storage) + " (append takes the storage type or float32)");
  }
  if (matrix_cols < 0 && t.batch != 1)
    fail(api, std::string(name) + " must be a view of one sequence (batch 1)");
  if (t.tokens < 0 || t.dim < 0 || t.heads < 0) fail(api, std::string(name) + " has a negative size");
  if (t.heads != pool.kv_heads || t.dim != dim) {
    const index_t cols = matrix_cols >= 0 ? matrix_cols : t.heads * t.dim;
    fail(api, std::string(name) + " has " + counted(t.tokens, "row") + " of " + num(cols) +
                  " but must have rows of kv_heads x " + dim_name + " = " + num(pool.kv_heads) + " x " +
                  num(dim) + " = " + num(pool.kv_heads * dim) + " (heads side by side)");
  }
  if (t.data == nullptr && t.tokens * t.heads * t.dim != 0) fail(api, std::string(name) + " has no data");
  if constexpr (!std::is_same_v<S, double>) {
    if (!scalar_type_quantized(pool.storage)) return;
    // A quantized token's scale comes from its largest magnitude: a NaN or an infinity has none.
    for (index_t n = 0; n < t.tokens; ++n) {
      for (index_t h = 0; h < t.heads; ++h) {
        for (index_t c = 0; c < t.dim; ++c) {
          const float x = input_value(t, n, h, c);
          if (!std::isfinite(x)) {
            fail(api,
                 std::string(name) + " token " + num(n) + " (of the " + num(t.tokens) +
                     " appended), KV head " + num(h) + ", element " + num(c) + " is " +
                     (std::isnan(x) ? "NaN" : "infinite") + ": a " + scalar_type_name(pool.storage) +
                     " cache stores each token's head as a scale and elements, and a NaN or infinity has no "
                     "scale; nothing was appended");
          }
        }
      }
    }
  }
}

/// The page numbers a sequence of `length` tokens holds.
index_t pages_for(const KVPool& pool, index_t length) {
  return (length + pool.page_size - 1) / pool.page_size;
}

/// Does an append to s copy its last page first (partly filled, and shared with another sequence)?
bool copy_on_write(const KVPool& pool, const KVPool::Sequence& s) {
  return s.length % pool.page_size != 0 && pool.refs[static_cast<std::size_t>(s.pages.back())] > 1;
}

/// The slot the next sequence takes: the oldest released one, or a new one.
std::int32_t next_slot(const KVPool& pool) {
  if (pool.free_head < pool.free_slots.size()) return pool.free_slots[pool.free_head];
  if (pool.sequences.size() >= static_cast<std::size_t>(kSlots)) {
    throw std::length_error("EigenAttention::PagedKVCache: " + std::to_string(kSlots) +
                            " sequences at once is the most a cache holds; release one first");
  }
  return static_cast<std::int32_t>(pool.sequences.size());
}

/// Makes `slot` (from next_slot) a live sequence with these pages and length; returns its id.
/// Allocates first.
std::int32_t adopt(KVPool& pool, std::int32_t slot, std::vector<std::int32_t> pages, index_t length) {
  if (static_cast<std::size_t>(slot) == pool.sequences.size()) {
    pool.sequences.emplace_back();
  } else {
    ++pool.free_head;
    if (pool.free_head * 2 >= pool.free_slots.size()) {  // drop the used front (no allocation)
      pool.free_slots.erase(pool.free_slots.begin(),
                            pool.free_slots.begin() + static_cast<std::ptrdiff_t>(pool.free_head));
      pool.free_head = 0;
    }
  }
  KVPool::Sequence& s = pool.sequences[static_cast<std::size_t>(slot)];
  s.live = true;
  s.pages = std::move(pages);
  s.length = length;
  return id_of(slot, s.generation);
}

void drop_pages(KVPool& pool, KVPool::Sequence& s, index_t keep) {
  while (static_cast<index_t>(s.pages.size()) > keep) {
    const std::int32_t page = s.pages.back();
    s.pages.pop_back();
    if (--pool.refs[page] == 0) pool.free.push_back(page);
  }
}

}  // namespace

namespace {

/// A pool of keys and values, or (values_in_keys) of keys whose first d_v elements are the values.
KVPool* create_pool(const char* api, ScalarType storage, index_t kv_heads, index_t d_k, index_t d_v,
                    index_t page_size, index_t capacity_tokens, bool values_in_keys) {
  if (scalar_type_bytes(storage) == 0) fail(api, "unknown storage type");
  if (kv_heads < 1 || d_k < 1 || d_v < 0) {
    fail(api, "needs kv_heads >= 1, d_k >= 1 and d_v >= 0; got kv_heads = " + num(kv_heads) +
                  ", d_k = " + num(d_k) + ", d_v = " + num(d_v));
  }
  if (values_in_keys && d_v > d_k) {
    fail(api, "the values of a latent cache are the first d_v elements of its keys: d_v = " + num(d_v) +
                  " must be at most d_k = " + num(d_k));
  }
  if (page_size < 16 || page_size > 256 || (page_size & (page_size - 1)) != 0) {
    fail(api, "page_size must be a power of two from 16 to 256, got " + num(page_size));
  }
  if (capacity_tokens < 0) fail(api, "capacity_tokens is negative: " + num(capacity_tokens));
  const index_t pages = (capacity_tokens + page_size - 1) / page_size;
  const index_t bytes = scalar_type_bytes(storage);
  index_t k_bytes = 0, v_bytes = 0;
  const auto product = [](std::initializer_list<index_t> f, index_t& r) {
    r = 1;
    for (const index_t x : f)
      if (__builtin_mul_overflow(r, x, &r)) return false;
    return true;
  };
  if (pages > std::numeric_limits<std::int32_t>::max() ||
      !product({pages, page_size, kv_heads, d_k, bytes}, k_bytes) ||
      !product({pages, page_size, kv_heads, d_v, bytes}, v_bytes) ||
      k_bytes > std::numeric_limits<index_t>::max() - 64 ||
      v_bytes > std::numeric_limits<index_t>::max() - 64) {
    fail(api, "capacity_tokens = " + num(capacity_tokens) + " with kv_heads = " + num(kv_heads) +
                  ", d_k = " + num(d_k) + ", d_v = " + num(d_v) + " is more than memory can address");
  }
  auto pool = std::make_unique<KVPool>();
  pool->storage = storage;
  pool->bytes = bytes;
  pool->kv_heads = kv_heads;
  pool->d_k = d_k;
  pool->d_v = d_v;
  pool->page_size = page_size;
  pool->num_pages = pages;
  // 64-byte aligned, not touched here: the system hands out memory as pages are first written.
  const auto allocate = [](index_t n) {
    void* p = std::aligned_alloc(64, static_cast<std::size_t>((std::max<index_t>(n, 1) + 63) / 64 * 64));
    if (p == nullptr) throw std::bad_alloc();
    internal::prefer_huge_pages(p, static_cast<std::size_t>(n));
    return static_cast<unsigned char*>(p);
  };
  pool->values_in_keys = values_in_keys;
  pool->k = allocate(k_bytes);
  pool->v = values_in_keys ? pool->k : allocate(v_bytes);
  if (scalar_type_quantized(storage)) {  // a float per token and head (fits: at most a float per element)
    const index_t scale_bytes = pages * page_size * kv_heads * static_cast<index_t>(sizeof(float));
    pool->k_scales = reinterpret_cast<float*>(allocate(scale_bytes));
    pool->v_scales = values_in_keys ? pool->k_scales : reinterpret_cast<float*>(allocate(scale_bytes));
  }
  pool->refs.assign(static_cast<std::size_t>(pages), 0);
  pool->free.resize(static_cast<std::size_t>(pages));
  for (index_t p = 0; p < pages; ++p)
    pool->free[static_cast<std::size_t>(p)] = static_cast<std::int32_t>(pages - 1 - p);
  return pool.release();
}

}  // namespace

KVPool* kv_pool_create(ScalarType storage, index_t kv_heads, index_t d_k, index_t d_v, index_t page_size,
                       index_t capacity_tokens) {
  return create_pool("PagedKVCache", storage, kv_heads, d_k, d_v, page_size, capacity_tokens, false);
}

KVPool* kv_pool_create_latent(ScalarType storage, index_t d_k, index_t d_v, index_t page_size,
                              index_t capacity_tokens) {
  return create_pool("PagedKVCache::latent", storage, 1, d_k, d_v, page_size, capacity_tokens, true);
}

void kv_pool_destroy(KVPool* pool) noexcept { delete pool; }

PagedKV kv_pool_layout(const KVPool* pool) { return pool->layout(); }

std::int32_t kv_pool_create_sequence(KVPool* pool) {
  std::unique_lock<std::shared_mutex> lock(pool->mutex);
  return adopt(*pool, next_slot(*pool), {}, 0);
}

namespace {

/// Appends keys k and values v (null for a latent cache: the values are in the keys).
template <typename S>
void append(KVPool* pool, std::int32_t sequence, const HeadsView<const S>& k, index_t k_cols,
            const HeadsView<const S>* v, index_t v_cols) {
  const char* api = "append";
  std::unique_lock<std::shared_mutex> lock(pool->mutex);
  KVPool::Sequence& s = live(api, *pool, sequence);
  if (pool->values_in_keys && v != nullptr) {
    fail(api, "this is a latent cache (PagedKVCache::latent): its values are the first d_v = " +
                  num(pool->d_v) + " elements of its keys; append(s, latent) takes the keys alone");
  }
  if (!pool->values_in_keys && v == nullptr) {
    fail(api,
         "this cache stores keys and values apart: append(s, k, v) takes both (append(s, latent) is "
         "for a latent cache, PagedKVCache::latent)");
  }
  check_tokens(api, *pool, "K", k, k_cols, pool->d_k, "d_k");
  if (v != nullptr) {
    check_tokens(api, *pool, "V", *v, v_cols, pool->d_v, "d_v");
    if (k.tokens != v->tokens) {
      fail(api, "K has " + counted(k.tokens, "token") + " but V has " + num(v->tokens));
    }
  }
  if (k.tokens == 0) return;
  const index_t length = s.length;
  if (k.tokens > std::numeric_limits<index_t>::max() - length) fail(api, "the sequence would be too long");
  const index_t have = static_cast<index_t>(s.pages.size()), need = pages_for(*pool, length + k.tokens);
  // A partly filled last page that another sequence shares is copied before it is written.
  const bool copy_last = copy_on_write(*pool, s);
  const index_t take = need - have + (copy_last ? 1 : 0);
  const index_t free = static_cast<index_t>(pool->free.size());
  if (take > free) {
    fail(api, "the cache is full: appending " + counted(k.tokens, "token") + " to sequence " +
                  std::to_string(sequence) + " (" + counted(length, "token") + ") needs " +
                  counted(take, "more page") + " of " + num(pool->page_size) + " tokens" +
                  (!copy_last ? ""
                   : take == 1
                       ? " (a copy of its last page, partly filled and shared with a fork, that is copied "
                         "before it is written: copy-on-write)"
                       : " (one of them a copy of its last page, partly filled and shared with a fork, that "
                         "is copied before it is written: copy-on-write)") +
                  ", and " + num(free) + " of the " + num(pool->num_pages) + (free == 1 ? " is" : " are") +
                  " free");
  }
  s.pages.reserve(static_cast<std::size_t>(need));  // may throw: nothing has changed yet
  if (copy_last) {
    const std::int32_t old = s.pages.back(), copy = pool->free.back();
    pool->free.pop_back();
    const index_t slots = length % pool->page_size;
    copy_kv_page(*pool, old, copy, slots);
    --pool->refs[old];
    pool->refs[copy] = 1;
    s.pages.back() = copy;
  }
  while (static_cast<index_t>(s.pages.size()) < need) {
    const std::int32_t page = pool->free.back();
    pool->free.pop_back();
    pool->refs[page] = 1;
    s.pages.push_back(page);
  }
  write_tokens(*pool, s, pool->k, pool->k_scales, pool->d_k, length, k);
  if (v != nullptr) write_tokens(*pool, s, pool->v, pool->v_scales, pool->d_v, length, *v);
  s.length = length + k.tokens;
}

}  // namespace

#define EIGEN_ATTENTION_KV_POOL_APPEND(S)                                                               \
  void kv_pool_append(KVPool* pool, std::int32_t sequence, HeadsView<const S> k, index_t k_matrix_cols, \
                      HeadsView<const S> v, index_t v_matrix_cols) {                                    \
    append(pool, sequence, k, k_matrix_cols, &v, v_matrix_cols);                                        \
  }                                                                                                     \
  void kv_pool_append_latent(KVPool* pool, std::int32_t sequence, HeadsView<const S> k,                 \
                             index_t k_matrix_cols) {                                                   \
    append<S>(pool, sequence, k, k_matrix_cols, nullptr, -1);                                           \
  }
EIGEN_ATTENTION_KV_POOL_APPEND(float)
EIGEN_ATTENTION_KV_POOL_APPEND(double)
EIGEN_ATTENTION_KV_POOL_APPEND(BFloat16Bits)
EIGEN_ATTENTION_KV_POOL_APPEND(HalfBits)
#undef EIGEN_ATTENTION_KV_POOL_APPEND

std::int32_t kv_pool_fork(KVPool* pool, std::int32_t sequence) {
  std::unique_lock<std::shared_mutex> lock(pool->mutex);
  const KVPool::Sequence& s = live("fork", *pool, sequence);
  std::vector<std::int32_t> pages = s.pages;  // may throw: nothing has changed yet
  const index_t length = s.length;
  const std::int32_t slot = next_slot(*pool);
  const std::int32_t id = adopt(*pool, slot, std::move(pages), length);  // (s may have moved)
  for (const std::int32_t page : pool->sequences[static_cast<std::size_t>(slot)].pages) ++pool->refs[page];
  return id;
}

void kv_pool_truncate(KVPool* pool, std::int32_t sequence, std::int64_t length) {
  std::unique_lock<std::shared_mutex> lock(pool->mutex);
  KVPool::Sequence& s = live("truncate", *pool, sequence);
  if (length < 0 || length > s.length) {
    fail("truncate", "length " + std::to_string(length) + " is outside [0, " + num(s.length) +
                         "], the tokens of sequence " + std::to_string(sequence));
  }
  drop_pages(*pool, s, pages_for(*pool, length));
  s.length = length;
}

namespace {

/// Token `from` of sequence s, every head's keys and values (and their scales), to token `to` (in
/// s's pages).
void move_token(const KVPool& pool, const KVPool::Sequence& s, index_t from, index_t to) {
  const auto at = [&](index_t pos) { return s.pages[static_cast<std::size_t>(pos / pool.page_size)]; };
  const auto move = [&](unsigned char* base, float* scales, index_t dim, index_t h) {
    std::memcpy(page_row(pool, base, dim, at(to), h, to % pool.page_size),
                page_row(pool, base, dim, at(from), h, from % pool.page_size),
                static_cast<std::size_t>(dim * pool.bytes));
    if (scales != nullptr) {
      *scale_at(pool, scales, at(to), h, to % pool.page_size) =
          *scale_at(pool, scales, at(from), h, from % pool.page_size);
    }
  };
  for (index_t h = 0; h < pool.kv_heads; ++h) {
    move(pool.k, pool.k_scales, pool.d_k, h);
    if (!pool.values_in_keys) move(pool.v, pool.v_scales, pool.d_v, h);
  }
}

/// Page `index` of s replaced by a free page holding a copy of its first `slots` tokens: before
/// s writes into a page another sequence shares (copy-on-write). The caller has checked that a
/// free page is there.
void own_page(KVPool& pool, KVPool::Sequence& s, index_t index, index_t slots) {
  std::int32_t& page = s.pages[static_cast<std::size_t>(index)];
  if (pool.refs[static_cast<std::size_t>(page)] <= 1) return;
  const std::int32_t copy = pool.free.back();
  pool.free.pop_back();
  copy_kv_page(pool, page, copy, slots);
  --pool.refs[static_cast<std::size_t>(page)];
  pool.refs[static_cast<std::size_t>(copy)] = 1;
  page = copy;
}

}  // namespace

void kv_pool_erase(KVPool* pool, std::int32_t sequence, std::int64_t begin, std::int64_t end) {
  const char* api = "erase";
  std::unique_lock<std::shared_mutex> lock(pool->mutex);
  KVPool::Sequence& s = live(api, *pool, sequence);
  const index_t L = s.length, P = pool->page_size;
  if (begin < 0 || end < begin || end > L) {
    fail(api, "tokens [" + std::to_string(begin) + ", " + std::to_string(end) +
                  ") are not a range of the tokens [0, " + num(L) + ") of sequence " +
                  std::to_string(sequence));
  }
  const index_t n = end - begin;
  if (n == 0) return;
  if (end == L) {  // the tail: truncate
    drop_pages(*pool, s, pages_for(*pool, begin));
    s.length = begin;
    return;
  }
  const index_t first = begin / P, off = begin % P;
  if (n % P == 0) {
    // Whole pages: the pages of [begin, end) go, and the token at `end` takes `begin`'s slot of a
    // page of its own. When begin is inside a page, that page's first `off` tokens (kept) are
    // copied into the page holding `end`, over erased ones, and then it goes too.
    const index_t last = end / P;  // the page holding token `end` (end < L: it exists)
    if (off != 0) {
      const bool shared = pool->refs[static_cast<std::size_t>(s.pages[static_cast<std::size_t>(last)])] > 1;
      if (shared && pool->free.empty()) {
        fail(api, "the cache is full: erasing from sequence " + std::to_string(sequence) +
                      " copies one page it shares with a fork (copy-on-write), and no page is free");
      }
      own_page(*pool, s, last, std::min(P, L - last * P));
      for (index_t t = 0; t < off; ++t) {  // token first * P + t to last * P + t
        const index_t from = first * P + t, to = last * P + t;
        move_token(*pool, s, from, to);
      }
    }
    for (index_t i = first; i < last; ++i) {
      const std::int32_t page = s.pages[static_cast<std::size_t>(i)];
      if (--pool->refs[static_cast<std::size_t>(page)] == 0) pool->free.push_back(page);
    }
    s.pages.erase(s.pages.begin() + first, s.pages.begin() + last);
    s.length = L - n;
    return;
  }
  // Otherwise the tokens after `end` move down by n, one by one, into the pages from `first` on
  // (each copied first when another sequence shares it); the pages past the new length go.
  const index_t length = L - n, keep = pages_for(*pool, length);
  index_t copies = 0;
  for (index_t i = first; i < keep; ++i)
    if (pool->refs[static_cast<std::size_t>(s.pages[static_cast<std::size_t>(i)])] > 1) ++copies;
  if (copies > static_cast<index_t>(pool->free.size())) {
    fail(api, "the cache is full: erasing from sequence " + std::to_string(sequence) + " copies " +
                  counted(copies, "page") + " it shares with a fork (copy-on-write), and " +
                  num(static_cast<index_t>(pool->free.size())) + " are free");
  }
  for (index_t i = first; i < keep; ++i) own_page(*pool, s, i, std::min(P, L - i * P));
  for (index_t t = end; t < L; ++t) move_token(*pool, s, t, t - n);
  drop_pages(*pool, s, keep);
  s.length = length;
}

void kv_pool_release(KVPool* pool, std::int32_t sequence) {
  std::unique_lock<std::shared_mutex> lock(pool->mutex);
  KVPool::Sequence& s = live("release", *pool, sequence);
  pool->free_slots.reserve(pool->free_slots.size() + 1);  // may throw: nothing has changed yet
  drop_pages(*pool, s, 0);
  s.live = false;
  s.length = 0;
  // The slot's next id: its generation advances, so that this id (and any copy of it) throws from
  // now on. After kGenerations releases of one slot the generation goes round to 0.
  s.generation = (s.generation + 1) % kGenerations;
  if (s.generation == 0) s.wrapped = true;
  pool->free_slots.push_back(slot_of(sequence));
}

std::int64_t kv_pool_length(const KVPool* pool, std::int32_t sequence) {
  std::shared_lock<std::shared_mutex> lock(pool->mutex);
  return live("length", *pool, sequence).length;
}

index_t kv_pool_free_pages(const KVPool* pool) {
  std::shared_lock<std::shared_mutex> lock(pool->mutex);
  return static_cast<index_t>(pool->free.size());
}

index_t kv_pool_pages_needed(const KVPool* pool, std::int32_t sequence, std::int64_t tokens) {
  const char* api = "pages_needed";
  std::shared_lock<std::shared_mutex> lock(pool->mutex);
  const KVPool::Sequence& s = live(api, *pool, sequence);
  if (tokens < 0) fail(api, "the number of tokens is negative: " + std::to_string(tokens));
  if (tokens == 0) return 0;
  if (tokens > std::numeric_limits<index_t>::max() - s.length) {
    fail(api,
         counted(tokens, "token") + " more would make sequence " + std::to_string(sequence) + " too long");
  }
  return pages_for(*pool, s.length + tokens) - static_cast<index_t>(s.pages.size()) +
         (copy_on_write(*pool, s) ? 1 : 0);
}

index_t kv_pool_pages(const KVPool* pool, std::int32_t sequence, std::int32_t* out, index_t capacity) {
  std::shared_lock<std::shared_mutex> lock(pool->mutex);
  const KVPool::Sequence& s = live("pages", *pool, sequence);
  const index_t n = static_cast<index_t>(s.pages.size());
  std::copy_n(s.pages.begin(), std::min(n, capacity), out);
  return n;
}

}  // namespace abi

namespace internal {

void pool_sequences(const char* api, const abi::KVPool& pool, const std::int32_t* ids, index_t batch,
                    std::vector<PagedSequence>& sequences) {
  check_sequence_count(api, batch);  // as a view's batch: negative or too large, before any resize
  if (batch > 0 && ids == nullptr) fail(api, "sequences is null");
  sequences.resize(static_cast<std::size_t>(batch));
  for (index_t b = 0; b < batch; ++b) {
    const std::int32_t id = ids[b];
    if (!abi::holds(pool, id)) fail(api, "sequences[" + num(b) + "]: " + abi::not_held(pool, id));
    const abi::KVPool::Sequence& s = pool.sequences[static_cast<std::size_t>(abi::slot_of(id))];
    sequences[static_cast<std::size_t>(b)] = {s.pages.data(), s.length};
  }
}

std::shared_lock<std::shared_mutex> pool_lock(const abi::KVPool& pool) {
  return std::shared_lock<std::shared_mutex>(pool.mutex);
}

}  // namespace internal
}  // namespace EigenAttention
