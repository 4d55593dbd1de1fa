// SPDX-License-Identifier: MIT
// PagedKVCache's operations, each checked through decode results and through the cache's
// bookkeeping (length, pages(), free_pages()) against a model of it (support/kv_cache_model.hpp):
// fork (shared pages, copy-on-write of a partly filled last page) against independent copies,
// truncate then append against fresh sequences, release and stale ids (a released id never names
// a later sequence), pages_needed against the model, every form of
// append (storage type or float rounded to nearest, maps, blocks, column-major, expressions,
// HeadsView), a full pool, bad input that changes nothing, random operations against the model,
// and bfloat16/half storage against float storage of the same rounded values.
//
// Decode results are bitwise the same for the same keys, values, queries and page size, wherever
// the pages lie (the split-K cuts depend on key positions only), so a sequence built by any
// series of operations must decode bitwise as a fresh sequence of the same tokens.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "common.hpp"
#include "decode.hpp"
#include "errors.hpp"
#include "kv_cache_model.hpp"

namespace test_decode_cache {

using namespace ea_test;
using namespace ea_test::decode;
using namespace ea_test::kv_model;

namespace {

/// Random tokens rounded to the storage type S.
template <typename S>
TokenRows<S> random_tokens(Rng& rng, Index n, Index cols) {
  TokenRows<S> m(n, cols);
  for (Index i = 0; i < n; ++i)
    for (Index j = 0; j < cols; ++j) m(i, j) = static_cast<S>(static_cast<Compute<S>>(rng.normal()));
  return m;
}

/// The sizes of a test's caches.
struct Shape {
  Index kv_heads = 2, d_k = 16, d_v = 8, heads = 4, page = 16;
};

/// A cache and its model, operated on together (every operation checked to succeed on both).
template <typename S>
struct Pair {
  Shape shape;
  ea::PagedKVCache<S> cache;
  CacheModel<S> model;
  Pair(const Shape& sh, Index capacity_tokens)
      : shape(sh),
        cache(sh.kv_heads, sh.d_k, sh.d_v, sh.page, capacity_tokens),
        model(sh.kv_heads, sh.d_k, sh.d_v, sh.page, capacity_tokens) {}
  ea::SequenceId create() {
    const ea::SequenceId id = cache.create();
    REQUIRE(model.can_adopt(id.value));
    model.create(id.value);
    return id;
  }
  ea::SequenceId fork(ea::SequenceId s) {
    const ea::SequenceId id = cache.fork(s);
    REQUIRE(model.can_adopt(id.value));
    model.fork(s.value, id.value);
    return id;
  }
  /// Appends in random pieces of 1 to 40 tokens (one piece when rng is null).
  void append(ea::SequenceId s, const TokenRows<S>& K, const TokenRows<S>& V, Rng* rng = nullptr) {
    Index done = 0;
    while (done < K.rows()) {
      const Index n = rng ? std::min<Index>(K.rows() - done, rng->integer(1, 40)) : K.rows();
      const TokenRows<S> k = K.middleRows(done, n), v = V.middleRows(done, n);
      cache.append(s, k, v);
      REQUIRE(model.append(s.value, k, v));
      done += n;
    }
  }
  void truncate(ea::SequenceId s, Index n) {
    cache.truncate(s, n);
    REQUIRE(model.truncate(s.value, n));
  }
  void erase(ea::SequenceId s, Index begin, Index end) {
    cache.erase(s, begin, end);
    REQUIRE(model.erase(s.value, begin, end));
  }
  void release(ea::SequenceId s) {
    cache.release(s);
    model.release(s.value);
  }
  TokenRows<S> keys(Rng& rng, Index n) const { return random_tokens<S>(rng, n, shape.kv_heads * shape.d_k); }
  TokenRows<S> values(Rng& rng, Index n) const {
    return random_tokens<S>(rng, n, shape.kv_heads * shape.d_v);
  }
  Rows<Compute<S>> queries(Rng& rng, Index n) const {
    return random_matrix<Rows<Compute<S>>>(rng, n, shape.heads * shape.d_k);
  }
};

/// The option sets every decode comparison runs under.
std::vector<ea::Options> option_sets() {
  ea::Options causal;
  causal.causal = true;
  ea::Options windowed = causal;
  windowed.window_left = 40;
  windowed.softcap = 20;
  ea::Options full;
  full.threads = 2;
  return {causal, windowed, full};
}

/// CHECKs that sequence s of the pair decodes bitwise as a fresh sequence of the model's tokens
/// (T_q = 1 and 3 new tokens, under every option set).
template <typename S>
void check_decodes_as_fresh(Rng& rng, const Pair<S>& p, ea::SequenceId s, const char* what) {
  CAPTURE(what);
  CAPTURE(s.value);
  for (const Index tq : {1, 3}) {
    const auto Q = p.queries(rng, tq);
    for (const ea::Options& opt : option_sets()) {
      CAPTURE(tq);
      CAPTURE(opt.causal);
      const auto got = decode_sequence(p.cache, s, Q, opt);
      const auto want = decode_model(p.model, s.value, Q, opt);
      CHECK(same_bits(got.out, want.out));
      CHECK(same_bits(got.lse, want.lse));
    }
  }
}

#define CHECK_CACHE(pair)                                                \
  do {                                                                   \
    const std::string ea_why_ = check_cache((pair).cache, (pair).model); \
    CHECK_MESSAGE(ea_why_.empty(), ea_why_);                             \
  } while (false)

Index pages_for(Index tokens, Index page) { return (tokens + page - 1) / page; }

}  // namespace

TEST_CASE_TEMPLATE("decode cache: forked sequences decode as independent copies", S, float, double,
                   Eigen::bfloat16, Eigen::half) {
  Rng rng(6101);
  for (const Index page : {16, 128}) {
    // A prefix whose last page is partly filled, and one that ends on a page boundary.
    for (const Index prefix : {page + 5, 2 * page}) {
      for (const bool parent_first : {true, false}) {
        Shape sh;
        sh.page = page;
        Pair<S> p(sh, 12 * page);
        CAPTURE(page);
        CAPTURE(prefix);
        CAPTURE(parent_first);
        const bool partial = prefix % page != 0;
        const Index full_pages = prefix / page;
        const auto parent = p.create();
        p.append(parent, p.keys(rng, prefix), p.values(rng, prefix), &rng);
        CHECK_CACHE(p);
        const Index free0 = p.cache.free_pages();
        CHECK(free0 == p.cache.num_pages() - pages_for(prefix, page));

        // A fork shares every page and takes none.
        const auto child = p.fork(parent);
        CHECK(child != parent);
        CHECK(p.cache.length(child) == prefix);
        CHECK(p.cache.pages(child) == p.cache.pages(parent));
        CHECK(p.cache.free_pages() == free0);
        CHECK_CACHE(p);
        check_decodes_as_fresh(rng, p, child, "fork before appending");
        const std::vector<std::int32_t> shared = p.cache.pages(parent);

        // Different tokens to each: the first writer copies the shared, partly filled last page
        // (one more page taken), the second then owns the original and writes into it.
        const Index n_first = 7, n_second = page + 3;
        const auto first = parent_first ? parent : child, second = parent_first ? child : parent;
        p.append(first, p.keys(rng, n_first), p.values(rng, n_first));
        const Index taken_first =
            pages_for(prefix + n_first, page) - pages_for(prefix, page) + (partial ? 1 : 0);
        CHECK(p.cache.free_pages() == free0 - taken_first);
        const auto pf = p.cache.pages(first);
        CHECK(std::equal(shared.begin(), shared.begin() + full_pages, pf.begin()));
        if (partial) CHECK(pf[static_cast<size_t>(full_pages)] != shared[static_cast<size_t>(full_pages)]);
        CHECK(p.cache.pages(second) == shared);  // untouched
        CHECK_CACHE(p);

        p.append(second, p.keys(rng, n_second), p.values(rng, n_second));
        const Index taken_second = pages_for(prefix + n_second, page) - pages_for(prefix, page);
        CHECK(p.cache.free_pages() == free0 - taken_first - taken_second);
        const auto ps = p.cache.pages(second);
        CHECK(std::equal(shared.begin(), shared.end(), ps.begin()));  // wrote into the original pages
        CHECK(std::equal(shared.begin(), shared.begin() + full_pages, p.cache.pages(first).begin()));
        CHECK_CACHE(p);
        check_decodes_as_fresh(rng, p, parent, "parent after both appended");
        check_decodes_as_fresh(rng, p, child, "child after both appended");

        // A fork of the fork, then its parent released: the pages stay with the grandchild.
        const auto grandchild = p.fork(child);
        const Index free1 = p.cache.free_pages();
        p.release(child);
        CHECK(p.cache.free_pages() == free1);
        CHECK_CACHE(p);
        check_decodes_as_fresh(rng, p, grandchild, "grandchild after its parent's release");
      }
    }
  }
}

TEST_CASE_TEMPLATE("decode cache: truncate then append equals a fresh sequence", S, float, Eigen::bfloat16) {
  Rng rng(6102);
  Shape sh;
  sh.page = 32;
  const Index P = sh.page, L = 3 * P + 5;
  for (const Index n : {Index(0), Index(1), P - 1, P, P + 1, 2 * P, L - 1, L}) {
    CAPTURE(n);
    Pair<S> p(sh, 8 * P);
    const auto s = p.create();
    p.append(s, p.keys(rng, L), p.values(rng, L), &rng);
    const Index free0 = p.cache.free_pages();
    const auto pages0 = p.cache.pages(s);
    p.truncate(s, n);
    CHECK(p.cache.length(s) == n);
    const auto pages1 = p.cache.pages(s);
    REQUIRE(static_cast<Index>(pages1.size()) == pages_for(n, P));
    CHECK(std::equal(pages1.begin(), pages1.end(), pages0.begin()));
    CHECK(p.cache.free_pages() == free0 + static_cast<Index>(pages0.size() - pages1.size()));
    CHECK_CACHE(p);
    if (n > 0) check_decodes_as_fresh(rng, p, s, "truncated");
    const Index m = P / 2 + 3;
    p.append(s, p.keys(rng, m), p.values(rng, m), &rng);
    CHECK(p.cache.length(s) == n + m);
    CHECK(p.cache.free_pages() == free0 + static_cast<Index>(pages0.size()) - pages_for(n + m, P));
    CHECK_CACHE(p);
    check_decodes_as_fresh(rng, p, s, "truncated, then appended");
    // Truncating to the length changes nothing.
    const auto pages2 = p.cache.pages(s);
    p.truncate(s, n + m);
    CHECK(p.cache.pages(s) == pages2);
    CHECK_CACHE(p);
  }
}

TEST_CASE_TEMPLATE("decode cache: a truncated fork leaves the other sequence its tokens", S, float,
                   Eigen::bfloat16) {
  Rng rng(6110);
  Shape sh;
  sh.page = 32;
  const Index P = sh.page, L = 3 * P + 5;
  Pair<S> p(sh, 10 * P);
  const auto parent = p.create();
  p.append(parent, p.keys(rng, L), p.values(rng, L), &rng);
  const auto Q = p.queries(rng, 2);
  ea::Options opt;
  opt.causal = true;
  const auto parent_before = decode_sequence(p.cache, parent, Q, opt);
  const auto parent_pages = p.cache.pages(parent);
  const auto child = p.fork(parent);
  const Index free0 = p.cache.free_pages();
  // Mid-page: every page is still held by the parent, so nothing is freed.
  p.truncate(child, P + 1);
  CHECK(p.cache.free_pages() == free0);
  CHECK(p.cache.pages(child) == std::vector<std::int32_t>(parent_pages.begin(), parent_pages.begin() + 2));
  CHECK(p.cache.pages(parent) == parent_pages);
  CHECK_CACHE(p);
  // The child's next token goes into a copy of its (shared) last page.
  p.append(child, p.keys(rng, 5), p.values(rng, 5));
  CHECK(p.cache.free_pages() == free0 - 1);
  CHECK(p.cache.pages(child)[0] == parent_pages[0]);
  CHECK(p.cache.pages(child)[1] != parent_pages[1]);
  CHECK_CACHE(p);
  const auto parent_after = decode_sequence(p.cache, parent, Q, opt);
  CHECK(same_bits(parent_after.out, parent_before.out));
  CHECK(same_bits(parent_after.lse, parent_before.lse));
  check_decodes_as_fresh(rng, p, child, "truncated fork, appended");
  // The parent truncated to 0 frees the pages the child does not hold (all but page 0).
  const auto child_before = decode_sequence(p.cache, child, Q, opt);
  p.truncate(parent, 0);
  CHECK(p.cache.pages(parent).empty());
  CHECK(p.cache.free_pages() == free0 - 1 + static_cast<Index>(parent_pages.size()) - 1);
  CHECK_CACHE(p);
  const auto child_after = decode_sequence(p.cache, child, Q, opt);
  CHECK(same_bits(child_after.out, child_before.out));
  CHECK(same_bits(child_after.lse, child_before.lse));
  // A fork truncated to a page boundary writes its next token into a new page of its own.
  const auto other = p.fork(child);
  const Index free1 = p.cache.free_pages();
  p.truncate(other, P);
  p.append(other, p.keys(rng, 1), p.values(rng, 1));
  CHECK(p.cache.free_pages() == free1 - 1);
  CHECK(p.cache.pages(other)[0] == p.cache.pages(child)[0]);
  CHECK_CACHE(p);
  check_decodes_as_fresh(rng, p, other, "fork truncated to a page boundary, appended");
  check_decodes_as_fresh(rng, p, child, "its parent");
}

TEST_CASE_TEMPLATE("decode cache: erase keeps the tokens before and after the range, as a fresh sequence", S,
                   float, Eigen::bfloat16) {
  // Whole pages from a page boundary (no copy), whole pages from inside a page (its kept tokens
  // copied into the page holding `end`), any other count (tokens moved down), the tail
  // (truncate), an empty range; on a sequence alone and on one sharing its pages with a fork,
  // whose tokens and pages stay as they were.
  Rng rng(6120);
  Shape sh;
  sh.page = 16;
  const Index P = sh.page, L = 5 * P + 7;
  struct Range {
    Index begin, end;
  };
  const Range ranges[] = {{P, 3 * P}, {4, 4 + 2 * P}, {5, 5 + P}, {3, 30}, {2 * P + 1, 2 * P + 2},
                          {0, P + 3}, {L - 9, L},     {0, L},     {7, 7}};
  for (const bool forked : {false, true}) {
    for (const Range& range : ranges) {
      CAPTURE(forked);
      CAPTURE(range.begin);
      CAPTURE(range.end);
      Pair<S> p(sh, 16 * P);
      const auto s = p.create();
      p.append(s, p.keys(rng, L), p.values(rng, L), &rng);
      ea::SequenceId other;
      std::vector<std::int32_t> other_pages;
      if (forked) {
        other = p.fork(s);
        other_pages = p.cache.pages(other);
      }
      const Index free0 = p.cache.free_pages();
      p.erase(s, range.begin, range.end);
      const Index n = range.end - range.begin;
      CHECK(p.cache.length(s) == L - n);
      CHECK_CACHE(p);
      if (!forked && n % P == 0 && range.begin % P == 0)  // whole pages, nothing copied
        CHECK(p.cache.free_pages() == free0 + n / P);
      if (forked) {
        CHECK(p.cache.pages(other) == other_pages);
        check_decodes_as_fresh(rng, p, other, "the fork of an erased sequence");
      }
      if (L - n > 0) check_decodes_as_fresh(rng, p, s, "erased");
      p.append(s, p.keys(rng, P + 2), p.values(rng, P + 2), &rng);
      CHECK_CACHE(p);
      check_decodes_as_fresh(rng, p, s, "erased, then appended");
    }
  }
}

TEST_CASE("decode cache: erase of a range outside the tokens, or of a released sequence, throws") {
  Rng rng(6121);
  Shape sh;
  Pair<float> p(sh, 4 * sh.page);
  const auto s = p.create();
  p.append(s, p.keys(rng, 20), p.values(rng, 20));
  const auto pages = p.cache.pages(s);
  for (const auto& range : std::vector<std::pair<Index, Index>>{{-1, 3}, {5, 4}, {3, 21}}) {
    const Index begin = range.first, end = range.second;
    CAPTURE(begin);
    CAPTURE(end);
    try {
      p.cache.erase(s, begin, end);
      CHECK_MESSAGE(false, "no exception");
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      CHECK_MESSAGE(what.find("PagedKVCache::erase") != std::string::npos, what);
      CHECK_MESSAGE(
          what.find("[" + std::to_string(begin) + ", " + std::to_string(end) + ")") != std::string::npos,
          what);
    }
    CHECK(p.cache.length(s) == 20);
    CHECK(p.cache.pages(s) == pages);
  }
  // A fork sharing every page, and no free page for the copy erase must make first.
  Pair<float> full(sh, 2 * sh.page);
  const auto a = full.create();
  full.append(a, full.keys(rng, 2 * sh.page), full.values(rng, 2 * sh.page));
  full.fork(a);
  CHECK_THROWS_AS(full.cache.erase(a, 3, 5), std::invalid_argument);
  CHECK(!full.model.erase(a.value, 3, 5));
  CHECK_CACHE(full);
  p.release(s);
  CHECK_THROWS_AS(p.cache.erase(s, 0, 1), std::invalid_argument);
}

TEST_CASE("decode cache: a released id is stale for good, even when create() reuses its slot") {
  Rng rng(6103);
  Shape sh;
  Pair<float> p(sh, 10 * sh.page);
  const Index P = sh.page;
  const auto a = p.create(), b = p.create();
  p.append(a, p.keys(rng, 2 * P + 3), p.values(rng, 2 * P + 3), &rng);
  p.append(b, p.keys(rng, P), p.values(rng, P), &rng);
  const auto Q = p.queries(rng, 1);
  ea::Options opt;
  opt.causal = true;
  const auto b_before = decode_sequence(p.cache, b, Q, opt);
  const Index free0 = p.cache.free_pages();
  p.release(a);
  CHECK(p.cache.free_pages() == free0 + 3);
  CHECK_CACHE(p);

  // Every use of an id that names no sequence throws, names the id, says why and changes nothing:
  // `a` released (its slot free), never created, the default id; then (below) `a` once more,
  // after create() has put a new sequence into its slot.
  const auto k1 = p.keys(rng, 1), v1 = p.values(rng, 1);
  Rows<float> out = Rows<float>::Constant(1, sh.heads * sh.d_v, 7.f);
  const auto every_use_throws = [&](ea::SequenceId dead, const std::string& why) {
    CAPTURE(dead.value);
    CAPTURE(why);
    const ea::SequenceId batch[2] = {b, dead};
    const std::int64_t cu[3] = {0, 1, 1};
    const std::vector<std::function<void()>> uses = {
        [&] { p.cache.append(dead, k1, v1); },
        [&] {
          p.cache.append(dead, ea::HeadsView<const float>::bthd(k1.data(), 1, 1, sh.kv_heads, sh.d_k),
                         ea::HeadsView<const float>::bthd(v1.data(), 1, 1, sh.kv_heads, sh.d_v));
        },
        [&] { (void)p.cache.fork(dead); },
        [&] { p.cache.truncate(dead, 0); },
        [&] { p.cache.release(dead); },
        [&] { (void)p.cache.length(dead); },
        [&] { (void)p.cache.pages(dead); },
        [&] { (void)p.cache.pages_needed(dead, 1); },
        [&] { (void)ea::attention_decode(p.cache, dead, Q, opt); },
        [&] {
          (void)ea::attention_decode(p.cache, std::vector<ea::SequenceId>{b, dead}, Q, {0, 1, 1}, opt);
        },
        [&] {
          ea::attention_decode_into(p.cache, batch, 2, ea_test::side_by_side(Q, p.cache.d_k()), cu, out, opt);
        },
    };
    for (std::size_t u = 0; u < uses.size(); ++u) {
      CAPTURE(u);
      const std::string msg = invalid_argument_message(uses[u]);
      CAPTURE(msg);
      CHECK(msg.find("sequence " + std::to_string(dead.value) + " is not in the cache") != std::string::npos);
      CHECK(msg.find(why) != std::string::npos);
      CHECK_CACHE(p);
    }
    CHECK((out.array() == 7.f).all());
  };
  every_use_throws(a, ": it was released");
  every_use_throws(ea::SequenceId{1000}, "(never created)");
  every_use_throws(ea::SequenceId{}, "(SequenceId{} names no sequence)");
  const auto b_after = decode_sequence(p.cache, b, Q, opt);
  CHECK(same_bits(b_after.out, b_before.out));

  // create() reuses a's slot (the only free one) under another id: a names it no more.
  const auto c = p.create();
  CHECK(c != a);
  CHECK(c != b);
  CHECK(p.cache.length(c) == 0);
  CHECK(p.cache.pages(c).empty());
  every_use_throws(a, ": it was released (its slot 0 now holds sequence " + std::to_string(c.value) + ")");
  p.append(c, p.keys(rng, 3), p.values(rng, 3));
  CHECK_CACHE(p);
  check_decodes_as_fresh(rng, p, c, "the sequence in a reused slot");
  CHECK_THROWS_AS(p.cache.append(a, k1, v1), std::invalid_argument);
  CHECK(p.cache.length(c) == 3);

  // Released while forked: the pages stay with the fork until it is released too; the released
  // parent cannot be forked, and the fork's own id outlives it.
  const auto d = p.fork(b);
  CHECK(d != b);
  const Index free1 = p.cache.free_pages();
  p.release(b);
  CHECK(p.cache.free_pages() == free1);
  const auto d_now = decode_sequence(p.cache, d, Q, opt);
  CHECK(same_bits(d_now.out, b_before.out));
  CHECK_THROWS_WITH_AS(
      (void)p.cache.fork(b),
      doctest::Contains(
          ("fork: sequence " + std::to_string(b.value) + " is not in the cache: it was released").c_str()),
      std::invalid_argument);
  // Nor after its slot went to a fork of d.
  const auto e = p.fork(d);
  CHECK(e != b);
  CHECK_THROWS_WITH_AS((void)p.cache.fork(b), doctest::Contains("it was released (its slot"),
                       std::invalid_argument);
  p.release(e);
  CHECK(p.cache.free_pages() == free1);
  CHECK_CACHE(p);
  p.release(d);
  CHECK(p.cache.free_pages() == free1 + 1);
  p.release(c);
  CHECK(p.cache.free_pages() == p.cache.num_pages());
  CHECK_CACHE(p);
}

TEST_CASE("decode cache: many create/release cycles hand out new ids, up to a slot's wrap-around") {
  ea::PagedKVCache<float> cache(1, 4, 4, 16, 64);
  const Rows<float> k = Rows<float>::Ones(3, 4), v = Rows<float>::Ones(3, 4);
  // One sequence live at a time: every create reuses slot 0 under the next of its 2^15 generations.
  constexpr std::int32_t kGenerations = 1 << 15;
  std::set<std::int32_t> seen;
  const ea::SequenceId first = cache.create();
  ea::SequenceId previous = first;
  for (std::int32_t cycle = 1; cycle < kGenerations; ++cycle) {
    cache.append(previous, k, v);
    cache.release(previous);
    const ea::SequenceId s = cache.create();
    if (s.value < 0 || !seen.insert(s.value).second || s == first) {
      CAPTURE(cycle);
      CAPTURE(s.value);
      FAIL("create() handed out a negative or an earlier id");
    }
    if (cycle % 4096 == 0) {  // a few old ids throw (not all: that would be quadratic)
      CAPTURE(cycle);
      CHECK_THROWS_WITH_AS((void)cache.length(previous), doctest::Contains("it was released"),
                           std::invalid_argument);
      CHECK_THROWS_AS((void)cache.length(first), std::invalid_argument);
      CHECK_THROWS_AS(cache.append(first, k, v), std::invalid_argument);
    }
    previous = s;
  }
  CHECK(cache.length(previous) == 0);
  CHECK(cache.free_pages() == cache.num_pages());
  // The 2^15-th release of the slot wraps its generation: the documented limit (SequenceId), where
  // the first id names the slot's sequence again.
  cache.release(previous);
  CHECK(cache.create() == first);

  // Slots are reused oldest-released first: of two released slots, the one released earlier.
  ea::PagedKVCache<float> two(1, 4, 4, 16, 64);
  const auto x = two.create(), y = two.create(), z = two.create();
  two.release(y);
  two.release(x);
  const auto y2 = two.create(), x2 = two.create();
  CHECK(two.pages_needed(z, 1) == 1);
  CHECK_THROWS_WITH_AS(
      (void)two.length(y),
      doctest::Contains(("its slot 1 now holds sequence " + std::to_string(y2.value)).c_str()),
      std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      (void)two.length(x),
      doctest::Contains(("its slot 0 now holds sequence " + std::to_string(x2.value)).c_str()),
      std::invalid_argument);
}

TEST_CASE("decode cache: at most 65536 sequences at once") {
  ea::PagedKVCache<float> cache(1, 4, 4, 16, 0);
  std::vector<ea::SequenceId> ids;
  for (int i = 0; i < 65536; ++i) ids.push_back(cache.create());
  CHECK_THROWS_WITH_AS((void)cache.create(), doctest::Contains("65536 sequences at once"), std::length_error);
  CHECK_THROWS_AS((void)cache.fork(ids[7]), std::length_error);
  CHECK(cache.length(ids[7]) == 0);
  // Releasing one makes room, under a new id.
  cache.release(ids[9]);
  const auto s = cache.create();
  CHECK(s != ids[9]);
  CHECK(cache.length(s) == 0);
  CHECK_THROWS_AS((void)cache.length(ids[9]), std::invalid_argument);
}

TEST_CASE_TEMPLATE("decode cache: every form of append stores the same tokens", S, float, double,
                   Eigen::bfloat16, Eigen::half) {
  using T = Compute<S>;
  Rng rng(6104);
  constexpr Index kvh = 2, dk = 5, dv = 3, T_new = 37, kw = kvh * dk, vw = kvh * dv;
  ea::PagedKVCache<S> cache(kvh, dk, dv, 16, 40 * 48);
  // Float tokens, not rounded: appending them rounds to nearest into S.
  const Rows<float> Kf = random_matrix<Rows<float>>(rng, T_new, kw),
                    Vf = random_matrix<Rows<float>>(rng, T_new, vw);
  TokenRows<S> Ks(T_new, kw), Vs(T_new, vw);
  for (Index i = 0; i < T_new; ++i) {
    for (Index j = 0; j < kw; ++j) Ks(i, j) = S(Kf(i, j));
    for (Index j = 0; j < vw; ++j) Vs(i, j) = S(Vf(i, j));
  }

  std::vector<std::pair<std::string, std::function<void(ea::SequenceId)>>> forms;
  auto form = [&](std::string name, std::function<void(ea::SequenceId)> f) { forms.emplace_back(name, f); };
  form("matrix of the storage type", [&](ea::SequenceId s) { cache.append(s, Ks, Vs); });
  form("float matrix", [&](ea::SequenceId s) { cache.append(s, Kf, Vf); });
  form("column-major float", [&](ea::SequenceId s) {
    const Eigen::MatrixXf K = Kf, V = Vf;
    cache.append(s, K, V);
  });
  form("column-major storage type, transposed view", [&](ea::SequenceId s) {
    const Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic> Kt = Ks.transpose(), Vt = Vs.transpose();
    cache.append(s, Kt.transpose(), Vt.transpose());
  });
  form("maps with padded rows", [&](ea::SequenceId s) {
    std::vector<float> kbuf(static_cast<size_t>(T_new * (kw + 3)), -9.f),
        vbuf(static_cast<size_t>(T_new * (vw + 1)), -9.f);
    Eigen::Map<Rows<float>, 0, Eigen::OuterStride<>>(kbuf.data(), T_new, kw, Eigen::OuterStride<>(kw + 3)) =
        Kf;
    Eigen::Map<Rows<float>, 0, Eigen::OuterStride<>>(vbuf.data(), T_new, vw, Eigen::OuterStride<>(vw + 1)) =
        Vf;
    cache.append(s,
                 Eigen::Map<const Rows<float>, 0, Eigen::OuterStride<>>(kbuf.data(), T_new, kw,
                                                                        Eigen::OuterStride<>(kw + 3)),
                 Eigen::Map<const Rows<float>, 0, Eigen::OuterStride<>>(vbuf.data(), T_new, vw,
                                                                        Eigen::OuterStride<>(vw + 1)));
  });
  form("maps with an inner stride", [&](ea::SequenceId s) {
    using Strided = Eigen::Map<const Rows<S>, 0, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>>;
    TokenRows<S> kbuf(T_new, 2 * kw), vbuf(T_new, 2 * vw);
    for (Index j = 0; j < kw; ++j) kbuf.col(2 * j) = Ks.col(j);
    for (Index j = 0; j < vw; ++j) vbuf.col(2 * j) = Vs.col(j);
    cache.append(s, Strided(kbuf.data(), T_new, kw, {2 * kw, 2}),
                 Strided(vbuf.data(), T_new, vw, {2 * vw, 2}));
  });
  form("blocks", [&](ea::SequenceId s) {
    Eigen::MatrixXf K = Eigen::MatrixXf::Constant(T_new + 4, kw + 2, -9.f),
                    V = Eigen::MatrixXf::Constant(T_new + 1, vw + 5, -9.f);
    K.block(3, 1, T_new, kw) = Kf;
    V.block(1, 4, T_new, vw) = Vf;
    cache.append(s, K.block(3, 1, T_new, kw), V.block(1, 4, T_new, vw));
  });
  form("expressions",
       [&](ea::SequenceId s) { cache.append(s, Kf * 1.0f, Vf + Rows<float>::Zero(T_new, vw)); });
  form("HeadsView<const S>::bthd over the matrices", [&](ea::SequenceId s) {
    cache.append(s, ea::HeadsView<const S>::bthd(Ks.data(), 1, T_new, kvh, dk),
                 ea::HeadsView<const S>::bthd(Vs.data(), 1, T_new, kvh, dv));
  });
  form("HeadsView<const float>::bthd", [&](ea::SequenceId s) {
    cache.append(s, ea::HeadsView<const float>::bthd(Kf.data(), 1, T_new, kvh, dk),
                 ea::HeadsView<const float>::bthd(Vf.data(), 1, T_new, kvh, dv));
  });
  form("HeadsView<const S>::bhtd", [&](ea::SequenceId s) {
    std::vector<S> kb(static_cast<size_t>(T_new * kw)), vb(static_cast<size_t>(T_new * vw));
    for (Index h = 0; h < kvh; ++h)
      for (Index t = 0; t < T_new; ++t) {
        for (Index c = 0; c < dk; ++c) kb[static_cast<size_t>((h * T_new + t) * dk + c)] = Ks(t, h * dk + c);
        for (Index c = 0; c < dv; ++c) vb[static_cast<size_t>((h * T_new + t) * dv + c)] = Vs(t, h * dv + c);
      }
    cache.append(s, ea::HeadsView<const S>::bhtd(kb.data(), 1, kvh, T_new, dk),
                 ea::HeadsView<const S>::bhtd(vb.data(), 1, kvh, T_new, dv));
  });
  form("pieces of every kind", [&](ea::SequenceId s) {
    cache.append(s, Ks.topRows(10), Vs.topRows(10));
    cache.append(s, Kf.middleRows(10, 0), Vf.middleRows(10, 0));  // no token
    cache.append(s, Kf.middleRows(10, 9), Vf.middleRows(10, 9));
    const Eigen::MatrixXf K = Kf.middleRows(19, 7), V = Vf.middleRows(19, 7);
    cache.append(s, K, V);
    cache.append(s, ea::HeadsView<const float>::bthd(Kf.data() + 26 * kw, 1, 11, kvh, dk),
                 ea::HeadsView<const float>::bthd(Vf.data() + 26 * vw, 1, 11, kvh, dv));
  });

  // Every sequence after another that leaves its pages elsewhere in the pool.
  std::vector<ea::SequenceId> ids;
  for (size_t f = 0; f < forms.size(); ++f) {
    const std::string name = forms[f].first;
    CAPTURE(name);
    const auto spacer = cache.create();
    const Index spacer_tokens = 1 + static_cast<Index>(f % 3) * 10;
    cache.append(spacer, Ks.topRows(spacer_tokens), Vs.topRows(spacer_tokens));
    ids.push_back(cache.create());
    forms[f].second(ids.back());
    REQUIRE(cache.length(ids.back()) == T_new);
    const auto stored = stored_tokens(cache, ids.back());
    CHECK(same_bits(stored.first, Ks));
    CHECK(same_bits(stored.second, Vs));
  }
  // The float form element by element: each is S(x), float rounded to nearest.
  const auto pages = cache.pages(ids[1]);
  for (Index t = 0; t < T_new; ++t) {
    const Index page = pages[static_cast<size_t>(t / 16)];
    for (Index j = 0; j < kw; ++j) CHECK(stored_element(cache, true, page, t % 16, j) == S(Kf(t, j)));
    for (Index j = 0; j < vw; ++j) CHECK(stored_element(cache, false, page, t % 16, j) == S(Vf(t, j)));
  }
  // And all decode alike.
  const Rows<T> Q = random_matrix<Rows<T>>(rng, 2, 4 * dk);
  ea::Options opt;
  opt.causal = true;
  const auto first = decode_sequence(cache, ids[0], Q, opt);
  for (size_t f = 1; f < ids.size(); ++f) {
    const std::string name = forms[f].first;
    CAPTURE(name);
    const auto r = decode_sequence(cache, ids[f], Q, opt);
    CHECK(same_bits(r.out, first.out));
    CHECK(same_bits(r.lse, first.lse));
  }
}

TEST_CASE("decode cache: a full pool refuses the next token and changes nothing") {
  Rng rng(6105);
  Shape sh;
  const Index P = sh.page;
  // 4 pages: capacity_tokens is rounded up to whole pages.
  Pair<float> p(sh, 3 * P + 1);
  CHECK(p.cache.num_pages() == 4);
  const auto s = p.create();
  p.append(s, p.keys(rng, 4 * P), p.values(rng, 4 * P), &rng);
  CHECK(p.cache.free_pages() == 0);
  const auto Q = p.queries(rng, 1);
  ea::Options opt;
  opt.causal = true;
  const auto before = decode_sequence(p.cache, s, Q, opt);
  const auto pages = p.cache.pages(s);
  const auto unchanged = [&] {
    const auto now = decode_sequence(p.cache, s, Q, opt);
    return check_cache(p.cache, p.model).empty() && p.cache.pages(s) == pages && p.cache.length(s) == 4 * P &&
           p.cache.free_pages() == 0 && same_bits(now.out, before.out) && same_bits(now.lse, before.lse);
  };
  const auto k = p.keys(rng, 1), v = p.values(rng, 1);
  CHECK_FALSE(p.model.append(s.value, k, v));
  CHECK(p.cache.pages_needed(s, 1) == 1);
  check_bad_call(
      {"one token more than the pool holds", [&] { p.cache.append(s, k, v); }, {4 * P, 4}, {{"full"}}},
      unchanged);
  // The message in full, singular where a count is one, and no copy-on-write (s shares nothing).
  CHECK(invalid_argument_message([&] { p.cache.append(s, k, v); }) ==
        "EigenAttention::PagedKVCache::append: the cache is full: appending 1 token to sequence " +
            std::to_string(s.value) + " (64 tokens) needs 1 more page of 16 tokens, and 0 of the 4 are free");
  // Nor does a token fit into a fresh sequence or into a fork (which shares the full pages).
  const auto e = p.create();
  check_bad_call({"a token for a new sequence", [&] { p.cache.append(e, k, v); }, {}, {{"full"}}}, unchanged);
  const auto f = p.fork(s);
  check_bad_call({"a token for a fork", [&] { p.cache.append(f, k, v); }, {}, {{"full"}}}, unchanged);
  // Appending nothing to a full pool is fine.
  p.cache.append(s, TokenRows<float>(0, sh.kv_heads * sh.d_k), TokenRows<float>(0, sh.kv_heads * sh.d_v));
  CHECK(unchanged());
  // Releasing makes room again.
  p.release(f);
  p.truncate(s, 4 * P - 1);
  p.append(s, k, v);
  CHECK(p.cache.free_pages() == 0);
  CHECK_CACHE(p);
}

TEST_CASE("decode cache: the copy-on-write page counts toward capacity") {
  Rng rng(6106);
  Shape sh;
  const Index P = sh.page;
  Pair<float> p(sh, 3 * P);  // 3 pages
  const auto a = p.create();
  p.append(a, p.keys(rng, P + 4), p.values(rng, P + 4));  // 2 pages, the last partly filled
  const auto b = p.fork(a);
  CHECK(p.cache.free_pages() == 1);
  const auto Q = p.queries(rng, 1);
  const auto before = decode_sequence(p.cache, a, Q, ea::Options{});
  const auto pages = p.cache.pages(a);
  const auto unchanged = [&] {
    const auto now = decode_sequence(p.cache, a, Q, ea::Options{});
    return check_cache(p.cache, p.model).empty() && p.cache.pages(a) == pages && p.cache.pages(b) == pages &&
           p.cache.free_pages() == 1 && same_bits(now.out, before.out);
  };
  // 13 tokens would fill page 2 of a and need page 3: with the copy of the shared page 2, two
  // pages for one free (without copy-on-write they would fit).
  const auto k13 = p.keys(rng, P - 3), v13 = p.values(rng, P - 3);
  CHECK(p.model.pages_taken(a.value, P - 3) == 2);
  // What a scheduler asks first: 2 pages needed (the copy and a new one), 1 free. Both sequences
  // share the page, so either would copy it; a token that fits the page needs the copy alone.
  CHECK(p.cache.pages_needed(a, P - 3) == 2);
  CHECK(p.cache.pages_needed(b, P - 3) == 2);
  CHECK(p.cache.pages_needed(a, 1) == 1);
  CHECK(p.cache.pages_needed(a, P - 4) == 1);
  CHECK(p.cache.pages_needed(a, 0) == 0);
  CHECK(p.cache.free_pages() == 1);
  check_bad_call({"append to a shared partly filled page, one page short",
                  [&] { p.cache.append(a, k13, v13); },
                  {P - 3, P + 4, 2, 1, 3},
                  {{"full"}, {"copy-on-write"}, {"shared"}}},
                 unchanged);
  CHECK(
      invalid_argument_message([&] { p.cache.append(a, k13, v13); }) ==
      "EigenAttention::PagedKVCache::append: the cache is full: appending 13 tokens to sequence " +
          std::to_string(a.value) +
          " (20 tokens) needs 2 more pages of 16 tokens (one of them a copy of its last page, partly filled "
          "and shared with a fork, that is copied before it is written: copy-on-write), and 1 of the 3 is "
          "free");
  // One token fits: the copy takes the last free page.
  p.append(a, p.keys(rng, 1), p.values(rng, 1));
  CHECK(p.cache.free_pages() == 0);
  CHECK_CACHE(p);
  // b now holds its last page alone: no copy, and no page until the boundary.
  CHECK(p.cache.pages_needed(b, P - 4) == 0);
  CHECK(p.cache.pages_needed(b, P - 3) == 1);
  // Now b owns its last page alone and writes into it without a new page, up to the boundary.
  p.append(b, p.keys(rng, P - 4), p.values(rng, P - 4));
  CHECK(p.cache.free_pages() == 0);
  CHECK_CACHE(p);
  check_decodes_as_fresh(rng, p, a, "a");
  check_decodes_as_fresh(rng, p, b, "b");
  // With no free page, a shared partly filled last page cannot take even one token.
  const auto c = p.fork(a);
  const auto k1 = p.keys(rng, 1), v1 = p.values(rng, 1);
  CHECK(p.cache.pages_needed(c, 1) == 1);
  CHECK(p.cache.pages_needed(a, 1) == 1);
  CHECK(invalid_argument_message([&] { p.cache.append(c, k1, v1); }) ==
        "EigenAttention::PagedKVCache::append: the cache is full: appending 1 token to sequence " +
            std::to_string(c.value) +
            " (21 tokens) needs 1 more page of 16 tokens (a copy of its last page, partly filled and shared "
            "with a fork, that is copied before it is written: copy-on-write), and 0 of the 3 are free");
  CHECK_CACHE(p);
  // Bad arguments: a negative count; a count that would overflow the length.
  CHECK_THROWS_WITH_AS((void)p.cache.pages_needed(a, -1), doctest::Contains("negative: -1"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((void)p.cache.pages_needed(a, std::numeric_limits<std::int64_t>::max()),
                       doctest::Contains("too long"), std::invalid_argument);
}

TEST_CASE("decode cache: bad input throws and leaves the cache unchanged") {
  Rng rng(6107);
  Shape sh;
  sh.kv_heads = 3;
  sh.d_k = 5;
  sh.d_v = 7;
  sh.heads = 6;
  const Index P = sh.page, kw = sh.kv_heads * sh.d_k, vw = sh.kv_heads * sh.d_v;
  Pair<float> p(sh, 8 * P);
  const auto a = p.create();
  p.append(a, p.keys(rng, P + 9), p.values(rng, P + 9), &rng);
  // The target is a fork whose last page is shared and partly filled: a bad append must not copy it.
  const auto s = p.fork(a);
  const auto Q = p.queries(rng, 2);
  ea::Options opt;
  opt.causal = true;
  const auto before = decode_sequence(p.cache, s, Q, opt);
  const auto pages_a = p.cache.pages(a), pages_s = p.cache.pages(s);
  const Index free0 = p.cache.free_pages();
  const auto unchanged = [&] {
    const auto now = decode_sequence(p.cache, s, Q, opt);
    return check_cache(p.cache, p.model).empty() && p.cache.pages(a) == pages_a &&
           p.cache.pages(s) == pages_s && p.cache.free_pages() == free0 && same_bits(now.out, before.out) &&
           same_bits(now.lse, before.lse);
  };
  const Index n = 11;
  const Rows<float> K = random_matrix<Rows<float>>(rng, n, kw), V = random_matrix<Rows<float>>(rng, n, vw);
  const Rows<float> K_wide = random_matrix<Rows<float>>(rng, n, kw + 1);
  const Rows<float> V_narrow = random_matrix<Rows<float>>(rng, n, vw - 2);
  const Rows<float> V_more = random_matrix<Rows<float>>(rng, n + 2, vw);
  using View = ea::HeadsView<const float>;
  // [2, kv_heads, n, d] views (batch 2), and one with kv_heads + 1 heads, one with d_k - 1.
  const std::vector<float> big(static_cast<size_t>(4 * n * (kw + vw) + 64), 0.5f);
  const View k2 = View::bhtd(big.data(), 2, sh.kv_heads, n, sh.d_k),
             v2 = View::bhtd(big.data(), 2, sh.kv_heads, n, sh.d_v);
  const View k_h4 = View::bthd(big.data(), 1, n, sh.kv_heads + 1, sh.d_k);
  const View k_d4 = View::bthd(big.data(), 1, n, sh.kv_heads, sh.d_k - 1);
  const View k_ok = View::bthd(K.data(), 1, n, sh.kv_heads, sh.d_k),
             v_ok = View::bthd(V.data(), 1, n, sh.kv_heads, sh.d_v);

  const std::vector<BadCall> bad = {
      {"K with a column too many", [&] { p.cache.append(s, K_wide, V); }, {n, kw + 1, kw}, {{"K"}, {"d_k"}}},
      {"V with two columns too few",
       [&] { p.cache.append(s, K, V_narrow); },
       {n, vw - 2, vw},
       {{"V"}, {"d_v"}}},
      {"V with more tokens than K",
       [&] { p.cache.append(s, K, V_more); },
       {n, n + 2},
       {{"K"}, {"V"}, {"token"}}},
      {"HeadsView of batch 2", [&] { p.cache.append(s, k2, v2); }, {1}, {{"batch"}}},
      {"HeadsView K of batch 2 only", [&] { p.cache.append(s, k2, v_ok); }, {1}, {{"K"}, {"batch"}}},
      {"HeadsView V of batch 2 only", [&] { p.cache.append(s, k_ok, v2); }, {1}, {{"V"}, {"batch"}}},
      {"HeadsView with kv_heads + 1",
       [&] { p.cache.append(s, k_h4, v_ok); },
       {(sh.kv_heads + 1) * sh.d_k, sh.kv_heads},
       {{"K"}, {"kv_heads"}}},
      {"HeadsView with d_k - 1",
       [&] { p.cache.append(s, k_d4, v_ok); },
       {sh.kv_heads * (sh.d_k - 1), sh.d_k},
       {{"K"}, {"d_k"}}},
      {"truncate beyond the length", [&] { p.cache.truncate(s, P + 10); }, {P + 10, P + 9}, {{"length"}}},
      {"truncate to a negative length", [&] { p.cache.truncate(s, -1); }, {1, P + 9}, {{"length"}}},
      {"truncate far beyond",
       [&] { p.cache.truncate(s, std::int64_t(1) << 40); },
       {std::int64_t(1) << 40},
       {{"length"}}},
  };
  for (const BadCall& b : bad) check_bad_call(b, unchanged);
  // And the same appends succeed with the right shapes (through the HeadsView form).
  p.cache.append(s, k_ok, v_ok);
  REQUIRE(p.model.append(s.value, K, V));
  CHECK(p.cache.free_pages() == free0 - 2);  // a new page, and a copy of the shared last page
  CHECK_CACHE(p);
}

TEST_CASE("decode cache: the constructor rejects bad sizes") {
  using Cache = ea::PagedKVCache<float>;
  const std::vector<BadCall> bad = {
      {"page_size 8", [] { Cache c(2, 4, 4, 8, 64); }, {8, 16, 256}, {{"page_size"}}},
      {"page_size 24", [] { Cache c(2, 4, 4, 24, 64); }, {24}, {{"page_size"}, {"power of two"}}},
      {"page_size 512", [] { Cache c(2, 4, 4, 512, 64); }, {512}, {{"page_size"}}},
      {"page_size 0", [] { Cache c(2, 4, 4, 0, 64); }, {0}, {{"page_size"}}},
      {"page_size -16", [] { Cache c(2, 4, 4, -16, 64); }, {16}, {{"page_size"}}},
      {"page_size 17", [] { Cache c(2, 4, 4, 17, 64); }, {17}, {{"page_size"}}},
      {"kv_heads 0", [] { Cache c(0, 4, 4, 16, 64); }, {0}, {{"kv_heads"}}},
      {"kv_heads -1", [] { Cache c(-1, 4, 4, 16, 64); }, {1}, {{"kv_heads"}}},
      {"d_k 0", [] { Cache c(2, 0, 4, 16, 64); }, {0}, {{"d_k"}}},
      {"d_v -1", [] { Cache c(2, 4, -1, 16, 64); }, {1}, {{"d_v"}}},
      {"capacity -1", [] { Cache c(2, 4, 4, 16, -1); }, {1}, {{"capacity"}}},
  };
  for (const BadCall& b : bad) check_bad_call(b);
  // The edges are fine: every power of two from 16 to 256, d_v 0, capacity 0.
  for (const Index page : {16, 32, 64, 128, 256}) CHECK_NOTHROW(Cache(1, 1, 0, page, 0));
  Cache empty(1, 1, 0, 16, 0);
  CHECK(empty.num_pages() == 0);
  const auto s = empty.create();
  CHECK_THROWS_WITH_AS(empty.append(s, Rows<float>::Ones(1, 1), Rows<float>(1, 0)), doctest::Contains("full"),
                       std::invalid_argument);
}

TEST_CASE_TEMPLATE("decode cache: random operations against the model", S, float, Eigen::bfloat16) {
  Rng rng(6108);
  Shape sh;
  sh.kv_heads = 1;
  sh.d_k = 4;
  sh.d_v = 3;
  sh.heads = 2;
  sh.page = 16;
  Pair<S> p(sh, 10 * sh.page);
  std::vector<ea::SequenceId> live;
  int fulls = 0, cow = 0;
  for (int step = 0; step < 400; ++step) {
    CAPTURE(step);
    const long op = live.empty() ? 0 : rng.integer(0, 9);
    const ea::SequenceId s =
        live.empty() ? ea::SequenceId{}
                     : live[static_cast<size_t>(rng.integer(0, static_cast<long>(live.size()) - 1))];
    if (op == 0 && live.size() < 8) {
      live.push_back(p.create());
    } else if (op <= 4) {
      const Index n = rng.integer(0, 40);
      const auto k = p.keys(rng, n), v = p.values(rng, n);
      const auto pages = all_pages(p.cache, p.model);
      const Index length = p.model.sequence(s.value).length();
      const Index new_pages = pages_for(length + n, sh.page) - pages_for(length, sh.page);
      const Index taken = p.model.pages_taken(s.value, n);
      // What a scheduler sees beforehand says whether the append fits.
      const Index needed = p.cache.pages_needed(s, n);
      CHECK(needed == taken);
      const bool fits = needed <= p.cache.free_pages();
      if (p.model.append(s.value, k, v)) {
        CHECK(fits);
        p.cache.append(s, k, v);
        cow += taken > new_pages;
      } else {
        ++fulls;
        CHECK_FALSE(fits);
        CHECK_THROWS_WITH_AS(p.cache.append(s, k, v), doctest::Contains("full"), std::invalid_argument);
        CHECK(all_pages(p.cache, p.model) == pages);
      }
    } else if (op == 5 && live.size() < 8) {
      live.push_back(p.fork(s));
    } else if (op == 6) {
      p.truncate(s, rng.integer(0, static_cast<long>(p.cache.length(s))));
    } else if (op == 7) {
      p.release(s);
      live.erase(std::find(live.begin(), live.end(), s));
    } else {
      check_decodes_as_fresh(rng, p, s, "random operations");
    }
    CHECK_CACHE(p);
  }
  // The walk reached a full pool and copied shared pages.
  CHECK(fulls > 0);
  CHECK(cow > 0);
}

// bfloat16 and half caches compute in float on values converted exactly from their storage
// (every bfloat16 and half is a float). A float cache holding the same rounded values therefore
// has the same keys and values exactly, and both decodes are float computations of one exact
// result: each within the float error budget of the long-double reference on the rounded values
// (multihead_budget<float>, as decode_vs_reference.cpp holds float caches to), so within twice
// that of each other. No bfloat16/half unit roundoff enters: the rounding happened before the
// problem was posed, and the budget's two "rounding Q and K to T" terms cover nothing here.
TEST_CASE_TEMPLATE("decode cache: bfloat16 and half storage against float storage of the rounded values", S,
                   Eigen::bfloat16, Eigen::half) {
  Rng rng(6109);
  std::vector<Case> cases;
  for (const Index tk : {1, 37, 300, 700}) {
    Case c;
    c.H = 4;
    c.Hkv = 2;
    c.dk = 32;
    c.dv = 16;
    c.page = tk == 300 ? 64 : 16;
    c.Tk = tk;
    c.Tq = tk == 1 ? 1 : 3;
    cases.push_back(c);
  }
  Case extras = cases[2];
  extras.window_left = 100;
  extras.softcap = 15;
  extras.alibi = true;
  extras.causal = false;
  cases.push_back(extras);
  for (const Case& c : cases) {
    CAPTURE(c.describe());
    const Sequence<S> s = make_sequence<S>(rng, c);  // K, V: values S holds exactly
    ea::PagedKVCache<S> low(c.Hkv, c.dk, c.dv, c.page, c.Tk);
    ea::PagedKVCache<float> high(c.Hkv, c.dk, c.dv, c.page, c.Tk);
    const auto a = low.create(), b = high.create();
    append_in_pieces(rng, low, a, s);
    append_in_pieces(rng, high, b, Sequence<float>{s.K, s.V, s.Q, s.slopes, s.sinks});
    const MultiHeadReference ref = reference_of(c, s);
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      const ea::Options opt = options_of(c, kernel, 1);
      const float* slopes = c.alibi ? s.slopes.data() : nullptr;
      const std::int64_t cu[2] = {0, c.Tq};
      Result<float> r_low, r_high;
      ea::attention_decode_into(low, &a, 1, ea_test::side_by_side(s.Q, c.dk), cu, r_low.out, r_low.lse, opt,
                                ea_test::alibi_only(slopes));
      ea::attention_decode_into(high, &b, 1, ea_test::side_by_side(s.Q, c.dk), cu, r_high.out, r_high.lse,
                                opt, ea_test::alibi_only(slopes));
      check_reference(r_low, ref, c, 1, "bfloat16/half storage vs the long-double reference");
      check_reference(r_high, ref, c, 1, "float storage vs the long-double reference");
      check_each_other(r_low, r_high, ref, c);
    }
  }
}

}  // namespace test_decode_cache
