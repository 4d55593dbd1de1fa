// The decode kernel: one split-K chunk of paged keys and values (RawDecodeChunk, abi.hpp) for
// the query rows of one GQA group, compiled once per kernel of the table like tiled.hpp.
// Internal.
//
// A decode step is bound by memory bandwidth: each key and value is read once per GQA group,
// whatever the number of query heads that share it, so the rows of all of the group's heads
// go through one product with the keys (M = keys, N = heads x tokens in Eigen's GEMM, which
// suits its micro-kernel) and one with the values. Within a chunk (at most kDecodeChunk keys)
// the softmax is exact in two passes: the logits of the whole chunk, then exp(logit - max) and
// the product with V; decode.cpp merges the chunks by their log-sum-exp in key order.
//
// Keys and values come from pages: in place when the chunk lies in pages that follow each
// other in memory and are stored in the compute type, otherwise gathered (and converted from
// bfloat16 or half) into per-thread scratch, so that the page size changes only the copy loop.
//
// Masks are the forward's (RawProblem::first_key/end_key and apply_extras from tiled.hpp), at
// the queries' positions in the sequence. The product with V runs as one GEMM over the keys
// that every row of the chunk sees; a row's other visible keys (a causal or window edge when
// several tokens are decoded) are added row by row, so that a hidden NaN or Inf never reaches a
// row that does not see it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include <EigenAttention/KVCache.hpp>

#include "kernels/tiled.hpp"

namespace EigenAttention {
namespace internal {
namespace {

/// bfloat16 and half are read as their 16 bits, converted here.
struct Bf16Bits {
  std::uint16_t bits;
};
struct HalfBits {
  std::uint16_t bits;
};

/// dst[0, n) = src[0, n), converted to T.
template <typename T, typename S>
void convert_row(const S* src, T* dst, index_t n) {
  if constexpr (std::is_same_v<S, T>) {
    std::copy(src, src + n, dst);
  } else if constexpr (std::is_same_v<S, Bf16Bits>) {
    static_assert(std::is_same_v<T, float>, "bfloat16 is computed in float");
    // A bfloat16 is the high half of a float: exact, and vectorised by the compiler.
    const auto* bits = reinterpret_cast<const std::uint16_t*>(src);
    for (index_t c = 0; c < n; ++c) {
      const std::uint32_t u = static_cast<std::uint32_t>(bits[c]) << 16;
      std::memcpy(dst + c, &u, sizeof(float));
    }
  } else {
    static_assert(std::is_same_v<S, HalfBits> && std::is_same_v<T, float>, "half is computed in float");
    const auto* bits = reinterpret_cast<const std::uint16_t*>(src);
    index_t c = 0;
#if defined(__AVX512F__)
    for (; c + 16 <= n; c += 16) {
      _mm512_storeu_ps(dst + c,
                       _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits + c))));
    }
#elif defined(__F16C__)
    for (; c + 8 <= n; c += 8) {
      _mm256_storeu_ps(dst + c, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bits + c))));
    }
#endif
    for (; c < n; ++c) {
      dst[c] = static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(bits[c]));
    }
  }
}

/// Keys (or values) [first, first + n) of the chunk's KV head as a row-major block of T with
/// row stride `ld`: in place when they are of type T and lie in pages that follow each other in
/// memory, else gathered into `scratch` (n x dim).
template <typename T, typename S>
const T* paged_rows(const RawDecodeChunk<T>& c, const S* base, index_t page_stride, index_t token_stride,
                    index_t dim, index_t first, index_t n, T* scratch, index_t& ld) {
  const index_t ps = c.page_size;
  if constexpr (std::is_same_v<S, T>) {
    const index_t p0 = first / ps, p1 = (first + n - 1) / ps;
    bool in_place = p0 == p1 || page_stride == ps * token_stride;
    for (index_t p = p0; in_place && p < p1; ++p) in_place = c.pages[p + 1] == c.pages[p] + 1;
    if (in_place) {
      ld = token_stride;
      return base + c.pages[p0] * page_stride + (first % ps) * token_stride;
    }
  }
  for (index_t t = 0; t < n;) {
    const index_t pos = first + t, slot = pos % ps, run = std::min(n - t, ps - slot);
    const S* page = base + c.pages[pos / ps] * page_stride + slot * token_stride;
    for (index_t u = 0; u < run; ++u) convert_row(page + u * token_stride, scratch + (t + u) * dim, dim);
    t += run;
  }
  ld = std::max<index_t>(dim, 1);
  return scratch;
}

