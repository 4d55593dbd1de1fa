// SPDX-License-Identifier: MIT
// The long-double reference of the gradients (support/reference_backward.hpp) against central
// finite differences of the long-double forward reference (support/reference.hpp): every
// element of dQ, dK, dV, dL/dbias and dL/dsinks, for
// L = sum(OUT o dOUT) + sum(SCORES o dSCORES) + sum(LSE o dLSE), on small problems that use every
// option. This checks the reference the library is checked against
// (backward_vs_reference.cpp) without the library: two independent derivations of one number.
#include <doctest/doctest.h>

#include <functional>
#include <type_traits>

#include "backward_crosscheck.hpp"

namespace test_backward_finite_differences {

using namespace ea_test;
using namespace ea_test::backward;

namespace {

long double loss(const Array4& Q, const Array4& K, const Array4& V, const MultiHeadSpec& spec,
                 const Seeds& s) {
  const MultiHeadReference f = reference_heads(Q, K, V, spec);
  long double l = 0;
  for (Eigen::Index e = 0; e < f.out.size(); ++e)
    l += f.out.v[static_cast<size_t>(e)] * s.d_out.v[static_cast<size_t>(e)];
  if (s.d_scores) {
    for (Eigen::Index e = 0; e < f.scores.size(); ++e) {
      const long double w = f.scores.v[static_cast<size_t>(e)];
      if (w != 0) l += w * s.d_scores->v[static_cast<size_t>(e)];  // masked weights are constants 0
    }
  }
  if (s.d_lse) {
    for (Eigen::Index e = 0; e < f.lse.size(); ++e) {
      const long double x = f.lse.v[static_cast<size_t>(e)];
      if (x != -INFINITY) l += x * s.d_lse->v[static_cast<size_t>(e)];  // -inf: no key, no sink, constant
    }
  }
  return l;
}

// Each element of `x` perturbed by +-h: (L(x + h) - L(x - h)) / 2h, against `analytic`. The
// central difference's error is h^2 |L'''| / 6 plus the long double's rounding of L over h,
// about 1e-12 at h = 1e-6 for these O(1) problems; 1e-8 (1 + |g|) leaves a wide margin and still
// catches any wrong term (they are O(1e-3) or larger).
template <class Values>
void check_gradient(Values& x, const Values& analytic, const std::function<long double()>& L,
                    const char* what) {
  CAPTURE(what);
  const long double h = 1e-6L;
  long failures = 0;
  long double worst = 0;
  const auto element = [](auto& values, Eigen::Index e) -> auto& {
    if constexpr (std::is_same_v<Values, Array4>) {
      return values.v[static_cast<size_t>(e)];
    } else {
      return values[static_cast<size_t>(e)];
    }
  };
  const Eigen::Index n = static_cast<Eigen::Index>(x.size());
  for (Eigen::Index e = 0; e < n; ++e) {
    long double& xe = element(x, e);
    const long double saved = xe;
    xe = saved + h;
    const long double up = L();
    xe = saved - h;
    const long double down = L();
    xe = saved;
    const long double fd = (up - down) / (2 * h), g = element(analytic, e);
    const long double err = std::fabs(fd - g) / (1 + std::fabs(g));
    worst = std::max(worst, err);
    if (!(err <= 1e-8L)) ++failures;
  }
  CHECK_MESSAGE(failures == 0, what << ": " << failures << " of " << x.size()
                                    << " elements differ from the finite difference; worst relative "
                                    << static_cast<double>(worst));
}

}  // namespace

TEST_CASE("backward finite differences: the long-double reference gradients") {
  Rng rng(31);
  std::vector<Config> configs;
  configs.push_back(
      Config{"single head, causal top-left, T_q > T_k (rows that see nothing)", 1, 1, 1, 7, 5, 3, 2});
  configs.back().causal = true;
  configs.back().bottom_right = true;
  configs.push_back(Config{"sinks, GQA, causal bottom-right, T_q > T_k (rows that see only the sink)", 1, 2,
                           1, 6, 4, 3, 2});
  configs.back().causal = configs.back().bottom_right = configs.back().sinks = true;
  configs.push_back(Config{"GQA, bias 1xH, ALiBi, window, bottom-right", 2, 4, 2, 5, 6, 3, 2});
  configs.back().bias = "1xH";
  configs.back().alibi = configs.back().causal = configs.back().bottom_right = true;
  configs.back().window_left = 2;
  configs.push_back(Config{"MQA, soft-cap, mask BxH, key lengths, bias BxH, scale", 3, 2, 1, 4, 6, 4, 3});
  configs.back().softcap = 1.3;
  configs.back().mask = "BxH";
  configs.back().bias = "BxH";
  configs.back().key_lengths = true;
  configs.back().scale = 0.9;
  configs.back().magnitude = 1.5;
  configs.back().sinks = true;
  configs.push_back(Config{"bias Bx1 broadcast over heads, window right", 2, 3, 3, 4, 5, 2, 2});
  configs.back().bias = "Bx1";
  configs.back().window_right = 1;
  for (const Config& c : configs) {
    const std::string config = c.name;
    CAPTURE(config);
    Problem p = crosscheck::make_problem<double>(c, rng);
    for (const bool with_d_scores : {false, true}) {
      CAPTURE(with_d_scores);
      const Seeds s = make_seeds<double>(p, rng, with_d_scores);
      const BackwardReference r =
          reference_heads_backward<double>(p.Q, p.K, p.V, p.spec, s.d_out, s.d_scores, s.d_lse);
      const auto L = [&] { return loss(p.Q, p.K, p.V, p.spec, s); };
      check_gradient(p.Q, r.dq, L, "dQ");
      check_gradient(p.K, r.dk, L, "dK");
      check_gradient(p.V, r.dv, L, "dV");
      if (p.spec.bias) check_gradient(*p.spec.bias, r.d_bias, L, "dL/dbias");
      if (!p.spec.sinks.empty()) check_gradient(p.spec.sinks, r.d_sinks, L, "dL/dsinks");
    }
  }
}

}  // namespace test_backward_finite_differences
