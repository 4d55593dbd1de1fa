// SPDX-License-Identifier: MIT
/// \file Math.hpp
/// exp, tanh and sigmoid for score modifications (score_mod, Programmable.hpp), written in plain
/// arithmetic so that the compiler can inline them and vectorise the loop over a tile of logits:
/// std::tanh and std::exp are calls into the C library, one logit at a time (a soft-cap through
/// std::tanh runs several times slower than Options::softcap). Each has a float, a double and a
/// Dual overload, the Dual's value computed as the scalar one, so that the forward and the
/// backward see the same function.
///
/// \code
/// auto f = [](auto s, auto, auto, auto, auto) {
///   return 30 * EigenAttention::math::tanh(s / 30);  // a soft-cap the compiler vectorises
/// };
/// \endcode
///
/// Accuracy (measured against long double by test/math.cpp): exp within 2 ulp for arguments whose
/// result is a normal number (0 below, +inf above); tanh within 3 ulp; sigmoid within 4 ulp.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include <EigenAttention/Dual.hpp>

namespace EigenAttention {
namespace math {

namespace detail {

/// Round to the nearest integer (ties to even), for |x| < 2^22 (float) or 2^51 (double): adding
/// and subtracting 1.5 * 2^mantissa bits, which vectorises everywhere (no call, no rounding mode).
template <typename T>
inline T round_nearest(T x) {
  constexpr T shifter = std::is_same_v<T, float> ? T(12582912.0) : T(6755399441055744.0);
  return (x + shifter) - shifter;  // (not reassociated: this header must not be built with -ffast-math)
}

/// 2^n for an integer-valued n within the normal exponents.
template <typename T>
inline T power_of_two(T n) {
  if constexpr (std::is_same_v<T, float>) {
    const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
    float r;
    std::memcpy(&r, &bits, sizeof r);
    return r;
  } else {
    const std::int64_t bits = (static_cast<std::int64_t>(n) + 1023) << 52;
    double r;
    std::memcpy(&r, &bits, sizeof r);
    return r;
  }
}

}  // namespace detail

/// e^x: x = n ln2 + r, |r| <= ln2 / 2 (ln2 in two parts), e^r by its Taylor polynomial (degree 7
/// for float, 12 for double, in Horner's form), times 2^n. 0 below the smallest normal result,
/// +inf above the largest; NaN stays NaN.
template <typename T, typename = std::enable_if_t<std::is_floating_point_v<T>>>
inline T exp(T x) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "math::exp: float or double");
  constexpr bool kFloat = std::is_same_v<T, float>;
  constexpr T lo = kFloat ? T(-87.3) : T(-708.3), hi = kFloat ? T(88.7) : T(709.7);
  constexpr T log2e = T(1.4426950408889634073599246810018921L);
  constexpr T ln2_hi = kFloat ? T(0.693359375) : T(0.693147180369123816490);
  constexpr T ln2_lo = kFloat ? T(-2.12194440e-4) : T(1.90821492927058770002e-10);
  const T xc = x >= lo ? (x <= hi ? x : hi) : lo;  // (NaN: lo, so that n stays an integer)
  const T n = detail::round_nearest(xc * log2e);
  const T r = (xc - n * ln2_hi) - n * ln2_lo;
  T p;
  if constexpr (kFloat) {
    p = T(1.0L / 5040);
    for (const T c : {T(1.0L / 720), T(1.0L / 120), T(1.0L / 24), T(1.0L / 6), T(0.5), T(1), T(1)})
      p = c + r * p;
  } else {
    p = T(1.0L / 479001600);
    for (const T c :
         {T(1.0L / 39916800), T(1.0L / 3628800), T(1.0L / 362880), T(1.0L / 40320), T(1.0L / 5040),
          T(1.0L / 720), T(1.0L / 120), T(1.0L / 24), T(1.0L / 6), T(0.5), T(1), T(1)})
      p = c + r * p;
  }
  const T y = p * detail::power_of_two(n);
  const T result = x < lo ? T(0) : (x > hi ? std::numeric_limits<T>::infinity() : y);
  return x != x ? x : result;
}

