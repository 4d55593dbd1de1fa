// SPDX-License-Identifier: MIT
// The decode kernel: one split-K chunk of paged keys and values (RawDecodeChunk, abi.hpp) for
// the query rows of one GQA group, compiled once per kernel of the table like tiled.hpp.
// Internal.
//
// A decode step is bound by memory bandwidth: each key and value is read once per GQA group,
// whatever the number of query heads that share it. Within a chunk (at most kDecodeChunk keys)
// the softmax is exact in two passes: the logits of the whole chunk, then exp(logit - max) and
// the product with V; decode.cpp merges the chunks by their log-sum-exp in key order.
//
// Up to kStreamRows query rows (decode proper; decode_streams of tile_policy.hpp), the chunk streams through
// its keys, then its values, a row at a time along the page table: each row is loaded once, in place from its
// page (bfloat16 and half widened packet by packet, or through a one-row buffer where the instruction set has
// no such widening), and used for every query row at once (dot_rows_block and axpy_rows_block in
// eigen_internal.hpp); the rows a few KiB ahead are prefetched by hand, since one head's rows in a page are a
// short run of memory. More rows (prefill) go through Eigen's GEMM (M = keys, N = heads x tokens) on the
// chunk's rows, in place when they are one run of memory in the compute type, else gathered (and widened)
// into per-thread scratch.
//
// Masks are the forward's (RawProblem::first_key/end_key and apply_extras from tiled.hpp), at
// the queries' positions in the sequence. The product with V runs over the keys that every row
// of the chunk sees for all rows at once; a row's other visible keys (a causal or window edge
// when several tokens are decoded) are added row by row, so that a hidden NaN or Inf never
// reaches a row that does not see it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>

#include <EigenAttention/KVCache.hpp>

#include "kernels/quantized.hpp"
#include "kernels/tiled.hpp"

