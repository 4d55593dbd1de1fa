// SPDX-License-Identifier: MIT
/// \file multihead_golden.hpp
/// The multi-head golden cases of test/data/multihead/ (PyTorch, float64; written by
/// test/data/multihead/make_multihead_golden.py), and the glue that lays the tests' arrays out
/// as the library's HeadsView / Masks / Options.
///
/// FILE FORMAT (text, whitespace-separated tokens; one case per *.txt file):
///
///     eigen_attention_multihead_golden 1
///     mode heads|varlen
///     causal 0|1
///     align top_left|bottom_right
///     scale default|<number>           default = 1/sqrt(d_k)
///     window <left> <right>            -1 = unbounded side
///     chunk <n>                        optional: Options::chunk_size (absent = 0, off)
///     softcap <number>                 0 = off
///     then arrays, each "<NAME> <rank> <n_0> ... <n_rank-1>" followed by the elements in
///     row-major (C) order ("-inf" where infinite):
///       optional, in this order: MASK 4 b h T_q T_k (0/1; b in {1, B}, h in {1, H}),
///         BIAS 4 b h T_q T_k, KEY_LENGTHS 1 B, ALIBI 1 H, SINKS 1 H (Masks::sinks),
///         CU_SEQLENS_Q 1 n+1 and CU_SEQLENS_K 1 n+1 (varlen only, both)
///       Q 4 B H T_q d_k, K 4 B H_kv T_k d_k, V 4 B H_kv T_k d_v   (always BHTD)
///       OUT 4 B H T_q d_v, LSE 4 B H T_q 1 (-inf: the row sees no key; with SINKS the sink is
///         in it, and it is sink_h for a row that sees no key)
///       heads mode only: SCORES 4 B H T_q T_k, AVG_SCORES 4 B 1 T_q T_k (mean over heads)
///     end
///
/// In varlen mode B = 1 and T_q, T_k are the packed totals; sequence s owns query rows
/// [CU_SEQLENS_Q[s], CU_SEQLENS_Q[s+1]) and key rows [CU_SEQLENS_K[s], CU_SEQLENS_K[s+1]).
#pragma once

#include <doctest/doctest.h>

#include <EigenAttention/HeadsView.hpp>
#include <EigenAttention/Masks.hpp>
#include <EigenAttention/MultiHead.hpp>
#include <EigenAttention/Options.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common.hpp"
#include "golden_format.hpp"
#include "reference.hpp"

#ifndef EIGEN_ATTENTION_TEST_DATA_DIR
#error "EIGEN_ATTENTION_TEST_DATA_DIR must name test/data (set by test/CMakeLists.txt)"
#endif

