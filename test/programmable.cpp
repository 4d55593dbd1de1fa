// SPDX-License-Identifier: MIT
// Programmable attention (Masks::score_mod, mask_mod, block_mask): every built-in mask written as
// a mask_mod gives the built-in's results bitwise (the same -inf logits, the same sums); score
// modifications equal to the built-in soft-cap, ALiBi and bias give them within the rounding
// budget; functors that no built-in covers (document masking, prefix-LM, a relative-position
// table) match the long-double reference (support/reference.hpp, which applies them in long
// double at the same positions), forward and backward (their derivative from the Dual
// instantiation against a hand-written one); block masks skip nothing that is seen; bad block
// masks throw.
#include <doctest/doctest.h>

#include <EigenAttention/EigenAttention.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/backward_crosscheck.hpp"
#include "support/multihead_crosscheck.hpp"

namespace test_programmable {

using namespace ea_test;
using namespace ea_test::crosscheck;
namespace bw = ea_test::backward;

/// Runs the built-in problem `builtin` and the same tensors with `programmed`'s spec plus the masks
/// `program` adds, on every kernel, fused and decomposed, 1 and 2 threads: bitwise equal, and both
/// within the reference's budget; then the backward (with dL/dSCORES and dL/dLSE), the same way.
template <class T>
void check_same_as_builtin(const Problem& builtin, const Problem& programmed,
                           const std::function<void(mh::Masks<T>&)>& program, bool bitwise) {
  Rng rng(2890);
  const bw::Seeds seeds = bw::make_seeds<T>(builtin, rng, true);
  const auto bref = reference_heads_backward<T>(builtin.Q, builtin.K, builtin.V, builtin.spec, seeds.d_out,
                                                seeds.d_scores, seeds.d_lse);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = mh::kernel_name(kernel);
    CAPTURE(kname);
    for (const int threads : {1, 2}) {
      CAPTURE(threads);
      const bw::Gradients<T> a = bw::run_backward<T>(
          builtin, seeds, options_for(builtin.spec, kernel, threads), mh::Layout::BHTD, false);
      const bw::Gradients<T> b = bw::run_backward<T>(
          programmed, seeds, options_for(programmed.spec, kernel, threads), mh::Layout::BHTD, false, program);
      if (bitwise) bw::check_equal(b, a, "programmed backward vs built-in");
      bw::check_against(a, bref, "built-in backward vs reference");
      bw::check_against(b, bref, "programmed backward vs reference");
    }
  }
  const auto ref = reference_heads(builtin.Q, builtin.K, builtin.V, builtin.spec);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = mh::kernel_name(kernel);
    CAPTURE(kname);
    for (const int threads : {1, 2}) {
      CAPTURE(threads);
      for (const bool decomposed : {false, true}) {
        CAPTURE(decomposed);
        const Run<T> a =
            run_heads<T>(builtin, options_for(builtin.spec, kernel, threads), mh::Layout::BHTD, decomposed);
        const Run<T> b = run_heads<T>(programmed, options_for(programmed.spec, kernel, threads),
                                      mh::Layout::BHTD, decomposed, program);
        if (bitwise) {
          check_runs_equal(b, a, "programmed vs built-in");
        } else {
          check_runs_near(b, a, ref, "programmed vs built-in");
        }
        check_against(b, ref, 1, "programmed vs reference");
      }
    }
  }
}

// The masks as functors, at the positions the library gives them (q: the query's diagonal key).
const auto causal_g = [](auto, auto, auto q, auto k) { return k <= q; };

