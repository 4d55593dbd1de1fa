// SPDX-License-Identifier: MIT
/// \file decode.hpp
/// Helpers of the decode tests: a sequence's keys, values and new queries as plain matrices
/// (heads side by side, one row per token), a PagedKVCache filled with them in random pieces,
/// and the two yardsticks: the library's attention_heads_into on the same keys laid out contiguously
/// (bottom-right alignment), and the long-double reference (reference.hpp).
#pragma once

#include <EigenAttention/EigenAttention.hpp>

#include <optional>
#include <string>
#include <vector>

#include "random.hpp"
#include "reference.hpp"
#include "tolerance.hpp"

namespace ea_test {
namespace decode {

namespace ea = EigenAttention;
using Eigen::Index;

template <typename S>
using Compute = ea::ComputeScalar<S>;
template <typename T>
using Rows = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// One decode problem's shape and options.
struct Case {
  Index H = 4, Hkv = 2, dk = 8, dv = 8;
  Index Tk = 40, Tq = 1;
  Index page = 16;
  bool causal = true;
  long window_left = -1, window_right = -1;
  long chunk = 0;  // Options::chunk_size
  double softcap = 0;
  bool alibi = false;
  bool sinks = false;  // Masks::sinks, one per query head
  std::optional<double> scale;
  double magnitude = 1;
  std::string describe() const {
    return "H=" + std::to_string(H) + " Hkv=" + std::to_string(Hkv) + " dk=" + std::to_string(dk) +
           " dv=" + std::to_string(dv) + " Tk=" + std::to_string(Tk) + " Tq=" + std::to_string(Tq) +
           " page=" + std::to_string(page) + " causal=" + std::to_string(causal) +
           " window=" + std::to_string(window_left) + "," + std::to_string(window_right) +
           " chunk=" + std::to_string(chunk) + " softcap=" + std::to_string(softcap) +
           " alibi=" + std::to_string(alibi) + " sinks=" + std::to_string(sinks);
  }
};

/// x rounded to the storage type S and back to its compute type.
template <typename S>
Compute<S> rounded(Compute<S> x) {
  return static_cast<Compute<S>>(static_cast<S>(x));
}

/// One sequence: K (Tk x Hkv dk) and V (Tk x Hkv dv) of values that S holds exactly, Q
/// (Tq x H dk), H ALiBi slopes and H sinks.
template <typename S>
struct Sequence {
  Rows<Compute<S>> K, V, Q;
  std::vector<Compute<S>> slopes, sinks;
};

template <typename S>
Sequence<S> make_sequence(Rng& rng, const Case& c) {
  using T = Compute<S>;
  Sequence<S> s;
  s.K = random_matrix<Rows<T>>(rng, c.Tk, c.Hkv * c.dk, c.magnitude);
  s.V = random_matrix<Rows<T>>(rng, c.Tk, c.Hkv * c.dv);
  s.Q = random_matrix<Rows<T>>(rng, c.Tq, c.H * c.dk, c.magnitude);
  s.K = s.K.unaryExpr([](T x) { return rounded<S>(x); });
  s.V = s.V.unaryExpr([](T x) { return rounded<S>(x); });
  for (Index h = 0; h < c.H; ++h) s.slopes.push_back(static_cast<T>(0.5 / static_cast<double>(h + 1)));
  for (Index h = 0; h < c.H; ++h) s.sinks.push_back(static_cast<T>(0.6 * static_cast<double>(h % 5) - 0.4));
  return s;
}

/// The options of a case (alignment bottom-right, as decode always is).
inline ea::Options options_of(const Case& c, ea::Kernel kernel = ea::Kernel::Auto, int threads = 1) {
  ea::Options opt;
  opt.causal = c.causal;
  opt.alignment = ea::CausalAlignment::BottomRight;
  opt.window_left = c.window_left;
  opt.window_right = c.window_right;
  opt.chunk_size = c.chunk;
  opt.softcap = c.softcap;
  opt.scale = c.scale;
  opt.kernel = kernel;
  opt.threads = threads;
  return opt;
}

/// Appends rows [0, Tk) of a sequence to `s` of `cache` in random pieces (1 to 40 tokens).
template <typename S>
void append_in_pieces(Rng& rng, ea::PagedKVCache<S>& cache, ea::SequenceId s, const Sequence<S>& seq) {
  Index done = 0;
  while (done < seq.K.rows()) {
    const Index n = std::min<Index>(seq.K.rows() - done, rng.integer(1, 40));
    cache.append(s, seq.K.middleRows(done, n), seq.V.middleRows(done, n));
    done += n;
  }
}

/// What a decode returns: out (Tq x H dv) and lse (Tq x H).
template <typename T>
struct Result {
  Rows<T> out, lse;
};

/// attention_heads_into on the same keys laid out contiguously: the multi-head call a user would
/// make today ([1, T, H, d] views of the matrices), bottom-right alignment.
template <typename S>
Result<Compute<S>> heads_call(const Case& c, const Sequence<S>& s, const ea::Options& opt_in) {
  using T = Compute<S>;
  ea::Options opt = opt_in;
  opt.alignment = ea::CausalAlignment::BottomRight;
  if (opt.kernel == ea::Kernel::Reference) opt.kernel = ea::Kernel::Auto;
  Result<T> r;
  r.out.resize(c.Tq, c.H * c.dv);
  r.lse.resize(c.Tq, c.H);
  const auto q = ea::HeadsView<const T>::bthd(s.Q.data(), 1, c.Tq, c.H, c.dk);
  const auto k = ea::HeadsView<const T>::bthd(s.K.data(), 1, c.Tk, c.Hkv, c.dk);
  const auto v = ea::HeadsView<const T>::bthd(s.V.data(), 1, c.Tk, c.Hkv, c.dv);
  const auto o = ea::HeadsView<T>::bthd(r.out.data(), 1, c.Tq, c.H, c.dv);
  ea::HeadsView<T> l{r.lse.data(), 1, c.H, c.Tq, 1, 0, 1, c.H, 1};
  ea::Masks<T> masks;
  if (c.alibi) masks.alibi_slopes = s.slopes.data();
  if (c.sinks) masks.sinks = s.sinks.data();
  ea::attention_heads_into(q, k, v, o, l, opt, masks);
  return r;
}

/// Tokens x (heads d) of a matrix as a [1, heads, tokens, d] long-double array.
template <class M>
Array4 heads_array(const M& m, Index heads) {
  const Index d = heads == 0 ? 0 : m.cols() / heads;
  Array4 a(1, heads, m.rows(), d);
  for (Index h = 0; h < heads; ++h)
    for (Index t = 0; t < m.rows(); ++t)
      for (Index c = 0; c < d; ++c) a(0, h, t, c) = static_cast<long double>(m(t, h * d + c));
  return a;
}

/// The long-double reference of a case (with a 0/1 mask [1, 1|H, Tq, Tk], when given).
template <typename S>
MultiHeadReference reference_of(const Case& c, const Sequence<S>& s,
                                const std::optional<Array4>& mask = std::nullopt) {
  MultiHeadSpec spec;
  spec.causal = c.causal;
  spec.bottom_right = true;
  if (c.scale) spec.scale = static_cast<long double>(static_cast<Compute<S>>(*c.scale));
  spec.window_left = c.window_left;
  spec.window_right = c.window_right;
  spec.chunk = c.chunk;
  spec.softcap = c.softcap;
  if (c.alibi)
    for (const auto x : s.slopes) spec.alibi.push_back(static_cast<long double>(x));
  if (c.sinks)
    for (const auto x : s.sinks) spec.sinks.push_back(static_cast<long double>(x));
  spec.mask = mask;
  return reference_heads(heads_array(s.Q, c.H), heads_array(s.K, c.Hkv), heads_array(s.V, c.Hkv), spec);
}

/// CHECKs out and lse of a decode against the reference, head by head, within `factor` times
/// the multi-head error budget of the compute type. With `pairs` (a bf16 cache's prefill on
/// Kernel::Avx512Bf16 or Kernel::Amx), ATTN also gets the weights rounded to bf16 before P V
/// (2^-9 sum_j p_j |v_j| <= 2^-9 max |V|) and the queries split into two bf16 parts (each logit
/// off by 2^-18 of its magnitude A at most, moving ATTN by 2 x that x max |V|), both doubled.
template <typename T>
void check_reference(const Result<T>& r, const MultiHeadReference& ref, const Case& c, long double factor,
                     const std::string& what, bool pairs = false) {
  for (Index h = 0; h < c.H; ++h) {
    Budget b = multihead_budget<T>(ref, h).times(factor);
    const std::size_t g = static_cast<std::size_t>(h);
    if (pairs) b.attn += ref.max_abs_v[g] * (0x1p-8L + 0x1p-16L * ref.logit_magnitude[g]);
    const MatrixLD out = ref.out.slice(0, h);
    const MatrixLD lse = ref.lse.slice(0, h);
    CAPTURE(h);
    CAPTURE(what);
    EA_CHECK_NEAR(to_long_double(r.out.middleCols(h * c.dv, c.dv)), out, b.attn);
    EA_CHECK_NEAR(to_long_double(r.lse.col(h)), lse, b.lse);
  }
}

/// CHECKs two results of a case against each other, head by head, within twice the multi-head
/// error budget of the compute type (two results, each within the budget of the exact one).
template <typename T>
void check_each_other(const Result<T>& a, const Result<T>& b, const MultiHeadReference& ref, const Case& c) {
  for (Index h = 0; h < c.H; ++h) {
    const Budget bud = multihead_budget<T>(ref, h).times(2);
    CAPTURE(h);
    EA_CHECK_NEAR(to_long_double(a.out.middleCols(h * c.dv, c.dv)),
                  to_long_double(b.out.middleCols(h * c.dv, c.dv)), bud.attn);
    EA_CHECK_NEAR(to_long_double(a.lse.col(h)), to_long_double(b.lse.col(h)), bud.lse);
  }
}

}  // namespace decode
/// The masks of a decode case: its ALiBi slopes and sinks, when it has them.
template <typename S>
ea::Masks<decode::Compute<S>> decode_masks(const decode::Case& c, const decode::Sequence<S>& s) {
  ea::Masks<decode::Compute<S>> m;
  if (c.alibi) m.alibi_slopes = s.slopes.data();
  if (c.sinks) m.sinks = s.sinks.data();
  return m;
}

/// Masks holding ALiBi slopes only (null: none), as decode takes them.
template <typename S>
ea::Masks<S> alibi_only(const S* slopes) {
  ea::Masks<S> m;
  m.alibi_slopes = slopes;
  return m;
}

}  // namespace ea_test
