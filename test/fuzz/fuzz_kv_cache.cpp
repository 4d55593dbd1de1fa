// SPDX-License-Identifier: MIT
// libFuzzer target: PagedKVCache (KVCache.hpp) under a random series of operations, against a
// model of it (test/support/kv_cache_model.hpp); and, when the input's first byte is >= 0xe0,
// decode through caller views, PagedKVView::nhd and ::hnd, over pages the harness lays out
// (run_views says what such an input decodes into and what is checked).
//
// What an input decodes into (bytes read front to back; past the end every byte reads 0):
//   [0] page size 16 << (b % 5): 16 to 256 (b < 0xe0)      [1] kv_heads 1 + b % 3
//   [2] d_k 1 + b % 8                           [3] d_v b % 6
//   [4] query heads per KV head 1 + b % 3      [5] pages 1 + b % 8 (a small pool: "full" happens)
//   [6] capacity_tokens = pages * page size - b % page size (rounded up to the same pages)
//   [7..10] the seed of the token and query values (uniform in [-2, 2])
//   then operations until the input ends (at most 64), each a kind byte and its arguments (run on
//   the float cache and, alike, on three quantized caches: int8, e4m3 and e5m2):
//     create; append of 0..40 tokens (as a matrix, a HeadsView, a column-major matrix or an
//     expression); fork; truncate (to a length in range, one past it, or negative); release;
//     erase (a range in the sequence, a whole number of pages from a random begin, past the
//     end, or from a negative begin);
//     decode of one sequence (T_q 1..3, options, a tree mask) or of two at once; an append that must fail
//     (K or V of the wrong width, K and V of different token counts, a HeadsView of batch 2 or
//     with one head too many). Each operation names its sequence with a byte that picks among the
//     live ids, the released ones and two never handed out (so that dead ids are used too).
// make_seeds.py writes the seed corpus in this format. Run an input with EA_FUZZ_VERBOSE=1 set
// to print what it decodes into.
//
// The contract checked after every operation:
// - it succeeds exactly when the model says it must (a live sequence, shapes that fit, enough
//   free pages counting the copy of a shared, partly filled last page, a length in range); a
//   failure is std::invalid_argument (a full pool's message says "full") and changes nothing: no
//   sequence's pages, no length, not free_pages (any other exception escapes: a crash);
// - the cache's bookkeeping equals the model's (check_cache): free_pages, every live sequence's
//   length and pages, shared exactly where the model shares them, the bytes in the pages equal
//   the model's tokens, and every released id throws on length() and pages(); an operation
//   changes no other sequence's pages; create and fork hand out an id that is not live;
// - a decode of a live sequence equals bitwise (out and lse) the decode of the model's tokens in
//   a fresh cache of the same page size; a decode naming a dead sequence throws
//   std::invalid_argument and writes nothing into its outputs;
// - the quantized caches (PagedKVCache<Int8 | Float8E4M3 | Float8E5M2>, the model's float tokens
//   quantized by each append) succeed and fail as the float cache does, hand out the same ids and
//   pages and free pages, decode bitwise as a fresh quantized cache of the model's tokens, and
//   refuse an append with a NaN or an infinity (tried beside every bad append), changing nothing.
// A violation prints the decoded operations and traps.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "../support/kv_cache_model.hpp"
#include "fuzz_common.hpp"

namespace {

namespace ea = EigenAttention;
using ea_fuzz::format;
using ea_fuzz::note;
using ea_fuzz::Reader;
using ea_test::kv_model::CacheModel;
using ea_test::kv_model::TokenRows;
using Eigen::Index;
using Rows = TokenRows<float>;

bool g_verbose = false;
constexpr float kSentinel = 1234.5f;

struct Harness {
  Index page, kv_heads, d_k, d_v, heads;
  ea::PagedKVCache<float> cache;
  CacheModel<float> model;
  ea_fuzz::Rng values;
  // The same operations on quantized caches (see the contract above).
  ea::PagedKVCache<ea::Int8> int8;
  ea::PagedKVCache<ea::Float8E4M3> e4m3;
  ea::PagedKVCache<ea::Float8E5M2> e5m2;

  Harness(Index page_, Index kv_heads_, Index d_k_, Index d_v_, Index group, Index capacity,
          std::uint64_t seed)
      : page(page_),
        kv_heads(kv_heads_),
        d_k(d_k_),
        d_v(d_v_),
        heads(kv_heads_ * group),
        cache(kv_heads_, d_k_, d_v_, page_, capacity),
        model(kv_heads_, d_k_, d_v_, page_, capacity),
        values(seed),
        int8(kv_heads_, d_k_, d_v_, page_, capacity),
        e4m3(kv_heads_, d_k_, d_v_, page_, capacity),
        e5m2(kv_heads_, d_k_, d_v_, page_, capacity) {}

  /// f(cache, name) for each quantized cache.
  template <class F>
  void each_quantized(F&& f) {
    f(int8, "int8");
    f(e4m3, "e4m3");
    f(e5m2, "e5m2");
  }

  Rows random(Index rows, Index cols) {
    Rows m(rows, cols);
    for (Index i = 0; i < rows; ++i)
      for (Index j = 0; j < cols; ++j) m(i, j) = static_cast<float>(4 * values.unit() - 2);
    return m;
  }

  /// A sequence id: a live one, a released one, or one never handed out.
  ea::SequenceId pick(Reader& r) {
    std::vector<std::int32_t> ids;
    for (const std::int32_t id : model.ids()) ids.push_back(id);  // live and released, sorted
    const std::int32_t next = ids.empty() ? 0 : ids.back() + 1;
    ids.push_back(next + 3);
    ids.push_back(-1);
    return {ids[r.u8() % ids.size()]};
  }

