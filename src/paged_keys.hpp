// SPDX-License-Identifier: MIT
// Paged keys and values: the input form of the one pipeline that decode calls take (KVCache.hpp).
// The sequences of a PagedKVCache's pool or of a caller's PagedKVView, as a Call's `paged` part
// (check/call.hpp) and a validated Problem's (problem.hpp); and the decode execution that reads
// them (decode.cpp, kernels/reference_decode.cpp). Internal to the library.
#pragma once

#include <cstdint>
#include <shared_mutex>
#include <vector>

#include <EigenAttention/KVCache.hpp>

#include "index.hpp"

namespace EigenAttention {
namespace internal {

/// Sequence b of a decode call: its page indices, in token order, and its length in tokens.
struct PagedSequence {
  const std::int32_t* pages;
  index_t length;
};

/// The keys and values of a decode call: `batch` sequences over the pages `kv`, and the ALiBi
/// slopes (H of them, or null), which decode takes in the compute type C (Masks<C> of the public
/// calls).
template <typename C>
struct PagedKeys {
  abi::PagedKV kv;  // storage, sizes and strides (block_tables, lengths: see sequences)
  const PagedSequence* sequences = nullptr;
  index_t batch = 0;
  const C* alibi_slopes = nullptr;
  const C* sinks = nullptr;  // Masks::sinks, one per query head
  // Masks::mask as a tree mask (speculative decoding): [B or 1, H or 1, M, M], element (b, h, i, j)
  // relating sequence b's query i to its j-th new token (key T_k - T_q + j).
  BroadcastView<bool> tree;
};

/// Checks a PagedKVView's batch, block tables and lengths, and makes `sequences` its batch
/// sequences. \throws std::invalid_argument naming `api`.
void paged_view_sequences(const char* api, const abi::PagedKV& kv, std::vector<PagedSequence>& sequences);

/// Finds the `batch` sequences `ids` of a cache's pool (whose lock the caller holds shared) and
/// makes `sequences` them. \throws std::invalid_argument naming `api` and a stale or unknown id.
void pool_sequences(const char* api, const abi::KVPool& pool, const std::int32_t* ids, index_t batch,
                    std::vector<PagedSequence>& sequences);

/// The pool's lock, held shared: by a decode call while it reads the pool's pages and sequences
/// (appends, forks, truncations and releases take it exclusively).
std::shared_lock<std::shared_mutex> pool_lock(const abi::KVPool& pool);

}  // namespace internal
}  // namespace EigenAttention
