// SPDX-License-Identifier: MIT
/// \file inputs.hpp
/// The sizes of one attention problem, and random inputs Q, K, V of those sizes.
#pragma once

#include "common.hpp"
#include "random.hpp"

namespace ea_test {

/// T_q queries and T_k keys, of d_k dimensions; values of d_v.
struct Shape {
  Eigen::Index tq, tk, dk, dv;
};

/// The inputs of one problem.
template <class T>
struct Inputs {
  RowMatrix<T> Q, K, V;
};

/// Q (T_q x d_k), K (T_k x d_k) and V (T_k x d_v) filled with N(0, 1), drawn in that order.
template <class T>
Inputs<T> random_inputs(Rng& rng, const Shape& s) {
  Inputs<T> in;
  in.Q = random_matrix<RowMatrix<T>>(rng, s.tq, s.dk);
  in.K = random_matrix<RowMatrix<T>>(rng, s.tk, s.dk);
  in.V = random_matrix<RowMatrix<T>>(rng, s.tk, s.dv);
  return in;
}

}  // namespace ea_test
