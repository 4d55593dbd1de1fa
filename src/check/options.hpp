// SPDX-License-Identifier: MIT
// Options, checked here and nowhere else; the limits every call's sizes share; packed-sequence
// offsets. Internal to the library (src/check/).
#pragma once

#include <cstdint>

#include <EigenAttention/Kernels.hpp>
#include <EigenAttention/Options.hpp>

#include "check/array.hpp"
#include "kernels/abi.hpp"

namespace EigenAttention {
namespace internal {

/// Options as the kernels use them: the scale and soft-cap in the compute type C, the kernel
/// resolved (never Auto).
template <typename C>
struct ResolvedOptions {
  C scale = 0, softcap = 0;
  bool causal = false, bottom_right = false;
  bool fixed_offset = false;  // Options::diagonal_offset was set: offset is used as given
  index_t offset = 0;
  index_t window_left = -1, window_right = -1;
  index_t chunk = 0, chunk_origin = 0;
  Kernel kernel = Kernel::Auto;
};

/// Checks Options::threads (>= 0): the only option of a call that takes no other
/// (merge_attention_into); check_options checks it too.
void check_threads(const char* api, const Options& opt);

/// Checks scale (or d_k, the last size of `q`, for the default 1/sqrt(d_k)), threads, window,
/// soft-cap, diagonal offset and kernel.
template <typename C>
ResolvedOptions<C> check_options(const char* api, const Options& opt, const Array& q);

/// The longest row (d_k, d_v or T_k) the tiled kernels' per-thread scratch can count: fewer
/// than kScratchRows rows of it (plus constants below kScratchRows^2) must stay representable
/// in bytes (kScratchRows is in kernels/abi.hpp, where the kernels check their tiles against
/// it). Every call rejects larger sizes alike.
template <typename C>
constexpr index_t kMaxScratchRowLength =
    std::numeric_limits<index_t>::max() / (kScratchRows * static_cast<index_t>(sizeof(C))) - kScratchRows;

/// Throws when d_k, d_v or T_k exceed kMaxScratchRowLength<C>.
template <typename C>
void check_scratch(const char* api, index_t dk, index_t dv, index_t tk);

/// Offsets cu[0..sequences] start at 0, never decrease and end within `total` (when >= 0).
void check_offsets(const char* api, const char* name, const std::int64_t* cu, index_t sequences,
                   index_t total);

/// A number of sequences that is >= 0 and whose batch + 1 offsets are countable in bytes.
void check_sequence_count(const char* api, index_t sequences);

}  // namespace internal
}  // namespace EigenAttention
