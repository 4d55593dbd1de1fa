// SPDX-License-Identifier: MIT
// Decode attention on a PagedKVCache against the long-double reference and against
// attention_heads_into on the same keys laid out contiguously: every page size, sequence lengths 0,
// 1 and a page boundary +- 1 and several split-K chunks, T_q = 1 and a few tokens, GQA groups of
// 1, 2 and 4 and MQA, every option decode takes, every kernel.
#include <doctest/doctest.h>

#include "common.hpp"
#include "decode.hpp"

namespace test_decode_vs_reference {

using namespace ea_test;
using namespace ea_test::decode;

namespace {

/// Decodes case c on a fresh cache of storage S with `kernel`, comparing with the reference
/// (within the budget) and with attention_heads_into (within twice the budget: two results, each
/// within the budget of the exact one).
template <typename S>
void check_case(Rng& rng, const Case& c, ea::Kernel kernel) {
  using T = Compute<S>;
  const Sequence<S> s = make_sequence<S>(rng, c);
  ea::PagedKVCache<S> cache(c.Hkv, c.dk, c.dv, c.page, c.Tk + 3 * c.page);
  // A sequence filled first, released, then ours: its pages do not start at page 0.
  const auto other = cache.create();
  cache.append(other, Rows<T>::Zero(c.page + 3, c.Hkv * c.dk), Rows<T>::Zero(c.page + 3, c.Hkv * c.dv));
  const auto id = cache.create();
  cache.release(other);
  append_in_pieces(rng, cache, id, s);
  REQUIRE(cache.length(id) == c.Tk);

  const ea::Options opt = options_of(c, kernel, static_cast<int>(rng.integer(1, 2)));
  Result<T> r;
  const ea::SequenceId ids[1] = {id};
  const std::int64_t cu[2] = {0, c.Tq};
  ea::attention_decode_into(cache, ids, 1, ea_test::side_by_side(s.Q, c.dk), cu, r.out, r.lse, opt,
                            ea_test::decode_masks(c, s));
  // The returning form gives the same bits.
  const Rows<T> out = ea::attention_decode(cache, id, s.Q, opt, ea_test::decode_masks(c, s));
  EA_CHECK_EQUAL(out, r.out);
  // One sequence: cu_seqlens_q may be null (all of Q).
  Rows<T> whole;
  ea::attention_decode_into(cache, ids, 1, ea_test::side_by_side(s.Q, c.dk), nullptr, whole, opt,
                            ea_test::decode_masks(c, s));
  EA_CHECK_EQUAL(whole, r.out);

  const MultiHeadReference ref = reference_of(c, s);
  check_reference(r, ref, c, 1, "decode vs the long-double reference");
  if constexpr (std::is_same_v<S, T>) {
    const Result<T> h = heads_call(c, s, opt);
    check_reference(h, ref, c, 1, "attention_heads_into vs the long-double reference");
    check_each_other(r, h, ref, c);
  }
}

}  // namespace

TEST_CASE_TEMPLATE("decode vs reference: page sizes and lengths at the page boundaries", S, float, double) {
  Rng rng(4101);
  for (const Index page : {16, 32, 64, 128, 256}) {
    for (const Index tk : {Index(0), Index(1), page - 1, page, page + 1, 2 * page + 1, Index(700)}) {
      for (const Index tq : {1, 3}) {
        Case c;
        c.page = page;
        c.Tk = tk;
        c.Tq = std::min(tq, std::max<Index>(tk, 1));
        c.causal = true;
        c.sinks = tq == 3;  // with T_k = 0: a row that sees only its sink
        CAPTURE(c.describe());
        for (const auto kernel : kernels_under_test()) {
          const std::string kname = ea::kernel_name(kernel);
          CAPTURE(kname);
          check_case<S>(rng, c, kernel);
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("decode vs reference: options, GQA and MQA", S, float, double) {
  Rng rng(4102);
  for (int n = 0; n < 120; ++n) {
    Case c;
    const Index groups[] = {1, 2, 4, 8};
    c.Hkv = rng.integer(1, 3);
    c.H = c.Hkv * groups[rng.integer(0, 3)];
    if (n % 10 == 0) c.Hkv = 1;  // MQA
    c.H = std::max(c.H, c.Hkv);
    c.dk = rng.integer(1, 3) == 1 ? 1 + rng.integer(0, 20) : 16 * rng.integer(1, 4);
    c.dv = n % 7 == 0 ? 0 : (n % 3 == 0 ? c.dk : 1 + rng.integer(0, 40));
    c.page = Index(16) << rng.integer(0, 4);
    c.Tk = rng.integer(0, 1) ? rng.integer(0, 80) : rng.integer(200, 1300);
    c.Tq = rng.integer(1, 6);
    c.causal = rng.integer(0, 3) != 0;
    if (rng.integer(0, 2) == 0) c.window_left = rng.integer(0, 300);
    if (rng.integer(0, 3) == 0) c.window_right = rng.integer(0, 3);
    if (rng.integer(0, 3) == 0) c.softcap = 5 + 10 * (rng.uniform() + 1);
    c.alibi = rng.integer(0, 3) == 0;
    c.sinks = n % 3 == 2;
    if (rng.integer(0, 3) == 0) c.scale = 0.05 + 0.1 * (rng.uniform() + 1);
    c.magnitude = 0.5 + (rng.uniform() + 1);
    if (n % 4 == 1) c.chunk = rng.integer(1, 2) == 1 ? rng.integer(1, 8) : rng.integer(16, 400);
    CAPTURE(n);
    CAPTURE(c.describe());
    const auto kernels = kernels_under_test();
    const auto kernel = kernels[static_cast<size_t>(rng.integer(0, static_cast<long>(kernels.size()) - 1))];
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    check_case<S>(rng, c, kernel);
  }
}

}  // namespace test_decode_vs_reference
