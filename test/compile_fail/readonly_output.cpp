// SPDX-License-Identifier: MIT
// Must not compile: the output is a read-only Map (a Map of const storage cannot be written).
#include <EigenAttention/EigenAttention.hpp>

int main() {
  const Eigen::MatrixXf Q = Eigen::MatrixXf::Random(4, 8), K = Q, V = Q;
  float buffer[32] = {};
  Eigen::Map<const Eigen::MatrixXf> out(buffer, 4, 8);
  EigenAttention::attention_into(Q, K, V, out);
}