TEST_CASE_TEMPLATE("programmable: built-in masks as a mask_mod give the built-in's results bitwise", T, float,
                   double) {
  Rng rng(2801);
  struct Case {
    std::string name;
    Config config;
  };
  std::vector<Case> cases;
  {
    Config c{"", 2, 4, 2, 37, 37, 16, 8};
    c.causal = true;
    cases.push_back({"causal", c});
  }
  {
    Config c{"", 2, 2, 1, 23, 61, 8, 5};
    c.causal = true;
    c.bottom_right = true;
    cases.push_back({"causal bottom-right", c});
  }
  {
    Config c{"", 1, 2, 2, 40, 150, 12, 7};
    c.causal = true;
    c.bottom_right = true;
    cases.push_back({"causal bottom-right, T_k > T_q, several key tiles", c});
  }
  {
    Config c{"", 2, 2, 2, 45, 45, 8, 8};
    c.window_left = 6;
    c.window_right = 3;
    cases.push_back({"window", c});
  }
  {
    Config c{"", 1, 2, 1, 33, 33, 8, 4};
    c.chunk = 7;
    c.causal = true;
    cases.push_back({"chunked causal", c});
  }
  for (const Case& cs : cases) {
    CAPTURE(cs.name);
    const Problem builtin = make_problem<T>(cs.config, rng);
    Problem programmed = builtin;
    const MultiHeadSpec& s = builtin.spec;
    programmed.spec.causal = false, programmed.spec.window_left = programmed.spec.window_right = -1;
    programmed.spec.chunk = 0;
    // (The alignment stays: it sets the positions the functor sees.)
    const long wl = s.window_left, wr = s.window_right, chunk = s.chunk;
    const bool causal = s.causal;
    auto g = [=](auto, auto, auto q, auto k) {
      bool seen = !causal || k <= q;
      if (wl >= 0) seen = seen && q - k <= wl;
      if (wr >= 0) seen = seen && k - q <= wr;
      if (chunk > 0) seen = seen && floor_div(q, chunk) == floor_div(k, chunk);
      return seen;
    };
    const auto mm = ea::mask_mod(g);
    check_same_as_builtin<T>(
        builtin, programmed, [&](mh::Masks<T>& m) { m.mask_mod = mm; }, true);
    // With a block mask of small tiles (Empty, Partial and Full ones), the same bits.
    const mh::Options opt = options_for(programmed.spec);
    // These masks are one range per row: block_mask() records the ranges (exact_line) and the
    // calls compute them as the built-in's; a block mask without them (set() forgets them) has
    // its Partial tiles asked.
    for (const Eigen::Index tile : {4, 16}) {
      CAPTURE(tile);
      const ea::BlockMask bm = ea::block_mask(mm, 1, 1, builtin.Q.n[2], builtin.K.n[2], tile, tile + 1, opt);
      CHECK(bm.exact_line(0, 0));
      ea::BlockMask asked = bm;
      asked.set(0, 0, 0, 0, bm.block(0, 0, 0, 0));
      CHECK_FALSE(asked.exact_line(0, 0));
      for (const ea::BlockMask* blocks : {&bm, static_cast<const ea::BlockMask*>(&asked)}) {
        CAPTURE(blocks == &bm);
        check_same_as_builtin<T>(
            builtin, programmed,
            [&](mh::Masks<T>& m) {
              m.mask_mod = mm;
              m.block_mask = *blocks;
            },
            true);
      }
    }
  }
}

TEST_CASE_TEMPLATE("programmable: a boolean mask as a mask_mod (bitwise) and key lengths (within the budget)",
                   T, float, double) {
  Rng rng(2802);
  for (const bool lengths : {false, true}) {
    CAPTURE(lengths);
    Config c{"", 3, 2, 1, 19, 29, 8, 6};
    c.key_lengths = lengths;
    c.mask = "BxH";
    const Problem builtin = make_problem<T>(c, rng);
    Problem programmed = builtin;
    programmed.spec.key_lengths.clear();
    programmed.spec.mask.reset();
    const MultiHeadSpec& s = builtin.spec;
    auto g = [&](auto b, auto h, auto q, auto k) {  // top-left: the query's row is q
      return (!lengths || k < s.key_lengths[static_cast<size_t>(b)]) && (*s.mask)(b, h, q, k) != 0;
    };
    const auto mm = ea::mask_mod(g);
    // Key lengths drop the padded keys from the built-in's problem: its row sums have fewer terms,
    // which Eigen's reductions may add in another order.
    check_same_as_builtin<T>(
        builtin, programmed, [&](mh::Masks<T>& m) { m.mask_mod = mm; }, !lengths);
  }
}

