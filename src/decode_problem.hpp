// SPDX-License-Identifier: MIT
// One validated decode call (KVCache.hpp): query rows of a batch of sequences against their
// paged keys and values, as decode.cpp runs it. Both front doors (a PagedKVCache and a caller's
// PagedKVView) become one DecodeProblem. Internal to the library.
#pragma once

#include <cstdint>
#include <vector>

#include <EigenAttention/KVCache.hpp>
#include <EigenAttention/Kernels.hpp>

#include "kernels/abi.hpp"

namespace EigenAttention {
namespace internal {

/// Bytes of one stored element (0 for a value that is no KVStorage).
inline index_t kv_storage_bytes(KVStorage s) {
  switch (s) {
    case KVStorage::Float32:
      return 4;
    case KVStorage::Float64:
      return 8;
    case KVStorage::BFloat16:
    case KVStorage::Float16:
      return 2;
  }
  return 0;
}

/// Sequence b of a decode call: its page indices, in token order, and its length in tokens.
struct PagedSequence {
  const std::int32_t* pages;
  index_t length;
};

template <typename T>
struct DecodeProblem {
  compiled::RawPagedKV kv;  // storage, sizes and strides (block_tables, lengths: see sequences)
  const PagedSequence* sequences = nullptr;
  index_t batch = 0;
  HeadsView<const T> q;  // [1, H, T_q, d_k]
  HeadsView<T> out;      // [1, H, T_q, d_v]
  HeadsView<T> lse;      // [1, H, T_q, 1], when want_lse
  bool want_lse = false;
  const std::int64_t* cu_q = nullptr;  // batch + 1 offsets into the tokens of q
  const T* alibi_slopes = nullptr;     // H of them, or null
  index_t heads = 0, group = 0;        // H, and H / kv_heads
  T scale = 0, softcap = 0;
  bool causal = false;
  index_t window_left = -1, window_right = -1;
  Kernel kernel = Kernel::Auto;  // resolved
  int threads = 1;               // as asked (Options::threads)
};

/// Checks a PagedKVView's batch, block tables and lengths, and makes `sequences` its batch
/// sequences. \throws std::invalid_argument naming `api`.
void paged_view_sequences(const char* api, const compiled::RawPagedKV& kv,
                          std::vector<PagedSequence>& sequences);

/// Checks everything else about a decode call (queries, offsets, outputs, options, and that
/// every page index lies in the pool), in the order of make_problem, and returns it resolved. For
/// 16-bit queries (S = BFloat16Bits, HalfBits) the problem's q and out are left empty: decode()
/// points them at float copies. \throws std::invalid_argument naming `api`, the argument and its
/// shape; nothing is written then.
template <typename S>
DecodeProblem<ComputeScalar<S>> make_decode_problem(const char* api, const compiled::RawPagedKV& kv,
                                                    const PagedSequence* sequences, index_t batch,
                                                    const compiled::DecodeArgs<S>& args, const Options& opt);

/// Validates and runs a decode call on `batch` sequences of pages (decode.cpp): the one path of
/// both front doors. S: the queries' type (16-bit queries are widened to float and the result
/// rounded back).
template <typename S>
void decode(const char* api, const compiled::RawPagedKV& kv, const PagedSequence* sequences, index_t batch,
            const compiled::DecodeArgs<S>& args, const Options& opt);

/// Runs a validated decode problem (decode.cpp).
template <typename T>
void execute_decode(const DecodeProblem<T>& p);

/// The reference decode (kernels/reference_decode.cpp): each sequence's keys and values of each
/// KV head gathered into plain matrices, and the forward's reference kernel on every query head.
template <typename T>
void reference_decode(const DecodeProblem<T>& p);

}  // namespace internal
}  // namespace EigenAttention
