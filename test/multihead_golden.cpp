// SPDX-License-Identifier: MIT
// The multi-head golden cases of test/data/multihead/ (PyTorch, float64; see
// make_multihead_golden.py there): OUT, LSE, SCORES and the head-averaged SCORES from
// attention_heads_into, attention_heads_decomposed_into and attention_varlen_into, for every kernel, both
// buffer layouts (the files hold BHTD; the tests also lay them out as BTHD), threads 1 and 2,
// in float and double; attention sinks (the files' SINKS) go in as Masks::sinks. Tolerances: the
// error model of tolerance.hpp, extended for soft-cap, ALiBi and biases in support/reference.hpp
// (multihead_budget).
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common.hpp"
#include "multihead_golden.hpp"

namespace test_multihead_golden {

using namespace ea_test;

namespace {

template <class T>
constexpr T kSentinel = T(-777.25);

/// check_varlen_rows, after REQUIREing the shape of `actual` (B = 1).
template <class BT, class S>
void check_varlen_near(const mh::HeadsView<S>& actual, const Array4& expected,
                       const std::vector<std::int64_t>& cu, const MultiHeadReference& ref, bool is_lse,
                       const std::string& what) {
  CAPTURE(what);
  REQUIRE(actual.batch == 1);
  REQUIRE(actual.heads == expected.n[1]);
  REQUIRE(actual.tokens == expected.n[2]);
  REQUIRE(actual.dim == expected.n[3]);
  check_varlen_rows<BT>(actual, expected, cu, ref, is_lse);
}

MultiHeadReference reference_for_golden(const MultiHeadGolden& g) {
  return g.varlen ? reference_varlen(g.Q, g.K, g.V, g.cu_q, g.cu_k, g.spec)
                  : reference_heads(g.Q, g.K, g.V, g.spec);
}

/// Calls check(g, reference) on every case of one mode (varlen or heads), its file CAPTUREd,
/// and CHECKs that there were `expected` of them.
template <class F>
void for_each_case(bool varlen, int expected, F check) {
  const auto files = multihead_golden_files();
  REQUIRE(files.size() == expected_multihead_files().size());
  int cases = 0;
  for (const auto& path : files) {
    const std::string file = path.filename().string();
    CAPTURE(file);
    const MultiHeadGolden g = load_multihead_golden(path);
    if (g.varlen != varlen) continue;
    ++cases;
    check(g, reference_for_golden(g));
  }
  CHECK(cases == expected);
}

}  // namespace

TEST_CASE("multihead golden: the data directory holds all 51 expected cases") {
  check_golden_dir(multihead_data_dir(), expected_multihead_files(), ".txt");
  CHECK(expected_multihead_files().size() == 51);
  CHECK(multihead_golden_files().size() == expected_multihead_files().size());
}

TEST_CASE("multihead golden: every case parses and the long-double reference agrees with PyTorch") {
  const auto files = multihead_golden_files();
  REQUIRE(files.size() == expected_multihead_files().size());
  int varlen = 0, dead_rows = 0, chunked = 0, with_sinks = 0, sink_only_rows = 0;
  for (const auto& path : files) {
    const std::string file = path.filename().string();
    CAPTURE(file);
    MultiHeadGolden g;
    REQUIRE_NOTHROW(g = load_multihead_golden(path));
    const auto ref = reference_for_golden(g);
    // Both are exact up to float64 rounding: the double budget bounds PyTorch's error.
    check_heads_near(array_view(ref.out), g.out, attn_budget<double>(ref), "reference OUT");
    if (g.varlen) {
      ++varlen;
      check_varlen_near<double>(array_view(ref.lse), g.lse, g.cu_q, ref, true, "reference LSE");
    } else {
      check_heads_near(array_view(ref.lse), g.lse, lse_budget<double>(ref), "reference LSE");
      check_heads_near(array_view(ref.scores), g.scores, scores_budget<double>(ref), "reference SCORES");
      check_heads_near(array_view(ref.avg_scores), g.avg_scores, avg_budget<double>(ref),
                       "reference AVG_SCORES");
    }
    for (const long double x : g.lse.v) dead_rows += x == -std::numeric_limits<long double>::infinity();
    chunked += g.spec.chunk > 0;
    with_sinks += !g.spec.sinks.empty();
    if (!g.spec.sinks.empty())  // rows that see no key: OUT 0 and LSE exactly the head's sink
      for (Eigen::Index b = 0; b < g.lse.n[0]; ++b)
        for (Eigen::Index h = 0; h < g.lse.n[1]; ++h)
          for (Eigen::Index i = 0; i < g.lse.n[2]; ++i)
            sink_only_rows += g.lse(b, h, i, 0) == g.spec.sinks[static_cast<size_t>(h)] &&
                              (g.out.slice(b, h).row(i).array() == 0).all();
  }
  // The suite covers what it claims: five varlen cases, five chunked-local ones, three with
  // attention sinks, rows that see no key, and rows that see only the sink.
  CHECK(varlen == 5);
  CHECK(chunked == 5);
  CHECK(with_sinks == 3);
  CHECK(dead_rows > 0);
  CHECK(sink_only_rows > 0);
}

TEST_CASE_TEMPLATE(
    "multihead golden: attention_heads_into and _decomposed, every kernel, both layouts, threads 1 and 2", T,
    float, double) {
  for_each_case(false, 46, [](const MultiHeadGolden& g, const MultiHeadReference& ref) {
    const Eigen::Index B = g.Q.n[0], H = g.Q.n[1], tq = g.Q.n[2], tk = g.K.n[2], dv = g.V.n[3];
    const MasksBuffer<T> masks(g.spec);
    for_each_layout([&](mh::Layout layout) {
      const HeadsBuffer<T> Q(g.Q, layout), K(g.K, layout), V(g.V, layout);
      for_each_kernel_and_threads(g.spec, [&](const mh::Options& opt, int threads) {
        // attention_heads_into, with and without LSE
        HeadsBuffer<T> out(layout, B, H, tq, dv, kSentinel<T>), lse(layout, B, H, tq, 1, kSentinel<T>);
        mh::attention_heads_into(Q.cview(), K.cview(), V.cview(), out.view(), lse.view(), opt, masks.masks);
        check_heads_near(out.view(), g.out, attn_budget<T>(ref), "attention_heads_into OUT");
        check_heads_near(lse.view(), g.lse, lse_budget<T>(ref), "attention_heads_into LSE");
        HeadsBuffer<T> out_only(layout, B, H, tq, dv, kSentinel<T>);
        mh::attention_heads_into(Q.cview(), K.cview(), V.cview(), out_only.view(), opt, masks.masks);
        check_heads_near(out_only.view(), g.out, attn_budget<T>(ref), "attention_heads_into OUT (no LSE)");

        // attention_heads_decomposed_into: per-head SCORES, OUT, LSE and the head average
        HeadsBuffer<T> scores(layout, B, H, tq, tk, kSentinel<T>), avg(layout, B, 1, tq, tk, kSentinel<T>);
        HeadsBuffer<T> out2(layout, B, H, tq, dv, kSentinel<T>), lse2(layout, B, H, tq, 1, kSentinel<T>);
        mh::attention_heads_decomposed_into(Q.cview(), K.cview(), V.cview(), scores.view(), out2.view(),
                                            lse2.view(), avg.view(), opt, masks.masks);
        check_heads_near(scores.view(), g.scores, scores_budget<T>(ref), "decomposed SCORES");
        check_heads_near(out2.view(), g.out, attn_budget<T>(ref), "decomposed OUT");
        check_heads_near(lse2.view(), g.lse, lse_budget<T>(ref), "decomposed LSE");
        check_heads_near(avg.view(), g.avg_scores, avg_budget<T>(ref), "decomposed AVG_SCORES");

        if (threads == 1) {
          // SCORES alone (out, lse and the average not wanted)
          HeadsBuffer<T> scores_only(layout, B, H, tq, tk, kSentinel<T>);
          mh::attention_heads_decomposed_into(Q.cview(), K.cview(), V.cview(), scores_only.view(), {}, opt,
                                              masks.masks);
          check_heads_near(scores_only.view(), g.scores, scores_budget<T>(ref), "decomposed SCORES alone");
        }
      });
    });
  });
}

TEST_CASE_TEMPLATE("multihead golden: attention_varlen_into, every kernel, both layouts, threads 1 and 2", T,
                   float, double) {
  for_each_case(true, 5, [](const MultiHeadGolden& g, const MultiHeadReference& ref) {
    const Eigen::Index H = g.Q.n[1], tq = g.Q.n[2], dv = g.V.n[3];
    const Eigen::Index batch = static_cast<Eigen::Index>(g.cu_q.size()) - 1;
    const MasksBuffer<T> masks(g.spec);  // ALiBi and sinks only
    for_each_layout([&](mh::Layout layout) {
      const HeadsBuffer<T> Q(g.Q, layout), K(g.K, layout), V(g.V, layout);
      for_each_kernel_and_threads(g.spec, [&](const mh::Options& opt, int) {
        HeadsBuffer<T> out(layout, 1, H, tq, dv, kSentinel<T>), lse(layout, 1, H, tq, 1, kSentinel<T>);
        mh::attention_varlen_into(Q.cview(), K.cview(), V.cview(), g.cu_q.data(), g.cu_k.data(), batch,
                                  out.view(), lse.view(), opt, masks.masks);
        check_varlen_near<T>(out.view(), g.out, g.cu_q, ref, false, "attention_varlen_into OUT");
        check_varlen_near<T>(lse.view(), g.lse, g.cu_q, ref, true, "attention_varlen_into LSE");
        HeadsBuffer<T> out_only(layout, 1, H, tq, dv, kSentinel<T>);
        mh::attention_varlen_into(Q.cview(), K.cview(), V.cview(), g.cu_q.data(), g.cu_k.data(), batch,
                                  out_only.view(), opt, masks.masks);
        check_varlen_near<T>(out_only.view(), g.out, g.cu_q, ref, false,
                             "attention_varlen_into OUT (no LSE)");
      });
    });
  });
}

}  // namespace test_multihead_golden
