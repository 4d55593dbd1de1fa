// SPDX-License-Identifier: MIT
// Must not compile: npy::from_matrix of an integer matrix (float or double only).
#include <EigenAttention/EigenAttention.hpp>

int main() {
  const Eigen::MatrixXi m = Eigen::MatrixXi::Ones(2, 3);
  auto a = EigenAttention::npy::from_matrix(m);
  (void)a;
}