TEST_CASE_TEMPLATE("programmable: soft-cap, ALiBi and a bias as a score_mod, within the budget", T, float,
                   double) {
  Rng rng(2803);
  Config c{"", 2, 4, 2, 21, 34, 16, 8};
  c.causal = true;
  c.bottom_right = true;
  c.softcap = 2.5;
  c.alibi = true;
  c.bias = "1xH";
  c.magnitude = 2.0;
  const Problem builtin = make_problem<T>(c, rng);
  Problem programmed = builtin;
  programmed.spec.softcap = 0;
  programmed.spec.alibi.clear();
  programmed.spec.bias.reset();
  const MultiHeadSpec& s = builtin.spec;
  const T cap = static_cast<T>(s.softcap);
  std::vector<T> slopes;
  for (const long double x : s.alibi) slopes.push_back(static_cast<T>(x));
  const Eigen::Index offset = s.bottom_right ? c.Tk - c.Tq : 0;
  auto f = [&](auto x, auto, auto h, auto q, auto k) {
    using std::abs;
    using std::tanh;
    auto y = cap * tanh(x / cap);
    y = y - slopes[static_cast<size_t>(h)] * abs(static_cast<T>(q - k));
    return y + static_cast<T>((*s.bias)(0, h, q - offset, k));
  };
  const auto sm = ea::score_mod(f);
  check_same_as_builtin<T>(
      builtin, programmed, [&](mh::Masks<T>& m) { m.score_mod = sm; }, false);
}

// Functors no built-in covers: packed documents, a prefix seen by all, a relative-position table.
struct Documents {
  std::vector<long> starts;  // document d holds positions [starts[d], starts[d + 1])
  long document(long x) const {
    long d = 0;
    while (d + 1 < static_cast<long>(starts.size()) && starts[static_cast<size_t>(d + 1)] <= x) ++d;
    return d;
  }
};

TEST_CASE_TEMPLATE("programmable: document + prefix-LM mask and a relative-position table vs the reference",
                   T, float, double) {
  Rng rng(2804);
  Config c{"", 2, 4, 2, 70, 70, 16, 8};
  c.magnitude = 1.5;
  Problem p = make_problem<T>(c, rng);
  const Documents docs{{0, 9, 30, 31, 55}};
  const long prefix = 5, T_ = 70;
  std::vector<T> table(2 * T_ - 1);
  for (auto& x : table) x = static_cast<T>(0.5 * rng.normal());
  auto f = [&](auto s, auto, auto h, auto q, auto k) {
    return s + table[static_cast<size_t>(q - k + T_ - 1)] * static_cast<T>(h % 2 == 0 ? 1 : -1);
  };
  auto g = [&](auto, auto, auto q, auto k) {
    return (k < prefix || k <= q) &&
           docs.document(static_cast<long>(q)) == docs.document(static_cast<long>(k));
  };
  p.spec.score = [&](long double s, long, long h, long q, long k) {
    return s + static_cast<long double>(table[static_cast<size_t>(q - k + T_ - 1)]) * (h % 2 == 0 ? 1 : -1);
  };
  p.spec.score_slope = [](long double, long, long, long, long) { return 1.0L; };
  p.spec.keep = [&](long, long, long q, long k) {
    return (k < prefix || k <= q) && docs.document(q) == docs.document(k);
  };
  const auto sm = ea::score_mod(f);
  const auto mm = ea::mask_mod(g);
  const auto ref = reference_heads(p.Q, p.K, p.V, p.spec);
  const ea::BlockMask bm = ea::block_mask(mm, 1, 1, c.Tq, c.Tk, 16, 16);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = mh::kernel_name(kernel);
    CAPTURE(kname);
    for (const bool with_blocks : {false, true}) {
      CAPTURE(with_blocks);
      for (const bool decomposed : {false, true}) {
        CAPTURE(decomposed);
        const Run<T> r = run_heads<T>(p, options_for(p.spec, kernel, 2), mh::Layout::BTHD, decomposed,
                                      [&](mh::Masks<T>& m) {
                                        m.score_mod = sm;
                                        m.mask_mod = mm;
                                        if (with_blocks) m.block_mask = bm;
                                      });
        check_against(r, ref, 1, "programmed vs reference");
      }
    }
  }
  // Backward: the table's gradient flows through f (df/ds = 1 from the Dual instantiation).
  const bw::Seeds seeds = bw::make_seeds<T>(p, rng, false);
  const auto bref = reference_heads_backward<T>(p.Q, p.K, p.V, p.spec, seeds.d_out);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = mh::kernel_name(kernel);
    CAPTURE(kname);
    for (const bool with_blocks : {false, true}) {
      CAPTURE(with_blocks);
      const bw::Gradients<T> grads = bw::run_backward<T>(p, seeds, options_for(p.spec, kernel, 2),
                                                         mh::Layout::BHTD, true, [&](mh::Masks<T>& m) {
                                                           m.score_mod = sm;
                                                           m.mask_mod = mm;
                                                           if (with_blocks) m.block_mask = bm;
                                                         });
      bw::check_against(grads, bref, "programmed backward vs reference");
    }
  }
}

