// SPDX-License-Identifier: MIT
// The bf16 pairs of the fused forward (micro_kernel.hpp) on AMX tiles: the amx kernel's Q Kᵀ and
// P V strips, 16 query rows at a time. Internal; compiled only into tiled_amx.cpp (kernels.cmake:
// -mamx-tile -mamx-bf16), after micro_kernel.hpp.
//
// A tile register holds up to 16 rows of 64 bytes. tdpbf16ps C += A B takes A as 16 rows of 16
// pairs (32 bf16 elements along the depth), B as 16 rows of 16 pairs, row k holding pair k of 16
// columns, and adds to each float of C the 32 products of its row of A and its column of B. The
// pairs' layouts are micro_kernel.hpp's, so the tiles load them as they are:
//   - Q Kᵀ: A = 16 query rows of pairs, B = 16 pair rows of a key panel (NR keys per row, 16 of
//     them per tile), C = 16 rows x 16 keys of logits;
//   - P V: A = 16 rows of weights as pairs of consecutive keys, B = 16 pairs of V rows (a row of
//     ldo columns each), C = 16 rows x 16 columns of the output accumulator.
// Depths go by whole blocks of 16 pairs: the caller pads with pairs of zeros (products 0, exact)
// and gives rows past its strip as zeros, whose logits it never reads. Each product is exact in
// float; the tile adds them in float, rounding to nearest even whatever MXCSR says, reading
// subnormal inputs and writing subnormal results as 0 (as vdpbf16ps). Each element of C is one
// chain of operations in a fixed order, whatever the tile's place or the thread.
#pragma once

#if !defined(__AMX_TILE__) || !defined(__AMX_BF16__)
#error "amx.hpp needs -mamx-tile -mamx-bf16 (kernels.cmake sets them for tiled_amx.cpp only)"
#endif

#include <immintrin.h>

#include "kernels/micro_kernel.hpp"

