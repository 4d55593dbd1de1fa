// SPDX-License-Identifier: MIT
// Eigen::bfloat16 and Eigen::half: the ring and Ulysses calls, forward and backward, against the
// single-process multi-head call of the same type on the same values. Both compute in float from
// the same (exactly widened) 16-bit values and round each result once; they differ only in the
// order of the float arithmetic (blocks merged by their LSE, gradients summed block by block),
// which moves a float result by a few units of float's last place.
//
// Tolerances: a 16-bit result may then differ by one unit in its last place (ulp16: 2^-7 |y| for
// bfloat16, 2^-10 |y| for half, their precision p = 8 and 11 bits), when the two float values
// fall on either side of a rounding boundary. The float difference itself is relative to the sum
// of the magnitudes of the terms, not to the result, which may cancel, and is allowed on top:
// - ATTN, a weighted sum of at most T_k = 30 rows of V with weights summing to 1, then merged over
//   the ranks' blocks by their LSE (a few more roundings each): (30 + 2 * 4 ranks) roundings of
//   2^-24 max|V| at most, under 2^-18 max|V|. (A Zen 5 host, AVX-512 kernels, found an entry of
//   1.2e-4 off by 6 half ulps, 2^-23.5 max|V|, against a 1-ulp bound without this term.)
// - the gradients: 2^-16 of the largest entry of the array (T_k = 30 terms of float error 2^-24
//   each, with margin).
// The LSE (float) gets 1e-5 (1 + |y|): the merge's few roundings of float, as in the float tests.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "problem.hpp"

