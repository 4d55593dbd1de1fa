// SPDX-License-Identifier: MIT
// The checks of a decode call over paged keys (decode_problem.hpp), in the order of make_problem:
// the pages, the queries and their offsets, the options, the outputs, memory.
#include <type_traits>

#include "check/array.hpp"
#include "check/options.hpp"
#include "check/overlap.hpp"
#include "decode_problem.hpp"

namespace EigenAttention {
namespace internal {
namespace {

// The pages of keys or values as a [num_pages, page_size, kv_heads, d] array.
Array pages_of(const char* name, const void* data, index_t bytes, const compiled::RawPagedKV& kv, index_t dim,
               index_t page_stride, index_t token_stride, index_t head_stride) {
  return {name,
          reinterpret_cast<std::uintptr_t>(data),
          bytes,
          {kv.num_pages, kv.page_size, kv.kv_heads, dim},
          {page_stride, token_stride, head_stride, 1},
          Print::Heads};
}

/// A [1, H, T_q, d] view of the queries or an output, printed as such.
template <class View>
Array heads_of(const char* name, const View& v) {
  return array_of(name, v, Form::Heads);
}

/// Is `storage` the storage type of queries of S? (float queries go with float, bfloat16 and half
/// pages; double with double; 16-bit queries with pages of their own type.)
template <typename S>
bool queries_go_with(KVStorage storage) {
  if constexpr (std::is_same_v<S, double>) return storage == KVStorage::Float64;
  if constexpr (std::is_same_v<S, BFloat16Bits>) return storage == KVStorage::BFloat16;
  if constexpr (std::is_same_v<S, HalfBits>) return storage == KVStorage::Float16;
  return storage != KVStorage::Float64;
}

/// The keys and values: storage, sizes, then the pages of each sequence in the pool.
template <typename S>
void check_pages(const char* api, const compiled::RawPagedKV& kv, const PagedSequence* sequences,
                 index_t batch, InputList& inputs) {
  using T = ComputeScalar<S>;
  const index_t bytes = kv_storage_bytes(kv.storage);
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
}

/// The queries, [1, H, T_q, d_k], and the offsets of each sequence's tokens.
template <typename S, typename T>
void check_queries(const char* api, const compiled::RawPagedKV& kv, index_t batch,
                   const compiled::DecodeArgs<S>& a, DecodeProblem<T>& d, InputList& inputs) {
  const Array q = heads_of("Q", a.q);
  check_sizes(api, q);
  if (a.q.batch != 1 || a.q.heads < 1 || a.q.dim != kv.d_k) {
    fail(api, "Q is " + q.shape() + " but must be [1, H, T_q, d_k] with H >= 1 query heads of d_k = " +
                  num(kv.d_k) + " (the tokens of every sequence packed, cu_seqlens_q)");
  }
  d.heads = a.q.heads;
  if (d.heads % kv.kv_heads != 0) {
    fail(api, "query heads (" + num(d.heads) + ", Q is " + q.shape() + ") must be a multiple of KV heads (" +
                  num(kv.kv_heads) + ")");
  }
  d.group = d.heads / kv.kv_heads;
  const index_t tokens = a.q.tokens;
  check_sequence_count(api, batch);
  if (batch > 0 && a.cu_seqlens_q == nullptr) {
    fail(api, batch > 1
                  ? "cu_seqlens_q is null: packed sequences need batch + 1 = " + num(batch + 1) +
                        " offsets (sequence b's queries are tokens cu_seqlens_q[b] .. cu_seqlens_q[b + 1] "
                        "of Q; null is for one sequence only)"
                  : std::string("cu_seqlens_q is null"));
  }
  if (a.cu_seqlens_q != nullptr) {
    check_offsets(api, "cu_seqlens_q", a.cu_seqlens_q, batch, tokens);
    if (a.cu_seqlens_q[batch] != tokens) {
      fail(api, "cu_seqlens_q[" + num(batch) + "] = " + std::to_string(a.cu_seqlens_q[batch]) +
                    " but Q has " + counted(tokens, "token") + " (every token belongs to a sequence)");
    }
  } else if (tokens != 0) {
    fail(api, "Q has " + counted(tokens, "token") + " but there is no sequence");
  }
  inputs.push_back(q);
  if (a.alibi_slopes != nullptr) inputs.push_back(vector_of("alibi_slopes", a.alibi_slopes, d.heads));
  if (a.cu_seqlens_q != nullptr) inputs.push_back(vector_of("cu_seqlens_q", a.cu_seqlens_q, batch + 1));
  if constexpr (std::is_same_v<S, T>) d.q = a.q;
  d.cu_q = a.cu_seqlens_q;
  d.alibi_slopes = a.alibi_slopes;
}

template <typename S, typename T>
void apply_options(const char* api, const compiled::RawPagedKV& kv, const compiled::DecodeArgs<S>& a,
                   const Options& opt, DecodeProblem<T>& d) {
  const Array q_head = {"Q", 0, 0, {1, 1, a.q.tokens, kv.d_k}, {0, 0, 0, 0}, Print::Matrix};
  const ResolvedOptions<T> o = check_options<T>(api, opt, q_head);
  if (opt.diagonal_offset.has_value()) {
    fail(api,
         "Options::diagonal_offset is not used by decoding (the queries' positions come from the "
         "cache); leave it empty");
  }
  d.scale = o.scale, d.softcap = o.softcap, d.causal = o.causal;
  d.window_left = o.window_left, d.window_right = o.window_right;
  d.kernel = o.kernel;
  d.threads = opt.threads;
}

/// One output's shape, [1, H, T_q, dim].
template <class View>
Array check_output(const char* api, const char* name, const View& v, index_t heads, index_t tokens,
                   index_t dim, const char* what) {
  const Array a = heads_of(name, v);
  check_sizes(api, a);
  if (v.batch != 1 || v.heads != heads || v.tokens != tokens || v.dim != dim) {
    Array must = a;
    must.size[0] = 1, must.size[1] = heads, must.size[2] = tokens, must.size[3] = dim;
    fail(api, std::string(name) + " is " + a.shape() + " but must be " + must.shape() + " (" + what + ")");
  }
  return a;
}

/// The outputs' shapes (before sizing, of those given: the front door sizes the others after this
/// check).
template <typename S, typename T>
void check_decode_outputs(const char* api, const compiled::RawPagedKV& kv, const compiled::DecodeArgs<S>& a,
                          DecodeProblem<T>& d, OutputList& outputs) {
  const index_t tokens = a.q.tokens;
  if (!a.inputs_only || !a.attn.empty())
    outputs.push_back(check_output(api, "attn", a.attn, d.heads, tokens, kv.d_v, "[1, H, T_q, d_v]"));
  if (!a.lse.empty()) {
    outputs.push_back(check_output(api, "lse", a.lse, d.heads, tokens, 1, "[1, H, T_q, 1]"));
    d.lse = a.lse;
    d.want_lse = true;
  }
  if constexpr (std::is_same_v<S, T>) d.out = a.attn;
}

}  // namespace

void paged_view_sequences(const char* api, const compiled::RawPagedKV& kv,
                          std::vector<PagedSequence>& sequences) {
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

template <typename S>
DecodeProblem<ComputeScalar<S>> make_decode_problem(const char* api, const compiled::RawPagedKV& kv,
                                                    const PagedSequence* sequences, index_t batch,
                                                    const compiled::DecodeArgs<S>& a, const Options& opt) {
  DecodeProblem<ComputeScalar<S>> d;
  d.kv = kv;
  d.sequences = sequences;
  d.batch = batch;
  InputList pages, queries, inputs;  // inputs: Q, the pages, ALiBi slopes, offsets
  OutputList outputs;
  check_pages<S>(api, kv, sequences, batch, pages);
  check_queries(api, kv, batch, a, d, queries);
  inputs.push_back(queries.items[0]);
  for (const Array& page : pages) inputs.push_back(page);
  for (std::size_t i = 1; i < queries.size; ++i) inputs.push_back(queries.items[i]);
  apply_options(api, kv, a, opt, d);
  check_decode_outputs(api, kv, a, d, outputs);
  check_memory(api, outputs, inputs);  // the outputs given: before any is resized, too
  return d;
}

#define EIGEN_ATTENTION_MAKE_DECODE_PROBLEM(S)                                 \
  template DecodeProblem<ComputeScalar<S>> make_decode_problem<S>(             \
      const char*, const compiled::RawPagedKV&, const PagedSequence*, index_t, \
      const compiled::DecodeArgs<S>&, const Options&);
EIGEN_ATTENTION_MAKE_DECODE_PROBLEM(float)
EIGEN_ATTENTION_MAKE_DECODE_PROBLEM(double)
EIGEN_ATTENTION_MAKE_DECODE_PROBLEM(BFloat16Bits)
EIGEN_ATTENTION_MAKE_DECODE_PROBLEM(HalfBits)
#undef EIGEN_ATTENTION_MAKE_DECODE_PROBLEM

}  // namespace internal
}  // namespace EigenAttention