namespace EigenAttention {
namespace internal {
namespace {

/// Pairs per tile row: a block of the depth.
constexpr index_t kAmxDepth = 16;
/// Rows of a tile: the strip of query rows.
constexpr index_t kAmxRows = 16;

/// The tile configuration: palette 1, every tile 16 rows of 64 bytes. Static, as
/// _tile_loadconfig reads its 64 bytes through a pointer that GCC 12 declares to point to 8.
struct alignas(64) AmxConfig {
  std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
  std::uint16_t bytes_per_row[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  std::uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
static_assert(sizeof(AmxConfig) == 64, "the tile configuration is 64 bytes");

/// The tiles configured for this thread while it lives, released after (the OS then saves and
/// restores no tile state for it). One per kernel call, on the thread that runs it.
class AmxTiles {
 public:
  AmxTiles() {
    static const AmxConfig config;
    _tile_loadconfig(&config);
  }
  ~AmxTiles() { _tile_release(); }
  AmxTiles(const AmxTiles&) = delete;
  AmxTiles& operator=(const AmxTiles&) = delete;
};

/// C (16 rows x N tiles of 16 columns, row stride ldc) = A B (Accumulate false) or C += A B
/// (true) over `depth` pairs (a whole number of kAmxDepth): A 16 rows of pairs (row stride lda
/// pairs), B depth rows of pairs (row stride ldb pairs). Tiles 0 to N-1: C, 3: A, 4-6: B.
template <int N, bool Accumulate>
inline void amx_product_tiles(index_t depth, const Pair* a, index_t lda, const Pair* b, index_t ldb, float* c,
                              index_t ldc) {
  static_assert(N >= 1 && N <= 3, "at most three C tiles");
  const int a_bytes = static_cast<int>(lda * sizeof(Pair)), b_bytes = static_cast<int>(ldb * sizeof(Pair)),
            c_bytes = static_cast<int>(ldc * sizeof(float));
  if constexpr (Accumulate) {
    _tile_loadd(0, c, c_bytes);
    if constexpr (N > 1) _tile_loadd(1, c + 16, c_bytes);
    if constexpr (N > 2) _tile_loadd(2, c + 32, c_bytes);
  } else {
    _tile_zero(0);
    if constexpr (N > 1) _tile_zero(1);
    if constexpr (N > 2) _tile_zero(2);
  }
  for (index_t k = 0; k < depth; k += kAmxDepth) {
    // The operands first, then the products.
    _tile_loadd(3, a + k, a_bytes);
    const Pair* const bk = b + k * ldb;
    _tile_loadd(4, bk, b_bytes);
    if constexpr (N > 1) _tile_loadd(5, bk + 16, b_bytes);
    if constexpr (N > 2) _tile_loadd(6, bk + 32, b_bytes);
    _tile_dpbf16ps(0, 3, 4);
    if constexpr (N > 1) _tile_dpbf16ps(1, 3, 5);
    if constexpr (N > 2) _tile_dpbf16ps(2, 3, 6);
  }
  _tile_stored(0, c, c_bytes);
  if constexpr (N > 1) _tile_stored(1, c + 16, c_bytes);
  if constexpr (N > 2) _tile_stored(2, c + 32, c_bytes);
}

/// C (16 rows x cols, whole panels of NR keys, row stride ldc) = A Kᵀ, unscaled: A 16 rows of
/// `depth` pairs (a whole number of kAmxDepth; row stride lda pairs), kp the panels of
/// pack_panels_pairs over that depth (a panel's pair row holds NR keys: three tiles of 16).
inline void amx_logits_strip(index_t cols, index_t depth, const Pair* a, index_t lda, const Pair* kp,
                             float* c, index_t ldc) {
  constexpr index_t NR = Micro<float>::kCols;
  static_assert(NR == 3 * 16, "a key panel is three tiles of 16 keys");
  for (index_t n0 = 0; n0 < cols; n0 += NR)
    amx_product_tiles<3, false>(depth, a, lda, kp + n0 * depth, NR, c + n0, ldc);
}

/// product_strip_pairs on tiles: C (16 rows x n, n whole packets of 16, row stride ldc) += A B, A
/// 16 rows of `depth` pairs (a whole number of kAmxDepth; row stride lda), B depth rows of n pairs
/// (row stride ldb).
inline void amx_product_strip(index_t n, index_t depth, const Pair* a, index_t lda, const Pair* b,
                              index_t ldb, float* c, index_t ldc) {
  index_t c0 = 0;
  for (; c0 + 48 <= n && n - c0 != 64; c0 += 48)
    amx_product_tiles<3, true>(depth, a, lda, b + c0, ldb, c + c0, ldc);
  for (; c0 + 32 <= n; c0 += 32) amx_product_tiles<2, true>(depth, a, lda, b + c0, ldb, c + c0, ldc);
  for (; c0 < n; c0 += 16) amx_product_tiles<1, true>(depth, a, lda, b + c0, ldb, c + c0, ldc);
}

/// Float rows w (rows x cols, row stride ldw) rounded to bf16 (to nearest even), paired along the
/// rows and transposed: dst[t · ld + k2] = (bf16(w[2 k2][t]), bf16(w[2 k2 + 1][t])), the first in
/// the low half, for t < cols rounded up to 16 and k2 < ld (a whole number of 16, at least
/// ceil(rows / 2)); 0 past cols and past rows: the backward's Pᵀ and dZᵀ as AMX's A
/// operand (tiled_backward.hpp). 16 keys x 16 pairs at a time: two rows rounded by
/// one vcvtne2ps2bf16, their halves interleaved by one vpermw, 16 such words transposed in
/// registers.
inline void transpose_rows_to_pairs(const float* w, index_t ldw, index_t rows, index_t cols, Pair* dst,
                                    index_t ld) {
  namespace ei = Eigen::internal;
  // Halfword 2t of the result from halfword t (the even row), 2t + 1 from 16 + t (the odd row).
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                              23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (index_t t0 = 0; t0 < cols; t0 += 16) {
    const index_t n = std::min<index_t>(16, cols - t0);
    const __mmask16 m = n == 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1);
    for (index_t b = 0; b < ld; b += 16) {
      WordBlock block;
      for (int i = 0; i < 16; ++i) {
        const index_t r = 2 * (b + i);
        const __m512 lo = r < rows ? _mm512_maskz_loadu_ps(m, w + r * ldw + t0) : _mm512_setzero_ps();
        const __m512 hi =
            r + 1 < rows ? _mm512_maskz_loadu_ps(m, w + (r + 1) * ldw + t0) : _mm512_setzero_ps();
        const __m512i halves = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);  // lo's in the low 16
        block.packet[i] = _mm512_castsi512_ps(_mm512_permutexvar_epi16(interleave, halves));
      }
      ei::ptranspose(block);
      for (int i = 0; i < 16; ++i)
        _mm512_storeu_si512(dst + (t0 + i) * ld + b, _mm512_castps_si512(block.packet[i]));
    }
  }
}

}  // namespace
}  // namespace internal
}  // namespace EigenAttention
