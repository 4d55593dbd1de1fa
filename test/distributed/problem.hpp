// SPDX-License-Identifier: MIT
/// \file problem.hpp
/// A whole multi-head problem generated identically on every rank (same seed), this rank's
/// shard of it, the single-process results on the whole sequence (attention_heads_into and
/// attention_heads_backward_into) with the long-double reference's error bounds, and the comparison
/// of this rank's rows with those results.
///
/// Tolerances. Every bound is the test suite's error model (test/support): multihead_budget()
/// for OUT and LSE, reference_heads_backward()'s per-element bound for dQ, dK and dV, each a
/// first-order worst case of one computation in T (float: u = 2^-24, double: u = 2^-53) against
/// the exact value. A distributed result is held to twice that bound against the single-process
/// one: each is within one bound of the exact value (triangle inequality). The distributed
/// computation is covered by the same model: merging two partial results by their log-sum-exps
/// is the online rescaling of a tiled kernel (the model allows one per key; the merges, one per
/// key block of at least one key, are fewer), and the dK/dV partial sums added around the ring are
/// the same terms summed in another order (the model's gamma_n bounds any order). Observed: the
/// worst element reaches about 3% of its bound, in float and double alike. The distributed result is also
/// held to one bound against the exact value itself. Nothing is tuned to the observed errors.
#pragma once

#include <EigenAttention/Distributed.hpp>
#include <EigenAttention/EigenAttention.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "random.hpp"
#include "reference_backward.hpp"
#include "support.hpp"

namespace ea_mpi {

namespace ea = EigenAttention;
namespace dist = EigenAttention::distributed;
template <class T>
using RowMatrix = ea::RowMatrix<T>;

template <class T>
const char* type_name() {
  return std::is_same_v<T, float> ? "float" : "double";
}

/// A [B, H, T, D] buffer in either layout, owning its elements (none when empty: data() is then
/// null, as for any user's empty std::vector).
template <class S>
struct Heads {
  std::ptrdiff_t B = 0, H = 0, T = 0, D = 0;
  ea::Layout layout = ea::Layout::BHTD;
  std::vector<S> data;

  Heads() = default;
  Heads(std::ptrdiff_t b, std::ptrdiff_t h, std::ptrdiff_t t, std::ptrdiff_t d,
        ea::Layout l = ea::Layout::BHTD, S fill = S(0))
      : B(b), H(h), T(t), D(d), layout(l), data(static_cast<size_t>(b * h * t * d), fill) {}

  std::ptrdiff_t index(std::ptrdiff_t b, std::ptrdiff_t h, std::ptrdiff_t t, std::ptrdiff_t d) const {
    return layout == ea::Layout::BHTD ? ((b * H + h) * T + t) * D + d : ((b * T + t) * H + h) * D + d;
  }
  S& at(std::ptrdiff_t b, std::ptrdiff_t h, std::ptrdiff_t t, std::ptrdiff_t d) {
    return data[static_cast<size_t>(index(b, h, t, d))];
  }
  S at(std::ptrdiff_t b, std::ptrdiff_t h, std::ptrdiff_t t, std::ptrdiff_t d) const {
    return data[static_cast<size_t>(index(b, h, t, d))];
  }
  ea::HeadsView<S> view() { return ea::HeadsView<S>::contiguous(data.data(), layout, B, H, T, D); }
  ea::HeadsView<const S> cview() const {
    return ea::HeadsView<const S>::contiguous(data.data(), layout, B, H, T, D);
  }
  ea_test::Array4 to_array4() const {  // BHTD, long double
    ea_test::Array4 a(B, H, T, D);
    for (std::ptrdiff_t b = 0; b < B; ++b)
      for (std::ptrdiff_t h = 0; h < H; ++h)
        for (std::ptrdiff_t t = 0; t < T; ++t)
          for (std::ptrdiff_t d = 0; d < D; ++d) a(b, h, t, d) = static_cast<long double>(at(b, h, t, d));
    return a;
  }
  bool bitwise_equal(const Heads& o) const {
    if (B != o.B || H != o.H || T != o.T || D != o.D) return false;
    for (std::ptrdiff_t b = 0; b < B; ++b)
      for (std::ptrdiff_t h = 0; h < H; ++h)
        for (std::ptrdiff_t t = 0; t < T; ++t)
          for (std::ptrdiff_t d = 0; d < D; ++d) {
            const S x = at(b, h, t, d), y = o.at(b, h, t, d);
            if (std::memcmp(&x, &y, sizeof(S)) != 0) return false;
          }
    return true;
  }
  bool all_equal_to(S value) const {
    return std::all_of(data.begin(), data.end(), [value](S x) { return x == value; });
  }
};

/// Sizes of a problem: B sequences, H query heads reading H_kv K/V heads, T_q queries and T_k
/// keys in all (over every rank), d_k and d_v.
struct Shape {
  std::ptrdiff_t B = 2, H = 4, Hkv = 4, Tq = 24, Tk = 24, dk = 8, dv = 6;
};

/// What a problem's masks hold besides Options (the same on every rank).
struct MaskSet {
  std::vector<std::int64_t> key_lengths;  ///< empty: none
  bool alibi = false;                     ///< one slope per query head, 2^-(h + 1) * 1.5
  bool sinks = false;                     ///< one sink logit per query head, 0.7 h - 0.9 (Masks::sinks)
  bool d_lse = false;                     ///< a random dL/dLSE for the backward (BackwardTerms::d_lse)
};

/// The whole problem: every rank generates the same one from the same seed.
template <class T>
struct Problem {
  Shape s;
  ea::Options opt;
  MaskSet m;
  std::vector<T> slopes, sinks;
  Heads<T> q, k, v, d_out, d_lse;  // whole, BHTD (d_lse: when m.d_lse)

