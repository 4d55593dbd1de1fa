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
  MatrixView<const T> q;  // T_q x (H d_k)
  MatrixView<T> out;      // T_q x (H d_v)
  MatrixView<T> lse;      // T_q x H, when want_lse
  bool want_lse = false;
  const std::int64_t* cu_q = nullptr;  // batch + 1 offsets into the rows of q
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
/// every page index lies in the pool), in the order of make_problem, and returns it resolved.
/// \throws std::invalid_argument naming `api`, the argument and its shape; nothing is written then.
template <typename T>
DecodeProblem<T> make_decode_problem(const char* api, const compiled::RawPagedKV& kv,
                                     const PagedSequence* sequences, index_t batch,
                                     const compiled::DecodeArgs<T>& args, const Options& opt);

/// Validates and runs a decode call on `batch` sequences of pages (decode.cpp): the one path of
/// both front doors.
template <typename T>
void decode(const char* api, const compiled::RawPagedKV& kv, const PagedSequence* sequences, index_t batch,
            const compiled::DecodeArgs<T>& args, const Options& opt);

/// Runs a validated decode problem (decode.cpp).
template <typename T>
void execute_decode(const DecodeProblem<T>& p);

/// The reference decode (kernels/reference_decode.cpp): each sequence's keys and values of each
/// KV head gathered into plain matrices, and the forward's reference kernel on every query head.
template <typename T>
void reference_decode(const DecodeProblem<T>& p);

}  // namespace internal
}  // namespace EigenAttention
