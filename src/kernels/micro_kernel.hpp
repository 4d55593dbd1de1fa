// SPDX-License-Identifier: MIT
// The register-blocked micro-kernel of the tiled kernels, written once over Eigen's packet math
// and compiled per instruction set with the kernel that includes it (tiled.hpp; same rules: an
// anonymous namespace, Eigen possibly renamed). Internal.
//
// One micro-tile is C (MR x NR) = alpha * A B or C += A B over a depth of k, A row-major (one
// element broadcast per row and step), B k rows of NR contiguous elements (NP packets loaded per
// step), the MR x NP packet accumulators held in registers for the whole depth: MR·NP fused
// multiply-adds per MR broadcasts and NP loads. The same micro-tile computes the logits Q Kᵀ
// (A = Q, B = K packed into panels of NR keys, pack_panels) and the product P V (A = weights,
// B = V rows, whose columns are already contiguous).
//
// Shape: NP·MR accumulators plus NP loaded packets and one broadcast must fit the register file:
// with 32 vector registers (AVX-512) MR = 8, NP = 3 (24 accumulators; 8 rows divide the query
// tiles); with 16 (AVX2, SSE, NEON) MR = 6, NP = 2 (12). Each element of C is one chain of
// multiply-adds over the depth in order, whatever MR, NP or the position of the tile: a row's
// result does not depend on which rows or columns share its micro-tile, so results do not depend
// on how rows are split among threads.
#pragma once

#include <algorithm>
#include <cstdint>

#include <Eigen/Core>

#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

#include "kernels/abi.hpp"
#include "kernels/convert.hpp"

