// SPDX-License-Identifier: MIT
// What every distributed call shares: the arguments of one rank (Call), the collective checks
// that turn them into one agreed Geometry or the same exception on every rank (agree), the
// views of blocks of rows, and chunked non-blocking messages. Internal to EigenAttention::MPI.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <EigenAttention/Distributed.hpp>
#include <EigenAttention/Scalars.hpp>

#include "index.hpp"

namespace EigenAttention {
namespace distributed {
namespace internal {

using EigenAttention::internal::index_t;

/// One rank's arguments of a distributed call, of element type T (float, double, BFloat16Bits or
/// HalfBits; the log-sum-exps of its compute type L). The forward fills out (and lse); the
/// backward reads fwd_out, fwd_lse and d_out and fills dq, dk and dv.
template <typename T>
struct Call {
  using L = ComputeScalar<T>;
  const char* api = "";
  bool backward = false;
  bool ulysses = false;
  HeadsView<const T> q, k, v;
  HeadsView<T> out;
  HeadsView<L> lse;
  HeadsView<const T> fwd_out, d_out;
  HeadsView<const L> fwd_lse;
  HeadsView<T> dq, dk, dv;
  Options opt;
  Masks<T> masks;
  Config config;
  // BackwardTerms: dL/dLSE [B, H, T_q,r, 1] of this rank's rows (data null: zero), and where
  // dL/dsinks goes (H values, the same on every rank; null: not wanted).
  HeadsView<const L> d_lse;
  L* d_sinks = nullptr;
  LogitGradRef<L> logit_grad;  // BackwardTerms::logit_grad (empty: not wanted)
};

/// The problem every rank agreed on (agree()).
struct Geometry {
  int ranks = 1, rank = 0;
  index_t batch = 0, heads = 0, kv_heads = 0, d_k = 0, d_v = 0;
  std::vector<index_t> q_rows, k_rows;                       // shard rows of every rank
  index_t q_tokens = 0, k_tokens = 0;                        // the whole sequence's T_q and T_k
  bool any_d_lse = false;                                    // some rank gives dL/dLSE
  std::vector<std::vector<Segment>> q_segments, k_segments;  // of every rank
  index_t max_k_rows() const;
};

/// Checks this rank's arguments (the distributed-only rules, then the library's own check of the
/// shard, check_shard in src/check/shard.hpp), then, with every rank of `comm`, that all agree
/// (dims, options, masks, sharding) and that the shards make a whole sequence. Throws the same
/// std::invalid_argument on every rank (the lowest rank's own error first, naming that rank), or
/// returns the Geometry on every rank. Collective.
template <typename T>
Geometry agree(MPI_Comm comm, const Call<T>& c);

/// A communicator of the call's own (a duplicate of the caller's), so that the call's messages
/// never match the caller's.
class OwnComm {
 public:
  explicit OwnComm(MPI_Comm comm);
  ~OwnComm();
  OwnComm(const OwnComm&) = delete;
  OwnComm& operator=(const OwnComm&) = delete;
  MPI_Comm get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

/// One distributed call on this rank: its own communicator, the Geometry every rank agreed on
/// (agree() throws otherwise), and its Stats, which done() completes and gives to Config::stats.
struct Session {
  double start = MPI_Wtime();
  OwnComm comm;
  Geometry g;
  Stats st;
  template <typename T>
  Session(MPI_Comm caller, const Call<T>& c) : comm(caller), g(agree(comm.get(), c)) {}
  void done(const Config& config) {
    st.seconds = MPI_Wtime() - start;
    if (config.stats != nullptr) *config.stats = st;
  }
};

/// A 16-bit call as the float call that computes it (as the library computes 16-bit types):
/// float copies of its inputs (contiguous, [B, H, T, d]), ALiBi slopes and sinks, float outputs to
/// round once into the caller's (narrow()); the log-sum-exps are float already and are the
/// caller's own. Made after agree(): the caller's views are valid.
template <typename T>
class Widened {
 public:
  explicit Widened(const Call<T>& c);
  const Call<float>& call() const { return call_; }
  /// The float results, rounded once into the caller's views.
  void narrow() const;

