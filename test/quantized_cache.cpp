// SPDX-License-Identifier: MIT
// Quantized KV caches (PagedKVCache<Int8 | Float8E4M3 | Float8E5M2>, PagedKVView::with_scales):
// - append stores what this file's own quantizer gives: the scale max |x| / the format's largest
//   value, and each element the nearest of the format found by search over every code (ties to
//   the even code), from float, bfloat16 and half rows;
// - decode is bitwise the decode on a float cache holding the dequantized elements (scale x
//   value, decoded here from the stored bits), for every kernel and thread count, on the
//   streaming and the GEMM paths, through caller views (HND and NHD), a latent cache, a tree
//   mask, after fork, truncate and erase; and within the float bound of the long-double
//   reference on the dequantized elements;
// - the PyTorch float64 golden cases (test/data/quantized/, quantized by the generator's own
//   search): the stored bits and scales bitwise, the output within the float bound;
// - a NaN or infinity appended throws naming the token and head, and appends nothing; views
//   without scales, and scales for unquantized pages, throw.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "common.hpp"
#include "decode.hpp"
#include "errors.hpp"
#include "golden_format.hpp"

namespace test_quantized_cache {

using namespace ea_test;
using namespace ea_test::decode;
using ea::Float8E4M3;
using ea::Float8E5M2;
using ea::Int8;

namespace {

// ------------------------------------------------------------------ the formats, as defined

/// The largest magnitude of a format (what a token's largest element is stored as).
template <class Q>
float largest();
template <>
float largest<Int8>() {
  return 127;
}
template <>
float largest<Float8E4M3>() {
  return 448;
}
template <>
float largest<Float8E5M2>() {
  return 57344;
}

/// The value of a code, from the OCP definitions: E5M2 is the top byte of an IEEE half; E4M3
/// ("fn") has bias 7, no infinity, and S.1111.111 as NaN.
float value_of(Int8 q) { return static_cast<float>(q.bits); }
float value_of(Float8E5M2 q) {
  return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(static_cast<std::uint16_t>(q.bits << 8)));
}
float value_of(Float8E4M3 q) {
  const int e = (q.bits >> 3) & 15, m = q.bits & 7;
  const double x = e == 15 && m == 7 ? std::numeric_limits<double>::quiet_NaN()
                   : e == 0          ? m / 8.0 * std::pow(2.0, -6)
                                     : (1 + m / 8.0) * std::pow(2.0, e - 7);
  return static_cast<float>((q.bits & 0x80) != 0 ? -x : x);
}

/// Every code of Q.
template <class Q>
std::vector<Q> codes() {
  std::vector<Q> all;
  if constexpr (std::is_same_v<Q, Int8>) {
    for (int c = -127; c <= 127; ++c) all.push_back({static_cast<std::int8_t>(c)});
  } else {
    for (int c = 0; c < 256; ++c) all.push_back({static_cast<std::uint8_t>(c)});
  }
  return all;
}

/// The code nearest y: search over every finite code; ties to the even code (the even integer, or
/// the FP8 element whose lowest fraction bit is 0); a zero keeps y's sign.
template <class Q>
Q nearest(float y) {
  Q best{};
  double gap = std::numeric_limits<double>::infinity();
  for (const Q q : codes<Q>()) {
    const float v = value_of(q);
    if (!std::isfinite(v)) continue;
    const double d = std::fabs(static_cast<double>(v) - static_cast<double>(y));
    const bool even = (static_cast<unsigned>(q.bits) & 1u) == 0;
    const bool both_zero = v == 0 && value_of(best) == 0;  // +0 and -0 (FP8): y's sign decides
    if (d < gap || (d == gap && both_zero && std::signbit(v) == std::signbit(y)) ||
        (d == gap && !both_zero && even)) {
      best = q;
      gap = d;
    }
  }
  return best;
}

/// The dequantized element: the scale times the value, rounded once to float.
template <class Q>
float dequantized(Q q, float scale) {
  return scale * value_of(q);
}

/// The stored keys (or values) of sequence s of a cache, dequantized: T x (kv_heads d).
template <class Q>
Rows<float> stored_rows(const ea::PagedKVCache<Q>& cache, ea::SequenceId s, bool values) {
  const Index H = cache.kv_heads(), P = cache.page_size(), d = values ? cache.d_v() : cache.d_k();
  const Index dim = values && cache.values_in_keys() ? cache.d_k() : d;  // a latent page's row width
  const Q* pages = values ? cache.value_pages() : cache.key_pages();
  const float* scales = values ? cache.value_scales() : cache.key_scales();
  const auto table = cache.pages(s);
  const Index T = cache.length(s);
  Rows<float> m(T, H * d);
  for (Index n = 0; n < T; ++n) {
    const Index page = table[static_cast<size_t>(n / P)], slot = n % P;
    for (Index h = 0; h < H; ++h) {
      const float scale = scales[(page * H + h) * P + slot];
      for (Index c = 0; c < d; ++c)
        m(n, h * d + c) = dequantized(pages[((page * H + h) * P + slot) * dim + c], scale);
    }
  }
  return m;
}

/// Gaussian rows (T x heads d) with two outlier channels per head (x 10), as LLM keys have.
Rows<float> realistic(Rng& rng, Index T, Index heads, Index d) {
  Rows<float> m = random_matrix<Rows<float>>(rng, T, heads * d, 2.0);
  for (Index h = 0; h < heads && d > 1; ++h)
    for (const Index c : {Index(0), d / 2}) m.col(h * d + c) *= 10;
  return m;
}

/// Decodes `Q` on `cache` (sequence s) into a Result.
template <class Cache>
Result<float> decode_on(const Cache& cache, ea::SequenceId s, const Rows<float>& Q, const ea::Options& opt,
                        const ea::Masks<float>& masks = {}) {
  Result<float> r;
  const ea::SequenceId ids[1] = {s};
  ea::attention_decode_into(cache, ids, 1, side_by_side(Q, cache.d_k()), nullptr, r.out, r.lse, opt, masks);
  return r;
}

/// A quantized cache and a float cache holding its dequantized elements, one sequence each.
template <class Q>
struct Twin {
  ea::PagedKVCache<Q> quantized;
  ea::PagedKVCache<float> plain;
  ea::SequenceId q, p;
  Twin(const Case& c, Index capacity)
      : quantized(c.Hkv, c.dk, c.dv, c.page, capacity),
        plain(c.Hkv, c.dk, c.dv, c.page, capacity),
        q(quantized.create()),
        p(plain.create()) {}
  /// Appends K and V to the quantized cache, then their dequantized elements to the float one.
  void append(const Rows<float>& K, const Rows<float>& V) {
    const Index before = quantized.length(q);
    quantized.append(q, K, V);
    const Rows<float> k = stored_rows(quantized, q, false), v = stored_rows(quantized, q, true);
    plain.append(p, k.bottomRows(K.rows()), v.bottomRows(V.rows()));
    REQUIRE(quantized.length(q) == before + K.rows());
  }
};

}  // namespace

