// SPDX-License-Identifier: MIT
// eigen_attention_demo: what EigenAttention computes, and how fast.
//
// 1. On a six-token sentence, prints the attention weights (SCORES) and the outputs (ATTN),
//    without and with the causal mask, as tables labelled by token.
// 2. Times attention() and attention_decomposed() on a larger problem made up in the program
//    (T = 2048 tokens, d = 64, float; deterministic pseudo-random inputs), without and with the
//    causal mask, and prints the median time and GFLOP/s of each.
//
// It also checks what it shows (rows of SCORES sum to 1, masked weights are 0, both calls agree)
// and exits with 1 when a check fails, so that it can run as a test (`--quick`).
//
// The demo itself is src/cli/demo.cpp, shared with the command-line tool (`eigen-attention demo`,
// which ./scripts/demo runs); this program is the same demo without the tool's dependencies.
//
// Usage: eigen_attention_demo [--quick] [--tokens T] [--dim D] [--runs N]
#include "demo.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

namespace {

void usage(std::FILE* to) {
  std::fprintf(to,
               "usage: eigen_attention_demo [--quick] [--tokens T] [--dim D] [--runs N]\n"
               "  Prints attention on a six-token sentence, then times attention() and\n"
               "  attention_decomposed() on T random tokens of dimension D (float).\n"
               "  --tokens T  tokens of the timed problem (default 2048)\n"
               "  --dim D     d_k = d_v of the timed problem (default 64)\n"
               "  --runs N    timed runs per call, after one warm-up (default 7)\n"
               "  --quick     T = 256, N = 3: a fast run, as in the test suite\n");
}

// Parses a positive integer option value; exits with a usage message on anything else.
long positive(const char* option, const char* text) {
  char* end = nullptr;
  const long v = text ? std::strtol(text, &end, 10) : 0;
  if (!text || *end != '\0' || v <= 0) {
    std::fprintf(stderr, "eigen_attention_demo: %s needs a positive integer\n", option);
    usage(stderr);
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  EigenAttention::cli::DemoSettings settings;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* next = i + 1 < argc ? argv[i + 1] : nullptr;
    if (!std::strcmp(a, "--quick")) {
      settings.tokens = EigenAttention::cli::DemoSettings::quick().tokens;
      settings.runs = EigenAttention::cli::DemoSettings::quick().runs;
    } else if (!std::strcmp(a, "--tokens")) {
      settings.tokens = positive(a, next), ++i;
    } else if (!std::strcmp(a, "--dim")) {
      settings.dim = positive(a, next), ++i;
    } else if (!std::strcmp(a, "--runs")) {
      settings.runs = positive(a, next), ++i;
    } else if (!std::strcmp(a, "-h") || !std::strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else {
      std::fprintf(stderr, "eigen_attention_demo: unknown argument '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  try {
    return EigenAttention::cli::run_demo(settings);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eigen_attention_demo: %s\n", e.what());
    return 1;
  }
}
