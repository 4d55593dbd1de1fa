// SPDX-License-Identifier: MIT
// Conversions between the element types of the arrays a call reads and writes (float, double,
// BFloat16Bits, HalfBits) and the type it computes in. The 16-bit types are storage only: a tile
// is widened to float as it is loaded, and a result row is rounded (to nearest, ties to even;
// NaN stays NaN) as it is stored. Eigen 3.4's bfloat16 and half do the scalar conversions (their
// arithmetic, which rounds after every operation, is never used); the row conversions use the
// CPU's packet conversions where the translation unit is compiled for them. Internal; included
// by the library and by the kernels (each with its own renamed Eigen, see tiled.hpp).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <Eigen/Core>

#if defined(__AVX512F__) || defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "index.hpp"
#include "kernels/abi.hpp"

namespace EigenAttention {
namespace internal {
namespace {

/// The value of one element in the compute type.
inline float to_compute(BFloat16Bits x) {
  const std::uint32_t bits = static_cast<std::uint32_t>(x.bits) << 16;  // exact: bf16 is a float's top half
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline float to_compute(HalfBits x) {
  return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(static_cast<std::uint16_t>(x.bits)));
}
inline float to_compute(float x) { return x; }
inline double to_compute(double x) { return x; }

/// An element of type T holding `x` rounded to nearest, ties to even (NaN stays NaN).
template <typename T>
T from_compute(ComputeScalar<T> x) {
  if constexpr (std::is_same_v<T, BFloat16Bits>) {
    return {Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(x))};
  } else if constexpr (std::is_same_v<T, HalfBits>) {
    return {Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(x))};
  } else {
    return x;
  }
}

// Packets of 16-bit elements widened to floats in registers, where the instruction set has a
// packet of floats that wide: bfloat16 with AVX-512 (16) or AVX2 (8), half with AVX-512 (16) or
// F16C (8). widen() below and the decode kernel's rows (kernels/decode.hpp) read through these.
#if defined(__AVX512F__)
/// src[0, 16) as 16 floats.
inline __m512 widen_packet(const BFloat16Bits* src) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));  // exact: bf16 is a float's top half
}
/// src[0, 16) as 16 floats.
inline __m512 widen_packet(const HalfBits* src) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
}
constexpr index_t kWidePacketBFloat16 = 16, kWidePacketHalf = 16;
#else
#if defined(__AVX2__)
/// src[0, 8) as 8 floats.
inline __m256 widen_packet(const BFloat16Bits* src) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));  // exact: bf16 is a float's top half
}
constexpr index_t kWidePacketBFloat16 = 8;
#endif
#if defined(__F16C__)
/// src[0, 8) as 8 floats.
inline __m256 widen_packet(const HalfBits* src) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
}
constexpr index_t kWidePacketHalf = 8;
#endif
#endif

/// dst[0, n) = src[0, n * stride) widened to float (stride in elements).
template <typename T>
void widen(const T* src, index_t stride, index_t n, float* dst) {
  index_t j = 0;
  if (stride == 1) {
    if constexpr (std::is_same_v<T, BFloat16Bits>) {
#if defined(__AVX512F__)
      for (; j + kWidePacketBFloat16 <= n; j += kWidePacketBFloat16)
        _mm512_storeu_ps(dst + j, widen_packet(src + j));
#elif defined(__AVX2__)
      for (; j + kWidePacketBFloat16 <= n; j += kWidePacketBFloat16)
        _mm256_storeu_ps(dst + j, widen_packet(src + j));
#endif
    } else if constexpr (std::is_same_v<T, HalfBits>) {
#if defined(__AVX512F__)
      for (; j + kWidePacketHalf <= n; j += kWidePacketHalf) _mm512_storeu_ps(dst + j, widen_packet(src + j));
#elif defined(__F16C__)
      for (; j + kWidePacketHalf <= n; j += kWidePacketHalf) _mm256_storeu_ps(dst + j, widen_packet(src + j));
#endif
    }
  }
  for (; j < n; ++j) dst[j] = to_compute(src[j * stride]);
}

/// dst[0, n * stride) = src[0, n) rounded to T (stride in elements). The packet paths round as
/// the scalar one (Eigen's conversions) does, NaN included: bfloat16 adds 0x7fff plus the lowest
/// kept bit and truncates, and a NaN becomes the quiet NaN of its sign (0x7fc0 / 0xffc0); half
/// uses vcvtps2ph, which rounds to nearest even.
template <typename T>
void narrow(const float* src, index_t n, T* dst, index_t stride) {
  index_t j = 0;
#if defined(__AVX512F__)
  if (stride == 1) {
    if constexpr (std::is_same_v<T, HalfBits>) {
      for (; j + 16 <= n; j += 16) {
        const __m256i h =
            _mm512_cvtps_ph(_mm512_loadu_ps(src + j), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j), h);
      }
    } else if constexpr (std::is_same_v<T, BFloat16Bits>) {
      const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
      const __m512i sign = _mm512_set1_epi32(0x8000), quiet = _mm512_set1_epi32(0x7fc0);
      for (; j + 16 <= n; j += 16) {
        const __m512 x = _mm512_loadu_ps(src + j);
        const __m512i bits = _mm512_castps_si512(x);
        const __m512i high = _mm512_srli_epi32(bits, 16);
        __m512i r = _mm512_srli_epi32(
            _mm512_add_epi32(bits, _mm512_add_epi32(bias, _mm512_and_si512(high, one))), 16);
        const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
        r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_and_si512(high, sign), quiet));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j), _mm512_cvtepi32_epi16(r));
      }
    }
  }
#endif
  for (; j < n; ++j) dst[j * stride] = from_compute<T>(src[j]);
}

}  // namespace
}  // namespace internal
}  // namespace EigenAttention