namespace EigenAttention {
namespace internal {
namespace {

/// dst[0, n) = src[0, n), converted to T (bfloat16 and half: widen() of convert.hpp; the
/// quantized types: scale x element, dequantize() of quantized.hpp).
template <typename T, typename S>
void convert_row(const S* src, T* dst, index_t n, float scale) {
  if constexpr (std::is_same_v<S, T>) {
    (void)scale;
    std::copy(src, src + n, dst);
  } else if constexpr (kIsQuantized<S>) {
    static_assert(std::is_same_v<T, float>, "quantized caches are computed in float");
    dequantize(src, n, scale, dst);
  } else {
    static_assert(std::is_same_v<T, float>, "bfloat16 and half are computed in float");
    (void)scale;
    widen(src, 1, n, dst);
  }
}

/// A stored row as dot_rows_block and axpy_rows_block read it (eigen_internal.hpp): in place when stored
/// as T; bfloat16 and half widened packet by packet where this instruction set has a packet of
/// floats that wide (AVX-512: 16, AVX2: 8; half needs F16C), and the quantized types decoded and
/// scaled likewise (quantized.hpp), else first converted into `buffer`. `scale`: the row's
/// (quantized types; 1 otherwise).
template <typename T, typename S>
struct StoredRow {  // S == T, or converted into the buffer
  PlainRow<T> row{nullptr};
  StoredRow() = default;
  StoredRow(const S* data, index_t dim, T* buffer, float scale) {
    if constexpr (std::is_same_v<S, T>) {
      (void)dim, (void)buffer, (void)scale;
      row.data = data;
    } else {
      convert_row(data, buffer, dim, scale);
      row.data = buffer;
    }
  }
  template <class Packet>
  Packet packet(index_t c) const {
    return row.template packet<Packet>(c);
  }
  T at(index_t c) const { return row.at(c); }
};

#if defined(__AVX512F__) || defined(__AVX2__)
template <>
struct StoredRow<float, BFloat16Bits> {  // widen_packet of convert.hpp: 16 (AVX-512) or 8 (AVX2)
  const BFloat16Bits* data = nullptr;
  StoredRow() = default;
  StoredRow(const BFloat16Bits* d, index_t, float*, float) : data(d) {}
  template <class Packet>
  Packet packet(index_t c) const {
    return widen_packet(data + c);
  }
  float at(index_t c) const { return to_compute(data[c]); }
};
#endif

#if defined(__AVX512F__)
template <>
struct StoredRow<float, HalfBits> {  // widen_packet of convert.hpp: 16
  const HalfBits* data = nullptr;
  StoredRow() = default;
  StoredRow(const HalfBits* d, index_t, float*, float) : data(d) {}
  template <class Packet>
  Packet packet(index_t c) const {
    return widen_packet(data + c);
  }
  float at(index_t c) const { return to_compute(data[c]); }
};
#endif

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__F16C__))
/// A quantized row: each packet decoded (value_packet of quantized.hpp) and scaled, fl(scale x
/// value) as dequantize() computes it.
template <typename Q>
struct QuantizedRow {
  const Q* data = nullptr;
  float scale = 1;
  QuantizedRow() = default;
  QuantizedRow(const Q* d, index_t, float*, float s) : data(d), scale(s) {}
  template <class Packet>
  Packet packet(index_t c) const {
    return Eigen::internal::pmul(value_packet(data + c), Eigen::internal::pset1<Packet>(scale));
  }
  float at(index_t c) const { return scale * to_compute(data[c]); }
};
template <>
struct StoredRow<float, Int8> : QuantizedRow<Int8> {
  using QuantizedRow<Int8>::QuantizedRow;
};
template <>
struct StoredRow<float, Float8E4M3> : QuantizedRow<Float8E4M3> {
  using QuantizedRow<Float8E4M3>::QuantizedRow;
};
template <>
struct StoredRow<float, Float8E5M2> : QuantizedRow<Float8E5M2> {
  using QuantizedRow<Float8E5M2>::QuantizedRow;
};
#endif

/// Stored keys or values of the chunk's KV head: row j (slot j % page_size of page pages[j /
/// page_size]) at base + page * page_stride + slot * token_stride, dim elements, and for a
/// quantized type its scale at scales + page * scale_page_stride + slot * scale_token_stride.
template <typename S>
struct PagedRows {
  const S* base;
  index_t page_stride, token_stride, dim;
  const float* scales;  // null: not quantized (every row's scale is 1)
  index_t scale_page_stride, scale_token_stride;
};
template <typename S, typename T>
PagedRows<S> keys_of(const RawDecodeChunk<T>& c) {
  return {static_cast<const S*>(c.k), c.k_page_stride,     c.k_token_stride, c.d_k, c.k_scales,
          c.scale_page_stride,        c.scale_token_stride};
}
template <typename S, typename T>
PagedRows<S> values_of(const RawDecodeChunk<T>& c) {
  return {static_cast<const S*>(c.v), c.v_page_stride,     c.v_token_stride, c.d_v, c.v_scales,
          c.scale_page_stride,        c.scale_token_stride};
}

/// Bytes read ahead of the row in use: the pages of one head are short runs of memory (a few
/// KiB), too short for the hardware prefetcher to reach full speed on each, so the rows this far
/// ahead along the page table are prefetched by hand. (2 to 8 KiB measured alike on a Xeon;
/// 16 KiB and more slower.)
constexpr index_t kPrefetchBytes = 4096;

/// f(j, row, scale) for the keys (or values) j in [first, end) of the chunk's KV head, in order,
/// `row` pointing at its dim stored elements, `scale` its scale (1 when not quantized).
template <typename T, typename S, class F>
void for_each_row(const RawDecodeChunk<T>& c, const PagedRows<S>& rows, index_t first, index_t end, F&& f) {
  const index_t ps = c.page_size;
  const S* const base = rows.base;
  const index_t page_stride = rows.page_stride, token_stride = rows.token_stride;
  const index_t row_bytes = rows.dim * static_cast<index_t>(sizeof(S));
  // The prefetch cursor: key `ahead`, slot `ahead_slot` of page number `ahead_page`, at
  // `ahead_row` (counted, not divided: a division per row costs as much as the row's arithmetic).
  const index_t rows_ahead = std::max<index_t>(4, kPrefetchBytes / std::max<index_t>(row_bytes, 1));
  index_t ahead = std::min(first + rows_ahead, end);
  index_t ahead_page = ahead / ps, ahead_slot = ahead % ps;
  const S* ahead_row =
      ahead < end ? base + c.pages[ahead_page] * page_stride + ahead_slot * token_stride : nullptr;
  for (index_t j = first; j < end;) {
    const index_t slot = j % ps, run = std::min(end - j, ps - slot);
    const S* row = base + c.pages[j / ps] * page_stride + slot * token_stride;
    const float* scale = rows.scales != nullptr ? rows.scales + c.pages[j / ps] * rows.scale_page_stride +
                                                      slot * rows.scale_token_stride
                                                : nullptr;
    for (index_t u = 0; u < run; ++u, row += token_stride) {
      if (ahead < end) {
        for (index_t b = 0; b < row_bytes; b += 64)
          __builtin_prefetch(reinterpret_cast<const char*>(ahead_row) + b);
        ++ahead;
        if (++ahead_slot == ps) {
          ahead_slot = 0;
          ++ahead_page;
          if (ahead < end) ahead_row = base + c.pages[ahead_page] * page_stride;
        } else {
          ahead_row += token_stride;
        }
      }
      if (scale != nullptr) {
        f(j + u, row, scale[u * rows.scale_token_stride]);
      } else {
        f(j + u, row, 1.0f);
      }
    }
    j += run;
  }
}

/// Keys (or values) [first, first + n) of the chunk's KV head as a row-major block of T with
/// row stride `ld`: in place when they are of type T and lie in pages that follow each other in
/// memory, else gathered (and converted) into `scratch` (n x dim).
template <typename T, typename S>
const T* paged_rows(const RawDecodeChunk<T>& c, const PagedRows<S>& rows, index_t first, index_t n,
                    T* scratch, index_t& ld) {
  const index_t ps = c.page_size, dim = rows.dim, page_stride = rows.page_stride,
                token_stride = rows.token_stride;
  const S* const base = rows.base;
  if constexpr (std::is_same_v<S, T>) {
    const index_t p0 = first / ps, p1 = (first + n - 1) / ps;
    bool in_place = p0 == p1 || page_stride == ps * token_stride;
    for (index_t p = p0; in_place && p < p1; ++p) in_place = c.pages[p + 1] == c.pages[p] + 1;
    if (in_place) {
      ld = token_stride;
      return base + c.pages[p0] * page_stride + (first % ps) * token_stride;
    }
  }
  for_each_row<T, S>(c, rows, first, first + n, [&](index_t j, const S* row, float scale) {
    convert_row(row, scratch + (j - first) * dim, dim, scale);
  });
  ld = std::max<index_t>(dim, 1);
  return scratch;
}

#if defined(__AVX512BF16__)
/// The GEMM path's logits on bf16 pairs (a bf16 cache on Kernel::Avx512Bf16 or Amx, prefill): s (R x n,
/// row stride lds >= whole panels of n) = scale Q Kᵀ for the chunk's keys [ub, ub + n), the
/// keys packed into panels of pairs from their pages (pack_panels_pairs' layout). The float
/// queries are split into two bf16 parts, q = hi + lo + e with hi = bf16(q), lo = bf16(q - hi),
/// |e| <= 2^-18 |q| (0 when q holds bf16 values), paired along d_k one after the other: one chain
/// of products over twice the depth, against the keys' pairs twice over. `lo`: R x d_k scratch.
/// On AMX tiles (kAmx), the depth is padded with pairs of zeros to a whole block, the rows to a
/// whole strip of 16, and s holds those rows too.
template <typename T>
void prefill_logits_pairs(const RawDecodeChunk<T>& c, const PagedRows<BFloat16Bits>& keys, index_t R,
                          index_t ub, index_t n, float* s, index_t lds, float* lo) {
  constexpr index_t NR = Micro<float>::kCols, MR = kPairStripRows;
  const index_t dk = c.d_k, qp = (dk + 1) / 2, depth = whole_pair_blocks(2 * qp),
                panels = Micro<float>::whole_panels(n), strips = whole_pair_strips(R);
  Arena<Pair> arena(Arena<Pair>::round(strips * depth) + Arena<Pair>::round(panels * depth));
  Pair* const q = arena.take(strips * depth);
  Pair* const kp = arena.take(panels * depth);
  std::fill(q, q + strips * depth, Pair(0));
  // Row r's hi pairs, then its lo pairs: lo = q - hi, exact in float.
  for (index_t r = 0; r < R; ++r) {
    weights_to_pairs(1, 0, dk, c.q + r * dk, dk, q + r * depth, qp);
    for (index_t e = 0; e < dk; ++e)
      lo[r * dk + e] = c.q[r * dk + e] - pair_half(q[r * depth + e / 2], e % 2);
    weights_to_pairs(1, 0, dk, lo + r * dk, dk, q + r * depth + qp, qp);
  }
  // Groups of 16 keys transposed in registers (pack_16_keys_pairs; the last group's missing keys
  // null, packed as zeros) into the hi half of the depth, then copied into the lo half.
  const BFloat16Bits* rows[16];
  index_t held = 0;
  const auto flush = [&](index_t t0) {
    std::fill(rows + held, rows + 16, nullptr);
    Pair* const panel = kp + t0 / NR * NR * depth + t0 % NR;
    pack_16_keys_pairs(rows, dk, panel);
    for (index_t c2 = 0; c2 < qp; ++c2) std::copy_n(panel + c2 * NR, 16, panel + (qp + c2) * NR);
    held = 0;
  };
  std::fill(kp, kp + panels * depth, Pair(0));
  for_each_row<T, BFloat16Bits>(c, keys, ub, ub + n, [&](index_t j, const BFloat16Bits* row, float) {
    rows[held++] = row;
    if (held == 16) flush(j - ub - 15);
  });
  if (held > 0) flush(n - held);
  for (index_t r0 = 0; r0 < R; r0 += MR)
    pairs_logits(std::min(MR, R - r0), n, depth, q + r0 * depth, depth, kp, s + r0 * lds, lds, c.shape.scale);
}

/// The GEMM path's P V on bf16 pairs: c.out (R x d_v) += P V over the keys [ub + lo, ub + hi) that
/// every row sees (P in s, row stride lds, key ub + t at column t), the weights rounded to bf16 and
/// paired along the keys, the values paired so from their pages (`values`: the keys' rows for a
/// latent cache, whose values are their first d_v elements).
/// `o`: scratch of R (AMX: rows to a whole strip of 16) x whole packets of d_v floats. On AMX
/// tiles, the keys' pairs are padded with zeros to a whole block.
template <typename T>
void prefill_values_pairs(const RawDecodeChunk<T>& c, const PagedRows<BFloat16Bits>& values, index_t R,
                          index_t lo, index_t hi, index_t ub, const float* s, index_t lds, float* o) {
  constexpr index_t MR = kPairStripRows;
  const index_t dv = c.d_v, dvp = Micro<float>::whole_packets(dv), cp = whole_pair_blocks((hi - lo + 1) / 2),
                strips = whole_pair_strips(R);
  Arena<Pair> arena(Arena<Pair>::round(strips * cp) + Arena<Pair>::round(cp * dvp));
  Pair* const pb = arena.take(strips * cp);
  Pair* const vp = arena.take(cp * dvp);
  std::fill(o, o + strips * dvp, 0.0f);
  std::fill(pb, pb + strips * cp, Pair(0));
  std::fill(vp, vp + cp * dvp, Pair(0));
  weights_to_pairs(R, lo, hi, s, lds, pb, cp);
  // Rows two by two: (V[2t], V[2t + 1]) into pair row t (pair_rows); an odd last row alone.
  const BFloat16Bits* first = nullptr;
  for_each_row<T, BFloat16Bits>(c, values, ub + lo, ub + hi, [&](index_t j, const BFloat16Bits* row, float) {
    const index_t t = j - ub - lo;
    if (t % 2 == 0) {
      first = row;
    } else {
      pair_rows(first, row, 1, dv, dvp, vp + t / 2 * dvp);
    }
  });
  if ((hi - lo) % 2 == 1) pair_rows(first, nullptr, 1, dv, dvp, vp + (hi - lo) / 2 * dvp);
  for (index_t r0 = 0; r0 < R; r0 += MR)
    pairs_product(std::min(MR, R - r0), dvp, cp, pb + r0 * cp, cp, vp, dvp, o + r0 * dvp, dvp);
  for (index_t r = 0; r < R; ++r)
    for (index_t e = 0; e < dv; ++e) c.out[r * dv + e] += o[r * dvp + e];
}
#endif

/// The streaming kernel's two steps for R query rows, in groups of at most 4, and B key or value
/// rows at once (dot_rows_block and axpy_rows_block of eigen_internal.hpp; B = 1 for the rows left
/// over).
template <int B, typename T, class Row>
void dots(index_t R, const T* q, index_t dk, const Row* k, T scale, T* s, index_t lds) {
  index_t r = 0;
  for (; r + 4 <= R; r += 4) dot_rows_block<4, B>(q + r * dk, dk, k, dk, scale, s + r * lds, lds);
  switch (R - r) {
    case 3:
      dot_rows_block<3, B>(q + r * dk, dk, k, dk, scale, s + r * lds, lds);
      break;
    case 2:
      dot_rows_block<2, B>(q + r * dk, dk, k, dk, scale, s + r * lds, lds);
      break;
    case 1:
      dot_rows_block<1, B>(q + r * dk, dk, k, dk, scale, s + r * lds, lds);
      break;
    default:
      break;
  }
}
template <int B, typename T, class Row>
void axpys(index_t R, const T* p, index_t ldp, const Row* v, index_t dv, T* o) {
  index_t r = 0;
  for (; r + 4 <= R; r += 4) axpy_rows_block<4, B>(p + r * ldp, ldp, v, dv, o + r * dv, dv);
  switch (R - r) {
    case 3:
      axpy_rows_block<3, B>(p + r * ldp, ldp, v, dv, o + r * dv, dv);
      break;
    case 2:
      axpy_rows_block<2, B>(p + r * ldp, ldp, v, dv, o + r * dv, dv);
      break;
    case 1:
      axpy_rows_block<1, B>(p + r * ldp, ldp, v, dv, o + r * dv, dv);
      break;
    default:
      break;
  }
}
/// Key and value rows the streaming kernel takes at once.
constexpr int kKeyBlock = 4, kValueBlock = 4;

template <typename T, typename S>
void decode_chunk_as(const RawDecodeChunk<T>& c) {
  const T minus_inf = -std::numeric_limits<T>::infinity();
  const RawProblem<T>& p = c.shape;
  const index_t R = c.group * c.rows, dk = c.d_k, dv = c.d_v, ldo = std::max<index_t>(dv, 1);
  const index_t last_row = c.first_row + c.rows - 1;
  // Keys that some row of the chunk sees (union), and that all see (both ends are
  // non-decreasing in the row).
  const index_t ub = std::max(c.first_key, p.first_key(c.first_row));
  const index_t ue = std::min(c.end_key, p.end_key(last_row));
  const index_t ib = std::max(c.first_key, p.first_key(last_row));
  // (A tree mask's drafts are seen by some rows only: they go row by row, below; so do all keys
  // under a programmable mask, which may hide any.)
  const bool programmed = p.mask_mod != nullptr || p.blocks != nullptr;
  const index_t ie =
      programmed ? ib
                 : std::min({c.end_key, p.end_key(c.first_row), c.tree != nullptr ? c.tree_from : c.end_key});
  Eigen::Map<RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>> out(c.out, R, dv, Eigen::OuterStride<>(ldo));
  out.setZero();
  if (ub >= ue) {
    std::fill(c.lse, c.lse + R, minus_inf);
    return;
  }
  // A few rows (decode proper) stream through the keys and values once, each row of them read
  // from memory once and used for every query row at once; more rows (chunked prefill), or
  // accumulators too wide for L1 (MLA's d_v = 512), go through Eigen's GEMM (tile_policy.hpp).
  const bool stream = decode_streams(cache_sizes(), R, dv, static_cast<index_t>(sizeof(T)));
  // A bf16 cache's GEMM path on bf16 pairs where this kernel has them (tiled.hpp: kPairs).
  const bool pairs = kPairs<S> && !stream;
  const index_t n = ue - ub;
  // Rows start 64-byte aligned; the pairs' logits are written in whole panels.
  const index_t lds = static_cast<index_t>(Arena<T>::round(pairs ? Micro<float>::whole_panels(n) : n));
  // Eigen's GEMM and its packing buffers, and the chunk's rows converted, for the GEMM path only
  // (the pairs pack their own).
  const bool gemm = !stream && !pairs;
  Blocking<T> qk(gemm ? R : 1, gemm ? n : 1, gemm ? dk : 1), pv(gemm ? R : 1, gemm ? dv : 1, gemm ? n : 1);
  const index_t pack_a = gemm ? std::max(qk.size_a(), pv.size_a()) : 0;
  const index_t pack_b = gemm ? std::max(qk.size_b(), pv.size_b()) : 0;
  const index_t rows_kept =
      gemm ? n : std::max<index_t>(kKeyBlock, kValueBlock);  // converted rows: the chunk's, or a few
  // (The pairs' prefill takes the low halves of the queries, R x d_k, in the keys' scratch.)
  const index_t k_rows = pairs ? std::max(rows_kept, R) : rows_kept;
  // (The pairs' strips, on AMX 16 rows, write their logits and products in whole strips.)
  const index_t s_rows = pairs ? whole_pair_strips(R) : R;
  Arena<T> arena(Arena<T>::round(s_rows * lds) + Arena<T>::round(k_rows * dk) +
                 Arena<T>::round(rows_kept * dv) + 2 * Arena<T>::round(R) + Arena<T>::round(pack_a) +
                 Arena<T>::round(pack_b) + Arena<T>::round(pairs ? s_rows * Micro<T>::whole_packets(dv) : 0) +
                 Arena<T>::round(programmed ? R * n : 0));
  // AMX: this thread's tiles configured for the pairs' GEMM path (decode proper streams without).
  [[maybe_unused]] std::optional<PairTiles<S>> amx_tiles;
  if (pairs) amx_tiles.emplace();
  T* const s = arena.take(s_rows * lds);
  T* const k_scratch = arena.take(k_rows * dk);
  T* const v_scratch = arena.take(rows_kept * dv);
  T* const m = arena.take(R);
  T* const l = arena.take(R);
  T* const block_a = arena.take(pack_a);
  T* const block_b = arena.take(pack_b);
  [[maybe_unused]] T* const pair_out = arena.take(pairs ? s_rows * Micro<T>::whole_packets(dv) : 0);
  T* const hidden = arena.take(programmed ? R * n : 0);  // 1: the programmable mask hides the key
  qk.use(block_a, block_b);
  pv.use(block_a, block_b);

  // S = scale Q K^T over the keys some row sees.
  const PagedRows<S> keys = keys_of<S>(c), values = values_of<S>(c);
  TileMap<T> S_(s, R, n, Eigen::OuterStride<>(lds));
  if (stream) {
    // kKeyBlock keys at a time (each converted into its own buffer where needed), the rest one by one.
    StoredRow<T, S> block[kKeyBlock];
    int held = 0;
    index_t first = ub;
    for_each_row<T, S>(c, keys, ub, ue, [&](index_t j, const S* k, float scale) {
      if (held == 0) first = j;
      block[held] = StoredRow<T, S>(k, dk, k_scratch + held * dk, scale);
      if (++held == kKeyBlock) {
        dots<kKeyBlock>(R, c.q, dk, block, p.scale, s + (first - ub), lds);
        held = 0;
      }
    });
    for (int b = 0; b < held; ++b) dots<1>(R, c.q, dk, &block[b], p.scale, s + (first + b - ub), lds);
  }
  index_t ldk = 0;
  const T* K = nullptr;
  if (pairs) {
#if defined(__AVX512BF16__)
    if constexpr (kPairs<S>) prefill_logits_pairs(c, keys, R, ub, n, s, lds, k_scratch);
#endif
  } else if (gemm) {
    K = paged_rows<T, S>(c, keys, ub, n, k_scratch, ldk);
    S_.setZero();
    gemm_abt(R, n, dk, c.q, std::max<index_t>(dk, 1), K, ldk, s, lds, p.scale, qk);
  }

  // Each row's softmax over the keys it sees; every other key weighs exactly 0.
  const bool extras = p.has_extras();
  RawProblem<T> head = p;
  head.mask_mod = nullptr, head.blocks = nullptr;  // applied below, where the keys it hides are noted
  const auto span = [&](index_t r, index_t& a, index_t& b) {
    const index_t i = c.first_row + r % c.rows;
    a = clamp_index(p.first_key(i), ub, ue) - ub;
    b = clamp_index(p.end_key(i), ub + a, ue) - ub;
  };
  for (index_t r = 0; r < R; ++r) {
    index_t a, b;
    span(r, a, b);
    S_.row(r).head(a).setZero();
    S_.row(r).tail(n - b).setZero();
    auto row = S_.row(r).segment(a, b - a);
    const index_t i = c.first_row + r % c.rows;
    head.head_index = p.head_index + r / c.rows;  // the query head of this row of the group
    if (extras) {
      if (p.has_alibi) head.alibi_slope = c.alibi[r / c.rows];
      apply_extras(head, i, ub + a, row);
    }
    if (programmed) {
      std::fill_n(hidden + r * n, n, T(0));
      RawProblem<T> masked = head;
      masked.mask_mod = p.mask_mod;
      masked.blocks = p.blocks != nullptr ? p.blocks + (r / c.rows) * p.block_head_stride : nullptr;
      for_each_programmed_hidden(masked, i, ub + a, b - a, [&](index_t t) {
        row(t) = minus_inf;
        hidden[r * n + a + t] = T(1);
      });
    }
    if (c.tree != nullptr)  // the drafts the tree hides from this row
      for (index_t j = std::max(ub + a, c.tree_from); j < ub + b; ++j)
        if (c.tree_hides(r, j)) row(j - ub - a) = minus_inf;
    const T max = row_max(row);
    m[r] = max;
    if (max == minus_inf) {  // no key of this chunk is visible to the row
      row.setZero();
      l[r] = 0;
      continue;
    }
    exp_in_packets<Shift::RowMax>(s + r * lds, a, b, max);
    l[r] = row.sum();
  }

  // out = P V over the keys every row sees, all rows at once; then each row's other keys.
  if (ib < ie) {
    if (stream) {
      // kValueBlock rows at a time (each converted into its own buffer where needed), the rest one by one.
      StoredRow<T, S> block[kValueBlock];
      int held = 0;
      index_t first = ib;
      for_each_row<T, S>(c, values, ib, ie, [&](index_t j, const S* v, float scale) {
        if (held == 0) first = j;
        block[held] = StoredRow<T, S>(v, dv, v_scratch + held * dv, scale);
        if (++held == kValueBlock) {
          axpys<kValueBlock>(R, s + (first - ub), lds, block, dv, c.out);
          held = 0;
        }
      });
      for (int b = 0; b < held; ++b) axpys<1>(R, s + (first + b - ub), lds, &block[b], dv, c.out);
    } else if (pairs) {
#if defined(__AVX512BF16__)
      if constexpr (kPairs<S>)
        prefill_values_pairs(c, c.values_in_keys ? keys : values, R, ib - ub, ie - ub, ub, s, lds, pair_out);
#endif
    } else {
      index_t ldv = 0;
      // A latent cache's values are the first d_v elements of its keys (PagedKVCache::latent):
      // the rows of K already at hand (in place or converted) are V's.
      const T* V =
          c.values_in_keys ? K + (ib - ub) * ldk : paged_rows<T, S>(c, values, ib, ie - ib, v_scratch, ldv);
      if (c.values_in_keys) ldv = ldk;
      gemm_ab(R, dv, ie - ib, s + (ib - ub), lds, V, ldv, c.out, ldo, pv);
    }
  }
  const auto ragged = [&](index_t j, const S* stored, float scale) {
    const StoredRow<T, S> v(stored, dv, v_scratch, scale);
    for (index_t r = 0; r < R; ++r) {
      index_t a, b;
      span(r, a, b);
      if (m[r] == minus_inf || j - ub < a || j - ub >= b || c.tree_hides(r, j)) continue;
      if (programmed && hidden[r * n + (j - ub)] != T(0)) continue;
      for (index_t e = 0; e < dv; ++e) out(r, e) += s[r * lds + (j - ub)] * v.at(e);
    }
  };
  if (ib < ie) {
    for_each_row<T, S>(c, values, ub, ib, ragged);
    for_each_row<T, S>(c, values, ie, ue, ragged);
  } else {
    for_each_row<T, S>(c, values, ub, ue, ragged);
  }
  for (index_t r = 0; r < R; ++r) {
    if (m[r] == minus_inf) {
      c.lse[r] = minus_inf;
    } else {
      out.row(r) /= l[r];
      c.lse[r] = m[r] + std::log(l[r]);
    }
  }
}

template <typename T>
void decode_chunk(const RawDecodeChunk<T>& c) {
  if constexpr (std::is_same_v<T, double>) {
    decode_chunk_as<T, double>(c);
  } else {
    switch (c.storage) {
      case ScalarType::BFloat16:
        decode_chunk_as<T, BFloat16Bits>(c);
        return;
      case ScalarType::Float16:
        decode_chunk_as<T, HalfBits>(c);
        return;
      case ScalarType::Int8:
        decode_chunk_as<T, Int8>(c);
        return;
      case ScalarType::Float8E4M3:
        decode_chunk_as<T, Float8E4M3>(c);
        return;
      case ScalarType::Float8E5M2:
        decode_chunk_as<T, Float8E5M2>(c);
        return;
      default:
        decode_chunk_as<T, float>(c);
        return;
    }
  }
}

}  // namespace
}  // namespace internal
}  // namespace EigenAttention
