// SPDX-License-Identifier: MIT
// Must not compile: an output given as a const object (attention_into would write into it).
#include <EigenAttention/EigenAttention.hpp>

int main() {
  const Eigen::MatrixXf Q = Eigen::MatrixXf::Random(4, 8), K = Q, V = Q;
  const Eigen::MatrixXf out(4, 8);
  EigenAttention::attention_into(Q, K, V, out);
}
