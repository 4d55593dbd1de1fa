// SPDX-License-Identifier: MIT
/// \file Dual.hpp
/// A forward-mode dual number: how the backward pass differentiates a score modification
/// (score_mod in Programmable.hpp). A score modification is written with `auto s`; the library
/// calls it with the compute scalar in the forward and with Dual<T>{s, 1} in the backward, and
/// reads the derivative from the result.
///
/// \code
/// auto f = [](auto s, auto, auto, auto q, auto k) {
///   using std::tanh;  // finds std::tanh for float and double, EigenAttention::tanh for Dual
///   return 30 * tanh(s / 30) - 0.5 * (q - k);
/// };
/// \endcode
///
/// Write the calls unqualified (`tanh(s)`, after `using std::tanh;`): `std::tanh(s)` does not
/// take a Dual. Arithmetic with an arithmetic operand converts it to T; comparisons compare
/// values (so a branch on s takes the branch its value takes, and differentiates that branch).
#pragma once

#include <cmath>
#include <type_traits>

namespace EigenAttention {

/// value + derivative * epsilon, epsilon^2 = 0: the chain rule, one operation at a time. Its
/// operators are hidden friends, so an arithmetic operand (an int index, a double literal)
/// converts to a constant Dual<T>.
template <typename T>
struct Dual {
  static_assert(std::is_floating_point_v<T>, "EigenAttention::Dual: T must be float or double");
  T value = 0;       ///< f(s)
  T derivative = 0;  ///< df/ds

  /// Zero.
  constexpr Dual() = default;
  /// A constant: derivative 0.
  constexpr Dual(T v) : value(v) {}  // NOLINT: implicit, as a scalar converts
  /// A value and its derivative.
  constexpr Dual(T v, T d) : value(v), derivative(d) {}

  ///@{
  /// Arithmetic, in place.
  constexpr Dual& operator+=(const Dual& o) { return *this = *this + o; }
  constexpr Dual& operator-=(const Dual& o) { return *this = *this - o; }
  constexpr Dual& operator*=(const Dual& o) { return *this = *this * o; }
  constexpr Dual& operator/=(const Dual& o) { return *this = *this / o; }
  ///@}

  ///@{
  /// Arithmetic: the values combined, the derivatives by the chain rule.
  friend constexpr Dual operator+(const Dual& a) { return a; }
  friend constexpr Dual operator-(const Dual& a) { return {-a.value, -a.derivative}; }
  friend constexpr Dual operator+(const Dual& a, const Dual& b) {
    return {a.value + b.value, a.derivative + b.derivative};
  }
  friend constexpr Dual operator-(const Dual& a, const Dual& b) {
    return {a.value - b.value, a.derivative - b.derivative};
  }
  friend constexpr Dual operator*(const Dual& a, const Dual& b) {
    return {a.value * b.value, a.derivative * b.value + a.value * b.derivative};
  }
  friend constexpr Dual operator/(const Dual& a, const Dual& b) {
    const T q = a.value / b.value;
    return {q, (a.derivative - q * b.derivative) / b.value};
  }
  ///@}

  ///@{
  /// Comparisons of the values.
  friend constexpr bool operator<(const Dual& a, const Dual& b) { return a.value < b.value; }
  friend constexpr bool operator>(const Dual& a, const Dual& b) { return a.value > b.value; }
  friend constexpr bool operator<=(const Dual& a, const Dual& b) { return a.value <= b.value; }
  friend constexpr bool operator>=(const Dual& a, const Dual& b) { return a.value >= b.value; }
  friend constexpr bool operator==(const Dual& a, const Dual& b) { return a.value == b.value; }
  friend constexpr bool operator!=(const Dual& a, const Dual& b) { return a.value != b.value; }
  ///@}
};

/// \name Functions of a Dual (found by argument-dependent lookup: call them unqualified).
///@{
template <typename T>
Dual<T> exp(const Dual<T>& a) {
  const T e = std::exp(a.value);
  return {e, e * a.derivative};
}
template <typename T>
Dual<T> log(const Dual<T>& a) {
  return {std::log(a.value), a.derivative / a.value};
}
template <typename T>
Dual<T> sqrt(const Dual<T>& a) {
  const T r = std::sqrt(a.value);
  return {r, a.derivative / (2 * r)};
}
template <typename T>
Dual<T> tanh(const Dual<T>& a) {
  const T t = std::tanh(a.value);
  return {t, (1 - t * t) * a.derivative};
}
template <typename T>
Dual<T> sin(const Dual<T>& a) {
  return {std::sin(a.value), std::cos(a.value) * a.derivative};
}
template <typename T>
Dual<T> cos(const Dual<T>& a) {
  return {std::cos(a.value), -std::sin(a.value) * a.derivative};
}
/// |a|, with derivative sign(a) (0 at 0).
template <typename T>
Dual<T> abs(const Dual<T>& a) {
  return a.value < 0 ? -a : (a.value > 0 ? a : Dual<T>(a.value, 0));
}
template <typename T>
Dual<T> fabs(const Dual<T>& a) {
  return abs(a);
}
/// a^p for a constant exponent.
template <typename T, typename U, typename = std::enable_if_t<std::is_arithmetic_v<U>>>
Dual<T> pow(const Dual<T>& a, U p) {
  const T e = static_cast<T>(p);
  return {std::pow(a.value, e), e * std::pow(a.value, e - 1) * a.derivative};
}
/// 1 / (1 + exp(-a)).
template <typename T>
Dual<T> sigmoid(const Dual<T>& a) {
  const T y = 1 / (1 + std::exp(-a.value));
  return {y, y * (1 - y) * a.derivative};
}
/// 1 / (1 + exp(-a)) for a scalar (so that one `sigmoid(s)` serves both instantiations).
template <typename T, typename = std::enable_if_t<std::is_floating_point_v<T>>>
T sigmoid(T a) {
  return 1 / (1 + std::exp(-a));
}
/// The larger (smaller) of two values and its derivative (a's when they are equal).
template <typename T>
Dual<T> max(const Dual<T>& a, const Dual<T>& b) {
  return b.value > a.value ? b : a;
}
template <typename T>
Dual<T> min(const Dual<T>& a, const Dual<T>& b) {
  return b.value < a.value ? b : a;
}
///@}

///@{
/// The value of a Dual, or a scalar itself (for code written once for both).
template <typename T>
constexpr T value_of(const Dual<T>& a) {
  return a.value;
}
template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
constexpr T value_of(T a) {
  return a;
}
///@}

}  // namespace EigenAttention
