// SPDX-License-Identifier: MIT
// The demo (demo.hpp): the attention of a six-token sentence, then a timing.
#include "demo.hpp"

#include <EigenAttention/EigenAttention.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>
#include "../index.hpp"

#include "util.hpp"

namespace EigenAttention {
namespace cli {

namespace ea = EigenAttention;

namespace {

// ---------------------------------------------------------------------------------------------
// Part 1: a sentence small enough to read.

// Each token's key says what it is: (noun, verb, function word, position 0..1). Its query says
// what it looks for: the same features, the last one preferring later (> 0) or earlier (< 0)
// keys. The values carry what a token passes on: (animal, action, place).
const char* const kTokens[] = {"the", "cat", "sat", "on", "the", "mat"};
constexpr int kT = 6, kDk = 4, kDv = 3;

// clang-format off
const double kQ[kT][kDk] = {
    {2.0, 0.0, 0.0, -3.0},   // the: its noun, the nearer one
    {0.0, 2.5, 0.0,  0.0},   // cat: what it does
    {2.5, 0.0, 0.0, -2.0},   // sat: who did it
    {2.0, 0.0, 0.0,  2.0},   // on:  the noun that follows
    {2.0, 0.0, 0.0,  3.0},   // the: its noun, the later one
    {0.0, 1.5, 1.0,  0.5}};  // mat: the verb, and the words around it
const double kK[kT][kDk] = {
    {0.0, 0.0, 2.0, 0.0},
    {2.0, 0.0, 0.0, 0.2},
    {0.0, 2.0, 0.0, 0.4},
    {0.0, 0.0, 2.0, 0.6},
    {0.0, 0.0, 2.0, 0.8},
    {2.0, 0.0, 0.0, 1.0}};
const double kV[kT][kDv] = {
    {0.0, 0.0, 0.0},
    {1.0, 0.0, 0.0},
    {0.0, 1.0, 0.0},
    {0.0, 0.2, 0.5},
    {0.0, 0.0, 0.0},
    {0.0, 0.0, 1.0}};
// clang-format on

template <int Cols>
Eigen::MatrixXd from_array(const double (&a)[kT][Cols]) {
  Eigen::MatrixXd m(kT, Cols);
  for (int i = 0; i < kT; ++i)
    for (int j = 0; j < Cols; ++j) m(i, j) = a[i][j];
  return m;
}

// A block of columns in a printed table: a title, one label per column, the numbers, the width
// and decimals of each column, and whether exact zeros print as "-" (the weights of masked keys).
struct Block {
  std::string title;
  std::vector<std::string> columns;
  Eigen::MatrixXd values;
  int width = 7;
  int decimals = 3;
  bool dash_zeros = false;
};

constexpr int kRowLabel = 7;  // width of the row labels ("  3 on ")

// Prints blocks side by side, one row per token, each block under its title.
void print_table(const std::vector<Block>& blocks) {
  std::printf("%*s", kRowLabel, "");
  for (std::size_t k = 0; k < blocks.size(); ++k) {
    const int width =
        k + 1 < blocks.size() ? blocks[k].width * static_cast<int>(blocks[k].columns.size()) : 0;
    std::printf("  %-*s", width, blocks[k].title.c_str());
  }
  std::printf("\n%*s", kRowLabel, "");
  for (const Block& b : blocks) {
    std::printf("  ");
    for (const std::string& c : b.columns) std::printf("%*s", b.width, c.c_str());
  }
  std::printf("\n");
  for (int i = 0; i < kT; ++i) {
    std::printf("  %d %-*s", i, kRowLabel - 4, kTokens[i]);
    for (const Block& b : blocks) {
      std::printf("  ");
      for (index_t j = 0; j < b.values.cols(); ++j) {
        const double x = b.values(i, j);
        if (b.dash_zeros && x == 0.0)
          std::printf("%*s", b.width, "-");
        else
          std::printf("%*.*f", b.width, b.decimals, x);
      }
    }
    std::printf("\n");
  }
  std::printf("\n");
}

std::vector<std::string> token_labels() { return std::vector<std::string>(kTokens, kTokens + kT); }

// Prints SCORES and ATTN of the sentence for `opt`; returns false when a check fails.
bool show_sentence(const Eigen::MatrixXd& Q, const Eigen::MatrixXd& K, const Eigen::MatrixXd& V,
                   const ea::Options& opt) {
  const ea::DecomposedResult<double> r = ea::attention_decomposed(Q, K, V, opt);
  const ea::RowMatrix<double> attn = ea::attention(Q, K, V, opt);

  if (opt.causal)
    std::printf("With the causal mask: token i sees tokens 0..i only (- : weight exactly 0)\n");
  else
    std::printf("No mask: every token sees every token\n");
  print_table({{"SCORES (row: query, column: key)", token_labels(), r.scores, 7, 3, /*dash_zeros=*/true},
               {"ATTN = SCORES V", {"animal", "action", "place"}, r.attn}});

  bool ok = true;
  const double row_sum_error = (r.scores.rowwise().sum().array() - 1.0).abs().maxCoeff();
  if (!(row_sum_error < 1e-12)) {
    std::printf("CHECK FAILED: a row of SCORES misses a sum of 1 by %.3g\n", row_sum_error);
    ok = false;
  }
  const double agreement = (r.attn - attn).cwiseAbs().maxCoeff();
  if (!(agreement < 1e-12)) {
    std::printf("CHECK FAILED: attention() and attention_decomposed() differ by %.3g\n", agreement);
    ok = false;
  }
  if (opt.causal) {
    const double masked = r.scores.triangularView<Eigen::StrictlyUpper>().toDenseMatrix().cwiseAbs().sum();
    if (masked != 0.0) {
      std::printf("CHECK FAILED: masked weights sum to %.3g, not 0\n", masked);
      ok = false;
    }
  }
  return ok;
}

// ---------------------------------------------------------------------------------------------
// Part 2: timing.

ea::RowMatrix<float> random_matrix(index_t rows, index_t cols, SplitMix64& rng) {
  ea::RowMatrix<float> m(rows, cols);
  rng.fill(m);
  return m;
}

// Median wall time of `runs` calls of f, in seconds, after one untimed warm-up call.
template <class F>
double median_of_runs(int runs, F&& f) {
  f();
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t.size() % 2 ? t[t.size() / 2] : 0.5 * (t[t.size() / 2 - 1] + t[t.size() / 2]);
}

// Times both calls without and with the mask; returns false when they disagree.
bool time_calls(index_t T, index_t d, int runs) {
  SplitMix64 rng(20240607);
  const ea::RowMatrix<float> Q = random_matrix(T, d, rng), K = random_matrix(T, d, rng),
                             V = random_matrix(T, d, rng);

  std::printf("Timing: T_q = T_k = %ld, d_k = d_v = %ld, float, kernel auto (= %s), median of %d runs\n",
              static_cast<index_t>(T), static_cast<index_t>(d), ea::kernel_name(ea::auto_kernel()), runs);
  std::printf("  %-24s %-7s %12s %10s %12s\n", "call", "mask", "median", "GFLOP/s", "ATTN diff");

  bool ok = true;
  for (const bool causal : {false, true}) {
    ea::Options opt;
    opt.causal = causal;
    // QK^T and SCORES V: 2 T_q T_k d each; the mask skips about half of the pairs.
    const double flops = 4.0 * double(T) * double(T) * double(d) * (causal ? 0.5 : 1.0);

    ea::RowMatrix<float> fused;
    ea::DecomposedResult<float> decomposed;
    const double t_fused = median_of_runs(runs, [&] { fused = ea::attention(Q, K, V, opt); });
    const double t_decomposed =
        median_of_runs(runs, [&] { decomposed = ea::attention_decomposed(Q, K, V, opt); });
    // Both compute the same function; float rounding is all that may differ.
    const double difference = (fused - decomposed.attn).cwiseAbs().maxCoeff();
    const char* mask = causal ? "causal" : "none";
    std::printf("  %-24s %-7s %9.2f ms %10.2f\n", "attention()", mask, 1e3 * t_fused, flops / t_fused * 1e-9);
    std::printf("  %-24s %-7s %9.2f ms %10.2f %12.1e\n", "attention_decomposed()", mask, 1e3 * t_decomposed,
                flops / t_decomposed * 1e-9, difference);
    if (!(difference < 1e-4)) {
      std::printf("CHECK FAILED: the two calls differ by %.3g\n", difference);
      ok = false;
    }
  }
  std::printf(
      "  GFLOP/s counts 4 T_q T_k d FLOPs (Q K^T and SCORES V), half that when causal.\n"
      "  ATTN diff: the largest |attention() - attention_decomposed().attn|.\n");
  std::printf(
      "  attention_decomposed() also returns the %ld x %ld SCORES (%.1f MiB); attention() never\n"
      "  forms them.\n",
      static_cast<index_t>(T), static_cast<index_t>(T), double(T) * double(T) * sizeof(float) / (1 << 20));
  return ok;
}

}  // namespace

Sentence demo_sentence() { return {from_array(kQ), from_array(kK), from_array(kV), token_labels()}; }

int run_demo(const DemoSettings& settings) {
  std::printf("EigenAttention %s: softmax(Q K^T / sqrt(d_k)) V   (kernels on this CPU: %s)\n\n",
              ea::version(), kernels_on_this_cpu().c_str());

  const Sentence sentence = demo_sentence();
  const Eigen::MatrixXd &Q = sentence.q, &K = sentence.k, &V = sentence.v;
  std::printf("Input: \"the cat sat on the mat\", d_k = %d, d_v = %d, scale = 1/sqrt(d_k) = %.2f\n", kDk, kDv,
              1.0 / std::sqrt(double(kDk)));
  print_table({{"Q: looks for", {"noun", "verb", "func", "pos"}, Q, 5, 1},
               {"K: is", {"noun", "verb", "func", "pos"}, K, 5, 1},
               {"V: carries", {"animal", "action", "place"}, V, 7, 1}});

  bool ok = true;
  ea::Options opt;
  ok &= show_sentence(Q, K, V, opt);
  opt.causal = true;
  ok &= show_sentence(Q, K, V, opt);
  ok &= time_calls(settings.tokens, settings.dim, static_cast<int>(settings.runs));

  std::printf(ok ? "\nAll checks passed.\n" : "\nSome checks FAILED.\n");
  std::fflush(stdout);
  return ok ? 0 : 1;
}

}  // namespace cli
}  // namespace EigenAttention
