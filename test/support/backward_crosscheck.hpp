// SPDX-License-Identifier: MIT
/// \file backward_crosscheck.hpp
/// What the backward tests (test/backward_*.cpp) share: one forward + backward of the library on
/// a random multi-head problem (multihead_crosscheck.hpp's Config and Problem), as a user runs
/// it (the library's own forward gives OUT and LSE), and element-wise checks against the
/// long-double reference (reference_backward.hpp) with its per-element bounds.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <sstream>
#include <string>

#include "multihead_crosscheck.hpp"
#include "reference_backward.hpp"

namespace ea_test::backward {

using crosscheck::Config;
using crosscheck::Problem;

/// The gradients of one run, in the run's layout (d_bias always BHTD-contiguous, the bias's shape).
template <class T>
struct Gradients {
  HeadsBuffer<T> out, lse, dq, dk, dv, d_bias;
  std::vector<mh::ComputeScalar<T>> d_sinks;  ///< H values, when the problem has sinks
};

/// dOUT, dSCORES and dLSE of a problem: random, seeded. dLSE comes with dSCORES and with sinks.
struct Seeds {
  Array4 d_out;
  std::optional<Array4> d_scores, d_lse;
};

template <class T>
Seeds make_seeds(const Problem& p, Rng& rng, bool with_d_scores) {
  Seeds s;
  s.d_out = crosscheck::random_array<T>(rng, p.Q.n[0], p.Q.n[1], p.Q.n[2], p.V.n[3]);
  if (with_d_scores) s.d_scores = crosscheck::random_array<T>(rng, p.Q.n[0], p.Q.n[1], p.Q.n[2], p.K.n[2]);
  if (with_d_scores || !p.spec.sinks.empty())
    s.d_lse = crosscheck::random_array<mh::ComputeScalar<T>>(rng, p.Q.n[0], p.Q.n[1], p.Q.n[2], 1);
  return s;
}

/// The library's forward (attention_heads_into, for OUT and LSE), then attention_heads_backward_into.
template <class T>
Gradients<T> run_backward(const Problem& p, const Seeds& seeds, const mh::Options& opt,
                          mh::Layout layout = mh::Layout::BHTD, bool want_d_bias = true,
                          const std::function<void(mh::Masks<T>&)>& program = {},
                          const std::function<void(mh::BackwardTerms<T>&)>& more_terms = {}) {
  const Eigen::Index B = p.Q.n[0], H = p.Q.n[1], Hkv = p.K.n[1], tq = p.Q.n[2], tk = p.K.n[2];
  const Eigen::Index dk = p.Q.n[3], dv = p.V.n[3];
  const HeadsBuffer<T> Q(p.Q, layout), K(p.K, layout), V(p.V, layout), dO(seeds.d_out, layout);
  MasksBuffer<T> masks(p.spec);
  if (program) program(masks.masks);  // (multihead_crosscheck.hpp's run_heads)
  Gradients<T> g;
  g.out = HeadsBuffer<T>(layout, B, H, tq, dv, T(0));
  g.lse = HeadsBuffer<T>(layout, B, H, tq, 1, T(0));
  mh::attention_heads_into(Q.cview(), K.cview(), V.cview(), g.out.view(), g.lse.view(), opt, masks.masks);
  const T sentinel = crosscheck::kSentinel<T>;
  g.dq = HeadsBuffer<T>(layout, B, H, tq, dk, sentinel);
  g.dk = HeadsBuffer<T>(layout, B, Hkv, tk, dk, sentinel);
  g.dv = HeadsBuffer<T>(layout, B, Hkv, tk, dv, sentinel);
  std::optional<HeadsBuffer<T>> dS;
  if (seeds.d_scores) dS.emplace(*seeds.d_scores, layout);
  mh::HeadsView<T> d_bias;
  if (p.spec.bias && p.spec.bias->size() > 0 && want_d_bias) {
    const Array4& b = *p.spec.bias;
    g.d_bias = HeadsBuffer<T>(mh::Layout::BHTD, b.n[0], b.n[1], tq, tk, sentinel);
    d_bias = g.d_bias.view();
  }
  std::optional<HeadsBuffer<mh::ComputeScalar<T>>> d_lse;
  mh::BackwardTerms<T> terms;
  if (seeds.d_lse) {
    d_lse.emplace(*seeds.d_lse, layout);
    terms.d_lse = d_lse->cview();
  }
  if (!p.spec.sinks.empty()) {
    g.d_sinks.assign(static_cast<size_t>(H), mh::ComputeScalar<T>(sentinel));
    terms.d_sinks = g.d_sinks.data();
  }
  if (more_terms) more_terms(terms);  // (the gradient callback, BackwardTerms::logit_grad)
  mh::attention_heads_backward_into(Q.cview(), K.cview(), V.cview(), g.out.cview(), g.lse.cview(), dO.cview(),
                                    dS ? dS->cview() : mh::HeadsView<const T>{}, g.dq.view(), g.dk.view(),
                                    g.dv.view(), d_bias, opt, masks.masks, terms);
  return g;
}

/// CHECK every element of `actual` within its bound: |actual - expected| <= tol (a gradient
/// whose every term is exactly zero must come out exactly zero). Returns the largest
/// |actual - expected| / tol over all elements (0 / 0 counts 0; NaN or x / 0 infinity): <= 1
/// when every element passed.
template <class S>
long double check_within(const mh::HeadsView<S>& actual, const Array4& expected, const Array4& tol,
                         const std::string& what) {
  REQUIRE(actual.batch == expected.n[0]);
  REQUIRE(actual.heads == expected.n[1]);
  REQUIRE(actual.tokens == expected.n[2]);
  REQUIRE(actual.dim == expected.n[3]);
  long failures = 0;
  long double worst = 0, fraction = 0;
  std::ostringstream where;
  for (Eigen::Index b = 0; b < expected.n[0]; ++b)
    for (Eigen::Index h = 0; h < expected.n[1]; ++h)
      for (Eigen::Index i = 0; i < expected.n[2]; ++i)
        for (Eigen::Index c = 0; c < expected.n[3]; ++c) {
          const long double a = static_cast<long double>(actual.head(b, h)(i, c)), e = expected(b, h, i, c);
          const long double t = tol(b, h, i, c), err = std::fabs(a - e);
          const long double excess = t > 0 ? err / t : (err > 0 ? INFINITY : 0);
          fraction = std::isnan(excess) ? INFINITY : std::max(fraction, excess);
          if (!(err <= t)) {
            ++failures;
            if (!(excess <= worst)) {
              worst = excess;
              where.str("");
              where << "(" << b << ", " << h << ", " << i << ", " << c << "): got " << static_cast<double>(a)
                    << ", expected " << static_cast<double>(e) << ", bound " << static_cast<double>(t);
            }
          }
        }
  CHECK_MESSAGE(failures == 0, what << ": " << failures << " elements outside their bound; worst at "
                                    << where.str() << " (" << static_cast<double>(worst) << " x the bound)");
  return fraction;
}

/// Checks every gradient of `g` against the reference.
template <class T>
void check_against(const Gradients<T>& g, const BackwardReference& ref, const std::string& what) {
  CAPTURE(what);
  check_within(g.dq.view(), ref.dq, ref.dq_tol, "dQ");
  check_within(g.dk.view(), ref.dk, ref.dk_tol, "dK");
  check_within(g.dv.view(), ref.dv, ref.dv_tol, "dV");
  if (!g.d_bias.data.empty()) check_within(g.d_bias.view(), ref.d_bias, ref.d_bias_tol, "dbias");
  REQUIRE(g.d_sinks.size() == ref.d_sinks.size());
  for (size_t h = 0; h < g.d_sinks.size(); ++h) {
    CAPTURE(h);
    CHECK(std::fabs(static_cast<long double>(g.d_sinks[h]) - ref.d_sinks[h]) <= ref.d_sinks_tol[h]);
  }
}

/// CHECK two runs' gradients bitwise equal.
template <class T>
void check_equal(const Gradients<T>& a, const Gradients<T>& b, const std::string& what) {
  CAPTURE(what);
  check_heads_equal(a.dq.view(), b.dq.view(), "dQ");
  check_heads_equal(a.dk.view(), b.dk.view(), "dK");
  check_heads_equal(a.dv.view(), b.dv.view(), "dV");
  if (!a.d_bias.data.empty()) check_heads_equal(a.d_bias.view(), b.d_bias.view(), "dbias");
  REQUIRE(a.d_sinks.size() == b.d_sinks.size());
  for (size_t h = 0; h < a.d_sinks.size(); ++h)
    CHECK(std::memcmp(&a.d_sinks[h], &b.d_sinks[h], sizeof(a.d_sinks[h])) == 0);
}

}  // namespace ea_test::backward