namespace EigenAttention {
namespace internal {
namespace {

/// The micro-tile shape for T in this translation unit's instruction set.
template <typename T>
struct Micro {
  using Packet = typename Eigen::internal::packet_traits<T>::type;
  static constexpr index_t kLanes = Eigen::internal::unpacket_traits<Packet>::size;  // W
  static constexpr bool kWide = EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS >= 32;
  static constexpr int kRows = kWide ? 8 : 6;          // MR
  static constexpr int kPackets = kWide ? 3 : 2;       // NP
  static constexpr index_t kCols = kPackets * kLanes;  // NR
  /// n rounded up to whole packets (the rows of V and of the output accumulator).
  static constexpr index_t whole_packets(index_t n) { return (n + kLanes - 1) / kLanes * kLanes; }
  /// n keys rounded up to whole panels (what logits_strip writes, what pack_panels fills).
  static constexpr index_t whole_panels(index_t n) { return (n + kCols - 1) / kCols * kCols; }
};

/// C (MR x NP packets, row stride ldc) = alpha * A B (Accumulate false) or C += A B (true), A
/// being MR x depth (row stride lda; with TransA, A's transpose is given: element (r, k) at
/// a[k * lda + r]) and B depth x NP packets (row stride ldb).
template <int MR, int NP, bool Accumulate, bool TransA = false, typename T>
inline void micro_tile(index_t depth, const T* a, index_t lda, const T* b, index_t ldb, T* c, index_t ldc,
                       T alpha) {
  namespace ei = Eigen::internal;
  using Packet = typename Micro<T>::Packet;
  constexpr index_t W = Micro<T>::kLanes;
  Packet acc[MR][NP];
#pragma GCC unroll 32
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int n = 0; n < NP; ++n)
      acc[r][n] = Accumulate ? ei::ploadu<Packet>(c + r * ldc + n * W) : ei::pset1<Packet>(T(0));
  for (index_t k = 0; k < depth; ++k) {
    Packet bk[NP];
#pragma GCC unroll 8
    for (int n = 0; n < NP; ++n) bk[n] = ei::ploadu<Packet>(b + k * ldb + n * W);
#pragma GCC unroll 32
    for (int r = 0; r < MR; ++r) {
      const Packet ar = ei::pset1<Packet>(TransA ? a[k * lda + r] : a[r * lda + k]);
#pragma GCC unroll 8
      for (int n = 0; n < NP; ++n) acc[r][n] = ei::pmadd(ar, bk[n], acc[r][n]);
    }
  }
  const Packet scale = ei::pset1<Packet>(alpha);
#pragma GCC unroll 32
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int n = 0; n < NP; ++n)
      ei::pstoreu(c + r * ldc + n * W, Accumulate ? acc[r][n] : ei::pmul(scale, acc[r][n]));
}

/// micro_tile for `rows` <= R rows (the last rows of a strip: R = MR, counting down).
template <int NP, bool Accumulate, bool TransA = false, int R = 0, typename T>
void micro_rows(index_t rows, index_t depth, const T* a, index_t lda, const T* b, index_t ldb, T* c,
                index_t ldc, T alpha) {
  constexpr int kRows = R > 0 ? R : Micro<T>::kRows;
  if (rows == kRows) return micro_tile<kRows, NP, Accumulate, TransA>(depth, a, lda, b, ldb, c, ldc, alpha);
  if constexpr (kRows > 1)
    micro_rows<NP, Accumulate, TransA, kRows - 1>(rows, depth, a, lda, b, ldb, c, ldc, alpha);
}

/// Keys [0, cols) of a row-major tile K (cols x depth, row stride ldk) packed into panels of NR
/// keys: key p·NR + n of panel p, column c, at kp[p·depth·NR + c·NR + n]; the keys of the last
/// panel past cols are 0. Whole W x W blocks are transposed in registers.
template <typename T>
void pack_panels(const T* k, index_t ldk, index_t cols, index_t depth, T* kp) {
  namespace ei = Eigen::internal;
  using Packet = typename Micro<T>::Packet;
  constexpr index_t W = Micro<T>::kLanes, NR = Micro<T>::kCols;
  for (index_t n0 = 0; n0 < cols; n0 += NR) {
    T* const panel = kp + n0 * depth;
    for (index_t g = 0; g < NR; g += W) {
      const index_t keys = std::min<index_t>(W, cols - n0 - g);  // may be <= 0 in the last panel
      const T* src = keys > 0 ? k + (n0 + g) * ldk : k;
      // The next group's rows, fetched while this one is transposed: W rows read side by side
      // are more streams than the hardware prefetchers follow.
      if (keys == W && n0 + g + 2 * W <= cols) {
        constexpr index_t kLine = 64 / static_cast<index_t>(sizeof(T));
        for (index_t i = 0; i < W; ++i)
          for (index_t c = 0; c < depth; c += kLine) ei::prefetch(src + (W + i) * ldk + c);
      }
      index_t c = 0;
      if constexpr (W > 1) {
        if (keys == W) {
          for (; c + W <= depth; c += W) {
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"  // the packet type's vector attributes
#endif
            ei::PacketBlock<Packet, W> block;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
            for (index_t i = 0; i < W; ++i) block.packet[i] = ei::ploadu<Packet>(src + i * ldk + c);
            ei::ptranspose(block);
            for (index_t i = 0; i < W; ++i) ei::pstoreu(panel + (c + i) * NR + g, block.packet[i]);
          }
        }
      }
      for (; c < depth; ++c)
        for (index_t i = 0; i < W; ++i) panel[c * NR + g + i] = i < keys ? src[i * ldk + c] : T(0);
    }
  }
}

/// C (rows x cols, row stride ldc) = alpha * A Kᵀ for rows <= MR rows of A (row stride lda,
/// depth columns) and the keys [from, cols) of panels kp (pack_panels over that depth; `from` a
/// whole packet, 0 by default), key t in C's column t - from: the packets of the panel that holds
/// `from`, from it on, then whole panels. C gets columns up to cols rounded up to NR (less from),
/// or with `whole` false up to cols rounded up to a packet only (the last panel's packets past
/// them are not computed). (A key's logit is the same chain of multiply-adds whichever micro-tile
/// computes it: starting or ending within a panel changes no bit.)
template <typename T>
void logits_strip(index_t rows, index_t cols, index_t depth, const T* a, index_t lda, const T* kp, T* c,
                  index_t ldc, T alpha, index_t from = 0, bool whole = true) {
  constexpr index_t NR = Micro<T>::kCols, W = Micro<T>::kLanes, NP = Micro<T>::kPackets;
  const index_t end = whole ? cols : (cols + W - 1) / W * W;
  for (index_t n0 = from / NR * NR; n0 < cols; n0 += NR) {
    const index_t c0 = n0 > from ? n0 : from, c1 = n0 + NR < end ? n0 + NR : (whole ? n0 + NR : end);
    const T* b = kp + n0 * depth + (c0 - n0);  // NR elements a depth step
    T* const out = c + (c0 - from);
    const index_t packets = (c1 - c0) / W;
    if (packets == NP) {
      micro_rows<NP, false>(rows, depth, a, lda, b, NR, out, ldc, alpha);
    } else if (NP > 2 && packets == 2) {
      micro_rows<(NP > 2 ? 2 : 1), false>(rows, depth, a, lda, b, NR, out, ldc, alpha);
    } else {
      micro_rows<1, false>(rows, depth, a, lda, b, NR, out, ldc, alpha);
    }
  }
}

/// C (rows x n, row stride ldc) += A B for rows <= MR rows of A (row stride lda, depth columns;
/// with TransA, A's transpose: depth rows of lda elements, the strip's rows in its first columns)
/// and B (depth x n, row stride ldb), n a whole number of packets.
template <bool TransA = false, typename T>
void product_strip(index_t rows, index_t n, index_t depth, const T* a, index_t lda, const T* b, index_t ldb,
                   T* c, index_t ldc) {
  constexpr index_t W = Micro<T>::kLanes, NR = Micro<T>::kCols;
  index_t c0 = 0;
  // Blocks of NP packets, but never a single packet left where two blocks of two would do
  // (NP = 3, 4 packets: 2 + 2, not 3 + 1, whose one-packet block has too few accumulators).
  for (; c0 + NR <= n && (NR != 3 * W || n - c0 != 4 * W); c0 += NR)
    micro_rows<Micro<T>::kPackets, true, TransA>(rows, depth, a, lda, b + c0, ldb, c + c0, ldc, T(1));
  if constexpr (Micro<T>::kPackets > 2) {
    for (; c0 + 2 * W <= n; c0 += 2 * W)
      micro_rows<2, true, TransA>(rows, depth, a, lda, b + c0, ldb, c + c0, ldc, T(1));
  }
  for (; c0 < n; c0 += W) micro_rows<1, true, TransA>(rows, depth, a, lda, b + c0, ldb, c + c0, ldc, T(1));
}

#if defined(__AVX512BF16__)
// ---- bfloat16 pairs on vdpbf16ps (the avx512bf16 kernel's bf16 forward) -------------------
//
// A Pair is one 32-bit word holding two bfloat16 elements that follow each other along the
// depth, the first in its low half (as two consecutive elements of a bf16 row read as a word).
// vdpbf16ps adds to each float lane the two products of the halves of a word of A and of B: the
// micro-tile above with half as many depth steps, each worth two multiply-adds per lane, at up to
// twice the FLOP rate of vfmadd231ps where the unit runs at full rate (Zen 4 and 5). The two
// products of bf16 elements are exact in float; the instruction rounds to nearest even whatever
// MXCSR says, and reads subnormal inputs and writes subnormal results as 0. Each element of C is
// still one chain of operations in a fixed order, so results do not depend on the tile's place.
using Pair = std::uint32_t;

/// C (MR x NP packets of 16 floats, row stride ldc) = alpha * A B or C += A B, A MR x depth pairs
/// (row stride lda pairs; with TransA, A's transpose is given: pair (r, k) at a[k * lda + r]), B
/// depth rows of NP x 16 pairs (row stride ldb pairs).
template <int MR, int NP, bool Accumulate, bool TransA = false>
inline void micro_tile_pairs(index_t depth, const Pair* a, index_t lda, const Pair* b, index_t ldb, float* c,
                             index_t ldc, float alpha) {
  __m512 acc[MR][NP];
#pragma GCC unroll 32
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int n = 0; n < NP; ++n)
      acc[r][n] = Accumulate ? _mm512_loadu_ps(c + r * ldc + n * 16) : _mm512_setzero_ps();
  for (index_t k = 0; k < depth; ++k) {
    __m512bh bk[NP];
#pragma GCC unroll 8
    for (int n = 0; n < NP; ++n) bk[n] = (__m512bh)_mm512_loadu_si512(b + k * ldb + n * 16);
#pragma GCC unroll 32
    for (int r = 0; r < MR; ++r) {
      const Pair word = TransA ? a[k * lda + r] : a[r * lda + k];
      const __m512bh ar = (__m512bh)_mm512_set1_epi32(static_cast<int>(word));
#pragma GCC unroll 8
      for (int n = 0; n < NP; ++n) acc[r][n] = _mm512_dpbf16_ps(acc[r][n], ar, bk[n]);
    }
  }
  const __m512 scale = _mm512_set1_ps(alpha);
#pragma GCC unroll 32
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int n = 0; n < NP; ++n)
      _mm512_storeu_ps(c + r * ldc + n * 16, Accumulate ? acc[r][n] : _mm512_mul_ps(scale, acc[r][n]));
}

