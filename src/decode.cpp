// SPDX-License-Identifier: MIT
// Decode attention (KVCache.hpp): the PagedKVView front door, and how a validated decode
// problem is split into chunk tasks, spread over threads and merged.
//
// Split-K. Each sequence's query rows go in blocks of one GQA group (the query heads that read
// one KV head) and at most kDecodeRows rows; each block's keys are cut at the multiples of
// kDecodeChunk into chunks, one task each (kernels/decode.hpp), which write the chunk's
// attention and log-sum-exp into their own slot. Each block's chunks are then merged in key
// order. The cuts depend on the sequence alone, never on the thread count, and no two tasks add
// into one place, so the result is bitwise the same for every Options::threads.
#include <EigenAttention/KVCache.hpp>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "decode_problem.hpp"
#include "kernels/kernels.hpp"
#include "lse_merge.hpp"
#include "widen.hpp"

namespace EigenAttention {
namespace internal {
namespace {

struct Block {
  index_t sequence, kv_head, first_row, rows;  // query rows [first_row, first_row + rows) of each head
  index_t first_task, tasks;
  index_t q_offset;  // its gathered queries in the q buffer
};

struct Task {
  index_t block, first_key, end_key;
  index_t slot;  // its out (R x d_v) then lse (R) in the partials buffer
};

/// The masks and logit options of sequence b's queries, as the forward's kernels see them:
/// T_q query rows, T_k keys, bottom-right alignment.
template <typename T>
RawProblem<T> sequence_shape(const DecodeProblem<T>& p, index_t b) {
  const index_t tq = p.cu_q[b + 1] - p.cu_q[b], tk = p.sequences[b].length;
  RawProblem<T> s{};
  s.q = {nullptr, tq, p.kv.d_k, 0, 0};
  s.k = {nullptr, tk, p.kv.d_k, 0, 0};
  s.v = {nullptr, tk, p.kv.d_v, 0, 0};
  s.scale = p.scale;
  s.causal = p.causal;
  s.offset = tk - tq;
  s.window_left = p.window_left;
  s.window_right = p.window_right;
  s.softcap = p.softcap;
  s.has_alibi = p.alibi_slopes != nullptr;
  s.alibi_slope = 0;
  s.bias = {nullptr, 0, 0, 0, 0};
  s.mask = {nullptr, 0, 0, 0, 0};
  return s;
}

/// Element (0, h, t, c) of a [1, H, T, d] view.
template <typename T>
T* element(const HeadsView<T>& v, index_t h, index_t t, index_t c) {
  return v.data + h * v.head_stride + t * v.token_stride + c * v.dim_stride;
}

}  // namespace

template <typename T>
void execute_decode(const DecodeProblem<T>& p) {
  if (p.kernel == Kernel::Reference) {
    reference_decode(p);
    return;
  }
  const DecodeKernel<T> kernel = decode_kernel<T>(p.kernel);
  const index_t G = p.group, dk = p.kv.d_k, dv = p.kv.d_v, bytes = kv_storage_bytes(p.kv.storage);
  // The calling thread's, kept from call to call (the pool's threads see them through these
  // references: a thread_local named in the tasks would be each worker's own).
  thread_local std::vector<Block> block_storage;
  thread_local std::vector<Task> task_storage;
  thread_local std::vector<T> query_storage, partial_storage;
  std::vector<Block>& blocks = block_storage;
  std::vector<Task>& tasks = task_storage;
  std::vector<T>& queries = query_storage;
  std::vector<T>& partials = partial_storage;
  blocks.clear();
  tasks.clear();
  index_t q_size = 0, slots = 0;
  double work = 0;
  const index_t rows_per_block = std::max<index_t>(1, kDecodeRows / G);
  for (index_t b = 0; b < p.batch; ++b) {
    const index_t tq = p.cu_q[b + 1] - p.cu_q[b];
    const RawProblem<T> shape = sequence_shape(p, b);
    for (index_t g = 0; g < p.kv.kv_heads; ++g) {
      for (index_t i0 = 0; i0 < tq; i0 += rows_per_block) {
        const index_t rows = std::min(rows_per_block, tq - i0), R = G * rows;
        Block blk{b, g, i0, rows, static_cast<index_t>(tasks.size()), 0, q_size};
        q_size += R * dk;
        const index_t kb = shape.first_key(i0), ke = shape.end_key(i0 + rows - 1);
        for (index_t j0 = kb / kDecodeChunk * kDecodeChunk; j0 < ke; j0 += kDecodeChunk) {
          tasks.push_back({static_cast<index_t>(blocks.size()), std::max(j0, kb),
                           std::min(j0 + kDecodeChunk, ke), slots});
          slots += R * (dv + 1);
          ++blk.tasks;
        }
        // Weighted by the bytes read per key as well as the arithmetic.
        if (ke > kb) work += static_cast<double>(ke - kb) * ((R + bytes) * (dk + dv));
        blocks.push_back(blk);
      }
    }
  }
  if (blocks.empty()) return;
  if (static_cast<index_t>(queries.size()) < q_size) queries.resize(static_cast<std::size_t>(q_size));
  if (static_cast<index_t>(partials.size()) < slots) partials.resize(static_cast<std::size_t>(slots));

  // Each block's queries, contiguous: row r = head-in-group r / rows, token first_row + r % rows.
  for (const Block& blk : blocks) {
    T* q = queries.data() + blk.q_offset;
    for (index_t h = 0; h < G; ++h) {
      for (index_t t = 0; t < blk.rows; ++t) {
        const index_t row = p.cu_q[blk.sequence] + blk.first_row + t;
        const T* src = element(p.q, blk.kv_head * G + h, row, 0);
        for (index_t c = 0; c < dk; ++c) q[(h * blk.rows + t) * dk + c] = src[c * p.q.dim_stride];
      }
    }
  }

  const int threads = useful_threads(p.threads, work);
  const T* const queries_data = queries.data();
  T* const partials_data = partials.data();
  for_tasks(static_cast<index_t>(tasks.size()), threads, [&](index_t t) {
    const Task& task = tasks[static_cast<std::size_t>(t)];
    const Block& blk = blocks[static_cast<std::size_t>(task.block)];
    const PagedSequence& seq = p.sequences[blk.sequence];
    const index_t R = G * blk.rows;
    RawDecodeChunk<T> c;
    c.shape = sequence_shape(p, blk.sequence);
    c.alibi = p.alibi_slopes != nullptr ? p.alibi_slopes + blk.kv_head * G : nullptr;
    c.q = queries_data + blk.q_offset;
    c.group = G;
    c.first_row = blk.first_row;
    c.rows = blk.rows;
    c.storage = p.kv.storage;
    c.k = static_cast<const char*>(p.kv.k) + blk.kv_head * p.kv.k_head_stride * bytes;
    c.v = static_cast<const char*>(p.kv.v) + blk.kv_head * p.kv.v_head_stride * bytes;
    c.page_size = p.kv.page_size;
    c.k_page_stride = p.kv.k_page_stride;
    c.k_token_stride = p.kv.k_token_stride;
    c.v_page_stride = p.kv.v_page_stride;
    c.v_token_stride = p.kv.v_token_stride;
    c.pages = seq.pages;
    c.first_key = task.first_key;
    c.end_key = task.end_key;
    c.d_k = dk;
    c.d_v = dv;
    c.out = partials_data + task.slot;
    c.lse = partials_data + task.slot + R * dv;
    kernel(c);
  });

  // Merge each block's chunks in key order (lse_merge.hpp): a chunk that saw nothing takes no
  // part, a NaN log-sum-exp makes the row NaN.
  for_tasks(static_cast<index_t>(blocks.size()), threads, [&](index_t k) {
    const Block& blk = blocks[static_cast<std::size_t>(k)];
    const index_t R = G * blk.rows;
    thread_local std::vector<T> weights;
    weights.resize(static_cast<std::size_t>(blk.tasks));
    const Task* chunks = tasks.data() + blk.first_task;
    for (index_t r = 0; r < R; ++r) {
      const index_t h = blk.kv_head * G + r / blk.rows;
      const index_t row = p.cu_q[blk.sequence] + blk.first_row + r % blk.rows;
      const T lse = merge_lse_row<T>(
          blk.tasks, [&](index_t t) { return partials_data[chunks[t].slot + R * dv + r]; },
          [&](index_t t, index_t c) { return partials_data[chunks[t].slot + r * dv + c]; }, dv,
          dv == 0 ? p.out.data : element(p.out, h, row, 0), p.out.dim_stride, weights.data());
      if (p.want_lse) *element(p.lse, h, row, 0) = lse;
    }
  });

  // Query rows of sequences that have no block (none: every sequence with rows has blocks) and
  // rows whose block has no chunk were written above (zeros, -inf).
}

template <typename S>
void decode(const char* api, const compiled::RawPagedKV& kv, const PagedSequence* sequences, index_t batch,
            const compiled::DecodeArgs<S>& args, const Options& opt) {
  DecodeProblem<ComputeScalar<S>> p = make_decode_problem(api, kv, sequences, batch, args, opt);
  if (args.inputs_only) return;
  if constexpr (std::is_same_v<S, ComputeScalar<S>>) {
    execute_decode(p);
  } else {
    // 16-bit queries: widened to float (T_q tokens: small), the result rounded back.
    const WideArray q(args.q), out(args.attn, true);
    p.q = q.input();
    p.out = out.view();
    execute_decode(p);
    narrow_into(out.view(), args.attn, 0, args.attn.tokens);
  }
}

template void execute_decode<float>(const DecodeProblem<float>&);
template void execute_decode<double>(const DecodeProblem<double>&);
#define EIGEN_ATTENTION_DECODE(S)                                                                  \
  template void decode<S>(const char*, const compiled::RawPagedKV&, const PagedSequence*, index_t, \
                          const compiled::DecodeArgs<S>&, const Options&);
EIGEN_ATTENTION_DECODE(float)
EIGEN_ATTENTION_DECODE(double)
EIGEN_ATTENTION_DECODE(BFloat16Bits)
EIGEN_ATTENTION_DECODE(HalfBits)
#undef EIGEN_ATTENTION_DECODE

}  // namespace internal

namespace compiled {
namespace {

template <typename T>
void decode_view(const char* api, const RawPagedKV& kv, const DecodeArgs<T>& args, const Options& opt) {
  thread_local std::vector<internal::PagedSequence> sequences;
  internal::paged_view_sequences(api, kv, sequences);
  internal::decode(api, kv, sequences.data(), kv.batch, args, opt);
}

}  // namespace

#define EIGEN_ATTENTION_DECODE_VIEW(T)                                                                \
  void decode(const char* api, const RawPagedKV& kv, const DecodeArgs<T>& args, const Options& opt) { \
    decode_view(api, kv, args, opt);                                                                  \
  }
EIGEN_ATTENTION_DECODE_VIEW(float)
EIGEN_ATTENTION_DECODE_VIEW(double)
EIGEN_ATTENTION_DECODE_VIEW(BFloat16Bits)
EIGEN_ATTENTION_DECODE_VIEW(HalfBits)
#undef EIGEN_ATTENTION_DECODE_VIEW

}  // namespace compiled
}  // namespace EigenAttention
