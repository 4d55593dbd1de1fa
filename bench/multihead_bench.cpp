// SPDX-License-Identifier: MIT
// eigen_attention_multihead_bench: how fast the batched multi-head calls (MultiHead.hpp) are,
// against the single-head call measured in the same run. See bench/README.md.
//
// Three sections, each per (scalar type, threads):
//   heads   attention_heads_into on [1, H, T, d] (BHTD) buffers, MHA and GQA (H:H_kv), causal and not,
//           with its GFLOP/s and the ratio to the single-head rate of attention_into on one T x d
//           head with the same options and threads (the target: >= 0.9). One BTHD row per
//           (H, H_kv) at one T checks that the layout neither changes the result nor the speed.
//   window  a sliding window (window_left = W, window_right = 0, causal) against the full causal
//           call at the same shape: the time ratio against the ratio of computed pairs.
//   varlen  attention_varlen_into on a packed batch of uneven causal sequences against attention_heads_into
//           on the same batch padded to the longest sequence, with Masks::key_lengths.
// GFLOP/s = 4 * (computed pairs) * d / seconds, computed pairs = the (i, j) pairs no mask hides,
// counted exactly (T^2 per head, T(T+1)/2 causal, ...). Times are medians (as attention_bench).
//
// Every result is checked (max |diff|): multi-head heads against single-head attention_into
// calls on the same head, BTHD against BHTD, varlen against padded, and sampled rows of every
// call against an exact double-precision softmax. The run exits 1 when one is off.
#include <EigenAttention/EigenAttention.hpp>
//
// The sections live in multihead_bench_*.cpp; multihead_bench.hpp lists them.
#include "multihead_bench.hpp"

namespace ea_multihead_bench {
namespace {

template <typename T>
void run_type(const Args& a, const char* type, ea::Kernel kernel, Checks& checks) {
  if (a.s_heads) {
    std::printf(
        "== heads: attention_heads_into, B = 1, [1, H, T, d] BHTD (and BTHD at T = %ld) against "
        "attention_into "
        "on one head\n   (ratio = GFLOP/s / 1-head GFLOP/s, same options and threads; '*' = below the "
        "0.9 target)\n",
        long(a.bthd_t));
    print_heads_header();
    heads_section<T>(a, type, kernel, checks);
    std::printf("\n");
  }
  if (a.s_window) {
    std::printf(
        "== window: causal, window_left = %ld, window_right = 0, and causal chunks of %ld, against full "
        "causal, BHTD\n",
        long(a.window), long(a.chunk));
    std::printf("%-6s %3s %6s %4s %4s %-13s | %12s %10s %9s | %9s %9s\n", "type", "thr", "T", "H", "d",
                "call", "pairs/head", "ms", "GFLOP/s", "vs ref", "vs exact");
    window_section<T>(a, type, kernel, checks);
    std::printf("\n");
  }
  if (a.s_varlen) {
    const std::vector<Idx> len = varlen_lengths(a);
    std::string lens;
    Idx total = 0;
    for (Idx l : len) {
      lens += (lens.empty() ? "" : ",") + std::to_string(l);
      total += l;
    }
    std::printf(
        "== varlen: causal, %ld sequences of lengths %s (total %ld, max %ld);\n   attention_varlen_into on "
        "the "
        "packed batch against attention_heads_into on [%ld, H, %ld, d] with key_lengths\n   (GFLOP/s over "
        "the "
        "useful pairs for all three; 'computed' = the pairs each call cannot skip; vs ref = against "
        "padded)\n",
        long(len.size()), lens.c_str(), long(total), long(*std::max_element(len.begin(), len.end())),
        long(len.size()), long(*std::max_element(len.begin(), len.end())));
    std::printf("%-6s %3s %4s %4s %-16s | %12s %12s %10s %9s | %9s %9s\n", "type", "thr", "H", "d", "call",
                "useful/head", "computed", "ms", "GFLOP/s", "vs ref", "vs exact");
    varlen_section<T>(a, type, kernel, checks);
    std::printf("\n");
  }
}

}  // namespace
}  // namespace ea_multihead_bench

using namespace ea_multihead_bench;

int main(int argc, char** argv) {
  try {
    const Args a = parse_args(argc, argv);
    const ea::Kernel kernel = bench::parse_kernel(a.kernel);
    print_machine(a, kernel);
    Checks checks;
    for (const std::string& type : a.types) {
      if (type == "float")
        run_type<float>(a, "float", kernel, checks);
      else
        run_type<double>(a, "double", kernel, checks);
    }
    std::printf("load at end: %s\n", load_average().c_str());
    if (!checks.below_target.empty()) {
      std::printf("below the 0.9x target (multi-head GFLOP/s / 1-head GFLOP/s):\n");
      for (const std::string& s : checks.below_target) std::printf("  %s\n", s.c_str());
    }
    if (checks.failed > 0) {
      std::printf("FAILED: %d result check(s) above tolerance (marked '!')\n", checks.failed);
      return 1;
    }
    std::printf("all result checks passed\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eigen_attention_multihead_bench: %s\n", e.what());
    return 1;
  }
}
