// SPDX-License-Identifier: MIT
// Must not compile: bfloat16 inputs with a bfloat16 LSE output (the log-sum-exps of a 16-bit
// call are float, its compute type).
#include <EigenAttention/EigenAttention.hpp>

int main() {
  using M = Eigen::Matrix<Eigen::bfloat16, Eigen::Dynamic, Eigen::Dynamic>;
  const M Q = M::Ones(4, 8), K = Q, V = Q;
  M out;
  Eigen::Matrix<Eigen::bfloat16, Eigen::Dynamic, 1> lse;
  EigenAttention::attention_into(Q, K, V, out, lse);
}
