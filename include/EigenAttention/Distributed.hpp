// SPDX-License-Identifier: MIT
/// \file Distributed.hpp
/// Sequence-parallel attention over MPI, for contexts that do not fit one process: the optional
/// component EigenAttention::MPI (CMake: `find_package(EigenAttention COMPONENTS MPI)`, target
/// `EigenAttention::MPI`, which brings MPI with it). Not included by <EigenAttention/EigenAttention.hpp>:
/// the core library never depends on MPI.
///
/// Every rank of the communicator holds a shard of the tokens of Q, K and V (and receives the
/// same shard of the output): under Sharding::Contiguous rank r holds tokens
/// [start_r, start_r + n_r), ranks in order, each rank's n_r its own (uneven sizes and ranks
/// with no token are fine); under Sharding::ZigZag the tokens are cut into 2P chunks and rank r
/// holds chunks r and 2P - 1 - r, so that with a causal mask every rank has the same work. The
/// result on each rank is its rows of the exact attention over the whole sequence, with every
/// mask option computed at global token positions (causal with either alignment, window, ALiBi,
/// soft-cap, key lengths). A boolean mask or a bias (Masks::mask, Masks::bias) has no sharded
/// meaning and is rejected.
///
/// - ring_attention* (Ring Attention, Liu et al. 2023): the K/V blocks travel around the ring
///   of ranks, the next one in flight (non-blocking, double-buffered) while the current one is
///   computed; partial results merge exactly by their log-sum-exps, in a fixed order. Any
///   number of heads.
/// - ulysses_attention* (DeepSpeed Ulysses): one all-to-all re-shards Q, K, V from tokens to
///   heads, each rank computes whole sequences for H/P query heads, one all-to-all brings the
///   result back. Needs H divisible by P; K/V heads are sent to every rank whose query heads
///   read them (so H_kv need not be).
///
/// Both are collective: every rank of `comm` must call them, with the same options, masks,
/// head counts and dims. They check this first, together: a mismatch, or a bad argument on any
/// one rank, throws the same std::invalid_argument on every rank (naming the rank and the value
/// at fault) and nothing is written. Results are deterministic: bitwise identical from run to
/// run for a fixed number of ranks and sharding, whatever the timing of the messages, and equal
/// to the single-process call within the merge's rounding ([Distributed](docs/distributed.md)).
/// Scalar types: float and double; the multi-head calls also Eigen::bfloat16 and Eigen::half
/// (computed in float, log-sum-exps in float).
#pragma once

// Lets the detail/ headers in (each refuses to be included on its own); never undefined, so
// that any public header may include them, in any order.
#ifndef EIGEN_ATTENTION_PUBLIC_HEADER
#define EIGEN_ATTENTION_PUBLIC_HEADER
#endif

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include <EigenAttention/BackwardTerms.hpp>
#include <EigenAttention/Compiled.hpp>
#include <EigenAttention/HeadsView.hpp>
#include <EigenAttention/Masks.hpp>
#include <EigenAttention/Options.hpp>
#include <EigenAttention/Types.hpp>
#include <EigenAttention/detail/AbiMultiHead.hpp>
#include <EigenAttention/detail/FrontDoor.hpp>