  std::string check() {
    std::string why = ea_test::kv_model::check_cache(cache, model);
    each_quantized([&](const auto& q, const char* name) {
      if (!why.empty()) return;
      if (q.free_pages() != cache.free_pages()) why = std::string(name) + " cache: free_pages differ";
      for (const auto& entry : model.sequences()) {
        const ea::SequenceId id{entry.first};
        if (q.length(id) != cache.length(id) || q.pages(id) != cache.pages(id))
          why = std::string(name) + " cache: sequence " + std::to_string(id.value) + " has other pages";
      }
    });
    return why;
  }
  std::map<std::int32_t, std::vector<std::int32_t>> pages() const {
    return ea_test::kv_model::all_pages(cache, model);
  }
};

std::string ids_text(const std::map<std::int32_t, std::vector<std::int32_t>>& pages) {
  std::string s;
  for (const auto& [id, p] : pages) {
    s += format(" %d:[", id);
    for (const auto x : p) s += format("%d,", x);
    s += "]";
  }
  return s;
}

/// Runs `f`; true when it returned, false when it threw std::invalid_argument (whose message is
/// kept). Any other exception escapes.
template <class F>
bool succeeds(F&& f, std::string& message) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    message = e.what();
    return false;
  }
  return true;
}

/// The outcome against the model's expectation, and nothing changed by a failure.
void judge(Harness& h, const char* what, bool ok, bool expected_ok, const std::string& message,
           const std::map<std::int32_t, std::vector<std::int32_t>>& before, Index free_before) {
  EA_EXPECT(ok == expected_ok, "%s %s but the model says it %s (message: %s)", what,
            ok ? "succeeded" : "threw", expected_ok ? "must succeed" : "must throw", message.c_str());
  if (!ok) {
    const auto after = h.pages();
    EA_EXPECT(after == before, "%s threw but changed pages:%s -> %s", what, ids_text(before).c_str(),
              ids_text(after).c_str());
    EA_EXPECT(h.cache.free_pages() == free_before, "%s threw but changed free_pages %td -> %td", what,
              free_before, h.cache.free_pages());
  }
}

/// Runs op(cache) on each quantized cache: it must succeed exactly when the float cache's did.
template <class Op>
void mirror(Harness& h, const char* what, bool ok, Op&& op) {
  h.each_quantized([&](auto& q, const char* name) {
    std::string message;
    const bool q_ok = succeeds([&] { op(q); }, message);
    EA_EXPECT(q_ok == ok, "%s %s on the float cache but %s on the %s cache (%s)", what,
              ok ? "succeeded" : "threw", q_ok ? "succeeded" : "threw", name, message.c_str());
  });
}

ea::Options decode_options(std::uint8_t b) {
  ea::Options opt;
  opt.causal = b & 1;
  if (b & 2) {
    opt.window_left = (b >> 4) * 5;
  } else {
    opt.chunk_size = b >> 4;  // chunked-local attention: chunks of 1..15 tokens, or off
  }
  if (b & 4) opt.softcap = 3;
  opt.threads = (b & 8) ? 2 : 1;
  return opt;
}

void decode_one(Harness& h, Reader& r) {
  const ea::SequenceId s = h.pick(r);
  const std::uint8_t tb = r.u8();
  const Index tq = 1 + tb % 3;
  const std::uint8_t ob = r.u8();
  const ea::Options opt = decode_options(ob);
  // A tree mask (speculative decoding) over the last T_q tokens in a third of the decodes of
  // several tokens: each row sees itself and a random choice of the others (drawn from the value
  // stream, so that the input's bytes mean what they meant before).
  const bool tree = tq > 1 && (tb / 3) % 3 == 1;
  char tree_bits[9] = {};
  for (Index i = 0; tree && i < tq * tq; ++i) tree_bits[i] = i % (tq + 1) == 0 || h.values.unit() < 0.5;
  ea::Masks<float> masks;
  if (tree) masks.mask = ea::BroadcastView<bool>::matrix(reinterpret_cast<const bool*>(tree_bits), tq, tq);
  note(format("decode %d: T_q %td, causal %d, window_left %td, chunk %td, softcap %g, threads %d, tree %d",
              s.value, tq, int(opt.causal), opt.window_left, opt.chunk_size, opt.softcap, opt.threads,
              int(tree)));
  const Rows Q = h.random(tq, h.heads * h.d_k);
  if (h.model.live(s.value)) {
    const auto got = ea_test::kv_model::decode_sequence(h.cache, s, Q, opt, masks);
    const auto want = ea_test::kv_model::decode_model(h.model, s.value, Q, opt, masks);
    EA_EXPECT(
        ea_test::kv_model::same_bits(got.out, want.out) && ea_test::kv_model::same_bits(got.lse, want.lse),
        "decode of sequence %d (%td tokens) differs from a fresh cache's decode of its tokens", s.value,
        h.model.sequence(s.value).length());
    h.each_quantized([&](const auto& q, const char* name) {
      using Stored = typename std::decay_t<decltype(q)>::Storage;
      const auto qgot = ea_test::kv_model::decode_sequence(q, s, Q, opt, masks);
      const auto qwant = ea_test::kv_model::decode_model_as<Stored>(h.model, s.value, Q, opt, masks);
      EA_EXPECT(ea_test::kv_model::same_bits(qgot.out, qwant.out) &&
                    ea_test::kv_model::same_bits(qgot.lse, qwant.lse),
                "decode of sequence %d on the %s cache differs from a fresh %s cache's decode of its tokens",
                s.value, name, name);
    });
  } else {
    std::vector<float> out(static_cast<std::size_t>(tq * h.heads * h.d_v), kSentinel),
        lse(static_cast<std::size_t>(tq * h.heads), kSentinel);
    Eigen::Map<Rows> o(out.data(), tq, h.heads * h.d_v), l(lse.data(), tq, h.heads);
    const std::int64_t cu[2] = {0, tq};
    std::string message;
    const bool ok = succeeds(
        [&] {
          ea::attention_decode_into(h.cache, &s, 1, ea::HeadsView<const float>::side_by_side(Q, h.d_k), cu, o,
                                    l, opt);
        },
        message);
    EA_EXPECT(!ok, "decode of dead sequence %d returned", s.value);
    for (const float x : out) EA_EXPECT(x == kSentinel, "decode of dead sequence %d wrote out", s.value);
    for (const float x : lse) EA_EXPECT(x == kSentinel, "decode of dead sequence %d wrote lse", s.value);
  }
}

