// SPDX-License-Identifier: MIT
// Programmable attention in ring and Ulysses attention (Masks::score_mod, mask_mod, block_mask,
// BackwardTerms::logit_grad): the user's callables see the whole call's sequence b, query head h
// and positions, whatever block of rows, keys or heads a rank computes; a block mask of the whole
// sequence applies to every block. Forward and backward against the single-process call with
// the same callables and the long-double reference, on every split; the gradient of what f
// captures (a slope per sequence and head), accumulated by each rank's callback and summed over
// the ranks, against the single-process call's and the reference's.
#include "problem.hpp"

namespace ea_mpi {
namespace test_programmable {

/// f adds slope(b, h) (q - k) to the logit; g keeps a query and a key of the same document (the
/// first 7 + 3 b positions, then the rest) and, for odd heads, hides keys at positions 2 mod 3.
template <class T>
T slope(long b, long h) {
  return static_cast<T>(0.03 * double(b + 1) * (double(h) - 1.5));
}
inline bool keep(long b, long h, long q, long k) {
  const long split = 7 + 3 * b;
  return ((q < split) == (k < split)) && (h % 2 == 0 || k % 3 != 2);
}

/// The slopes' gradient, [B * H]: sum of g (q - k) over the pairs a callback was handed, and the
/// sum of |g (q - k)| (for the bound of the summation's rounding).
struct SlopeGradient {
  std::vector<double> sum, magnitude;
  explicit SlopeGradient(std::ptrdiff_t n) : sum(static_cast<std::size_t>(n), 0), magnitude(sum) {}
};

template <class T>
void check_program_case(Method method, const Case& c, bool blocks, std::uint64_t seed) {
  const World& w = world();
  Scope scope(std::string(type_name<T>()) + ", " + method_name(method) + ", " + c.name +
              (blocks ? ", block mask" : ""));
  const Problem<T> p = make_problem<T>(c.s, c.opt, c.m, seed, c.magnitude);
  const Shape& s = p.s;
  using C = ea::ComputeScalar<T>;
  const auto f = [](auto x, auto b, auto h, auto q, auto k) {
    return x + slope<C>(static_cast<long>(b), static_cast<long>(h)) * static_cast<C>(q - k);
  };
  const auto g = [](auto b, auto h, auto q, auto k) {
    return keep(static_cast<long>(b), static_cast<long>(h), static_cast<long>(q), static_cast<long>(k));
  };
  const auto sm = ea::score_mod(f);
  const auto mm = ea::mask_mod(g);
  // Tiles of 4 x 4 of the whole sequence, at its positions: Empty, Partial and Full ones.
  const ea::BlockMask bm = ea::block_mask(mm, s.B, s.H, s.Tq, s.Tk, 4, 4, p.opt);
  ea::Masks<T> masks = p.masks();
  masks.score_mod = sm;
  masks.mask_mod = mm;
  if (blocks) masks.block_mask = bm;
  const auto recorder = [&](SlopeGradient& into) {
    return [&into, H = s.H](C gz, auto b, auto h, auto q, auto k) {
      const double term = static_cast<double>(gz) * static_cast<double>(q - k);
      into.sum[static_cast<std::size_t>(b * H + h)] += term;
      into.magnitude[static_cast<std::size_t>(b * H + h)] += std::fabs(term);
    };
  };

  // The single-process call on the whole sequence, and the exact results (a bias of zeros in the
  // reference gives dZ, whose sums along q - k weighted by q - k are the slopes' gradient).
  Whole<T> whole;
  whole.with_backward = true;
  whole.out = Heads<T>(s.B, s.H, s.Tq, s.dv);
  whole.lse = Heads<T>(s.B, s.H, s.Tq, 1);
  whole.dq = Heads<T>(s.B, s.H, s.Tq, s.dk);
  whole.dk = Heads<T>(s.B, s.Hkv, s.Tk, s.dk);
  whole.dv = Heads<T>(s.B, s.Hkv, s.Tk, s.dv);
  ea::attention_heads_into(p.q.cview(), p.k.cview(), p.v.cview(), whole.out.view(), whole.lse.view(), p.opt,
                           masks);
  SlopeGradient single(s.B * s.H);
  const auto single_lg = ea::logit_grad(recorder(single));
  ea::BackwardTerms<T> single_terms = terms_of(p, p.d_lse, whole.d_sinks);
  single_terms.logit_grad = single_lg;
  ea::attention_heads_backward_into(p.q.cview(), p.k.cview(), p.v.cview(), whole.out.cview(),
                                    whole.lse.cview(), p.d_out.cview(), whole.dq.view(), whole.dk.view(),
                                    whole.dv.view(), p.opt, masks, single_terms);
  ea_test::MultiHeadSpec spec = p.spec();
  spec.score = [](long double x, long b, long h, long q, long k) {
    return x + static_cast<long double>(slope<C>(b, h)) * static_cast<long double>(q - k);
  };
  spec.score_slope = [](long double, long, long, long, long) { return 1.0L; };
  spec.keep = keep;
  spec.bias = ea_test::Array4(s.B, s.H, s.Tq, s.Tk);
  std::optional<ea_test::Array4> d_lse;
  if (p.m.d_lse) d_lse = p.d_lse.to_array4();
  whole.exact = ea_test::reference_heads_backward<T>(p.q.to_array4(), p.k.to_array4(), p.v.to_array4(), spec,
                                                     p.d_out.to_array4(), std::nullopt, d_lse);
  // The exact slope gradients and their bounds: the reference's bound of each dZ times |q - k|,
  // plus the rounding of a sum of T_q T_k terms in double.
  std::vector<long double> exact(static_cast<std::size_t>(s.B * s.H), 0), bound(exact);
  const std::ptrdiff_t offset = p.opt.alignment == ea::CausalAlignment::BottomRight ? s.Tk - s.Tq : 0;
  for (std::ptrdiff_t b = 0; b < s.B; ++b)
    for (std::ptrdiff_t h = 0; h < s.H; ++h)
      for (std::ptrdiff_t i = 0; i < s.Tq; ++i)
        for (std::ptrdiff_t j = 0; j < s.Tk; ++j) {
          const long double d = static_cast<long double>(i + offset - j);
          exact[static_cast<std::size_t>(b * s.H + h)] += whole.exact.d_bias(b, h, i, j) * d;
          bound[static_cast<std::size_t>(b * s.H + h)] += whole.exact.d_bias_tol(b, h, i, j) * std::fabs(d);
        }
  const auto check_slopes = [&](const std::string& what, const std::vector<double>& sum,
                                const std::vector<double>& magnitude) {
    for (std::size_t n = 0; n < exact.size(); ++n) {
      const long double tol = bound[n] + 2 * double(s.Tq * s.Tk) * 0x1p-52 * magnitude[n];
      EA_MPI_CHECK(std::fabs(sum[n] - exact[n]) <= tol, what << ": d slope[" << n << "] = " << sum[n]
                                                             << ", exact " << static_cast<double>(exact[n])
                                                             << ", bound " << static_cast<double>(tol));
    }
  };
  check_slopes("single-process call", single.sum, single.magnitude);

  for (const Split& split : splits_for(s, w.size)) {
    Scope inner(split.name);
    const Local<T> l = local_part(p, split, w.comm);
    const ea::Layout other = l.q.layout == ea::Layout::BHTD ? ea::Layout::BTHD : ea::Layout::BHTD;
    Run<T> r;
    r.out = Heads<T>(s.B, s.H, l.q.T, s.dv, other, T(-777.25));
    r.lse = Heads<T>(s.B, s.H, l.q.T, 1, other, T(-777.25));
    r.dq = Heads<T>(s.B, s.H, l.q.T, s.dk, other, T(-777.25));
    r.dk = Heads<T>(s.B, s.Hkv, l.k.T, s.dk, other, T(-777.25));
    r.dv = Heads<T>(s.B, s.Hkv, l.k.T, s.dv, other, T(-777.25));
    SlopeGradient mine(s.B * s.H);
    const auto lg = ea::logit_grad(recorder(mine));
    const bool ok = no_throw("the distributed calls", [&] {
      ea::BackwardTerms<T> terms = terms_of(p, l.d_lse, r.d_sinks);
      terms.logit_grad = lg;
      if (method == Method::Ring) {
        dist::ring_attention_heads_into(w.comm, l.q.cview(), l.k.cview(), l.v.cview(), r.out.view(),
                                        r.lse.view(), p.opt, masks, l.config);
        dist::ring_attention_heads_backward_into(w.comm, l.q.cview(), l.k.cview(), l.v.cview(), r.out.cview(),
                                                 r.lse.cview(), l.d_out.cview(), r.dq.view(), r.dk.view(),
                                                 r.dv.view(), p.opt, masks, l.config, terms);
      } else {
        dist::ulysses_attention_heads_into(w.comm, l.q.cview(), l.k.cview(), l.v.cview(), r.out.view(),
                                           r.lse.view(), p.opt, masks, l.config);
        dist::ulysses_attention_heads_backward_into(
            w.comm, l.q.cview(), l.k.cview(), l.v.cview(), r.out.cview(), r.lse.cview(), l.d_out.cview(),
            r.dq.view(), r.dk.view(), r.dv.view(), p.opt, masks, l.config, terms);
      }
    });
    if (min_over_ranks(ok ? 1 : 0, w.comm) == 0) continue;  // the same decision on every rank
    check_forward(whole, l, r.out, r.lse);
    check_backward(whole, l, r.dq, r.dk, r.dv);
    // Each rank's callback saw its own blocks' pairs: their sums add up to the whole call's.
    std::vector<double> sum(mine.sum.size()), magnitude(sum.size());
    MPI_Allreduce(mine.sum.data(), sum.data(), static_cast<int>(sum.size()), MPI_DOUBLE, MPI_SUM, w.comm);
    MPI_Allreduce(mine.magnitude.data(), magnitude.data(), static_cast<int>(sum.size()), MPI_DOUBLE, MPI_SUM,
                  w.comm);
    check_slopes("the ranks' callbacks, summed", sum, magnitude);
  }
}

/// Cases that exercise b, h and the positions: a batch of 2, GQA, both alignments, T_q != T_k, a
/// window; H = 4 (6 on 3 ranks, so that Ulysses splits the heads).
inline std::vector<Case> program_cases(int P) {
  const std::ptrdiff_t H = P == 3 ? 6 : 4;
  std::vector<Case> cases;
  Shape s;
  s.H = H, s.Hkv = H / 2, s.Tq = 23, s.Tk = 23;
  ea::Options o;
  o.causal = true;
  cases.push_back({"causal, GQA", s, o, {}});
  s.Tq = 13, s.Tk = 22;
  o.alignment = ea::CausalAlignment::BottomRight;
  o.window_left = 9;
  cases.push_back({"causal window bottom-right, T_q < T_k, ALiBi, dL/dLSE", s, o, {{}, true, false, true}});
  return cases;
}

EA_MPI_CASE(programmable_ring, "programmable: ring with score_mod, mask_mod, a block mask and logit_grad") {
  std::uint64_t seed = 2800;
  for (const Case& c : program_cases(world().size))
    for (const bool blocks : {false, true}) {
      check_program_case<float>(Method::Ring, c, blocks, seed);
      check_program_case<double>(Method::Ring, c, blocks, seed++);
    }
}

EA_MPI_CASE(programmable_ulysses,
            "programmable: Ulysses with score_mod, mask_mod, a block mask and logit_grad") {
  std::uint64_t seed = 2900;
  for (const Case& c : program_cases(world().size))
    for (const bool blocks : {false, true}) {
      check_program_case<float>(Method::Ulysses, c, blocks, seed);
      check_program_case<double>(Method::Ulysses, c, blocks, seed++);
    }
}

}  // namespace test_programmable
}  // namespace ea_mpi
