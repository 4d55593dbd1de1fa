// SPDX-License-Identifier: MIT
// The quantized KV-cache storage types (Int8, Float8E4M3, Float8E5M2 of Scalars.hpp), both ways:
// quantize_row(), which append() runs on each token's head (kv_cache.cpp), and the value of a
// stored element, which decode reads scale x value of, element by element or a packet at a
// time in registers (kernels/decode.hpp, kernels/reference_decode.cpp). Internal; included by
// the library and by the kernels (each with its own instruction set, see tiled.hpp).
//
// Every stored element decodes to a float exactly (int8: its integer; FP8: its value, which a
// float holds exactly), and the dequantized element is that float times the token's scale,
// rounded once: fl(scale x value). Every path below computes that same float, so a decode on a
// quantized cache is bitwise the decode on a float cache holding the dequantized elements.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include <EigenAttention/Scalars.hpp>

#include "index.hpp"

namespace EigenAttention {
namespace internal {
namespace {

/// What a quantized format holds: its largest finite magnitude (the scale maps each token's
/// max |x| to it), and, for the FP8 formats, fraction bits, exponent bias and smallest normal
/// exponent.
template <typename Q>
struct QuantizedFormat;
template <>
struct QuantizedFormat<Int8> {
  static constexpr float kMax = 127;
};
template <>
struct QuantizedFormat<Float8E4M3> {  // OCP E4M3 ("fn": no infinity, S.1111.111 is NaN)
  static constexpr float kMax = 448;
  static constexpr int kFraction = 3, kBias = 7, kMinExponent = -6;
};
template <>
struct QuantizedFormat<Float8E5M2> {  // OCP E5M2: the top byte of an IEEE half
  static constexpr float kMax = 57344;
  static constexpr int kFraction = 2, kBias = 15, kMinExponent = -14;
};

/// The value of a stored element (exact in float).
inline float to_compute(Int8 x) { return static_cast<float>(x.bits); }
inline float to_compute(Float8E4M3 x) {
  const unsigned magnitude = x.bits & 0x7fu, exponent = magnitude >> 3, fraction = magnitude & 7u;
  float v;
  if (magnitude == 0x7fu) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    v = std::ldexp(static_cast<float>(fraction), -9);  // subnormal: fraction x 2^(1 - 7 - 3)
  } else {
    v = std::ldexp(static_cast<float>(8 + fraction), static_cast<int>(exponent) - 10);
  }
  return (x.bits & 0x80u) != 0 ? -v : v;
}
inline float to_compute(Float8E5M2 x) {
  const unsigned exponent = (x.bits >> 2) & 31u, fraction = x.bits & 3u;
  float v;
  if (exponent == 31) {
    v = fraction == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    v = std::ldexp(static_cast<float>(fraction), -16);  // subnormal: fraction x 2^(1 - 15 - 2)
  } else {
    v = std::ldexp(static_cast<float>(4 + fraction), static_cast<int>(exponent) - 17);
  }
  return (x.bits & 0x80u) != 0 ? -v : v;
}

/// y rounded to an integer, ties to even, for |y| < 2^22: the float addition rounds to the
/// nearest integer in the default rounding mode (which nothing in the library changes).
inline float round_to_integer(float y) {
  constexpr float kMagic = 12582912.0f;  // 1.5 x 2^23
  return (y + kMagic) - kMagic;
}

/// The element nearest to y (|y| <= about the format's largest value), ties to even, saturating
/// at the largest finite magnitude. y is finite.
template <typename Q>
Q encode(float y) {
  using F = QuantizedFormat<Q>;
  const float a = std::min(std::fabs(y), F::kMax);
  if constexpr (std::is_same_v<Q, Int8>) {
    return {static_cast<std::int8_t>(round_to_integer(std::copysign(a, y)))};
  } else {
    constexpr int kShift = 23 - F::kFraction;  // the float fraction bits the format drops
    std::uint32_t b;
    std::memcpy(&b, &a, sizeof b);
    std::uint32_t bits;
    if (static_cast<int>(b >> 23) - 127 >= F::kMinExponent) {
      // A normal element: the fraction rounded to kFraction bits, ties to even, on the bits (a
      // carry moves into the exponent; a <= kMax, which the format holds, so no overflow).
      b += (1u << (kShift - 1)) - 1 + ((b >> kShift) & 1u);
      const std::uint32_t exponent = (b >> 23) - 127 + F::kBias;
      bits = (exponent << F::kFraction) | ((b >> kShift) & ((1u << F::kFraction) - 1));
    } else {
      // A subnormal element (or zero): a multiple of 2^(kMinExponent - kFraction), scaled exactly;
      // 2^kFraction of them is the smallest normal, whose bits are that count too.
      constexpr float kUnits = static_cast<float>(1u << (F::kFraction - F::kMinExponent));  // 1 / spacing
      bits = static_cast<std::uint32_t>(round_to_integer(a * kUnits));
    }
    if (std::signbit(y)) bits |= 0x80u;
    return {static_cast<std::uint8_t>(bits)};
  }
}

/// The scale of a row whose largest magnitude is `max_abs` (finite): max_abs over the format's
/// largest value, so that the row's largest element is stored as that value; 0 for a row of
/// zeros (or of magnitudes so small that the scale underflows: they are stored as 0).
template <typename Q>
float quantization_scale(float max_abs) {
  return max_abs / QuantizedFormat<Q>::kMax;
}

/// Quantizes x[0, n) (finite) into dst with one scale, returned: dst[c] = x[c] / scale rounded to
/// the nearest element, ties to even, saturating (encode()).
template <typename Q>
float quantize_row(const float* x, index_t n, Q* dst) {
  float max_abs = 0;
  for (index_t c = 0; c < n; ++c) max_abs = std::max(max_abs, std::fabs(x[c]));
  const float scale = quantization_scale<Q>(max_abs);
  for (index_t c = 0; c < n; ++c) dst[c] = scale == 0 ? Q{0} : encode<Q>(x[c] / scale);
  return scale;
}

// Packets of 8-bit elements decoded to floats (exact) in registers: 16 with AVX-512, 8 with AVX2
// (the FP8 formats through the half conversion of F16C, which the AVX2 kernel has).
#if defined(__AVX512F__)
inline __m512 value_packet(const Int8* src) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))));
}
inline __m512 value_packet(const Float8E5M2* src) {  // the top byte of a half
  const __m256i h =
      _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))), 8);
  return _mm512_cvtph_ps(h);
}
inline __m512 value_packet(const Float8E4M3* src) {
  // Exponent and fraction moved into a half's (bias 15 instead of 7: the value / 256, subnormals
  // included), the sign to the half's; then x 256 (exact), and S.1111.111 (which reads 480) NaN.
  const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  const __m256i h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7f)), 7),
                                    _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8));
  const __m512 v = _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.0f));
  const __mmask16 nan = _mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(480.0f), _CMP_EQ_OQ);
  return _mm512_mask_mov_ps(v, nan, _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
}
constexpr index_t kValuePacket = 16;
#elif defined(__AVX2__) && defined(__F16C__)
inline __m256 value_packet(const Int8* src) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src))));
}
inline __m256 value_packet(const Float8E5M2* src) {
  const __m128i h =
      _mm_slli_epi16(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src))), 8);
  return _mm256_cvtph_ps(h);
}
inline __m256 value_packet(const Float8E4M3* src) {
  const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src)));
  const __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x7f)), 7),
                                 _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8));
  const __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));
  const __m256 abs = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
  const __m256 nan = _mm256_cmp_ps(abs, _mm256_set1_ps(480.0f), _CMP_EQ_OQ);
  return _mm256_blendv_ps(v, _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()), nan);
}
constexpr index_t kValuePacket = 8;
#else
constexpr index_t kValuePacket = 0;  // element by element
#endif

/// dst[0, n) = scale x src[0, n): the dequantized elements, fl(scale x value) each.
template <typename Q>
void dequantize(const Q* src, index_t n, float scale, float* dst) {
  index_t j = 0;
#if defined(__AVX512F__)
  const __m512 s = _mm512_set1_ps(scale);
  for (; j + kValuePacket <= n; j += kValuePacket)
    _mm512_storeu_ps(dst + j, _mm512_mul_ps(value_packet(src + j), s));
#elif defined(__AVX2__) && defined(__F16C__)
  const __m256 s = _mm256_set1_ps(scale);
  for (; j + kValuePacket <= n; j += kValuePacket)
    _mm256_storeu_ps(dst + j, _mm256_mul_ps(value_packet(src + j), s));
#endif
  for (; j < n; ++j) dst[j] = scale * to_compute(src[j]);
}

}  // namespace
}  // namespace internal
}  // namespace EigenAttention