void decode_two(Harness& h, Reader& r) {
  const ea::SequenceId ids[2] = {h.pick(r), h.pick(r)};
  const Index t0 = r.u8() % 3, t1 = 1 + r.u8() % 2;
  const ea::Options opt = decode_options(r.u8());
  note(format("decode [%d, %d]: T_q %td + %td, causal %d", ids[0].value, ids[1].value, t0, t1,
              int(opt.causal)));
  const Rows Q = h.random(t0 + t1, h.heads * h.d_k);
  const std::int64_t cu[3] = {0, t0, t0 + t1};
  const bool live = h.model.live(ids[0].value) && h.model.live(ids[1].value);
  Rows out = Rows::Constant(t0 + t1, h.heads * h.d_v, kSentinel),
       lse = Rows::Constant(t0 + t1, h.heads, kSentinel);
  std::string message;
  const bool ok = succeeds(
      [&] {
        ea::attention_decode_into(h.cache, ids, 2, ea::HeadsView<const float>::side_by_side(Q, h.d_k), cu,
                                  out, lse, opt);
      },
      message);
  EA_EXPECT(ok == live, "batched decode %s (%s)", ok ? "returned with a dead sequence" : "threw",
            message.c_str());
  if (!ok) {
    EA_EXPECT((out.array() == kSentinel).all() && (lse.array() == kSentinel).all(), "a failed decode wrote");
    return;
  }
  // Each sequence's rows as decoded alone on a fresh cache.
  const Index rows[2] = {t0, t1}, first[2] = {0, t0};
  for (int b = 0; b < 2; ++b) {
    if (rows[b] == 0) continue;
    const auto want =
        ea_test::kv_model::decode_model(h.model, ids[b].value, Q.middleRows(first[b], rows[b]), opt);
    EA_EXPECT(ea_test::kv_model::same_bits(Rows(out.middleRows(first[b], rows[b])), want.out) &&
                  ea_test::kv_model::same_bits(Rows(lse.middleRows(first[b], rows[b])), want.lse),
              "batched decode: sequence %d differs from a fresh cache's decode of its tokens", ids[b].value);
  }
}

void append(Harness& h, Reader& r) {
  const ea::SequenceId s = h.pick(r);
  const Index n = r.u8() % 41;
  const int form = r.u8() % 4;
  const Rows K = h.random(n, h.kv_heads * h.d_k), V = h.random(n, h.kv_heads * h.d_v);
  static const char* const kForms[] = {"matrix", "HeadsView", "column-major", "expression"};
  note(format("append %td tokens to %d (%s)", n, s.value, kForms[form]));
  const bool live = h.model.live(s.value);
  const bool fits = live && h.model.pages_taken(s.value, n) <= h.model.free_pages();
  const auto before = h.pages();
  const Index free_before = h.cache.free_pages();
  std::string message;
  const bool ok = succeeds(
      [&] {
        switch (form) {
          case 0:
            h.cache.append(s, K, V);
            break;
          case 1:
            h.cache.append(s, ea::HeadsView<const float>::bthd(K.data(), 1, n, h.kv_heads, h.d_k),
                           ea::HeadsView<const float>::bthd(V.data(), 1, n, h.kv_heads, h.d_v));
            break;
          case 2: {
            const Eigen::MatrixXf Kc = K, Vc = V;
            h.cache.append(s, Kc, Vc);
            break;
          }
          default:
            h.cache.append(s, K * 1.0f, V + Rows::Zero(n, V.cols()));
        }
      },
      message);
  judge(h, "append", ok, fits, message, before, free_before);
  mirror(h, "append", ok, [&](auto& q) { q.append(s, K, V); });
  if (!ok && live) {
    EA_EXPECT(message.find("full") != std::string::npos, "append refused for want of pages says: %s",
              message.c_str());
  }
  if (ok) {
    EA_EXPECT(h.model.append(s.value, K, V), "the model refused");
    for (const auto& [id, p] : before)
      if (id != s.value)
        EA_EXPECT(h.cache.pages({id}) == p, "append to %d moved the pages of %d", s.value, id);
  }
}