TEST_CASE_TEMPLATE("programmable: the backward differentiates f through its Dual instantiation", T, float,
                   double) {
  Rng rng(2805);
  Config c{"", 1, 2, 1, 41, 53, 8, 6};
  c.causal = true;
  c.magnitude = 2.0;
  Problem p = make_problem<T>(c, rng);
  // A smooth f whose derivative varies: c tanh(s / c) + 0.1 s^2 / (1 + |q - k|).
  const T cap = T(3);
  auto f = [=](auto s, auto, auto, auto q, auto k) {
    using std::tanh;
    using std::abs;
    return cap * tanh(s / cap) + T(0.1) * s * s / T(1 + abs(static_cast<T>(q - k)));
  };
  p.spec.score = [=](long double s, long, long, long q, long k) {
    return 3.0L * std::tanh(s / 3.0L) + 0.1L * s * s / (1.0L + std::fabs(static_cast<long double>(q - k)));
  };
  p.spec.score_slope = [=](long double s, long, long, long q, long k) {
    const long double t = std::tanh(s / 3.0L);
    return (1 - t * t) + 0.2L * s / (1.0L + std::fabs(static_cast<long double>(q - k)));
  };
  p.spec.score_curvature = 1;  // |f''| <= 2 / (3 sqrt(27)) + 0.2
  const auto sm = ea::score_mod(f);
  const bw::Seeds seeds = bw::make_seeds<T>(p, rng, true);
  const auto bref =
      reference_heads_backward<T>(p.Q, p.K, p.V, p.spec, seeds.d_out, seeds.d_scores, seeds.d_lse);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = mh::kernel_name(kernel);
    CAPTURE(kname);
    const bw::Gradients<T> grads =
        bw::run_backward<T>(p, seeds, options_for(p.spec, kernel, 1), mh::Layout::BHTD, true,
                            [&](mh::Masks<T>& m) { m.score_mod = sm; });
    bw::check_against(grads, bref, "score_mod backward vs reference");
  }
}

TEST_CASE("programmable: block_mask records the rows' key ranges exactly where each row sees one range") {
  const long T = 37;
  const Documents docs{{0, 9, 30, 31}};
  struct Case {
    std::string name;
    std::function<bool(long, long, long, long)> g;
    long rows, cols;
    bool exact;
  };
  const std::vector<Case> cases{
      {"causal", [](long, long, long q, long k) { return k <= q; }, T, T, true},
      {"causal, T_k > T_q", [](long, long, long q, long k) { return k <= q + 20; }, T, T + 20, true},
      {"window", [](long, long, long q, long k) { return k <= q + 2 && q - k <= 5; }, T, T, true},
      {"chunks", [](long, long, long q, long k) { return k <= q && q / 8 == k / 8; }, T, T, true},
      {"documents + prefix-LM",
       [&](long, long, long q, long k) { return (k < 3 || k <= q) && docs.document(q) == docs.document(k); },
       T, T, true},
      {"leading rows see nothing", [](long, long, long q, long k) { return q >= 5 && k <= q - 5; }, T, T,
       true},
      {"strided keys", [](long, long, long q, long k) { return k <= q && k % 2 == 0; }, T, T, false},
      {"ends that decrease", [](long, long, long q, long k) { return k <= T - 1 - q; }, T, T, false},
      {"a row that sees nothing between rows that overlap",
       [](long, long, long q, long k) { return q != 10 && k <= q; }, T, T, false},
      {"a gap in one row", [](long, long, long q, long k) { return k <= q && !(q == 30 && k == 12); }, T, T,
       false},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const auto mm =
        ea::mask_mod([&](auto b, auto h, auto q, auto k) { return c.g(long(b), long(h), long(q), long(k)); });
    for (const std::ptrdiff_t tile : {4, 16, 128}) {
      CAPTURE(tile);
      const ea::BlockMask bm = ea::block_mask(mm, 1, 1, c.rows, c.cols, tile, tile);
      CHECK(bm.exact_line(0, 0) == c.exact);
      // A block mask changed by hand (set, data) or made from lists holds no ranges.
      ea::BlockMask changed = bm;
      changed.data();
      CHECK_FALSE(changed.exact_line(0, 0));
    }
  }
  // Per line: a mask that depends on the head is one range per row for head 0 only.
  const auto by_head =
      ea::mask_mod([](auto, auto h, auto q, auto k) { return k <= q && (h == 0 || k % 3 != 1); });
  const ea::BlockMask bm = ea::block_mask(by_head, 1, 2, T, T, 8, 8);
  CHECK(bm.exact_line(0, 0));
  CHECK_FALSE(bm.exact_line(0, 1));
  CHECK_THROWS_AS((void)bm.exact_line(0, 2), std::out_of_range);
}

