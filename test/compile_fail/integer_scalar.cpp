// SPDX-License-Identifier: MIT
// Must not compile: Q, K and V hold integers (float, double, bfloat16 and half only).
#include <EigenAttention/EigenAttention.hpp>

int main() {
  const Eigen::MatrixXi Q = Eigen::MatrixXi::Ones(4, 8), K = Q, V = Q;
  auto out = EigenAttention::attention(Q, K, V);
  (void)out;
}
