// SPDX-License-Identifier: MIT
// Decode through pages the caller lays out (PagedKVView::nhd and ::hnd, vLLM's and FlashInfer's
// layouts): several sequences in one call (lengths 0, 1 and a page boundary +- 1, a few queries
// each through cu_seqlens_q), pages assigned out of order, against the long-double reference
// within the budget of the compute type; NHD and HND of the same tokens bitwise equal, equal to a
// PagedKVCache holding them, and equal for 1 and 2 threads; float, double, bfloat16 and half
// storage; every kernel (a bf16 cache's GEMM path on bf16 pairs within its bound). Pages no sequence uses and
// slots past a sequence's length hold NaN, and block-table entries past a sequence's pages hold an index out
// of range, so that reading either would show.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "common.hpp"
#include "decode.hpp"
#include "low_precision.hpp"

namespace test_paged_view {

using namespace ea_test;
using namespace ea_test::decode;

namespace {

/// The same tokens in a pool of pages laid out NHD ([page, slot, head, d]) and HND ([page, head,
/// slot, d]), with the block tables, lengths and query offsets of a batch.
template <typename S>
struct Pages {
  Index num_pages = 0, table_stride = 0;
  std::vector<S> nhd_k, nhd_v, hnd_k, hnd_v;
  std::vector<std::int32_t> tables;
  std::vector<std::int64_t> lengths, cu_q;
};

template <typename S>
void place(std::vector<S>& nhd, std::vector<S>& hnd, const Rows<Compute<S>>& rows, Index first_token,
           const std::vector<std::int32_t>& pages, Index P, Index Hkv, Index d) {
  for (Index t = 0; t < rows.rows(); ++t) {
    const Index n = first_token + t, p = pages[static_cast<size_t>(n / P)], slot = n % P;
    for (Index h = 0; h < Hkv; ++h)
      for (Index e = 0; e < d; ++e) {
        const S x = static_cast<S>(rows(t, h * d + e));
        nhd[static_cast<size_t>(((p * P + slot) * Hkv + h) * d + e)] = x;
        hnd[static_cast<size_t>(((p * Hkv + h) * P + slot) * d + e)] = x;
      }
  }
}

template <typename S>
Pages<S> lay_out(Rng& rng, const Case& c, const std::vector<Sequence<S>>& seqs) {
  Pages<S> pg;
  const Index P = c.page;
  std::vector<Index> counts;
  Index used = 0;
  for (const auto& s : seqs) {
    counts.push_back((s.K.rows() + P - 1) / P);
    used += counts.back();
    pg.table_stride = std::max(pg.table_stride, counts.back() + 2);
  }
  pg.num_pages = used + 3;  // three pages no sequence uses
  std::vector<std::int32_t> order(static_cast<size_t>(pg.num_pages));
  std::iota(order.begin(), order.end(), 0);
  for (size_t i = order.size(); i > 1; --i)
    std::swap(order[i - 1], order[static_cast<size_t>(rng.integer(0, static_cast<long>(i) - 1))]);
  const S nan = std::numeric_limits<S>::quiet_NaN();
  pg.nhd_k.assign(static_cast<size_t>(pg.num_pages * P * c.Hkv * c.dk), nan);
  pg.nhd_v.assign(static_cast<size_t>(pg.num_pages * P * c.Hkv * c.dv), nan);
  pg.hnd_k = pg.nhd_k;
  pg.hnd_v = pg.nhd_v;
  // Entries past a sequence's pages: out of range (never read).
  pg.tables.assign(static_cast<size_t>(pg.table_stride) * seqs.size(),
                   static_cast<std::int32_t>(pg.num_pages + 7));
  pg.cu_q.push_back(0);
  size_t next = 0;
  for (size_t b = 0; b < seqs.size(); ++b) {
    std::vector<std::int32_t> mine;
    for (Index i = 0; i < counts[b]; ++i) mine.push_back(order[next++]);
    std::copy(mine.begin(), mine.end(), pg.tables.begin() + static_cast<std::ptrdiff_t>(b) * pg.table_stride);
    place(pg.nhd_k, pg.hnd_k, seqs[b].K, 0, mine, P, c.Hkv, c.dk);
    place(pg.nhd_v, pg.hnd_v, seqs[b].V, 0, mine, P, c.Hkv, c.dv);
    pg.lengths.push_back(seqs[b].K.rows());
    pg.cu_q.push_back(pg.cu_q.back() + seqs[b].Q.rows());
  }
  return pg;
}

/// Decodes the batch of `seqs` (the shape, options and masks of `shape`; sequence b of length
/// lengths[b] with queries[b] queries) through both layouts with every kernel.
template <typename S>
void check_batch(Rng& rng, const Case& shape, const std::vector<Index>& lengths,
                 const std::vector<Index>& queries) {
  using T = Compute<S>;
  std::vector<Case> cases;
  std::vector<Sequence<S>> seqs;
  for (size_t b = 0; b < lengths.size(); ++b) {
    Case c = shape;
    c.Tk = lengths[b];
    c.Tq = queries[b];
    cases.push_back(c);
    seqs.push_back(make_sequence<S>(rng, c));
  }
  const Pages<S> pg = lay_out(rng, shape, seqs);
  const Index batch = static_cast<Index>(seqs.size()), total_q = pg.cu_q.back();
  Rows<T> Q(total_q, shape.H * shape.dk);
  for (Index b = 0; b < batch; ++b) Q.middleRows(pg.cu_q[size_t(b)], cases[size_t(b)].Tq) = seqs[size_t(b)].Q;
  // Every sequence's slopes and sinks are the same (make_sequence sets them from the head).
  const ea::Masks<T> masks = decode_masks(shape, seqs[0]);
  const auto nhd =
      ea::PagedKVView<S>::nhd(pg.nhd_k.data(), pg.nhd_v.data(), pg.num_pages, shape.page, shape.Hkv, shape.dk,
                              shape.dv, pg.tables.data(), pg.table_stride, pg.lengths.data(), batch);
  const auto hnd =
      ea::PagedKVView<S>::hnd(pg.hnd_k.data(), pg.hnd_v.data(), pg.num_pages, shape.page, shape.Hkv, shape.dk,
                              shape.dv, pg.tables.data(), pg.table_stride, pg.lengths.data(), batch);
  // The same tokens in a PagedKVCache (its pages of 16 tokens: a power of two from 16 to 256).
  Index tokens = 0;
  for (const Index n : lengths) tokens += n + 16;
  ea::PagedKVCache<S> cache(shape.Hkv, shape.dk, shape.dv, 16, tokens);
  std::vector<ea::SequenceId> ids;
  for (const auto& s : seqs) {
    ids.push_back(cache.create());
    append_in_pieces(rng, cache, ids.back(), s);
  }
  std::vector<MultiHeadReference> refs;
  for (Index b = 0; b < batch; ++b) refs.push_back(reference_of(cases[size_t(b)], seqs[size_t(b)]));

  for (const ea::Kernel kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    Result<T> first;
    for (const int threads : {1, 2}) {
      CAPTURE(threads);
      const ea::Options opt = options_of(shape, kernel, threads);
      Result<T> a, b, in_cache;
      ea::attention_decode_into(nhd, side_by_side(Q, shape.dk), pg.cu_q.data(), a.out, a.lse, opt, masks);
      ea::attention_decode_into(hnd, side_by_side(Q, shape.dk), pg.cu_q.data(), b.out, b.lse, opt, masks);
      ea::attention_decode_into(cache, ids.data(), batch, side_by_side(Q, shape.dk), pg.cu_q.data(),
                                in_cache.out, in_cache.lse, opt, masks);
      REQUIRE(a.out.rows() == total_q);
      REQUIRE(a.lse.rows() == total_q);
      EA_CHECK_EQUAL(b.out, a.out);
      EA_CHECK_EQUAL(b.lse, a.lse);
      EA_CHECK_EQUAL(in_cache.out, a.out);
      EA_CHECK_EQUAL(in_cache.lse, a.lse);
      if (threads == 1) {
        first = a;
        for (Index s = 0; s < batch; ++s) {
          CAPTURE(s);
          const Case& c = cases[size_t(s)];
          Result<T> part;
          part.out = a.out.middleRows(pg.cu_q[size_t(s)], c.Tq);
          part.lse = a.lse.middleRows(pg.cu_q[size_t(s)], c.Tq);
          // (A bf16 cache's GEMM path, more than 16 query rows of a KV head, on bf16 pairs rounds
          // the weights to bf16: docs/decode.md, low_precision.hpp.)
          check_reference(part, refs[size_t(s)], c, 1, "NHD view vs the long-double reference",
                          bf16_pairs<S>(kernel));
        }
      } else {
        EA_CHECK_EQUAL(a.out, first.out);
        EA_CHECK_EQUAL(a.lse, first.lse);
      }
    }
  }
}

template <typename S>
void check_shapes(std::uint64_t seed) {
  Rng rng(seed);
  Case shapes[3];
  shapes[0].H = 4, shapes[0].Hkv = 2, shapes[0].dk = 19, shapes[0].dv = 13, shapes[0].page = 5;
  shapes[1].H = 8, shapes[1].Hkv = 1, shapes[1].dk = 64, shapes[1].dv = 64, shapes[1].page = 16;
  shapes[2].H = 3, shapes[2].Hkv = 3, shapes[2].dk = 8, shapes[2].dv = 24, shapes[2].page = 7;
  shapes[2].window_left = 5, shapes[2].softcap = 6, shapes[2].alibi = true, shapes[2].sinks = true;
  for (const Case& shape : shapes) {
    CAPTURE(shape.describe());
    const Index P = shape.page;
    const std::vector<Index> lengths = {0, 1, P - 1, P, P + 1, 3 * P + 2};
    std::vector<Index> queries = {1, 1, 2, 3, 1, 4};
    for (size_t b = 0; b < lengths.size(); ++b)
      queries[b] = std::min(queries[b], std::max<Index>(lengths[b], 1));
    check_batch<S>(rng, shape, lengths, queries);
    // One sequence alone (cu_seqlens_q given), the longest.
    check_batch<S>(rng, shape, {3 * P + 2}, {2});
  }
}

}  // namespace

TEST_CASE_TEMPLATE("paged view: NHD and HND pages decode as the reference, as each other and as a cache", S,
                   float, double, Eigen::bfloat16, Eigen::half) {
  check_shapes<S>(4301);
}

}  // namespace test_paged_view