template <typename T, typename S>
void decode_chunk_as(const RawDecodeChunk<T>& c) {
  const T minus_inf = -std::numeric_limits<T>::infinity();
  const RawProblem<T>& p = c.shape;
  const index_t R = c.group * c.rows, dk = c.d_k, dv = c.d_v;
  const index_t last_row = c.first_row + c.rows - 1;
  // Keys that some row of the chunk sees (union), and that all see (both ends are
  // non-decreasing in the row).
  const index_t ub = std::max(c.first_key, p.first_key(c.first_row));
  const index_t ue = std::min(c.end_key, p.end_key(last_row));
  const index_t ib = std::max(c.first_key, p.first_key(last_row));
  const index_t ie = std::min(c.end_key, p.end_key(c.first_row));
  Eigen::Map<RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>> out(
      c.out, R, dv, Eigen::OuterStride<>(std::max<index_t>(dv, 1)));
  out.setZero();
  if (ub >= ue) {
    std::fill(c.lse, c.lse + R, minus_inf);
    return;
  }
  const index_t n = ue - ub;
  const index_t lds = static_cast<index_t>(Arena<T>::round(n));  // rows start 64-byte aligned
  Blocking<T> qk(R, n, dk), pv(R, dv, n);
  const index_t pack_a = std::max(qk.size_a(), pv.size_a()), pack_b = std::max(qk.size_b(), pv.size_b());
  Arena<T> arena(Arena<T>::round(R * lds) + Arena<T>::round(n * dk) + Arena<T>::round(n * dv) +
                 2 * Arena<T>::round(R) + Arena<T>::round(pack_a) + Arena<T>::round(pack_b));
  T* const s = arena.take(R * lds);
  T* const k_scratch = arena.take(n * dk);
  T* const v_scratch = arena.take(n * dv);
  T* const m = arena.take(R);
  T* const l = arena.take(R);
  T* const block_a = arena.take(pack_a);
  T* const block_b = arena.take(pack_b);
  qk.use(block_a, block_b);
  pv.use(block_a, block_b);

  // S = scale Q K^T over the keys some row sees.
  const S* const k_base = static_cast<const S*>(c.k);
  const S* const v_base = static_cast<const S*>(c.v);
  index_t ldk = 0;
  const T* K = paged_rows<T, S>(c, k_base, c.k_page_stride, c.k_token_stride, dk, ub, n, k_scratch, ldk);
  TileMap<T> S_(s, R, n, Eigen::OuterStride<>(lds));
  S_.setZero();
  gemm_abt(R, n, dk, c.q, std::max<index_t>(dk, 1), K, ldk, s, lds, p.scale, qk);

  // Each row's softmax over the keys it sees; every other key weighs exactly 0.
  const bool extras = p.has_extras();
  RawProblem<T> head = p;
  for (index_t r = 0; r < R; ++r) {
    const index_t i = c.first_row + r % c.rows;
    const index_t a = std::clamp<index_t>(p.first_key(i), ub, ue) - ub;
    const index_t b = std::clamp<index_t>(p.end_key(i), ub + a, ue) - ub;
    S_.row(r).head(a).setZero();
    S_.row(r).tail(n - b).setZero();
    auto row = S_.row(r).segment(a, b - a);
    if (extras) {
      if (p.has_alibi) head.alibi_slope = c.alibi[r / c.rows];
      apply_extras(head, i, ub + a, row);
    }
    const T max = row_max(row);
    m[r] = max;
    if (max == minus_inf) {  // no key of this chunk is visible to the row
      row.setZero();
      l[r] = 0;
      continue;
    }
    exp_in_packets(s + r * lds, a, b, max);
    l[r] = row.sum();
  }

  // out = P V: one GEMM over the keys every row sees, the rest row by row.
  index_t ldv = 0;
  const T* V = paged_rows<T, S>(c, v_base, c.v_page_stride, c.v_token_stride, dv, ub, n, v_scratch, ldv);
  if (ib < ie)
    gemm_ab(R, dv, ie - ib, s + (ib - ub), lds, V + (ib - ub) * ldv, ldv, c.out, std::max<index_t>(dv, 1),
            pv);
  for (index_t r = 0; r < R; ++r) {
    if (m[r] == minus_inf) continue;
    const index_t i = c.first_row + r % c.rows;
    const index_t a = std::clamp<index_t>(p.first_key(i), ub, ue) - ub;
    const index_t b = std::clamp<index_t>(p.end_key(i), ub + a, ue) - ub;
    for (index_t j = a; j < b; ++j) {
      if (j >= ib - ub && j < ie - ub) continue;  // in the GEMM
      out.row(r).noalias() +=
          s[r * lds + j] * Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(V + j * ldv, dv);
    }
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
      case KVStorage::BFloat16:
        decode_chunk_as<T, Bf16Bits>(c);
        return;
      case KVStorage::Float16:
        decode_chunk_as<T, HalfBits>(c);
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
