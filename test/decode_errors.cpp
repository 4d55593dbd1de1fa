// SPDX-License-Identifier: MIT
// Every bad input to the decode calls (attention_decode, attention_decode_into, on a PagedKVCache
// and on a PagedKVView) throws std::invalid_argument whose message names the argument and its
// shape or value, and no output is written: every output is filled with a sentinel first and
// checked afterwards (and Q, when an output lies over it, keeps its values).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common.hpp"
#include "errors.hpp"
#include "random.hpp"

namespace test_decode_errors {

using namespace ea_test;

namespace {

constexpr float kSentinel = 1234.5f;

// The valid problem the bad calls start from; the sizes differ from each other and from the bad
// values below, so that a number in a message says which size it names.
constexpr Eigen::Index kHkv = 2, kDk = 5, kDv = 3, kH = 6, kTq = 4, kPage = 16;
constexpr Eigen::Index kLen0 = 37, kLen1 = 20;

using Out = Eigen::Map<RowMatrix<float>>;

/// Q (T_q x (H d_k), heads side by side) as decode's [1, H, T_q, d_k] view.
template <class M>
ea::HeadsView<const float> qv(const M& Q) {
  return ea_test::side_by_side(Q, kDk);
}

/// Output storage: a buffer filled with the sentinel, viewed as a rows x cols Map.
struct Sentinel {
  std::vector<float> data;
  Eigen::Index rows, cols;
  Sentinel(Eigen::Index r, Eigen::Index c) : data(static_cast<size_t>(r * c), kSentinel), rows(r), cols(c) {}
  Out map() { return Out(data.data(), rows, cols); }
  bool untouched() const {
    for (const float x : data)
      if (x != kSentinel) return false;
    return true;
  }
};

struct Fixture {
  Rng rng{7};
  ea::PagedKVCache<float> cache{kHkv, kDk, kDv, kPage, 12 * kPage};
  ea::SequenceId s0, s1, gone;
  RowMatrix<float> Q;
  Fixture() {
    s0 = cache.create();
    s1 = cache.create();
    gone = cache.create();
    cache.append(s0, random_matrix<RowMatrix<float>>(rng, kLen0, kHkv * kDk),
                 random_matrix<RowMatrix<float>>(rng, kLen0, kHkv * kDv));
    cache.append(s1, random_matrix<RowMatrix<float>>(rng, kLen1, kHkv * kDk),
                 random_matrix<RowMatrix<float>>(rng, kLen1, kHkv * kDv));
    cache.append(gone, random_matrix<RowMatrix<float>>(rng, 3, kHkv * kDk),
                 random_matrix<RowMatrix<float>>(rng, 3, kHkv * kDv));
    cache.release(gone);
    Q = random_matrix<RowMatrix<float>>(rng, kTq, kH * kDk);
  }
};

const std::vector<std::string> kSequenceWords = {"not in the cache"};

/// A PagedKVView of the cache's own pages, with the strides of its layout, and these block tables
/// and lengths.
ea::PagedKVView<float> view_of_cache(const ea::PagedKVCache<float>& cache, const std::int32_t* tables,
                                     std::ptrdiff_t stride, const std::int64_t* lengths,
                                     std::ptrdiff_t batch) {
  const ea::abi::PagedKV l = ea::abi::kv_pool_layout(cache.pool());
  ea::PagedKVView<float> v;
  v.k_pages = cache.key_pages();
  v.v_pages = cache.value_pages();
  v.num_pages = l.num_pages;
  v.page_size = l.page_size;
  v.kv_heads = l.kv_heads;
  v.d_k = l.d_k;
  v.d_v = l.d_v;
  v.k_page_stride = l.k_page_stride;
  v.k_token_stride = l.k_token_stride;
  v.k_head_stride = l.k_head_stride;
  v.v_page_stride = l.v_page_stride;
  v.v_token_stride = l.v_token_stride;
  v.v_head_stride = l.v_head_stride;
  v.block_tables = tables;
  v.block_table_stride = stride;
  v.lengths = lengths;
  v.batch = batch;
  return v;
}

}  // namespace

TEST_CASE("decode errors: sequences, queries, offsets and outputs of a cache decode") {
  Fixture f;
  auto& cache = f.cache;
  const auto& Q = f.Q;
  Sentinel out(kTq, kH * kDv), lse(kTq, kH);
  Sentinel out_wide(kTq, kH * kDv + 1), out_tall(kTq + 1, kH * kDv), lse_wide(kTq, kH + 1);
  const std::vector<Sentinel*> outputs = {&out, &lse, &out_wide, &out_tall, &lse_wide};
  const auto untouched = [&] {
    for (const Sentinel* o : outputs)
      if (!o->untouched()) return false;
    return true;
  };
  const ea::SequenceId one[1] = {f.s0}, unknown[1] = {ea::SequenceId{99}}, released[2] = {f.s0, f.gone};
  const ea::SequenceId two[2] = {f.s0, f.s1};
  const std::int64_t cu1[2] = {0, kTq}, cu2[3] = {0, 1, kTq};
  const RowMatrix<float> Q_wide = RowMatrix<float>::Ones(kTq, kH * (kDk + 1));  // 6 heads of 6
  const RowMatrix<float> Q_h5 = RowMatrix<float>::Ones(kTq, 5 * kDk);  // 5 query heads for 2 KV heads

  // The valid calls throw nothing (on fresh outputs).
  {
    Sentinel o(kTq, kH * kDv), l(kTq, kH);
    CHECK_NOTHROW(ea::attention_decode_into(cache, two, 2, qv(Q), cu2, o.map(), l.map()));
    CHECK_NOTHROW(ea::attention_decode_into(cache, one, 1, qv(Q), cu1, o.map()));
    CHECK_NOTHROW(ea::attention_decode(cache, f.s1, Q));
  }

  const std::int64_t not_zero[3] = {1, 2, kTq}, decreasing[3] = {0, 3, 1}, short_end[3] = {0, 2, kTq - 1},
                     long_end[3] = {0, 2, kTq + 3};
  const std::vector<BadCall> bad = {
      {"unknown sequence, batched form",
       [&] { ea::attention_decode_into(cache, unknown, 1, qv(Q), cu1, out.map(), lse.map()); },
       {99},
       {kSequenceWords}},
      {"released sequence, batched form",
       [&] { ea::attention_decode_into(cache, released, 2, qv(Q), cu2, out.map(), lse.map()); },
       {f.gone.value},
       {kSequenceWords, {"sequences"}}},
      {"released sequence, single form",
       [&] { (void)ea::attention_decode(cache, f.gone, Q); },
       {f.gone.value},
       {kSequenceWords}},
      {"unknown sequence, single form",
       [&] { (void)ea::attention_decode(cache, ea::SequenceId{99}, Q); },
       {99},
       {kSequenceWords}},
      {"negative id, vector form",
       [&] {
         (void)ea::attention_decode(cache, std::vector<ea::SequenceId>{f.s0, {-5}}, Q, {0, 1, kTq});
       },
       {5},
       {kSequenceWords}},
      {"sequences null",
       [&] { ea::attention_decode_into(cache, nullptr, 1, qv(Q), cu1, out.map()); },
       {},
       {{"sequences"}, {"null"}}},
      {"negative batch",
       [&] { ea::attention_decode_into(cache, one, -1, qv(Q), cu1, out.map()); },
       {},
       {{"negative"}}},
      {"Q with d_k = 6 for the cache's 5",
       [&] {
         ea::attention_decode_into(cache, one, 1, ea_test::side_by_side(Q_wide, kDk + 1), cu1, out.map(),
                                   lse.map());
       },
       {kH, kTq, kDk + 1, kDk},
       {{"Q"}, {"d_k"}}},
      {"query heads not a multiple of KV heads",
       [&] { ea::attention_decode_into(cache, one, 1, qv(Q_h5), cu1, out.map(), lse.map()); },
       {5, kTq, kDk, kHkv},
       {{"Q"}, {"heads"}}},
      {"attn with a column too many",
       [&] { ea::attention_decode_into(cache, one, 1, qv(Q), cu1, out_wide.map(), lse.map()); },
       {kTq, kH * kDv + 1, kH, kDv},
       {{"attn"}}},
      {"attn with a row too many",
       [&] { ea::attention_decode_into(cache, one, 1, qv(Q), cu1, out_tall.map()); },
       {kTq + 1, kTq, kH, kDv},
       {{"attn"}}},
      {"lse with a column too many",
       [&] { ea::attention_decode_into(cache, one, 1, qv(Q), cu1, out.map(), lse_wide.map()); },
       {kTq, kH + 1, kH},
       {{"lse"}}},
      {"cu_seqlens_q not starting at 0",
       [&] { ea::attention_decode_into(cache, two, 2, qv(Q), not_zero, out.map(), lse.map()); },
       {1, 0},
       {{"cu_seqlens_q"}}},
      {"cu_seqlens_q decreasing",
       [&] { ea::attention_decode_into(cache, two, 2, qv(Q), decreasing, out.map(), lse.map()); },
       {3, 1},
       {{"cu_seqlens_q"}, {"decrease"}}},
      {"cu_seqlens_q ending before Q's tokens",
       [&] { ea::attention_decode_into(cache, two, 2, qv(Q), short_end, out.map(), lse.map()); },
       {kTq - 1, kTq},
       {{"cu_seqlens_q"}}},
      {"cu_seqlens_q ending beyond Q's tokens",
       [&] { ea::attention_decode_into(cache, two, 2, qv(Q), long_end, out.map(), lse.map()); },
       {kTq + 3, kTq},
       {{"cu_seqlens_q"}}},
      {"cu_seqlens_q null",
       [&] { ea::attention_decode_into(cache, two, 2, qv(Q), nullptr, out.map(), lse.map()); },
       {},
       {{"cu_seqlens_q"}, {"null"}}},
      {"vector form, cu_seqlens_q of the wrong size",
       [&] {
         (void)ea::attention_decode(cache, std::vector<ea::SequenceId>{f.s0, f.s1}, Q, {0, kTq});
       },
       {2, 3},
       {{"cu_seqlens_q"}}},
  };
  for (const BadCall& b : bad) check_bad_call(b, untouched);

  // Resizable outputs sized wrong on purpose: an input error resizes nothing.
  RowMatrix<float> r_out = RowMatrix<float>::Constant(2, 2, kSentinel), r_lse = r_out;
  const auto r_untouched = [&] {
    return r_out.rows() == 2 && r_out.cols() == 2 && (r_out.array() == kSentinel).all() &&
           r_lse.rows() == 2 && r_lse.cols() == 2 && (r_lse.array() == kSentinel).all();
  };
  const std::vector<BadCall> bad_resizable = {
      {"resizable outputs, released sequence",
       [&] { ea::attention_decode_into(cache, released, 2, qv(Q), cu2, r_out, r_lse); },
       {f.gone.value},
       {kSequenceWords}},
      {"resizable outputs, query heads",
       [&] { ea::attention_decode_into(cache, one, 1, qv(Q_h5), cu1, r_out, r_lse); },
       {5, kHkv},
       {{"heads"}}},
      {"resizable outputs, cu_seqlens_q",
       [&] { ea::attention_decode_into(cache, two, 2, qv(Q), decreasing, r_out); },
       {3, 1},
       {{"cu_seqlens_q"}}},
  };
  for (const BadCall& b : bad_resizable) check_bad_call(b, r_untouched);
}

TEST_CASE("decode errors: a resizable out is not resized when lse has the wrong shape") {
  // The inputs are fine and out would be resized, but lse (a Map) has the wrong shape: the call
  // throws, and must resize nothing (it has no result to give).
  Fixture f;
  const ea::SequenceId one[1] = {f.s0};
  const std::int64_t cu1[2] = {0, kTq};
  RowMatrix<float> r_out = RowMatrix<float>::Constant(2, 2, kSentinel);
  Sentinel lse_wide(kTq, kH + 1);
  check_bad_call({"resizable out, lse with a column too many",
                  [&] { ea::attention_decode_into(f.cache, one, 1, qv(f.Q), cu1, r_out, lse_wide.map()); },
                  {kH + 1, kH},
                  {{"lse"}}},
                 [&] {
                   return lse_wide.untouched() && r_out.rows() == 2 && r_out.cols() == 2 &&
                          (r_out.array() == kSentinel).all();
                 });
}

TEST_CASE("decode errors: invalid options") {
  Fixture f;
  const ea::SequenceId one[1] = {f.s0};
  const std::int64_t cu1[2] = {0, kTq};
  Sentinel out(kTq, kH * kDv), lse(kTq, kH);
  const auto untouched = [&] { return out.untouched() && lse.untouched(); };
  auto with = [](auto set) {
    ea::Options o;
    set(o);
    return o;
  };
  const std::vector<std::pair<ea::Options, BadCall>> bad = {
      {with([](ea::Options& o) { o.scale = 0.0; }), {"scale 0", {}, {0}, {{"scale"}}}},
      {with([](ea::Options& o) { o.scale = -0.5; }), {"scale -0.5", {}, {0, 5}, {{"scale"}}}},
      {with([](ea::Options& o) { o.scale = std::numeric_limits<double>::quiet_NaN(); }),
       {"scale NaN", {}, {}, {{"scale"}}}},
      {with([](ea::Options& o) { o.scale = 1e300; }), {"scale beyond float", {}, {}, {{"scale"}}}},
      {with([](ea::Options& o) { o.window_left = -2; }), {"window_left -2", {}, {2}, {{"window"}}}},
      {with([](ea::Options& o) { o.window_right = -3; }), {"window_right -3", {}, {3}, {{"window"}}}},
      {with([](ea::Options& o) { o.softcap = -1; }), {"softcap -1", {}, {1}, {{"softcap"}}}},
      {with([](ea::Options& o) { o.softcap = std::numeric_limits<double>::infinity(); }),
       {"softcap inf", {}, {}, {{"softcap"}}}},
      {with([](ea::Options& o) { o.threads = -1; }), {"threads -1", {}, {1}, {{"threads"}}}},
      {with([](ea::Options& o) { o.kernel = static_cast<ea::Kernel>(99); }),
       {"an unknown kernel", {}, {}, {{"kernel"}, {"not available"}}}},
  };
  for (auto [opt, b] : bad) {
    b.call = [&, opt = opt] {
      ea::attention_decode_into(f.cache, one, 1, qv(f.Q), cu1, out.map(), lse.map(), opt);
    };
    check_bad_call(b, untouched);
    b.name += " (single form)";
    b.call = [&, opt = opt] { (void)ea::attention_decode(f.cache, f.s1, f.Q, opt); };
    check_bad_call(b);
  }
}

TEST_CASE("decode errors: outputs over Q or over each other") {
  Fixture f;
  const ea::SequenceId one[1] = {f.s0};
  const std::int64_t cu1[2] = {0, kTq};
  // Q in a buffer of its own, the outputs laid over it.
  std::vector<float> q_buf(static_cast<size_t>(kTq * kH * kDk));
  Eigen::Map<RowMatrix<float>> Q(q_buf.data(), kTq, kH * kDk);
  Q = f.Q;
  const std::vector<float> q_before = q_buf;
  Sentinel out(kTq, kH * kDv), lse(kTq, kH), both(kTq, kH * kDv + kH);
  const auto untouched = [&] {
    return q_buf == q_before && out.untouched() && lse.untouched() && both.untouched();
  };
  const std::vector<BadCall> bad = {
      {"attn over Q",
       [&] {
         ea::attention_decode_into(f.cache, one, 1, qv(Q), cu1, Out(q_buf.data(), kTq, kH * kDv), lse.map());
       },
       {},
       {{"attn"}, {"Q"}, {"overlap"}}},
      {"lse over the end of Q",
       [&] {
         ea::attention_decode_into(f.cache, one, 1, qv(Q), cu1, out.map(), Out(q_buf.data() + 90, kTq, kH));
       },
       {},
       {{"lse"}, {"Q"}, {"overlap"}}},
      {"lse over attn",
       [&] {
         ea::attention_decode_into(f.cache, one, 1, qv(Q), cu1, Out(both.data.data(), kTq, kH * kDv),
                                   Out(both.data.data() + kH * kDv - 12, kTq, kH));
       },
       {},
       {{"lse"}, {"attn"}, {"overlap"}}},
  };
  for (const BadCall& b : bad) check_bad_call(b, untouched);
}

TEST_CASE("decode errors: PagedKVView") {
  Fixture f;
  const auto& cache = f.cache;
  const auto& Q = f.Q;
  const Eigen::Index stride = 3;  // pages per sequence in the block tables
  const auto p0 = cache.pages(f.s0), p1 = cache.pages(f.s1);
  REQUIRE(p0.size() == 3);
  REQUIRE(p1.size() == 2);
  const std::vector<std::int32_t> tables = {p0[0], p0[1], p0[2], p1[0], p1[1], -7};
  const std::vector<std::int64_t> lengths = {kLen0, kLen1};
  const std::int64_t cu2[3] = {0, 1, kTq};
  const auto view_of = [&](const std::int32_t* t, const std::int64_t* l, std::ptrdiff_t batch = 2) {
    return view_of_cache(cache, t, stride, l, batch);
  };
  Sentinel out(kTq, kH * kDv), lse(kTq, kH);
  const auto untouched = [&] { return out.untouched() && lse.untouched(); };
  {
    Sentinel o(kTq, kH * kDv), l(kTq, kH);
    CHECK_NOTHROW(
        ea::attention_decode_into(view_of(tables.data(), lengths.data()), qv(Q), cu2, o.map(), l.map()));
    // Equal to the cache's own decode.
    const ea::SequenceId two[2] = {f.s0, f.s1};
    RowMatrix<float> o2, l2;
    ea::attention_decode_into(cache, two, 2, qv(Q), cu2, o2, l2);
    CHECK(o.map() == o2);
    CHECK(l.map() == l2);
  }

  const std::int32_t num_pages = static_cast<std::int32_t>(cache.num_pages());
  std::vector<std::int32_t> beyond = tables, negative = tables;
  beyond[1] = num_pages;
  negative[3] = -1;
  const std::vector<std::int64_t> negative_length = {-3, kLen1}, too_long = {kLen0, stride * kPage + 1};
  auto view_with = [&](auto set) {
    auto v = view_of(tables.data(), lengths.data());
    set(v);
    return v;
  };
  using View = ea::PagedKVView<float>;
  const auto decode = [&](const View& v) {
    return [&, v] { ea::attention_decode_into(v, qv(Q), cu2, out.map(), lse.map()); };
  };
  const std::vector<BadCall> bad = {
      {"a page index = num_pages",
       decode(view_of(beyond.data(), lengths.data())),
       {1, 0, num_pages},
       {{"page"}, {"outside"}}},
      {"a page index -1", decode(view_of(negative.data(), lengths.data())), {0, 1}, {{"page"}, {"outside"}}},
      {"a negative length",
       decode(view_of(tables.data(), negative_length.data())),
       {0, 3},
       {{"lengths"}, {"negative"}}},
      {"a length beyond block_table_stride * page_size",
       decode(view_of(tables.data(), too_long.data())),
       {1, stride * kPage + 1, stride * kPage, stride, kPage},
       {{"lengths"}, {"block_table_stride"}}},
      {"null block tables with a positive length",
       decode(view_of(nullptr, lengths.data())),
       {0},
       {{"block_tables"}, {"null"}}},
      {"null lengths", decode(view_of(tables.data(), nullptr)), {}, {{"lengths"}, {"null"}}},
      {"page_size 0", decode(view_with([](View& v) { v.page_size = 0; })), {0}, {{"page_size"}}},
      {"kv_heads 0", decode(view_with([](View& v) { v.kv_heads = 0; })), {0}, {{"kv_heads"}}},
      {"d_k 0", decode(view_with([](View& v) { v.d_k = 0; })), {0}, {{"d_k"}}},
      {"a negative batch", decode(view_with([](View& v) { v.batch = -1; })), {1}, {{"sequences", "batch"}}},
      {"negative block_table_stride",
       decode(view_with([](View& v) { v.block_table_stride = -1; })),
       {1},
       {{"block_table_stride"}}},
  };
  for (const BadCall& b : bad) check_bad_call(b, untouched);
}

TEST_CASE("decode errors: PagedKVView of several sequences without cu_seqlens_q") {
  // cu_seqlens_q may be null only when the view holds one sequence (all of Q is its queries);
  // with batch 2 the call must say that cu_seqlens_q is missing, and must not read offsets that
  // are not there (the front door's stand-in for a null cu_seqlens_q holds 2 offsets only).
  Fixture f;
  const auto p0 = f.cache.pages(f.s0), p1 = f.cache.pages(f.s1);
  const std::vector<std::int32_t> tables = {p0[0], p0[1], p0[2], p1[0], p1[1], 0};
  const std::vector<std::int64_t> lengths = {kLen0, kLen1};
  const auto view = view_of_cache(f.cache, tables.data(), 3, lengths.data(), 2);
  Sentinel out(kTq, kH * kDv);
  check_bad_call({"batch 2, cu_seqlens_q null",
                  [&] { ea::attention_decode_into(view, qv(f.Q), nullptr, out.map()); },
                  {},
                  {{"cu_seqlens_q"}, {"null"}}},
                 [&] { return out.untouched(); });
}

TEST_CASE("decode errors: messages name the call made, the missing offsets, stale ids, and counts of one") {
  Fixture f;
  const auto p0 = f.cache.pages(f.s0), p1 = f.cache.pages(f.s1);
  const std::vector<std::int32_t> tables = {p0[0], p0[1], p0[2], p1[0], p1[1], 0};
  const std::vector<std::int64_t> lengths = {kLen0, kLen1};
  const auto view = view_of_cache(f.cache, tables.data(), 3, lengths.data(), 2);
  Sentinel out(kTq, kH * kDv);
  const std::string need_offsets =
      "cu_seqlens_q is null: packed sequences need batch + 1 = 3 offsets (sequence b's queries are tokens "
      "cu_seqlens_q[b] .. cu_seqlens_q[b + 1] of Q; null is for one sequence only)";
  // The call the user made is named: attention_decode over a view is not attention_decode_into.
  CHECK(invalid_argument_message([&] { ea::attention_decode_into(view, qv(f.Q), nullptr, out.map()); }) ==
        "EigenAttention::attention_decode_into: " + need_offsets);
  CHECK(invalid_argument_message([&] { (void)ea::attention_decode(view, f.Q); }) ==
        "EigenAttention::attention_decode: " + need_offsets);
  const ea::SequenceId two[2] = {f.s0, f.s1};
  CHECK(invalid_argument_message([&] {
          ea::attention_decode_into(f.cache, two, 2, qv(f.Q), nullptr, out.map());
        }) == "EigenAttention::attention_decode_into: " + need_offsets);
  std::vector<std::int32_t> beyond = tables;
  beyond[0] = static_cast<std::int32_t>(f.cache.num_pages());
  const auto bad_view = view_of_cache(f.cache, beyond.data(), 3, lengths.data(), 2);
  const std::int64_t cu2[3] = {0, 1, kTq};
  CHECK(
      invalid_argument_message([&] { (void)ea::attention_decode(bad_view, f.Q, cu2); })
          .rfind("EigenAttention::attention_decode: page 0 of sequence 0 is 12, outside the pool's 12 pages",
                 0) == 0);

  // A released id, in a batch.
  const ea::SequenceId released[2] = {f.s0, f.gone};
  CHECK(invalid_argument_message([&] {
          ea::attention_decode_into(f.cache, released, 2, qv(f.Q), cu2, out.map());
        }) == "EigenAttention::attention_decode_into: sequences[1]: sequence " +
                  std::to_string(f.gone.value) + " is not in the cache: it was released");
  CHECK(out.untouched());

  // Counts of one, in the singular.
  const RowMatrix<float> Q1 = f.Q.topRows(1);
  Sentinel out1(1, kH * kDv);
  const std::int64_t cu_none[3] = {0, 0, 0};
  CHECK(
      invalid_argument_message(
          [&] { ea::attention_decode_into(f.cache, two, 2, qv(Q1), cu_none, out1.map()); }) ==
      "EigenAttention::attention_decode_into: cu_seqlens_q[2] = 0 but Q has 1 token (every token belongs to "
      "a sequence)");
  CHECK(invalid_argument_message([&] {
          ea::attention_decode_into(f.cache, two, 0, qv(Q1), nullptr, out1.map());
        }) == "EigenAttention::attention_decode_into: Q has 1 token but there is no sequence");
  const std::int32_t table5[1] = {5};
  const std::int64_t three[1] = {3}, two_tokens[1] = {2};
  auto one_page = view_of_cache(f.cache, table5, 1, three, 1);
  one_page.num_pages = 1;
  CHECK(invalid_argument_message([&] { (void)ea::attention_decode(one_page, Q1); }) ==
        "EigenAttention::attention_decode: page 0 of sequence 0 is 5, outside the pool's 1 page");
  auto tiny_pages = view_of_cache(f.cache, table5, 1, two_tokens, 1);
  tiny_pages.page_size = 1;
  CHECK(invalid_argument_message([&] { (void)ea::attention_decode(tiny_pages, Q1); }) ==
        "EigenAttention::attention_decode: lengths[0] = 2 exceeds the 1 token that block_table_stride = 1 "
        "page of "
        "1 token hold");
  CHECK(out1.untouched());
  // The vector form's offsets: one offset for one sequence.
  CHECK(invalid_argument_message([&] {
          (void)ea::attention_decode(f.cache, std::vector<ea::SequenceId>{f.s0}, Q1,
                                     std::vector<std::int64_t>{0});
        }) == "EigenAttention::attention_decode: cu_seqlens_q has 1 offset but must have 2 (sequences + 1)");
}

}  // namespace test_decode_errors