void bad_append(Harness& h, Reader& r) {
  const ea::SequenceId s = h.pick(r);
  const Index n = 1 + r.u8() % 20;
  const int fault = r.u8() % 5;
  static const char* const kFaults[] = {"K one column wider", "V of another width", "V with one more token",
                                        "HeadsView of batch 2", "HeadsView with one head too many"};
  note(format("bad append to %d: %td tokens, %s", s.value, n, kFaults[fault]));
  const Index kw = h.kv_heads * h.d_k, vw = h.kv_heads * h.d_v;
  const Rows K = h.random(n + 1, (h.kv_heads + 1) * h.d_k + 1), V = h.random(n + 1, vw + 1);
  const auto before = h.pages();
  const Index free_before = h.cache.free_pages();
  std::string message;
  using View = ea::HeadsView<const float>;
  const bool ok = succeeds(
      [&] {
        switch (fault) {
          case 0:
            h.cache.append(s, K.topLeftCorner(n, kw + 1), V.topLeftCorner(n, vw));
            break;
          case 1:
            h.cache.append(s, K.topLeftCorner(n, kw), V.topLeftCorner(n, vw == 0 ? 1 : vw - 1));
            break;
          case 2:
            h.cache.append(s, K.topLeftCorner(n, kw), V.topLeftCorner(n + 1, vw));
            break;
          case 3:
            h.cache.append(s, View::bhtd(K.data(), 2, h.kv_heads, 1, h.d_k),
                           View::bhtd(V.data(), 2, h.kv_heads, 1, 0));
            break;
          default:
            h.cache.append(s, View::bthd(K.data(), 1, 1, h.kv_heads + 1, h.d_k),
                           View::bthd(V.data(), 1, 1, h.kv_heads, h.d_v));
        }
      },
      message);
  judge(h, "bad append", ok, false, message, before, free_before);
  // A NaN or an infinity in a token the quantized caches would otherwise take: refused, naming it.
  if (n <= 40) {
    Rows Kq = h.random(n, kw), Vq = h.random(n, vw);
    const Index t = static_cast<Index>(h.values.unit() * static_cast<double>(n)) % n;
    const float bad = h.values.unit() < 0.5 ? std::numeric_limits<float>::quiet_NaN()
                                            : -std::numeric_limits<float>::infinity();
    Rows& target = vw > 0 && h.values.unit() < 0.5 ? Vq : Kq;
    target(t, static_cast<Index>(h.values.unit() * static_cast<double>(target.cols())) % target.cols()) = bad;
    mirror(h, "an append with a NaN or infinity", false, [&](auto& q) {
      try {
        q.append(s, Kq, Vq);
      } catch (const std::invalid_argument& e) {
        const std::string m = e.what();
        EA_EXPECT(!h.model.live(s.value) || m.find(std::to_string(t) + " (of the") != std::string::npos,
                  "the refused append does not name token %td: %s", t, m.c_str());
        throw;
      }
    });
  }
}

void run(Reader& r, std::size_t size) {
  const Index page = Index(16) << (r.u8() % 5);
  const Index kv_heads = 1 + r.u8() % 3, d_k = 1 + r.u8() % 8, d_v = r.u8() % 6, group = 1 + r.u8() % 3;
  const Index pages = 1 + r.u8() % 8;
  const Index capacity = pages * page - r.u8() % page;
  const std::uint64_t seed = r.u32();
  note(format(
      "PagedKVCache<float>: page %td, kv_heads %td, d_k %td, d_v %td, heads %td, capacity %td tokens (%td "
      "pages)",
      page, kv_heads, d_k, d_v, kv_heads * group, capacity, pages));
  Harness h(page, kv_heads, d_k, d_v, group, capacity, seed);
  EA_EXPECT(h.cache.num_pages() == pages && h.cache.free_pages() == pages, "%td pages, %td free",
            h.cache.num_pages(), h.cache.free_pages());

  for (int step = 0; step < 64 && r.consumed() < size; ++step) {
    const int kind = r.u8() % 11;
    switch (kind) {
      case 0: {
        const ea::SequenceId id = h.cache.create();
        note(format("create -> %d", id.value));
        EA_EXPECT(h.model.can_adopt(id.value), "create handed out %d, which is live", id.value);
        h.model.create(id.value);
        mirror(h, "create", true, [&](auto& q) {
          EA_EXPECT(q.create() == id, "a quantized cache's create handed out another id");
        });
        break;
      }
      case 1:
      case 2:
        append(h, r);
        break;
      case 3: {
        const ea::SequenceId s = h.pick(r);
        const auto before = h.pages();
        const Index free_before = h.cache.free_pages();
        ea::SequenceId id;
        std::string message;
        const bool ok = succeeds([&] { id = h.cache.fork(s); }, message);
        note(format("fork %d -> %d", s.value, ok ? id.value : -1));
        judge(h, "fork", ok, h.model.live(s.value), message, before, free_before);
        mirror(h, "fork", ok, [&](auto& q) {
          EA_EXPECT(q.fork(s) == id, "a quantized cache's fork handed out another id");
        });
        if (ok) {
          EA_EXPECT(h.model.can_adopt(id.value), "fork handed out %d, which is live", id.value);
          h.model.fork(s.value, id.value);
          auto expected = before;
          expected[id.value] = before.at(s.value);
          EA_EXPECT(h.pages() == expected, "fork changed pages or did not share them");
        }
        break;
      }
      case 4: {
        const ea::SequenceId s = h.pick(r);
        const std::uint8_t mode = r.u8();
        const std::int64_t length = h.model.live(s.value) ? h.model.sequence(s.value).length() : 0;
        std::int64_t to = mode % 8 < 6    ? r.u8() % (length + 1)
                          : mode % 8 == 6 ? length + 1 + r.u8()
                                          : -1 - r.u8();
        note(format("truncate %d (%lld tokens) to %lld", s.value, (long long)length, (long long)to));
        const auto before = h.pages();
        const Index free_before = h.cache.free_pages();
        std::string message;
        const bool ok = succeeds([&] { h.cache.truncate(s, to); }, message);
        judge(h, "truncate", ok, h.model.live(s.value) && to >= 0 && to <= length, message, before,
              free_before);
        mirror(h, "truncate", ok, [&](auto& q) { q.truncate(s, to); });
        if (ok) {
          EA_EXPECT(h.model.truncate(s.value, to), "the model refused");
          const auto after = h.pages();
          for (const auto& [id, p] : before) {
            if (id == s.value) {
              EA_EXPECT(std::equal(after.at(id).begin(), after.at(id).end(), p.begin()),
                        "truncate changed kept pages");
            } else {
              EA_EXPECT(after.at(id) == p, "truncate of %d changed the pages of %d", s.value, id);
            }
          }
        }
        break;
      }
      case 5: {
        const ea::SequenceId s = h.pick(r);
        note(format("release %d", s.value));
        const auto before = h.pages();
        const Index free_before = h.cache.free_pages();
        std::string message;
        const bool ok = succeeds([&] { h.cache.release(s); }, message);
        judge(h, "release", ok, h.model.live(s.value), message, before, free_before);
        mirror(h, "release", ok, [&](auto& q) { q.release(s); });
        if (ok) {
          h.model.release(s.value);
          auto expected = before;
          expected.erase(s.value);
          EA_EXPECT(h.pages() == expected, "release changed other sequences' pages");
        }
        break;
      }
      case 10: {
        const ea::SequenceId s = h.pick(r);
        const std::uint8_t mode = r.u8(), a = r.u8(), b = r.u8();
        const std::int64_t length = h.model.live(s.value) ? h.model.sequence(s.value).length() : 0;
        std::int64_t begin = a % (length + 1), end = begin + b % (length - begin + 1);
        if (mode % 8 == 4 || mode % 8 == 5) end = begin + h.cache.page_size() * (1 + b % 3);  // whole pages
        if (mode % 8 == 6) end = length + 1 + b;
        if (mode % 8 == 7) begin = -1 - a;
        note(format("erase %d (%lld tokens) [%lld, %lld)", s.value, (long long)length, (long long)begin,
                    (long long)end));
        const auto before = h.pages();
        const Index free_before = h.cache.free_pages();
        std::string message;
        const bool ok = succeeds([&] { h.cache.erase(s, begin, end); }, message);
        mirror(h, "erase", ok, [&](auto& q) { q.erase(s, begin, end); });
        if (!h.model.live(s.value)) {
          judge(h, "erase", ok, false, message, before, free_before);
          break;
        }
        // The model says whether the range fits and the copies find free pages (doing it when so).
        const bool model_ok = h.model.erase(s.value, begin, end);
        judge(h, "erase", ok, model_ok, message, before, free_before);
        if (ok) {
          const auto after = h.pages();
          for (const auto& [id, p] : before)
            if (id != s.value)
              EA_EXPECT(after.at(id) == p, "erase of %d changed the pages of %d", s.value, id);
        }
        break;
      }
      case 6:
      case 7:
        decode_one(h, r);
        break;
      case 8:
        bad_append(h, r);
        break;
      default:
        decode_two(h, r);
    }
    const std::string why = h.check();
    EA_EXPECT(why.empty(), "the cache differs from the model: %s", why.c_str());
  }
}

