// SPDX-License-Identifier: MIT
/// \file multihead_crosscheck.hpp
/// What the multi-head cross-checks (test/multihead_*.cpp, one file per relation) share: random
/// problems for the long-double reference (support/reference.hpp), one attention_heads_into or
/// attention_heads_decomposed_into call on them, and the comparisons. Equalities the API documents
/// (thread counts) or that only change how the same buffers are addressed (BHTD vs BTHD) are
/// checked bitwise; equalities between different computations of the same function are checked
/// within twice the error budget of one computation (each result is within one budget of the
/// exact value). All data is seeded random (no outside data).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "multihead_golden.hpp"
#include "random.hpp"

namespace ea_test::crosscheck {

inline constexpr long double kInf = std::numeric_limits<long double>::infinity();

template <class T>
inline constexpr T kSentinel = T(-777.25);

/// magnitude * N(0, 1) rounded to T (so the reference sees exactly the library's inputs).
template <class T>
Array4 random_array(Rng& rng, Eigen::Index n0, Eigen::Index n1, Eigen::Index n2, Eigen::Index n3,
                    double magnitude = 1.0) {
  Array4 a(n0, n1, n2, n3);
  for (auto& x : a.v) x = static_cast<long double>(static_cast<T>(magnitude * rng.normal()));
  return a;
}

/// What a random problem holds. mask/bias: "" (none), "1x1", "Bx1", "1xH" or "BxH".
struct Config {
  const char* name;
  Eigen::Index B, H, Hkv, Tq, Tk, dk, dv;
  bool causal = false, bottom_right = false;
  long window_left = -1, window_right = -1;
  long chunk = 0;  // Options::chunk_size
  double softcap = 0;
  std::string mask = "", bias = "";
  bool key_lengths = false, alibi = false;
  bool sinks = false;  // Masks::sinks: one logit per query head, drawn from [-2, 3]
  double scale = 0;    // 0: default
  double magnitude = 1.0;
};

struct Problem {
  Array4 Q, K, V;
  MultiHeadSpec spec;
};

template <class T>
Problem make_problem(const Config& c, Rng& rng) {
  Problem p;
  p.Q = random_array<T>(rng, c.B, c.H, c.Tq, c.dk, c.magnitude);
  p.K = random_array<T>(rng, c.B, c.Hkv, c.Tk, c.dk, c.magnitude);
  p.V = random_array<T>(rng, c.B, c.Hkv, c.Tk, c.dv);
  MultiHeadSpec& s = p.spec;
  s.causal = c.causal;
  s.bottom_right = c.bottom_right;
  s.window_left = c.window_left;
  s.window_right = c.window_right;
  s.chunk = c.chunk;
  s.softcap = static_cast<long double>(static_cast<double>(c.softcap));
  if (c.scale != 0) s.scale = static_cast<long double>(c.scale);
  auto shape = [&](const std::string& spec) {
    return std::pair<Eigen::Index, Eigen::Index>{spec[0] == 'B' ? c.B : 1, spec[2] == 'H' ? c.H : 1};
  };
  if (!c.mask.empty()) {
    const auto [b, h] = shape(c.mask);
    Array4 m(b, h, c.Tq, c.Tk);
    for (auto& x : m.v) x = rng.uniform() < 0.5 ? 1 : 0;  // P(visible) = 0.75
    p.spec.mask = m;
  }
  if (!c.bias.empty()) {
    const auto [b, h] = shape(c.bias);
    p.spec.bias = random_array<T>(rng, b, h, c.Tq, c.Tk);
  }
  if (c.key_lengths) {
    // sequence 0 full; with B >= 3 sequence 1 empty; the others random
    for (Eigen::Index b = 0; b < c.B; ++b)
      s.key_lengths.push_back(b == 0 ? c.Tk : (b == 1 && c.B >= 3) || c.Tk == 0 ? 0 : rng.integer(1, c.Tk));
  }
  if (c.alibi)
    for (Eigen::Index h = 0; h < c.H; ++h)
      s.alibi.push_back(static_cast<T>(0.37 / static_cast<double>(h + 1)));
  if (c.sinks)
    for (Eigen::Index h = 0; h < c.H; ++h) s.sinks.push_back(static_cast<T>(0.5 + 2.5 * rng.uniform()));
  return p;
}

/// One attention_heads_into or attention_heads_decomposed_into call on `p`, its outputs in `layout`.
template <class T>
struct Run {
  HeadsBuffer<T> out, lse, scores, avg;
};

/// `program` (when given) adds to the masks made from p.spec what the spec cannot hold (the
/// library's score_mod, mask_mod and block_mask).
template <class T>
Run<T> run_heads(const Problem& p, const mh::Options& opt, mh::Layout layout, bool decomposed,
                 const std::function<void(mh::Masks<T>&)>& program = {}) {
  const Eigen::Index B = p.Q.n[0], H = p.Q.n[1], tq = p.Q.n[2], tk = p.K.n[2], dv = p.V.n[3];
  const HeadsBuffer<T> Q(p.Q, layout), K(p.K, layout), V(p.V, layout);
  MasksBuffer<T> masks(p.spec);
  if (program) program(masks.masks);
  Run<T> r;
  r.out = HeadsBuffer<T>(layout, B, H, tq, dv, kSentinel<T>);
  r.lse = HeadsBuffer<T>(layout, B, H, tq, 1, kSentinel<T>);
  if (decomposed) {
    r.scores = HeadsBuffer<T>(layout, B, H, tq, tk, kSentinel<T>);
    r.avg = HeadsBuffer<T>(layout, B, 1, tq, tk, kSentinel<T>);
    mh::attention_heads_decomposed_into(Q.cview(), K.cview(), V.cview(), r.scores.view(), r.out.view(),
                                        r.lse.view(), r.avg.view(), opt, masks.masks);
  } else {
    mh::attention_heads_into(Q.cview(), K.cview(), V.cview(), r.out.view(), r.lse.view(), opt, masks.masks);
  }
  return r;
}

/// Per-(b, h) budgets of `ref` in T, times `factor`.
template <class T, class Bound>
auto budget_fn(const MultiHeadReference& ref, long double factor, Bound Budget::*what) {
  return [&ref, factor, what](Eigen::Index b, Eigen::Index h) {
    return factor * (multihead_budget<T>(ref, b * ref.heads + h).*what);
  };
}

/// Checks every output of `r` against the reference, each within `factor` budgets.
template <class T>
void check_against(const Run<T>& r, const MultiHeadReference& ref, long double factor,
                   const std::string& what) {
  CAPTURE(what);
  check_heads_near(r.out.view(), ref.out, budget_fn<T>(ref, factor, &Budget::attn), "OUT");
  check_heads_near(r.lse.view(), ref.lse, budget_fn<T>(ref, factor, &Budget::lse), "LSE");
  if (!r.scores.data.empty()) {
    check_heads_near(r.scores.view(), ref.scores, budget_fn<T>(ref, factor, &Budget::scores), "SCORES");
  }
  if (!r.avg.data.empty()) {
    check_heads_near(
        r.avg.view(), ref.avg_scores,
        [&](Eigen::Index b, Eigen::Index) { return factor * average_scores_budget<T>(ref, b); },
        "AVG_SCORES");
  }
}

/// Checks two runs against each other: `r` near `expected` within 2 budgets of `ref`.
template <class T>
void check_runs_near(const Run<T>& r, const Run<T>& expected, const MultiHeadReference& ref,
                     const std::string& what) {
  CAPTURE(what);
  const Array4 out = expected.out.to_array(), lse = expected.lse.to_array();
  check_heads_near(r.out.view(), out, budget_fn<T>(ref, 2, &Budget::attn), "OUT");
  check_heads_near(r.lse.view(), lse, budget_fn<T>(ref, 2, &Budget::lse), "LSE");
  if (!r.scores.data.empty() && !expected.scores.data.empty())
    check_heads_near(r.scores.view(), expected.scores.to_array(), budget_fn<T>(ref, 2, &Budget::scores),
                     "SCORES");
}

template <class T>
void check_runs_equal(const Run<T>& r, const Run<T>& expected, const std::string& what) {
  CAPTURE(what);
  check_heads_equal(r.out.view(), expected.out.view(), "OUT");
  check_heads_equal(r.lse.view(), expected.lse.view(), "LSE");
  if (!r.scores.data.empty()) {
    check_heads_equal(r.scores.view(), expected.scores.view(), "SCORES");
    check_heads_equal(r.avg.view(), expected.avg.view(), "AVG_SCORES");
  }
}

/// The sizes a random configuration draws from: small ones, and the "big" ones that cross the
/// kernels' tiles.
struct RandomSizes {
  long max_batch, max_kv_heads, max_group, max_t, max_dk;  // small
  long big_tq_min, big_tq_max, big_tk_min, big_tk_max, big_max_dk, big_max_window;
};

/// A random configuration: every combination of features is likely to come up.
inline Config random_config(Rng& rng, bool big, const RandomSizes& s) {
  Config c{"random", 0, 0, 0, 0, 0, 0, 0};
  c.B = big ? 1 : rng.integer(1, s.max_batch);
  c.Hkv = big ? 1 : rng.integer(1, s.max_kv_heads);
  c.H = c.Hkv * rng.integer(1, big ? 2 : s.max_group);
  c.Tq = big ? rng.integer(s.big_tq_min, s.big_tq_max) : rng.integer(0, s.max_t);
  c.Tk = big ? rng.integer(s.big_tk_min, s.big_tk_max) : rng.integer(0, s.max_t);
  c.dk = rng.integer(1, big ? s.big_max_dk : s.max_dk);
  c.dv = rng.integer(1, 9);
  c.causal = rng.integer(0, 1) == 1;
  c.bottom_right = rng.integer(0, 1) == 1;
  c.window_left = rng.integer(0, 2) == 0 ? rng.integer(0, big ? s.big_max_window : 10) : -1;
  c.window_right = rng.integer(0, 2) == 0 ? rng.integer(0, big ? s.big_max_window : 10) : -1;
  c.softcap = rng.integer(0, 2) == 0 ? 0.5 + 5 * (rng.uniform() + 1) : 0.0;
  const char* shapes[] = {"", "1x1", "Bx1", "1xH", "BxH"};
  c.mask = shapes[rng.integer(0, 4)];
  c.bias = shapes[rng.integer(0, 4)];
  c.key_lengths = rng.integer(0, 2) == 0;
  c.alibi = rng.integer(0, 2) == 0;
  if (rng.integer(0, 3) == 0) c.scale = 0.1 + (rng.uniform() + 1);
  if (rng.integer(0, 3) == 0) c.chunk = rng.integer(1, big ? s.big_max_window : 12);
  c.sinks = rng.integer(0, 2) == 0;
  return c;
}

// Random problems that together use every feature; the larger ones span several query and
// key tiles, so that tiles hidden by the causal mask, the window or the key length are skipped.
inline std::vector<Config> feature_configs() {
  std::vector<Config> cs;
  {
    Config c{"plain GQA", 2, 6, 3, 9, 13, 10, 7};
    cs.push_back(c);
  }
  {
    Config c{"MQA, causal bottom-right, key lengths", 3, 4, 1, 6, 11, 8, 5};
    c.causal = c.bottom_right = c.key_lengths = true;
    cs.push_back(c);
  }
  {
    Config c{"window + ALiBi + softcap, top-left", 2, 4, 2, 12, 17, 16, 3};
    c.window_left = 3;
    c.window_right = 2;
    c.alibi = true;
    c.softcap = 1.5;
    c.magnitude = 2.0;
    cs.push_back(c);
  }
  {
    Config c{"mask BxH + bias 1xH, causal top-left, explicit scale", 2, 4, 4, 10, 7, 6, 6};
    c.causal = true;
    c.mask = "BxH";
    c.bias = "1xH";
    c.scale = 0.45;
    cs.push_back(c);
  }
  {
    Config c{"everything", 3, 6, 2, 11, 14, 9, 8};
    c.causal = c.bottom_right = c.key_lengths = c.alibi = c.sinks = true;
    c.window_left = 5;
    c.softcap = 4.0;
    c.mask = "Bx1";
    c.bias = "BxH";
    c.magnitude = 1.5;
    cs.push_back(c);
  }
  {
    Config c{"long: tiles skipped by window, causal and key length", 2, 2, 1, 150, 210, 32, 16};
    c.causal = c.bottom_right = c.key_lengths = true;
    c.window_left = 40;
    cs.push_back(c);
  }
  {
    Config c{"long: window both sides, bias, ALiBi", 1, 3, 3, 140, 130, 24, 8};
    c.window_left = 20;
    c.window_right = 70;
    c.bias = "1x1";
    c.alibi = true;
    cs.push_back(c);
  }
  {
    // more than one 512-key tile: whole key tiles before the window and after the key length
    Config c{"long keys: key tiles skipped", 2, 2, 1, 130, 1100, 16, 8};
    c.causal = c.bottom_right = c.key_lengths = true;
    c.window_left = 300;
    cs.push_back(c);
  }
  {
    Config c{"decoding one query over 1500 keys, window + ALiBi + softcap", 1, 4, 2, 1, 1500, 16, 8};
    c.causal = c.bottom_right = c.alibi = true;
    c.window_left = 700;
    c.softcap = 8.0;
    cs.push_back(c);
  }
  {
    // Llama 4's chunked-local layers: causal within chunks of 100 positions, so that query
    // tiles and key tiles straddle chunk boundaries and whole key tiles lie outside a chunk
    Config c{"long: chunked causal, GQA, sinks", 1, 2, 1, 300, 300, 16, 8};
    c.causal = c.sinks = true;
    c.chunk = 100;
    cs.push_back(c);
  }
  {
    Config c{"chunked, bottom-right, window, key lengths, ALiBi", 3, 4, 2, 9, 23, 8, 5};
    c.causal = c.bottom_right = c.key_lengths = c.alibi = true;
    c.chunk = 6;
    c.window_left = 4;
    cs.push_back(c);
  }
  {
    Config c{"long keys: chunks of 1 key and of 700, no causal mask", 1, 2, 2, 40, 1100, 16, 8};
    c.chunk = 700;
    cs.push_back(c);
    c.name = "chunks of one key";
    c.Tq = 30;
    c.Tk = 30;
    c.chunk = 1;
    cs.push_back(c);
  }
  return cs;
}

}  // namespace ea_test::crosscheck
