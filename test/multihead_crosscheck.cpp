// Cross-checks of the multi-head calls against each other, against the single-head API and
// against the long-double reference (support/reference.hpp), on seeded random data (no
// outside data). Equalities the API documents (thread counts) or that only change how the
// same buffers are addressed (BHTD vs BTHD) are checked bitwise; equalities between different
// computations of the same function are checked within twice the error budget of one
// computation (each result is within one budget of the exact value).
#include <doctest/doctest.h>

#include <unsupported/Eigen/CXX11/Tensor>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common.hpp"
#include "multihead_golden.hpp"
#include "random.hpp"

using namespace ea_test;

namespace {

constexpr long double kInf = std::numeric_limits<long double>::infinity();

template <class T>
constexpr T kSentinel = T(-777.25);

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
  double softcap = 0;
  std::string mask = "", bias = "";
  bool key_lengths = false, alibi = false;
  double scale = 0;  // 0: default
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
    for (Eigen::Index h = 0; h < c.H; ++h) s.alibi.push_back(static_cast<T>(0.37 / static_cast<double>(h + 1)));
  return p;
}

/// One attention_heads or attention_heads_decomposed call on `p`, its outputs in `layout`.
template <class T>
struct Run {
  HeadsBuffer<T> out, lse, scores, avg;
};

template <class T>
Run<T> run_heads(const Problem& p, const mh::Options& opt, mh::Layout layout, bool decomposed) {
  const Eigen::Index B = p.Q.n[0], H = p.Q.n[1], tq = p.Q.n[2], tk = p.K.n[2], dv = p.V.n[3];
  const HeadsBuffer<T> Q(p.Q, layout), K(p.K, layout), V(p.V, layout);
  const MasksBuffer<T> masks(p.spec);
  Run<T> r;
  r.out = HeadsBuffer<T>(layout, B, H, tq, dv, kSentinel<T>);
  r.lse = HeadsBuffer<T>(layout, B, H, tq, 1, kSentinel<T>);
  if (decomposed) {
    r.scores = HeadsBuffer<T>(layout, B, H, tq, tk, kSentinel<T>);
    r.avg = HeadsBuffer<T>(layout, B, 1, tq, tk, kSentinel<T>);
    mh::attention_heads_decomposed(Q.cview(), K.cview(), V.cview(), r.scores.view(), r.out.view(), opt, masks.masks,
                                   r.lse.view(), r.avg.view());
  } else {
    mh::attention_heads(Q.cview(), K.cview(), V.cview(), r.out.view(), opt, masks.masks, r.lse.view());
  }
  return r;
}

/// Per-(b, h) budgets of `ref` in T, times `factor`.
template <class T>
auto budget_fn(const MultiHeadReference& ref, long double factor, long double Budget::*what) {
  return [&ref, factor, what](Eigen::Index b, Eigen::Index h) {
    return factor * (multihead_budget<T>(ref, b * ref.heads + h).*what);
  };
}

/// Checks every output of `r` against the reference, each within `factor` budgets.
template <class T>
void check_against(const Run<T>& r, const MultiHeadReference& ref, long double factor, const std::string& what) {
  CAPTURE(what);
  check_heads_near(r.out.view(), ref.out, budget_fn<T>(ref, factor, &Budget::attn), "OUT");
  check_heads_near(r.lse.view(), ref.lse, budget_fn<T>(ref, factor, &Budget::lse), "LSE");
  if (!r.scores.data.empty()) {
    check_heads_near(r.scores.view(), ref.scores, budget_fn<T>(ref, factor, &Budget::scores), "SCORES");
  }
  if (!r.avg.data.empty()) {
    check_heads_near(
        r.avg.view(), ref.avg_scores,
        [&](Eigen::Index b, Eigen::Index) { return factor * average_scores_budget<T>(ref, b); }, "AVG_SCORES");
  }
}

/// Checks two runs against each other: `r` near `expected` within 2 budgets of `ref`.
template <class T>
void check_runs_near(const Run<T>& r, const Run<T>& expected, const MultiHeadReference& ref, const std::string& what) {
  CAPTURE(what);
  const Array4 out = expected.out.to_array(), lse = expected.lse.to_array();
  check_heads_near(r.out.view(), out, budget_fn<T>(ref, 2, &Budget::attn), "OUT");
  check_heads_near(r.lse.view(), lse, budget_fn<T>(ref, 2, &Budget::lse), "LSE");
  if (!r.scores.data.empty() && !expected.scores.data.empty())
    check_heads_near(r.scores.view(), expected.scores.to_array(), budget_fn<T>(ref, 2, &Budget::scores), "SCORES");
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

// Random problems that together use every feature; the larger ones span several query and
// key tiles, so that tiles hidden by the causal mask, the window or the key length are skipped.
std::vector<Config> feature_configs() {
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
    c.causal = c.bottom_right = c.key_lengths = c.alibi = true;
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
  return cs;
}

}  // namespace

TEST_CASE_TEMPLATE("multihead crosscheck: the long-double reference vs attention_heads and _decomposed", T, float,
                   double) {
  Rng rng(9001);
  for (const Config& c : feature_configs()) {
    const std::string config = c.name;
    CAPTURE(config);
    const Problem p = make_problem<T>(c, rng);
    const auto ref = reference_heads(p.Q, p.K, p.V, p.spec);
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      for (const int threads : {1, 2}) {
        CAPTURE(threads);
        const mh::Options opt = options_for(p.spec, kernel, threads);
        const Run<T> fused = run_heads<T>(p, opt, mh::Layout::BHTD, false);
        const Run<T> dec = run_heads<T>(p, opt, mh::Layout::BHTD, true);
        check_against(fused, ref, 1, "attention_heads vs reference");
        check_against(dec, ref, 1, "attention_heads_decomposed vs reference");
        // the fused OUT/LSE vs the decomposed ones: two computations of one function
        check_runs_near(fused, dec, ref, "attention_heads vs attention_heads_decomposed");
      }
    }
  }
}