// ---------------------------------------------------------------------------------------------
// Decode through caller views (PagedKVView::nhd and ::hnd) over pages laid out here.

/// The pages of one layout: element (p, t, h, c) of the keys at k[p * kp + t * kt + h * kh + c].
struct Pages {
  std::vector<float> k, v;
};

/// Decodes a PagedKVView over the caller's pages: out and lse, or the exception's message.
struct ViewResult {
  bool ok = false;
  std::string message;
  std::vector<float> out, lse;
};

ViewResult decode_view(const ea::PagedKVView<float>& view, const std::vector<float>& q, Index H, Index tq,
                       Index d_k, Index d_v, const std::int64_t* cu, const ea::Options& opt,
                       const ea::Masks<float>& masks) {
  ViewResult res;
  res.out.assign(static_cast<std::size_t>(H * tq * d_v), kSentinel);
  res.lse.assign(static_cast<std::size_t>(H * tq), kSentinel);
  res.ok = succeeds(
      [&] {
        ea::attention_decode_into(view, ea::HeadsView<const float>::bhtd(q.data(), 1, H, tq, d_k), cu,
                                  ea::HeadsView<float>::bhtd(res.out.data(), 1, H, tq, d_v),
                                  ea::HeadsView<float>::bhtd(res.lse.data(), 1, H, tq, 1), opt, masks);
      },
      res.message);
  return res;
}

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