namespace EigenAttention {
/// Sequence-parallel attention over MPI (the EigenAttention::MPI component).
namespace distributed {

/// How the tokens of a sequence are laid out over the P ranks of a communicator.
enum class Sharding {
  /// Rank r holds the tokens [start_r, start_r + n_r), ranks in order, n_r its own shard's row
  /// count (any, zero too). contiguous_rows() gives a balanced split.
  Contiguous,
  /// The T tokens are cut into 2P chunks (chunk c has T / 2P tokens, one more for c < T mod 2P);
  /// rank r holds chunk r, then chunk 2P - 1 - r, as its rows. With a causal mask every rank
  /// then does the same work. zigzag_segments(), shard() and unshard() convert.
  ZigZag
};

/// A run of a rank's rows that are consecutive tokens: local rows
/// [local_first, local_first + count) are the global tokens [global_first, global_first + count).
struct Segment {
  std::ptrdiff_t global_first = 0;  ///< first global token
  std::ptrdiff_t local_first = 0;   ///< its row in the rank's shard
  std::ptrdiff_t count = 0;         ///< tokens in the run
};

/// What one call did on this rank (Config::stats). Times are wall-clock seconds on this rank.
struct Stats {
  double seconds = 0;          ///< the whole call, checks included
  double compute_seconds = 0;  ///< in the attention kernels (and merges)
  /// Blocked waiting for messages still in flight once the computation needing them was done:
  /// the communication not hidden behind computation.
  double wait_seconds = 0;
  std::int64_t bytes_sent = 0;      ///< payload this rank sent (K/V blocks, gradients, all-to-all)
  std::int64_t bytes_received = 0;  ///< payload this rank received
  std::int64_t messages = 0;        ///< point-to-point messages sent (all-to-all: 1 per peer)
  /// (query, key) pairs this rank computed a weight for, over all sequences and query heads:
  /// the work of the call, which ZigZag balances under a causal mask.
  std::int64_t visible_pairs = 0;
  std::int64_t blocks_computed = 0;  ///< ring: (query segment, key segment) blocks computed
  std::int64_t blocks_skipped = 0;   ///< ring: blocks skipped because every pair is masked
};

/// How a distributed call lays out its tokens, and where it reports.
struct Config {
  Sharding sharding = Sharding::Contiguous;  ///< layout of Q, K, V, the outputs and gradients
  Stats* stats = nullptr;                    ///< when not null, receives this rank's Stats
};

/// Rows of rank `rank` of `ranks` under a balanced contiguous split of `tokens`: tokens / ranks,
/// one more for the first tokens % ranks ranks. \throws std::invalid_argument for ranks < 1,
/// rank outside [0, ranks) or tokens < 0 (so do the other shard helpers).
std::ptrdiff_t contiguous_rows(std::ptrdiff_t tokens, int ranks, int rank);
/// Rows of rank `rank` of `ranks` under ZigZag for `tokens` tokens (its two chunks).
std::ptrdiff_t zigzag_rows(std::ptrdiff_t tokens, int ranks, int rank);
/// The runs of consecutive tokens of rank `rank`'s shard, in local row order: one for
/// Contiguous (with the balanced split of contiguous_rows()), two for ZigZag (either may be
/// empty when tokens < 2 ranks).
std::vector<Segment> shard_segments(Sharding sharding, std::ptrdiff_t tokens, int ranks, int rank);

/// Rank `rank`'s rows of a whole T x d matrix under `sharding` (Contiguous: the balanced split).
template <class Derived>
RowMatrix<typename Derived::Scalar> shard(const Eigen::MatrixBase<Derived>& full, Sharding sharding,
                                          int ranks, int rank) {
  const auto segments = shard_segments(sharding, static_cast<std::ptrdiff_t>(full.rows()), ranks, rank);
  std::ptrdiff_t rows = 0;
  for (const Segment& s : segments) rows += s.count;
  RowMatrix<typename Derived::Scalar> out(rows, full.cols());
  for (const Segment& s : segments)
    out.middleRows(s.local_first, s.count) = full.middleRows(s.global_first, s.count);
  return out;
}

/// The whole matrix from every rank's shard (shards[r] of rank r, in order) under `sharding`.
/// \throws std::invalid_argument when the shards' row counts are not those of `sharding`
/// (Contiguous: any counts, concatenated in rank order) or their column counts differ.
template <typename Scalar>
RowMatrix<Scalar> unshard(const std::vector<RowMatrix<Scalar>>& shards, Sharding sharding) {
  const int ranks = static_cast<int>(shards.size());
  std::ptrdiff_t tokens = 0;
  for (const auto& s : shards) {
    if (s.cols() != shards.front().cols()) {
      throw std::invalid_argument("unshard: the shards have " + std::to_string(shards.front().cols()) +
                                  " and " + std::to_string(s.cols()) + " columns");
    }
    tokens += static_cast<std::ptrdiff_t>(s.rows());
  }
  RowMatrix<Scalar> full(tokens, shards.empty() ? 0 : shards.front().cols());
  std::ptrdiff_t next = 0;
  for (int r = 0; r < ranks; ++r) {
    const auto& part = shards[static_cast<std::size_t>(r)];
    if (sharding == Sharding::Contiguous) {
      full.middleRows(next, part.rows()) = part;
      next += static_cast<std::ptrdiff_t>(part.rows());
      continue;
    }
    if (static_cast<std::ptrdiff_t>(part.rows()) != zigzag_rows(tokens, ranks, r)) {
      throw std::invalid_argument(
          "unshard: shard " + std::to_string(r) + " has " + std::to_string(part.rows()) +
          (part.rows() == 1 ? " row" : " rows") + " but ZigZag gives rank " + std::to_string(r) + " of " +
          std::to_string(ranks) + " " + std::to_string(zigzag_rows(tokens, ranks, r)) + " of " +
          std::to_string(tokens) + (tokens == 1 ? " token" : " tokens"));
    }
    for (const Segment& s : shard_segments(sharding, tokens, ranks, r))
      full.middleRows(s.global_first, s.count) = part.middleRows(s.local_first, s.count);
  }
  return full;
}

///@{
/// Ring attention on this rank's shard, every sequence and query head (as attention_heads_into):
/// q [B, H, T_q,r, d_k], k [B, H_kv, T_k,r, d_k], v [B, H_kv, T_k,r, d_v], attn [B, H, T_q,r, d_v]
/// and, when not empty, lse [B, H, T_q,r, 1], each the rank's shard of the tokens; the whole
/// sequence has T_q = sum of T_q,r query and T_k = sum of T_k,r key tokens (the alignment and
/// key lengths refer to those). `masks` may hold key_lengths (global, the same on every rank)
/// and alibi_slopes (the same on every rank); mask and bias must be empty. Collective.
/// \throws std::invalid_argument (on every rank) for inconsistent shapes, options or masks.
void ring_attention_heads_into(MPI_Comm comm, HeadsView<const float> q, HeadsView<const float> k,
                               HeadsView<const float> v, HeadsView<float> attn, HeadsView<float> lse,
                               const Options& opt = {}, const Masks<float>& masks = {},
                               const Config& config = {});
void ring_attention_heads_into(MPI_Comm comm, HeadsView<const double> q, HeadsView<const double> k,
                               HeadsView<const double> v, HeadsView<double> attn, HeadsView<double> lse,
                               const Options& opt = {}, const Masks<double>& masks = {},
                               const Config& config = {});
///@}

///@{
/// The backward pass of ring_attention_heads_into(): from the forward's attn and lse (this
/// rank's shard) and d_attn = dL/dATTN, the gradients of this rank's shard: dq [B, H, T_q,r, d_k],
/// dk [B, H_kv, T_k,r, d_k], dv [B, H_kv, T_k,r, d_v]. The dK/dV of each block travel with it
/// around the ring back to its owner. `opt`, `masks` and `config.sharding` must be the forward's.
void ring_attention_heads_backward_into(MPI_Comm comm, HeadsView<const float> q, HeadsView<const float> k,
                                        HeadsView<const float> v, HeadsView<const float> attn,
                                        HeadsView<const float> lse, HeadsView<const float> d_attn,
                                        HeadsView<float> dq, HeadsView<float> dk, HeadsView<float> dv,
                                        const Options& opt = {}, const Masks<float>& masks = {},
                                        const Config& config = {}, const BackwardTerms<float>& terms = {});
void ring_attention_heads_backward_into(MPI_Comm comm, HeadsView<const double> q, HeadsView<const double> k,
                                        HeadsView<const double> v, HeadsView<const double> attn,
                                        HeadsView<const double> lse, HeadsView<const double> d_attn,
                                        HeadsView<double> dq, HeadsView<double> dk, HeadsView<double> dv,
                                        const Options& opt = {}, const Masks<double>& masks = {},
                                        const Config& config = {}, const BackwardTerms<double>& terms = {});
///@}

///@{
/// Ulysses attention: as ring_attention_heads_into() (same views, masks and result), computed by
/// re-sharding from tokens to heads with one all-to-all each way. Needs H (the query heads)
/// divisible by the number of ranks. Collective.
void ulysses_attention_heads_into(MPI_Comm comm, HeadsView<const float> q, HeadsView<const float> k,
                                  HeadsView<const float> v, HeadsView<float> attn, HeadsView<float> lse,
                                  const Options& opt = {}, const Masks<float>& masks = {},
                                  const Config& config = {});
void ulysses_attention_heads_into(MPI_Comm comm, HeadsView<const double> q, HeadsView<const double> k,
                                  HeadsView<const double> v, HeadsView<double> attn, HeadsView<double> lse,
                                  const Options& opt = {}, const Masks<double>& masks = {},
                                  const Config& config = {});
///@}

///@{
/// The backward pass of ulysses_attention_heads_into() (views as
/// ring_attention_heads_backward_into()).
void ulysses_attention_heads_backward_into(MPI_Comm comm, HeadsView<const float> q, HeadsView<const float> k,
                                           HeadsView<const float> v, HeadsView<const float> attn,
                                           HeadsView<const float> lse, HeadsView<const float> d_attn,
                                           HeadsView<float> dq, HeadsView<float> dk, HeadsView<float> dv,
                                           const Options& opt = {}, const Masks<float>& masks = {},
                                           const Config& config = {}, const BackwardTerms<float>& terms = {});
void ulysses_attention_heads_backward_into(
    MPI_Comm comm, HeadsView<const double> q, HeadsView<const double> k, HeadsView<const double> v,
    HeadsView<const double> attn, HeadsView<const double> lse, HeadsView<const double> d_attn,
    HeadsView<double> dq, HeadsView<double> dk, HeadsView<double> dv, const Options& opt = {},
    const Masks<double>& masks = {}, const Config& config = {}, const BackwardTerms<double>& terms = {});
///@}

// The front doors' helpers and the 16-bit calls (detail/), after the calls they forward to.
}  // namespace distributed
}  // namespace EigenAttention
#define EIGEN_ATTENTION_DISTRIBUTED_CALLS_DECLARED
#include <EigenAttention/detail/Distributed.hpp>
namespace EigenAttention {
namespace distributed {

///@{
/// The four calls above on views of Eigen::bfloat16 or Eigen::half (const or not), the
/// log-sum-exps in float: computed in float, as the single-process calls compute these types
/// (the inputs widened once; LSE merged in float), each result rounded once.
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfLowPrecision<Q> = 0>
void ring_attention_heads_into(MPI_Comm comm, const HeadsView<Q>& q, EigenAttention::detail::In<T> k,
                               EigenAttention::detail::In<T> v, EigenAttention::detail::Out<T> attn,
                               EigenAttention::detail::Out<EigenAttention::detail::LseOf<T>> lse,
                               const Options& opt = {},
                               const EigenAttention::detail::NoDeduce<Masks<T>>& masks = {},
                               const Config& config = {}) {
  abi::ring_attention_heads_into(comm, EigenAttention::detail::bits<const T>(q),
                                 EigenAttention::detail::bits(k), EigenAttention::detail::bits(v),
                                 EigenAttention::detail::bits(attn), lse, opt,
                                 EigenAttention::detail::bits(masks), config);
}
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfLowPrecision<Q> = 0>
void ring_attention_heads_backward_into(
    MPI_Comm comm, const HeadsView<Q>& q, EigenAttention::detail::In<T> k, EigenAttention::detail::In<T> v,
    EigenAttention::detail::In<T> attn, EigenAttention::detail::In<EigenAttention::detail::LseOf<T>> lse,
    EigenAttention::detail::In<T> d_attn, EigenAttention::detail::Out<T> dq,
    EigenAttention::detail::Out<T> dk, EigenAttention::detail::Out<T> dv, const Options& opt = {},
    const EigenAttention::detail::NoDeduce<Masks<T>>& masks = {}, const Config& config = {},
    const EigenAttention::detail::NoDeduce<BackwardTerms<T>>& terms = {}) {
  abi::ring_attention_heads_backward_into(
      comm, EigenAttention::detail::bits<const T>(q), EigenAttention::detail::bits(k),
      EigenAttention::detail::bits(v), EigenAttention::detail::bits(attn), lse,
      EigenAttention::detail::bits(d_attn), EigenAttention::detail::bits(dq),
      EigenAttention::detail::bits(dk), EigenAttention::detail::bits(dv), opt,
      EigenAttention::detail::bits(masks), config, EigenAttention::detail::bits(terms));
}
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfLowPrecision<Q> = 0>
void ulysses_attention_heads_into(MPI_Comm comm, const HeadsView<Q>& q, EigenAttention::detail::In<T> k,
                                  EigenAttention::detail::In<T> v, EigenAttention::detail::Out<T> attn,
                                  EigenAttention::detail::Out<EigenAttention::detail::LseOf<T>> lse,
                                  const Options& opt = {},
                                  const EigenAttention::detail::NoDeduce<Masks<T>>& masks = {},
                                  const Config& config = {}) {
  abi::ulysses_attention_heads_into(comm, EigenAttention::detail::bits<const T>(q),
                                    EigenAttention::detail::bits(k), EigenAttention::detail::bits(v),
                                    EigenAttention::detail::bits(attn), lse, opt,
                                    EigenAttention::detail::bits(masks), config);
}
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfLowPrecision<Q> = 0>
void ulysses_attention_heads_backward_into(
    MPI_Comm comm, const HeadsView<Q>& q, EigenAttention::detail::In<T> k, EigenAttention::detail::In<T> v,
    EigenAttention::detail::In<T> attn, EigenAttention::detail::In<EigenAttention::detail::LseOf<T>> lse,
    EigenAttention::detail::In<T> d_attn, EigenAttention::detail::Out<T> dq,
    EigenAttention::detail::Out<T> dk, EigenAttention::detail::Out<T> dv, const Options& opt = {},
    const EigenAttention::detail::NoDeduce<Masks<T>>& masks = {}, const Config& config = {},
    const EigenAttention::detail::NoDeduce<BackwardTerms<T>>& terms = {}) {
  abi::ulysses_attention_heads_backward_into(
      comm, EigenAttention::detail::bits<const T>(q), EigenAttention::detail::bits(k),
      EigenAttention::detail::bits(v), EigenAttention::detail::bits(attn), lse,
      EigenAttention::detail::bits(d_attn), EigenAttention::detail::bits(dq),
      EigenAttention::detail::bits(dk), EigenAttention::detail::bits(dv), opt,
      EigenAttention::detail::bits(masks), config, EigenAttention::detail::bits(terms));
}
///@}

/// ring_attention_heads_into() without the log-sum-exps (float, double, Eigen::bfloat16, Eigen::half).
template <typename Q, typename T = std::remove_const_t<Q>, EigenAttention::detail::EnableIfHeadsScalar<Q> = 0>
void ring_attention_heads_into(MPI_Comm comm, const HeadsView<Q>& q, EigenAttention::detail::In<T> k,
                               EigenAttention::detail::In<T> v, EigenAttention::detail::Out<T> attn,
                               const Options& opt = {},
                               const EigenAttention::detail::NoDeduce<Masks<T>>& masks = {},
                               const Config& config = {}) {
  ring_attention_heads_into(comm, HeadsView<const T>(q), k, v, attn,
                            HeadsView<EigenAttention::detail::LseOf<T>>{}, opt, masks, config);
}
/// ulysses_attention_heads_into() without the log-sum-exps (the four scalar types).
template <typename Q, typename T = std::remove_const_t<Q>, EigenAttention::detail::EnableIfHeadsScalar<Q> = 0>
void ulysses_attention_heads_into(MPI_Comm comm, const HeadsView<Q>& q, EigenAttention::detail::In<T> k,
                                  EigenAttention::detail::In<T> v, EigenAttention::detail::Out<T> attn,
                                  const Options& opt = {},
                                  const EigenAttention::detail::NoDeduce<Masks<T>>& masks = {},
                                  const Config& config = {}) {
  ulysses_attention_heads_into(comm, HeadsView<const T>(q), k, v, attn,
                               HeadsView<EigenAttention::detail::LseOf<T>>{}, opt, masks, config);
}

/// Ring attention for one head: this rank's rows (T_q,r x d_v) of softmax(Q K^T scale) V over the
/// whole sequence, from this rank's shards Q (T_q,r x d_k), K (T_k,r x d_k) and V (T_k,r x d_v),
/// any Eigen dense expressions of float or double. `masks` may hold a key length (global) and an
/// ALiBi slope. Collective.
/// \code
/// MPI_Init(&argc, &argv);
/// EigenAttention::Options opt;
/// opt.causal = true;
/// // Q, K, V: this rank's rows of the sequence (Sharding::Contiguous, ranks in order)
/// auto attn = EigenAttention::distributed::ring_attention(MPI_COMM_WORLD, Q, K, V, opt);
/// \endcode
template <class DQ, class DK, class DV>
RowMatrix<typename DQ::Scalar> ring_attention(MPI_Comm comm, const Eigen::MatrixBase<DQ>& Q,
                                              const Eigen::MatrixBase<DK>& K, const Eigen::MatrixBase<DV>& V,
                                              const Options& opt = {},
                                              const Masks<typename DQ::Scalar>& masks = {},
                                              const Config& config = {}) {
  RowMatrix<typename DQ::Scalar> attn;
  detail::forward_one_into(detail::Method::Ring, "ring_attention", comm, Q, K, V, attn, nullptr, opt, masks,
                           config);
  return attn;
}

/// ring_attention() into caller storage: `attn` (T_q,r x d_v) and, in the overload that takes it,
/// `lse` (T_q,r entries), each an Eigen::Matrix (resized when needed, once this rank's arguments
/// are checked), a Map, Ref or block, of the input scalar type.
template <class DQ, class DK, class DV, class DO, class DL,
          EigenAttention::detail::EnableIfMatrix<DO, DL> = 0>
void ring_attention_into(MPI_Comm comm, const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
                         const Eigen::MatrixBase<DV>& V, DO&& attn, DL&& lse, const Options& opt = {},
                         const Masks<typename DQ::Scalar>& masks = {}, const Config& config = {}) {
  detail::forward_one_into(detail::Method::Ring, "ring_attention_into", comm, Q, K, V, std::forward<DO>(attn),
                           &lse, opt, masks, config);
}
/// ring_attention_into() without the log-sum-exps.
template <class DQ, class DK, class DV, class DO, EigenAttention::detail::EnableIfMatrix<DO> = 0>
void ring_attention_into(MPI_Comm comm, const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
                         const Eigen::MatrixBase<DV>& V, DO&& attn, const Options& opt = {},
                         const Masks<typename DQ::Scalar>& masks = {}, const Config& config = {}) {
  detail::forward_one_into(detail::Method::Ring, "ring_attention_into", comm, Q, K, V, std::forward<DO>(attn),
                           nullptr, opt, masks, config);
}

/// The backward pass of ring_attention() for one head: dq, dk, dv of this rank's shard, from
/// the forward's attn and lse (ring_attention_into) and d_attn = dL/dATTN. Collective.
template <class DQ, class DK, class DV, class DA, class DL, class DG>
Gradients<typename DQ::Scalar> ring_attention_backward(
    MPI_Comm comm, const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
    const Eigen::MatrixBase<DV>& V, const Eigen::MatrixBase<DA>& attn, const Eigen::MatrixBase<DL>& lse,
    const Eigen::MatrixBase<DG>& d_attn, const Options& opt = {},
    const Masks<typename DQ::Scalar>& masks = {}, const Config& config = {},
    const BackwardTerms<typename DQ::Scalar>& terms = {}) {
  return detail::backward_one(detail::Method::Ring, comm, Q, K, V, attn, lse, d_attn, opt, masks, config,
                              terms);
}

/// Ulysses attention for one head: as ring_attention() (same shards, masks and result), by
/// all-to-all re-sharding; with one head it needs one rank. Collective.
template <class DQ, class DK, class DV>
RowMatrix<typename DQ::Scalar> ulysses_attention(MPI_Comm comm, const Eigen::MatrixBase<DQ>& Q,
                                                 const Eigen::MatrixBase<DK>& K,
                                                 const Eigen::MatrixBase<DV>& V, const Options& opt = {},
                                                 const Masks<typename DQ::Scalar>& masks = {},
                                                 const Config& config = {}) {
  RowMatrix<typename DQ::Scalar> attn;
  detail::forward_one_into(detail::Method::Ulysses, "ulysses_attention", comm, Q, K, V, attn, nullptr, opt,
                           masks, config);
  return attn;
}

/// ulysses_attention() into caller storage (outputs as ring_attention_into()).
template <class DQ, class DK, class DV, class DO, class DL,
          EigenAttention::detail::EnableIfMatrix<DO, DL> = 0>
void ulysses_attention_into(MPI_Comm comm, const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
                            const Eigen::MatrixBase<DV>& V, DO&& attn, DL&& lse, const Options& opt = {},
                            const Masks<typename DQ::Scalar>& masks = {}, const Config& config = {}) {
  detail::forward_one_into(detail::Method::Ulysses, "ulysses_attention_into", comm, Q, K, V,
                           std::forward<DO>(attn), &lse, opt, masks, config);
}
/// ulysses_attention_into() without the log-sum-exps.
template <class DQ, class DK, class DV, class DO, EigenAttention::detail::EnableIfMatrix<DO> = 0>
void ulysses_attention_into(MPI_Comm comm, const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
                            const Eigen::MatrixBase<DV>& V, DO&& attn, const Options& opt = {},
                            const Masks<typename DQ::Scalar>& masks = {}, const Config& config = {}) {
  detail::forward_one_into(detail::Method::Ulysses, "ulysses_attention_into", comm, Q, K, V,
                           std::forward<DO>(attn), nullptr, opt, masks, config);
}

/// The backward pass of ulysses_attention() for one head. Collective.
template <class DQ, class DK, class DV, class DA, class DL, class DG>
Gradients<typename DQ::Scalar> ulysses_attention_backward(
    MPI_Comm comm, const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
    const Eigen::MatrixBase<DV>& V, const Eigen::MatrixBase<DA>& attn, const Eigen::MatrixBase<DL>& lse,
    const Eigen::MatrixBase<DG>& d_attn, const Options& opt = {},
    const Masks<typename DQ::Scalar>& masks = {}, const Config& config = {},
    const BackwardTerms<typename DQ::Scalar>& terms = {}) {
  return detail::backward_one(detail::Method::Ulysses, comm, Q, K, V, attn, lse, d_attn, opt, masks, config,
                              terms);
}

/// \name The 0.2 forms
/// Inline forwarders to the calls above, removed in 0.4 (docs/migration.md).
///@{

/// 0.2's ring_attention_heads(comm, q, k, v, out, opt, masks, lse, config).
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfFloatOrDouble<Q> = 0>
[[deprecated(
    "EigenAttention 0.3: use ring_attention_heads_into(comm, q, k, v, attn, lse, opt, masks, config)")]] void
ring_attention_heads(MPI_Comm comm, const HeadsView<Q>& q, EigenAttention::detail::In<T> k,
                     EigenAttention::detail::In<T> v, EigenAttention::detail::Out<T> out,
                     const Options& opt = {}, const EigenAttention::detail::NoDeduce<Masks<T>>& masks = {},
                     EigenAttention::detail::Out<T> lse = {}, const Config& config = {}) {
  ring_attention_heads_into(comm, HeadsView<const T>(q), k, v, out, lse, opt, masks, config);
}
/// 0.2's ulysses_attention(comm, q, k, v, out, opt, masks, lse, config) on HeadsViews.
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfFloatOrDouble<Q> = 0>
[[deprecated(
    "EigenAttention 0.3: use ulysses_attention_heads_into(comm, q, k, v, attn, lse, opt, masks, "
    "config)")]] void
ulysses_attention(MPI_Comm comm, const HeadsView<Q>& q, EigenAttention::detail::In<T> k,
                  EigenAttention::detail::In<T> v, EigenAttention::detail::Out<T> out,
                  const Options& opt = {}, const EigenAttention::detail::NoDeduce<Masks<T>>& masks = {},
                  EigenAttention::detail::Out<T> lse = {}, const Config& config = {}) {
  ulysses_attention_heads_into(comm, HeadsView<const T>(q), k, v, out, lse, opt, masks, config);
}
/// 0.2's ring_attention_heads_backward (the same arguments).
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfFloatOrDouble<Q> = 0>
[[deprecated("EigenAttention 0.3: use ring_attention_heads_backward_into (the same arguments)")]] void
ring_attention_heads_backward(MPI_Comm comm, const HeadsView<Q>& q, EigenAttention::detail::In<T> k,
                              EigenAttention::detail::In<T> v, EigenAttention::detail::In<T> out,
                              EigenAttention::detail::In<T> lse, EigenAttention::detail::In<T> d_out,
                              EigenAttention::detail::Out<T> dq, EigenAttention::detail::Out<T> dk,
                              EigenAttention::detail::Out<T> dv, const Options& opt = {},
                              const EigenAttention::detail::NoDeduce<Masks<T>>& masks = {},
                              const Config& config = {}) {
  ring_attention_heads_backward_into(comm, HeadsView<const T>(q), k, v, out, lse, d_out, dq, dk, dv, opt,
                                     masks, config);
}
/// 0.2's ulysses_attention_backward on HeadsViews (the same arguments).
template <typename Q, typename T = std::remove_const_t<Q>, detail::EnableIfFloatOrDouble<Q> = 0>
[[deprecated("EigenAttention 0.3: use ulysses_attention_heads_backward_into (the same arguments)")]] void
ulysses_attention_backward(MPI_Comm comm, const HeadsView<Q>& q, EigenAttention::detail::In<T> k,
                           EigenAttention::detail::In<T> v, EigenAttention::detail::In<T> out,
                           EigenAttention::detail::In<T> lse, EigenAttention::detail::In<T> d_out,
                           EigenAttention::detail::Out<T> dq, EigenAttention::detail::Out<T> dk,
                           EigenAttention::detail::Out<T> dv, const Options& opt = {},
                           const EigenAttention::detail::NoDeduce<Masks<T>>& masks = {},
                           const Config& config = {}) {
  ulysses_attention_heads_backward_into(comm, HeadsView<const T>(q), k, v, out, lse, d_out, dq, dk, dv, opt,
                                        masks, config);
}
/// 0.2's ring_attention(comm, Q, K, V, opt, config).
template <class DQ, class DK, class DV>
[[deprecated("EigenAttention 0.3: use ring_attention(comm, Q, K, V, opt, masks, config)")]] RowMatrix<
    typename DQ::Scalar>
ring_attention(MPI_Comm comm, const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
               const Eigen::MatrixBase<DV>& V, const Options& opt, const Config& config) {
  return ring_attention(comm, Q, K, V, opt, {}, config);
}
/// 0.2's ring_attention_into(comm, Q, K, V, out, lse, opt, config).
template <class DQ, class DK, class DV, class DO, class DL>
[[deprecated(
    "EigenAttention 0.3: use ring_attention_into(comm, Q, K, V, attn, lse, opt, masks, config)")]] void
ring_attention_into(MPI_Comm comm, const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
                    const Eigen::MatrixBase<DV>& V, Eigen::PlainObjectBase<DO>& out,
                    Eigen::PlainObjectBase<DL>& lse, const Options& opt, const Config& config) {
  ring_attention_into(comm, Q, K, V, out.derived(), lse.derived(), opt, {}, config);
}
/// 0.2's ring_attention_backward(comm, Q, K, V, out, lse, d_out, opt, config).
template <class DQ, class DK, class DV, class DA, class DL, class DG>
[[deprecated(
    "EigenAttention 0.3: use ring_attention_backward(comm, Q, K, V, attn, lse, d_attn, opt, masks, "
    "config)")]] Gradients<typename DQ::Scalar>
ring_attention_backward(MPI_Comm comm, const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
                        const Eigen::MatrixBase<DV>& V, const Eigen::MatrixBase<DA>& out,
                        const Eigen::MatrixBase<DL>& lse, const Eigen::MatrixBase<DG>& d_out,
                        const Options& opt, const Config& config) {
  return ring_attention_backward(comm, Q, K, V, out, lse, d_out, opt, {}, config);
}
///@}

}  // namespace distributed
}  // namespace EigenAttention
