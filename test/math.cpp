// SPDX-License-Identifier: MIT
// EigenAttention::math (Math.hpp): exp, tanh and sigmoid for score modifications, against long
// double over their ranges (the ulp bounds the header states), their special values, and their
// Dual overloads (the same values, the derivative of the long-double function); and Dual.hpp's
// arithmetic and functions against hand-worked derivatives.
#include <doctest/doctest.h>

#include <EigenAttention/EigenAttention.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace test_math {

namespace ea = EigenAttention;
namespace em = EigenAttention::math;

/// |got - want| in units of T's spacing at |want| (the ulp of the exact value).
template <typename T>
long double ulps(T got, long double want) {
  const T w = static_cast<T>(std::fabs(want));
  const long double ulp = static_cast<long double>(std::nextafter(w, std::numeric_limits<T>::infinity()) - w);
  return std::fabs(static_cast<long double>(got) - want) / ulp;
}

TEST_CASE_TEMPLATE("math: exp, tanh and sigmoid within their ulp bounds of long double", T, float, double) {
  // Bounds: exp 3 ulp, tanh 4, sigmoid 5 (Math.hpp): the largest measured were 1.2 / 2.6 (float)
  // and 2.5 / 2.9 (double) over these draws; sigmoid adds a division's half ulp and 1 + e^-x's.
  std::mt19937_64 rng(2809);
  const T exp_lo = std::is_same_v<T, float> ? T(-87) : T(-708), exp_hi = -exp_lo;
  long double worst_exp = 0, worst_tanh = 0, worst_sigmoid = 0;
  for (int n = 0; n < 200000; ++n) {
    const T x = static_cast<T>(std::uniform_real_distribution<double>(exp_lo, exp_hi)(rng));
    worst_exp = std::max(worst_exp, ulps(em::exp(x), std::exp(static_cast<long double>(x))));
    const double scale = n % 3 == 0 ? 0.01 : n % 3 == 1 ? 1.0 : 12.0;
    const T y = static_cast<T>(scale * std::uniform_real_distribution<double>(-1, 1)(rng));
    worst_tanh = std::max(worst_tanh, ulps(em::tanh(y), std::tanh(static_cast<long double>(y))));
    worst_sigmoid =
        std::max(worst_sigmoid, ulps(em::sigmoid(y), 1 / (1 + std::exp(-static_cast<long double>(y)))));
  }
  CAPTURE(static_cast<double>(worst_exp));
  CAPTURE(static_cast<double>(worst_tanh));
  CAPTURE(static_cast<double>(worst_sigmoid));
  CHECK(worst_exp <= 3);
  CHECK(worst_tanh <= 4);
  CHECK(worst_sigmoid <= 5);
}

TEST_CASE_TEMPLATE("math: special values", T, float, double) {
  const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  CHECK(em::exp(T(0)) == T(1));
  CHECK(em::exp(-inf) == T(0));
  CHECK(em::exp(inf) == inf);
  CHECK(em::exp(T(-1000)) == T(0));
  CHECK(em::exp(T(1000)) == inf);
  CHECK(std::isnan(em::exp(nan)));
  CHECK(em::tanh(T(0)) == T(0));
  CHECK(em::tanh(T(1e-30)) == T(1e-30));  // tanh x = x below x^3 / 3 < half an ulp
  CHECK(em::tanh(T(-1e-30)) == T(-1e-30));
  CHECK(em::tanh(inf) == T(1));
  CHECK(em::tanh(-inf) == T(-1));
  CHECK(em::tanh(T(40)) == T(1));
  CHECK(std::isnan(em::tanh(nan)));
  CHECK(em::sigmoid(T(0)) == T(0.5));
  CHECK(em::sigmoid(-inf) == T(0));
  CHECK(em::sigmoid(inf) == T(1));
  // Odd symmetry of tanh, exactly (the sign is applied to |x|'s value).
  for (const T x : {T(0.1), T(0.7), T(3), T(8.5)}) CHECK(em::tanh(-x) == -em::tanh(x));
}

TEST_CASE_TEMPLATE("math: the Dual overloads carry the scalar values and the derivatives", T, float, double) {
  const long double tol = std::is_same_v<T, float> ? 1e-5L : 1e-13L;
  for (const T x : {T(-3.5), T(-0.3), T(0), T(0.01), T(0.8), T(2)}) {
    CAPTURE(x);
    const ea::Dual<T> d(x, T(1));
    const long double xl = x;
    CHECK(em::exp(d).value == em::exp(x));
    CHECK(em::tanh(d).value == em::tanh(x));
    CHECK(em::sigmoid(d).value == em::sigmoid(x));
    CHECK(std::fabs(em::exp(d).derivative - std::exp(xl)) <= tol * std::exp(xl));
    const long double t = std::tanh(xl), s = 1 / (1 + std::exp(-xl));
    CHECK(std::fabs(em::tanh(d).derivative - (1 - t * t)) <= tol);
    CHECK(std::fabs(em::sigmoid(d).derivative - s * (1 - s)) <= tol);
  }
}

TEST_CASE("Dual: arithmetic and functions follow the chain rule") {
  using D = ea::Dual<double>;
  const D x(2.0, 1.0);
  // f(x) = (3x^2 - x / 4 + 1) / (x + 1): f(2) = 12.5 / 3, and
  // f'(x) = ((6x - 1/4)(x + 1) - (3x^2 - x/4 + 1)) / (x + 1)^2 = (11.75 * 3 - 12.5) / 9 at 2.
  const D f = (3 * x * x - x / 4 + 1) / (x + 1);
  CHECK(f.value == doctest::Approx(12.5 / 3));
  CHECK(f.derivative == doctest::Approx((11.75 * 3 - 12.5) / 9));
  using std::exp;
  using std::log;
  using std::sqrt;
  using std::tanh;
  CHECK(exp(x).derivative == doctest::Approx(std::exp(2.0)));
  CHECK(log(x).derivative == doctest::Approx(0.5));
  CHECK(sqrt(x).derivative == doctest::Approx(0.25 / std::sqrt(0.5)));
  CHECK(tanh(x).derivative == doctest::Approx(1 - std::tanh(2.0) * std::tanh(2.0)));
  CHECK(ea::abs(D(-2.0, 1.0)).derivative == -1.0);
  CHECK(ea::max(x, D(1.0)).derivative == 1.0);
  CHECK(ea::pow(x, 3).derivative == doctest::Approx(12.0));
  CHECK(ea::sigmoid(D(0.0, 1.0)).derivative == doctest::Approx(0.25));
  // Comparisons compare values; a constant's derivative is 0.
  CHECK(x > 1.5);
  CHECK(D(4.0).derivative == 0.0);
  D y = x;
  y *= x;
  y += 1;
  CHECK(y.value == 5.0);
  CHECK(y.derivative == 4.0);
}

}  // namespace test_math