namespace ea_test {

// ============================================================================ the loader

/// The directory holding the multi-head cases (test/data/multihead of the source tree).
inline std::filesystem::path multihead_data_dir() {
  return std::filesystem::path(EIGEN_ATTENTION_TEST_DATA_DIR) / "multihead";
}

/// The cases the suite expects to find there (make_multihead_golden.py writes exactly these).
inline const std::vector<std::string>& expected_multihead_files() {
  static const std::vector<std::string> names = {"plain",
                                                 "plain_scale_odd",
                                                 "plain_wide",
                                                 "gqa_8_2",
                                                 "mqa_8_1",
                                                 "gqa_8_2_causal",
                                                 "causal_top_left",
                                                 "causal_bottom_right",
                                                 "causal_top_left_more_queries",
                                                 "causal_bottom_right_more_queries",
                                                 "mask_2d",
                                                 "mask_per_batch",
                                                 "mask_per_head",
                                                 "bias_2d",
                                                 "bias_per_batch",
                                                 "bias_per_head",
                                                 "mask_and_bias",
                                                 "mask_and_bias_causal",
                                                 "key_lengths",
                                                 "key_lengths_causal_bottom_right",
                                                 "key_lengths_causal_top_left",
                                                 "window_both",
                                                 "window_left_causal_top_left",
                                                 "window_left_causal_bottom_right",
                                                 "window_bottom_right",
                                                 "window_right_only_top_left",
                                                 "window_zero_zero_bottom_right",
                                                 "alibi",
                                                 "alibi_top_left_rect",
                                                 "alibi_bottom_right_rect",
                                                 "alibi_causal_bottom_right",
                                                 "softcap",
                                                 "softcap_causal_gqa",
                                                 "combo_all",
                                                 "combo_mqa_window",
                                                 "combo_no_softcap",
                                                 "varlen_gqa",
                                                 "varlen_causal_bottom_right_alibi",
                                                 "varlen_window_softcap_top_left",
                                                 "chunk_causal",
                                                 "chunk_causal_bottom_right_rect",
                                                 "chunk_window_no_causal",
                                                 "chunk_key_lengths_alibi",
                                                 "varlen_chunk_causal",
                                                 "dk192_dv128_causal_gqa",
                                                 "sinks_causal_gqa",
                                                 "sinks_causal_bottom_right_dead_rows",
                                                 "varlen_sinks_causal_bottom_right",
                                                 "mla_absorbed",
                                                 "tree_decode_gqa",
                                                 "tree_decode_batch_per_head"};
  return names;
}

struct MultiHeadGolden {
  std::string name;
  bool varlen = false;
  MultiHeadSpec spec;
  std::vector<std::int64_t> cu_q, cu_k;  ///< varlen only
  Array4 Q, K, V;
  Array4 out, lse;
  Array4 scores, avg_scores;  ///< heads mode only
};

/// Parses one case (golden_format.hpp reads what the multi-head formats share); throws
/// std::runtime_error naming the file on any format error.
inline MultiHeadGolden load_multihead_golden(const std::filesystem::path& path) {
  golden_format::Reader r(path, "multihead golden file");
  MultiHeadGolden g;
  g.name = path.stem().string();
  r.version("eigen_attention_multihead_golden");
  const std::string mode = r.value_of("mode");
  if (mode != "heads" && mode != "varlen") r.fail("bad mode '" + mode + "'");
  g.varlen = mode == "varlen";
  r.options(g.spec);

  std::vector<std::string> order;
  const golden_format::Arrays arrays =
      r.arrays([&](const std::string& name, const golden_format::Arrays& read) {
        if (read.count(name)) r.fail("array " + name + " given twice");
        order.push_back(name);
      });
  const std::vector<std::string> allowed = {
      "MASK", "BIAS", "KEY_LENGTHS", "ALIBI", "SINKS", "CU_SEQLENS_Q", "CU_SEQLENS_K",
      "Q",    "K",    "V",           "OUT",   "LSE",   "SCORES",       "AVG_SCORES"};
  for (const auto& n : order)
    if (std::find(allowed.begin(), allowed.end(), n) == allowed.end()) r.fail("unknown array " + n);
  g.Q = r.need(arrays, "Q");
  g.K = r.need(arrays, "K");
  g.V = r.need(arrays, "V");
  g.out = r.need(arrays, "OUT");
  g.lse = r.need(arrays, "LSE");
  const golden_format::Dims d(g.Q, g.K, g.V);
  if (!d.forward_shapes(g.K, g.V, g.out, g.lse)) r.fail("inconsistent Q/K/V/OUT/LSE shapes");
  if (d.hkv == 0 || d.H % d.hkv != 0) r.fail("H is not a multiple of H_kv");
  r.masks(arrays, d, g.spec);
  if (g.varlen) {
    if (d.B != 1) r.fail("varlen needs B = 1");
    if (g.spec.mask || g.spec.bias || !g.spec.key_lengths.empty())
      r.fail("varlen takes no mask/bias/lengths");
    r.cu_seqlens(arrays, d, g.cu_q, g.cu_k);
    if (arrays.count("SCORES") || arrays.count("AVG_SCORES")) r.fail("varlen has no SCORES");
  } else {
    if (arrays.count("CU_SEQLENS_Q") || arrays.count("CU_SEQLENS_K")) r.fail("CU_SEQLENS outside varlen");
    g.scores = r.need(arrays, "SCORES");
    g.avg_scores = r.need(arrays, "AVG_SCORES");
    if (g.scores.n != std::array<Eigen::Index, 4>{{d.B, d.H, d.tq, d.tk}} ||
        g.avg_scores.n != std::array<Eigen::Index, 4>{{d.B, 1, d.tq, d.tk}})
      r.fail("inconsistent SCORES/AVG_SCORES shapes");
  }
  return g;
}

/// Every *.txt under multihead_data_dir(), sorted by name.
inline std::vector<std::filesystem::path> multihead_golden_files() {
  return golden_txt_files(multihead_data_dir());
}

// ============================================================================ library glue

namespace mh = EigenAttention;

inline const char* layout_name(mh::Layout l) { return l == mh::Layout::BHTD ? "BHTD" : "BTHD"; }

/// A contiguous multi-head buffer of T in either layout, with its view.
template <class T>
struct HeadsBuffer {
  std::vector<T> data;
  mh::Layout layout = mh::Layout::BHTD;
  Eigen::Index batch = 0, heads = 0, tokens = 0, dim = 0;