TEST_CASE_TEMPLATE("quantized cache: append stores the nearest element of the format with the format's scale",
                   Q, Int8, Float8E4M3, Float8E5M2) {
  Rng rng(270);
  const Index Hkv = 3, d = 37;  // an odd dim: the packet paths' tails
  Rows<float> K = realistic(rng, 40, Hkv, d), V = realistic(rng, 40, Hkv, d);
  // Token 0: exact ties at scale 1 (the largest element is the format's largest value).
  const float top = largest<Q>();
  K.row(0).setZero();
  for (Index h = 0; h < Hkv; ++h) {
    K(0, h * d) = top;
    if constexpr (std::is_same_v<Q, Int8>) {
      K(0, h * d + 1) = 2.5f, K(0, h * d + 2) = -3.5f, K(0, h * d + 3) = 126.5f;  // to 2, -4, 126
    } else if constexpr (std::is_same_v<Q, Float8E4M3>) {
      K(0, h * d + 1) = 1.0625f, K(0, h * d + 2) = -1.1875f, K(0, h * d + 3) = 0.001953125f * 1.5f;
    } else {
      K(0, h * d + 1) = 1.125f, K(0, h * d + 2) = -1.375f, K(0, h * d + 3) = 1.52587890625e-05f * 1.5f;
    }
    K(0, h * d + 4) = -1e-30f;  // rounds to a negative zero
  }
  K.row(1).setZero();  // a token of zeros: scale 0
  K.row(2) *= 1e-30f;  // tiny: the format's smallest (subnormal) elements
  V.row(3).setConstant(-7);
  ea::PagedKVCache<Q> cache(Hkv, d, d, 16, 64);
  const auto s = cache.create();
  cache.append(s, K.topRows(17), V.topRows(17));
  cache.append(s, K.bottomRows(23), V.bottomRows(23));
  const auto table = cache.pages(s);
  for (const bool values : {false, true}) {
    const Rows<float>& X = values ? V : K;
    const Q* pages = values ? cache.value_pages() : cache.key_pages();
    const float* scales = values ? cache.value_scales() : cache.key_scales();
    REQUIRE(scales != nullptr);
    for (Index n = 0; n < X.rows(); ++n) {
      const Index page = table[static_cast<size_t>(n / 16)], slot = n % 16;
      for (Index h = 0; h < Hkv; ++h) {
        const float amax = X.row(n).segment(h * d, d).cwiseAbs().maxCoeff();
        const float scale = amax / top;
        CAPTURE(n);
        CAPTURE(h);
        CAPTURE(values);
        REQUIRE(scales[(page * Hkv + h) * 16 + slot] == scale);
        for (Index c = 0; c < d; ++c) {
          const Q got = pages[((page * Hkv + h) * 16 + slot) * d + c];
          const Q want = scale == 0 ? Q{} : nearest<Q>(X(n, h * d + c) / scale);
          CAPTURE(c);
          CHECK(static_cast<int>(got.bits) == static_cast<int>(want.bits));
        }
      }
    }
  }
  // The ties went to even, the tiny negative element to -0 (FP8) or 0 (int8).
  const Q* k0 = cache.key_pages() + (table[0] * Hkv) * 16 * d;
  if constexpr (std::is_same_v<Q, Int8>) {
    CHECK(k0[1].bits == 2);
    CHECK(k0[2].bits == -4);
    CHECK(k0[3].bits == 126);
  } else {
    CHECK(value_of(k0[1]) == 1.0f);
    CHECK(value_of(k0[2]) == (std::is_same_v<Q, Float8E4M3> ? -1.25f : -1.5f));
    CHECK(value_of(k0[3]) == (std::is_same_v<Q, Float8E4M3> ? 0.001953125f * 2 : 1.52587890625e-05f * 2));
    CHECK(k0[4].bits == 0x80);
  }
  // bfloat16 and half rows are quantized from their values: as the float rows they equal.
  for (const int kind : {0, 1}) {
    ea::PagedKVCache<Q> other(Hkv, d, d, 16, 64);
    const auto o = other.create();
    Rows<float> Kr, Vr;
    if (kind == 0) {
      const Rows<Eigen::bfloat16> Kb = K.cast<Eigen::bfloat16>(), Vb = V.cast<Eigen::bfloat16>();
      other.append(o, Kb, Vb);
      Kr = Kb.cast<float>(), Vr = Vb.cast<float>();
    } else {
      const Rows<Eigen::half> Kh = K.cast<Eigen::half>(), Vh = V.cast<Eigen::half>();
      other.append(o, Kh, Vh);
      Kr = Kh.cast<float>(), Vr = Vh.cast<float>();
    }
    ea::PagedKVCache<Q> from_float(Hkv, d, d, 16, 64);
    const auto f = from_float.create();
    from_float.append(f, Kr, Vr);
    CAPTURE(kind);
    EA_CHECK_EQUAL(stored_rows(other, o, false), stored_rows(from_float, f, false));
    EA_CHECK_EQUAL(stored_rows(other, o, true), stored_rows(from_float, f, true));
  }
}

