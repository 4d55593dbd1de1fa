// SPDX-License-Identifier: MIT
// detail::checked_mul and detail::checked_add (detail/CheckedArithmetic.hpp): the portable,
// builtin-free overflow checks of the inline stride and span arithmetic (StrideProduct.hpp,
// FrontDoor.hpp). Every compiler runs this very code; on GCC and Clang it is also compared with
// __builtin_mul_overflow / __builtin_add_overflow over every pair of edge values.
#include <doctest/doctest.h>

#include <cstddef>
#include <limits>
#include <vector>

#include <EigenAttention/EigenAttention.hpp>  // the detail header comes through a public one

namespace test_checked_arithmetic {

namespace {

using EigenAttention::detail::checked_add;
using EigenAttention::detail::checked_mul;
using std::ptrdiff_t;

constexpr ptrdiff_t kMax = std::numeric_limits<ptrdiff_t>::max();
constexpr ptrdiff_t kMin = std::numeric_limits<ptrdiff_t>::min();

constexpr bool mul_fits(ptrdiff_t a, ptrdiff_t b) {
  ptrdiff_t r = 0;
  return checked_mul(a, b, r);
}
constexpr bool add_fits(ptrdiff_t a, ptrdiff_t b) {
  ptrdiff_t r = 0;
  return checked_add(a, b, r);
}
constexpr ptrdiff_t mul(ptrdiff_t a, ptrdiff_t b) {
  ptrdiff_t r = 0;
  checked_mul(a, b, r);
  return r;
}
constexpr ptrdiff_t add(ptrdiff_t a, ptrdiff_t b) {
  ptrdiff_t r = 0;
  checked_add(a, b, r);
  return r;
}

// Constant evaluation rejects undefined behaviour: these also prove that no check overflows.
static_assert(mul_fits(kMax, 1) && mul(kMax, 1) == kMax);
static_assert(mul_fits(kMin, 1) && mul(kMin, 1) == kMin);
static_assert(mul_fits(kMax, -1) && mul(kMax, -1) == -kMax);
static_assert(!mul_fits(kMin, -1) && !mul_fits(-1, kMin));
static_assert(!mul_fits(kMax, 2) && !mul_fits(kMin, 2) && !mul_fits(kMin, kMin) && !mul_fits(kMax, kMin));
static_assert(mul_fits(kMin / 2, 2) && mul(kMin / 2, 2) == kMin);
static_assert(add_fits(kMax, kMin) && add(kMax, kMin) == -1);
static_assert(!add_fits(kMax, 1) && !add_fits(kMin, -1) && !add_fits(kMax, kMax) && !add_fits(kMin, kMin));

}  // namespace

TEST_CASE("checked_mul: zero, one and minus one") {
  for (ptrdiff_t x : {ptrdiff_t(0), ptrdiff_t(1), ptrdiff_t(-1), ptrdiff_t(7), kMax, kMin}) {
    CAPTURE(x);
    CHECK(mul_fits(0, x));
    CHECK(mul_fits(x, 0));
    CHECK(mul(0, x) == 0);
    CHECK(mul(x, 0) == 0);
    CHECK(mul_fits(1, x));
    CHECK(mul_fits(x, 1));
    CHECK(mul(1, x) == x);
    CHECK(mul(x, 1) == x);
    // -x overflows only for the minimum.
    CHECK(mul_fits(-1, x) == (x != kMin));
    CHECK(mul_fits(x, -1) == (x != kMin));
    if (x != kMin) {
      CHECK(mul(-1, x) == -x);
      CHECK(mul(x, -1) == -x);
    }
  }
}

TEST_CASE("checked_mul: products that just fit and just overflow, every sign") {
  // kMax = 2 * (kMax / 2) + 1 and kMin = 2 * (kMin / 2).
  const ptrdiff_t half_max = kMax / 2, half_min = kMin / 2;
  CHECK(mul(half_max, 2) == kMax - 1);
  CHECK(mul(2, half_max) == kMax - 1);
  CHECK_FALSE(mul_fits(half_max + 1, 2));
  CHECK_FALSE(mul_fits(2, half_max + 1));
  CHECK(mul(half_min, 2) == kMin);
  CHECK(mul(2, half_min) == kMin);
  CHECK_FALSE(mul_fits(half_min - 1, 2));
  CHECK_FALSE(mul_fits(2, half_min - 1));
  CHECK(mul(-half_max, -2) == kMax - 1);
  CHECK_FALSE(mul_fits(-half_max - 1, -2));
  CHECK(mul(half_max + 1, -2) == kMin);
  CHECK(mul(-2, half_max + 1) == kMin);
  CHECK_FALSE(mul_fits(half_max + 2, -2));
  CHECK_FALSE(mul_fits(-2, half_max + 2));
  CHECK_FALSE(mul_fits(kMax, kMax));
  CHECK_FALSE(mul_fits(kMin, kMin));
  CHECK_FALSE(mul_fits(kMax, kMin));
  CHECK_FALSE(mul_fits(kMin, kMax));
  // Around the square root of the maximum (for a 64-bit std::ptrdiff_t, 3037000499^2 fits).
  if constexpr (sizeof(ptrdiff_t) == 8) {
    const ptrdiff_t root = 3037000499;
    CHECK(mul(root, root) == ptrdiff_t(9223372030926249001));
    CHECK(mul(-root, -root) == ptrdiff_t(9223372030926249001));
    CHECK(mul(-root, root) == -ptrdiff_t(9223372030926249001));
    CHECK_FALSE(mul_fits(root + 1, root + 1));
    CHECK_FALSE(mul_fits(-(root + 1), -(root + 1)));
    // (root + 1)^2 = 9223372037000250000 > kMax, but -(root + 1)^2 is below kMin too
    // (|kMin| = 9223372036854775808).
    CHECK_FALSE(mul_fits(root + 1, -(root + 1)));
    // A negative product that just fits: kMin = -2^63 = 2^32 * -2^31.
    CHECK(mul(ptrdiff_t(1) << 32, -(ptrdiff_t(1) << 31)) == kMin);
    CHECK_FALSE(mul_fits(ptrdiff_t(1) << 32, ptrdiff_t(1) << 31));
  }
}

TEST_CASE("checked_add: edge values") {
  CHECK(add(kMax, 0) == kMax);
  CHECK(add(0, kMin) == kMin);
  CHECK(add(kMax - 1, 1) == kMax);
  CHECK_FALSE(add_fits(kMax, 1));
  CHECK_FALSE(add_fits(1, kMax));
  CHECK(add(kMin + 1, -1) == kMin);
  CHECK_FALSE(add_fits(kMin, -1));
  CHECK_FALSE(add_fits(-1, kMin));
  CHECK(add(kMax, kMin) == -1);
  CHECK(add(kMin, kMax) == -1);
  CHECK(add(kMax, -kMax) == 0);
  CHECK_FALSE(add_fits(kMax, kMax));
  CHECK_FALSE(add_fits(kMin, kMin));
  CHECK(add(-1, 1) == 0);
}

TEST_CASE("checked_mul and checked_add leave the result alone when they overflow") {
  ptrdiff_t r = 42;
  CHECK_FALSE(checked_mul(kMax, 2, r));
  CHECK(r == 42);
  CHECK_FALSE(checked_mul(kMin, -1, r));
  CHECK(r == 42);
  CHECK_FALSE(checked_add(kMax, 1, r));
  CHECK(r == 42);
  CHECK_FALSE(checked_add(kMin, -1, r));
  CHECK(r == 42);
}

#if defined(__GNUC__) || defined(__clang__)
TEST_CASE("checked_mul and checked_add agree with the compiler's overflow builtins") {
  std::vector<ptrdiff_t> edges;
  for (ptrdiff_t base : {ptrdiff_t(0), kMax, kMin, kMax / 2, kMin / 2, ptrdiff_t(3037000499),
                         ptrdiff_t(46341), ptrdiff_t(1) << 31, ptrdiff_t(1) << 32}) {
    for (ptrdiff_t d = -2; d <= 2; ++d) {
      ptrdiff_t v;
      if (!__builtin_add_overflow(base, d, &v)) {
        edges.push_back(v);
        if (v != kMin) edges.push_back(-v);
      }
    }
  }
  for (ptrdiff_t a : edges) {
    for (ptrdiff_t b : edges) {
      CAPTURE(a);
      CAPTURE(b);
      ptrdiff_t want = 0, got = 0;
      const bool mul_overflows = __builtin_mul_overflow(a, b, &want);
      REQUIRE(checked_mul(a, b, got) == !mul_overflows);
      if (!mul_overflows) REQUIRE(got == want);
      const bool add_overflows = __builtin_add_overflow(a, b, &want);
      REQUIRE(checked_add(a, b, got) == !add_overflows);
      if (!add_overflows) REQUIRE(got == want);
    }
  }
}
#endif

}  // namespace test_checked_arithmetic