TEST_CASE("programmable: block_mask classifies causal tiles, and from_blocks lists tiles") {
  const auto mm = ea::mask_mod(causal_g);
  const ea::BlockMask bm = ea::block_mask(mm, 1, 1, 64, 64, 16, 16);
  CHECK(bm.row_blocks() == 4);
  CHECK(bm.col_blocks() == 4);
  for (Eigen::Index r = 0; r < 4; ++r)
    for (Eigen::Index c = 0; c < 4; ++c) {
      CAPTURE(r);
      CAPTURE(c);
      const ea::BlockKind want = c < r    ? ea::BlockKind::Full
                                 : c == r ? ea::BlockKind::Partial
                                          : ea::BlockKind::Empty;
      CHECK(bm.block(0, 0, r, c) == want);
    }
  CHECK(bm.density() == doctest::Approx(10.0 / 16.0));
  // Bottom-right over T_k = 80: every tile of the last 16 keys' diagonal shifts by 16.
  ea::Options br;
  br.alignment = ea::CausalAlignment::BottomRight;
  const ea::BlockMask shifted = ea::block_mask(mm, 1, 1, 64, 80, 16, 16, br);
  CHECK(shifted.offset() == 16);
  CHECK(shifted.block(0, 0, 0, 1) == ea::BlockKind::Partial);
  CHECK(shifted.block(0, 0, 0, 0) == ea::BlockKind::Full);
  CHECK(shifted.block(0, 0, 0, 2) == ea::BlockKind::Empty);

  const ea::BlockMask listed =
      ea::BlockMask::from_blocks(1, 2, 32, 48, 16, 16, {0, 1, 3, 3, 4}, {2, 0, 1, 2});
  CHECK(listed.block(0, 0, 0, 2) == ea::BlockKind::Full);
  CHECK(listed.block(0, 0, 0, 0) == ea::BlockKind::Empty);
  CHECK(listed.block(0, 0, 1, 0) == ea::BlockKind::Full);
  CHECK(listed.block(0, 0, 1, 1) == ea::BlockKind::Full);
  CHECK(listed.block(0, 1, 0, 0) == ea::BlockKind::Empty);
  CHECK(listed.block(0, 1, 1, 2) == ea::BlockKind::Full);
  CHECK_THROWS_AS(ea::BlockMask::from_blocks(1, 1, 32, 32, 16, 16, {0, 1, 2}, {0, 2}), std::invalid_argument);
  CHECK_THROWS_AS(ea::BlockMask::from_blocks(1, 1, 32, 32, 16, 16, {0, 2, 2}, {0, 0}), std::invalid_argument);
  CHECK_THROWS_AS(ea::BlockMask::from_blocks(1, 1, 32, 32, 16, 16, {0, 1}, {0}), std::invalid_argument);
  CHECK_THROWS_AS(ea::BlockMask(1, 1, 8, 8, 0, 4), std::invalid_argument);
}

