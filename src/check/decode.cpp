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

template <typename T>
Array matrix_of(const char* name, const MatrixView<T>& m) {
  return {name,
          reinterpret_cast<std::uintptr_t>(m.data),
          static_cast<index_t>(sizeof(T)),
          {1, 1, m.rows, m.cols},
          {0, 0, m.row_stride, m.col_stride},
          Print::Matrix};
}

/// The keys and values: storage, sizes, then the pages of each sequence in the pool.
template <typename T>
void check_pages(const char* api, const compiled::RawPagedKV& kv, const PagedSequence* sequences,
                 index_t batch, InputList& inputs) {
  const index_t bytes = kv_storage_bytes(kv.storage);
  if (bytes == 0) fail(api, "unknown KV storage type " + std::to_string(static_cast<int>(kv.storage)));
  if ((kv.storage == KVStorage::Float64) != std::is_same_v<T, double>)
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

/// The queries, T_q x (H d_k), and the offsets of each sequence's rows.
template <typename T>
void check_queries(const char* api, const compiled::RawPagedKV& kv, index_t batch,
                   const compiled::DecodeArgs<T>& a, DecodeProblem<T>& d, InputList& inputs) {
  const Array q = matrix_of("Q", a.q);
  check_sizes(api, q);
  if (a.q.cols % kv.d_k != 0 || a.q.cols == 0) {
    fail(api, "Q is " + q.shape() + " but must be T_q x (H d_k) with H >= 1 query heads of d_k = " +
                  num(kv.d_k) + " side by side");
  }
  d.heads = a.q.cols / kv.d_k;
  if (d.heads % kv.kv_heads != 0) {
    fail(api, "query heads (" + num(d.heads) + ", Q is " + q.shape() + ") must be a multiple of KV heads (" +
                  num(kv.kv_heads) + ")");
  }
  d.group = d.heads / kv.kv_heads;
  check_sequence_count(api, batch);
  if (batch > 0 && a.cu_seqlens_q == nullptr) {
    fail(api, batch > 1
                  ? "cu_seqlens_q is null: packed sequences need batch + 1 = " + num(batch + 1) +
                        " offsets (sequence b's queries are rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] "
                        "of Q; null is for one sequence only)"
                  : std::string("cu_seqlens_q is null"));
  }
  if (a.cu_seqlens_q != nullptr) {
    check_offsets(api, "cu_seqlens_q", a.cu_seqlens_q, batch, a.q.rows);
    if (a.cu_seqlens_q[batch] != a.q.rows) {
      fail(api, "cu_seqlens_q[" + num(batch) + "] = " + std::to_string(a.cu_seqlens_q[batch]) +
                    " but Q has " + counted(a.q.rows, "row") + " (every row belongs to a sequence)");
    }
  } else if (a.q.rows != 0) {
    fail(api, "Q has " + counted(a.q.rows, "row") + " but there is no sequence");
  }
  inputs.push_back(q);
  if (a.alibi_slopes != nullptr) inputs.push_back(vector_of("alibi_slopes", a.alibi_slopes, d.heads));
  if (a.cu_seqlens_q != nullptr) inputs.push_back(vector_of("cu_seqlens_q", a.cu_seqlens_q, batch + 1));
  d.q = a.q;
  d.cu_q = a.cu_seqlens_q;
  d.alibi_slopes = a.alibi_slopes;
}

template <typename T>
void apply_options(const char* api, const compiled::RawPagedKV& kv, const compiled::DecodeArgs<T>& a,
                   const Options& opt, DecodeProblem<T>& d) {
  const Array q_head = {"Q", 0, 0, {1, 1, a.q.rows, kv.d_k}, {0, 0, 0, 0}, Print::Matrix};
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

/// The outputs' shapes (before sizing, of those given: the front door sizes the others after this
/// check).
template <typename T>
void check_decode_outputs(const char* api, const compiled::RawPagedKV& kv, const compiled::DecodeArgs<T>& a,
                          DecodeProblem<T>& d, OutputList& outputs) {
  if (!a.inputs_only || a.out.data != nullptr) {
    const Array out = matrix_of("out", a.out);
    check_sizes(api, out);
    if (a.out.rows != a.q.rows || a.out.cols != d.heads * kv.d_v) {
      fail(api, "out is " + out.shape() + " but must be " + num(a.q.rows) + "x" + num(d.heads * kv.d_v) +
                    " (T_q x H d_v)");
    }
    outputs.push_back(out);
  }
  if (a.want_lse) {
    const Array lse = matrix_of("lse", a.lse);
    check_sizes(api, lse);
    if (a.lse.rows != a.q.rows || a.lse.cols != d.heads)
      fail(api,
           "lse is " + lse.shape() + " but must be " + num(a.q.rows) + "x" + num(d.heads) + " (T_q x H)");
    outputs.push_back(lse);
    d.lse = a.lse;
    d.want_lse = true;
  }
  d.out = a.out;
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

template <typename T>
DecodeProblem<T> make_decode_problem(const char* api, const compiled::RawPagedKV& kv,
                                     const PagedSequence* sequences, index_t batch,
                                     const compiled::DecodeArgs<T>& a, const Options& opt) {
  DecodeProblem<T> d;
  d.kv = kv;
  d.sequences = sequences;
  d.batch = batch;
  InputList pages, queries, inputs;  // inputs: Q, the pages, ALiBi slopes, offsets
  OutputList outputs;
  check_pages<T>(api, kv, sequences, batch, pages);
  check_queries(api, kv, batch, a, d, queries);
  inputs.push_back(queries.items[0]);
  for (const Array& page : pages) inputs.push_back(page);
  for (std::size_t i = 1; i < queries.size; ++i) inputs.push_back(queries.items[i]);
  apply_options(api, kv, a, opt, d);
  check_decode_outputs(api, kv, a, d, outputs);
  if (!a.inputs_only) check_memory(api, outputs, inputs);
  return d;
}

template DecodeProblem<float> make_decode_problem<float>(const char*, const compiled::RawPagedKV&,
                                                         const PagedSequence*, index_t,
                                                         const compiled::DecodeArgs<float>&, const Options&);
template DecodeProblem<double> make_decode_problem<double>(const char*, const compiled::RawPagedKV&,
                                                           const PagedSequence*, index_t,
                                                           const compiled::DecodeArgs<double>&,
                                                           const Options&);

}  // namespace internal
}  // namespace EigenAttention
