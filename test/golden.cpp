// SPDX-License-Identifier: MIT
// The golden cases of test/data/ (PyTorch, float64): SCORES, ATTN and LSE from every form of
// the call, every kernel, in float and double.
#include <doctest/doctest.h>

#include <optional>
#include <string>

#include "common.hpp"
#include "golden.hpp"

namespace test_golden {

using namespace ea_test;

TEST_CASE("golden: the data directory holds all 11 expected cases") {
  check_golden_dir(golden_data_dir(), expected_golden_files(), "");
  CHECK(expected_golden_files().size() == 11);
  CHECK(golden_files().size() >= expected_golden_files().size());
}

TEST_CASE("golden: every case parses and the long-double reference agrees with PyTorch") {
  const auto files = golden_files();
  REQUIRE(!files.empty());
  for (const auto& path : files) {
    const std::string file = path.filename().string();
    CAPTURE(file);
    GoldenCase g;
    REQUIRE_NOTHROW(g = load_golden(path));
    std::optional<long double> scale;
    if (g.scale) scale = *g.scale;
    const auto ref = reference_attention(g.Q, g.K, g.V, g.mask, scale);
    // Both are exact up to float64 rounding: the double budget bounds PyTorch's error.
    const Budget b = attention_budget<double>(ref.logit_magnitude, ref.max_abs_v, g.Q.cols(), g.K.rows());
    EA_CHECK_NEAR(ref.scores, g.scores, b.scores);
    EA_CHECK_NEAR(ref.attn, g.attn, b.attn);
    EA_CHECK_NEAR(ref.lse, g.lse, b.lse);
  }
}

TEST_CASE_TEMPLATE("golden: every case, every form, every kernel", T, float, double) {
  const auto files = golden_files();
  REQUIRE(files.size() >= expected_golden_files().size());
  for (const auto& path : files) {
    const std::string file = path.filename().string();
    CAPTURE(file);
    const GoldenCase g = load_golden(path);
    const RowMatrix<T> Q = g.Q.cast<T>(), K = g.K.cast<T>(), V = g.V.cast<T>();
    const Eigen::Index tq = Q.rows(), tk = K.rows(), dv = V.cols();
    CAPTURE(tq);
    CAPTURE(tk);

    // The golden answer is for the float64 inputs: the budget (which counts rounding Q, K, V
    // to T) is set by the magnitude of the golden case's logits.
    std::optional<long double> scale;
    if (g.scale) scale = *g.scale;
    const auto ref = reference_attention(g.Q, g.K, g.V, g.mask, scale);
    const Budget b = attention_budget<T>(ref.logit_magnitude, ref.max_abs_v, g.Q.cols(), tk);

    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      const ea::Options opt = make_options(g.mask, g.scale, kernel);

      const auto r = ea::attention_decomposed(Q, K, V, opt);
      EA_CHECK_NEAR(r.scores, g.scores, b.scores);
      EA_CHECK_NEAR(r.attn, g.attn, b.attn);
      EA_CHECK_NEAR(r.lse, g.lse, b.lse);

      EA_CHECK_NEAR(ea::attention(Q, K, V, opt), g.attn, b.attn);
      EA_CHECK_NEAR(ea::attention_scores(Q, K, opt), g.scores, b.scores);

      RowMatrix<T> out(tq, dv);
      ea::Vector<T> lse(tq);
      ea::attention_into(Q, K, V, out, lse, opt);
      EA_CHECK_NEAR(out, g.attn, b.attn);
      EA_CHECK_NEAR(lse, g.lse, b.lse);
    }
  }
}

}  // namespace test_golden
