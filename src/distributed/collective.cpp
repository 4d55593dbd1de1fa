// SPDX-License-Identifier: MIT
// The collective checks of the distributed calls, and the pieces every one of them uses
// (collective.hpp).
#include "distributed/collective.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "check/program.hpp"
#include "check/shard.hpp"
#include "kernels/convert.hpp"
#include "kernels/key_range.hpp"
#include "text.hpp"

namespace EigenAttention {
namespace distributed {
namespace internal {
namespace {

std::string num(index_t n) { return std::to_string(n); }

/// FNV-1a over bytes: a fingerprint of the call's name every rank must share.
std::int64_t fingerprint(const void* data, std::size_t bytes) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  std::int64_t out;
  std::memcpy(&out, &h, sizeof out);
  return out;
}

std::int64_t bits(double x) {
  std::int64_t out;
  std::memcpy(&out, &x, sizeof out);
  return out;
}

/// What every rank must have in common, then what is its own. One row of int64 per rank.
enum Field : int {
  kApi,
  kScalar,
  kBatch,
  kHeads,
  kKvHeads,
  kDk,
  kDv,
  kCausal,
  kAlignment,
  kHasScale,
  kScale,
  kWindowLeft,
  kWindowRight,
  kChunkSize,
  kSoftcap,
  kSharding,
  kHasAlibi,
  kHasKeyLengths,
  kHasSinks,
  kWantsDSinks,
  kHasScoreMod,
  kHasMaskMod,
  kBlockMask,  // a block mask's tiles (block_rows, 0: none)
  kBlockCols,
  kWantsLogitGrad,
  kCommon,
  kQRows = kCommon,
  kKRows,
  kHasDLse,  // a rank's own: an empty view is zero (a rank without queries has none to give)
  kError,
  kFields
};
const char* const kFieldNames[kCommon] = {"call",
                                          "scalar type",
                                          "batch (B)",
                                          "query heads (H)",
                                          "K/V heads (H_kv)",
                                          "d_k",
                                          "d_v",
                                          "Options::causal",
                                          "Options::alignment",
                                          "presence of Options::scale",
                                          "Options::scale",
                                          "Options::window_left",
                                          "Options::window_right",
                                          "Options::chunk_size",
                                          "Options::softcap",
                                          "Config::sharding",
                                          "presence of ALiBi slopes",
                                          "presence of key_lengths",
                                          "presence of Masks::sinks",
                                          "presence of BackwardTerms::d_sinks",
                                          "presence of Masks::score_mod",
                                          "presence of Masks::mask_mod",
                                          "Masks::block_mask's block_rows (0: none)",
                                          "Masks::block_mask's block_cols",
                                          "presence of BackwardTerms::logit_grad"};

/// The scalar type, as every rank must share it (BFloat16Bits and HalfBits have one size).
/// This rank's own error, as the whole message every rank will throw ("" when none): the rules
/// of the distributed calls, then the library's own check of the shard (check_shard), each
/// message naming this rank ("EigenAttention::<api>: rank r: <what>").
template <typename T>
std::string shard_error(const Call<T>& c, int rank) {
  const std::string who = std::string(c.api) + ": rank " + std::to_string(rank);
  if (!c.masks.mask.empty() || !c.masks.bias.empty()) {
    return "EigenAttention::" + who +
           ": Masks::mask and Masks::bias have no sharded meaning and are not supported by the distributed "
           "calls";
  }
  if (c.opt.diagonal_offset.has_value()) {
    return "EigenAttention::" + who +
           ": Options::diagonal_offset must be empty: the distributed calls set it from the global positions";
  }
  if (c.opt.chunk_origin != 0) {
    return "EigenAttention::" + who +
           ": Options::chunk_origin must be 0: the distributed calls set it from the global positions";
  }
  try {
    if (c.backward) {
      BackwardTerms<T> terms;
      terms.d_lse = c.d_lse, terms.d_sinks = c.d_sinks;
      EigenAttention::abi::check_shard_backward(who.c_str(), c.q, c.k, c.v, c.fwd_out, c.fwd_lse, c.d_out,
                                                c.dq, c.dk, c.dv, c.opt, c.masks, terms);
    } else {
      EigenAttention::abi::check_shard(who.c_str(), c.q, c.k, c.v, c.out, c.lse, c.opt, c.masks);
    }
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

template <typename T>
std::array<std::int64_t, kFields> signature(const Call<T>& c, bool has_error) {
  std::array<std::int64_t, kFields> s{};
  s[kApi] = fingerprint(c.api, std::strlen(c.api));
  s[kScalar] = static_cast<std::int64_t>(kScalarType<T>);
  s[kBatch] = c.q.batch, s[kHeads] = c.q.heads, s[kKvHeads] = c.k.heads, s[kDk] = c.q.dim, s[kDv] = c.v.dim;
  s[kCausal] = c.opt.causal, s[kAlignment] = static_cast<int>(c.opt.alignment);
  s[kHasScale] = c.opt.scale.has_value(), s[kScale] = bits(c.opt.scale.value_or(0.0));
  s[kWindowLeft] = c.opt.window_left, s[kWindowRight] = c.opt.window_right, s[kSoftcap] = bits(c.opt.softcap);
  s[kChunkSize] = c.opt.chunk_size;
  s[kSharding] = static_cast<int>(c.config.sharding);
  s[kHasAlibi] = c.masks.alibi_slopes != nullptr;
  s[kHasKeyLengths] = c.masks.key_lengths != nullptr;
  s[kHasSinks] = c.masks.sinks != nullptr;
  s[kHasDLse] = c.d_lse.data != nullptr;
  s[kWantsDSinks] = c.d_sinks != nullptr;
  s[kHasScoreMod] = !c.masks.score_mod.empty(), s[kHasMaskMod] = !c.masks.mask_mod.empty();
  s[kBlockMask] = c.masks.block_mask.empty() ? 0 : c.masks.block_mask.block_rows;
  s[kBlockCols] = c.masks.block_mask.empty() ? 0 : c.masks.block_mask.block_cols;
  s[kWantsLogitGrad] = !c.logit_grad.empty();
  s[kQRows] = c.q.tokens, s[kKRows] = c.k.tokens, s[kError] = has_error;
  return s;
}

/// Throws "EigenAttention::<api>: <what>": the library's one prefix.
[[noreturn]] void fail(const char* api, const std::string& what) {
  throw std::invalid_argument("EigenAttention::" + std::string(api) + ": " + what);
}

double from_bits(std::int64_t b) {
  double x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}
std::string text(double x) {
  std::ostringstream out;
  out.precision(17);
  out << x;
  return out.str();
}

/// Every rank's n values of `mine`, rank after rank (as bytes: the values are compared bitwise).
template <typename V>
std::vector<V> gather(MPI_Comm comm, const V* mine, index_t n) {
  int ranks = 1;
  MPI_Comm_size(comm, &ranks);
  std::vector<V> all(static_cast<std::size_t>(n) * static_cast<std::size_t>(ranks));
  const int bytes = static_cast<int>(sizeof(V) * static_cast<std::size_t>(n));
  MPI_Allgather(mine, bytes, MPI_BYTE, all.data(), bytes, MPI_BYTE, comm);
  return all;
}

/// Throws, naming the first entry where a rank's values differ from rank 0's, and both values.
template <typename V, class Text>
void first_difference(const char* api, const char* name, const std::vector<V>& all, int ranks, index_t n,
                      Text&& show) {
  for (int r = 1; r < ranks; ++r) {
    for (index_t i = 0; i < n; ++i) {
      const V& mine = all[static_cast<std::size_t>(r * n + i)];
      const V& first = all[static_cast<std::size_t>(i)];
      if (std::memcmp(&mine, &first, sizeof(V)) == 0) continue;
      fail(api, "every rank must call it with the same " + std::string(name) + ", but rank " +
                    std::to_string(r) + " has " + name + "[" + num(i) + "] = " + show(mine) +
                    " where rank 0 has " + show(first));
    }
  }
}

}  // namespace

index_t Geometry::max_k_rows() const {
  return k_rows.empty() ? 0 : *std::max_element(k_rows.begin(), k_rows.end());
}

/// A block mask describes the whole sequence, [1|B, 1|H, T_q, T_k] at the call's positions (those
/// of the single-process call on the whole tensors): each block call reads its classes there.
template <typename T>
void check_block_mask(const Call<T>& c, const Geometry& g) {
  const BlockMaskView& bm = c.masks.block_mask;
  if (bm.empty()) return;
  const std::string it = "masks.block_mask [" + num(bm.batch) + ", " + num(bm.heads) + ", " + num(bm.rows) +
                         ", " + num(bm.cols) + "]";
  if ((bm.batch != 1 && bm.batch != g.batch) || (bm.heads != 1 && bm.heads != g.heads) ||
      bm.rows != g.q_tokens || bm.cols != g.k_tokens) {
    fail(c.api, it + " must be [1|" + num(g.batch) + ", 1|" + num(g.heads) + ", " + num(g.q_tokens) + ", " +
                    num(g.k_tokens) + "]: the whole sequence's T_q x T_k, not a shard's");
  }
  for (index_t b = 0; b < g.batch; ++b) {
    const index_t keys = c.masks.key_lengths != nullptr ? c.masks.key_lengths[b] : g.k_tokens;
    const index_t offset = c.opt.alignment == CausalAlignment::BottomRight ? keys - g.q_tokens : 0;
    if (bm.offset != offset || bm.origin != 0) {
      fail(c.api, it + " was evaluated with query positions i + " + num(bm.offset) + " and key origin " +
                      num(bm.origin) + ", but the whole sequence's " +
                      (g.batch > 1 ? "entry " + num(b) + " has " : "are ") + "i + " + num(offset) +
                      " and 0 (build it with the call's Options and T_q x T_k)");
    }
  }
  if (c.masks.mask_mod.empty() && EigenAttention::internal::has_partial_tiles(bm))
    fail(c.api, it + " has Partial tiles, which need masks.mask_mod to decide them (none is given)");
}

template <typename T>
Geometry agree(MPI_Comm comm, const Call<T>& c) {
  Geometry g;
  MPI_Comm_rank(comm, &g.rank);
  MPI_Comm_size(comm, &g.ranks);
  const std::string mine = shard_error(c, g.rank);
  const auto sig = signature(c, !mine.empty());
  std::vector<std::int64_t> all(static_cast<std::size_t>(kFields) * static_cast<std::size_t>(g.ranks));
  MPI_Allgather(sig.data(), kFields, MPI_INT64_T, all.data(), kFields, MPI_INT64_T, comm);
  const auto at = [&](int r, int f) { return all[static_cast<std::size_t>(r) * kFields + f]; };

  // The lowest rank with an error of its own tells every rank.
  for (int r = 0; r < g.ranks; ++r) {
    if (at(r, kError) == 0) continue;
    int length = static_cast<int>(mine.size());
    MPI_Bcast(&length, 1, MPI_INT, r, comm);
    std::string what(static_cast<std::size_t>(length), ' ');
    if (g.rank == r) what = mine;
    MPI_Bcast(what.data(), length, MPI_CHAR, r, comm);
    throw std::invalid_argument(what);  // the whole message, naming rank r
  }
  for (int r = 1; r < g.ranks; ++r) {
    for (int f = 0; f < kCommon; ++f) {
      if (at(r, f) == at(0, f)) continue;
      const bool by_value = f == kBatch || f == kHeads || f == kKvHeads || f == kDk || f == kDv ||
                            f == kCausal || f == kWindowLeft || f == kWindowRight || f == kChunkSize ||
                            f == kBlockMask || f == kBlockCols;
      const bool real = f == kScale || f == kSoftcap;
      std::string what = "every rank must call it with the same " + std::string(kFieldNames[f]) +
                         ", but rank " + std::to_string(r) + "'s differs from rank 0's";
      if (by_value) what += " (" + std::to_string(at(r, f)) + " and " + std::to_string(at(0, f)) + ")";
      if (real) what += " (" + text(from_bits(at(r, f))) + " and " + text(from_bits(at(0, f))) + ")";
      fail(c.api, what);
    }
  }
  // The key lengths and ALiBi slopes themselves (their presence and sizes agree by now).
  if (c.masks.key_lengths != nullptr) {
    const auto all_lengths = gather(comm, c.masks.key_lengths, c.q.batch);
    first_difference(c.api, "key_lengths", all_lengths, g.ranks, c.q.batch,
                     [](std::int64_t x) { return std::to_string(x); });
  }
  if (c.masks.alibi_slopes != nullptr) {
    const auto all_slopes = gather(comm, c.masks.alibi_slopes, c.q.heads);
    first_difference(c.api, "alibi_slopes", all_slopes, g.ranks, c.q.heads,
                     [](T x) { return text(static_cast<double>(EigenAttention::internal::to_compute(x))); });
  }
  if (c.masks.sinks != nullptr) {
    const auto all_sinks = gather(comm, c.masks.sinks, c.q.heads);
    first_difference(c.api, "sinks", all_sinks, g.ranks, c.q.heads,
                     [](T x) { return text(static_cast<double>(EigenAttention::internal::to_compute(x))); });
  }

  // The whole sequence, identical on every rank from here on: so is any error below.
  g.batch = c.q.batch, g.heads = c.q.heads, g.kv_heads = c.k.heads, g.d_k = c.q.dim, g.d_v = c.v.dim;
  for (int r = 0; r < g.ranks; ++r) {
    g.q_rows.push_back(at(r, kQRows));
    g.k_rows.push_back(at(r, kKRows));
    g.any_d_lse = g.any_d_lse || at(r, kHasDLse) != 0;
  }
  g.q_tokens = std::accumulate(g.q_rows.begin(), g.q_rows.end(), index_t(0));
  g.k_tokens = std::accumulate(g.k_rows.begin(), g.k_rows.end(), index_t(0));
  for (int r = 0; r < g.ranks; ++r) {
    if (c.config.sharding == Sharding::Contiguous) {
      const index_t q0 = std::accumulate(g.q_rows.begin(), g.q_rows.begin() + r, index_t(0));
      const index_t k0 = std::accumulate(g.k_rows.begin(), g.k_rows.begin() + r, index_t(0));
      g.q_segments.push_back({Segment{q0, 0, g.q_rows[static_cast<std::size_t>(r)]}});
      g.k_segments.push_back({Segment{k0, 0, g.k_rows[static_cast<std::size_t>(r)]}});
      continue;
    }
    for (const auto& [name, rows, total] :
         {std::tuple{"Q", g.q_rows[static_cast<std::size_t>(r)], g.q_tokens},
          std::tuple{"K", g.k_rows[static_cast<std::size_t>(r)], g.k_tokens}}) {
      const index_t want = zigzag_rows(total, g.ranks, r);
      if (rows != want) {
        fail(c.api, "Sharding::ZigZag: rank " + std::to_string(r) + "'s " + name + " shard has " +
                        EigenAttention::internal::counted(rows, "row") + ", but its two chunks of the " +
                        EigenAttention::internal::counted(total, "token") + " over " +
                        EigenAttention::internal::counted(g.ranks, "rank") + " have " + num(want) +
                        " (see zigzag_rows)");
      }
    }
    g.q_segments.push_back(shard_segments(Sharding::ZigZag, g.q_tokens, g.ranks, r));
    g.k_segments.push_back(shard_segments(Sharding::ZigZag, g.k_tokens, g.ranks, r));
  }
  if (c.masks.key_lengths != nullptr) {
    for (index_t b = 0; b < g.batch; ++b) {
      const std::int64_t length = c.masks.key_lengths[b];
      if (length < 0 || length > g.k_tokens) {
        fail(c.api, "key_lengths[" + num(b) + "] = " + std::to_string(length) +
                        " is outside [0, T_k = " + num(g.k_tokens) + "] (T_k of the whole sequence)");
      }
    }
  }
  check_block_mask(c, g);
  if (c.ulysses && g.heads % g.ranks != 0) {
    fail(c.api, "Ulysses needs the query heads divisible by the ranks: H = " + num(g.heads) + ", ranks = " +
                    std::to_string(g.ranks) + " (ring_attention_heads_into has no such limit)");
  }
  return g;
}

template Geometry agree<float>(MPI_Comm, const Call<float>&);
template Geometry agree<double>(MPI_Comm, const Call<double>&);
template Geometry agree<BFloat16Bits>(MPI_Comm, const Call<BFloat16Bits>&);
template Geometry agree<HalfBits>(MPI_Comm, const Call<HalfBits>&);

template <typename T>
void sum_sinks_over_ranks(const Call<T>& c, const OwnComm& comm, const std::vector<T>& mine) {
  if (c.d_sinks == nullptr) return;  // the same on every rank (agree())
  const index_t H = c.q.heads;
  const std::vector<T> all = gather(comm.get(), mine.data(), H);
  for (index_t h = 0; h < H; ++h) {
    T sum = all[static_cast<std::size_t>(h)];
    for (int r = 1; r < comm.size(); ++r) sum += all[static_cast<std::size_t>(r * H + h)];
    c.d_sinks[h] = sum;
  }
}

template void sum_sinks_over_ranks<float>(const Call<float>&, const OwnComm&, const std::vector<float>&);
template void sum_sinks_over_ranks<double>(const Call<double>&, const OwnComm&, const std::vector<double>&);

template <typename T>
Widened<T>::Widened(const Call<T>& c) : c_(c) {
  call_.api = c.api, call_.backward = c.backward, call_.ulysses = c.ulysses;
  call_.opt = c.opt, call_.config = c.config;
  call_.q = widen(c.q), call_.k = widen(c.k), call_.v = widen(c.v);
  call_.masks.key_lengths = c.masks.key_lengths;
  if (c.masks.alibi_slopes != nullptr) {
    keep_.emplace_back(static_cast<std::size_t>(c.q.heads));
    for (index_t h = 0; h < c.q.heads; ++h)
      keep_.back()[static_cast<std::size_t>(h)] =
          EigenAttention::internal::to_compute(c.masks.alibi_slopes[h]);
    call_.masks.alibi_slopes = keep_.back().data();
  }
  if (c.masks.sinks != nullptr) {
    keep_.emplace_back(static_cast<std::size_t>(c.q.heads));
    for (index_t h = 0; h < c.q.heads; ++h)
      keep_.back()[static_cast<std::size_t>(h)] = EigenAttention::internal::to_compute(c.masks.sinks[h]);
    call_.masks.sinks = keep_.back().data();
  }
  if (c.backward) {
    call_.fwd_out = widen(c.fwd_out), call_.fwd_lse = c.fwd_lse, call_.d_out = widen(c.d_out);
    call_.d_lse = c.d_lse, call_.d_sinks = c.d_sinks;
    call_.dq = scratch(c.dq), call_.dk = scratch(c.dk), call_.dv = scratch(c.dv);
  } else {
    call_.out = scratch(c.out), call_.lse = c.lse;
  }
}

template <typename T>
HeadsView<const float> Widened<T>::widen(HeadsView<const T> v) {
  const HeadsView<float> w = scratch(HeadsView<T>{nullptr, v.batch, v.heads, v.tokens, v.dim});
  for (index_t b = 0; b < v.batch; ++b)
    for (index_t h = 0; h < v.heads; ++h)
      for (index_t t = 0; t < v.tokens; ++t) {
        const T* s = v.data + b * v.batch_stride + h * v.head_stride + t * v.token_stride;
        float* d = w.data + b * w.batch_stride + h * w.head_stride + t * w.token_stride;
        for (index_t i = 0; i < v.dim; ++i) d[i] = EigenAttention::internal::to_compute(s[i * v.dim_stride]);
      }
  return w;
}

template <typename T>
HeadsView<float> Widened<T>::scratch(const HeadsView<T>& v) {
  keep_.emplace_back(static_cast<std::size_t>(v.batch * v.heads * v.tokens * v.dim));
  return HeadsView<float>::bhtd(keep_.back().data(), v.batch, v.heads, v.tokens, v.dim);
}

template <typename T>
void Widened<T>::narrow() const {
  const auto round = [](HeadsView<const float> src, HeadsView<T> dst) {
    for (index_t b = 0; b < src.batch; ++b)
      for (index_t h = 0; h < src.heads; ++h)
        for (index_t t = 0; t < src.tokens; ++t) {
          const float* s = src.data + b * src.batch_stride + h * src.head_stride + t * src.token_stride;
          T* d = dst.data + b * dst.batch_stride + h * dst.head_stride + t * dst.token_stride;
          for (index_t i = 0; i < src.dim; ++i)
            d[i * dst.dim_stride] = EigenAttention::internal::from_compute<T>(s[i]);
        }
  };
  if (c_.backward) {
    round(call_.dq, c_.dq), round(call_.dk, c_.dk), round(call_.dv, c_.dv);
  } else {
    round(call_.out, c_.out);
  }
}

template class Widened<BFloat16Bits>;
template class Widened<HalfBits>;

OwnComm::OwnComm(MPI_Comm comm) {
  MPI_Comm_dup(comm, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}
OwnComm::~OwnComm() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

template <>
MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}

namespace {
constexpr index_t kChunk = index_t(1) << 30;

/// Calls post(first, count, tag) for each message of at most kChunk elements of n, tags tag,
/// tag + 16, ...: one (empty) message for n = 0, so that the receiver's count always matches.
template <class Post>
void in_chunks(index_t n, int tag, Post&& post) {
  index_t first = 0;
  do {
    post(first, static_cast<int>(std::min(kChunk, n - first)), tag);
    first += kChunk;
    tag += 16;
  } while (first < n);
}

}  // namespace

template <typename T>
void isend(const T* data, index_t n, int to, int tag, MPI_Comm comm, std::vector<MPI_Request>& requests) {
  in_chunks(n, tag, [&](index_t first, int count, int t) {
    requests.emplace_back();
    MPI_Isend(data + first, count, mpi_type<T>(), to, t, comm, &requests.back());
  });
}
template <typename T>
void irecv(T* data, index_t n, int from, int tag, MPI_Comm comm, std::vector<MPI_Request>& requests) {
  in_chunks(n, tag, [&](index_t first, int count, int t) {
    requests.emplace_back();
    MPI_Irecv(data + first, count, mpi_type<T>(), from, t, comm, &requests.back());
  });
}
template void isend<float>(const float*, index_t, int, int, MPI_Comm, std::vector<MPI_Request>&);
template void isend<double>(const double*, index_t, int, int, MPI_Comm, std::vector<MPI_Request>&);
template void irecv<float>(float*, index_t, int, int, MPI_Comm, std::vector<MPI_Request>&);
template void irecv<double>(double*, index_t, int, int, MPI_Comm, std::vector<MPI_Request>&);

double wait_all(std::vector<MPI_Request>& requests) {
  if (requests.empty()) return 0;
  const double start = MPI_Wtime();
  MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
  requests.clear();
  return MPI_Wtime() - start;
}

void test_all(std::vector<MPI_Request>& requests) {
  if (requests.empty()) return;
  int done = 0;
  MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
}

BlockMask block_mask(const Options& opt, index_t q_tokens, index_t key_length, const Segment& q,
                     const Segment& k) {
  const index_t aligned = opt.alignment == CausalAlignment::BottomRight ? key_length - q_tokens : 0;
  return {aligned + q.global_first - k.global_first,
          std::clamp<index_t>(key_length - k.global_first, 0, k.count), k.global_first};
}

index_t visible_pairs(const Options& opt, index_t rows, const BlockMask& m) {
  const EigenAttention::internal::KeyRange keys{m.keys,          m.diagonal_offset, opt.causal,
                                                opt.window_left, opt.window_right,  opt.chunk_size,
                                                m.chunk_origin};
  index_t pairs = 0;
  for (index_t i = 0; i < rows; ++i) pairs += keys.end_key(i) - keys.first_key(i);
  return pairs;
}

}  // namespace internal
}  // namespace distributed
}  // namespace EigenAttention