  ea::Masks<T> masks() const {
    ea::Masks<T> r;
    if (!m.key_lengths.empty()) r.key_lengths = m.key_lengths.data();
    if (m.alibi) r.alibi_slopes = slopes.data();
    if (m.sinks) r.sinks = sinks.data();
    return r;
  }
  ea_test::MultiHeadSpec spec() const {
    ea_test::MultiHeadSpec sp;
    sp.causal = opt.causal;
    sp.bottom_right = opt.alignment == ea::CausalAlignment::BottomRight;
    if (opt.scale) sp.scale = static_cast<long double>(static_cast<T>(*opt.scale));
    sp.window_left = static_cast<long>(opt.window_left);
    sp.window_right = static_cast<long>(opt.window_right);
    sp.chunk = static_cast<long>(opt.chunk_size);
    sp.softcap = static_cast<long double>(opt.softcap);
    sp.key_lengths = m.key_lengths;
    for (const T x : slopes) sp.alibi.push_back(static_cast<long double>(x));
    for (const T x : sinks) sp.sinks.push_back(static_cast<long double>(x));
    return sp;
  }
  /// (query, key) pairs visible over all sequences and query heads, of the query rows
  /// `rows` (global tokens; null: every query): Stats::visible_pairs, summed over the ranks.
  std::int64_t visible_pairs(const std::vector<dist::Segment>* rows = nullptr) const {
    const auto sp = spec();
    const std::vector<dist::Segment> all{{0, 0, s.Tq}};
    std::int64_t n = 0;
    for (const auto& seg : rows ? *rows : all)
      for (std::ptrdiff_t b = 0; b < s.B; ++b) {
        const std::ptrdiff_t len =
            m.key_lengths.empty() ? s.Tk : static_cast<std::ptrdiff_t>(m.key_lengths[b]);
        for (std::ptrdiff_t i = seg.global_first; i < seg.global_first + seg.count; ++i) {
          const std::ptrdiff_t pos = i + (sp.bottom_right ? len - s.Tq : 0);
          for (std::ptrdiff_t j = 0; j < s.Tk; ++j) {
            bool visible = j < len;
            if (sp.causal) visible = visible && j <= pos;
            if (sp.window_left >= 0) visible = visible && j >= pos - sp.window_left;
            if (sp.window_right >= 0) visible = visible && j <= pos + sp.window_right;
            if (sp.chunk > 0)  // pos may be negative: floor division
              visible = visible && ea_test::floor_div(j, sp.chunk) == ea_test::floor_div(pos, sp.chunk);
            n += visible ? 1 : 0;
          }
        }
      }
    return n * s.H;
  }
};

/// Normal inputs of magnitude `magnitude` (larger logits test the merge's rescaling harder).
template <class T>
Problem<T> make_problem(const Shape& s, const ea::Options& opt, const MaskSet& m, std::uint64_t seed,
                        double magnitude = 1.0) {
  Problem<T> p;
  p.s = s;
  p.opt = opt;
  p.m = m;
  if (m.alibi)
    for (std::ptrdiff_t h = 0; h < s.H; ++h)
      p.slopes.push_back(static_cast<T>(1.5 * std::ldexp(1.0, -int(h) - 1)));
  ea_test::Rng rng(seed);
  auto fill = [&](Heads<T>& x, std::ptrdiff_t heads, std::ptrdiff_t tokens, std::ptrdiff_t dim) {
    x = Heads<T>(s.B, heads, tokens, dim);
    for (auto& e : x.data) e = static_cast<T>(magnitude * rng.normal());
  };
  fill(p.q, s.H, s.Tq, s.dk);
  fill(p.k, s.Hkv, s.Tk, s.dk);
  fill(p.v, s.Hkv, s.Tk, s.dv);
  for (auto& e : (p.d_out = Heads<T>(s.B, s.H, s.Tq, s.dv)).data) e = static_cast<T>(rng.normal());
  if (m.sinks)
    for (std::ptrdiff_t h = 0; h < s.H; ++h) p.sinks.push_back(static_cast<T>(0.7 * double(h) - 0.9));
  if (m.d_lse)
    for (auto& e : (p.d_lse = Heads<T>(s.B, s.H, s.Tq, 1)).data) e = static_cast<T>(rng.normal());
  return p;
}

/// How the tokens are laid out over the ranks: ZigZag, or Contiguous with the balanced split
/// (counts empty) or the given per-rank counts of queries and of keys.
struct Split {
  std::string name;
  dist::Sharding sharding = dist::Sharding::Contiguous;
  std::vector<std::ptrdiff_t> q_counts, k_counts;
  ea::Layout layout = ea::Layout::BHTD;  // of the shards (the outputs take the other one)
};

/// Rows `weights` apportioned over `total` tokens (the remainder to the last nonzero weight).
inline std::vector<std::ptrdiff_t> apportion(std::ptrdiff_t total, const std::vector<int>& weights) {
  int sum = 0;
  for (int w : weights) sum += w;
  std::vector<std::ptrdiff_t> counts;
  std::ptrdiff_t given = 0;
  for (int w : weights) {
    counts.push_back(total * w / sum);
    given += counts.back();
  }
  for (size_t r = weights.size(); r-- > 0;)
    if (weights[r] > 0) {
      counts[r] += total - given;
      break;
    }
  return counts;
}

/// The three layouts every problem is run under on P ranks: balanced contiguous, uneven
/// contiguous (queries and keys split differently, rank 1 holding no query and rank P - 1 no key,
/// the same rank when P = 2; shards in BTHD: strided views), and ZigZag.
inline std::vector<Split> splits_for(const Shape& s, int P) {
  std::vector<Split> out;
  out.push_back({"contiguous", dist::Sharding::Contiguous, {}, {}, ea::Layout::BHTD});
  std::vector<int> wq, wk;
  for (int r = 0; r < P; ++r) {
    wq.push_back(r == 1 ? 0 : 2 * r + 1);
    wk.push_back(P > 1 && r == P - 1 ? 0 : P - r + (r % 2) * 3);
  }
  out.push_back({"uneven, rank 1 without queries, rank P - 1 without keys", dist::Sharding::Contiguous,
                 apportion(s.Tq, wq), apportion(s.Tk, wk), ea::Layout::BTHD});
  out.push_back({"zigzag", dist::Sharding::ZigZag, {}, {}, ea::Layout::BHTD});
  return out;
}

/// This rank's runs of tokens under `split` for `tokens` tokens, counts the per-rank counts
/// (Contiguous; empty: balanced).
inline std::vector<dist::Segment> segments_of(dist::Sharding sharding,
                                              const std::vector<std::ptrdiff_t>& counts,
                                              std::ptrdiff_t tokens, int P, int rank) {
  if (sharding == dist::Sharding::ZigZag || counts.empty())
    return dist::shard_segments(sharding, tokens, P, rank);
  std::ptrdiff_t first = 0;
  for (int r = 0; r < rank; ++r) first += counts[static_cast<size_t>(r)];
  return {dist::Segment{first, 0, counts[static_cast<size_t>(rank)]}};
}

inline std::ptrdiff_t rows_of(const std::vector<dist::Segment>& segments) {
  std::ptrdiff_t n = 0;
  for (const auto& s : segments) n += s.count;
  return n;
}

/// The rows of `whole` that `segments` name, in local order, in `layout`.
template <class T>
Heads<T> take_rows(const Heads<T>& whole, const std::vector<dist::Segment>& segments, ea::Layout layout) {
  Heads<T> out(whole.B, whole.H, rows_of(segments), whole.D, layout);
  for (const auto& seg : segments)
    for (std::ptrdiff_t b = 0; b < whole.B; ++b)
      for (std::ptrdiff_t h = 0; h < whole.H; ++h)
        for (std::ptrdiff_t i = 0; i < seg.count; ++i)
          for (std::ptrdiff_t d = 0; d < whole.D; ++d)
            out.at(b, h, seg.local_first + i, d) = whole.at(b, h, seg.global_first + i, d);
  return out;
}

/// This rank's part of a problem: its shards of Q, K, V and dOUT.
template <class T>
struct Local {
  std::vector<dist::Segment> q_segments, k_segments;
  Heads<T> q, k, v, d_out, d_lse;  // d_lse: when the problem has one
  dist::Config config;
};

template <class T>
Local<T> local_part(const Problem<T>& p, const Split& split, MPI_Comm comm) {
  int P = 1, rank = 0;
  MPI_Comm_size(comm, &P);
  MPI_Comm_rank(comm, &rank);
  Local<T> l;
  l.q_segments = segments_of(split.sharding, split.q_counts, p.s.Tq, P, rank);
  l.k_segments = segments_of(split.sharding, split.k_counts, p.s.Tk, P, rank);
  l.q = take_rows(p.q, l.q_segments, split.layout);
  l.k = take_rows(p.k, l.k_segments, split.layout);
  l.v = take_rows(p.v, l.k_segments, split.layout);
  l.d_out = take_rows(p.d_out, l.q_segments, split.layout);
  if (p.m.d_lse) l.d_lse = take_rows(p.d_lse, l.q_segments, split.layout);
  l.config.sharding = split.sharding;
  return l;
}

/// The single-process results on the whole sequence and the exact ones with their bounds.
template <class T>
struct Whole {
  Heads<T> out, lse, dq, dk, dv;
  std::vector<T> d_sinks;            // when the problem has sinks
  ea_test::BackwardReference exact;  // .forward: OUT, LSE and the budgets' inputs
  bool with_backward = false;
};

/// The backward terms of a problem: dL/dLSE (this rank's rows, or the whole) and where dL/dsinks
/// goes.
template <class T>
ea::BackwardTerms<T> terms_of(const Problem<T>& p, const Heads<T>& d_lse, std::vector<T>& d_sinks) {
  ea::BackwardTerms<T> terms;
  if (p.m.d_lse) terms.d_lse = d_lse.cview();
  if (p.m.sinks) {
    d_sinks.assign(static_cast<std::size_t>(p.s.H), T(-777.25));
    terms.d_sinks = d_sinks.data();
  }
  return terms;
}

template <class T>
Whole<T> whole_results(const Problem<T>& p, bool with_backward) {
  Whole<T> w;
  const Shape& s = p.s;
  w.out = Heads<T>(s.B, s.H, s.Tq, s.dv);
  w.lse = Heads<T>(s.B, s.H, s.Tq, 1);
  const auto masks = p.masks();
  ea::attention_heads_into(p.q.cview(), p.k.cview(), p.v.cview(), w.out.view(), w.lse.view(), p.opt, masks);
  w.with_backward = with_backward;
  if (with_backward) {
    w.dq = Heads<T>(s.B, s.H, s.Tq, s.dk);
    w.dk = Heads<T>(s.B, s.Hkv, s.Tk, s.dk);
    w.dv = Heads<T>(s.B, s.Hkv, s.Tk, s.dv);
    ea::attention_heads_backward_into(p.q.cview(), p.k.cview(), p.v.cview(), w.out.cview(), w.lse.cview(),
                                      p.d_out.cview(), w.dq.view(), w.dk.view(), w.dv.view(), p.opt, masks,
                                      terms_of(p, p.d_lse, w.d_sinks));
    std::optional<ea_test::Array4> d_lse;
    if (p.m.d_lse) d_lse = p.d_lse.to_array4();
    w.exact = ea_test::reference_heads_backward<T>(p.q.to_array4(), p.k.to_array4(), p.v.to_array4(),
                                                   p.spec(), p.d_out.to_array4(), std::nullopt, d_lse);
  } else {
    w.exact.forward = ea_test::reference_heads(p.q.to_array4(), p.k.to_array4(), p.v.to_array4(), p.spec());
  }
  return w;
}

/// Checks this rank's rows `got` (local rows of `segments`) against the whole results `single`
/// within twice `bound` and against the exact `exact` within one bound. bound(b, h, global
/// token, column) is an ea_test::Tol (|x - y| <= abs + rel |y|).
template <class T, class Bound>
void check_rows(const std::string& what, const Heads<T>& got, const std::vector<dist::Segment>& segments,
                const Heads<T>& single, const ea_test::Array4& exact, Bound bound) {
  if (got.B != single.B || got.H != single.H || got.D != single.D || got.T != rows_of(segments)) {
    fail(what + ": wrong shape");
    return;
  }
  long failures = 0;
  long double worst = -1;
  std::ostringstream where;
  where.precision(10);
  for (const auto& seg : segments)
    for (std::ptrdiff_t b = 0; b < got.B; ++b)
      for (std::ptrdiff_t h = 0; h < got.H; ++h)
        for (std::ptrdiff_t i = 0; i < seg.count; ++i)
          for (std::ptrdiff_t d = 0; d < got.D; ++d) {
            const std::ptrdiff_t t = seg.global_first + i;
            const long double x = got.at(b, h, seg.local_first + i, d);
            const long double y = single.at(b, h, t, d), z = exact(b, h, t, d);
            const ea_test::Tol tol = bound(b, h, t, d);
            const auto excess = [&](long double ref, long double factor) -> long double {
              if (std::isinf(x) || std::isinf(ref)) return x == ref ? 0 : INFINITY;
              const long double err = std::fabs(x - ref);
              const long double allowed = factor * tol.at(ref);
              if (std::isnan(err)) return INFINITY;
              return allowed > 0 ? err / allowed : (err > 0 ? INFINITY : 0);
            };
            const long double e = std::max(excess(y, 2), excess(z, 1));
            if (e <= 1) continue;
            ++failures;
            if (e > worst) {
              worst = e;
              where.str("");
              where << "(b " << b << ", h " << h << ", token " << t << ", col " << d << "): got "
                    << static_cast<double>(x) << ", single-process " << static_cast<double>(y) << ", exact "
                    << static_cast<double>(z) << ", bound " << static_cast<double>(tol.at(z));
            }
          }
  EA_MPI_CHECK(failures == 0, what << ": " << failures << " elements off; worst " << where.str() << " ("
                                   << static_cast<double>(worst) << " x its bound)");
}

/// OUT and LSE of this rank against the whole results.
template <class T>
void check_forward(const Whole<T>& w, const Local<T>& l, const Heads<T>& out, const Heads<T>& lse) {
  const auto& f = w.exact.forward;
  const std::ptrdiff_t H = w.out.H;
  check_rows("OUT", out, l.q_segments, w.out, f.out,
             [&](std::ptrdiff_t b, std::ptrdiff_t h, std::ptrdiff_t, std::ptrdiff_t) {
               return ea_test::Tol::mixed(ea_test::multihead_budget<T>(f, b * H + h).attn);
             });
  check_rows("LSE", lse, l.q_segments, w.lse, f.lse,
             [&](std::ptrdiff_t b, std::ptrdiff_t h, std::ptrdiff_t, std::ptrdiff_t) {
               return ea_test::multihead_budget<T>(f, b * H + h).lse;
             });
}

/// dQ, dK and dV of this rank against the whole results (absolute per-element bounds).
template <class T>
void check_backward(const Whole<T>& w, const Local<T>& l, const Heads<T>& dq, const Heads<T>& dk,
                    const Heads<T>& dv) {
  const auto& e = w.exact;
  auto bound = [](const ea_test::Array4& tol) {
    return [&tol](std::ptrdiff_t b, std::ptrdiff_t h, std::ptrdiff_t t, std::ptrdiff_t d) {
      return ea_test::Tol{tol(b, h, t, d), 0};
    };
  };
  check_rows("dQ", dq, l.q_segments, w.dq, e.dq, bound(e.dq_tol));
  check_rows("dK", dk, l.k_segments, w.dk, e.dk, bound(e.dk_tol));
  check_rows("dV", dv, l.k_segments, w.dv, e.dv, bound(e.dv_tol));
}

/// dL/dsinks (every rank has all H) against the whole results (twice the bound) and the exact.
template <class T>
void check_d_sinks(const Whole<T>& w, const std::vector<T>& d_sinks) {
  const auto& e = w.exact;
  EA_MPI_CHECK(d_sinks.size() == e.d_sinks.size(), "dL/dsinks: " << d_sinks.size() << " values");
  for (std::size_t h = 0; h < std::min(d_sinks.size(), e.d_sinks.size()); ++h) {
    const long double x = d_sinks[h], tol = e.d_sinks_tol[h];
    const bool ok = std::fabs(x - e.d_sinks[h]) <= tol &&
                    std::fabs(x - static_cast<long double>(w.d_sinks[h])) <= 2 * tol;
    EA_MPI_CHECK(ok, "dL/dsinks[" << h << "] = " << static_cast<double>(x) << ", single-process "
                                  << static_cast<double>(w.d_sinks[h]) << ", exact "
                                  << static_cast<double>(e.d_sinks[h]) << ", bound "
                                  << static_cast<double>(tol));
  }
}

enum class Method { Ring, Ulysses };
inline const char* method_name(Method m) { return m == Method::Ring ? "ring" : "ulysses"; }

/// This rank's outputs of one distributed forward (and backward) call.
template <class T>
struct Run {
  Heads<T> out, lse, dq, dk, dv;
  std::vector<T> d_sinks;
  dist::Stats stats, backward_stats;
};

/// The distributed forward of `method` on `l` (outputs in the other layout than the shards'),
/// then, when `backward`, its backward from that forward's OUT and LSE.
template <class T>
Run<T> run_distributed(Method method, MPI_Comm comm, const Problem<T>& p, const Local<T>& l, bool backward,
                       const ea::Options& opt) {
  const Shape& s = p.s;
  const ea::Layout other = l.q.layout == ea::Layout::BHTD ? ea::Layout::BTHD : ea::Layout::BHTD;
  const T sentinel = T(-777.25);  // any element left unwritten shows
  Run<T> r;
  r.out = Heads<T>(s.B, s.H, l.q.T, s.dv, other, sentinel);
  r.lse = Heads<T>(s.B, s.H, l.q.T, 1, other, sentinel);
  dist::Config config = l.config;
  config.stats = &r.stats;
  const auto masks = p.masks();
  if (method == Method::Ring)
    dist::ring_attention_heads_into(comm, l.q.cview(), l.k.cview(), l.v.cview(), r.out.view(), r.lse.view(),
                                    opt, masks, config);
  else
    dist::ulysses_attention_heads_into(comm, l.q.cview(), l.k.cview(), l.v.cview(), r.out.view(),
                                       r.lse.view(), opt, masks, config);
  if (!backward) return r;
  r.dq = Heads<T>(s.B, s.H, l.q.T, s.dk, other, sentinel);
  r.dk = Heads<T>(s.B, s.Hkv, l.k.T, s.dk, other, sentinel);
  r.dv = Heads<T>(s.B, s.Hkv, l.k.T, s.dv, other, sentinel);
  config.stats = &r.backward_stats;
  const ea::BackwardTerms<T> terms = terms_of(p, l.d_lse, r.d_sinks);
  if (method == Method::Ring)
    dist::ring_attention_heads_backward_into(comm, l.q.cview(), l.k.cview(), l.v.cview(), r.out.cview(),
                                             r.lse.cview(), l.d_out.cview(), r.dq.view(), r.dk.view(),
                                             r.dv.view(), opt, masks, config, terms);
  else
    dist::ulysses_attention_heads_backward_into(comm, l.q.cview(), l.k.cview(), l.v.cview(), r.out.cview(),
                                                r.lse.cview(), l.d_out.cview(), r.dq.view(), r.dk.view(),
                                                r.dv.view(), opt, masks, config, terms);
  return r;
}

/// Stats of one call summed over the ranks: the visible pairs must be exactly the problem's,
/// the bytes sent those received; times are non-negative and the parts within the whole.
template <class T>
void check_stats(const std::string& what, const Problem<T>& p, const dist::Stats& st, MPI_Comm comm) {
  const std::int64_t pairs = sum_over_ranks(st.visible_pairs, comm);
  EA_MPI_CHECK(pairs == p.visible_pairs(), what << ": visible_pairs sum to " << pairs
                                                << " over the ranks, the problem has " << p.visible_pairs());
  const std::int64_t sent = sum_over_ranks(st.bytes_sent, comm),
                     received = sum_over_ranks(st.bytes_received, comm);
  EA_MPI_CHECK(sent == received, what << ": " << sent << " bytes sent but " << received << " received");
  EA_MPI_CHECK(st.seconds >= 0 && st.compute_seconds >= 0 && st.wait_seconds >= 0 &&
                   st.compute_seconds <= st.seconds && st.wait_seconds <= st.seconds,
               what << ": times " << st.seconds << " s, compute " << st.compute_seconds << " s, wait "
                    << st.wait_seconds << " s");
  EA_MPI_CHECK(st.messages >= 0 && st.bytes_sent >= 0 && st.bytes_received >= 0 && st.blocks_computed >= 0 &&
                   st.blocks_skipped >= 0,
               what << ": negative counts");
}

/// The forward cases every method runs: each mask option, T_q != T_k both ways with either
/// alignment, GQA/MQA, soft-cap, ALiBi, key lengths (one of them 0), all at once. H is 4, or 6
/// on 3 ranks, so that Ulysses (H divisible by P) runs every case.
struct Case {
  std::string name;
  Shape s;
  ea::Options opt;
  MaskSet m;
  double magnitude = 1.0;
};

inline std::vector<Case> forward_cases(int P) {
  const std::ptrdiff_t H = P == 3 ? 6 : 4;
  auto shape = [&](std::ptrdiff_t tq, std::ptrdiff_t tk, std::ptrdiff_t hkv) {
    Shape s;
    s.H = H;
    s.Hkv = hkv;
    s.Tq = tq;
    s.Tk = tk;
    return s;
  };
  auto causal = [](ea::CausalAlignment a) {
    ea::Options o;
    o.causal = true;
    o.alignment = a;
    return o;
  };
  const auto TL = ea::CausalAlignment::TopLeft, BR = ea::CausalAlignment::BottomRight;
  std::vector<Case> cases;
  cases.push_back({"no mask", shape(23, 23, H), {}, {}});
  cases.push_back({"causal", shape(23, 23, H), causal(TL), {}});
  cases.push_back({"causal top-left, T_q < T_k", shape(13, 21, H), causal(TL), {}});
  cases.push_back({"causal bottom-right, T_q < T_k", shape(13, 21, H), causal(BR), {}});
  cases.push_back({"causal top-left, T_q > T_k", shape(21, 13, H), causal(TL), {}});
  // Queries 0..7 see no key: zero rows and LSE -inf, also on the ranks holding them.
  cases.push_back({"causal bottom-right, T_q > T_k", shape(21, 13, H), causal(BR), {}});
  {
    ea::Options o;
    o.window_left = 4;
    o.window_right = 2;
    cases.push_back({"window, both sides", shape(23, 23, H), o, {}});
    o = causal(BR);
    o.window_left = 3;
    cases.push_back({"causal window bottom-right, T_q < T_k", shape(11, 23, H), o, {}});
  }
  cases.push_back({"alibi causal", shape(23, 23, H), causal(TL), {{}, true}});
  {
    ea::Options o;
    o.alignment = BR;
    cases.push_back({"alibi bottom-right, T_q < T_k", shape(9, 22, H), o, {{}, true}});
    o = ea::Options{};
    o.softcap = 2.5;
    cases.push_back({"softcap", shape(19, 19, H), o, {}, 3.0});
    o = ea::Options{};
    o.scale = 0.3;
    cases.push_back({"explicit scale", shape(17, 19, H), o, {}});
  }
  cases.push_back({"key lengths, causal bottom-right", shape(10, 22, H), causal(BR), {{17, 6}, false}});
  cases.push_back({"key lengths 0 and full", shape(15, 18, H), {}, {{0, 18}, false}});
  cases.push_back({"GQA", shape(19, 21, 2), causal(TL), {}});
  cases.push_back({"MQA", shape(19, 21, 1), {}, {}});
  {
    ea::Options o = causal(BR);
    o.window_left = 6;
    o.softcap = 4;
    cases.push_back({"GQA, everything", shape(14, 25, 2), o, {{20, 25}, true}, 2.0});
  }
  {
    // Chunked-local attention (Llama 4's causal chunks): the chunks are global positions, so
    // each block of keys a rank holds starts at its own place in the chunk grid.
    ea::Options o = causal(TL);
    o.chunk_size = 5;
    cases.push_back({"chunked causal", shape(23, 23, H), o, {}});
    o = causal(BR);
    o.chunk_size = 4;
    cases.push_back({"chunked causal bottom-right, key lengths", shape(10, 22, H), o, {{17, 6}, false}});
    o = ea::Options{};
    o.chunk_size = 7;
    o.window_left = 3;
    cases.push_back({"chunked with a window, GQA", shape(19, 21, 2), o, {}});
  }
  {
    // Attention sinks (gpt-oss): added once per row, however many key blocks the row's keys come
    // in; with dL/dLSE in the backward. Bottom-right with T_q > T_k: rows that see only the sink.
    cases.push_back({"sinks, causal, dL/dLSE", shape(23, 23, H), causal(TL), {{}, false, true, true}});
    cases.push_back({"sinks, causal bottom-right, T_q > T_k, GQA",
                     shape(21, 13, 2),
                     causal(BR),
                     {{}, false, true, false}});
    ea::Options o = causal(BR);
    o.chunk_size = 4;
    cases.push_back({"sinks, chunks, key lengths 0 and full, ALiBi, dL/dLSE",
                     shape(15, 18, H),
                     o,
                     {{0, 18}, true, true, true}});
    cases.push_back(
        {"dL/dLSE without sinks, window", shape(19, 19, H), ea::Options{}, {{}, false, false, true}});
    cases.back().opt.window_left = 5;
  }
  // Fewer tokens than 2P chunks: empty ZigZag chunks.
  cases.push_back({"5 tokens", shape(5, 5, H), causal(TL), {}});
  {
    // Longer shards (several of the kernels' tiles each), d_k != d_v the other way round.
    Shape s = shape(97, 101, H / 2);
    s.B = 1;
    s.dk = 16;
    s.dv = 4;
    ea::Options o = causal(BR);
    o.window_left = 40;
    cases.push_back({"97 queries, 101 keys", s, o, {{}, true}});
  }
  return cases;
}

/// Runs `f`, recording what it throws as a failure: false when it threw. The calls are
/// collective, so a rank that throws where the others do not leaves them waiting: the timeouts
/// end that.
template <class F>
bool no_throw(const std::string& what, F&& f) {
  try {
    f();
    return true;
  } catch (const std::exception& e) {
    fail(what + " threw: " + e.what());
  }
  return false;
}

/// One case on every split of its tokens over the ranks of the world: the distributed
/// results (forward, and backward when asked) against the single-process ones, and the stats.
template <class T>
void check_case(Method method, const Case& c, bool backward, std::uint64_t seed) {
  const World& w = world();
  Scope scope(std::string(type_name<T>()) + ", " + method_name(method) + ", " + c.name);
  const Problem<T> p = make_problem<T>(c.s, c.opt, c.m, seed, c.magnitude);
  const Whole<T> whole = whole_results(p, backward);
  for (const Split& split : splits_for(c.s, w.size)) {
    Scope inner(split.name);
    const Local<T> l = local_part(p, split, w.comm);
    Run<T> r;
    const bool ok =
        no_throw("the distributed call", [&] { r = run_distributed(method, w.comm, p, l, backward, p.opt); });
    if (ok) {
      check_forward(whole, l, r.out, r.lse);
      if (backward) check_backward(whole, l, r.dq, r.dk, r.dv);
      if (backward && p.m.sinks) check_d_sinks(whole, r.d_sinks);
    }
    if (min_over_ranks(ok ? 1 : 0, w.comm) == 0) continue;  // the same decision on every rank
    check_stats("forward stats", p, r.stats, w.comm);
    if (backward) check_stats("backward stats", p, r.backward_stats, w.comm);
  }
}

}  // namespace ea_mpi