/// micro_tile_pairs for `rows` <= R rows (R = MR, counting down).
template <int NP, bool Accumulate, bool TransA = false, int R = Micro<float>::kRows>
void micro_rows_pairs(index_t rows, index_t depth, const Pair* a, index_t lda, const Pair* b, index_t ldb,
                      float* c, index_t ldc, float alpha) {
  if (rows == R) return micro_tile_pairs<R, NP, Accumulate, TransA>(depth, a, lda, b, ldb, c, ldc, alpha);
  if constexpr (R > 1)
    micro_rows_pairs<NP, Accumulate, TransA, R - 1>(rows, depth, a, lda, b, ldb, c, ldc, alpha);
}

/// logits_strip on pairs: C (rows x cols, whole panels) = alpha * A Kᵀ, A rows <= MR rows of
/// `depth` pairs (row stride lda), kp the keys packed by pack_panels_pairs over that depth.
inline void logits_strip_pairs(index_t rows, index_t cols, index_t depth, const Pair* a, index_t lda,
                               const Pair* kp, float* c, index_t ldc, float alpha) {
  constexpr index_t NR = Micro<float>::kCols;
  for (index_t n0 = 0; n0 < cols; n0 += NR)
    micro_rows_pairs<Micro<float>::kPackets, false>(rows, depth, a, lda, kp + n0 * depth, NR, c + n0, ldc,
                                                    alpha);
}

