// SPDX-License-Identifier: MIT
// The demo: what EigenAttention computes, and how fast. Shared by `eigen-attention demo` and
// the example program examples/demo.cpp (eigen_attention_demo, run as a test).
#pragma once

#include <string>
#include <vector>

#include <Eigen/Core>

#include "../index.hpp"

namespace EigenAttention {
namespace cli {

struct DemoSettings {
  index_t tokens = 2048;  ///< T_q = T_k of the timed problem
  index_t dim = 64;       ///< d_k = d_v of the timed problem
  index_t runs = 7;       ///< timed runs per call, after one warm-up
  /// --quick: the same walk-through, timed on a small problem (T = 256, 3 runs).
  static DemoSettings quick() { return {256, 64, 3}; }
};

/// Prints the demo on stdout:
/// 1. on a six-token sentence embedded in the program, the attention weights (SCORES) and
///    outputs (ATTN), without and with the causal mask, as tables labelled by token;
/// 2. the median time and GFLOP/s of attention() and attention_decomposed() on a larger
///    problem made up in the program (deterministic pseudo-random float inputs), without and
///    with the causal mask.
/// It checks what it shows (rows of SCORES sum to 1, masked weights are 0, both calls agree).
/// \returns 0 when every check passed, 1 otherwise. Library errors propagate as exceptions.
int run_demo(const DemoSettings& settings);

/// The demo's six-token sentence: Q (6 x 4), K (6 x 4), V (6 x 3) and the tokens.
struct Sentence {
  Eigen::MatrixXd q, k, v;
  std::vector<std::string> tokens;
};
Sentence demo_sentence();

}  // namespace cli
}  // namespace EigenAttention
