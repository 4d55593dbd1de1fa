// SPDX-License-Identifier: MIT
// Programmable attention against PyTorch float64 (test/data/programmable/, made by its
// make_programmable_golden.py with autograd): packed documents, a prefix-LM mask and a learned
// relative-position table, functors no built-in option covers. The forward within twice the
// long-double reference's budget (the reference applies the same functors: support/reference.hpp),
// the backward's dQ, dK, dV within twice its per-element bounds, and the table's gradient (the sum
// of dL/d(modified logit) along each diagonal, through a zero bias's d_bias, as
// examples/programmable.cpp trains it) within the sum of those bounds. The golden values and the
// reference agree to 1e-12 first: the reference states the same function as PyTorch.
#include <doctest/doctest.h>

#include <EigenAttention/EigenAttention.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "support/backward_crosscheck.hpp"
#include "support/golden_format.hpp"
#include "support/multihead_crosscheck.hpp"

namespace test_programmable_golden {

using namespace ea_test;
using namespace ea_test::crosscheck;
namespace bw = ea_test::backward;
namespace gf = ea_test::golden_format;

/// A case as read, and its functors in long double (the reference's) and as the library's.
struct Case {
  std::string name;
  Problem p;
  Array4 d_out, out, lse, dq, dk, dv;
  std::vector<long double> starts, prefix, table, d_table;  // by case
};

Case read_case(const std::filesystem::path& path) {
  gf::Reader r(path, "programmable golden");
  r.version("eigen_attention_programmable_golden");
  Case c;
  c.name = r.value_of("case");
  if (c.name != "documents" && c.name != "prefix_lm" && c.name != "relative_bias")
    r.fail("unknown case " + c.name);
  const gf::Arrays a = r.arrays([](const std::string&, const gf::Arrays&) {});
  c.p.Q = r.need(a, "Q"), c.p.K = r.need(a, "K"), c.p.V = r.need(a, "V");
  c.d_out = r.need(a, "D_OUT"), c.out = r.need(a, "OUT"), c.lse = r.need(a, "LSE");
  c.dq = r.need(a, "DQ"), c.dk = r.need(a, "DK"), c.dv = r.need(a, "DV");
  const auto vec = [&](const char* n) { return a.count(n) ? a.at(n).data : std::vector<long double>{}; };
  c.starts = vec("DOC_STARTS"), c.prefix = vec("PREFIX"), c.table = vec("TABLE"), c.d_table = vec("D_TABLE");
  return c;
}

/// The document of position x.
long document(const std::vector<long double>& starts, long x) {
  long d = -1;
  for (const long double s : starts) d += static_cast<long>(s) <= x;
  return d;
}

TEST_CASE_TEMPLATE("programmable golden: documents, prefix-LM and a relative-position table vs PyTorch", T,
                   float, double) {
  const std::filesystem::path dir = std::filesystem::path(EIGEN_ATTENTION_TEST_DATA_DIR) / "programmable";
  check_golden_dir(dir, {"documents", "prefix_lm", "relative_bias"}, ".txt");
  for (const auto& file : golden_txt_files(dir)) {
    Case c = read_case(file);
    CAPTURE(c.name);
    const long Tn = static_cast<long>(c.p.Q.n[2]);
    MultiHeadSpec& spec = c.p.spec;
    // The reference's functors (long double) and the library's (T), the same function.
    std::vector<T> table(c.table.begin(), c.table.end());
    if (c.name == "documents") {
      spec.keep = [&](long, long, long q, long k) {
        return document(c.starts, q) == document(c.starts, k) && k <= q;
      };
    } else if (c.name == "prefix_lm") {
      spec.keep = [&](long b, long, long q, long k) { return k < static_cast<long>(c.prefix[b]) || k <= q; };
    } else {
      spec.causal = true;
      spec.score = [&](long double s, long, long h, long q, long k) {
        return s + c.table[h * (2 * Tn - 1) + q - k + Tn - 1];
      };
      spec.score_slope = [](long double, long, long, long, long) { return 1.0L; };
      spec.bias = Array4(1, c.p.Q.n[1], Tn, Tn, 0);  // zeros: its gradient is dL/d(modified logit)
    }
    const auto mm = ea::mask_mod(
        [&](auto b, auto h, auto q, auto k) { return spec.keep ? spec.keep(b, h, q, k) : true; });
    const auto sm = ea::score_mod([&](auto s, auto, auto h, auto q, auto k) {
      return s + table[static_cast<size_t>(h * (2 * Tn - 1) + q - k + Tn - 1)];
    });
    const auto program = [&](mh::Masks<T>& m) {
      if (spec.keep) m.mask_mod = mm;
      if (spec.score) m.score_mod = sm;
    };
    // The reference states PyTorch's function.
    const MultiHeadReference ref = reference_heads(c.p.Q, c.p.K, c.p.V, spec);
    const auto bref = reference_heads_backward<T>(c.p.Q, c.p.K, c.p.V, spec, c.d_out);
    for (size_t e = 0; e < ref.out.v.size(); ++e) REQUIRE(std::fabs(ref.out.v[e] - c.out.v[e]) <= 1e-12L);
    for (size_t e = 0; e < bref.dq.v.size(); ++e) REQUIRE(std::fabs(bref.dq.v[e] - c.dq.v[e]) <= 1e-11L);
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = mh::kernel_name(kernel);
      CAPTURE(kname);
      const mh::Options opt = options_for(spec, kernel, 2);
      const Run<T> r = run_heads<T>(c.p, opt, mh::Layout::BHTD, false, program);
      check_heads_near(r.out.view(), c.out, budget_fn<T>(ref, 2, &Budget::attn), "OUT");
      check_heads_near(r.lse.view(), c.lse, budget_fn<T>(ref, 2, &Budget::lse), "LSE");
      bw::Seeds seeds;
      seeds.d_out = c.d_out;
      const bw::Gradients<T> g = bw::run_backward<T>(c.p, seeds, opt, mh::Layout::BHTD, true, program);
      BackwardReference golden = bref;  // PyTorch's gradients, with the reference's bounds doubled
      golden.dq = c.dq, golden.dk = c.dk, golden.dv = c.dv;
      for (Array4* t : {&golden.dq_tol, &golden.dk_tol, &golden.dv_tol, &golden.d_bias_tol})
        for (auto& x : t->v) x = 2 * x + 1e-12L;
      golden.d_bias = bref.d_bias;
      bw::check_against(g, golden, "backward vs PyTorch");
      if (c.d_table.empty()) continue;
      // dL/dtable[h, r] = the sum of dL/dz along the diagonal q - k = r - (T - 1) of head h.
      const Array4 dz = g.d_bias.to_array();
      const Eigen::Index H = c.p.Q.n[1];
      for (Eigen::Index h = 0; h < H; ++h) {
        for (long r = 0; r < 2 * Tn - 1; ++r) {
          long double sum = 0, tol = 0;
          for (long i = 0; i < Tn; ++i) {
            const long j = i - (r - (Tn - 1));
            if (j < 0 || j >= Tn) continue;
            sum += dz(0, h, i, j);
            tol += golden.d_bias_tol(0, h, i, j);
          }
          CAPTURE(h);
          CAPTURE(r);
          CHECK(std::fabs(sum - c.d_table[static_cast<size_t>(h * (2 * Tn - 1) + r)]) <= tol);
        }
      }
    }
  }
}

}  // namespace test_programmable_golden