/// product_strip on pairs: C (rows x n, n whole packets) += A B, A rows <= MR rows of `depth`
/// pairs (row stride lda; with TransA, A's transpose: depth rows of lda pairs, the strip's rows in
/// its first columns), B depth rows of n pairs (row stride ldb).
template <bool TransA = false>
void product_strip_pairs(index_t rows, index_t n, index_t depth, const Pair* a, index_t lda, const Pair* b,
                         index_t ldb, float* c, index_t ldc) {
  constexpr index_t W = 16, NR = Micro<float>::kCols;
  index_t c0 = 0;
  for (; c0 + NR <= n && n - c0 != 4 * W; c0 += NR)
    micro_rows_pairs<3, true, TransA>(rows, depth, a, lda, b + c0, ldb, c + c0, ldc, 1.0f);
  for (; c0 + 2 * W <= n; c0 += 2 * W)
    micro_rows_pairs<2, true, TransA>(rows, depth, a, lda, b + c0, ldb, c + c0, ldc, 1.0f);
  for (; c0 < n; c0 += W)
    micro_rows_pairs<1, true, TransA>(rows, depth, a, lda, b + c0, ldb, c + c0, ldc, 1.0f);
}

/// The bf16 pair of a row's elements 2c and 2c + 1 (element (t, c) at row[t·stride]), 0 past n.
inline Pair pair_at(const BFloat16Bits* row, index_t stride, index_t n, index_t c2) {
  const index_t c = 2 * c2;
  const Pair lo = c < n ? row[c * stride].bits : 0, hi = c + 1 < n ? row[(c + 1) * stride].bits : 0;
  return lo | (hi << 16);
}

