// SPDX-License-Identifier: MIT
// Decode attention (KVCache.hpp): abi::decode, the one entry of every decode call (a cache's
// sequences or a caller's PagedKVView), which makes the call a Call on paged keys, validates and
// sizes it through the one pipeline (check/, outputs.hpp); and how the validated Problem is split
// into chunk tasks, spread over threads and merged.
//
// Split-K. Each sequence's query rows go in blocks of one GQA group (the query heads that read
// one KV head) and at most kDecodeRows rows; each block's keys are cut at the multiples of
// kDecodeChunk into chunks, one task each (kernels/decode.hpp), which write the chunk's
// attention and log-sum-exp into their own slot. Each block's chunks are then merged in key
// order. The cuts depend on the sequence alone, never on the thread count, and no two tasks add
// into one place, so the result is bitwise the same for every Options::threads.
#include <EigenAttention/KVCache.hpp>

#include <algorithm>
#include <optional>
#include <shared_mutex>
#include <type_traits>
#include <vector>

#include "check/array.hpp"
#include "execute.hpp"
#include "kernels/kernels.hpp"
#include "kernels/sink.hpp"
#include "lse_merge.hpp"
#include "outputs.hpp"
#include "paged_keys.hpp"
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
RawProblem<T> sequence_shape(const Problem<T>& p, index_t b) {
  const index_t tq = p.cu_q[b + 1] - p.cu_q[b], tk = p.paged->sequences[b].length;
  RawProblem<T> s{};
  s.q = {nullptr, tq, p.paged->kv.d_k, 0, 0};
  s.k = {nullptr, tk, p.paged->kv.d_k, 0, 0};
  s.v = {nullptr, tk, p.paged->kv.d_v, 0, 0};
  s.scale = p.scale;
  s.causal = p.causal;
  s.offset = tk - tq;
  s.window_left = p.window_left;
  s.window_right = p.window_right;
  s.chunk = p.chunk;
  s.softcap = p.softcap;
  s.has_alibi = p.paged->alibi_slopes != nullptr;
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
void execute_decode(const Problem<T>& p, int threads_asked) {
  if (p.kernel == Kernel::Reference) {
    reference_decode(p);
    return;
  }
  const DecodeKernel<T> kernel = decode_kernel<T>(kernel_set(p.kernel));
  const abi::PagedKV& kv = p.paged->kv;
  const index_t G = p.q.heads / kv.kv_heads, dk = kv.d_k, dv = kv.d_v, bytes = scalar_type_bytes(kv.storage);
  // A latent cache (PagedKVCache::latent): its values are the first d_v elements of its keys, read
  // once (the work below counts them once; the kernel takes the key rows as values).
  const bool latent = kv.v == kv.k && kv.v_page_stride == kv.k_page_stride &&
                      kv.v_token_stride == kv.k_token_stride && kv.v_head_stride == kv.k_head_stride &&
                      kv.v_scales == kv.k_scales && dv <= dk;
  const index_t row_elements = latent ? dk : dk + dv;
  // The calling thread's, kept from call to call (the pool's threads see them through these
  // references: a thread_local named in the tasks would be each worker's own).
  thread_local std::vector<Block> block_storage;
  thread_local std::vector<Task> task_storage;
  thread_local std::vector<index_t> order_storage;
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
  for (index_t b = 0; b < p.sequences; ++b) {
    const index_t tq = p.cu_q[b + 1] - p.cu_q[b];
    const RawProblem<T> shape = sequence_shape(p, b);
    for (index_t g = 0; g < kv.kv_heads; ++g) {
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
        // The R rows' arithmetic on each key, and the bytes of its key and value rows.
        if (ke > kb) {
          const double keys = static_cast<double>(ke - kb);
          work += work_of(keys * R, per_pair(Pass::Decode, dk, dv), keys * bytes * row_elements);
        }
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

  const int threads = threads_for(threads_asked, work);
  const T* const queries_data = queries.data();
  T* const partials_data = partials.data();
  // The tasks run chunk by chunk, every KV head of a chunk in turn (a block's tasks stay together
  // in `tasks`, for the merge): the pages of a chunk hold every head's rows side by side (HND) or
  // interleaved (NHD), so that consecutive tasks read neighbouring memory. Where a task runs
  // changes no bit (each writes its own slot).
  std::vector<index_t>& order = order_storage;
  order.resize(tasks.size());
  for (std::size_t t = 0; t < tasks.size(); ++t) order[t] = static_cast<index_t>(t);
  std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) {
    const Task& x = tasks[static_cast<std::size_t>(a)];
    const Task& y = tasks[static_cast<std::size_t>(b)];
    const index_t sx = blocks[static_cast<std::size_t>(x.block)].sequence,
                  sy = blocks[static_cast<std::size_t>(y.block)].sequence;
    if (sx != sy) return sx < sy;
    return x.first_key / kDecodeChunk < y.first_key / kDecodeChunk;
  });
  for_tasks(static_cast<index_t>(tasks.size()), threads, [&](index_t t) {
    const Task& task = tasks[static_cast<std::size_t>(order[static_cast<std::size_t>(t)])];
    const Block& blk = blocks[static_cast<std::size_t>(task.block)];
    const PagedSequence& seq = p.paged->sequences[blk.sequence];
    const index_t R = G * blk.rows;
    RawDecodeChunk<T> c;
    c.shape = sequence_shape(p, blk.sequence);
    p.program(c.shape, blk.sequence, blk.kv_head * G);  // the group's first query head (decode.hpp)
    c.alibi = p.paged->alibi_slopes != nullptr ? p.paged->alibi_slopes + blk.kv_head * G : nullptr;
    c.q = queries_data + blk.q_offset;
    c.group = G;
    c.first_row = blk.first_row;
    c.rows = blk.rows;
    c.storage = kv.storage;
    c.k = static_cast<const char*>(kv.k) + blk.kv_head * kv.k_head_stride * bytes;
    c.v = static_cast<const char*>(kv.v) + blk.kv_head * kv.v_head_stride * bytes;
    c.page_size = kv.page_size;
    c.k_page_stride = kv.k_page_stride;
    c.k_token_stride = kv.k_token_stride;
    c.v_page_stride = kv.v_page_stride;
    c.v_token_stride = kv.v_token_stride;
    c.pages = seq.pages;
    c.first_key = task.first_key;
    c.end_key = task.end_key;
    c.d_k = dk;
    c.d_v = dv;
    c.out = partials_data + task.slot;
    c.lse = partials_data + task.slot + R * dv;
    c.values_in_keys = latent;
    if (kv.k_scales != nullptr) {  // quantized storage: the KV head's scales
      c.k_scales = kv.k_scales + blk.kv_head * kv.scale_head_stride;
      c.v_scales = kv.v_scales + blk.kv_head * kv.scale_head_stride;
      c.scale_page_stride = kv.scale_page_stride;
      c.scale_token_stride = kv.scale_token_stride;
    }
    if (const BroadcastView<bool>& tree = p.paged->tree; !tree.empty()) {  // speculative decoding
      const index_t tq = p.cu_q[blk.sequence + 1] - p.cu_q[blk.sequence];
      c.tree_head_stride = tree.heads == 1 ? 0 : tree.head_stride;
      c.tree = tree.data + (tree.batch == 1 ? 0 : blk.sequence * tree.batch_stride) +
               blk.kv_head * G * c.tree_head_stride;
      c.tree_row_stride = tree.row_stride;
      c.tree_col_stride = tree.col_stride;
      c.tree_from = seq.length - tq;
    }
    kernel(c);
  });

  // Merge each block's chunks in key order (lse_merge.hpp): a chunk that saw nothing takes no
  // part, a NaN log-sum-exp makes the row NaN.
  for_tasks(static_cast<index_t>(blocks.size()), threads, [&](index_t k) {
    const Block& blk = blocks[static_cast<std::size_t>(k)];
    const index_t R = G * blk.rows;
    thread_local std::vector<T> weights;  // the chunks' weights, then the row's sums (merge_lse_row)
    weights.resize(static_cast<std::size_t>(blk.tasks + dv));
    const Task* chunks = tasks.data() + blk.first_task;
    for (index_t r = 0; r < R; ++r) {
      const index_t h = blk.kv_head * G + r / blk.rows;
      const index_t row = p.cu_q[blk.sequence] + blk.first_row + r % blk.rows;
      const T lse = merge_lse_row<T>(
          blk.tasks, [&](index_t t) { return partials_data[chunks[t].slot + R * dv + r]; },
          [&](index_t t, index_t c) { return partials_data[chunks[t].slot + r * dv + c]; }, dv,
          dv == 0 ? p.out.data : element(p.out, h, row, 0), p.out.dim_stride, weights.data(),
          weights.data() + blk.tasks);
      if (p.paged->sinks == nullptr) {
        if (p.want_lse) *element(p.lse, h, row, 0) = lse;
        continue;
      }
      // The sink, once per row, after its chunks (sink.hpp).
      const SinkStep<T> step = sink_step(lse, p.paged->sinks[h]);
      if (lse != -std::numeric_limits<T>::infinity())
        for (index_t c = 0; c < dv; ++c) *element(p.out, h, row, c) *= step.factor;
      if (p.want_lse) *element(p.lse, h, row, 0) = step.lse;
    }
  });

  // Query rows of sequences that have no block (none: every sequence with rows has blocks) and
  // rows whose block has no chunk were written above (zeros, -inf).
}

/// The validated decode problem of 16-bit queries, on float copies of them, the result rounded
/// back (T_q tokens: small; the pages are widened in registers by the kernels).
template <typename S>
void execute_decode_widened(const Problem<S>& p, int threads) {
  std::vector<WideArray> keep;
  Problem<float> f = widened(p, keep);
  keep.emplace_back(p.out, true);
  f.out = keep.back().view();
  f.want_out = true;
  f.lse = p.lse, f.want_lse = p.want_lse;
  f.paged = p.paged;
  execute_decode(f, threads);
  narrow_into(f.out, p.out, 0, p.out.tokens, threads);
}

namespace {

/// The keys of a decode call with its sequences (`storage` keeps them) and ALiBi slopes.
template <typename C>
PagedKeys<C> paged_keys(const char* api, const abi::PagedKeys& keys, const C* alibi_slopes, const C* sinks,
                        const BroadcastView<bool>& tree, std::vector<PagedSequence>& storage) {
  PagedKeys<C> paged;
  if (keys.view != nullptr) {
    paged.kv = *keys.view;
    paged_view_sequences(api, paged.kv, storage);
    paged.batch = paged.kv.batch;
  } else {
    paged.kv = abi::kv_pool_layout(keys.pool);
    pool_sequences(api, *keys.pool, keys.sequences, keys.batch, storage);
    paged.batch = keys.batch;
  }
  paged.sequences = storage.data();
  paged.alibi_slopes = alibi_slopes;
  paged.sinks = sinks;
  paged.tree = tree;
  return paged;
}

/// A decode output as the validator sees it at `stage`: absent when it will be resized then; a
/// matrix as the view [1, H, T_q, dim] of its heads side by side.
template <typename S>
std::optional<HeadsView<S>> decode_view(const abi::DecodeOutput<S>* out, const Slot<S>& slot, Stage stage,
                                        index_t heads, index_t dim) {
  if (out == nullptr) return std::nullopt;
  if (out->matrix == nullptr) return out->view;
  if (stage == Stage::BeforeSizing && slot.will_resize()) return std::nullopt;
  const MatrixView<S>& m = out->matrix->view;
  return detail::side_by_side<S>(m.data, m.rows, m.cols, m.row_stride, m.col_stride, heads, dim);
}

template <typename S, typename L>
void decode_call(const char* api, const abi::PagedKeys& keys, HeadsView<const S> q, const std::int64_t* cu,
                 abi::DecodeOutput<S>& attn, abi::DecodeOutput<L>* lse, const Options& opt,
                 const Masks<L>& masks) {
  if (!masks.bias.empty() || masks.key_lengths != nullptr) {
    fail(api,
         "decode takes ALiBi slopes, sinks and a tree mask from masks (masks.bias and masks.key_lengths must "
         "be "
         "empty: each sequence's keys are the cache's)");
  }
  thread_local std::vector<PagedSequence> sequences;
  std::shared_lock<std::shared_mutex> lock;  // a cache's pool: held shared while the call reads it
  if (keys.pool != nullptr) lock = pool_lock(*keys.pool);
  const PagedKeys<L> paged = paged_keys(api, keys, masks.alibi_slopes, masks.sinks, masks.mask, sequences);
  const index_t H = q.heads, T = q.tokens, dv = paged.kv.d_v;
  const Slot<S> attn_slot{attn.matrix, "attn", "T_q x (H d_v)", T, H * dv};
  const Slot<L> lse_slot{lse != nullptr ? lse->matrix : nullptr, "lse", "T_q x H", T, H};
  const auto call = [&](Stage stage) {
    Call<S> c;
    c.api = api;
    c.in.q = q;
    c.in.k = {nullptr, 1, paged.kv.kv_heads, 0, paged.kv.d_k, 0, 0, 0, 1};  // sizes only
    c.in.v = HeadsView<const S>{nullptr, 1, paged.kv.kv_heads, 0, dv, 0, 0, 0, 1};
    c.out.attn = decode_view(&attn, attn_slot, stage, H, dv);
    c.out.lse = decode_view(lse, lse_slot, stage, H, 1);
    c.packed = PackedSequences{cu, nullptr, paged.batch};
    c.masks.score_mod = masks.score_mod;  // (the compute type on both sides)
    c.masks.mask_mod = masks.mask_mod;
    c.masks.block_mask = masks.block_mask;
    c.paged = paged;
    c.stage = stage;
    return c;
  };
  const Problem<S> p = with_outputs_sized<S>(opt, call, attn_slot, lse_slot);
  if constexpr (kIsLowPrecision<S>) {
    execute_decode_widened(p, opt.threads);
  } else {
    execute_decode(p, opt.threads);
  }
}

}  // namespace

template void execute_decode<float>(const Problem<float>&, int);
template void execute_decode<double>(const Problem<double>&, int);

}  // namespace internal

namespace abi {

#define EIGEN_ATTENTION_ABI_DECODE(S, L)                                                     \
  void decode(const char* api, const PagedKeys& keys, HeadsView<const S> q,                  \
              const std::int64_t* cu_seqlens_q, DecodeOutput<S>& attn, DecodeOutput<L>* lse, \
              const Options& opt, const Masks<L>& masks) {                                   \
    internal::decode_call(api, keys, q, cu_seqlens_q, attn, lse, opt, masks);                \
  }
EIGEN_ATTENTION_ABI_DECODE(float, float)
EIGEN_ATTENTION_ABI_DECODE(double, double)
EIGEN_ATTENTION_ABI_DECODE(BFloat16Bits, float)
EIGEN_ATTENTION_ABI_DECODE(HalfBits, float)
#undef EIGEN_ATTENTION_ABI_DECODE

}  // namespace abi
}  // namespace EigenAttention
