// SPDX-License-Identifier: MIT
// The latent cache of MLA absorbed decode (PagedKVCache::latent, PagedKVView::latent): one KV
// head whose keys [c; k_rope] are stored once and whose values are their first d_v elements.
// Decode on it is bitwise equal to the same call on a cache holding K and V apart, for every
// storage type, kernel and thread count, T_q of 1 and 2 (multi-token prediction), many query
// heads (the GEMM path) and few (the streaming path); so are fork, truncate and erase against a
// fresh sequence; the PyTorch golden case (test/data/multihead/mla_absorbed.txt, the absorbed
// form checked there against the unabsorbed computation); errors.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common.hpp"
#include "decode.hpp"
#include "errors.hpp"
#include "multihead_golden.hpp"

namespace test_latent_cache {

using namespace ea_test;
using namespace ea_test::decode;

namespace {

/// Random latent rows (T x dk) rounded to the storage type S.
template <typename S>
Rows<Compute<S>> latent_rows(Rng& rng, Index T, Index dk) {
  Rows<Compute<S>> m = random_matrix<Rows<Compute<S>>>(rng, T, dk);
  return m.unaryExpr([](Compute<S> x) { return rounded<S>(x); });
}

/// A latent cache and a K/V cache holding the same tokens (V = the first dv columns of K).
template <typename S>
struct Twin {
  ea::PagedKVCache<S> latent, apart;
  Index dv;
  Twin(Index dk, Index dv_, Index page, Index capacity)
      : latent(ea::PagedKVCache<S>::latent(dk, dv_, page, capacity)),
        apart(1, dk, dv_, page, capacity),
        dv(dv_) {}
  template <class M>
  void append(ea::SequenceId a, ea::SequenceId b, const M& rows) {
    latent.append(a, rows);
    apart.append(b, rows, rows.leftCols(dv));
  }
};

/// CHECKs that decode of Q gives the same bits on both caches (kernel, threads 1 and 2, lse).
template <typename S, class QM>
void check_same_bits(const Twin<S>& t, ea::SequenceId a, ea::SequenceId b, const QM& Q, ea::Options opt) {
  using T = Compute<S>;
  Rows<T> out_a, lse_a, out_b, lse_b;
  for (const int threads : {1, 2}) {
    opt.threads = threads;
    const ea::SequenceId ia[1] = {a}, ib[1] = {b};
    ea::attention_decode_into(t.latent, ia, 1, side_by_side(Q, t.latent.d_k()), nullptr, out_a, lse_a, opt);
    ea::attention_decode_into(t.apart, ib, 1, side_by_side(Q, t.apart.d_k()), nullptr, out_b, lse_b, opt);
    CAPTURE(threads);
    EA_CHECK_EQUAL(out_a, out_b);
    EA_CHECK_EQUAL(lse_a, lse_b);
  }
}

}  // namespace

TEST_CASE_TEMPLATE("latent cache: decode is bitwise the call on keys and values stored apart", S, float,
                   double, Eigen::bfloat16, Eigen::half) {
  using T = Compute<S>;
  Rng rng(5760);
  struct Shape {
    Index dk, dv, H, Tk, Tq, page;
  };
  // DeepSeek's 576/512 with 16 heads (the GEMM path: more than 16 rows) over 300 tokens (two
  // split-K chunks); small dims with 2 and 128 heads; d_v = d_k; d_v = 0 with 32 heads.
  const Shape shapes[] = {{576, 512, 16, 300, 1, 64},
                          {40, 32, 2, 70, 2, 16},
                          {40, 32, 128, 33, 1, 32},
                          {24, 24, 4, 520, 2, 16},
                          {20, 0, 32, 17, 1, 16}};
  const auto kernels = kernels_under_test();
  int n = 0;
  for (const Shape& sh : shapes) {
    Twin<S> t(sh.dk, sh.dv, sh.page, sh.Tk + 2 * sh.page);
    const auto a = t.latent.create();
    const auto b = t.apart.create();
    const Rows<T> rows = latent_rows<S>(rng, sh.Tk, sh.dk);
    for (Index done = 0; done < sh.Tk;) {  // in pieces
      const Index piece = std::min<Index>(sh.Tk - done, rng.integer(1, 90));
      t.append(a, b, rows.middleRows(done, piece));
      done += piece;
    }
    REQUIRE(t.latent.values_in_keys());
    REQUIRE(!t.apart.values_in_keys());
    CHECK(t.latent.value_pages() == t.latent.key_pages());
    const Rows<T> Q = random_matrix<Rows<T>>(rng, sh.Tq, sh.H * sh.dk);
    ea::Options opt;
    opt.causal = true;
    opt.scale = 1 / std::sqrt(192.0);
    opt.kernel = kernels[static_cast<size_t>(n++) % kernels.size()];
    const std::string kname = ea::kernel_name(opt.kernel);
    CAPTURE(kname);
    CAPTURE(sh.dk);
    CAPTURE(sh.H);
    check_same_bits(t, a, b, Q, opt);
  }
}

TEST_CASE("latent cache: fork, truncate and erase decode as a fresh sequence of the same tokens") {
  using S = Eigen::bfloat16;
  using T = float;
  Rng rng(12);
  const Index dk = 72, dv = 64, H = 32, page = 16;
  const Rows<T> rows = latent_rows<S>(rng, 200, dk);
  auto cache = ea::PagedKVCache<S>::latent(dk, dv, page, 1024);
  const auto s = cache.create();
  cache.append(s, rows.topRows(150));
  const auto f = cache.fork(s);               // shares 9 pages and the partly filled 10th
  cache.append(f, rows.middleRows(150, 50));  // copy-on-write of the 10th
  cache.truncate(s, 120);
  cache.erase(f, 20, 52);  // two whole pages
  cache.erase(f, 3, 10);   // a ragged range
  const Rows<T> Q = random_matrix<Rows<T>>(rng, 1, H * dk);
  const auto fresh = [&](const Rows<T>& kept) {
    auto c = ea::PagedKVCache<S>::latent(dk, dv, page, 512);
    const auto id = c.create();
    c.append(id, kept);
    return Rows<T>(ea::attention_decode(c, id, Q));
  };
  Rows<T> kept_f(200 - 32 - 7, dk);
  kept_f << rows.topRows(3), rows.middleRows(10, 10), rows.bottomRows(148);
  EA_CHECK_EQUAL(ea::attention_decode(cache, s, Q), fresh(rows.topRows(120)));
  EA_CHECK_EQUAL(ea::attention_decode(cache, f, Q), fresh(kept_f));
  // A view of the cache's pages (PagedKVView::latent, one head: [num_pages, page_size, d_k]).
  const auto pages = cache.pages(f);
  const std::int64_t length = cache.length(f);
  const auto view =
      ea::PagedKVView<S>::latent(cache.key_pages(), cache.num_pages(), page, dk, dv, pages.data(),
                                 static_cast<std::ptrdiff_t>(pages.size()), &length, 1);
  EA_CHECK_EQUAL(ea::attention_decode(view, Q), fresh(kept_f));
}

TEST_CASE("latent cache: the PyTorch golden case, the absorbed form of the unabsorbed computation") {
  const MultiHeadGolden g = load_multihead_golden(multihead_data_dir() / "mla_absorbed.txt");
  const Index H = g.Q.n[1], Tq = g.Q.n[2], dk = g.Q.n[3], Tk = g.K.n[2], dv = g.V.n[3];
  REQUIRE(g.K.n[1] == 1);
  for (Index j = 0; j < Tk; ++j)  // the file's V is the first d_v columns of its K
    for (Index c = 0; c < dv; ++c) REQUIRE(g.V(0, 0, j, c) == g.K(0, 0, j, c));
  auto run = [&](auto zero) {
    using T = decltype(zero);
    Rows<T> latent(Tk, dk), Q(Tq, H * dk);
    for (Index j = 0; j < Tk; ++j)
      for (Index c = 0; c < dk; ++c) latent(j, c) = static_cast<T>(g.K(0, 0, j, c));
    for (Index h = 0; h < H; ++h)
      for (Index i = 0; i < Tq; ++i)
        for (Index c = 0; c < dk; ++c) Q(i, h * dk + c) = static_cast<T>(g.Q(0, h, i, c));
    auto cache = ea::PagedKVCache<T>::latent(dk, dv, 16, 64);
    const auto s = cache.create();
    cache.append(s, latent);
    ea::Options opt;
    opt.causal = g.spec.causal;
    opt.scale = static_cast<double>(*g.spec.scale);
    const MultiHeadReference ref = reference_heads(g.Q, g.K, g.V, g.spec);
    for (const ea::Kernel kernel : kernels_under_test()) {
      opt.kernel = kernel;
      const Rows<T> out = ea::attention_decode(cache, s, Q, opt);
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      for (Index h = 0; h < H; ++h) {
        CAPTURE(h);
        MatrixLD want(Tq, dv);
        for (Index i = 0; i < Tq; ++i)
          for (Index c = 0; c < dv; ++c) want(i, c) = g.out(0, h, i, c);
        EA_CHECK_NEAR(to_long_double(out.middleCols(h * dv, dv)), want, multihead_budget<T>(ref, h).attn);
      }
    }
  };
  run(0.0f);
  run(0.0);
}

TEST_CASE("latent cache: errors") {
  using T = float;
  CHECK(invalid_argument_message([] {
          (void)ea::PagedKVCache<T>::latent(64, 65, 16, 64);
        }).find("d_v = 65 must be at most d_k = 64") != std::string::npos);
  auto latent = ea::PagedKVCache<T>::latent(8, 6, 16, 64);
  ea::PagedKVCache<T> apart(1, 8, 6, 16, 64);
  const auto a = latent.create();
  const auto b = apart.create();
  const Rows<T> rows = Rows<T>::Ones(3, 8);
  const std::string both = invalid_argument_message([&] { latent.append(a, rows, rows.leftCols(6)); });
  CHECK(both.find("this is a latent cache") != std::string::npos);
  CHECK(both.find("append(s, latent) takes the keys alone") != std::string::npos);
  const std::string alone = invalid_argument_message([&] { apart.append(b, rows); });
  CHECK(alone.find("stores keys and values apart") != std::string::npos);
  const std::string wide = invalid_argument_message([&] { latent.append(a, Rows<T>::Ones(3, 9)); });
  CHECK(wide.find("K has 3 rows of 9 but must have rows of kv_heads x d_k = 1 x 8 = 8") != std::string::npos);
  CHECK(latent.length(a) == 0);
  CHECK(apart.length(b) == 0);
}

}  // namespace test_latent_cache
