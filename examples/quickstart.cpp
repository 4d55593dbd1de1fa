// SPDX-License-Identifier: MIT
// The README's quick start: causal attention over three tokens, with and without the weights.
#include <EigenAttention/EigenAttention.hpp>

#include <iostream>

int main() {
  // One row per token: 3 tokens, d_k = 4, d_v = 2.
  const Eigen::MatrixXd Q{{1, 0, 1, 0}, {0, 1, 0, 1}, {1, 1, 0, 0}};
  const Eigen::MatrixXd K{{1, 0, 0, 1}, {0, 1, 1, 0}, {1, 1, 1, 1}};
  const Eigen::MatrixXd V{{1, 2}, {3, 4}, {5, 6}};

  EigenAttention::Options opt;
  opt.causal = true;  // token i attends to tokens 0..i only

  auto r = EigenAttention::attention_decomposed(Q, K, V, opt);  // SCORES (3 x 3) and ATTN (3 x 2)
  auto attn = EigenAttention::attention(Q, K, V, opt);          // ATTN alone, never forms 3 x 3

  std::cout << "scores:\n" << r.scores << "\n\nattn:\n" << attn << "\n";

  // Rows of SCORES sum to 1, masked keys weigh exactly 0, and both calls agree.
  const bool ok = (r.scores.rowwise().sum().array() - 1.0).abs().maxCoeff() < 1e-12 &&
                  r.scores(0, 1) == 0.0 && (r.attn - attn).cwiseAbs().maxCoeff() < 1e-12;
  if (!ok) std::cerr << "quickstart: check failed\n";
  return ok ? 0 : 1;
}