/// e^x - 1 for x <= 0, without the cancellation near 0: x = n ln2 + r as in exp(), then
/// 2^n (e^r - 1) + (2^n - 1) with e^r - 1 by its Taylor polynomial (no constant term). -1 below
/// the clamp of exp().
template <typename T>
inline T expm1_nonpositive(T x) {
  constexpr bool kFloat = std::is_same_v<T, float>;
  constexpr T lo = kFloat ? T(-87.3) : T(-708.3);
  constexpr T log2e = T(1.4426950408889634073599246810018921L);
  constexpr T ln2_hi = kFloat ? T(0.693359375) : T(0.693147180369123816490);
  constexpr T ln2_lo = kFloat ? T(-2.12194440e-4) : T(1.90821492927058770002e-10);
  const T xc = x >= lo ? x : lo;  // (NaN: lo, so that n stays an integer)
  const T n = detail::round_nearest(xc * log2e);
  const T r = (xc - n * ln2_hi) - n * ln2_lo;
  T p;  // (e^r - 1) / r
  if constexpr (kFloat) {
    p = T(1.0L / 40320);
    for (const T c : {T(1.0L / 5040), T(1.0L / 720), T(1.0L / 120), T(1.0L / 24), T(1.0L / 6), T(0.5), T(1)})
      p = c + r * p;
  } else {
    p = T(1.0L / 6227020800);
    for (const T c :
         {T(1.0L / 479001600), T(1.0L / 39916800), T(1.0L / 3628800), T(1.0L / 362880), T(1.0L / 40320),
          T(1.0L / 5040), T(1.0L / 720), T(1.0L / 120), T(1.0L / 24), T(1.0L / 6), T(0.5), T(1)})
      p = c + r * p;
  }
  const T scale = detail::power_of_two(n);
  return scale * (r * p) + (scale - T(1));
}

/// tanh(x) = -m / (2 + m) with m = e^(-2|x|) - 1 (expm1_nonpositive: no cancellation near 0, and
/// 2 + m in (1, 2]), the sign of x; +-1 beyond |x| = 9 (float) or 19.1 (double), where tanh
/// rounds to +-1.
template <typename T, typename = std::enable_if_t<std::is_floating_point_v<T>>>
inline T tanh(T x) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "math::tanh: float or double");
  const T a = x < 0 ? -x : x;
  const T big = std::is_same_v<T, float> ? T(9) : T(19.1);
  const T m = expm1_nonpositive(T(-2) * (a > big ? big : a));
  const T t = -m / (T(2) + m);
  return x != x ? x : (x < 0 ? -t : t);
}

/// 1 / (1 + e^-x).
template <typename T, typename = std::enable_if_t<std::is_floating_point_v<T>>>
inline T sigmoid(T x) {
  return T(1) / (T(1) + math::exp(-x));
}

/// \name The same functions of a Dual (the backward's derivative), their values as above.
///@{
/// e^x of a Dual: math::exp's value, derivative e^x.
template <typename T>
inline Dual<T> exp(const Dual<T>& a) {
  const T e = math::exp(a.value);
  return {e, e * a.derivative};
}
/// tanh of a Dual: math::tanh's value, derivative 1 - tanh^2.
template <typename T>
inline Dual<T> tanh(const Dual<T>& a) {
  const T t = math::tanh(a.value);
  return {t, (T(1) - t * t) * a.derivative};
}
/// sigmoid of a Dual: math::sigmoid's value, derivative y (1 - y).
template <typename T>
inline Dual<T> sigmoid(const Dual<T>& a) {
  const T y = math::sigmoid(a.value);
  return {y, y * (T(1) - y) * a.derivative};
}
///@}

}  // namespace math
}  // namespace EigenAttention
