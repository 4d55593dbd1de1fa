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

#include <Eigen/Core>

#include "kernels/abi.hpp"

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
/// depth columns) and the keys [0, cols) of panels kp (pack_panels over that depth); C gets whole
/// panels: columns up to cols rounded up to NR.
template <typename T>
void logits_strip(index_t rows, index_t cols, index_t depth, const T* a, index_t lda, const T* kp, T* c,
                  index_t ldc, T alpha) {
  constexpr index_t NR = Micro<T>::kCols;
  for (index_t n0 = 0; n0 < cols; n0 += NR)
    micro_rows<Micro<T>::kPackets, false>(rows, depth, a, lda, kp + n0 * depth, NR, c + n0, ldc, alpha);
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

}  // namespace
}  // namespace internal
}  // namespace EigenAttention
