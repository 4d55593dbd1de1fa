// SPDX-License-Identifier: MIT
// Must not compile: Q in float, K and V in double. The library's own message must be the first
// error the compiler prints.
#include <EigenAttention/EigenAttention.hpp>

int main() {
  const Eigen::MatrixXf Q = Eigen::MatrixXf::Random(4, 8);
  const Eigen::MatrixXd K = Eigen::MatrixXd::Random(4, 8), V = K;
  auto out = EigenAttention::attention(Q, K, V);
  (void)out;
}