/// The half of a pair at position `half` (0: low, 1: high) as a float (exact).
inline float pair_half(Pair word, index_t half) {
  return to_compute(BFloat16Bits{static_cast<std::uint16_t>(word >> (16 * half))});
}

/// Rows [first, first + rows) of a bf16 matrix as pairs along its columns: row r's pair c2 at
/// dst[r · ld + c2] (pair_at), pairs of zeros from ceil(cols / 2) up to ld (by default that
/// ceiling: none).
inline void pair_columns(const RawMatrix<const BFloat16Bits>& m, index_t first, index_t rows, Pair* dst,
                         index_t ld = -1) {
  const index_t pairs = (m.cols + 1) / 2;
  if (ld < 0) ld = pairs;
  for (index_t r = 0; r < rows; ++r) {
    const BFloat16Bits* row = m.data + (first + r) * m.row_stride;
    for (index_t c2 = 0; c2 < pairs; ++c2) dst[r * ld + c2] = pair_at(row, m.col_stride, m.cols, c2);
    std::fill(dst + r * ld + pairs, dst + (r + 1) * ld, Pair(0));
  }
}

/// Two bf16 rows a and b (element c at a[c·stride]; b null: zeros) as one row of pairs, the
/// element of a in each word's low half: dst[c] for c < n, then 0 up to `width`.
inline void pair_rows(const BFloat16Bits* a, const BFloat16Bits* b, index_t stride, index_t n, index_t width,
                      Pair* dst) {
  index_t c = 0;
  if (stride == 1) {  // 16 at a time: a's halves zero-extended, b's shifted up
    for (; c + 16 <= n; c += 16) {
      const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + c)));
      const __m512i hi =
          b != nullptr ? _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + c)))
                       : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + c, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
  }
  for (; c < n; ++c)
    dst[c] = Pair(a[c * stride].bits) | (b != nullptr ? Pair(b[c * stride].bits) << 16 : Pair(0));
  std::fill(dst + n, dst + width, Pair(0));
}

