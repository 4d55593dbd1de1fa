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

#include <EigenAttention/Compiled.hpp>

#include "text.hpp"

namespace EigenAttention {
namespace distributed {
namespace internal {
namespace {

std::string num(index_t n) { return std::to_string(n); }

template <typename T>
std::string shape(const HeadsView<T>& v) {
  return "[" + num(v.batch) + ", " + num(v.heads) + ", " + num(v.tokens) + ", " + num(v.dim) + "]";
}

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
  kSoftcap,
  kSharding,
  kHasAlibi,
  kHasKeyLengths,
  kCommon,
  kQRows = kCommon,
  kKRows,
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
                                          "Options::softcap",
                                          "Config::sharding",
                                          "presence of ALiBi slopes",
                                          "presence of key_lengths"};

/// Half-open byte range a view's elements lie in (empty for an empty view).
template <typename T>
std::pair<std::uintptr_t, std::uintptr_t> extent(const HeadsView<T>& v) {
  if (v.data == nullptr || v.batch <= 0 || v.heads <= 0 || v.tokens <= 0 || v.dim <= 0) return {0, 0};
  index_t lo = 0, hi = 0;
  for (const auto& [n, s] : {std::pair{v.batch, v.batch_stride}, std::pair{v.heads, v.head_stride},
                             std::pair{v.tokens, v.token_stride}, std::pair{v.dim, v.dim_stride}}) {
    (s < 0 ? lo : hi) += (n - 1) * s;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(v.data);
  return {base + lo * static_cast<index_t>(sizeof(T)), base + (hi + 1) * static_cast<index_t>(sizeof(T))};
}

template <typename A, typename B>
bool overlap(const HeadsView<A>& a, const HeadsView<B>& b) {
  const auto x = extent(a), y = extent(b);
  return x.first < x.second && y.first < y.second && x.first < y.second && y.first < x.second;
}

/// This rank's own errors, as a message ("" when none).
template <typename T>
std::string local_error(const Call<T>& c) {
  const index_t B = c.q.batch, H = c.q.heads, Hkv = c.k.heads, tq = c.q.tokens, tk = c.k.tokens;
  const index_t dk = c.q.dim, dv = c.v.dim;
  struct Named {
    const char* name;
    HeadsView<const T> view;
    bool output;
    index_t b, h, t, d;
  };
  std::vector<Named> views = {
      {"Q", c.q, false, B, H, tq, dk}, {"K", c.k, false, B, Hkv, tk, dk}, {"V", c.v, false, B, Hkv, tk, dv}};
  if (!c.backward) {
    views.push_back({"attn", c.out, true, B, H, tq, dv});
    if (!c.lse.empty()) views.push_back({"lse", c.lse, true, B, H, tq, 1});
  } else {
    views.push_back({"attn", c.fwd_out, false, B, H, tq, dv});
    views.push_back({"lse", c.fwd_lse, false, B, H, tq, 1});
    views.push_back({"d_attn", c.d_out, false, B, H, tq, dv});
    views.push_back({"dq", c.dq, true, B, H, tq, dk});
    views.push_back({"dk", c.dk, true, B, Hkv, tk, dk});
    views.push_back({"dv", c.dv, true, B, Hkv, tk, dv});
  }
  for (const Named& n : views) {
    const auto& v = n.view;
    if (v.batch < 0 || v.heads < 0 || v.tokens < 0 || v.dim < 0)
      return std::string(n.name) + " is " + shape(v) + ": sizes must be >= 0";
    if (v.batch != n.b || v.heads != n.h || v.tokens != n.t || v.dim != n.d) {
      return std::string(n.name) + " is " + shape(v) + " but must be [" + num(n.b) + ", " + num(n.h) + ", " +
             num(n.t) + ", " + num(n.d) + "] (Q is " + shape(c.q) + ", K " + shape(c.k) + ", V " +
             shape(c.v) + ")";
    }
    if (v.data == nullptr && v.batch != 0 && v.heads != 0 && v.tokens != 0 && v.dim != 0)  // no product
      return std::string(n.name) + " is " + shape(v) + " but its data is null";
  }
  if ((Hkv == 0) != (H == 0) || (Hkv > 0 && H % Hkv != 0))
    return "H = " + num(H) + " query heads must be a multiple of H_kv = " + num(Hkv) + " K/V heads";
  for (const Named& o : views) {
    if (!o.output) continue;
    for (const Named& n : views) {
      if (&n == &o || (n.output && &n > &o)) continue;
      if (overlap(o.view, n.view))
        return std::string(o.name) + " overlaps " + n.name +
               " (outputs must not overlap inputs or each other)";
    }
  }
  if (!c.masks.mask.empty() || !c.masks.bias.empty())
    return "Masks::mask and Masks::bias have no sharded meaning and are not supported by the distributed "
           "calls";
  if (c.opt.diagonal_offset.has_value())
    return "Options::diagonal_offset must be empty: the distributed calls set it from the global positions";
  try {  // the options, as the single-process calls check them
    std::vector<T> zeros(static_cast<std::size_t>(std::max<index_t>({1, dk, dv})), T(0));
    const MatrixView<const T> qm{zeros.data(), 1, dk, dk, 1}, vm{zeros.data(), 1, dv, dv, 1};
    compiled::validate(c.api, qm, qm, &vm, nullptr, nullptr, nullptr, c.opt, {});
  } catch (const std::invalid_argument& e) {
    std::string what = e.what();
    const std::string prefix = std::string(c.api) + ": ";
    if (what.compare(0, prefix.size(), prefix) == 0) what.erase(0, prefix.size());
    return what;
  }
  return "";
}

template <typename T>
std::array<std::int64_t, kFields> signature(const Call<T>& c, bool has_error) {
  std::array<std::int64_t, kFields> s{};
  s[kApi] = fingerprint(c.api, std::strlen(c.api));
  s[kScalar] = sizeof(T);
  s[kBatch] = c.q.batch, s[kHeads] = c.q.heads, s[kKvHeads] = c.k.heads, s[kDk] = c.q.dim, s[kDv] = c.v.dim;
  s[kCausal] = c.opt.causal, s[kAlignment] = static_cast<int>(c.opt.alignment);
  s[kHasScale] = c.opt.scale.has_value(), s[kScale] = bits(c.opt.scale.value_or(0.0));
  s[kWindowLeft] = c.opt.window_left, s[kWindowRight] = c.opt.window_right, s[kSoftcap] = bits(c.opt.softcap);
  s[kSharding] = static_cast<int>(c.config.sharding);
  s[kHasAlibi] = c.masks.alibi_slopes != nullptr;
  s[kHasKeyLengths] = c.masks.key_lengths != nullptr;
  s[kQRows] = c.q.tokens, s[kKRows] = c.k.tokens, s[kError] = has_error;
  return s;
}

[[noreturn]] void fail(const char* api, const std::string& what) {
  throw std::invalid_argument(std::string(api) + ": " + what);
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

template <typename T>
Geometry agree(MPI_Comm comm, const Call<T>& c) {
  Geometry g;
  MPI_Comm_rank(comm, &g.rank);
  MPI_Comm_size(comm, &g.ranks);
  const std::string mine = local_error(c);
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
    fail(c.api, "rank " + std::to_string(r) + ": " + what);
  }
  for (int r = 1; r < g.ranks; ++r) {
    for (int f = 0; f < kCommon; ++f) {
      if (at(r, f) == at(0, f)) continue;
      const bool by_value = f == kBatch || f == kHeads || f == kKvHeads || f == kDk || f == kDv ||
                            f == kCausal || f == kWindowLeft || f == kWindowRight;
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
                     [](T x) { return text(static_cast<double>(x)); });
  }

  // The whole sequence, identical on every rank from here on: so is any error below.
  g.batch = c.q.batch, g.heads = c.q.heads, g.kv_heads = c.k.heads, g.d_k = c.q.dim, g.d_v = c.v.dim;
  for (int r = 0; r < g.ranks; ++r) {
    g.q_rows.push_back(at(r, kQRows));
    g.k_rows.push_back(at(r, kKRows));
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
  if (c.ulysses && g.heads % g.ranks != 0) {
    fail(c.api, "Ulysses needs the query heads divisible by the ranks: H = " + num(g.heads) + ", ranks = " +
                    std::to_string(g.ranks) + " (ring_attention_heads_into has no such limit)");
  }
  return g;
}

template Geometry agree<float>(MPI_Comm, const Call<float>&);
template Geometry agree<double>(MPI_Comm, const Call<double>&);

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
          std::clamp<index_t>(key_length - k.global_first, 0, k.count)};
}

index_t visible_pairs(const Options& opt, index_t rows, const BlockMask& m) {
  index_t pairs = 0;
  for (index_t i = 0; i < rows; ++i) {
    const index_t c = i + m.diagonal_offset;  // the diagonal key, in the block's key numbering
    index_t lo = 0, hi = m.keys;
    if (opt.window_left >= 0 && opt.window_left < c) lo = c - opt.window_left;  // no overflow
    if (opt.causal) hi = std::min(hi, c + 1);
    if (opt.window_right >= 0 && opt.window_right < m.keys - c) hi = std::min(hi, c + opt.window_right + 1);
    if (hi > lo) pairs += hi - lo;
  }
  return pairs;
}

}  // namespace internal
}  // namespace distributed
}  // namespace EigenAttention
