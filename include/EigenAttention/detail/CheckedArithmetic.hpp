// SPDX-License-Identifier: MIT
/// \file detail/CheckedArithmetic.hpp
/// Overflow-checked std::ptrdiff_t arithmetic for the inline size and stride computations, in
/// standard C++ (no compiler builtins: the installed headers build with any C++17 compiler).
/// Not part of the documented API.
#pragma once

#ifndef EIGEN_ATTENTION_PUBLIC_HEADER
#error \
    "EigenAttention: <EigenAttention/detail/CheckedArithmetic.hpp> is internal, include <EigenAttention/EigenAttention.hpp> (or another public header) instead"
#endif

#include <cstddef>
#include <limits>

namespace EigenAttention {
namespace detail {

/// Stores a * b in `result` and returns true, or returns false, leaving `result` as it was, when
/// the product does not fit in std::ptrdiff_t. Checked before multiplying, so no overflow (and
/// no undefined behaviour) ever happens.
constexpr bool checked_mul(std::ptrdiff_t a, std::ptrdiff_t b, std::ptrdiff_t& result) noexcept {
  constexpr std::ptrdiff_t kMax = std::numeric_limits<std::ptrdiff_t>::max();
  constexpr std::ptrdiff_t kMin = std::numeric_limits<std::ptrdiff_t>::min();
  // Integer division truncates toward zero: each bound below is the product's limit divided
  // by one factor, rounded toward the range that fits.
  if (a > 0) {
    if (b > 0 ? a > kMax / b : b < kMin / a) return false;
  } else if (a < 0) {
    if (b > 0 ? a < kMin / b : (b < 0 && b < kMax / a)) return false;
  }
  result = a * b;
  return true;
}

/// Stores a + b in `result` and returns true, or returns false, leaving `result` as it was, when
/// the sum does not fit in std::ptrdiff_t.
constexpr bool checked_add(std::ptrdiff_t a, std::ptrdiff_t b, std::ptrdiff_t& result) noexcept {
  constexpr std::ptrdiff_t kMax = std::numeric_limits<std::ptrdiff_t>::max();
  constexpr std::ptrdiff_t kMin = std::numeric_limits<std::ptrdiff_t>::min();
  if (b > 0 ? a > kMax - b : a < kMin - b) return false;
  result = a + b;
  return true;
}

}  // namespace detail
}  // namespace EigenAttention