/// Two float rows a and b (b null: zeros) rounded to bf16 (to nearest even) as one row of pairs,
/// a's element in each word's low half: dst[c] for c < n.
inline void round_rows_to_pairs(const float* a, const float* b, index_t n, Pair* dst) {
  for (index_t c = 0; c < n; c += 16) {
    const index_t m = std::min<index_t>(16, n - c);
    const __mmask16 k = m == 16 ? __mmask16(0xffff) : __mmask16((1u << m) - 1);
    const __m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(k, a + c)));
    const __m512i hi =
        b != nullptr ? _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(k, b + c)))
                     : _mm512_setzero_si512();
    _mm512_mask_storeu_epi32(dst + c, k, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"  // the packet type's vector attributes
#endif
/// 16 registers of 16 32-bit words, which Eigen's ptranspose transposes (moves only).
using WordBlock = Eigen::internal::PacketBlock<Eigen::internal::Packet16f, 16>;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/// 16 keys' contiguous bf16 rows of `depth` elements into their columns of a panel of pairs:
/// panel[c2 · NR + i] for key i < 16 and every pair c2 < ceil(depth / 2); a null row is a key of
/// zeros. Whole blocks of 16 pairs (64 bytes of each row) are transposed in registers as 16 x 16
/// 32-bit words (moves only: every bit kept), the rest pair by pair.
inline void pack_16_keys_pairs(const BFloat16Bits* const* rows, index_t depth, Pair* panel) {
  namespace ei = Eigen::internal;
  constexpr index_t NR = Micro<float>::kCols;
  const index_t pairs = (depth + 1) / 2, whole = depth / 32;
  for (index_t b = 0; b < whole; ++b) {
    WordBlock block;
    for (int i = 0; i < 16; ++i)
      block.packet[i] = rows[i] != nullptr ? _mm512_castsi512_ps(_mm512_loadu_si512(rows[i] + 32 * b))
                                           : _mm512_setzero_ps();
    ei::ptranspose(block);
    for (int i = 0; i < 16; ++i)
      _mm512_storeu_si512(panel + (16 * b + i) * NR, _mm512_castps_si512(block.packet[i]));
  }
  for (index_t c2 = 16 * whole; c2 < pairs; ++c2)
    for (int i = 0; i < 16; ++i) panel[c2 * NR + i] = rows[i] != nullptr ? pair_at(rows[i], 1, depth, c2) : 0;
}

/// Keys [0, cols) of K (rows of depth elements, strides as given) packed into panels of NR keys
/// of pairs along the depth: pair c2 of key p·NR + n at kp[p·ld·NR + c2·NR + n], for c2 < ld
/// (by default ceil(depth / 2)); an odd depth's last pair, the pairs past ceil(depth / 2) and the
/// keys of the last panel past cols are 0.
inline void pack_panels_pairs(const BFloat16Bits* k, index_t row_stride, index_t col_stride, index_t cols,
                              index_t depth, Pair* kp, index_t ld = -1) {
  constexpr index_t NR = Micro<float>::kCols;
  const index_t pairs = (depth + 1) / 2;
  if (ld < 0) ld = pairs;
  for (index_t n0 = 0; n0 < cols; n0 += NR) {
    Pair* const panel = kp + n0 * ld;
    std::fill(panel + pairs * NR, panel + ld * NR, Pair(0));
    index_t n = 0;
    if (col_stride == 1) {  // whole groups of 16 keys transposed in registers
      for (; n + 16 <= NR && n0 + n + 16 <= cols; n += 16) {
        const BFloat16Bits* rows[16];
        for (int i = 0; i < 16; ++i) rows[i] = k + (n0 + n + i) * row_stride;
        pack_16_keys_pairs(rows, depth, panel + n);
      }
    }
    for (; n < NR; ++n) {
      if (n0 + n >= cols) {
        for (index_t c2 = 0; c2 < pairs; ++c2) panel[c2 * NR + n] = 0;
        continue;
      }
      const BFloat16Bits* row = k + (n0 + n) * row_stride;
      for (index_t c2 = 0; c2 < pairs; ++c2) panel[c2 * NR + n] = pair_at(row, col_stride, depth, c2);
    }
  }
}

/// Rows [lo, hi) of a strip's float weights P (rows x ..., row stride ldp; lo even) rounded to
/// bf16 (to nearest even) as pairs of consecutive keys: pair t of row r at pb[r·ldpb + t], for
/// t < ceil((hi - lo) / 2); the weight past hi in an odd range's last pair is 0.
inline void weights_to_pairs(index_t rows, index_t lo, index_t hi, const float* P, index_t ldp, Pair* pb,
                             index_t ldpb) {
  for (index_t r = 0; r < rows; ++r) {
    const float* src = P + r * ldp;
    Pair* dst = pb + r * ldpb;
    for (index_t t = lo; t < hi; t += 32) {
      const index_t n = std::min<index_t>(32, hi - t);
      const __mmask16 m0 = n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1);
      const __mmask16 m1 = n >= 32  ? __mmask16(0xffff)
                           : n > 16 ? __mmask16((1u << (n - 16)) - 1)
                                    : __mmask16(0);
      const __m512 a = _mm512_maskz_loadu_ps(m0, src + t), b = _mm512_maskz_loadu_ps(m1, src + t + 16);
      const __m512i words = (__m512i)_mm512_cvtne2ps_pbh(b, a);  // a in the low 16 halves
      const index_t w = (n + 1) / 2;
      _mm512_mask_storeu_epi32(dst + (t - lo) / 2, w >= 16 ? __mmask16(0xffff) : __mmask16((1u << w) - 1),
                               words);
    }
  }
}
#endif  // __AVX512BF16__

}  // namespace
}  // namespace internal
}  // namespace EigenAttention