 private:
  const Call<T>& c_;
  Call<float> call_;
  std::vector<std::vector<float>> keep_;
  HeadsView<const float> widen(HeadsView<const T> v);
  HeadsView<float> scratch(const HeadsView<T>& v);
};

/// Runs body(call, session) on the call as it computes: float and double as they are, the
/// 16-bit types in float (Widened), after agree() in Session; then completes the Stats.
template <typename T, class Body>
void run_call(MPI_Comm comm, const Call<T>& c, Body&& body) {
  Session session(comm, c);
  if constexpr (kIsLowPrecision<T>) {
    const Widened<T> wide(c);
    body(wide.call(), session);
    wide.narrow();
  } else {
    body(c, session);
  }
  session.done(c.config);
}

/// dL/dsinks of a call (Masks::sinks, BackwardTerms::d_sinks): every rank's `mine` (H values, its
/// own share) gathered and summed in rank order into c.d_sinks, the same bits on every rank.
/// Collective; nothing to do (and no message) when the call does not want them.
template <typename T>
void sum_sinks_over_ranks(const Call<T>& c, const OwnComm& comm, const std::vector<T>& mine);

/// The MPI datatype of T (float or double: what the calls communicate).
template <typename T>
MPI_Datatype mpi_type();

/// Non-blocking send and receive of n elements, in messages of at most 2^30 elements (MPI
/// counts are int), tags tag, tag + 16, ...; the requests are appended to `requests`.
template <typename T>
void isend(const T* data, index_t n, int to, int tag, MPI_Comm comm, std::vector<MPI_Request>& requests);
template <typename T>
void irecv(T* data, index_t n, int from, int tag, MPI_Comm comm, std::vector<MPI_Request>& requests);
/// Waits for every request, and clears the list; returns the seconds spent waiting.
double wait_all(std::vector<MPI_Request>& requests);
/// Lets the requests progress without waiting (MPI_Testall; completed ones become null).
void test_all(std::vector<MPI_Request>& requests);

/// Copies src into dst (same sizes, any strides); adds when `add`.
template <typename T>
void copy_view(HeadsView<const T> src, HeadsView<T> dst, bool add = false) {
  for (index_t b = 0; b < src.batch; ++b)
    for (index_t h = 0; h < src.heads; ++h)
      for (index_t t = 0; t < src.tokens; ++t) {
        const T* s = src.data + b * src.batch_stride + h * src.head_stride + t * src.token_stride;
        T* d = dst.data + b * dst.batch_stride + h * dst.head_stride + t * dst.token_stride;
        for (index_t c = 0; c < src.dim; ++c) {
          if (add) {
            d[c * dst.dim_stride] += s[c * src.dim_stride];
          } else {
            d[c * dst.dim_stride] = s[c * src.dim_stride];
          }
        }
      }
}

/// Where the diagonal of query row 0 of a block lies, and how many keys of the block are real:
/// for sequence b (key_lengths) the whole sequence's alignment offset, moved to the block's
/// global positions.
struct BlockMask {
  index_t diagonal_offset = 0;  // Options::diagonal_offset of the block call
  index_t keys = 0;             // the block's keys before the sequence's key length
  index_t chunk_origin = 0;     // Options::chunk_origin of the block call: its first key's position
};
BlockMask block_mask(const Options& opt, index_t q_tokens, index_t key_length, const Segment& q,
                     const Segment& k);
/// (query, key) pairs of a block that are visible: for each of its rows, the keys of the core's
/// KeyRange (kernels/key_range.hpp: causal frontier and window of `opt`, diagonal at
/// i + m.diagonal_offset), over m.keys keys.
index_t visible_pairs(const Options& opt, index_t rows, const BlockMask& m);

}  // namespace internal
}  // namespace distributed
}  // namespace EigenAttention