TEST_CASE("programmable: block-sparse from_blocks == the equivalent boolean mask") {
  Rng rng(2806);
  Config c{"", 1, 2, 2, 96, 96, 16, 8};
  const Problem p = make_problem<float>(c, rng);
  // Per head, a random set of 16 x 32 tiles (about a third), listed; the same as a boolean mask.
  const Eigen::Index R = 16, C = 32, nq = 6, nk = 3;
  std::vector<std::int64_t> offsets{0}, columns;
  Array4 mask(1, 2, 96, 96, 0);
  for (Eigen::Index h = 0; h < 2; ++h)
    for (Eigen::Index rb = 0; rb < nq; ++rb) {
      for (Eigen::Index cb = 0; cb < nk; ++cb) {
        if (rng.uniform() > 0.0) continue;  // uniform() is in [-1, 1): about half
        columns.push_back(cb);
        for (Eigen::Index i = rb * R; i < (rb + 1) * R; ++i)
          for (Eigen::Index j = cb * C; j < (cb + 1) * C; ++j) mask(0, h, i, j) = 1;
      }
      offsets.push_back(static_cast<std::int64_t>(columns.size()));
    }
  const ea::BlockMask bm = ea::BlockMask::from_blocks(1, 2, 96, 96, R, C, offsets, columns);
  Problem with_mask = p;
  with_mask.spec.mask = mask;
  const auto ref = reference_heads(with_mask.Q, with_mask.K, with_mask.V, with_mask.spec);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = mh::kernel_name(kernel);
    CAPTURE(kname);
    for (const bool decomposed : {false, true}) {
      CAPTURE(decomposed);
      const Run<float> a =
          run_heads<float>(with_mask, options_for(p.spec, kernel, 2), mh::Layout::BHTD, decomposed);
      const Run<float> b = run_heads<float>(p, options_for(p.spec, kernel, 2), mh::Layout::BHTD, decomposed,
                                            [&](mh::Masks<float>& m) { m.block_mask = bm; });
      // The tiled kernels take a row's runs of shown tiles in passes of their own (the Empty ones
      // between them never computed), so the online softmax adds the same terms in other groups:
      // within the budget of each, and bitwise on the reference kernel, which adds them as one.
      if (kernel == mh::Kernel::Reference) {
        check_runs_equal(b, a, "block-sparse vs boolean mask");
      } else {
        check_runs_near(b, a, ref, "block-sparse vs boolean mask");
      }
      check_against(b, ref, 1, "block-sparse vs reference");
    }
  }
}