  HeadsBuffer() = default;
  HeadsBuffer(mh::Layout l, Eigen::Index b, Eigen::Index h, Eigen::Index t, Eigen::Index d, T fill)
      : data(static_cast<size_t>(b * h * t * d), fill), layout(l), batch(b), heads(h), tokens(t), dim(d) {}
  /// `a` rounded to T, laid out in `l`.
  HeadsBuffer(const Array4& a, mh::Layout l) : HeadsBuffer(l, a.n[0], a.n[1], a.n[2], a.n[3], T(0)) {
    const auto v = view();
    for (Eigen::Index b = 0; b < batch; ++b)
      for (Eigen::Index h = 0; h < heads; ++h)
        for (Eigen::Index t = 0; t < tokens; ++t)
          for (Eigen::Index d = 0; d < dim; ++d) v.head(b, h)(t, d) = static_cast<T>(a(b, h, t, d));
  }

  mh::HeadsView<T> view() {
    return mh::HeadsView<T>::contiguous(data.empty() ? dummy() : data.data(), layout, batch, heads, tokens,
                                        dim);
  }
  mh::HeadsView<T> view() const { return const_cast<HeadsBuffer*>(this)->view(); }
  mh::HeadsView<const T> cview() const { return view(); }
  /// Back to a BHTD long double array (exact).
  Array4 to_array() const {
    Array4 a(batch, heads, tokens, dim);
    const auto v = view();
    for (Eigen::Index b = 0; b < batch; ++b)
      for (Eigen::Index h = 0; h < heads; ++h)
        for (Eigen::Index t = 0; t < tokens; ++t)
          for (Eigen::Index d = 0; d < dim; ++d) a(b, h, t, d) = static_cast<long double>(v.head(b, h)(t, d));
    return a;
  }
  bool all_equal_to(T x) const {
    return std::all_of(data.begin(), data.end(), [x](T y) { return y == x; });
  }

 private:
  // A non-null address for an empty buffer (a null data pointer means "not wanted").
  static T* dummy() {
    static T d[1] = {T(0)};
    return d;
  }
};

/// A read-only BHTD view of a long double array (for comparing the reference's results).
inline mh::HeadsView<const long double> array_view(const Array4& a) {
  return mh::HeadsView<const long double>::bhtd(a.v.data(), a.n[0], a.n[1], a.n[2], a.n[3]);
}

/// The tokens [first, first + count) of every head of a view (a sub-view, nothing copied).
template <class S>
mh::HeadsView<S> token_subview(mh::HeadsView<S> v, Eigen::Index first, Eigen::Index count) {
  v.data += first * v.token_stride;
  v.tokens = count;
  return v;
}

/// MultiHeadSpec's masks as the library's Masks<T>, owning the storage.
template <class T>
struct MasksBuffer {
  std::unique_ptr<bool[]> mask;
  std::vector<T> bias, alibi, sinks;
  std::vector<std::int64_t> key_lengths;
  mh::Masks<T> masks;

