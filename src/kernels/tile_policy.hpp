// SPDX-License-Identifier: MIT
// The tile sizes of the tiled kernels, in one place: chosen at run time from the CPU's cache
// sizes and the head dims, never from constants fitted to one host. Plain functions on plain
// types, defined once in tile_policy.cpp (compiled for the baseline, as the kernels' callees must
// be: an inline function would be compiled into every kernel's translation unit with its own
// flags, test/isa_symbols.cmake), so that every kernel computes the same tiles. Internal.
//
// The fused forward works on one strip of MR query rows (micro_kernel.hpp) at a time against a
// key tile of `keys` keys, whose K panels (keys x d_k) and V rows (keys x d_v) every strip of the
// query tile reads again: they are sized to stay in L2 together (half of it, the rest for the
// query tile, its accumulator and the next tile's inputs), and the strip's logits (MR x keys)
// to stay in L1 (half of it, the rest for the panel of K and the rows of V streaming through: a
// quarter measured 1-4 % slower on a Zen 5 EPYC, the per-tile work of the online softmax spread
// over half as many keys; 384 and 768 keys measured alike on an Intel Xeon).
#pragma once

#include "kernels/abi.hpp"

namespace EigenAttention {
namespace internal {

/// The data cache sizes of the CPU we run on, in bytes: Eigen's l1CacheSize() and
/// l2CacheSize(), which read CPUID's cache leaves on Intel and AMD (with Eigen's defaults
/// elsewhere). Queried once (tile_policy.cpp).
struct CacheSizes {
  index_t l1, l2;
};
CacheSizes cache_sizes();

/// The most keys of one key tile (the kernels' scratch holds a few such tiles: tiled.hpp).
constexpr index_t kMaxKeyTile = 1024;

/// The most bytes of one query tile's weights that the backward holds from its first step to its
/// third (backward.hpp: kBackwardRows rows of T_k keys, 544 bytes a key in float, 1056 in double,
/// so up to T_k of about 123000 in float, 63000 in double); beyond, each key tile's weights are
/// computed again for the third step, in one block per thread. A bound on the workspace, not a
/// cache size: on a 2-core EPYC (32 MiB L3), weights of 36 MB held at T = 65536, d = 64 ran 7 %
/// faster (150.8 against 140.4 GFLOP/s) than computed again, though they no longer fit L3.
constexpr index_t kMaxHeldWeightsBytes = index_t(64) << 20;

/// The fused forward's tiles for one call.
struct ForwardTiles {
  index_t keys;  ///< keys per key tile: a whole number of panels (`panel` keys each)
};

/// The fused forward's tiles for head dims d_k and d_v (d_v rounded up to whole packets), strips
/// of `strip_rows` rows and key panels of `panel` keys, elements of `element` bytes, on a CPU
/// with caches `c`. At least one panel, at most kMaxKeyTile keys.
ForwardTiles forward_tiles(const CacheSizes& c, index_t dk, index_t dv, index_t strip_rows, index_t panel,
                           index_t element);

/// Does a decode chunk of `rows` query rows (heads x tokens) stream through its keys and values
/// (kernels/decode.hpp), rather than go through Eigen's GEMM? Up to kStreamRows rows, while the
/// rows' d_v accumulators, which the value pass reads and writes for every few value rows, fit
/// in a quarter of L1: MLA's d_v = 512 in float ran 1.4x (8 heads, 16 KiB) and 1.35x (16 heads)
/// faster through the GEMM on a Zen 5 EPYC (48 KiB L1; bench/results/issue26_mla.txt), while GQA
/// groups of d = 128 (at most 8 KiB at 16 rows) stream.
constexpr index_t kStreamRows = 16;
bool decode_streams(const CacheSizes& c, index_t rows, index_t dv, index_t element);

}  // namespace internal
}  // namespace EigenAttention
