// SPDX-License-Identifier: MIT
// Tree masks for speculative decoding (Masks::mask in the decode calls): T_q drafted tokens,
// appended to a sequence just before the call, each seeing every earlier cached token and the
// drafts its tree row allows. Checked against the long-double reference and against
// attention_heads_into with the equivalent dense T_q x T_k mask (built here: every earlier key
// visible, the tree in the last T_q columns), for random trees and arbitrary boolean rows, GQA,
// masks per sequence and per head, drafts across pages and split-K chunks, every option decode
// takes, every kernel, 1 and 2 threads bitwise; a batch whose sequences have fewer queries than
// the mask (its top-left corner); 16-bit storage; a PagedKVView; a hidden draft's NaN; errors.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common.hpp"
#include "decode.hpp"
#include "errors.hpp"
#include "low_precision.hpp"
#include "multihead_golden.hpp"

namespace test_speculative_decode {

using namespace ea_test;
using namespace ea_test::decode;

namespace {

/// Tree masks [1, Hm, Tq, Tq] (Hm = 1 or H), row-major, as bytes of bool: random trees (each
/// draft sees its ancestors and itself), or, when `arbitrary`, any rows (also rows that see no
/// draft at all).
std::vector<char> random_trees(Rng& rng, Index Hm, Index Tq, bool arbitrary) {
  std::vector<char> m(static_cast<size_t>(Hm * Tq * Tq), 0);
  for (Index h = 0; h < Hm; ++h) {
    char* t = m.data() + h * Tq * Tq;
    if (arbitrary) {
      for (Index i = 0; i < Tq * Tq; ++i) t[i] = rng.integer(0, 2) != 0;
      continue;
    }
    std::vector<Index> parent(static_cast<size_t>(Tq));
    for (Index i = 0; i < Tq; ++i) parent[static_cast<size_t>(i)] = i == 0 ? -1 : rng.integer(-1, i - 1);
    for (Index i = 0; i < Tq; ++i)
      for (Index a = i; a >= 0; a = parent[static_cast<size_t>(a)]) t[i * Tq + a] = 1;
  }
  return m;
}

/// The dense [1, Hm, Tq, Tk] mask equal to a tree mask: every key before the drafts visible.
Array4 dense_of(const std::vector<char>& tree, Index Hm, Index Tq, Index Tk) {
  Array4 a(1, Hm, Tq, Tk);
  for (Index h = 0; h < Hm; ++h)
    for (Index i = 0; i < Tq; ++i)
      for (Index j = 0; j < Tk; ++j)
        a(0, h, i, j) = j < Tk - Tq ? 1 : tree[static_cast<size_t>((h * Tq + i) * Tq + j - (Tk - Tq))];
  return a;
}

const bool* bools(const std::vector<char>& m) { return reinterpret_cast<const bool*>(m.data()); }

/// CHECKs that f throws std::invalid_argument whose message holds every one of `parts`.
template <class F>
void check_throws_message(F&& f, const std::vector<std::string>& parts) {
  const std::string what = invalid_argument_message(f);
  CAPTURE(what);
  for (const std::string& part : parts) CHECK(what.find(part) != std::string::npos);
}

/// attention_heads_into with the dense mask (bottom-right alignment, as decode).
template <typename T>
Result<T> heads_with_mask(const Case& c, const Sequence<T>& s, const ea::Options& opt_in,
                          const Array4& dense) {
  ea::Options opt = opt_in;
  if (opt.kernel == ea::Kernel::Reference) opt.kernel = ea::Kernel::Auto;
  std::vector<char> m(static_cast<size_t>(dense.size()));
  for (Index i = 0; i < dense.size(); ++i) m[static_cast<size_t>(i)] = dense.v[static_cast<size_t>(i)] != 0;
  Result<T> r;
  r.out.resize(c.Tq, c.H * c.dv);
  r.lse.resize(c.Tq, c.H);
  ea::Masks<T> masks = decode_masks(c, s);
  masks.mask = ea::BroadcastView<bool>::per_head(bools(m), 1, dense.n[1], c.Tq, c.Tk);
  ea::attention_heads_into(ea::HeadsView<const T>::bthd(s.Q.data(), 1, c.Tq, c.H, c.dk),
                           ea::HeadsView<const T>::bthd(s.K.data(), 1, c.Tk, c.Hkv, c.dk),
                           ea::HeadsView<const T>::bthd(s.V.data(), 1, c.Tk, c.Hkv, c.dv),
                           ea::HeadsView<T>::bthd(r.out.data(), 1, c.Tq, c.H, c.dv),
                           ea::HeadsView<T>{r.lse.data(), 1, c.H, c.Tq, 1, 0, 1, c.H, 1}, opt, masks);
  return r;
}

/// Decodes case c (Tq drafts at the end of a sequence of Tk) with a tree mask on a cache of S,
/// against the reference and attention_heads_into with the dense mask, and bitwise across threads.
template <typename S>
void check_case(Rng& rng, const Case& c, Index Hm, bool arbitrary, ea::Kernel kernel) {
  using T = Compute<S>;
  const Sequence<S> s = make_sequence<S>(rng, c);
  const std::vector<char> tree = random_trees(rng, Hm, c.Tq, arbitrary);
  const Array4 dense = dense_of(tree, Hm, c.Tq, c.Tk);
  ea::PagedKVCache<S> cache(c.Hkv, c.dk, c.dv, c.page, c.Tk + c.page);
  const auto id = cache.create();
  append_in_pieces(rng, cache, id, s);
  ea::Masks<T> masks = decode_masks(c, s);
  masks.mask = ea::BroadcastView<bool>::per_head(bools(tree), 1, Hm, c.Tq, c.Tq);
  Result<T> r, again;
  const ea::SequenceId ids[1] = {id};
  ea::attention_decode_into(cache, ids, 1, side_by_side(s.Q, c.dk), nullptr, r.out, r.lse,
                            options_of(c, kernel, 1), masks);
  ea::attention_decode_into(cache, ids, 1, side_by_side(s.Q, c.dk), nullptr, again.out, again.lse,
                            options_of(c, kernel, 2), masks);
  EA_CHECK_EQUAL(again.out, r.out);
  EA_CHECK_EQUAL(again.lse, r.lse);

  const MultiHeadReference ref = reference_of(c, s, dense);
  // (A bf16 cache's prefill on bf16 pairs rounds the weights to bf16: low_precision.hpp.)
  check_reference(r, ref, c, 1, "tree-masked decode vs the long-double reference with the dense mask",
                  bf16_pairs<S>(kernel));
  if constexpr (std::is_same_v<S, T>) {
    const Result<T> h = heads_with_mask(c, s, options_of(c, kernel, 1), dense);
    check_each_other(r, h, ref, c);
  }
}

}  // namespace

TEST_CASE_TEMPLATE("speculative decode: tree masks against the dense mask", S, float, double,
                   Eigen::bfloat16) {
  Rng rng(2611);
  const auto kernels = kernels_under_test();
  for (int n = 0; n < 36; ++n) {
    Case c;
    c.Hkv = rng.integer(1, 2);
    c.H = c.Hkv * (Index(1) << rng.integer(0, 3));
    c.dk = n % 5 == 0 ? 1 + rng.integer(0, 12) : 16 * rng.integer(1, 3);
    c.dv = n % 7 == 3 ? 0 : n % 3 == 0 ? c.dk : 1 + rng.integer(0, 30);
    c.page = Index(16) << rng.integer(0, 2);
    c.Tq = rng.integer(1, 9);
    // Drafts inside one page, across a page, and across a split-K chunk (256 keys).
    const Index around[] = {c.Tq, c.Tq + rng.integer(0, 40), 256 + rng.integer(-4, 4),
                            512 + rng.integer(0, 9)};
    c.Tk = std::max(c.Tq, around[rng.integer(0, 3)]);
    if (n % 9 == 4) c.Tk = rng.integer(0, c.Tq - 1);  // more drafts than keys: the first are before key 0
    c.causal = rng.integer(0, 1) != 0;                // implied by a tree; not by arbitrary rows
    if (rng.integer(0, 3) == 0) c.window_left = rng.integer(0, 20);
    if (rng.integer(0, 4) == 0) c.chunk = rng.integer(2, 40);
    if (rng.integer(0, 3) == 0) c.softcap = 10;
    c.alibi = rng.integer(0, 3) == 0;
    c.sinks = n % 4 == 1;
    const Index Hm = rng.integer(0, 1) ? 1 : c.H;
    const bool arbitrary = n % 3 == 2;
    const ea::Kernel kernel = kernels[static_cast<size_t>(n) % kernels.size()];
    CAPTURE(n);
    CAPTURE(c.describe());
    CAPTURE(Hm);
    CAPTURE(arbitrary);
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    check_case<S>(rng, c, Hm, arbitrary, kernel);
  }
}

TEST_CASE("speculative decode: a batch whose sequences take the mask's top-left corner, and a view") {
  using T = float;
  Rng rng(77);
  // Three sequences with 3, 0 and 5 drafts under one [3, 2, 5, 5] mask (M = 5), and one of 1 of
  // them through the same mask: sequence b's T_q x T_q corner is its tree.
  const Index Hkv = 2, H = 2, d = 16, page = 16, M = 5;
  const Index tqs[] = {3, 0, 5}, tks[] = {40, 17, 300};
  const std::vector<char> tree = random_trees(rng, 3 * H, M, false);
  ea::PagedKVCache<T> cache(Hkv, d, d, page, 512);
  std::vector<Sequence<T>> seqs;
  std::vector<ea::SequenceId> ids;
  std::vector<std::int64_t> cu = {0};
  Rows<T> Q(0, H * d);
  for (int b = 0; b < 3; ++b) {
    Case c;
    c.H = H, c.Hkv = Hkv, c.dk = c.dv = d, c.Tk = tks[b], c.Tq = tqs[b], c.page = page;
    seqs.push_back(make_sequence<T>(rng, c));
    ids.push_back(cache.create());
    append_in_pieces(rng, cache, ids.back(), seqs.back());
    cu.push_back(cu.back() + tqs[b]);
    Rows<T> grown(Q.rows() + tqs[b], H * d);
    grown << Q, seqs.back().Q;
    Q = grown;
  }
  ea::Options opt;
  opt.causal = true;
  ea::Masks<T> masks;
  masks.mask = ea::BroadcastView<bool>::per_head(bools(tree), 3, H, M, M);
  const Rows<T> out = ea::attention_decode(cache, ids, Q, cu, opt, masks);
  for (int b = 0; b < 3; ++b) {
    if (tqs[b] == 0) continue;
    Case c;
    c.H = H, c.Hkv = Hkv, c.dk = c.dv = d, c.Tk = tks[b], c.Tq = tqs[b], c.page = page;
    std::vector<char> corner(static_cast<size_t>(H * c.Tq * c.Tq));
    for (Index h = 0; h < H; ++h)
      for (Index i = 0; i < c.Tq; ++i)
        for (Index j = 0; j < c.Tq; ++j)
          corner[static_cast<size_t>((h * c.Tq + i) * c.Tq + j)] =
              tree[static_cast<size_t>(((b * H + h) * M + i) * M + j)];
    const MultiHeadReference ref =
        reference_of(c, seqs[static_cast<size_t>(b)], dense_of(corner, H, c.Tq, c.Tk));
    Result<T> r;
    r.out = out.middleRows(cu[static_cast<size_t>(b)], c.Tq);
    r.lse = Rows<T>::Zero(c.Tq, H);
    for (Index h = 0; h < H; ++h) {
      CAPTURE(b);
      CAPTURE(h);
      EA_CHECK_NEAR(to_long_double(r.out.middleCols(h * d, d)), MatrixLD(ref.out.slice(0, h)),
                    multihead_budget<T>(ref, h).attn);
    }
  }
  // The same pages through a PagedKVView (HND, the cache's layout) with the same mask: the same bits.
  std::vector<std::int32_t> tables(3 * 32, 0);
  std::vector<std::int64_t> lengths;
  for (int b = 0; b < 3; ++b) {
    const auto p = cache.pages(ids[static_cast<size_t>(b)]);
    std::copy(p.begin(), p.end(), tables.begin() + b * 32);
    lengths.push_back(cache.length(ids[static_cast<size_t>(b)]));
  }
  const auto view = ea::PagedKVView<T>::hnd(cache.key_pages(), cache.value_pages(), cache.num_pages(), page,
                                            Hkv, d, d, tables.data(), 32, lengths.data(), 3);
  const Rows<T> via_view = ea::attention_decode(view, Q, cu.data(), opt, masks);
  EA_CHECK_EQUAL(via_view, out);
}

TEST_CASE("speculative decode: the PyTorch golden cases (dense masks whose last T_q columns are trees)") {
  for (const char* name : {"tree_decode_gqa", "tree_decode_batch_per_head"}) {
    const MultiHeadGolden g = load_multihead_golden(multihead_data_dir() / (std::string(name) + ".txt"));
    const Index B = g.Q.n[0], H = g.Q.n[1], Tq = g.Q.n[2], dk = g.Q.n[3], Hkv = g.K.n[1], Tk = g.K.n[2],
                dv = g.V.n[3];
    REQUIRE(g.spec.mask.has_value());
    const Array4& dense = *g.spec.mask;
    const Index Bm = dense.n[0], Hm = dense.n[1];
    // The file's mask: every key before the drafts visible, the tree in the last T_q columns.
    std::vector<char> tree(static_cast<size_t>(Bm * Hm * Tq * Tq));
    for (Index b = 0; b < Bm; ++b)
      for (Index h = 0; h < Hm; ++h)
        for (Index i = 0; i < Tq; ++i) {
          for (Index j = 0; j < Tk - Tq; ++j) REQUIRE(dense(b, h, i, j) == 1);
          for (Index j = 0; j < Tq; ++j)
            tree[static_cast<size_t>(((b * Hm + h) * Tq + i) * Tq + j)] = dense(b, h, i, Tk - Tq + j) != 0;
        }
    MultiHeadSpec spec = g.spec;
    const MultiHeadReference ref = reference_heads(g.Q, g.K, g.V, spec);
    ea::PagedKVCache<double> cache(Hkv, dk, dv, 16, B * (Tk + 16));
    std::vector<ea::SequenceId> ids;
    std::vector<std::int64_t> cu = {0};
    Rows<double> Q(B * Tq, H * dk);
    for (Index b = 0; b < B; ++b) {
      Rows<double> K(Tk, Hkv * dk), V(Tk, Hkv * dv);
      for (Index t = 0; t < Tk; ++t) {
        for (Index h = 0; h < Hkv; ++h) {
          for (Index c = 0; c < dk; ++c) K(t, h * dk + c) = static_cast<double>(g.K(b, h, t, c));
          for (Index c = 0; c < dv; ++c) V(t, h * dv + c) = static_cast<double>(g.V(b, h, t, c));
        }
      }
      for (Index i = 0; i < Tq; ++i)
        for (Index h = 0; h < H; ++h)
          for (Index c = 0; c < dk; ++c) Q(b * Tq + i, h * dk + c) = static_cast<double>(g.Q(b, h, i, c));
      ids.push_back(cache.create());
      cache.append(ids.back(), K, V);
      cu.push_back(cu.back() + Tq);
    }
    ea::Options opt;
    opt.causal = spec.causal;
    if (spec.scale) opt.scale = static_cast<double>(*spec.scale);
    std::vector<double> slopes;
    for (const long double x : spec.alibi) slopes.push_back(static_cast<double>(x));
    ea::Masks<double> masks;
    if (!slopes.empty()) masks.alibi_slopes = slopes.data();
    masks.mask = ea::BroadcastView<bool>::per_head(bools(tree), Bm, Hm, Tq, Tq);
    for (const ea::Kernel kernel : kernels_under_test()) {
      opt.kernel = kernel;
      const Rows<double> out = ea::attention_decode(cache, ids, Q, cu, opt, masks);
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(name);
      CAPTURE(kname);
      for (Index b = 0; b < B; ++b)
        for (Index h = 0; h < H; ++h) {
          CAPTURE(b);
          CAPTURE(h);
          MatrixLD want(Tq, dv);
          for (Index i = 0; i < Tq; ++i)
            for (Index c = 0; c < dv; ++c) want(i, c) = g.out(b, h, i, c);
          EA_CHECK_NEAR(to_long_double(out.block(b * Tq, h * dv, Tq, dv)), want,
                        multihead_budget<double>(ref, b * H + h).attn);
        }
    }
  }
}

TEST_CASE("speculative decode: a draft's NaN reaches only the rows that see it") {
  using T = float;
  Rng rng(5);
  Case c;
  c.H = 2, c.Hkv = 1, c.dk = 8, c.dv = 8, c.Tk = 30, c.Tq = 4, c.causal = false;
  Sequence<T> s = make_sequence<T>(rng, c);
  // Drafts 0..3: parents -1, 0, 0, 2; draft 1's value is NaN and its key Inf.
  const std::vector<char> tree = {1, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 0, 1, 0, 1, 1};
  s.V(c.Tk - 3, 0) = std::numeric_limits<T>::quiet_NaN();
  s.K(c.Tk - 3, 1) = std::numeric_limits<T>::infinity();
  for (const ea::Kernel kernel : kernels_under_test()) {
    ea::PagedKVCache<T> cache(1, c.dk, c.dv, 16, 64);
    const auto id = cache.create();
    cache.append(id, s.K, s.V);
    ea::Masks<T> masks;
    masks.mask = ea::BroadcastView<bool>::per_sequence(bools(tree), 1, 4, 4);
    const Rows<T> out = ea::attention_decode(cache, id, s.Q, options_of(c, kernel), masks);
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    for (Index i = 0; i < 4; ++i) {
      CAPTURE(i);
      CHECK(out.row(i).array().isNaN().any() == (i == 1));
      if (i != 1) CHECK(out.row(i).array().isFinite().all());
    }
  }
}

TEST_CASE("speculative decode: tree mask errors") {
  using T = float;
  ea::PagedKVCache<T> cache(1, 8, 8, 16, 64);
  const auto id = cache.create();
  cache.append(id, Rows<T>::Ones(10, 8), Rows<T>::Ones(10, 8));
  const Rows<T> Q = Rows<T>::Ones(3, 16);  // H = 2, T_q = 3
  std::vector<char> m(2 * 2 * 4 * 4, 1);
  ea::Masks<T> masks;
  masks.mask = ea::BroadcastView<bool>::per_head(bools(m), 1, 1, 2, 2);  // M = 2 < T_q = 3
  check_throws_message([&] { (void)ea::attention_decode(cache, id, Q, {}, masks); },
                       {"mask (in decode, the tree mask of speculative decoding) is [1, 1, 2, 2]",
                        "[1, 2 or 1, M, M] with M >= 3"});
  masks.mask = ea::BroadcastView<bool>::per_head(bools(m), 1, 1, 3, 4);  // not square
  check_throws_message([&] { (void)ea::attention_decode(cache, id, Q, {}, masks); }, {"is [1, 1, 3, 4]"});
  masks.mask = ea::BroadcastView<bool>::per_head(bools(m), 2, 1, 4, 4);  // batch 2, one sequence
  check_throws_message([&] { (void)ea::attention_decode(cache, id, Q, {}, masks); }, {"is [2, 1, 4, 4]"});
  masks.mask = ea::BroadcastView<bool>::per_head(bools(m), 1, 3, 4, 4);  // 3 heads of 2
  check_throws_message([&] { (void)ea::attention_decode(cache, id, Q, {}, masks); }, {"is [1, 3, 4, 4]"});
  // A bias still throws; a mask of M = 4 >= 3 is fine.
  masks.mask = ea::BroadcastView<bool>::per_head(bools(m), 1, 2, 4, 4);
  CHECK_NOTHROW((void)ea::attention_decode(cache, id, Q, {}, masks));
  std::vector<T> bias(16, 0);
  masks.bias = ea::BroadcastView<T>::matrix(bias.data(), 4, 4);
  check_throws_message([&] { (void)ea::attention_decode(cache, id, Q, {}, masks); },
                       {"masks.bias and masks.key_lengths must be empty"});
}

}  // namespace test_speculative_decode
