// SPDX-License-Identifier: MIT
// Ring attention (Liu et al. 2023) over MPI: every rank keeps its queries, and the K/V blocks of
// all ranks pass around the ring, the next one in flight while the current one is computed. Each
// block's partial result (ATTN and LSE over its keys, masks at the block's global positions via
// Options::diagonal_offset) merges exactly into the rank's accumulator, in step order, so the
// result does not depend on message timing. The backward pass sends the blocks around once more
// with their dK/dV accumulators, which arrive back at their owner after the last step.
//
// The backward of one block: the weights of the whole row are P = exp(z - lse) with the
// forward's LSE, but the core backward renormalises each row over the keys it is given (for
// accuracy, docs/training.md), i.e. it uses the block's own weights P_b = exp(z - lse_b). With
// w = exp(lse_b - lse) per row, P = w P_b, and passing d_out scaled by w (with the forward's out)
// gives exactly P o (dP - D) with D = dO . O of the whole row, and dV = P^T dO. lse_b is the core's
// LSE-only form (abi::attention_heads_lse_into: Q K^T and the exps, no V, no ATTN). dL/dLSE goes
// to the block scaled by w too (the row term becomes w (D - d_lse)).
//
// Attention sinks (Masks::sinks) join each row once: the blocks are computed without them and the
// sink is merged into the accumulated row at the end (sink_step), so the forward's LSE includes
// it and the backward's P above is the whole row's. dL/dsink is -sum P_sink,i (D_i - d_lse_i) over
// the rows, D_i = dO_i . O_i: each rank sums its rows, then the ranks' sums are added in rank order.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <EigenAttention/MultiHead.hpp>

#include "distributed/collective.hpp"
#include "distributed/program.hpp"
#include "kernels/sink.hpp"

