// SPDX-License-Identifier: MIT
// Ulysses attention (DeepSpeed Ulysses, Jacobs et al. 2023) over MPI: one all-to-all re-shards
// Q, K and V from tokens to heads (rank d gets every token of query heads
// [d H/P, (d + 1) H/P) and of the K/V heads they read), each rank runs the single-process call
// on whole sequences, and one all-to-all brings each token's rows back to its owner. The
// backward sends out, LSE and dL/dATTN (and dL/dLSE) along with the inputs and brings dQ, dK and dV
// back; a K/V head read by several ranks gets its dK/dV summed in rank order. Each rank's heads see
// their sinks (Masks::sinks) in the local call, once per row; dL/dsinks of its heads are gathered
// from every rank.
#include <numeric>
#include <vector>

#include <EigenAttention/MultiHead.hpp>

#include "distributed/collective.hpp"
#include "distributed/program.hpp"

namespace EigenAttention {
namespace distributed {
namespace internal {
namespace {

constexpr int kTagIn = 10, kTagOut = 11;

/// The K/V heads rank d receives, in its local order. Whole GQA groups when the ranks' query heads
/// split along them (or all share one); otherwise one copy per query head, so that the local call's
/// grouping (local query head i reads local K/V head i / (H_p / count)) is right in every case.
std::vector<index_t> kv_heads_of(const Geometry& g, int d) {
  if (g.heads == 0) return {};
  const index_t hp = g.heads / g.ranks, group = g.heads / g.kv_heads, first = d * hp;
  std::vector<index_t> list;
  if (hp % group == 0) {
    for (index_t h = first / group; h < (first + hp) / group; ++h) list.push_back(h);
  } else if (group % hp == 0) {
    list.push_back(first / group);
  } else {
    for (index_t i = 0; i < hp; ++i) list.push_back((first + i) / group);
  }
  return list;
}

/// One message per peer each way; the rank's own part is copied. sends[d] goes to rank d and
/// recvs[s] comes from rank s. Returns the seconds spent waiting.
template <typename T>
double exchange(const OwnComm& comm, int tag, std::vector<std::vector<T>>& sends,
                std::vector<std::vector<T>>& recvs, Stats& st) {
  const int P = comm.size(), r = comm.rank();
  std::vector<MPI_Request> requests;
  for (int s = 0; s < P; ++s) {
    if (s == r) continue;
    irecv(recvs[static_cast<std::size_t>(s)].data(),
          static_cast<index_t>(recvs[static_cast<std::size_t>(s)].size()), s, tag, comm.get(), requests);
    st.bytes_received += static_cast<index_t>(recvs[static_cast<std::size_t>(s)].size() * sizeof(T));
  }
  for (int d = 0; d < P; ++d) {
    if (d == r) continue;
    isend(sends[static_cast<std::size_t>(d)].data(),
          static_cast<index_t>(sends[static_cast<std::size_t>(d)].size()), d, tag, comm.get(), requests);
    st.bytes_sent += static_cast<index_t>(sends[static_cast<std::size_t>(d)].size() * sizeof(T));
    ++st.messages;
  }
  recvs[static_cast<std::size_t>(r)] = sends[static_cast<std::size_t>(r)];
  return wait_all(requests);
}

/// A buffer of consecutive [B, heads, tokens, dim] arrays, filled and read part by part. A part
/// that does not fit grows the buffer, which moves it: use each part before taking the next.
template <typename T>
struct Packed {
  std::vector<T>& buffer;
  index_t next = 0;
  HeadsView<T> part(index_t batch, index_t heads, index_t tokens, index_t dim) {
    const index_t n = batch * heads * tokens * dim;
    if (static_cast<index_t>(buffer.size()) < next + n) buffer.resize(static_cast<std::size_t>(next + n));
    auto v = HeadsView<T>::bhtd(buffer.data() + next, batch, heads, tokens, dim);
    next += n;
    return v;
  }
};

/// Copies the given heads of src (all of its tokens) into dst's heads 0, 1, ...
template <typename T>
void copy_heads(HeadsView<const T> src, const std::vector<index_t>& heads, HeadsView<T> dst) {
  for (std::size_t i = 0; i < heads.size(); ++i)
    copy_view<T>(src.head_slice(heads[i], 1), dst.head_slice(static_cast<index_t>(i), 1));
}
std::vector<index_t> head_range(index_t first, index_t count) {
  std::vector<index_t> h(static_cast<std::size_t>(count));
  std::iota(h.begin(), h.end(), first);
  return h;
}

/// Rows of a shard (local numbering) to or from the whole sequence (global numbering).
template <typename T>
void shard_to_whole(HeadsView<const T> shard, const std::vector<Segment>& segments, HeadsView<T> whole) {
  for (const Segment& s : segments)
    copy_view<T>(shard.token_slice(s.local_first, s.count), whole.token_slice(s.global_first, s.count));
}
template <typename T>
void whole_to_shard(HeadsView<const T> whole, const std::vector<Segment>& segments, HeadsView<T> shard,
                    bool add) {
  for (const Segment& s : segments)
    copy_view<T>(whole.token_slice(s.global_first, s.count), shard.token_slice(s.local_first, s.count), add);
}

/// The work of this rank's heads: visible pairs of the whole sequence times its query heads.
template <typename T>
index_t work(const Call<T>& c, const Geometry& g) {
  const Segment q{0, 0, g.q_tokens}, k{0, 0, g.k_tokens};
  index_t pairs = 0;
  for (index_t b = 0; b < g.batch; ++b) {
    const index_t length = c.masks.key_lengths != nullptr ? c.masks.key_lengths[b] : g.k_tokens;
    pairs += visible_pairs(c.opt, g.q_tokens, block_mask(c.opt, g.q_tokens, length, q, k));
  }
  return pairs * (g.heads / g.ranks);
}

template <typename T>
void run(const Call<T>& c, Session& session) {
  const Geometry& g = session.g;
  Stats& st = session.st;
  const OwnComm& comm = session.comm;
  const int P = g.ranks, r = g.rank;
  const index_t B = g.batch, hp = g.heads / P, dk = g.d_k, dv = g.d_v, Tq = g.q_tokens, Tk = g.k_tokens;
  const index_t tq = g.q_rows[static_cast<std::size_t>(r)], tk = g.k_rows[static_cast<std::size_t>(r)];
  const std::vector<index_t> my_kv = kv_heads_of(g, r);
  const index_t nkv = static_cast<index_t>(my_kv.size());
  const bool has_d_lse = c.backward && g.any_d_lse;  // a rank that gives none sends zeros

  // Tokens to heads: to rank d, this rank's rows of d's query heads and of the K/V heads they read
  // (and, backward, of out, LSE and dL/dATTN).
  std::vector<std::vector<T>> sends(static_cast<std::size_t>(P)), recvs(static_cast<std::size_t>(P));
  for (int d = 0; d < P; ++d) {
    Packed<T> out{sends[static_cast<std::size_t>(d)]};
    const auto kv = kv_heads_of(g, d);
    const index_t n = static_cast<index_t>(kv.size());
    const auto heads = head_range(d * hp, hp);
    copy_heads<T>(c.q, heads, out.part(B, hp, tq, dk));
    copy_heads<T>(c.k, kv, out.part(B, n, tk, dk));
    copy_heads<T>(c.v, kv, out.part(B, n, tk, dv));
    if (c.backward) {
      copy_heads<T>(c.fwd_out, heads, out.part(B, hp, tq, dv));
      copy_heads<T>(c.fwd_lse, heads, out.part(B, hp, tq, 1));
      copy_heads<T>(c.d_out, heads, out.part(B, hp, tq, dv));
      if (has_d_lse) {
        const HeadsView<T> part = out.part(B, hp, tq, 1);
        if (c.d_lse.data != nullptr) {
          copy_heads<T>(c.d_lse, heads, part);
        } else {
          for (index_t e = 0; e < B * hp * tq; ++e) part.data[e] = T(0);
        }
      }
    }
  }
  for (int s = 0; s < P; ++s) {
    const index_t sq = g.q_rows[static_cast<std::size_t>(s)], sk = g.k_rows[static_cast<std::size_t>(s)];
    const index_t n =
        (hp * sq * (dk + (c.backward ? 2 * dv + 1 : 0) + (has_d_lse ? 1 : 0)) + nkv * sk * (dk + dv)) * B;
    recvs[static_cast<std::size_t>(s)].resize(static_cast<std::size_t>(n));
  }
  st.wait_seconds += exchange(comm, kTagIn, sends, recvs, st);

  // The whole sequence of this rank's heads (storage sized first: Packed::part never moves it).
  const index_t whole_size =
      B * (hp * Tq * (dk + dv + 1) + nkv * Tk * (dk + dv) +
           (c.backward ? hp * Tq * (dv + dk) + nkv * Tk * (dk + dv) : 0) + (has_d_lse ? hp * Tq : 0));
  std::vector<T> storage(static_cast<std::size_t>(whole_size));
  Packed<T> at{storage};
  const auto Qw = at.part(B, hp, Tq, dk), Kw = at.part(B, nkv, Tk, dk), Vw = at.part(B, nkv, Tk, dv);
  const auto Ow = at.part(B, hp, Tq, dv), Lw = at.part(B, hp, Tq, 1);
  HeadsView<T> dOw, dQw, dKw, dVw, dLw;
  if (c.backward) {
    dOw = at.part(B, hp, Tq, dv), dQw = at.part(B, hp, Tq, dk), dKw = at.part(B, nkv, Tk, dk);
    dVw = at.part(B, nkv, Tk, dv);
  }
  if (has_d_lse) dLw = at.part(B, hp, Tq, 1);
  for (int s = 0; s < P; ++s) {
    const index_t sq = g.q_rows[static_cast<std::size_t>(s)], sk = g.k_rows[static_cast<std::size_t>(s)];
    const auto& qseg = g.q_segments[static_cast<std::size_t>(s)];
    const auto& kseg = g.k_segments[static_cast<std::size_t>(s)];
    Packed<T> in{recvs[static_cast<std::size_t>(s)]};
    shard_to_whole<T>(in.part(B, hp, sq, dk), qseg, Qw);
    shard_to_whole<T>(in.part(B, nkv, sk, dk), kseg, Kw);
    shard_to_whole<T>(in.part(B, nkv, sk, dv), kseg, Vw);
    if (c.backward) {
      shard_to_whole<T>(in.part(B, hp, sq, dv), qseg, Ow);
      shard_to_whole<T>(in.part(B, hp, sq, 1), qseg, Lw);
      shard_to_whole<T>(in.part(B, hp, sq, dv), qseg, dOw);
      if (has_d_lse) shard_to_whole<T>(in.part(B, hp, sq, 1), qseg, dLw);
    }
  }

  // The single-process call on this rank's heads.
  Masks<T> masks;
  masks.key_lengths = c.masks.key_lengths;
  masks.alibi_slopes = c.masks.alibi_slopes != nullptr ? c.masks.alibi_slopes + r * hp : nullptr;
  masks.sinks = c.masks.sinks != nullptr ? c.masks.sinks + r * hp : nullptr;
  BackwardTerms<T> terms;
  if (has_d_lse) terms.d_lse = dLw;
  std::vector<T> my_d_sinks(static_cast<std::size_t>(hp), T(0));  // of this rank's heads
  if (c.d_sinks != nullptr) terms.d_sinks = my_d_sinks.data();
  // This rank's heads are [r hp, (r + 1) hp) of the whole call's (the user's callables see those).
  const BlockProgram<T> program(c.masks, c.logit_grad, 0, r * hp);
  const double compute_start = MPI_Wtime();
  if (hp > 0) {
    if (c.backward) {
      attention_heads_backward_into(Qw, Kw, Vw, Ow, Lw, dOw, dQw, dKw, dVw, c.opt, program.masks(masks),
                                    program.terms(terms));
    } else {
      attention_heads_into(Qw, Kw, Vw, Ow, Lw, c.opt, program.masks(masks));
    }
  }
  st.compute_seconds += MPI_Wtime() - compute_start;
  st.visible_pairs = work(c, g);

  // Heads to tokens: to rank s, its rows of this rank's results.
  for (int s = 0; s < P; ++s) {
    const index_t sq = g.q_rows[static_cast<std::size_t>(s)], sk = g.k_rows[static_cast<std::size_t>(s)];
    const auto& qseg = g.q_segments[static_cast<std::size_t>(s)];
    const auto& kseg = g.k_segments[static_cast<std::size_t>(s)];
    sends[static_cast<std::size_t>(s)].clear();
    Packed<T> out{sends[static_cast<std::size_t>(s)]};
    // Each part is written as soon as it is made: the next one may move the buffer.
    if (c.backward) {
      whole_to_shard<T>(dQw, qseg, out.part(B, hp, sq, dk), false);
      whole_to_shard<T>(dKw, kseg, out.part(B, nkv, sk, dk), false);
      whole_to_shard<T>(dVw, kseg, out.part(B, nkv, sk, dv), false);
    } else {
      whole_to_shard<T>(Ow, qseg, out.part(B, hp, sq, dv), false);
      whole_to_shard<T>(Lw, qseg, out.part(B, hp, sq, 1), false);
    }
  }
  for (int d = 0; d < P; ++d) {
    const index_t n = static_cast<index_t>(kv_heads_of(g, d).size());
    const index_t size = c.backward ? B * (hp * tq * dk + n * tk * (dk + dv)) : B * hp * tq * (dv + 1);
    recvs[static_cast<std::size_t>(d)].resize(static_cast<std::size_t>(size));  // every element received
  }
  st.wait_seconds += exchange(comm, kTagOut, sends, recvs, st);

  // Into the caller's views: rank d's heads; dK/dV of a K/V head summed over the ranks that read
  // it, in rank order (the first copied, the others added).
  std::vector<bool> written(static_cast<std::size_t>(g.kv_heads), false);
  for (int d = 0; d < P; ++d) {
    Packed<T> in{recvs[static_cast<std::size_t>(d)]};
    if (c.backward) {
      const auto kv = kv_heads_of(g, d);
      const index_t n = static_cast<index_t>(kv.size());
      copy_view<T>(in.part(B, hp, tq, dk), c.dq.head_slice(d * hp, hp));
      const auto gk = in.part(B, n, tk, dk), gv = in.part(B, n, tk, dv);
      for (index_t i = 0; i < n; ++i) {
        const index_t h = kv[static_cast<std::size_t>(i)];
        const bool add = written[static_cast<std::size_t>(h)];
        copy_view<T>(gk.head_slice(i, 1), c.dk.head_slice(h, 1), add);
        copy_view<T>(gv.head_slice(i, 1), c.dv.head_slice(h, 1), add);
        written[static_cast<std::size_t>(h)] = true;
      }
    } else {
      copy_view<T>(in.part(B, hp, tq, dv), c.out.head_slice(d * hp, hp));
      const auto l = in.part(B, hp, tq, 1);
      if (!c.lse.empty()) copy_view<T>(l, c.lse.head_slice(d * hp, hp));
    }
  }
  if (c.d_sinks != nullptr) {  // rank d computed heads [d hp, (d + 1) hp): every rank gets all H
    const int count = static_cast<int>(hp);
    MPI_Allgather(my_d_sinks.data(), count, mpi_type<T>(), c.d_sinks, count, mpi_type<T>(), comm.get());
  }
}

template <typename T, typename L = ComputeScalar<T>>
void forward(MPI_Comm comm, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
             HeadsView<T> out, HeadsView<L> lse, const Options& opt, const Masks<T>& masks,
             const Config& config) {
  Call<T> c;
  c.api = "ulysses_attention_heads_into";
  c.ulysses = true;
  c.q = q, c.k = k, c.v = v, c.out = out, c.lse = lse, c.opt = opt, c.masks = masks, c.config = config;
  run_call(comm, c, [](const auto& call, Session& session) { run(call, session); });
}
template <typename T, typename L = ComputeScalar<T>>
void backward(MPI_Comm comm, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
              HeadsView<const T> out, HeadsView<const L> lse, HeadsView<const T> d_out, HeadsView<T> dq,
              HeadsView<T> dk, HeadsView<T> dv, const Options& opt, const Masks<T>& masks,
              const Config& config, const BackwardTerms<T>& terms) {
  Call<T> c;
  c.api = "ulysses_attention_heads_backward_into";
  c.ulysses = true;
  c.backward = true;
  c.q = q, c.k = k, c.v = v, c.fwd_out = out, c.fwd_lse = lse, c.d_out = d_out;
  c.dq = dq, c.dk = dk, c.dv = dv, c.opt = opt, c.masks = masks, c.config = config;
  c.d_lse = terms.d_lse, c.d_sinks = terms.d_sinks, c.logit_grad = terms.logit_grad;
  run_call(comm, c, [](const auto& call, Session& session) { run(call, session); });
}

}  // namespace
}  // namespace internal

// The Ulysses calls for views of T with log-sum-exps of L (DistributedAbi.hpp for the 16-bit types).
#define EIGEN_ATTENTION_DEFINE_ULYSSES(NS, T, L)                                                          \
  void NS ulysses_attention_heads_into(MPI_Comm comm, HeadsView<const T> q, HeadsView<const T> k,         \
                                       HeadsView<const T> v, HeadsView<T> attn, HeadsView<L> lse,         \
                                       const Options& opt, const Masks<T>& masks, const Config& config) { \
    internal::forward(comm, q, k, v, attn, lse, opt, masks, config);                                      \
  }                                                                                                       \
  void NS ulysses_attention_heads_backward_into(                                                          \
      MPI_Comm comm, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,                    \
      HeadsView<const T> out, HeadsView<const L> lse, HeadsView<const T> d_out, HeadsView<T> dq,          \
      HeadsView<T> dk, HeadsView<T> dv, const Options& opt, const Masks<T>& masks, const Config& config,  \
      const BackwardTerms<T>& terms) {                                                                    \
    internal::backward(comm, q, k, v, out, lse, d_out, dq, dk, dv, opt, masks, config, terms);            \
  }

EIGEN_ATTENTION_DEFINE_ULYSSES(, float, float)
EIGEN_ATTENTION_DEFINE_ULYSSES(, double, double)
EIGEN_ATTENTION_DEFINE_ULYSSES(abi::, BFloat16Bits, float)
EIGEN_ATTENTION_DEFINE_ULYSSES(abi::, HalfBits, float)
#undef EIGEN_ATTENTION_DEFINE_ULYSSES

}  // namespace distributed
}  // namespace EigenAttention