  explicit MasksBuffer(const MultiHeadSpec& spec) {
    if (spec.mask) {
      const Array4& m = *spec.mask;
      mask.reset(new bool[static_cast<size_t>(std::max<Eigen::Index>(1, m.size()))]);
      for (Eigen::Index e = 0; e < m.size(); ++e)
        mask[static_cast<size_t>(e)] = m.v[static_cast<size_t>(e)] != 0;
      masks.mask = broadcast_view<bool>(mask.get(), m);
    }
    if (spec.bias) {
      const Array4& b = *spec.bias;
      for (const long double x : b.v) bias.push_back(static_cast<T>(x));
      masks.bias = broadcast_view<T>(bias.data(), b);
    }
    if (!spec.key_lengths.empty()) {
      key_lengths = spec.key_lengths;
      masks.key_lengths = key_lengths.data();
    }
    if (!spec.alibi.empty()) {
      for (const long double x : spec.alibi) alibi.push_back(static_cast<T>(x));
      masks.alibi_slopes = alibi.data();
    }
    if (!spec.sinks.empty()) {
      for (const long double x : spec.sinks) sinks.push_back(static_cast<T>(x));
      masks.sinks = sinks.data();
    }
  }
  MasksBuffer(const MasksBuffer&) = delete;
  MasksBuffer& operator=(const MasksBuffer&) = delete;

  /// A contiguous [b, h, T_q, T_k] array as a BroadcastView (stride 0 on an axis of size 1).
  template <class E>
  static mh::BroadcastView<E> broadcast_view(const E* data, const Array4& shape) {
    const Eigen::Index b = shape.n[0], h = shape.n[1], r = shape.n[2], c = shape.n[3];
    return {data, b, h, r, c, b == 1 ? 0 : h * r * c, h == 1 ? 0 : r * c, c, 1};
  }
};

/// The library's Options for a spec.
inline mh::Options options_for(const MultiHeadSpec& spec, mh::Kernel kernel = mh::Kernel::Auto,
                               int threads = 1) {
  mh::Options opt;
  opt.causal = spec.causal;
  opt.alignment = spec.bottom_right ? mh::CausalAlignment::BottomRight : mh::CausalAlignment::TopLeft;
  if (spec.scale) opt.scale = static_cast<double>(*spec.scale);
  opt.window_left = spec.window_left;
  opt.window_right = spec.window_right;
  opt.chunk_size = spec.chunk;
  opt.chunk_origin = spec.chunk_origin;
  opt.softcap = static_cast<double>(spec.softcap);
  opt.kernel = kernel;
  opt.threads = threads;
  return opt;
}

/// Calls f(layout) for both buffer layouts, the layout's name CAPTUREd.
template <class F>
void for_each_layout(F f) {
  for (const mh::Layout layout : {mh::Layout::BHTD, mh::Layout::BTHD}) {
    const std::string lname = layout_name(layout);
    CAPTURE(lname);
    f(layout);
  }
}

/// Calls f(options_for(spec, kernel, threads), threads) for every kernel under test and threads 1
/// and 2, both CAPTUREd.
template <class F>
void for_each_kernel_and_threads(const MultiHeadSpec& spec, F f) {
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = mh::kernel_name(kernel);
    CAPTURE(kname);
    for (const int threads : {1, 2}) {
      CAPTURE(threads);
      f(options_for(spec, kernel, threads), threads);
    }
  }
}