namespace EigenAttention {
namespace distributed {
namespace internal {
namespace {

constexpr int kTagKV = 1, kTagGrad = 2;

/// A block of K and V as it travels: [B, H_kv, rows, d_k], then [B, H_kv, rows, d_v], contiguous.
/// Their gradients travel in the same layout.
struct KVLayout {
  const Geometry& g;
  index_t size(index_t rows) const { return g.batch * g.kv_heads * rows * (g.d_k + g.d_v); }
  template <typename T>
  HeadsView<T> k(T* data, index_t rows) const {
    return HeadsView<T>::bhtd(data, g.batch, g.kv_heads, rows, g.d_k);
  }
  template <typename T>
  HeadsView<T> v(T* data, index_t rows) const {
    return HeadsView<T>::bhtd(data + g.batch * g.kv_heads * rows * g.d_k, g.batch, g.kv_heads, rows, g.d_v);
  }
};

/// One call's worth of a block: query rows qs of this rank against key rows ks of the block, for
/// batch entries [b, b + batches) and the query heads [first_head, first_head + heads) that read
/// K/V head kv_head (one GQA group).
struct Block {
  Segment qs, ks;
  BlockMask m;
  index_t b, batches, first_head, heads, kv_head;
  /// The block's rows of a query-side view ([B, H, T_q,r, ...]) and of a key-side one.
  template <typename T>
  HeadsView<T> q_rows(const HeadsView<T>& v) const {
    return v.batch_slice(b, batches).head_slice(first_head, heads).token_slice(qs.local_first, qs.count);
  }
  template <typename T>
  HeadsView<T> k_rows(const HeadsView<T>& v) const {
    return v.batch_slice(b, batches).head_slice(kv_head, 1).token_slice(ks.local_first, m.keys);
  }
};

/// Calls fn(Block) for every block of this rank's queries and the keys of rank `src` in which
/// some pair is visible, one GQA group at a time, and progress() between calls (the messages in
/// flight move on only when MPI is called: Open MPI's shared-memory transport, for one, moves a
/// large message in the calls that test or wait for it). Counts the work in st. Sequences with
/// key lengths are blocks of their own (their alignment differs).
template <typename T, class Fn, class Progress>
void for_each_block(const Call<T>& c, const Geometry& g, int src, Stats& st, Fn&& fn, Progress&& progress) {
  const bool per_sequence = c.masks.key_lengths != nullptr;
  const index_t group = g.kv_heads == 0 ? 0 : g.heads / g.kv_heads;
  for (const Segment& qs : g.q_segments[static_cast<std::size_t>(g.rank)]) {
    for (const Segment& ks : g.k_segments[static_cast<std::size_t>(src)]) {
      for (index_t b = 0; b < (per_sequence ? g.batch : 1); ++b) {
        const index_t length = per_sequence ? c.masks.key_lengths[b] : g.k_tokens;
        const index_t count = per_sequence ? 1 : g.batch;
        const BlockMask m = block_mask(c.opt, g.q_tokens, length, qs, ks);
        const index_t pairs = qs.count == 0 ? 0 : visible_pairs(c.opt, qs.count, m);
        if (pairs == 0 || count == 0 || g.heads == 0) {
          ++st.blocks_skipped;  // every weight is 0: the partial result would be zeros, LSE -inf
          continue;
        }
        ++st.blocks_computed;
        st.visible_pairs += pairs * count * g.heads;
        for (index_t kv = 0; kv < g.kv_heads; ++kv) {
          fn(Block{qs, ks, m, b, count, kv * group, group, kv});
          progress();
        }
      }
    }
  }
}

template <typename T>
Options block_options(const Call<T>& c, const BlockMask& m) {
  Options opt = c.opt;
  opt.diagonal_offset = m.diagonal_offset;
  opt.chunk_origin = m.chunk_origin;
  return opt;
}

/// The masks of a block's call: the ALiBi slopes of its query heads (key lengths are applied by
/// cutting the block's keys, BlockMask::keys); BlockProgram adds the programmable ones.
template <typename T>
Masks<T> masks_of(const Call<T>& c, const Block& blk) {
  Masks<T> masks;
  if (c.masks.alibi_slopes != nullptr) masks.alibi_slopes = c.masks.alibi_slopes + blk.first_head;
  return masks;
}

/// The K/V blocks going around the ring, double-buffered: at step s this rank holds the block of
/// rank (r - s) mod P; start(s) sends it on to the right and receives the next one from the left,
/// finish() waits for both (after the step's computation).
template <typename T>
class KVRing {
 public:
  KVRing(const Call<T>& c, const Geometry& g, MPI_Comm comm, Stats& st)
      : g_(g), layout_{g}, comm_(comm), st_(st) {
    const auto size = static_cast<std::size_t>(layout_.size(g.max_k_rows()));
    blocks_[0].resize(size);
    if (g.ranks > 1) blocks_[1].resize(size);
    copy_view<T>(c.k, layout_.k(blocks_[0].data(), c.k.tokens));
    copy_view<T>(c.v, layout_.v(blocks_[0].data(), c.k.tokens));
  }
  /// The rank whose block this rank holds at step s, and that block's keys and values.
  int source(int s) const { return (g_.rank - s + g_.ranks) % g_.ranks; }
  index_t rows(int s) const { return g_.k_rows[static_cast<std::size_t>(source(s))]; }
  HeadsView<const T> k(int s) const {
    return layout_.k(static_cast<const T*>(blocks_[s & 1].data()), rows(s));
  }
  HeadsView<const T> v(int s) const {
    return layout_.v(static_cast<const T*>(blocks_[s & 1].data()), rows(s));
  }
  const KVLayout& layout() const { return layout_; }