TEST_CASE("programmable: a block mask that does not fit the call throws, naming it") {
  Rng rng(2807);
  Config c{"", 1, 2, 1, 20, 30, 8, 4};
  const Problem p = make_problem<float>(c, rng);
  const auto mm = ea::mask_mod(causal_g);
  const auto run = [&](const ea::BlockMask& bm, bool with_mod, const mh::Options& opt) {
    run_heads<float>(p, opt, mh::Layout::BHTD, false, [&](mh::Masks<float>& m) {
      if (with_mod) m.mask_mod = mm;
      m.block_mask = bm;
    });
  };
  const mh::Options opt = options_for(p.spec);
  CHECK_NOTHROW(run(ea::block_mask(mm, 1, 1, 20, 30, 8, 8, opt), true, opt));
  // Another T_k; another batch; partial tiles and no mask_mod; positions of another alignment.
  CHECK_THROWS_WITH_AS(run(ea::block_mask(mm, 1, 1, 20, 31, 8, 8, opt), true, opt),
                       doctest::Contains("does not fit T_q x T_k = 20x30"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(run(ea::block_mask(mm, 2, 1, 20, 30, 8, 8, opt), true, opt),
                       doctest::Contains("batch must be 1"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(run(ea::block_mask(mm, 1, 1, 20, 30, 8, 8, opt), false, opt),
                       doctest::Contains("Partial tiles"), std::invalid_argument);
  mh::Options br = opt;
  br.alignment = ea::CausalAlignment::BottomRight;
  CHECK_THROWS_WITH_AS(run(ea::block_mask(mm, 1, 1, 20, 30, 8, 8, opt), true, br),
                       doctest::Contains("query positions i + 0"), std::invalid_argument);
  CHECK_NOTHROW(run(ea::block_mask(mm, 1, 1, 20, 30, 8, 8, br), true, br));
}

TEST_CASE_TEMPLATE("programmable: varlen sequences see their own index as b", T, float, double) {
  Rng rng(2808);
  const std::vector<std::int64_t> cu{0, 13, 13, 40, 47};
  const Eigen::Index total = 47, H = 2, dk = 8, dv = 5;
  const Array4 Q = random_array<T>(rng, 1, H, total, dk), K = random_array<T>(rng, 1, H, total, dk),
               V = random_array<T>(rng, 1, H, total, dv);
  MultiHeadSpec spec;
  spec.causal = true;
  // Per sequence and head, a different bias; sequence 2 sees only even keys.
  spec.score = [](long double s, long b, long h, long q, long k) {
    return s + 0.25L * (b + 1) * (h - 0.5L) * (q - k);
  };
  spec.score_slope = [](long double, long, long, long, long) { return 1.0L; };
  spec.keep = [](long b, long, long, long k) { return b != 2 || k % 2 == 0; };
  auto f = [](auto s, auto b, auto h, auto q, auto k) {
    return s + T(0.25) * T(b + 1) * (T(h) - T(0.5)) * T(q - k);
  };
  auto g = [](auto b, auto, auto, auto k) { return b != 2 || k % 2 == 0; };
  const auto sm = ea::score_mod(f);
  const auto mm = ea::mask_mod(g);
  const auto ref = reference_varlen(Q, K, V, cu, cu, spec);
  const HeadsBuffer<T> q(Q, mh::Layout::BHTD), k(K, mh::Layout::BHTD), v(V, mh::Layout::BHTD);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = mh::kernel_name(kernel);
    CAPTURE(kname);
    HeadsBuffer<T> out(mh::Layout::BHTD, 1, H, total, dv, kSentinel<T>),
        lse(mh::Layout::BHTD, 1, H, total, 1, kSentinel<T>);
    mh::Masks<T> masks;
    masks.score_mod = sm;
    masks.mask_mod = mm;
    mh::Options opt = options_for(spec, kernel, 2);
    mh::attention_varlen_into(q.cview(), k.cview(), v.cview(), cu.data(), cu.data(), 4, out.view(),
                              lse.view(), opt, masks);
    check_heads_near(out.view(), ref.out, budget_fn<T>(ref, 1, &Budget::attn), "OUT");
    check_heads_near(lse.view(), ref.lse, budget_fn<T>(ref, 1, &Budget::lse), "LSE");
  }
}

}  // namespace test_programmable

namespace test_programmable_families {

using namespace ea_test;

TEST_CASE_TEMPLATE("programmable: the single-head calls, float, double and the 16-bit types", T, float,
                   double, Eigen::bfloat16, Eigen::half) {
  // A mask_mod stating causal gives the built-in's bits; a score_mod adding a bias gives the
  // call with that bias, within the rounding of one addition per logit.
  using M = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  const Eigen::Index tq = 37, tk = 45, d = 16;
  const M Q = M::Random(tq, d), K = M::Random(tk, d), V = M::Random(tk, 8);
  const auto mm = ea::mask_mod([](auto, auto, auto q, auto k) { return k <= q; });
  ea::Options br;
  br.alignment = ea::CausalAlignment::BottomRight;
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt = br, causal = br;
    opt.kernel = causal.kernel = kernel;
    causal.causal = true;
    ea::Masks<T> masks;
    masks.mask_mod = mm;
    const M a = ea::attention(Q, K, V, causal), b = ea::attention(Q, K, V, opt, masks);
    CHECK(std::memcmp(a.data(), b.data(), sizeof(T) * static_cast<std::size_t>(a.size())) == 0);
    // The same through the decomposed call: its SCORES too, zero where the mask hides a key.
    const auto da = ea::attention_decomposed(Q, K, V, causal),
               db = ea::attention_decomposed(Q, K, V, opt, masks);
    CHECK(std::memcmp(da.scores.data(), db.scores.data(),
                      sizeof(T) * static_cast<std::size_t>(da.scores.size())) == 0);
    CHECK(std::memcmp(da.attn.data(), db.attn.data(), sizeof(T) * static_cast<std::size_t>(da.attn.size())) ==
          0);
  }
}

TEST_CASE("programmable: decode takes score_mod, mask_mod and a block mask at the cache's positions") {
  const Eigen::Index Hkv = 2, H = 4, dk = 8, dv = 6, tk = 70, tq = 3;
  ea::PagedKVCache<float> cache(Hkv, dk, dv, 16, 128);
  const ea::SequenceId id = cache.create();
  const RowMatrix<float> K = RowMatrix<float>::Random(tk, Hkv * dk),
                         V = RowMatrix<float>::Random(tk, Hkv * dv);
  cache.append(id, K, V);
  const RowMatrix<float> Q = RowMatrix<float>::Random(tq, H * dk);
  std::vector<float> slopes{0.5f, 0.25f, 0.125f, 0.0625f};
  // Built-in: causal, a window of 20, ALiBi. Programmed: the same as functors (a query's position
  // is its token's position in the cache, the diagonal of bottom-right).
  const auto mm = ea::mask_mod([](auto, auto, auto q, auto k) { return (q - k <= 20) & (k <= q); });
  const auto sm = ea::score_mod([&](auto s, auto, auto h, auto q, auto k) {
    return s - slopes[static_cast<size_t>(h)] * float(q - k);
  });
  ea::Options opt;
  opt.alignment = ea::CausalAlignment::BottomRight;
  const ea::BlockMask bm = ea::block_mask(mm, 1, 1, tq, tk, 16, 16, opt);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    for (const bool blocks : {false, true}) {
      CAPTURE(blocks);
      ea::Options builtin = opt, programmed = opt;
      builtin.kernel = programmed.kernel = kernel;
      builtin.causal = true;
      builtin.window_left = 20;
      ea::Masks<float> a, b;
      a.alibi_slopes = slopes.data();
      b.score_mod = sm;
      b.mask_mod = mm;
      if (blocks) b.block_mask = bm;
      const RowMatrix<float> ra = ea::attention_decode(cache, id, Q, builtin, a);
      const RowMatrix<float> rb = ea::attention_decode(cache, id, Q, programmed, b);
      // The programmed decode goes key by key (it may hide any): the same terms in another order.
      CHECK((ra - rb).cwiseAbs().maxCoeff() <= 1e-5f);
    }
  }
}

}  // namespace test_programmable_families