// The budgets of precision T for check_heads_near, per (b, h): multihead_budget's of group
// b * H + h (set by the reference's logits on the float64 inputs, so that they count rounding
// Q, K, V, the bias and the slopes to T), and average_scores_budget's of sequence b.
template <class T>
auto attn_budget(const MultiHeadReference& ref) {
  return [&ref](Eigen::Index b, Eigen::Index h) { return multihead_budget<T>(ref, b * ref.heads + h).attn; };
}
template <class T>
auto lse_budget(const MultiHeadReference& ref) {
  return [&ref](Eigen::Index b, Eigen::Index h) { return multihead_budget<T>(ref, b * ref.heads + h).lse; };
}
template <class T>
auto scores_budget(const MultiHeadReference& ref) {
  return
      [&ref](Eigen::Index b, Eigen::Index h) { return multihead_budget<T>(ref, b * ref.heads + h).scores; };
}
template <class T>
auto avg_budget(const MultiHeadReference& ref) {
  return [&ref](Eigen::Index b, Eigen::Index) { return average_scores_budget<T>(ref, b); };
}

/// CHECK packed varlen rows: sequence s, head h, rows [cu[s], cu[s+1]) of `actual` against
/// `expected` (of the same shape) with that group's budget in precision BT (its LSE budget when
/// is_lse, else its OUT budget).
template <class BT, class S>
void check_varlen_rows(const mh::HeadsView<S>& actual, const Array4& expected,
                       const std::vector<std::int64_t>& cu, const MultiHeadReference& ref, bool is_lse) {
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    const Eigen::Index first = cu[s], count = cu[s + 1] - cu[s];
    CAPTURE(s);
    for (Eigen::Index h = 0; h < expected.n[1]; ++h) {
      CAPTURE(h);
      const Budget bud = multihead_budget<BT>(ref, static_cast<Eigen::Index>(s) * ref.heads + h);
      EA_CHECK_NEAR(actual.head(0, h).middleRows(first, count), expected.rows(0, h, first, count),
                    is_lse ? bud.lse : Tol::mixed(bud.attn));
    }
  }
}

/// CHECK every (b, h) slice of `actual` against `expected` with the budget of its group
/// (budget_of(b, h) returns the tolerance).
template <class S, class F>
void check_heads_near(const mh::HeadsView<S>& actual, const Array4& expected, F budget_of,
                      const std::string& what) {
  CAPTURE(what);
  const bool shape_ok = actual.batch == expected.n[0] && actual.heads == expected.n[1] &&
                        actual.tokens == expected.n[2] && actual.dim == expected.n[3];
  CHECK_MESSAGE(shape_ok, what << ": view shape [" << actual.batch << ", " << actual.heads << ", "
                               << actual.tokens << ", " << actual.dim << "] differs from the expected ["
                               << expected.n[0] << ", " << expected.n[1] << ", " << expected.n[2] << ", "
                               << expected.n[3] << "]");
  if (!shape_ok) return;
  for (Eigen::Index b = 0; b < expected.n[0]; ++b)
    for (Eigen::Index h = 0; h < expected.n[1]; ++h) {
      CAPTURE(b);
      CAPTURE(h);
      const auto tol = budget_of(b, h);
      EA_CHECK_NEAR(actual.head(b, h), expected.slice(b, h), tol);
    }
}

/// CHECK two views element for element equal (bitwise for finite values).
template <class S1, class S2>
void check_heads_equal(const mh::HeadsView<S1>& actual, const mh::HeadsView<S2>& expected,
                       const std::string& what) {
  CAPTURE(what);
  REQUIRE(actual.batch == expected.batch);
  REQUIRE(actual.heads == expected.heads);
  REQUIRE(actual.tokens == expected.tokens);
  REQUIRE(actual.dim == expected.dim);
  for (Eigen::Index b = 0; b < expected.batch; ++b)
    for (Eigen::Index h = 0; h < expected.heads; ++h) {
      CAPTURE(b);
      CAPTURE(h);
      EA_CHECK_EQUAL(actual.head(b, h), expected.head(b, h));
    }
}

}  // namespace ea_test
