// SPDX-License-Identifier: MIT
// The checks of a call on paged keys (paged.hpp), in the order of make_problem: the pages, the
// queries and their offsets, the ALiBi slopes; the options.
#include "check/paged.hpp"

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>

namespace EigenAttention {
namespace internal {
namespace {

// The pages of keys or values as a [num_pages, page_size, kv_heads, d] array.
Array pages_of(const char* name, const void* data, index_t bytes, const abi::PagedKV& kv, index_t dim,
               index_t page_stride, index_t token_stride, index_t head_stride) {
  return {name,
          reinterpret_cast<std::uintptr_t>(data),
          bytes,
          {kv.num_pages, kv.page_size, kv.kv_heads, dim},
          {page_stride, token_stride, head_stride, 1},
          Print::Heads};
}

/// Is `storage` the storage type of queries of S? (float queries go with float, bfloat16 and half
/// pages; double with double; 16-bit queries with pages of their own type.)
template <typename S>
bool queries_go_with(ScalarType storage) {
  if constexpr (std::is_same_v<S, double>) return storage == ScalarType::Float64;
  if constexpr (std::is_same_v<S, BFloat16Bits>) return storage == ScalarType::BFloat16;
  if constexpr (std::is_same_v<S, HalfBits>) return storage == ScalarType::Float16;
  return storage != ScalarType::Float64;
}

/// The keys and values: storage, sizes, then the pages of each sequence in the pool.
template <typename S>
void check_pages(const char* api, const PagedKeys<ComputeScalar<S>>& paged, InputList& inputs) {
  using T = ComputeScalar<S>;
  const abi::PagedKV& kv = paged.kv;
  const PagedSequence* sequences = paged.sequences;
  const index_t batch = paged.batch;
  const index_t bytes = scalar_type_bytes(kv.storage);
  if (bytes == 0) fail(api, "unknown KV storage type " + std::to_string(static_cast<int>(kv.storage)));
  if (!queries_go_with<S>(kv.storage))
    fail(api, "queries of this scalar type do not go with keys of this storage type");
  if (kv.kv_heads < 1 || kv.page_size < 1 || kv.d_k < 1 || kv.d_v < 0 || kv.num_pages < 0) {
    fail(api,
         "the pages must have kv_heads >= 1, page_size >= 1, d_k >= 1, d_v >= 0 and num_pages >= 0; got "
         "kv_heads = " +
             num(kv.kv_heads) + ", page_size = " + num(kv.page_size) + ", d_k = " + num(kv.d_k) +
             ", d_v = " + num(kv.d_v) + ", num_pages = " + num(kv.num_pages));
  }
  const Array k_pages =
      pages_of("K pages", kv.k, bytes, kv, kv.d_k, kv.k_page_stride, kv.k_token_stride, kv.k_head_stride);
  const Array v_pages =
      pages_of("V pages", kv.v, bytes, kv, kv.d_v, kv.v_page_stride, kv.v_token_stride, kv.v_head_stride);
  check_sizes(api, k_pages);
  check_sizes(api, v_pages);
  // Quantized pages come with a float scale per token and KV head, for the keys and the values.
  const bool quantized = scalar_type_quantized(kv.storage);
  if (!quantized && (kv.k_scales != nullptr || kv.v_scales != nullptr)) {
    fail(api, std::string("the pages are ") + scalar_type_name(kv.storage) +
                  ", which has no scales: k_scales and v_scales are for int8, float8_e4m3fn and float8_e5m2 "
                  "pages");
  }
  if (quantized && kv.num_pages > 0 && (kv.k_scales == nullptr || kv.v_scales == nullptr)) {
    fail(api, std::string("the pages are ") + scalar_type_name(kv.storage) + " but " +
                  (kv.k_scales == nullptr ? "k_scales" : "v_scales") +
                  " is null: quantized pages need a float scale per token and KV head for the keys and for "
                  "the values (PagedKVView::with_scales)");
  }
  check_scratch<T>(api, kv.d_k, kv.d_v, 0);
  for (index_t b = 0; b < batch; ++b) {
    const PagedSequence& s = sequences[b];
    const index_t pages = (s.length + kv.page_size - 1) / kv.page_size;
    for (index_t n = 0; n < pages; ++n) {
      if (s.pages[n] < 0 || s.pages[n] >= kv.num_pages) {
        fail(api, "page " + num(n) + " of sequence " + num(b) + " is " + std::to_string(s.pages[n]) +
                      ", outside the pool's " + counted(kv.num_pages, "page"));
      }
    }
  }
  inputs.push_back(k_pages);
  inputs.push_back(v_pages);
  if (quantized) {  // the scales, as pages of one element per token and head
    for (const auto& [name, data] : {std::pair<const char*, const float*>{"K scales", kv.k_scales},
                                     std::pair<const char*, const float*>{"V scales", kv.v_scales}}) {
      const Array scales = pages_of(name, data, sizeof(float), kv, 1, kv.scale_page_stride,
                                    kv.scale_token_stride, kv.scale_head_stride);
      check_sizes(api, scales);
      inputs.push_back(scales);
    }
  }
}

/// The offsets of each sequence's tokens in Q (cu_seqlens_q: batch + 1 of them, from 0 to T_q).
void check_query_offsets(const char* api, const std::int64_t* cu, index_t batch, index_t tokens) {
  check_sequence_count(api, batch);
  if (batch > 0 && cu == nullptr) {
    fail(api, batch > 1
                  ? "cu_seqlens_q is null: packed sequences need batch + 1 = " + num(batch + 1) +
                        " offsets (sequence b's queries are tokens cu_seqlens_q[b] .. cu_seqlens_q[b + 1] "
                        "of Q; null is for one sequence only)"
                  : std::string("cu_seqlens_q is null"));
  }
  if (cu != nullptr) {
    check_offsets(api, "cu_seqlens_q", cu, batch, tokens);
    if (cu[batch] != tokens) {
      fail(api, "cu_seqlens_q[" + num(batch) + "] = " + std::to_string(cu[batch]) + " but Q has " +
                    counted(tokens, "token") + " (every token belongs to a sequence)");
    }
  } else if (tokens != 0) {
    fail(api, "Q has " + counted(tokens, "token") + " but there is no sequence");
  }
}

/// A tree mask (speculative decoding): [B or 1, H or 1, M, M], M at least each sequence's queries.
void check_tree(const char* api, const BroadcastView<bool>& m, index_t B, index_t H, const std::int64_t* cu,
                InputList& inputs) {
  if (m.empty()) return;
  const Array a = array_of("mask", m, Form::Heads);
  index_t most = 0;
  for (index_t b = 0; b < B; ++b) most = std::max<index_t>(most, cu[b + 1] - cu[b]);
  const bool batch_ok = m.batch == 1 || m.batch == B, heads_ok = m.heads == 1 || m.heads == H;
  if (!batch_ok || !heads_ok || m.rows != m.cols || m.rows < most) {
    fail(api, "mask (in decode, the tree mask of speculative decoding) is " + a.shape() + " but must be [" +
                  either_or_1(B) + ", " + either_or_1(H) + ", M, M] with M >= " + num(most) +
                  ", the most queries of a sequence (element (b, h, i, j): may query i of sequence b see its "
                  "j-th new token, key T_k - T_q + j)");
  }
  check_countable(api, a);
  inputs.push_back(a);
}

}  // namespace

template <typename T>
void check_paged_inputs(const Call<T>& c, InputList& inputs) {
  const char* api = c.api;
  const PagedKeys<ComputeScalar<T>>& paged = *c.paged;
  const abi::PagedKV& kv = paged.kv;
  const HeadsView<const T>& q = c.in.q;
  const Array qa = array_of("Q", q, Form::Heads);
  InputList pages;
  check_pages<T>(api, paged, pages);
  check_sizes(api, qa);
  if (q.batch != 1 || q.heads < 1 || q.dim != kv.d_k) {
    fail(api, "Q is " + qa.shape() + " but must be [1, H, T_q, d_k] with H >= 1 query heads of d_k = " +
                  num(kv.d_k) + " (the tokens of every sequence packed, cu_seqlens_q)");
  }
  if (q.heads % kv.kv_heads != 0) {
    fail(api, "query heads (" + num(q.heads) + ", Q is " + qa.shape() + ") must be a multiple of KV heads (" +
                  num(kv.kv_heads) + ")");
  }
  const std::int64_t* cu = c.packed ? c.packed->cu_q : nullptr;
  check_query_offsets(api, cu, paged.batch, q.tokens);
  inputs.push_back(qa);
  for (const Array& page : pages) inputs.push_back(page);
  if (paged.alibi_slopes != nullptr) inputs.push_back(vector_of("alibi_slopes", paged.alibi_slopes, q.heads));
  if (paged.sinks != nullptr) inputs.push_back(vector_of("sinks", paged.sinks, q.heads));
  if (cu != nullptr) check_tree(api, paged.tree, paged.batch, q.heads, cu, inputs);
  if (cu != nullptr) inputs.push_back(vector_of("cu_seqlens_q", cu, paged.batch + 1));
}

template <typename T>
ResolvedOptions<ComputeScalar<T>> check_paged_options(const Call<T>& c, const Options& opt) {
  const Array q_head = {"Q", 0, 0, {1, 1, c.in.q.tokens, c.paged->kv.d_k}, {0, 0, 0, 0}, Print::Matrix};
  ResolvedOptions<ComputeScalar<T>> o = check_options<ComputeScalar<T>>(c.api, opt, q_head);
  if (opt.diagonal_offset.has_value()) {
    fail(c.api,
         "Options::diagonal_offset is not used by decoding (the queries' positions come from the "
         "cache); leave it empty");
  }
  if (opt.chunk_origin != 0) {
    fail(c.api,
         "Options::chunk_origin must be 0 for decoding (the chunks are measured from the cache's "
         "first token); got " +
             std::to_string(opt.chunk_origin));
  }
  o.bottom_right = true;  // the new tokens are the last of each sequence's keys
  return o;
}

void paged_view_sequences(const char* api, const abi::PagedKV& kv, std::vector<PagedSequence>& sequences) {
  check_sequence_count(api, kv.batch);
  if (kv.page_size < 1) fail(api, "page_size must be >= 1, got " + num(kv.page_size));
  if (kv.block_table_stride < 0) fail(api, "block_table_stride is negative: " + num(kv.block_table_stride));
  if (kv.batch > 0 && kv.lengths == nullptr) fail(api, "lengths is null");
  sequences.resize(static_cast<std::size_t>(kv.batch));
  for (index_t b = 0; b < kv.batch; ++b) {
    const std::int64_t n = kv.lengths[b];
    index_t room = 0;
    if (n < 0) fail(api, "lengths[" + num(b) + "] = " + std::to_string(n) + " is negative");
    if (!mul(kv.block_table_stride, kv.page_size, room) || n > room) {
      fail(api, "lengths[" + num(b) + "] = " + std::to_string(n) + " exceeds the " + counted(room, "token") +
                    " that block_table_stride = " + counted(kv.block_table_stride, "page") + " of " +
                    counted(kv.page_size, "token") + " hold");
    }
    if (n > 0 && kv.block_tables == nullptr)
      fail(api, "block_tables is null but lengths[" + num(b) + "] > 0");
    sequences[b] = {n > 0 ? kv.block_tables + b * kv.block_table_stride : nullptr, static_cast<index_t>(n)};
  }
}

#define EIGEN_ATTENTION_CHECK_PAGED(T)                             \
  template void check_paged_inputs<T>(const Call<T>&, InputList&); \
  template ResolvedOptions<ComputeScalar<T>> check_paged_options<T>(const Call<T>&, const Options&);
EIGEN_ATTENTION_CHECK_PAGED(float)
EIGEN_ATTENTION_CHECK_PAGED(double)
EIGEN_ATTENTION_CHECK_PAGED(BFloat16Bits)
EIGEN_ATTENTION_CHECK_PAGED(HalfBits)
#undef EIGEN_ATTENTION_CHECK_PAGED

}  // namespace internal
}  // namespace EigenAttention