namespace ea_mpi {
namespace test_low_precision {
namespace {

template <class H>
constexpr int precision_bits() {
  return std::is_same_v<H, Eigen::bfloat16> ? 8 : 11;
}

template <class H>
Heads<H> to16(const Heads<float>& x) {
  Heads<H> y(x.B, x.H, x.T, x.D, x.layout);
  for (size_t i = 0; i < x.data.size(); ++i) y.data[i] = H(x.data[i]);
  return y;
}

/// The largest magnitude of x's entries.
template <class H>
double largest_of(const Heads<H>& x) {
  double largest = 0;
  for (const H& y : x.data) largest = std::max(largest, std::abs(static_cast<double>(static_cast<float>(y))));
  return largest;
}

/// Every entry of got within one 16-bit ulp of want, + `slack` (an absolute amount).
template <class H>
void check_near(const std::string& what, const Heads<H>& got, const Heads<H>& want, double slack) {
  long bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.data.size(); ++i) {
    const double x = static_cast<float>(got.data[i]), y = static_cast<float>(want.data[i]);
    // One ulp of the larger; half's subnormals have the fixed spacing 2^-24.
    const double ulp = std::max(std::ldexp(std::max(std::abs(x), std::abs(y)), 1 - precision_bits<H>()),
                                std::is_same_v<H, Eigen::half> ? std::ldexp(1.0, -24) : 0.0);
    const double tol = ulp + slack;
    if (!(std::abs(x - y) <= tol)) ++bad;
    worst = std::max(worst, std::abs(x - y) / (tol > 0 ? tol : 1));
  }
  EA_MPI_CHECK(got.data.size() == want.data.size() && bad == 0,
               what << ": " << bad << " entries beyond the tolerance (worst at " << worst << " of it)");
}

void check_lse(const std::string& what, const Heads<float>& got, const Heads<float>& want) {
  long bad = 0;
  for (size_t i = 0; i < got.data.size(); ++i) {
    const float x = got.data[i], y = want.data[i];
    if (std::isinf(y) ? x != y : !(std::abs(x - y) <= 1e-5 * (1 + std::abs(y)))) ++bad;
  }
  EA_MPI_CHECK(bad == 0, what << ": " << bad << " log-sum-exps beyond 1e-5 (1 + |y|)");
}

template <class H>
void compare(Method method, dist::Sharding sharding) {
  const World& w = world();
  Scope scope(std::string(std::is_same_v<H, Eigen::bfloat16> ? "bfloat16" : "half") + ", " +
              method_name(method) + (sharding == dist::Sharding::ZigZag ? ", zigzag" : ", contiguous"));
  Shape s;
  s.B = 2, s.H = 2 * w.size, s.Hkv = 1, s.Tq = 5 * w.size + 1, s.Tk = 6 * w.size + 3, s.dk = 8, s.dv = 6;
  ea::Options opt;
  opt.causal = true;
  opt.alignment = ea::CausalAlignment::BottomRight;
  // The distributed 16-bit calls widen their blocks to float (Widened, collective.cpp), so the
  // single-process call to compare with is the widening one: not the bf16 pairs of Avx512Bf16 or
  // Amx, which round P to bf16 (their own tests: test/bf16_dot_product.cpp).
  if (ea::auto_kernel() == ea::Kernel::Avx512Bf16 || ea::auto_kernel() == ea::Kernel::Amx)
    opt.kernel = ea::Kernel::Avx512;
  const Problem<float> pf = make_problem<float>(s, opt, {}, 41, 2.0);
  const Heads<H> q = to16<H>(pf.q), k = to16<H>(pf.k), v = to16<H>(pf.v), d_out = to16<H>(pf.d_out);
  std::vector<H> slopes;
  for (std::ptrdiff_t h = 0; h < s.H; ++h) slopes.push_back(H(0.25f * float(h + 1) / float(s.H)));
  const std::vector<std::int64_t> key_lengths{s.Tk, s.Tk - 4};
  ea::Masks<H> masks;
  masks.alibi_slopes = slopes.data();
  masks.key_lengths = key_lengths.data();

  // The single-process call of the same type on the whole sequence.
  Heads<H> out(s.B, s.H, s.Tq, s.dv), dq(s.B, s.H, s.Tq, s.dk), dk(s.B, s.Hkv, s.Tk, s.dk),
      dv(s.B, s.Hkv, s.Tk, s.dv);
  Heads<float> lse(s.B, s.H, s.Tq, 1);
  ea::attention_heads_into(q.cview(), k.cview(), v.cview(), out.view(), lse.view(), opt, masks);
  ea::attention_heads_backward_into(q.cview(), k.cview(), v.cview(), out.cview(), lse.cview(), d_out.cview(),
                                    dq.view(), dk.view(), dv.view(), opt, masks);

  // This rank's shards, and the distributed calls.
  const auto q_seg = segments_of(sharding, {}, s.Tq, w.size, w.rank);
  const auto k_seg = segments_of(sharding, {}, s.Tk, w.size, w.rank);
  const auto lq = take_rows(q, q_seg, ea::Layout::BHTD), lk = take_rows(k, k_seg, ea::Layout::BHTD),
             lv = take_rows(v, k_seg, ea::Layout::BHTD), ld = take_rows(d_out, q_seg, ea::Layout::BHTD);
  const auto l_out = take_rows(out, q_seg, ea::Layout::BHTD);
  const auto l_lse = take_rows(lse, q_seg, ea::Layout::BHTD);
  dist::Config config;
  config.sharding = sharding;
  Heads<H> got(s.B, s.H, lq.T, s.dv), gq(s.B, s.H, lq.T, s.dk), gk(s.B, s.Hkv, lk.T, s.dk),
      gv(s.B, s.Hkv, lk.T, s.dv);
  Heads<float> got_lse(s.B, s.H, lq.T, 1);
  const bool ok = no_throw("the distributed calls", [&] {
    if (method == Method::Ring) {
      dist::ring_attention_heads_into(w.comm, lq.cview(), lk.cview(), lv.cview(), got.view(), got_lse.view(),
                                      opt, masks, config);
      dist::ring_attention_heads_backward_into(w.comm, lq.cview(), lk.cview(), lv.cview(), l_out.cview(),
                                               l_lse.cview(), ld.cview(), gq.view(), gk.view(), gv.view(),
                                               opt, masks, config);
    } else {
      dist::ulysses_attention_heads_into(w.comm, lq.cview(), lk.cview(), lv.cview(), got.view(),
                                         got_lse.view(), opt, masks, config);
      dist::ulysses_attention_heads_backward_into(w.comm, lq.cview(), lk.cview(), lv.cview(), l_out.cview(),
                                                  l_lse.cview(), ld.cview(), gq.view(), gk.view(), gv.view(),
                                                  opt, masks, config);
    }
  });
  if (!ok) return;
  check_near("attn", got, l_out, std::ldexp(largest_of(v), -18));
  check_lse("lse", got_lse, l_lse);
  const auto gradient = [&](const char* what, const Heads<H>& g, const Heads<H>& all, const auto& seg) {
    const Heads<H> want = take_rows(all, seg, ea::Layout::BHTD);
    check_near(what, g, want, std::ldexp(largest_of(want), -16));
  };
  gradient("dq", gq, dq, q_seg);
  gradient("dk", gk, dk, k_seg);
  gradient("dv", gv, dv, k_seg);
  // The front door without the log-sum-exps gives the same bits.
  Heads<H> again(s.B, s.H, lq.T, s.dv);
  if (method == Method::Ring) {
    dist::ring_attention_heads_into(w.comm, lq.cview(), lk.cview(), lv.cview(), again.view(), opt, masks,
                                    config);
  } else {
    dist::ulysses_attention_heads_into(w.comm, lq.cview(), lk.cview(), lv.cview(), again.view(), opt, masks,
                                       config);
  }
  EA_MPI_CHECK(again.bitwise_equal(got), "attn without lse differs from attn with it");
}

template <class H>
void all_of_type() {
  for (const Method m : {Method::Ring, Method::Ulysses})
    for (const auto sharding : {dist::Sharding::Contiguous, dist::Sharding::ZigZag}) compare<H>(m, sharding);
}

}  // namespace

EA_MPI_CASE(low_precision_bfloat16, "16-bit: bfloat16 ring and Ulysses against the single-process call") {
  all_of_type<Eigen::bfloat16>();
}
EA_MPI_CASE(low_precision_half, "16-bit: half ring and Ulysses against the single-process call") {
  all_of_type<Eigen::half>();
}

}  // namespace test_low_precision
}  // namespace ea_mpi