TEST_CASE_TEMPLATE("multihead crosscheck: random configurations vs the long-double reference", T, float, double) {
  // Seeded random shapes and options (every combination of features is likely to come up); each
  // against the reference, fused and decomposed, on a kernel and thread count drawn at random.
  Rng rng(777);
  const auto kernels = kernels_under_test();
  for (int n = 0; n < 200; ++n) {
    Config c{"random", 0, 0, 0, 0, 0, 0, 0};
    // one in 10 spans several query tiles (128 rows) and key tiles (512 keys)
    const bool big = n % 10 == 9;
    c.B = big ? 1 : rng.integer(1, 3);
    c.Hkv = big ? 1 : rng.integer(1, 3);
    c.H = c.Hkv * rng.integer(1, big ? 2 : 3);
    c.Tq = big ? rng.integer(100, 300) : rng.integer(0, 40);
    c.Tk = big ? rng.integer(400, 1100) : rng.integer(0, 40);
    c.dk = rng.integer(1, big ? 8 : 17);
    c.dv = rng.integer(1, 9);
    c.causal = rng.integer(0, 1) == 1;
    c.bottom_right = rng.integer(0, 1) == 1;
    c.window_left = rng.integer(0, 2) == 0 ? rng.integer(0, big ? 600 : 10) : -1;
    c.window_right = rng.integer(0, 2) == 0 ? rng.integer(0, big ? 600 : 10) : -1;
    c.softcap = rng.integer(0, 2) == 0 ? 0.5 + 5 * (rng.uniform() + 1) : 0.0;
    const char* shapes[] = {"", "1x1", "Bx1", "1xH", "BxH"};
    c.mask = shapes[rng.integer(0, 4)];
    c.bias = shapes[rng.integer(0, 4)];
    c.key_lengths = rng.integer(0, 2) == 0;
    c.alibi = rng.integer(0, 2) == 0;
    if (rng.integer(0, 3) == 0) c.scale = 0.1 + (rng.uniform() + 1);
    c.magnitude = 0.5 + (rng.uniform() + 1);
    const Problem p = make_problem<T>(c, rng);
    const auto kernel = kernels[static_cast<size_t>(rng.integer(0, static_cast<long>(kernels.size()) - 1))];
    const int threads = static_cast<int>(rng.integer(0, 2));
    CAPTURE(n);
    CAPTURE(c.B);
    CAPTURE(c.H);
    CAPTURE(c.Hkv);
    CAPTURE(c.Tq);
    CAPTURE(c.Tk);
    CAPTURE(c.dk);
    CAPTURE(c.dv);
    CAPTURE(c.causal);
    CAPTURE(c.bottom_right);
    CAPTURE(c.window_left);
    CAPTURE(c.window_right);
    CAPTURE(c.softcap);
    CAPTURE(c.mask);
    CAPTURE(c.bias);
    CAPTURE(c.key_lengths);
    CAPTURE(c.alibi);
    CAPTURE(c.scale);
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    CAPTURE(threads);
    const auto ref = reference_heads(p.Q, p.K, p.V, p.spec);
    const mh::Options opt = options_for(p.spec, kernel, threads);
    const mh::Layout layout = rng.integer(0, 1) == 0 ? mh::Layout::BHTD : mh::Layout::BTHD;
    check_against(run_heads<T>(p, opt, layout, false), ref, 1, "attention_heads vs reference");
    check_against(run_heads<T>(p, opt, layout, true), ref, 1, "attention_heads_decomposed vs reference");
  }
}