TEST_CASE_TEMPLATE(
    "quantized cache: every midpoint of two elements, and its neighbours, rounds as the format says", Q, Int8,
    Float8E4M3, Float8E5M2) {
  // Tokens whose largest element is the format's largest value (scale 1): the rest of each row
  // are the midpoints of every two adjacent elements (exact ties) and the floats just below and
  // above them, of both signs.
  std::vector<float> values, finite;
  for (const Q q : codes<Q>())
    if (std::isfinite(value_of(q)) && value_of(q) >= 0 && !(value_of(q) == 0 && std::signbit(value_of(q))))
      finite.push_back(value_of(q));
  std::sort(finite.begin(), finite.end());
  for (size_t i = 0; i + 1 < finite.size(); ++i) {
    const float m = (finite[i] + finite[i + 1]) / 2;  // exact: a few significant bits
    for (const float x : {m, std::nextafter(m, 0.0f), std::nextafter(m, 1e30f), finite[i]}) {
      values.push_back(x);
      values.push_back(-x);
    }
  }
  const Index d = 33, per_row = d - 1, T = (static_cast<Index>(values.size()) + per_row - 1) / per_row;
  Rows<float> K = Rows<float>::Zero(T, d);
  for (Index n = 0; n < T; ++n) K(n, 0) = largest<Q>();
  for (size_t i = 0; i < values.size(); ++i)
    K(static_cast<Index>(i) / per_row, 1 + static_cast<Index>(i) % per_row) = values[i];
  ea::PagedKVCache<Q> cache(1, d, 1, 256, T);
  const auto s = cache.create();
  cache.append(s, K, Rows<float>::Ones(T, 1));
  const auto table = cache.pages(s);
  int wrong = 0;
  for (Index n = 0; n < T; ++n) {
    const Index row = table[static_cast<size_t>(n / 256)] * 256 + n % 256;
    REQUIRE(cache.key_scales()[row] == 1.0f);
    for (Index c = 0; c < d; ++c) {
      const Q got = cache.key_pages()[row * d + c], want = nearest<Q>(K(n, c));
      if (got.bits != want.bits) {
        if (++wrong <= 5)
          MESSAGE("x = " << K(n, c) << ": stored " << int(got.bits) << ", nearest " << int(want.bits));
      }
    }
  }
  CHECK(wrong == 0);
  CHECK(values.size() > 100);
}

