// SPDX-License-Identifier: MIT
// The PyTorch golden cases of test/data/low_precision/ (bf16/ and fp16/): inputs rounded to the
// 16-bit type by torch, results computed by torch in float64 on them. Every form and kernel on
// the 16-bit inputs is within twice the naive P-rounded error (low_precision.hpp) of them.
#include <doctest/doctest.h>

#include <optional>
#include <string>

#include "common.hpp"
#include "golden.hpp"
#include "low_precision.hpp"

namespace test_low_precision_golden {

using namespace ea_test;

namespace {

template <class T16>
std::filesystem::path low_precision_dir() {
  return golden_data_dir() / "low_precision" / (std::is_same_v<T16, Eigen::bfloat16> ? "bf16" : "fp16");
}

}  // namespace

TEST_CASE_TEMPLATE("low precision golden: every case, every form, every kernel", T16, Eigen::bfloat16,
                   Eigen::half) {
  const auto files = golden_txt_files(low_precision_dir<T16>());
  REQUIRE(files.size() == 11);
  for (const auto& path : files) {
    const std::string file = path.filename().string();
    CAPTURE(file);
    const GoldenCase g = load_golden(path);
    // The inputs are 16-bit values already: the conversion is exact.
    const Row16<T16> Q = g.Q.cast<double>().cast<float>().cast<T16>(),
                     K = g.K.cast<double>().cast<float>().cast<T16>(),
                     V = g.V.cast<double>().cast<float>().cast<T16>();
    REQUIRE(max_error(widen_ld(Q), g.Q) == 0);
    REQUIRE(max_error(widen_ld(K), g.K) == 0);
    REQUIRE(max_error(widen_ld(V), g.V) == 0);
    // Our long-double reference agrees with torch's float64 to float64 rounding.
    std::optional<long double> scale;
    if (g.scale) scale = *g.scale;
    const ReferenceResult ref = reference_attention(g.Q, g.K, g.V, g.mask, scale);
    CHECK(max_error(ref.attn, g.attn) <= 1e-12L);
    const float s = static_cast<float>(g.scale ? *g.scale : 1.0 / std::sqrt(static_cast<double>(g.Q.cols())));
    const NaiveResult naive = naive_p_rounded<T16>(Q, K, V, g.mask, s);
    for (const ea::Kernel kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      const ea::Options opt = make_options(g.mask, g.scale, kernel);
      const ea::DecomposedResult<T16> r = ea::attention_decomposed(Q, K, V, opt);
      CHECK(max_error(widen_ld(r.scores), g.scores) <= low_precision_bound(naive.scores, g.scores));
      CHECK(max_error(widen_ld(r.attn), g.attn) <= low_precision_bound(naive.attn, g.attn));
      EA_CHECK_NEAR(r.lse, g.lse,
                    attention_budget<float>(ref.logit_magnitude, ref.max_abs_v, g.Q.cols(), g.K.rows()).lse);
      CHECK(max_error(widen_ld(ea::attention(Q, K, V, opt)), g.attn) <=
            low_precision_bound(naive.attn, g.attn));
    }
  }
}

}  // namespace test_low_precision_golden