  void start(int s) {
    if (s + 1 >= g_.ranks) return;  // the last block goes nowhere
    const int P = g_.ranks, left = (g_.rank + P - 1) % P, right = (g_.rank + 1) % P;
    const index_t send = layout_.size(rows(s)), receive = layout_.size(rows(s + 1));
    irecv(blocks_[(s + 1) & 1].data(), receive, left, kTagKV, comm_, requests_);
    isend(blocks_[s & 1].data(), send, right, kTagKV, comm_, requests_);
    st_.bytes_sent += send * static_cast<index_t>(sizeof(T));
    st_.bytes_received += receive * static_cast<index_t>(sizeof(T));
    ++st_.messages;
  }
  void finish() { st_.wait_seconds += wait_all(requests_); }
  /// Lets the messages in flight move on (for_each_block calls it between blocks).
  void progress() { test_all(requests_); }

 private:
  const Geometry& g_;
  KVLayout layout_;
  MPI_Comm comm_;
  Stats& st_;
  std::vector<T> blocks_[2];
  std::vector<MPI_Request> requests_;
};

template <typename T>
void forward(const Call<T>& c, Session& session) {
  const Geometry& g = session.g;
  Stats& st = session.st;
  const MPI_Comm own = session.comm.get();
  const int P = g.ranks;
  const index_t B = g.batch, H = g.heads, dv = g.d_v, tq = g.q_rows[static_cast<std::size_t>(g.rank)];
  KVRing<T> ring(c, g, own, st);

  // The accumulator starts as "no key seen": zeros, LSE -inf; merging a block into it copies it.
  std::vector<T> acc_out(static_cast<std::size_t>(B * H * tq * dv), T(0)),
      acc_lse(static_cast<std::size_t>(B * H * tq), -std::numeric_limits<T>::infinity()),
      part_out(acc_out.size()), part_lse(acc_lse.size());
  const auto acc = HeadsView<T>::bhtd(acc_out.data(), B, H, tq, dv);
  const auto acc_l = HeadsView<T>::bhtd(acc_lse.data(), B, H, tq, 1);

  for (int s = 0; s < P; ++s) {
    ring.start(s);  // the next block comes in while this one is computed
    const double compute_start = MPI_Wtime();
    const HeadsView<const T> K = ring.k(s), V = ring.v(s);
    for_each_block(
        c, g, ring.source(s), st,
        [&](const Block& blk) {
          const auto out = HeadsView<T>::bhtd(part_out.data(), blk.batches, blk.heads, blk.qs.count, dv);
          const auto lse = HeadsView<T>::bhtd(part_lse.data(), blk.batches, blk.heads, blk.qs.count, 1);
          const BlockProgram<T> program(c.masks, c.logit_grad, blk.b, blk.first_head);
          attention_heads_into(blk.q_rows(c.q), blk.k_rows(K), blk.k_rows(V), out, lse,
                               block_options(c, blk.m), program.masks(masks_of(c, blk)));
          const auto a = blk.q_rows(acc), al = blk.q_rows(acc_l);
          merge_attention_into(a, al, out, lse, a, al);
        },
        [&] { ring.progress(); });
    st.compute_seconds += MPI_Wtime() - compute_start;
    ring.finish();
  }
  if (c.masks.sinks != nullptr) {  // each row's sink, once, after all its keys
    for (index_t b = 0; b < B; ++b)
      for (index_t h = 0; h < H; ++h)
        for (index_t t = 0; t < tq; ++t) {
          T& lse = acc_l.data[(b * H + h) * tq + t];
          const EigenAttention::internal::SinkStep<T> step =
              EigenAttention::internal::sink_step(lse, c.masks.sinks[h]);
          if (lse != -std::numeric_limits<T>::infinity()) {
            T* row = acc.data + ((b * H + h) * tq + t) * dv;
            for (index_t col = 0; col < dv; ++col) row[col] *= step.factor;
          }
          lse = step.lse;
        }
  }
  copy_view<T>(acc, c.out);
  if (!c.lse.empty()) copy_view<T>(acc_l, c.lse);
}

/// This rank's share of dL/dsinks: -sum over its rows of P_sink,i (dO_i . O_i - d_lse_i), per
/// query head, the batch's sequences and rows in order.
template <typename T>
std::vector<T> sink_share(const Call<T>& c, index_t B, index_t H, index_t tq, index_t dv) {
  std::vector<T> share(static_cast<std::size_t>(H), T(0));
  const auto at = [](const auto& v, index_t b, index_t h, index_t t, index_t col) {
    return v.data[b * v.batch_stride + h * v.head_stride + t * v.token_stride + col * v.dim_stride];
  };
  for (index_t h = 0; h < H; ++h) {
    const T sink = c.masks.sinks[h];
    if (sink == -std::numeric_limits<T>::infinity()) continue;  // no sink
    T sum = 0;
    for (index_t b = 0; b < B; ++b)
      for (index_t t = 0; t < tq; ++t) {
        T D = 0;
        for (index_t col = 0; col < dv; ++col) D += at(c.d_out, b, h, t, col) * at(c.fwd_out, b, h, t, col);
        if (c.d_lse.data != nullptr) D -= at(c.d_lse, b, h, t, 0);
        sum -= std::exp(sink - at(c.fwd_lse, b, h, t, 0)) * D;
      }
    share[static_cast<std::size_t>(h)] = sum;
  }
  return share;
}

template <typename T>
void backward(const Call<T>& c, Session& session) {
  const Geometry& g = session.g;
  Stats& st = session.st;
  const MPI_Comm own = session.comm.get();
  const int P = g.ranks, r = g.rank, left = (r + P - 1) % P, right = (r + 1) % P;
  const index_t B = g.batch, H = g.heads, dk = g.d_k, dv = g.d_v;
  const index_t tq = g.q_rows[static_cast<std::size_t>(r)], tk = g.k_rows[static_cast<std::size_t>(r)];
  KVRing<T> ring(c, g, own, st);
  const KVLayout& kv = ring.layout();
  const auto block_size = static_cast<std::size_t>(kv.size(g.max_k_rows()));
  std::vector<T> grads[2], contribution(block_size), part(block_size), mine;
  grads[0].resize(block_size);
  if (P > 1) grads[1].resize(block_size);
  std::vector<T> dq_acc(static_cast<std::size_t>(B * H * tq * dk), T(0)), dq_part(dq_acc.size()),
      part_lse(static_cast<std::size_t>(B * H * tq)), scaled_d_out(static_cast<std::size_t>(B * H * tq * dv)),
      scaled_d_lse(c.d_lse.data != nullptr ? static_cast<std::size_t>(B * H * tq) : 0);
  const auto dq = HeadsView<T>::bhtd(dq_acc.data(), B, H, tq, dk);

  std::vector<MPI_Request> grad_requests, pending;
  for (int s = 0; s < P; ++s) {
    const int cur = s & 1;
    const index_t rows = ring.rows(s), n = kv.size(rows);
    ring.start(s);
    // The dK/dV of this block so far (of ranks src ... r - 1) come in while ours are computed.
    if (s > 0) {
      irecv(grads[cur].data(), n, left, kTagGrad, own, grad_requests);
      st.bytes_received += n * static_cast<index_t>(sizeof(T));
    }
    const double compute_start = MPI_Wtime();
    std::fill(contribution.begin(), contribution.begin() + n, T(0));
    const HeadsView<const T> K = ring.k(s), V = ring.v(s);
    const auto dK = kv.k(contribution.data(), rows), dV = kv.v(contribution.data(), rows);
    for_each_block(
        c, g, ring.source(s), st,
        [&](const Block& blk) {
          const index_t nb = blk.batches, hq = blk.heads, nq = blk.qs.count, nk = blk.m.keys;
          const auto dq_p = HeadsView<T>::bhtd(dq_part.data(), nb, hq, nq, dk);
          const auto dk_p = HeadsView<T>::bhtd(part.data(), nb, 1, nk, dk);
          const auto dv_p = HeadsView<T>::bhtd(part.data() + nb * nk * dk, nb, 1, nk, dv);
          // The block's own LSE (the LSE-only form: Q K^T and the exps only), and d_out scaled row
          // by row by w = exp(lse_block - lse): see the top of the file.
          const Options opt = block_options(c, blk.m);
          const BlockProgram<T> program(c.masks, c.logit_grad, blk.b, blk.first_head);
          const Masks<T> masks = program.masks(masks_of(c, blk));
          const auto lse_b = HeadsView<T>::bhtd(part_lse.data(), nb, hq, nq, 1);
          EigenAttention::abi::attention_heads_lse_into(blk.q_rows(c.q), blk.k_rows(K), lse_b, opt, masks);
          const auto lse_g = blk.q_rows(c.fwd_lse), d_out = blk.q_rows(c.d_out);
          const auto d_out_w = HeadsView<T>::bhtd(scaled_d_out.data(), nb, hq, nq, dv);
          const bool has_d_lse = c.d_lse.data != nullptr;
          const auto d_lse = has_d_lse ? blk.q_rows(c.d_lse) : HeadsView<const T>{};
          const auto d_lse_w =
              has_d_lse ? HeadsView<T>::bhtd(scaled_d_lse.data(), nb, hq, nq, 1) : HeadsView<T>{};
          for (index_t bb = 0; bb < nb; ++bb)
            for (index_t h = 0; h < hq; ++h)
              for (index_t t = 0; t < nq; ++t) {
                const T block =
                    lse_b.data[bb * lse_b.batch_stride + h * lse_b.head_stride + t * lse_b.token_stride];
                const T whole =
                    lse_g.data[bb * lse_g.batch_stride + h * lse_g.head_stride + t * lse_g.token_stride];
                const bool none = block == -std::numeric_limits<T>::infinity() ||
                                  whole == -std::numeric_limits<T>::infinity();
                const T w = none ? T(0) : std::exp(block - whole);
                const T* from =
                    d_out.data + bb * d_out.batch_stride + h * d_out.head_stride + t * d_out.token_stride;
                T* to = d_out_w.data + bb * d_out_w.batch_stride + h * d_out_w.head_stride +
                        t * d_out_w.token_stride;
                for (index_t col = 0; col < dv; ++col) to[col] = w * from[col * d_out.dim_stride];
                if (has_d_lse)
                  d_lse_w.data[(bb * hq + h) * nq + t] =
                      w *
                      d_lse.data[bb * d_lse.batch_stride + h * d_lse.head_stride + t * d_lse.token_stride];
              }
          BackwardTerms<T> terms;
          if (has_d_lse) terms.d_lse = d_lse_w;
          attention_heads_backward_into(blk.q_rows(c.q), blk.k_rows(K), blk.k_rows(V), blk.q_rows(c.fwd_out),
                                        lse_b, d_out_w, dq_p, dk_p, dv_p, opt, masks, program.terms(terms));
          copy_view<T>(dq_p, blk.q_rows(dq), true);
          copy_view<T>(dk_p, blk.k_rows(dK), true);
          copy_view<T>(dv_p, blk.k_rows(dV), true);
        },
        [&] {
          ring.progress();
          test_all(grad_requests);
          test_all(pending);
        });
    st.compute_seconds += MPI_Wtime() - compute_start;
    st.wait_seconds += wait_all(grad_requests);
    // In ring order: (((ranks src's + src + 1's) + ...) + ours), the same on every run.
    if (s == 0) {
      std::copy(contribution.begin(), contribution.begin() + n, grads[cur].begin());
    } else {
      for (index_t i = 0; i < n; ++i)
        grads[cur][static_cast<std::size_t>(i)] += contribution[static_cast<std::size_t>(i)];
    }
    st.wait_seconds += wait_all(pending);  // the previous step's send, before its buffer comes back
    if (P > 1) {  // on to the next rank; after the last step that is the block's owner
      isend(grads[cur].data(), n, right, kTagGrad, own, pending);
      st.bytes_sent += n * static_cast<index_t>(sizeof(T));
      ++st.messages;
    }
    ring.finish();
  }
  const T* result = grads[0].data();
  if (P > 1) {  // our own block's dK/dV, complete, from the last rank that computed with it
    mine.resize(static_cast<std::size_t>(kv.size(tk)));
    std::vector<MPI_Request> last;
    irecv(mine.data(), kv.size(tk), left, kTagGrad, own, last);
    st.bytes_received += kv.size(tk) * static_cast<index_t>(sizeof(T));
    st.wait_seconds += wait_all(last);
    st.wait_seconds += wait_all(pending);
    result = mine.data();
  }
  copy_view<T>(dq, c.dq);
  copy_view<T>(kv.k(result, tk), c.dk);
  copy_view<T>(kv.v(result, tk), c.dv);
  if (c.d_sinks != nullptr) sum_sinks_over_ranks(c, session.comm, sink_share(c, B, H, tq, dv));
}

template <typename T, typename L = ComputeScalar<T>>
void attention(MPI_Comm comm, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
               HeadsView<T> out, HeadsView<L> lse, const Options& opt, const Masks<T>& masks,
               const Config& config) {
  Call<T> c;
  c.api = "ring_attention_heads_into";
  c.q = q, c.k = k, c.v = v, c.out = out, c.lse = lse, c.opt = opt, c.masks = masks, c.config = config;
  run_call(comm, c, [](const auto& call, Session& session) { forward(call, session); });
}

template <typename T, typename L = ComputeScalar<T>>
void attention_backward(MPI_Comm comm, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                        HeadsView<const T> out, HeadsView<const L> lse, HeadsView<const T> d_out,
                        HeadsView<T> dq, HeadsView<T> dk, HeadsView<T> dv, const Options& opt,
                        const Masks<T>& masks, const Config& config, const BackwardTerms<T>& terms) {
  Call<T> c;
  c.api = "ring_attention_heads_backward_into";
  c.backward = true;
  c.q = q, c.k = k, c.v = v, c.fwd_out = out, c.fwd_lse = lse, c.d_out = d_out;
  c.dq = dq, c.dk = dk, c.dv = dv, c.opt = opt, c.masks = masks, c.config = config;
  c.d_lse = terms.d_lse, c.d_sinks = terms.d_sinks, c.logit_grad = terms.logit_grad;
  run_call(comm, c, [](const auto& call, Session& session) { backward(call, session); });
}

}  // namespace
}  // namespace internal

// The ring calls for views of T with log-sum-exps of L (DistributedAbi.hpp for the 16-bit types).
#define EIGEN_ATTENTION_DEFINE_RING(NS, T, L)                                                            \
  void NS ring_attention_heads_into(MPI_Comm comm, HeadsView<const T> q, HeadsView<const T> k,           \
                                    HeadsView<const T> v, HeadsView<T> attn, HeadsView<L> lse,           \
                                    const Options& opt, const Masks<T>& masks, const Config& config) {   \
    internal::attention(comm, q, k, v, attn, lse, opt, masks, config);                                   \
  }                                                                                                      \
  void NS ring_attention_heads_backward_into(                                                            \
      MPI_Comm comm, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,                   \
      HeadsView<const T> out, HeadsView<const L> lse, HeadsView<const T> d_out, HeadsView<T> dq,         \
      HeadsView<T> dk, HeadsView<T> dv, const Options& opt, const Masks<T>& masks, const Config& config, \
      const BackwardTerms<T>& terms) {                                                                   \
    internal::attention_backward(comm, q, k, v, out, lse, d_out, dq, dk, dv, opt, masks, config, terms); \
  }

EIGEN_ATTENTION_DEFINE_RING(, float, float)
EIGEN_ATTENTION_DEFINE_RING(, double, double)
EIGEN_ATTENTION_DEFINE_RING(abi::, BFloat16Bits, float)
EIGEN_ATTENTION_DEFINE_RING(abi::, HalfBits, float)
#undef EIGEN_ATTENTION_DEFINE_RING

}  // namespace distributed
}  // namespace EigenAttention