/// The view mode (the input's first byte >= 0xe0). What the rest decodes into:
///   page size (1..8, or 16 or 32: a cache's), kv_heads 1..3, d_k 1..6, d_v 0..5 (d_k != d_v
///   mostly), query heads per KV head 1..3, pages 1..10, sequences 0..3, block_table_stride (the
///   entries the longest sequence needs, plus 0..2), the seed of the values, a garbage byte (what
///   fills the slots and table entries no sequence uses: NaN, +-inf, 1e30, or -1 / INT32_MAX /
///   num_pages in the tables), each sequence's length (0, page boundaries +-1, or any up to what
///   its table holds) and its queries (0..3, some beyond its length), the pages its table names
///   (drawn from a shuffled pool: sequences may share pages, as prefix sharing does), the options
///   (the kv_cache options byte, plus ALiBi slopes and sinks at times), and a fault (a table entry
///   out of range, a negative length, a length beyond the table, null pointers, page size 0, a bad
///   cu_seqlens_q, query heads not a multiple of kv_heads).
/// The contract: the NHD and HND views of the same logical pages (the HND pages the transpose of
/// the NHD ones, garbage included) both return or both throw std::invalid_argument (never
/// anything else, never a crash or an out-of-bounds read: the pages are exact-size buffers), with
/// the same message; a fault that breaks a documented rule throws and writes nothing; when they
/// return, their out and lse are bitwise equal, no value is NaN unless a sequence's tokens or the
/// options make it so, and, when the page size is a cache's, equal bitwise to the decode on a
/// PagedKVCache<float> of that page size holding each sequence's tokens (read through its table).
void run_views(Reader& r) {
  static const Index page_sizes[] = {1, 2, 3, 4, 5, 7, 8, 16, 32, 2};
  const Index page = page_sizes[r.u8() % 10];
  const Index kv_heads = 1 + r.u8() % 3, d_k = 1 + r.u8() % 6, d_v = r.u8() % 6, group = 1 + r.u8() % 3;
  const Index num_pages = 1 + r.u8() % 10, batch = r.u8() % 4, H = kv_heads * group;
  const Index extra_stride = r.u8() % 3;
  ea_fuzz::Rng values(r.u32());
  const std::uint8_t garbage_kind = r.u8() % 4;
  static const float garbage_values[] = {std::numeric_limits<float>::quiet_NaN(),
                                         std::numeric_limits<float>::infinity(),
                                         -std::numeric_limits<float>::infinity(), 1e30f};
  const float garbage = garbage_values[garbage_kind];
  // Lengths and queries per sequence.
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(batch)), cu(1, 0);
  Index most_pages = 0;
  for (Index b = 0; b < batch; ++b) {
    const std::uint8_t lb = r.u8();
    const Index boundary = page * (1 + (lb >> 3) % 3);
    std::int64_t n;
    switch (lb % 8) {
      case 0:
        n = 0;
        break;
      case 1:
        n = boundary;
        break;
      case 2:
        n = boundary - 1;
        break;
      case 3:
        n = boundary + 1;
        break;
      default:
        n = r.u8() % (num_pages * page + 1);
    }
    lengths[static_cast<std::size_t>(b)] = n;
    most_pages = std::max<Index>(most_pages, (n + page - 1) / page);
    const std::uint8_t qb = r.u8() % 8;
    const Index tq = qb < 6 ? std::min<Index>(1 + qb % 3, n) : qb == 6 ? 0 : n + 1;  // some beyond
    cu.push_back(cu.back() + tq);
  }
  const Index stride = most_pages + extra_stride, tq_all = cu.back();
  // The tables: entries from a shuffled pool of the pages (repeating when a sequence needs more
  // than the pool), garbage after each sequence's own.
  std::vector<std::int32_t> tables(static_cast<std::size_t>(std::max<Index>(batch * stride, 1)));
  static const std::int32_t garbage_entries[] = {-1, std::numeric_limits<std::int32_t>::max(), 0, 0};
  for (auto& e : tables)
    e = garbage_entries[garbage_kind] != 0 ? garbage_entries[garbage_kind] : std::int32_t(num_pages);
  std::vector<std::int32_t> pool(static_cast<std::size_t>(num_pages));
  for (Index p = 0; p < num_pages; ++p) pool[static_cast<std::size_t>(p)] = std::int32_t(p);
  for (Index p = num_pages - 1; p > 0; --p)
    std::swap(pool[static_cast<std::size_t>(p)], pool[values.below(std::uint64_t(p + 1))]);
  std::size_t next = r.u8() % static_cast<std::size_t>(num_pages);
  for (Index b = 0; b < batch; ++b) {
    const Index used = (lengths[static_cast<std::size_t>(b)] + page - 1) / page;
    for (Index n = 0; n < used; ++n)
      tables[static_cast<std::size_t>(b * stride + n)] = pool[next++ % pool.size()];
  }
  // The pages, NHD: [num_pages, page, kv_heads, d]; garbage first, then every slot a sequence
  // uses gets a value (a page shared by two sequences holds the later one's).
  const std::size_t k_size = static_cast<std::size_t>(num_pages * page * kv_heads * d_k),
                    v_size = static_cast<std::size_t>(num_pages * page * kv_heads * d_v);
  Pages nhd{std::vector<float>(k_size, garbage), std::vector<float>(v_size, garbage)};
  const auto nhd_at = [&](Index p, Index t, Index h, Index c, Index d) {
    return ((p * page + t) * kv_heads + h) * d + c;
  };
  const auto hnd_at = [&](Index p, Index t, Index h, Index c, Index d) {
    return ((p * kv_heads + h) * page + t) * d + c;
  };
  for (Index b = 0; b < batch; ++b)
    for (Index n = 0; n < lengths[static_cast<std::size_t>(b)]; ++n) {
      const Index p = tables[static_cast<std::size_t>(b * stride + n / page)], t = n % page;
      for (Index h = 0; h < kv_heads; ++h) {
        for (Index c = 0; c < d_k; ++c)
          nhd.k[static_cast<std::size_t>(nhd_at(p, t, h, c, d_k))] = float(4 * values.unit() - 2);
        for (Index c = 0; c < d_v; ++c)
          nhd.v[static_cast<std::size_t>(nhd_at(p, t, h, c, d_v))] = float(4 * values.unit() - 2);
      }
    }
  Pages hnd{std::vector<float>(k_size), std::vector<float>(v_size)};
  for (Index p = 0; p < num_pages; ++p)
    for (Index t = 0; t < page; ++t)
      for (Index h = 0; h < kv_heads; ++h) {
        for (Index c = 0; c < d_k; ++c)
          hnd.k[static_cast<std::size_t>(hnd_at(p, t, h, c, d_k))] =
              nhd.k[static_cast<std::size_t>(nhd_at(p, t, h, c, d_k))];
        for (Index c = 0; c < d_v; ++c)
          hnd.v[static_cast<std::size_t>(hnd_at(p, t, h, c, d_v))] =
              nhd.v[static_cast<std::size_t>(nhd_at(p, t, h, c, d_v))];
      }
  const ea::Options opt = decode_options(r.u8());
  const std::uint8_t extras = r.u8();
  std::vector<float> slopes(static_cast<std::size_t>(H)), sinks(static_cast<std::size_t>(H));
  for (auto& x : slopes) x = float(values.unit() * 0.5);
  for (auto& x : sinks) x = float(4 * values.unit() - 2);
  ea::Masks<float> masks;
  if (extras & 1) masks.alibi_slopes = slopes.data();
  if (extras & 2) masks.sinks = sinks.data();
  std::vector<float> q(static_cast<std::size_t>(H * tq_all * d_k));
  for (auto& x : q) x = float(4 * values.unit() - 2);

  // A fault.
  const std::uint8_t fault = r.u8() % 24;
  Index v_page = page, v_batch = batch;
  const float *kp = nhd.k.data(), *vp = nhd.v.data(), *kh = hnd.k.data(), *vh = hnd.v.data();
  const std::int32_t* tp = tables.data();
  const std::int64_t* lp = lengths.data();
  std::vector<std::int64_t> cu_used = cu;
  bool must_throw = false;
  const char* fault_name = "none";
  const auto first_used = [&]() -> Index {  // a table slot some sequence uses, or -1
    for (Index b = 0; b < batch; ++b)
      if (lengths[static_cast<std::size_t>(b)] > 0)
        return b * stride + (lengths[static_cast<std::size_t>(b)] - 1) / page;
    return -1;
  };
  switch (fault) {
    case 16:
    case 17: {
      const Index at = first_used();
      if (at >= 0) {
        tables[static_cast<std::size_t>(at)] = fault == 16 ? std::int32_t(num_pages) : -1;
        must_throw = true, fault_name = "a used table entry out of range";
      }
      break;
    }
    case 18:
      if (batch > 0) {
        lengths[static_cast<std::size_t>(batch - 1)] = -1 - r.u8() % 3;
        must_throw = true, fault_name = "a negative length";
      }
      break;
    case 19:
      if (batch > 0) {
        lengths[0] = std::int64_t(stride * page + 1);
        must_throw = true, fault_name = "a length beyond its table";
      }
      break;
    case 20:
      kp = kh = nullptr, fault_name = "null key pages";
      break;
    case 21:
      if (batch > 0) lp = nullptr, must_throw = true, fault_name = "null lengths";
      break;
    case 22:
      tp = nullptr, fault_name = "null block tables";
      for (const auto n : lengths) must_throw = must_throw || n > 0;
      break;
    case 23:
      v_page = 0, must_throw = true, fault_name = "page size 0";
      break;
    default:
      if (fault == 15 && batch > 0)
        cu_used[1] = cu_used[0] - 1, must_throw = true, fault_name = "cu_seqlens_q decreases";
      if (fault == 14 && kv_heads > 1)
        must_throw = true, fault_name = "query heads not a multiple of kv_heads";
      if (fault == 13) v_batch = -1, must_throw = true, fault_name = "batch -1";
  }
  const Index Hq = fault == 14 && kv_heads > 1 ? H - 1 : H;  // (H >= kv_heads >= 2)
  // Valid unless faulty, but documented neither way: null pages (fault 20), more queries than a
  // sequence's tokens.
  bool may_throw = fault == 20;
  for (Index b = 0; b < batch; ++b)
    may_throw = may_throw || cu[static_cast<std::size_t>(b + 1)] - cu[static_cast<std::size_t>(b)] >
                                 lengths[static_cast<std::size_t>(b)];
  std::string lens;
  for (const auto n : lengths) lens += format(" %lld", (long long)n);
  std::string cus;
  for (const auto x : cu_used) cus += format(" %lld", (long long)x);
  note(format(
      "PagedKVView<float> nhd/hnd: page %td, kv_heads %td, d_k %td, d_v %td, H %td, pages %td, batch %td, "
      "stride %td, garbage %g, lengths:%s, cu_seqlens_q:%s, causal %d, window_left %td, chunk %td, softcap "
      "%g, threads %d, alibi %d, sinks %d, fault: %s",
      page, kv_heads, d_k, d_v, Hq, num_pages, v_batch, stride, double(garbage), lens.c_str(), cus.c_str(),
      int(opt.causal), opt.window_left, opt.chunk_size, opt.softcap, opt.threads, int(extras & 1),
      int((extras >> 1) & 1), fault_name));
  const auto nhd_view =
      ea::PagedKVView<float>::nhd(kp, vp, num_pages, v_page, kv_heads, d_k, d_v, tp, stride, lp, v_batch);
  const auto hnd_view =
      ea::PagedKVView<float>::hnd(kh, vh, num_pages, v_page, kv_heads, d_k, d_v, tp, stride, lp, v_batch);
  // Null (all of q) at times for one sequence, but not when the fault is in the offsets.
  const std::int64_t* cup = v_batch == 1 && (r.u8() & 1) && fault != 15 ? nullptr : cu_used.data();
  const ViewResult a = decode_view(nhd_view, q, Hq, tq_all, d_k, d_v, cup, opt, masks);
  const ViewResult b = decode_view(hnd_view, q, Hq, tq_all, d_k, d_v, cup, opt, masks);
  EA_EXPECT(a.ok == b.ok && a.message == b.message, "the NHD view %s but the HND view of the same pages %s",
            a.ok ? "returned" : ("threw: " + a.message).c_str(),
            b.ok ? "returned" : ("threw: " + b.message).c_str());
  if (g_verbose) note(format("result: %s", a.ok ? "returned" : a.message.c_str()));
  EA_EXPECT(a.ok || must_throw || may_throw, "a decode through valid views threw: %s", a.message.c_str());
  if (!a.ok) {
    for (const ViewResult* res : {&a, &b})
      for (const auto* v : {&res->out, &res->lse})
        for (const float x : *v)
          EA_EXPECT(x == kSentinel, "a decode through a view threw (%s), yet wrote", a.message.c_str());
    return;
  }
  EA_EXPECT(!must_throw, "a decode through a view returned with %s", fault_name);
  EA_EXPECT(same_floats(a.out, b.out) && same_floats(a.lse, b.lse),
            "the NHD and HND views of the same pages decode to different bits");
  // Every value is finite: the sequences' tokens, queries and options are (the garbage is never read).
  for (const float x : a.out)
    EA_EXPECT(std::isfinite(x), "a decode through a view gave %g (garbage read?)", double(x));
  for (const float x : a.lse)
    EA_EXPECT(!std::isnan(x) && x != INFINITY, "a decode through a view gave LSE %g", double(x));
  if (page != 16 && page != 32) return;
  // The same tokens in a PagedKVCache of the same page size, decoded sequence by sequence.
  for (Index bb = 0; bb < batch; ++bb) {
    const Index n = lengths[static_cast<std::size_t>(bb)], q0 = cu[static_cast<std::size_t>(bb)],
                tq = cu[static_cast<std::size_t>(bb + 1)] - q0;
    if (tq == 0) continue;
    Rows K(n, kv_heads * d_k), V(n, kv_heads * d_v);
    for (Index t = 0; t < n; ++t) {
      const Index p = tables[static_cast<std::size_t>(bb * stride + t / page)];
      for (Index h = 0; h < kv_heads; ++h) {
        for (Index c = 0; c < d_k; ++c)
          K(t, h * d_k + c) = nhd.k[static_cast<std::size_t>(nhd_at(p, t % page, h, c, d_k))];
        for (Index c = 0; c < d_v; ++c)
          V(t, h * d_v + c) = nhd.v[static_cast<std::size_t>(nhd_at(p, t % page, h, c, d_v))];
      }
    }
    ea::PagedKVCache<float> cache(kv_heads, d_k, d_v, page, std::max<Index>(n, 1));
    const ea::SequenceId id = cache.create();
    cache.append(id, K, V);
    std::vector<float> qs(static_cast<std::size_t>(H * tq * d_k));
    for (Index h = 0; h < H; ++h)
      for (Index i = 0; i < tq; ++i)
        for (Index c = 0; c < d_k; ++c)
          qs[static_cast<std::size_t>((h * tq + i) * d_k + c)] =
              q[static_cast<std::size_t>((h * tq_all + q0 + i) * d_k + c)];
    std::vector<float> out(static_cast<std::size_t>(H * tq * d_v)), lse(static_cast<std::size_t>(H * tq));
    std::string message;
    const bool ok = succeeds(
        [&] {
          ea::attention_decode_into(cache, &id, 1, ea::HeadsView<const float>::bhtd(qs.data(), 1, H, tq, d_k),
                                    nullptr, ea::HeadsView<float>::bhtd(out.data(), 1, H, tq, d_v),
                                    ea::HeadsView<float>::bhtd(lse.data(), 1, H, tq, 1), opt, masks);
        },
        message);
    EA_EXPECT(ok, "the views returned, but the cache holding sequence %td's tokens threw: %s", bb,
              message.c_str());
    for (Index h = 0; h < H; ++h)
      for (Index i = 0; i < tq; ++i) {
        EA_EXPECT(
            std::memcmp(&lse[static_cast<std::size_t>(h * tq + i)],
                        &a.lse[static_cast<std::size_t>(h * tq_all + q0 + i)], sizeof(float)) == 0,
            "sequence %td head %td query %td: LSE %.9g through the views, %.9g on a cache of its tokens", bb,
            h, i, double(a.lse[static_cast<std::size_t>(h * tq_all + q0 + i)]),
            double(lse[static_cast<std::size_t>(h * tq + i)]));
        for (Index c = 0; c < d_v; ++c)
          EA_EXPECT(std::memcmp(&out[static_cast<std::size_t>((h * tq + i) * d_v + c)],
                                &a.out[static_cast<std::size_t>((h * tq_all + q0 + i) * d_v + c)],
                                sizeof(float)) == 0,
                    "sequence %td head %td query %td: ATTN[%td] %.9g through the views, %.9g on a cache of "
                    "its tokens",
                    bb, h, i, c, double(a.out[static_cast<std::size_t>((h * tq_all + q0 + i) * d_v + c)]),
                    double(out[static_cast<std::size_t>((h * tq + i) * d_v + c)]));
      }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_verbose = std::getenv("EA_FUZZ_VERBOSE") != nullptr;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ea_fuzz::description().clear();
  Reader r(data, size);
  // The first byte: >= 0xe0 decodes through caller views (run_views); otherwise it is the page
  // size's byte of the cache's operations (run).
  if (size > 0 && data[0] >= 0xe0) {
    r.u8();
    run_views(r);
  } else {
    run(r, size);
  }
  if (g_verbose) {
    std::fprintf(stderr, "%s(%zu of %zu input bytes used)\n", ea_fuzz::description().c_str(), r.consumed(),
                 size);
  }
  return 0;
}
