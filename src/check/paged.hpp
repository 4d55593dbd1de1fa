// SPDX-License-Identifier: MIT
// The checks of a call on paged keys and values (a decode call: Call::paged), the steps of
// make_problem (call.hpp) that differ from a call on K and V views. Internal to the library
// (src/check/).
#pragma once

#include "check/array.hpp"
#include "check/call.hpp"
#include "check/options.hpp"

namespace EigenAttention {
namespace internal {

/// The pages (storage type against the queries', sizes, every page index in the pool), then the
/// queries [1, H, T_q, d_k] and each sequence's offsets into their tokens (cu_seqlens_q), then the
/// ALiBi slopes; each added to `inputs` for the memory checks.
template <typename T>
void check_paged_inputs(const Call<T>& c, InputList& inputs);

/// The options of a decode call: as any call's (check_options), but the queries' positions come
/// from the cache (bottom-right alignment; Options::diagonal_offset throws).
template <typename T>
ResolvedOptions<ComputeScalar<T>> check_paged_options(const Call<T>& c, const Options& opt);

}  // namespace internal
}  // namespace EigenAttention
