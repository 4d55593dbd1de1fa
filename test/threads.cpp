// SPDX-License-Identifier: MIT
// Options::threads: results are bitwise identical for every thread count, every run, and when
// several user threads call the library at once.
#include <doctest/doctest.h>

#include <EigenAttention/EigenAttention.hpp>

#include <string>
#include <thread>
#include <vector>

#if defined(__unix__)
#include <sys/wait.h>
#include <unistd.h>
#endif

#include "common.hpp"
#include "random.hpp"

namespace test_threads {

namespace ea = EigenAttention;
using namespace ea_test;

namespace {

// Kernels that split work over threads (the reference kernel ignores Options::threads).
std::vector<ea::Kernel> tiled_kernels() {
  std::vector<ea::Kernel> ks;
  for (ea::Kernel k : ea::available_kernels()) {
    if (k != ea::Kernel::Reference) ks.push_back(k);
  }
  return ks;
}

}  // namespace

TEST_CASE_TEMPLATE("threads: every thread count gives bitwise the same result", T, float, double) {
  Rng rng(2024);
  // 700 query rows: several tasks of 128 rows, the last one partial.
  const auto Q = random_matrix<RowMatrix<T>>(rng, 700, 48);
  const auto K = random_matrix<RowMatrix<T>>(rng, 650, 48);
  const auto V = random_matrix<RowMatrix<T>>(rng, 650, 40);
  for (const MaskSpec& mask : all_masks()) {
    for (ea::Kernel kernel : tiled_kernels()) {
      const std::string mname = mask_name(mask), kname = ea::kernel_name(kernel);
      CAPTURE(mname);
      CAPTURE(kname);
      ea::Options opt = make_options(mask, std::nullopt, kernel);
      opt.threads = 1;
      const auto attn1 = ea::attention(Q, K, V, opt);
      const auto dec1 = ea::attention_decomposed(Q, K, V, opt);
      for (int threads : {2, 3, 4, 0}) {
        CAPTURE(threads);
        opt.threads = threads;
        for (int run = 0; run < 2; ++run) {
          EA_CHECK_EQUAL(ea::attention(Q, K, V, opt), attn1);
          const auto dec = ea::attention_decomposed(Q, K, V, opt);
          EA_CHECK_EQUAL(dec.scores, dec1.scores);
          EA_CHECK_EQUAL(dec.attn, dec1.attn);
          EA_CHECK_EQUAL(dec.lse, dec1.lse);
        }
      }
    }
  }
}

TEST_CASE("threads: concurrent callers sharing inputs get the sequential results") {
  Rng rng(77);
  const auto Q = random_matrix<RowMatrix<float>>(rng, 300, 32);
  const auto K = random_matrix<RowMatrix<float>>(rng, 300, 32);
  const auto V = random_matrix<RowMatrix<float>>(rng, 300, 16);
  ea::Options opt;
  opt.causal = true;
  opt.threads = 2;  // the callers compete for the pool; whoever loses runs alone
  // The sequential results, before any caller starts.
  const auto expected = ea::attention_decomposed(Q, K, V, opt);
  const RowMatrix<float> expected_out = ea::attention(Q, K, V, opt);
  constexpr int kCallers = 4, kCalls = 5;
  std::vector<int> mismatches(kCallers, 0);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int i = 0; i < kCalls; ++i) {
        const auto r = ea::attention_decomposed(Q, K, V, opt);
        const auto o = ea::attention(Q, K, V, opt);
        if (r.scores != expected.scores || r.attn != expected.attn || r.lse != expected.lse ||
            o != expected_out) {
          ++mismatches[c];
        }
      }
    });
  }
  for (auto& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) {
    CAPTURE(c);
    CHECK(mismatches[c] == 0);
  }
}

TEST_CASE("threads: a negative count throws std::invalid_argument naming it") {
  Eigen::MatrixXd Q = Eigen::MatrixXd::Ones(3, 2), K = Eigen::MatrixXd::Ones(3, 2),
                  V = Eigen::MatrixXd::Ones(3, 2);
  ea::Options opt;
  opt.threads = -2;
  CHECK_THROWS_WITH_AS(ea::attention(Q, K, V, opt), doctest::Contains("-2"), std::invalid_argument);
  CHECK_THROWS_AS(ea::attention_decomposed(Q, K, V, opt), std::invalid_argument);
}

#if defined(__unix__)
TEST_CASE("threads: a forked child can use threads after the parent did") {
  Rng rng(5);
  const auto Q = random_matrix<RowMatrix<float>>(rng, 400, 16);
  const auto K = random_matrix<RowMatrix<float>>(rng, 400, 16);
  const auto V = random_matrix<RowMatrix<float>>(rng, 400, 8);
  ea::Options opt;
  opt.threads = 2;
  const auto expected = ea::attention(Q, K, V, opt);  // starts the pool's workers
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    alarm(30);  // a hang (the parent's workers do not exist here) ends the child
    const bool same = ea::attention(Q, K, V, opt) == expected;
    _exit(same ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
#endif

TEST_CASE_TEMPLATE("determinism: Kernel::Auto and the storage order of the inputs do not change a bit", T,
                   float, double) {
  // Auto runs the best available kernel: the very same bits as asking for it by name. The
  // kernels copy each tile of Q, K and V into contiguous scratch before any arithmetic, so
  // row-major, column-major and strided inputs give the same bits too.
  Rng rng(77);
  const auto Q = random_matrix<RowMatrix<T>>(rng, 300, 40);
  const auto K = random_matrix<RowMatrix<T>>(rng, 530, 40);
  const auto V = random_matrix<RowMatrix<T>>(rng, 530, 24);
  const ColMatrix<T> Qc = Q, Kc = K, Vc = V;
  ColMatrix<T> Kwide = ColMatrix<T>::Zero(530 * 2, 40);
  Kwide(Eigen::seq(0, Eigen::last, 2), Eigen::all) = K;  // every other row: a strided view
  const auto Ks = Kwide(Eigen::seq(0, Eigen::last, 2), Eigen::all);
  for (const MaskSpec& mask : all_masks()) {
    for (ea::Kernel kernel : ea::available_kernels()) {
      const std::string mname = mask_name(mask), kname = ea::kernel_name(kernel);
      CAPTURE(mname);
      CAPTURE(kname);
      const ea::Options opt = make_options(mask, std::nullopt, kernel);
      const auto fused = ea::attention(Q, K, V, opt);
      const auto dec = ea::attention_decomposed(Q, K, V, opt);
      if (kernel == ea::available_kernels().front()) {
        const ea::Options autoopt = make_options(mask, std::nullopt, ea::Kernel::Auto);
        EA_CHECK_EQUAL(ea::attention(Q, K, V, autoopt), fused);
        EA_CHECK_EQUAL(ea::attention_decomposed(Q, K, V, autoopt).scores, dec.scores);
      }
      if (kernel == ea::Kernel::Reference) continue;  // plain Eigen products: order-dependent
      EA_CHECK_EQUAL(ea::attention(Qc, Kc, Vc, opt), fused);
      EA_CHECK_EQUAL(ea::attention(Q, Ks, V, opt), fused);
      const auto decc = ea::attention_decomposed(Qc, Kc, Vc, opt);
      EA_CHECK_EQUAL(decc.scores, dec.scores);
      EA_CHECK_EQUAL(decc.attn, dec.attn);
    }
  }
}

}  // namespace test_threads