namespace test_programmable_nan {

using namespace ea_test;

TEST_CASE_TEMPLATE(
    "programmable: NaN from score_mod follows the NaN rules; a hidden key weighs 0 whatever f returns", T,
    float, double) {
  using M = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  const Eigen::Index t = 20, d = 8;
  const M Q = M::Random(t, d), K = M::Random(t, d), V = M::Random(t, 5);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  // NaN for the keys causal hides (k > q), and for key 3, which rows 3, 4, ... see.
  const auto sm = ea::score_mod(
      [=](auto s, auto, auto, auto q, auto k) { return k > q || k == 3 ? decltype(s)(nan) : s; });
  // The same, with key 3 hidden by a mask_mod too: then no row sees a NaN.
  const auto hide_3 = ea::mask_mod([](auto, auto, auto, auto k) { return k != 3; });
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    ea::Options opt;
    opt.kernel = kernel;
    opt.causal = true;
    ea::Masks<T> masks;
    masks.score_mod = sm;
    const auto plain = ea::attention_decomposed(Q, K, V, opt);
    const auto r = ea::attention_decomposed(Q, K, V, opt, masks);
    for (Eigen::Index i = 0; i < t; ++i) {
      CAPTURE(i);
      if (i < 3) {  // key 3 is hidden from these rows: f's NaN there (and beyond) has no effect
        CHECK(r.attn.row(i).allFinite());
        CHECK((r.attn.row(i) - plain.attn.row(i)).cwiseAbs().maxCoeff() <= T(1e-5));
      } else {  // the row sees key 3: NaN, in ATTN and in the weights of the keys it sees
        CHECK(r.attn.row(i).array().isNaN().all());
        CHECK(r.scores.row(i).head(i + 1).array().isNaN().all());
      }
      // Keys causal hides weigh exactly 0, whatever f returned for them (NaN).
      for (Eigen::Index j = i + 1; j < t; ++j) CHECK(r.scores(i, j) == T(0));
    }
    masks.mask_mod = hide_3;
    const auto hidden = ea::attention_decomposed(Q, K, V, opt, masks);
    CHECK(hidden.attn.allFinite());
    CHECK(hidden.scores.col(3).isZero(0));
    CHECK(hidden.scores.allFinite());
    // The rows of the fused call are those of the decomposed one.
    const M fused = ea::attention(Q, K, V, opt, masks);
    CHECK((fused - hidden.attn).cwiseAbs().maxCoeff() <= T(1e-5));
  }
}

}  // namespace test_programmable_nan