TEST_CASE_TEMPLATE("quantized cache: decode is bitwise the float cache of the dequantized elements", Q, Int8,
                   Float8E4M3, Float8E5M2) {
  Rng rng(2701);
  std::vector<Case> cases(4);
  cases[0].H = 8, cases[0].Hkv = 2, cases[0].dk = cases[0].dv = 64, cases[0].Tk = 300, cases[0].page = 16;
  cases[1].H = 32, cases[1].Hkv = 1, cases[1].dk = 40, cases[1].dv = 24, cases[1].Tk = 70, cases[1].Tq = 2,
  cases[1].page = 32;  // 64 rows: the GEMM path
  cases[2].H = 4, cases[2].Hkv = 4, cases[2].dk = 19, cases[2].dv = 13, cases[2].Tk = 33, cases[2].Tq = 3;
  cases[2].window_left = 20, cases[2].softcap = 5, cases[2].alibi = true, cases[2].sinks = true;
  cases[3].H = 6, cases[3].Hkv = 2, cases[3].dk = cases[3].dv = 128, cases[3].Tk = 600, cases[3].page = 64;
  for (const Case& c : cases) {
    CAPTURE(c.describe());
    Twin<Q> t(c, c.Tk + 2 * c.page);
    for (Index done = 0; done < c.Tk;) {
      const Index n = std::min<Index>(c.Tk - done, rng.integer(1, 90));
      t.append(realistic(rng, n, c.Hkv, c.dk), realistic(rng, n, c.Hkv, c.dv));
      done += n;
    }
    Sequence<float> seq = make_sequence<float>(rng, c);
    seq.K = stored_rows(t.quantized, t.q, false);
    seq.V = stored_rows(t.quantized, t.q, true);
    const MultiHeadReference ref = reference_of(c, seq);
    const ea::Masks<float> masks = decode_masks(c, seq);
    // Caller views of the same pages: the cache's own (HND), and a copy laid out NHD.
    const auto table = t.quantized.pages(t.q);
    const std::int64_t length = t.quantized.length(t.q);
    const Index P = c.page, pages = t.quantized.num_pages();
    const auto hnd =
        ea::PagedKVView<Q>::hnd(t.quantized.key_pages(), t.quantized.value_pages(), pages, P, c.Hkv, c.dk,
                                c.dv, table.data(), static_cast<std::ptrdiff_t>(table.size()), &length, 1)
            .with_scales(t.quantized.key_scales(), t.quantized.value_scales());
    std::vector<Q> nk(static_cast<size_t>(pages * P * c.Hkv * c.dk)),
        nv(static_cast<size_t>(pages * P * c.Hkv * c.dv));
    std::vector<float> nks(static_cast<size_t>(pages * P * c.Hkv)), nvs(nks.size());
    for (Index p = 0; p < pages; ++p)
      for (Index h = 0; h < c.Hkv; ++h)
        for (Index slot = 0; slot < P; ++slot) {
          const Index from = (p * c.Hkv + h) * P + slot, to = (p * P + slot) * c.Hkv + h;
          nks[static_cast<size_t>(to)] = t.quantized.key_scales()[from];
          nvs[static_cast<size_t>(to)] = t.quantized.value_scales()[from];
          for (Index e = 0; e < c.dk; ++e)
            nk[static_cast<size_t>(to * c.dk + e)] = t.quantized.key_pages()[from * c.dk + e];
          for (Index e = 0; e < c.dv; ++e)
            nv[static_cast<size_t>(to * c.dv + e)] = t.quantized.value_pages()[from * c.dv + e];
        }
    const auto nhd = ea::PagedKVView<Q>::nhd(nk.data(), nv.data(), pages, P, c.Hkv, c.dk, c.dv, table.data(),
                                             static_cast<std::ptrdiff_t>(table.size()), &length, 1)
                         .with_scales(nks.data(), nvs.data());
    for (const ea::Kernel kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      const Result<float> want = decode_on(t.plain, t.p, seq.Q, options_of(c, kernel, 1), masks);
      check_reference(want, ref, c, 1, "the float cache of the dequantized elements");
      for (const int threads : {1, 2}) {
        CAPTURE(threads);
        const ea::Options opt = options_of(c, kernel, threads);
        const Result<float> got = decode_on(t.quantized, t.q, seq.Q, opt, masks);
        EA_CHECK_EQUAL(got.out, want.out);
        EA_CHECK_EQUAL(got.lse, want.lse);
        for (const auto* view : {&hnd, &nhd}) {
          Result<float> v;
          ea::attention_decode_into(*view, side_by_side(seq.Q, c.dk), nullptr, v.out, v.lse, opt, masks);
          EA_CHECK_EQUAL(v.out, want.out);
          EA_CHECK_EQUAL(v.lse, want.lse);
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE(
    "quantized cache: a caller's view, any scales, a head of whole packets and a tail, decodes bitwise "
    "as a float view of fl(scale x value)",
    Q, Int8, Float8E4M3, Float8E5M2) {
  // d = 40: two AVX-512 packets and a scalar tail of 8 (five AVX2 packets). Scales as a caller's
  // view may hold them but append never writes (above FLT_MAX / 448, or negative) beside append's
  // kind. Codes of |value| <= 1 only (every dequantized element, logit and output finite), against
  // a float view of fl(scale x value): bitwise, every kernel, 1 and 2 threads, the streaming path
  // (4 query heads) and the GEMM path (64 query rows). Before the library was compiled with
  // -ffp-contract=off, GCC contracted AVX-512's scalar tails of the float and the quantized
  // instantiations into FMAs differently: 4 of the 160 outputs of the streaming case differed in
  // their last bits (Int8, E5M2).
  Rng rng(2729);
  std::vector<Q> finite;
  for (const Q q : codes<Q>())  // |value| <= 1: every product below stays finite
    if (std::fabs(value_of(q)) <= 1) finite.push_back(q);
  const float big = std::numeric_limits<float>::max() / 256;
  const float v_scales[] = {std::nextafter(big, 0.0f), std::nextafter(big, 1e38f), 2.5e36f, -3e36f,
                            1.0f / 448};
  const Index d = 40, P = 16, T = 90, pages = (T + P - 1) / P;
  for (const Index H : {Index(4), Index(32)}) {
    const Index Tq = H == 32 ? 2 : 1;
    CAPTURE(H);
    std::vector<Q> k(static_cast<size_t>(pages * P * d)), v(k.size());
    std::vector<float> ks(static_cast<size_t>(pages * P)), vs(ks.size()), kf(k.size()), vf(k.size());
    for (Index t = 0; t < pages * P; ++t) {
      // Values' scales around the bound; keys' scales too on every third token, with queries
      // small enough that the logits stay finite.
      vs[static_cast<size_t>(t)] = v_scales[t % 5];
      ks[static_cast<size_t>(t)] = t % 3 == 0 ? v_scales[(t + 1) % 5] : 0.01f;
      for (Index e = 0; e < d; ++e) {
        const size_t i = static_cast<size_t>(t * d + e);
        k[i] = finite[static_cast<size_t>(rng.integer(0, static_cast<Index>(finite.size()) - 1))];
        v[i] = finite[static_cast<size_t>(rng.integer(0, static_cast<Index>(finite.size()) - 1))];
        kf[i] = ks[static_cast<size_t>(t)] * value_of(k[i]);
        vf[i] = vs[static_cast<size_t>(t)] * value_of(v[i]);
      }
    }
    std::vector<std::int32_t> table(static_cast<size_t>(pages));
    for (Index p = 0; p < pages; ++p)
      table[static_cast<size_t>(p)] = static_cast<std::int32_t>(pages - 1 - p);
    const std::int64_t length = T;
    const auto quantized =
        ea::PagedKVView<Q>::hnd(k.data(), v.data(), pages, P, 1, d, d, table.data(), pages, &length, 1)
            .with_scales(ks.data(), vs.data());
    const auto plain =
        ea::PagedKVView<float>::hnd(kf.data(), vf.data(), pages, P, 1, d, d, table.data(), pages, &length, 1);
    Rows<float> Qm(Tq, H * d);
    for (Index i = 0; i < Qm.size(); ++i) Qm.data()[i] = static_cast<float>(rng.uniform()) * 1e-37f;
    for (const ea::Kernel kernel : kernels_under_test()) {
      CAPTURE(ea::kernel_name(kernel));
      for (const int threads : {1, 2}) {
        ea::Options opt;
        opt.kernel = kernel;
        opt.threads = threads;
        Result<float> want, got;
        ea::attention_decode_into(plain, side_by_side(Qm, d), nullptr, want.out, want.lse, opt);
        ea::attention_decode_into(quantized, side_by_side(Qm, d), nullptr, got.out, got.lse, opt);
        EA_CHECK_EQUAL(got.out, want.out);
        EA_CHECK_EQUAL(got.lse, want.lse);
        CHECK(want.out.allFinite());
      }
    }
  }
}

TEST_CASE_TEMPLATE("quantized cache: latent caches, tree masks, fork, truncate and erase", Q, Int8,
                   Float8E4M3, Float8E5M2) {
  Rng rng(2702);
  const Index dk = 72, dv = 64, H = 16, page = 16;
  // A latent cache (one scale per token: the values are the keys' first d_v elements).
  auto latent = ea::PagedKVCache<Q>::latent(dk, dv, page, 512);
  auto plain = ea::PagedKVCache<float>::latent(dk, dv, page, 512);
  const auto a = latent.create();
  const auto b = plain.create();
  const Rows<float> rows = realistic(rng, 200, 1, dk);
  latent.append(a, rows.topRows(150));
  latent.append(a, rows.bottomRows(50));
  REQUIRE(latent.value_scales() == latent.key_scales());
  plain.append(b, stored_rows(latent, a, false));
  const Rows<float> Qt = random_matrix<Rows<float>>(rng, 3, H * dk);
  // A tree over the last three tokens (parents -1, 0, 0): each draft sees its path.
  const bool tree[9] = {true, false, false, true, true, false, true, false, true};
  ea::Masks<float> masks;
  masks.mask = ea::BroadcastView<bool>::per_head(tree, 1, 1, 3, 3);
  for (const ea::Kernel kernel : kernels_under_test()) {
    ea::Options opt;
    opt.kernel = kernel;
    opt.causal = true;
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    const Result<float> want = decode_on(plain, b, Qt, opt, masks);
    for (const int threads : {1, 2}) {
      opt.threads = threads;
      const Result<float> got = decode_on(latent, a, Qt, opt, masks);
      EA_CHECK_EQUAL(got.out, want.out);
      EA_CHECK_EQUAL(got.lse, want.lse);
    }
  }
  // fork (copy-on-write of a partly filled page), truncate and erase move the scales with the
  // elements: each sequence decodes as a fresh one of the tokens it kept.
  const Case c = [] {
    Case x;
    x.H = 8, x.Hkv = 2, x.dk = 24, x.dv = 16, x.page = 16;
    return x;
  }();
  ea::PagedKVCache<Q> cache(c.Hkv, c.dk, c.dv, c.page, 1024);
  const Rows<float> K = realistic(rng, 200, c.Hkv, c.dk), V = realistic(rng, 200, c.Hkv, c.dv);
  const auto s = cache.create();
  cache.append(s, K.topRows(150), V.topRows(150));
  const auto f = cache.fork(s);
  cache.append(f, K.bottomRows(50), V.bottomRows(50));
  cache.truncate(s, 120);
  cache.erase(f, 20, 52);  // two whole pages
  cache.erase(f, 3, 10);   // a ragged range
  const Rows<float> Qc = random_matrix<Rows<float>>(rng, 1, c.H * c.dk);
  const auto fresh = [&](const Rows<float>& k, const Rows<float>& v) {
    ea::PagedKVCache<Q> other(c.Hkv, c.dk, c.dv, c.page, 512);
    const auto id = other.create();
    other.append(id, k, v);
    return Rows<float>(ea::attention_decode(other, id, Qc));
  };
  const auto kept = [](const Rows<float>& m) {
    Rows<float> r(200 - 32 - 7, m.cols());
    r << m.topRows(3), m.middleRows(10, 10), m.bottomRows(148);
    return r;
  };
  EA_CHECK_EQUAL(ea::attention_decode(cache, s, Qc), fresh(K.topRows(120), V.topRows(120)));
  EA_CHECK_EQUAL(ea::attention_decode(cache, f, Qc), fresh(kept(K), kept(V)));
}

TEST_CASE("quantized cache: the PyTorch golden cases, stored bits and output") {
  const std::filesystem::path dir = std::filesystem::path(EIGEN_ATTENTION_TEST_DATA_DIR) / "quantized";
  const auto files = golden_txt_files(dir);
  REQUIRE(files.size() == 6);
  for (const auto& path : files) {
    const std::string name = path.filename().string();
    CAPTURE(name);
    golden_format::Reader in(path, "quantized golden");
    in.version("eigen_attention_quantized_golden");
    const std::string format = in.value_of("format");
    const bool causal = in.value_of("causal") == "1";
    REQUIRE(in.value_of("scale") == "default");
    const Index page = in.integer(in.value_of("page"));
    const golden_format::Arrays arrays = in.arrays([](const std::string&, const golden_format::Arrays&) {});
    const auto& K = arrays.at("K");
    const auto& V = arrays.at("V");
    const auto& Qa = arrays.at("Q");
    const Index Tk = K.dims[0], Hkv = K.dims[1], dk = K.dims[2], dv = V.dims[2], Tq = Qa.dims[0],
                H = Qa.dims[1];
    const auto matrix = [](const golden_format::RawArray& a) {
      Rows<float> m(a.dims[0], a.data.size() / static_cast<size_t>(a.dims[0]));
      for (Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<float>(a.data[static_cast<size_t>(i)]);
      return m;
    };
    const Rows<float> k = matrix(K), v = matrix(V), q = matrix(Qa);
    const auto run = [&](auto tag) {
      using Q = decltype(tag);
      ea::PagedKVCache<Q> cache(Hkv, dk, dv, page, Tk + page);
      const auto s = cache.create();
      cache.append(s, k, v);
      const auto table = cache.pages(s);
      for (const bool values : {false, true}) {
        const auto& codes = arrays.at(values ? "V_CODES" : "K_CODES");
        const auto& scales = arrays.at(values ? "V_SCALES" : "K_SCALES");
        const Index d = values ? dv : dk;
        const Q* stored = values ? cache.value_pages() : cache.key_pages();
        const float* stored_scales = values ? cache.value_scales() : cache.key_scales();
        int wrong = 0;
        for (Index n = 0; n < Tk; ++n) {
          const Index p = table[static_cast<size_t>(n / page)], slot = n % page;
          for (Index h = 0; h < Hkv; ++h) {
            if (stored_scales[(p * Hkv + h) * page + slot] !=
                static_cast<float>(scales.data[static_cast<size_t>(n * Hkv + h)]))
              ++wrong;
            for (Index c = 0; c < d; ++c) {
              const long code = static_cast<long>(codes.data[static_cast<size_t>((n * Hkv + h) * d + c)]);
              if (static_cast<long>(stored[((p * Hkv + h) * page + slot) * d + c].bits) !=
                  (std::is_same_v<Q, Int8> ? code : static_cast<long>(static_cast<std::uint8_t>(code))))
                ++wrong;
            }
          }
        }
        CAPTURE(values);
        CHECK(wrong == 0);
      }
      // The output, within the float bound of the exact attention on the dequantized elements.
      const Rows<float> kd = stored_rows(cache, s, false), vd = stored_rows(cache, s, true);
      const auto& out = arrays.at("OUT");
      for (const ea::Kernel kernel : kernels_under_test()) {
        ea::Options opt;
        opt.kernel = kernel;
        opt.causal = causal;
        const Rows<float> got = ea::attention_decode(cache, s, q, opt);
        const std::string kname = ea::kernel_name(kernel);
        CAPTURE(kname);
        const Index G = H / Hkv;
        for (Index h = 0; h < H; ++h) {
          long double magnitude = 0, max_v = 0;
          for (Index i = 0; i < Tq; ++i)
            for (Index j = 0; j < Tk; ++j) {
              long double dot = 0;
              for (Index c = 0; c < dk; ++c)
                dot += std::fabs(static_cast<long double>(q(i, h * dk + c)) * kd(j, (h / G) * dk + c));
              magnitude = std::max(magnitude, dot / std::sqrt(static_cast<long double>(dk)));
            }
          for (Index j = 0; j < Tk; ++j)
            for (Index c = 0; c < dv; ++c)
              max_v = std::max<long double>(max_v, std::fabs(vd(j, (h / G) * dv + c)));
          const Budget b = attention_budget<float>(magnitude, max_v, dk, Tk);
          MatrixLD want(Tq, dv);
          for (Index i = 0; i < Tq; ++i)
            for (Index c = 0; c < dv; ++c) want(i, c) = out.data[static_cast<size_t>((i * H + h) * dv + c)];
          CAPTURE(h);
          EA_CHECK_NEAR(to_long_double(got.middleCols(h * dv, dv)), want, b.attn);
        }
      }
    };
    if (format == "int8") {
      run(Int8{});
    } else if (format == "float8_e4m3fn") {
      run(Float8E4M3{});
    } else {
      REQUIRE(format == "float8_e5m2");
      run(Float8E5M2{});
    }
  }
}

TEST_CASE("quantized cache: errors") {
  ea::PagedKVCache<Int8> cache(2, 4, 3, 16, 64);
  const auto s = cache.create();
  Rows<float> K = Rows<float>::Ones(5, 8), V = Rows<float>::Ones(5, 6);
  cache.append(s, K.topRows(2), V.topRows(2));
  const std::ptrdiff_t free = cache.free_pages();
  K(3, 4 + 2) = std::numeric_limits<float>::quiet_NaN();  // token 3, head 1
  const std::string nan = invalid_argument_message([&] { cache.append(s, K, V); });
  CHECK(nan.find("K token 3 (of the 5 appended), KV head 1, element 2 is NaN") != std::string::npos);
  CHECK(nan.find("nothing was appended") != std::string::npos);
  K(3, 6) = 1;
  V(4, 0) = -std::numeric_limits<float>::infinity();
  const std::string inf = invalid_argument_message([&] { cache.append(s, K, V); });
  CHECK(inf.find("V token 4 (of the 5 appended), KV head 0, element 0 is infinite") != std::string::npos);
  CHECK(cache.length(s) == 2);
  CHECK(cache.free_pages() == free);
  // Views: quantized pages need scales; other pages take none.
  const auto table = cache.pages(s);
  const std::int64_t length = cache.length(s);
  const auto view = ea::PagedKVView<Int8>::hnd(cache.key_pages(), cache.value_pages(), cache.num_pages(), 16,
                                               2, 4, 3, table.data(), 1, &length, 1);
  const Rows<float> Q = Rows<float>::Ones(1, 8);
  const std::string none = invalid_argument_message([&] { (void)ea::attention_decode(view, Q); });
  CHECK(none.find("the pages are int8 but k_scales is null") != std::string::npos);
  const std::string half_view = invalid_argument_message(
      [&] { (void)ea::attention_decode(view.with_scales(cache.key_scales(), nullptr), Q); });
  CHECK(half_view.find("v_scales is null") != std::string::npos);
  std::vector<float> pages(64 * 2 * 16 * 4);
  const auto plain =
      ea::PagedKVView<float>::hnd(pages.data(), pages.data(), 4, 16, 2, 4, 3, table.data(), 1, &length, 1)
          .with_scales(cache.key_scales(), cache.value_scales());
  const std::string extra = invalid_argument_message([&] { (void)ea::attention_decode(plain, Q); });
  CHECK(extra.find("the pages are float32, which has no scales") != std::string::npos);
  CHECK(ea::scalar_type_name(ea::ScalarType::Float8E4M3) == std::string("float8_e4m3fn"));
  CHECK(ea::scalar_type_bytes(ea::ScalarType::Int8) == 1);
}

}  // namespace test_quantized_cache