TEST_CASE_TEMPLATE("multihead crosscheck: causal == a boolean lower-triangular mask, both alignments", T, float,
                   double) {
  Rng rng(11);
  struct Shape {
    Eigen::Index tq, tk;
  };
  for (const Shape s : {Shape{7, 7}, Shape{5, 12}, Shape{12, 5}}) {
    for (const bool bottom_right : {false, true}) {
      CAPTURE(s.tq);
      CAPTURE(s.tk);
      CAPTURE(bottom_right);
      Config c{"", 2, 4, 2, s.tq, s.tk, 8, 5};
      Problem causal = make_problem<T>(c, rng);
      causal.spec.causal = true;
      causal.spec.bottom_right = bottom_right;
      // The same frontier as a column-major Eigen bool matrix, through BroadcastView::of().
      const Eigen::Index offset = bottom_right ? s.tk - s.tq : 0;
      Eigen::Matrix<bool, Eigen::Dynamic, Eigen::Dynamic> tri(s.tq, s.tk);
      for (Eigen::Index i = 0; i < s.tq; ++i)
        for (Eigen::Index j = 0; j < s.tk; ++j) tri(i, j) = j <= i + offset;
      const auto ref = reference_heads(causal.Q, causal.K, causal.V, causal.spec);
      for (const auto kernel : kernels_under_test()) {
        const std::string kname = ea::kernel_name(kernel);
        CAPTURE(kname);
        for (const bool decomposed : {false, true}) {
          CAPTURE(decomposed);
          const Run<T> a = run_heads<T>(causal, options_for(causal.spec, kernel), mh::Layout::BHTD, decomposed);
          // masked call: no causal flag (the alignment then does not matter)
          const Eigen::Index B = c.B, H = c.H, dv = c.dv;
          const HeadsBuffer<T> Q(causal.Q, mh::Layout::BHTD), K(causal.K, mh::Layout::BHTD),
              V(causal.V, mh::Layout::BHTD);
          mh::Masks<T> masks;
          masks.mask = mh::BroadcastView<bool>::of(tri);
          Run<T> b;
          b.out = HeadsBuffer<T>(mh::Layout::BHTD, B, H, s.tq, dv, kSentinel<T>);
          b.lse = HeadsBuffer<T>(mh::Layout::BHTD, B, H, s.tq, 1, kSentinel<T>);
          mh::Options opt = options_for(MultiHeadSpec{}, kernel);
          if (decomposed) {
            b.scores = HeadsBuffer<T>(mh::Layout::BHTD, B, H, s.tq, s.tk, kSentinel<T>);
            b.avg = HeadsBuffer<T>(mh::Layout::BHTD, B, 1, s.tq, s.tk, kSentinel<T>);
            mh::attention_heads_decomposed(Q.cview(), K.cview(), V.cview(), b.scores.view(), b.out.view(), opt,
                                           masks, b.lse.view(), b.avg.view());
          } else {
            mh::attention_heads(Q.cview(), K.cview(), V.cview(), b.out.view(), opt, masks, b.lse.view());
          }
          check_runs_near(b, a, ref, "mask vs causal");
          check_against(b, ref, 1, "mask vs reference");
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("multihead crosscheck: ALiBi == the equivalent additive bias", T, float, double) {
  Rng rng(12);
  for (const bool bottom_right : {false, true}) {
    for (const bool causal : {false, true}) {
      for (const bool power_of_two : {true, false}) {
        CAPTURE(bottom_right);
        CAPTURE(causal);
        CAPTURE(power_of_two);
        Config c{"", 2, 4, 2, 6, 11, 8, 5};
        c.causal = causal;
        c.bottom_right = bottom_right;
        c.alibi = true;
        Problem with_alibi = make_problem<T>(c, rng);
        if (power_of_two)
          for (Eigen::Index h = 0; h < c.H; ++h)
            with_alibi.spec.alibi[static_cast<size_t>(h)] = std::pow(2.0L, -8.0L * static_cast<long double>(h + 1) / c.H);
        // bias[1, H, T_q, T_k] = -slope_h |i + offset - j|, rounded to T once
        Problem with_bias = with_alibi;
        with_bias.spec.alibi.clear();
        Array4 bias(1, c.H, c.Tq, c.Tk);
        const Eigen::Index offset = bottom_right ? c.Tk - c.Tq : 0;
        for (Eigen::Index h = 0; h < c.H; ++h)
          for (Eigen::Index i = 0; i < c.Tq; ++i)
            for (Eigen::Index j = 0; j < c.Tk; ++j)
              bias(0, h, i, j) = static_cast<T>(-static_cast<T>(with_alibi.spec.alibi[static_cast<size_t>(h)]) *
                                                static_cast<T>(std::abs(i + offset - j)));
        with_bias.spec.bias = bias;
        const auto ref = reference_heads(with_alibi.Q, with_alibi.K, with_alibi.V, with_alibi.spec);
        // the reference agrees with itself across the two forms
        const auto ref_bias = reference_heads(with_bias.Q, with_bias.K, with_bias.V, with_bias.spec);
        check_heads_near(array_view(ref_bias.out), ref.out, budget_fn<T>(ref, 1, &Budget::attn), "reference");
        for (const auto kernel : kernels_under_test()) {
          const std::string kname = ea::kernel_name(kernel);
          CAPTURE(kname);
          for (const bool decomposed : {false, true}) {
            CAPTURE(decomposed);
            const Run<T> a = run_heads<T>(with_alibi, options_for(with_alibi.spec, kernel), mh::Layout::BHTD, decomposed);
            const Run<T> b = run_heads<T>(with_bias, options_for(with_bias.spec, kernel), mh::Layout::BHTD, decomposed);
            check_runs_near(a, b, ref, "alibi vs bias");
            check_against(a, ref, 1, "alibi vs reference");
          }
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("multihead crosscheck: a bias of -inf == the boolean mask (rows of -inf: zeros, never NaN)", T,
                   float, double) {
  Rng rng(22);
  Config c{"", 2, 4, 2, 7, 9, 8, 5};
  c.mask = "BxH";
  c.softcap = 2.0;
  Problem masked = make_problem<T>(c, rng);
  for (Eigen::Index b = 0; b < c.B; ++b)
    for (Eigen::Index h = 0; h < c.H; ++h)
      for (Eigen::Index j = 0; j < c.Tk; ++j) (*masked.spec.mask)(b, h, 3, j) = 0;  // row 3 sees no key
  Problem biased = masked;
  biased.spec.mask.reset();
  Array4 bias = *masked.spec.mask;
  for (auto& x : bias.v) x = x != 0 ? 0 : -kInf;
  biased.spec.bias = bias;
  const auto ref = reference_heads(masked.Q, masked.K, masked.V, masked.spec);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    for (const bool decomposed : {false, true}) {
      CAPTURE(decomposed);
      const Run<T> a = run_heads<T>(masked, options_for(masked.spec, kernel), mh::Layout::BHTD, decomposed);
      const Run<T> b = run_heads<T>(biased, options_for(biased.spec, kernel), mh::Layout::BHTD, decomposed);
      check_against(a, ref, 1, "mask vs reference");
      check_against(b, ref, 1, "-inf bias vs reference");
      check_runs_near(b, a, ref, "-inf bias vs mask");
    }
  }
}

TEST_CASE_TEMPLATE("multihead crosscheck: GQA/MQA == K/V copied per query head", T, float, double) {
  Rng rng(13);
  for (const Eigen::Index hkv : {1, 2, 4}) {
    CAPTURE(hkv);
    Config c{"", 2, 8, hkv, 7, 10, 8, 6};
    c.causal = c.bottom_right = c.alibi = true;
    c.mask = "BxH";
    c.softcap = 3.0;
    const Problem gqa = make_problem<T>(c, rng);
    Problem rep = gqa;
    rep.K = Array4(c.B, c.H, c.Tk, c.dk);
    rep.V = Array4(c.B, c.H, c.Tk, c.dv);
    for (Eigen::Index b = 0; b < c.B; ++b)
      for (Eigen::Index h = 0; h < c.H; ++h) {
        const Eigen::Index kh = h / (c.H / hkv);
        for (Eigen::Index j = 0; j < c.Tk; ++j) {
          for (Eigen::Index d = 0; d < c.dk; ++d) rep.K(b, h, j, d) = gqa.K(b, kh, j, d);
          for (Eigen::Index d = 0; d < c.dv; ++d) rep.V(b, h, j, d) = gqa.V(b, kh, j, d);
        }
      }
    const auto ref = reference_heads(gqa.Q, gqa.K, gqa.V, gqa.spec);
    const auto ref_rep = reference_heads(rep.Q, rep.K, rep.V, rep.spec);
    EA_CHECK_EQUAL(ref_rep.out.slice(1, 5), ref.out.slice(1, 5));  // the reference indexes K/V heads as stated
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      for (const mh::Layout layout : {mh::Layout::BHTD, mh::Layout::BTHD}) {
        const std::string lname = layout_name(layout);
        CAPTURE(lname);
        for (const bool decomposed : {false, true}) {
          CAPTURE(decomposed);
          const Run<T> a = run_heads<T>(gqa, options_for(gqa.spec, kernel), layout, decomposed);
          const Run<T> b = run_heads<T>(rep, options_for(rep.spec, kernel), layout, decomposed);
          check_runs_near(a, b, ref, "GQA vs repeated K/V");
          check_against(a, ref, 1, "GQA vs reference");
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("multihead crosscheck: multi-head == a loop of single-head attention calls", T, float, double) {
  Rng rng(14);
  for (const int mode : {0, 1, 2}) {  // no mask, causal top-left, causal bottom-right
    for (const auto& [tq, tk] : {std::pair<Eigen::Index, Eigen::Index>{9, 9}, {6, 13}, {13, 6}}) {
      CAPTURE(mode);
      CAPTURE(tq);
      CAPTURE(tk);
      Config c{"", 2, 6, 3, tq, tk, 12, 7};
      c.causal = mode > 0;
      c.bottom_right = mode == 2;
      if (tq == 6) c.scale = 0.7;
      const Problem p = make_problem<T>(c, rng);
      const auto ref = reference_heads(p.Q, p.K, p.V, p.spec);
      for (const auto kernel : kernels_under_test()) {
        const std::string kname = ea::kernel_name(kernel);
        CAPTURE(kname);
        const mh::Options opt = options_for(p.spec, kernel);
        for (const mh::Layout layout : {mh::Layout::BHTD, mh::Layout::BTHD}) {
          const std::string lname = layout_name(layout);
          CAPTURE(lname);
          const Run<T> multi = run_heads<T>(p, opt, layout, true);
          const HeadsBuffer<T> Q(p.Q, layout), K(p.K, layout), V(p.V, layout);
          Run<T> single;
          single.out = HeadsBuffer<T>(layout, c.B, c.H, tq, c.dv, kSentinel<T>);
          single.lse = HeadsBuffer<T>(layout, c.B, c.H, tq, 1, kSentinel<T>);
          single.scores = HeadsBuffer<T>(layout, c.B, c.H, tq, tk, kSentinel<T>);
          for (Eigen::Index b = 0; b < c.B; ++b)
            for (Eigen::Index h = 0; h < c.H; ++h) {
              const Eigen::Index kh = h / (c.H / c.Hkv);
              auto o = single.out.view().head(b, h);
              auto l = single.lse.view().head(b, h);
              ea::attention_into(Q.cview().head(b, h), K.cview().head(b, kh), V.cview().head(b, kh), o, l, opt);
              auto s = single.scores.view().head(b, h);
              auto dec = ea::attention_decomposed(Q.cview().head(b, h), K.cview().head(b, kh), V.cview().head(b, kh), opt);
              s = dec.scores;
            }
          check_runs_near(multi, single, ref, "multi-head vs single-head loop");
          check_against(single, ref, 1, "single-head loop vs reference (sanity)");
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("multihead crosscheck: varlen == separate attention_heads calls per sequence", T, float, double) {
  Rng rng(15);
  struct VarlenConfig {
    const char* name;
    std::vector<std::int64_t> q_lens, k_lens;
    Eigen::Index H, Hkv;
    bool causal, bottom_right, alibi;
    long wl, wr;
    double softcap;
  };
  const std::vector<VarlenConfig> configs = {
      {"plain GQA", {5, 0, 9, 1, 3}, {7, 3, 9, 4, 0}, 4, 2, false, false, false, -1, -1, 0},
      {"causal bottom-right + ALiBi", {3, 8, 2, 0}, {9, 4, 2, 5}, 3, 3, true, true, true, -1, -1, 0},
      {"causal top-left + window + softcap", {70, 1, 6}, {90, 5, 66}, 2, 1, true, false, false, 9, -1, 2.5},
      {"window both sides, bottom-right", {4, 11, 7}, {10, 6, 7}, 4, 1, false, true, true, 2, 1, 0},
  };
  const Eigen::Index dk = 8, dv = 5;
  for (const auto& vc : configs) {
    const std::string config = vc.name;
    CAPTURE(config);
    std::vector<std::int64_t> cu_q{0}, cu_k{0};
    for (size_t s = 0; s < vc.q_lens.size(); ++s) {
      cu_q.push_back(cu_q.back() + vc.q_lens[s]);
      cu_k.push_back(cu_k.back() + vc.k_lens[s]);
    }
    const Eigen::Index tq = cu_q.back(), tk = cu_k.back(), n = static_cast<Eigen::Index>(vc.q_lens.size());
    Problem p;
    p.Q = random_array<T>(rng, 1, vc.H, tq, dk);
    p.K = random_array<T>(rng, 1, vc.Hkv, tk, dk);
    p.V = random_array<T>(rng, 1, vc.Hkv, tk, dv);
    p.spec.causal = vc.causal;
    p.spec.bottom_right = vc.bottom_right;
    p.spec.window_left = vc.wl;
    p.spec.window_right = vc.wr;
    p.spec.softcap = vc.softcap;
    if (vc.alibi)
      for (Eigen::Index h = 0; h < vc.H; ++h) p.spec.alibi.push_back(static_cast<T>(0.3 * (h + 1)));
    const auto ref = reference_varlen(p.Q, p.K, p.V, cu_q, cu_k, p.spec);
    const MasksBuffer<T> masks(p.spec);
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      const mh::Options opt = options_for(p.spec, kernel);
      for (const mh::Layout layout : {mh::Layout::BHTD, mh::Layout::BTHD}) {
        const std::string lname = layout_name(layout);
        CAPTURE(lname);
        const HeadsBuffer<T> Q(p.Q, layout), K(p.K, layout), V(p.V, layout);
        HeadsBuffer<T> out(layout, 1, vc.H, tq, dv, kSentinel<T>), lse(layout, 1, vc.H, tq, 1, kSentinel<T>);
        mh::attention_varlen(Q.cview(), K.cview(), V.cview(), out.view(), cu_q.data(), cu_k.data(), n, opt,
                             masks.masks, lse.view());
        // The decomposed form: the same ATTN, and packed weights equal to each sequence's own.
        const std::size_t packed_size = mh::varlen_scores_size(cu_q.data(), cu_k.data(), n, vc.H);
        std::vector<T> packed(packed_size, kSentinel<T>);
        HeadsBuffer<T> out_d(layout, 1, vc.H, tq, dv, kSentinel<T>);
        mh::attention_varlen_decomposed(Q.cview(), K.cview(), V.cview(), packed.data(), packed.size(), out_d.view(),
                                        cu_q.data(), cu_k.data(), n, opt, masks.masks);
        CHECK_THROWS_AS(mh::attention_varlen_decomposed(Q.cview(), K.cview(), V.cview(), packed.data(),
                                                        packed.size() + 1, out_d.view(), cu_q.data(), cu_k.data(),
                                                        n, opt, masks.masks),
                        std::invalid_argument);
        std::size_t packed_offset = 0;
        for (Eigen::Index s = 0; s < n; ++s) {
          CAPTURE(s);
          const Eigen::Index q0 = cu_q[s], lq = cu_q[s + 1] - q0, k0 = cu_k[s], lk = cu_k[s + 1] - k0;
          HeadsBuffer<T> o(layout, 1, vc.H, lq, dv, kSentinel<T>), l(layout, 1, vc.H, lq, 1, kSentinel<T>);
          mh::attention_heads(token_subview(Q.cview(), q0, lq), token_subview(K.cview(), k0, lk),
                              token_subview(V.cview(), k0, lk), o.view(), opt, masks.masks, l.view());
          for (Eigen::Index h = 0; h < vc.H; ++h) {
            CAPTURE(h);
            const Budget bud = multihead_budget<T>(ref, s * vc.H + h);
            // separate call vs the reference, and the varlen rows vs the separate call
            EA_CHECK_NEAR(o.view().head(0, h), ref.out.rows(0, h, q0, lq), bud.attn);
            EA_CHECK_NEAR(l.view().head(0, h), ref.lse.rows(0, h, q0, lq), bud.lse);
            const MatrixLD o_sep = to_long_double(o.view().head(0, h)), l_sep = to_long_double(l.view().head(0, h));
            EA_CHECK_NEAR(out.view().head(0, h).middleRows(q0, lq), o_sep, 2 * bud.attn);
            EA_CHECK_NEAR(lse.view().head(0, h).middleRows(q0, lq), l_sep, 2 * bud.lse);
            EA_CHECK_NEAR(out_d.view().head(0, h).middleRows(q0, lq), o_sep, 2 * bud.attn);
          }
          HeadsBuffer<T> sc(mh::Layout::BHTD, 1, vc.H, lq, lk, kSentinel<T>);
          HeadsBuffer<T> o2(layout, 1, vc.H, lq, dv, kSentinel<T>);
          mh::attention_heads_decomposed(token_subview(Q.cview(), q0, lq), token_subview(K.cview(), k0, lk),
                                         token_subview(V.cview(), k0, lk), sc.view(), o2.view(), opt, masks.masks);
          for (Eigen::Index h = 0; h < vc.H; ++h) {
            CAPTURE(h);
            const Budget bud = multihead_budget<T>(ref, s * vc.H + h);
            const Eigen::Map<const ea::RowMatrix<T>> block(packed.data() + packed_offset, lq, lk);
            EA_CHECK_NEAR(block, to_long_double(sc.view().head(0, h)), 2 * bud.scores);
            packed_offset += static_cast<std::size_t>(lq * lk);
          }
        }
        CHECK(packed_offset == packed_size);
      }
    }
  }
}

TEST_CASE_TEMPLATE("multihead crosscheck: merge of a split of the keys == attention over all keys", T, float,
                   double) {
  Rng rng(16);
  Config c{"", 2, 4, 2, 6, 12, 8, 5};
  c.mask = "BxH";
  c.softcap = 5.0;
  c.bias = "Bx1";
  Problem p = make_problem<T>(c, rng);
  // Query row 1 sees only keys >= 7 (its first part is empty for splits <= 7); row 2 sees no key.
  for (Eigen::Index b = 0; b < c.B; ++b)
    for (Eigen::Index h = 0; h < c.H; ++h)
      for (Eigen::Index j = 0; j < c.Tk; ++j) {
        (*p.spec.mask)(b, h, 1, j) = j >= 7 ? 1 : 0;
        (*p.spec.mask)(b, h, 2, j) = 0;
      }
  const auto ref = reference_heads(p.Q, p.K, p.V, p.spec);
  const long double u = unit_roundoff<T>();
  long double max_v = 1, max_lse = 0;
  for (const long double x : p.V.v) max_v = std::max(max_v, std::fabs(x));
  for (const long double x : ref.lse.v)
    if (std::isfinite(x)) max_lse = std::max(max_lse, std::fabs(x));
  long double attn_tol = 0, lse_tol = 0;
  for (Eigen::Index g = 0; g < c.B * c.H; ++g) {
    attn_tol = std::max(attn_tol, multihead_budget<T>(ref, g).attn);
    lse_tol = std::max(lse_tol, multihead_budget<T>(ref, g).lse);
  }
  // Merged vs whole: the whole and each part are within one budget (a part's is no larger than
  // the whole's: fewer keys, a subset of the logits); a part's LSE error (lse_tol (1 + |LSE|),
  // absolute) becomes that relative error of its merge weight, twice (both weights), times
  // max |V| in OUT; the merge itself rounds a few times (4 u max |V|).
  const long double merged_attn_tol = 2 * attn_tol + 2 * lse_tol * (1 + max_lse) * max_v + 4 * u * max_v;
  const long double merged_lse_tol = 2 * lse_tol + 4 * u;

  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    const mh::Options opt = options_for(p.spec, kernel);
    const Run<T> whole = run_heads<T>(p, opt, mh::Layout::BHTD, false);
    for (const Eigen::Index split : {Eigen::Index(0), Eigen::Index(1), Eigen::Index(5), Eigen::Index(7),
                                     Eigen::Index(11), Eigen::Index(12)}) {
      CAPTURE(split);
      Problem a = p, b = p;
      a.K = p.K.token_range(0, split);
      a.V = p.V.token_range(0, split);
      a.spec.mask = p.spec.mask->col_range(0, split);
      a.spec.bias = p.spec.bias->col_range(0, split);
      b.K = p.K.token_range(split, c.Tk - split);
      b.V = p.V.token_range(split, c.Tk - split);
      b.spec.mask = p.spec.mask->col_range(split, c.Tk - split);
      b.spec.bias = p.spec.bias->col_range(split, c.Tk - split);
      // An empty key set (split 0 or 12) must give zeros and LSE = -inf.
      const Run<T> ra = run_heads<T>(a, opt, mh::Layout::BHTD, false);
      const Run<T> rb = run_heads<T>(b, opt, mh::Layout::BHTD, false);
      check_against(ra, reference_heads(a.Q, a.K, a.V, a.spec), 1, "part a vs reference");
      check_against(rb, reference_heads(b.Q, b.K, b.V, b.spec), 1, "part b vs reference");

      HeadsBuffer<T> out(mh::Layout::BHTD, c.B, c.H, c.Tq, c.dv, kSentinel<T>);
      HeadsBuffer<T> lse(mh::Layout::BHTD, c.B, c.H, c.Tq, 1, kSentinel<T>);
      mh::merge_attention(ra.out.cview(), ra.lse.cview(), rb.out.cview(), rb.lse.cview(), out.view(), lse.view());
      check_heads_near(out.view(), whole.out.to_array(), [&](Eigen::Index, Eigen::Index) { return merged_attn_tol; },
                       "merged OUT vs whole");
      check_heads_near(lse.view(), whole.lse.to_array(), [&](Eigen::Index, Eigen::Index) { return merged_lse_tol; },
                       "merged LSE vs whole");
      check_heads_near(out.view(), ref.out, [&](Eigen::Index, Eigen::Index) { return merged_attn_tol; },
                       "merged OUT vs reference");

      // The merge arithmetic alone, against the formula in long double on the same inputs:
      // exp(lse - m) is off by u (1 + |lse - m|) relative, the rest by a few u.
      Array4 mout, mlse;
      reference_merge(ra.out.to_array(), ra.lse.to_array(), rb.out.to_array(), rb.lse.to_array(), mout, mlse);
      long double spread = 0;
      const Array4 lse_a = ra.lse.to_array(), lse_b = rb.lse.to_array();
      for (size_t e = 0; e < lse_a.v.size(); ++e) {
        const long double la = lse_a.v[e], lb = lse_b.v[e];
        if (std::isfinite(la) && std::isfinite(lb)) spread = std::max(spread, std::fabs(la - lb));
      }
      const long double merge_tol = 8 * u * (1 + spread) * max_v;
      check_heads_near(out.view(), mout, [&](Eigen::Index, Eigen::Index) { return merge_tol; }, "merge vs formula");
      check_heads_near(lse.view(), mlse, [&](Eigen::Index, Eigen::Index) { return merge_tol; },
                       "merge LSE vs formula");
      // Rows 2 see no key on either side: zeros and -inf exactly.
      for (Eigen::Index bb = 0; bb < c.B; ++bb)
        for (Eigen::Index h = 0; h < c.H; ++h) {
          CHECK(lse.view().head(bb, h)(2, 0) == -std::numeric_limits<T>::infinity());
          CHECK((out.view().head(bb, h).row(2).array() == T(0)).all());
        }

      // In place: out/lse aliasing out_a/lse_a give the same bits.
      Run<T> inplace = ra;
      mh::merge_attention(inplace.out.cview(), inplace.lse.cview(), rb.out.cview(), rb.lse.cview(), inplace.out.view(),
                          inplace.lse.view());
      check_heads_equal(inplace.out.view(), out.view(), "in-place merged OUT");
      check_heads_equal(inplace.lse.view(), lse.view(), "in-place merged LSE");
    }
  }
}

TEST_CASE_TEMPLATE("multihead crosscheck: threads 1, 2 and 0 give bitwise the same results", T, float, double) {
  Rng rng(17);
  Config c{"", 2, 4, 2, 150, 170, 32, 16};
  c.causal = c.bottom_right = c.alibi = c.key_lengths = true;
  c.window_left = 100;
  c.softcap = 6;
  c.mask = "Bx1";
  c.bias = "1xH";
  const Problem p = make_problem<T>(c, rng);
  std::vector<std::int64_t> cu_q{0, 70, 71, 150}, cu_k{0, 90, 90, 170};
  Problem pv;
  pv.Q = random_array<T>(rng, 1, 4, 150, 32);
  pv.K = random_array<T>(rng, 1, 2, 170, 32);
  pv.V = random_array<T>(rng, 1, 2, 170, 16);
  pv.spec.causal = true;
  pv.spec.alibi = p.spec.alibi;
  pv.spec.window_left = 30;
  const MasksBuffer<T> vmasks(pv.spec);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    for (const mh::Layout layout : {mh::Layout::BHTD, mh::Layout::BTHD}) {
      const std::string lname = layout_name(layout);
      CAPTURE(lname);
      const Run<T> f1 = run_heads<T>(p, options_for(p.spec, kernel, 1), layout, false);
      const Run<T> d1 = run_heads<T>(p, options_for(p.spec, kernel, 1), layout, true);
      const HeadsBuffer<T> Q(pv.Q, layout), K(pv.K, layout), V(pv.V, layout);
      auto varlen = [&](int threads) {
        Run<T> r;
        r.out = HeadsBuffer<T>(layout, 1, 4, 150, 16, kSentinel<T>);
        r.lse = HeadsBuffer<T>(layout, 1, 4, 150, 1, kSentinel<T>);
        mh::attention_varlen(Q.cview(), K.cview(), V.cview(), r.out.view(), cu_q.data(), cu_k.data(), 3,
                             options_for(pv.spec, kernel, threads), vmasks.masks, r.lse.view());
        return r;
      };
      const Run<T> v1 = varlen(1);
      for (const int threads : {2, 0}) {
        CAPTURE(threads);
        check_runs_equal(run_heads<T>(p, options_for(p.spec, kernel, threads), layout, false), f1, "attention_heads");
        check_runs_equal(run_heads<T>(p, options_for(p.spec, kernel, threads), layout, true), d1,
                         "attention_heads_decomposed");
        check_runs_equal(varlen(threads), v1, "attention_varlen");
      }
    }
  }
}

TEST_CASE_TEMPLATE("multihead crosscheck: BHTD and BTHD buffers give bitwise the same results", T, float, double) {
  Rng rng(18);
  for (const Config& c : feature_configs()) {
    if (c.Tq > 20) continue;  // the small ones suffice here
    const std::string config = c.name;
    CAPTURE(config);
    const Problem p = make_problem<T>(c, rng);
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      for (const bool decomposed : {false, true}) {
        CAPTURE(decomposed);
        const mh::Options opt = options_for(p.spec, kernel, 2);
        const Run<T> a = run_heads<T>(p, opt, mh::Layout::BHTD, decomposed);
        const Run<T> b = run_heads<T>(p, opt, mh::Layout::BTHD, decomposed);
        check_runs_equal(b, a, "BTHD vs BHTD");
      }
    }
  }
}

TEST_CASE_TEMPLATE("multihead crosscheck: views into one fused, padded QKV buffer (general strides)", T, float,
                   double) {
  // A transformer's fused projection: per token [Q heads | K heads | V heads | 3 padding values],
  // so every view has token_stride = (H + 2 H_kv) D + 3 and a batch stride of T times that.
  Rng rng(21);
  Config c{"", 2, 6, 2, 11, 11, 8, 8};
  c.causal = c.alibi = true;
  c.window_left = 4;
  c.bias = "BxH";
  const Problem p = make_problem<T>(c, rng);
  const auto ref = reference_heads(p.Q, p.K, p.V, p.spec);
  const Eigen::Index D = c.dk, row = (c.H + 2 * c.Hkv) * D + 3, T_ = c.Tq;
  std::vector<T> fused(static_cast<size_t>(c.B * T_ * row), T(99));
  auto view_at = [&](Eigen::Index first_head, Eigen::Index heads) {
    return mh::HeadsView<T>{fused.data() + first_head * D, c.B, heads, T_, D, T_ * row, D, row, 1};
  };
  const auto Qv = view_at(0, c.H), Kv = view_at(c.H, c.Hkv), Vv = view_at(c.H + c.Hkv, c.Hkv);
  for (Eigen::Index b = 0; b < c.B; ++b)
    for (Eigen::Index t = 0; t < T_; ++t)
      for (Eigen::Index d = 0; d < D; ++d) {
        for (Eigen::Index h = 0; h < c.H; ++h) Qv.head(b, h)(t, d) = static_cast<T>(p.Q(b, h, t, d));
        for (Eigen::Index h = 0; h < c.Hkv; ++h) {
          Kv.head(b, h)(t, d) = static_cast<T>(p.K(b, h, t, d));
          Vv.head(b, h)(t, d) = static_cast<T>(p.V(b, h, t, d));
        }
      }
  const MasksBuffer<T> masks(p.spec);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    const mh::Options opt = options_for(p.spec, kernel, 2);
    // The output written into a padded buffer too: [B, T, H, D + 5].
    std::vector<T> out_buf(static_cast<size_t>(c.B * T_ * c.H * (D + 5)), kSentinel<T>);
    const mh::HeadsView<T> O{out_buf.data(), c.B, c.H, T_, D, T_ * c.H * (D + 5), D + 5, c.H * (D + 5), 1};
    HeadsBuffer<T> lse(mh::Layout::BHTD, c.B, c.H, T_, 1, kSentinel<T>);
    mh::attention_heads(Qv, Kv, Vv, O, opt, masks.masks, lse.view());
    check_heads_near(O, ref.out, budget_fn<T>(ref, 1, &Budget::attn), "strided OUT vs reference");
    check_heads_near(lse.view(), ref.lse, budget_fn<T>(ref, 1, &Budget::lse), "strided LSE vs reference");
    const Run<T> contiguous = run_heads<T>(p, opt, mh::Layout::BTHD, false);
    check_heads_near(O, contiguous.out.to_array(), budget_fn<T>(ref, 2, &Budget::attn), "strided vs contiguous");
    // the padding between the heads' rows is never written
    for (Eigen::Index e = 0; e < static_cast<Eigen::Index>(out_buf.size()); ++e)
      if (e % (D + 5) >= D) REQUIRE(out_buf[static_cast<size_t>(e)] == kSentinel<T>);
  }
}

namespace {

/// A rank-4 tensor of `Options_` storage holding `a` (BHTD order) in `layout`'s axis order.
template <class T, int Options_>
Eigen::Tensor<T, 4, Options_> to_tensor(const Array4& a, mh::Layout layout) {
  const bool bthd = layout == mh::Layout::BTHD;
  Eigen::Tensor<T, 4, Options_> t(a.n[0], bthd ? a.n[2] : a.n[1], bthd ? a.n[1] : a.n[2], a.n[3]);
  for (Eigen::Index b = 0; b < a.n[0]; ++b)
    for (Eigen::Index h = 0; h < a.n[1]; ++h)
      for (Eigen::Index i = 0; i < a.n[2]; ++i)
        for (Eigen::Index d = 0; d < a.n[3]; ++d)
          (bthd ? t(b, i, h, d) : t(b, h, i, d)) = static_cast<T>(a(b, h, i, d));
  return t;
}

template <class T, int Options_>
void tensor_roundtrip(const Problem& p, const MultiHeadReference& ref, mh::Layout layout, mh::Kernel kernel) {
  using Tensor = Eigen::Tensor<T, 4, Options_>;
  const Tensor q = to_tensor<T, Options_>(p.Q, layout), k = to_tensor<T, Options_>(p.K, layout),
               v = to_tensor<T, Options_>(p.V, layout);
  // Inputs through TensorMaps of const data, outputs into TensorMaps over plain buffers.
  Eigen::TensorMap<const Tensor> qm(q.data(), q.dimensions()), km(k.data(), k.dimensions()),
      vm(v.data(), v.dimensions());
  const Eigen::Index B = p.Q.n[0], H = p.Q.n[1], tq = p.Q.n[2], dv = p.V.n[3];
  const bool bthd = layout == mh::Layout::BTHD;
  std::vector<T> out_buf(static_cast<size_t>(B * H * tq * dv), kSentinel<T>), lse_buf(static_cast<size_t>(B * H * tq),
                                                                                       kSentinel<T>);
  Eigen::TensorMap<Tensor> om(out_buf.data(), B, bthd ? tq : H, bthd ? H : tq, dv);
  Eigen::TensorMap<Tensor> lm(lse_buf.data(), B, bthd ? tq : H, bthd ? H : tq, 1);
  const MasksBuffer<T> masks(p.spec);
  const auto Q = mh::HeadsView<const T>::from_tensor(qm, layout);
  CHECK(Q.batch == B);
  CHECK(Q.heads == H);
  CHECK(Q.tokens == tq);
  CHECK(Q.dim == p.Q.n[3]);
  mh::attention_heads(Q, mh::HeadsView<const T>::from_tensor(km, layout),
                      mh::HeadsView<const T>::from_tensor(vm, layout), mh::HeadsView<T>::from_tensor(om, layout),
                      options_for(p.spec, kernel), masks.masks, mh::HeadsView<T>::from_tensor(lm, layout));
  // Read the results back through the tensors' own indexing.
  Array4 out(B, H, tq, dv), lse(B, H, tq, 1);
  for (Eigen::Index b = 0; b < B; ++b)
    for (Eigen::Index h = 0; h < H; ++h)
      for (Eigen::Index i = 0; i < tq; ++i) {
        for (Eigen::Index d = 0; d < dv; ++d) out(b, h, i, d) = bthd ? om(b, i, h, d) : om(b, h, i, d);
        lse(b, h, i, 0) = bthd ? lm(b, i, h, 0) : lm(b, h, i, 0);
      }
  check_heads_near(array_view(out), ref.out, budget_fn<T>(ref, 1, &Budget::attn), "tensor OUT");
  check_heads_near(array_view(lse), ref.lse, budget_fn<T>(ref, 1, &Budget::lse), "tensor LSE");
}

}  // namespace

TEST_CASE_TEMPLATE("multihead crosscheck: Eigen tensors through HeadsView::from_tensor, row- and column-major", T,
                   float, double) {
  Rng rng(19);
  Config c{"", 2, 6, 2, 5, 9, 7, 3};
  c.causal = c.bottom_right = c.alibi = true;
  c.mask = "BxH";
  const Problem p = make_problem<T>(c, rng);
  const auto ref = reference_heads(p.Q, p.K, p.V, p.spec);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    for (const mh::Layout layout : {mh::Layout::BHTD, mh::Layout::BTHD}) {
      const std::string lname = layout_name(layout);
      CAPTURE(lname);
      {
        INFO("RowMajor");
        tensor_roundtrip<T, Eigen::RowMajor>(p, ref, layout, kernel);
      }
      {
        INFO("ColMajor");
        tensor_roundtrip<T, Eigen::ColMajor>(p, ref, layout, kernel);
      }
    }
  }
}

TEST_CASE_TEMPLATE("multihead crosscheck: no query, no key, all keys padded: empty/zero results, never NaN", T, float,
                   double) {
  Rng rng(20);
  const Eigen::Index B = 2, H = 4, Hkv = 2, dk = 5, dv = 3;
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    for (const auto& [tq, tk] : {std::pair<Eigen::Index, Eigen::Index>{0, 6}, {4, 0}, {0, 0}}) {
      CAPTURE(tq);
      CAPTURE(tk);
      Problem p;
      p.Q = random_array<T>(rng, B, H, tq, dk);
      p.K = random_array<T>(rng, B, Hkv, tk, dk);
      p.V = random_array<T>(rng, B, Hkv, tk, dv);
      p.spec.causal = true;
      p.spec.bottom_right = true;
      for (const bool decomposed : {false, true}) {
        CAPTURE(decomposed);
        const Run<T> r = run_heads<T>(p, options_for(p.spec, kernel), mh::Layout::BTHD, decomposed);
        CHECK(r.out.all_equal_to(T(0)));
        CHECK(r.lse.all_equal_to(-std::numeric_limits<T>::infinity()));
      }
    }
    // key_lengths all 0
    Config c{"", B, H, Hkv, 4, 6, dk, dv};
    Problem p = make_problem<T>(c, rng);
    p.spec.key_lengths = {0, 0};
    for (const bool decomposed : {false, true}) {
      CAPTURE(decomposed);
      const Run<T> r = run_heads<T>(p, options_for(p.spec, kernel), mh::Layout::BHTD, decomposed);
      CHECK(r.out.all_equal_to(T(0)));
      CHECK(r.lse.all_equal_to(-std::numeric_limits<T>::infinity()));
      if (decomposed) {
        CHECK(r.scores.all_equal_to(T(0)));
        CHECK(r.avg.all_equal_to(T(0)));
      }
    }
  }
}
