// SPDX-License-Identifier: MIT
/// \file random.hpp
/// Seeded, portable random numbers for the tests: the same values on every standard library
/// (std::*_distribution is implementation-defined, so the transforms are written out here).
#pragma once

#include <Eigen/Core>

#include <cmath>
#include <cstdint>
#include <random>

namespace ea_test {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : engine_(seed) {}

  /// Uniform in [-1, 1), 53 random bits.
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1p-52 - 1.0; }

  /// Standard normal (Box-Muller).
  double normal() {
    double u1 = 0;
    while (u1 == 0) u1 = static_cast<double>(engine_() >> 11) * 0x1p-53;  // (0, 1)
    const double u2 = static_cast<double>(engine_() >> 11) * 0x1p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
  }

  /// Uniform integer in [lo, hi].
  long integer(long lo, long hi) {
    return lo + static_cast<long>(engine_() % static_cast<std::uint64_t>(hi - lo + 1));
  }

  std::mt19937_64& engine() { return engine_; }

 private:
  std::mt19937_64 engine_;
};

/// Fills any writable dense matrix (Matrix, Map, block) with magnitude * N(0, 1), rounded to its
/// scalar type.
template <class Derived>
void fill_normal(Rng& rng, const Eigen::MatrixBase<Derived>& m_const, double magnitude = 1.0) {
  auto& m = const_cast<Eigen::MatrixBase<Derived>&>(m_const);
  using Scalar = typename Derived::Scalar;
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j) m(i, j) = static_cast<Scalar>(magnitude * rng.normal());
}

/// A rows x cols matrix of type M (any Eigen::Matrix) filled with magnitude * N(0, 1).
template <class M>
M random_matrix(Rng& rng, Eigen::Index rows, Eigen::Index cols, double magnitude = 1.0) {
  M m(rows, cols);
  fill_normal(rng, m, magnitude);
  return m;
}

}  // namespace ea_test
