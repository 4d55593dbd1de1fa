// SPDX-License-Identifier: MIT
// Decode and threads: split-K gives bitwise the same result for every thread count, on every
// kernel and storage type, for one long sequence and for a batch of mixed lengths; and several
// threads may decode different sequences of one cache at once (results as decoded one by one).
#include <doctest/doctest.h>

#include <thread>

#include "common.hpp"
#include "decode.hpp"

namespace test_decode_threads {

using namespace ea_test;
using namespace ea_test::decode;

namespace {

template <typename S>
void check_threads_bitwise(std::uint64_t seed) {
  using T = Compute<S>;
  Rng rng(seed);
  // A batch of mixed lengths (one long enough for many chunks), T_q 1 to 3, GQA 4:2.
  Case c;
  c.H = 4;
  c.Hkv = 2;
  c.dk = 32;
  c.dv = 24;
  c.page = 32;
  const std::vector<Index> lengths = {2500, 0, 1, 33, 700, 1024};
  ea::PagedKVCache<S> cache(c.Hkv, c.dk, c.dv, c.page, 8192);
  std::vector<ea::SequenceId> ids;
  std::vector<std::int64_t> cu = {0};
  for (const Index tk : lengths) {
    Case ci = c;
    ci.Tk = tk;
    const Sequence<S> s = make_sequence<S>(rng, ci);
    ids.push_back(cache.create());
    append_in_pieces(rng, cache, ids.back(), s);
    cu.push_back(cu.back() + 1 + static_cast<std::int64_t>(ids.size() % 3));
  }
  const Rows<T> Q = random_matrix<Rows<T>>(rng, cu.back(), c.H * c.dk);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    for (const bool causal : {false, true}) {
      ea::Options opt;
      opt.causal = causal;
      opt.kernel = kernel;
      opt.threads = 1;
      Rows<T> out1, lse1;
      ea::attention_decode_into(cache, ids.data(), static_cast<std::ptrdiff_t>(ids.size()),
                                ea_test::side_by_side(Q, c.dk), cu.data(), out1, lse1, opt);
      for (const int threads : {2, 3, 4, 0}) {
        CAPTURE(threads);
        opt.threads = threads;
        Rows<T> out, lse;
        ea::attention_decode_into(cache, ids.data(), static_cast<std::ptrdiff_t>(ids.size()),
                                  ea_test::side_by_side(Q, c.dk), cu.data(), out, lse, opt);
        EA_CHECK_EQUAL(out, out1);
        EA_CHECK_EQUAL(lse, lse1);
      }
    }
  }
}

}  // namespace

TEST_CASE("decode threads: bitwise identical for every thread count") {
  SUBCASE("float") { check_threads_bitwise<float>(5101); }
  SUBCASE("double") { check_threads_bitwise<double>(5102); }
  SUBCASE("bfloat16") { check_threads_bitwise<Eigen::bfloat16>(5103); }
  SUBCASE("half") { check_threads_bitwise<Eigen::half>(5104); }
}

TEST_CASE("decode threads: concurrent decodes of different sequences of one cache") {
  Rng rng(5105);
  Case c;
  c.H = 8;
  c.Hkv = 2;
  c.dk = 16;
  c.dv = 16;
  c.page = 16;
  ea::PagedKVCache<float> cache(c.Hkv, c.dk, c.dv, c.page, 16384);
  std::vector<ea::SequenceId> ids;
  std::vector<Rows<float>> queries;
  for (int n = 0; n < 6; ++n) {
    Case ci = c;
    ci.Tk = 100 + 300 * n;
    const Sequence<float> s = make_sequence<float>(rng, ci);
    ids.push_back(cache.create());
    append_in_pieces(rng, cache, ids.back(), s);
    queries.push_back(s.Q);
  }
  ea::Options opt;
  opt.causal = true;
  std::vector<Rows<float>> expected;
  for (std::size_t n = 0; n < ids.size(); ++n)
    expected.push_back(ea::attention_decode(cache, ids[n], queries[n], opt));
  // Each thread decodes its sequence many times, with 1 or 2 threads of its own, while the others
  // do the same (the pool runs one call's tasks at a time; the others run on their own thread).
  std::vector<Rows<float>> got(ids.size());
  std::vector<int> mismatches(ids.size(), 0);
  std::vector<std::thread> workers;
  for (std::size_t n = 0; n < ids.size(); ++n) {
    workers.emplace_back([&, n] {
      ea::Options o = opt;
      o.threads = 1 + static_cast<int>(n % 2);
      for (int rep = 0; rep < 20; ++rep) {
        ea::attention_decode_into(cache, &ids[n], 1, ea_test::side_by_side(queries[n], c.dk),
                                  std::vector<std::int64_t>{0, 1}.data(), got[n], o);
        if (!(got[n].array() == expected[n].array()).all()) ++mismatches[n];
      }
    });
  }
  for (auto& w : workers) w.join();
  for (std::size_t n = 0; n < ids.size(); ++n) {
    CAPTURE(n);
    CHECK(mismatches[n] == 0);
  }
}

TEST_CASE("decode threads: appends and decodes of different sequences from several threads") {
  // append() locks the pool; decodes of other sequences wait for it and see a consistent cache.
  Rng rng(5106);
  Case c;
  c.H = 4;
  c.Hkv = 4;
  c.dk = 8;
  c.dv = 8;
  c.page = 16;
  ea::PagedKVCache<float> cache(c.Hkv, c.dk, c.dv, c.page, 4 * 2048);
  constexpr int kThreads = 4, kSteps = 200;
  std::vector<Sequence<float>> seqs;
  for (int n = 0; n < kThreads; ++n) {
    Case ci = c;
    ci.Tk = kSteps;
    ci.Tq = kSteps;
    seqs.push_back(make_sequence<float>(rng, ci));
  }
  std::vector<ea::SequenceId> ids;
  for (int n = 0; n < kThreads; ++n) ids.push_back(cache.create());
  std::vector<Rows<float>> outs(kThreads, Rows<float>(kSteps, c.H * c.dv));
  std::vector<std::thread> workers;
  for (int n = 0; n < kThreads; ++n) {
    workers.emplace_back([&, n] {
      ea::Options o;
      o.causal = true;
      for (int t = 0; t < kSteps; ++t) {
        cache.append(ids[n], seqs[n].K.row(t), seqs[n].V.row(t));
        outs[n].row(t) = ea::attention_decode(cache, ids[n], seqs[n].Q.row(t), o);
      }
    });
  }
  for (auto& w : workers) w.join();
  // The generation loop, step by step, is causal attention over the whole sequence.
  for (int n = 0; n < kThreads; ++n) {
    CAPTURE(n);
    Case ci = c;
    ci.Tk = kSteps;
    ci.Tq = kSteps;
    const Result<float> h = heads_call(ci, seqs[n], options_of(ci));
    const MultiHeadReference ref = reference_of(ci, seqs[n]);
    for (Index head = 0; head < c.H; ++head) {
      const Budget b = multihead_budget<float>(ref, head).times(2);
      EA_CHECK_NEAR(to_long_double(outs[n].middleCols(head * c.dv, c.dv)),
                    to_long_double(h.out.middleCols(head * c.dv, c.dv)), b.attn);
    }
  }
}

}  // namespace test_decode_threads
