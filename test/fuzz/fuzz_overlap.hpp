// SPDX-License-Identifier: MIT
/// \file fuzz_overlap.hpp
/// fuzz_attention's model of the library's one overlap rule (docs/guarantees.md), the same for
/// every call family; every family decides "must throw because of memory" with these predicates
/// and only with them:
///   - an output's own elements: its strides must be nested (nested(): sorted by size, each
///     reaching past the axes below it), the documented rule; an output that is not nested must
///     be rejected (one whose elements share memory never is nested);
///   - an output against an input or another output (verdict()): Shared, an element of one shares
///     a byte with the other: must be rejected; Apart, their byte ranges are disjoint: must not
///     be; Either otherwise: the rule is exact for blocks of one parent array and conservative for
///     anything else, so either outcome passes (test/overlap_rule.cpp holds the exact half to the
///     address sets);
///   - merge_attention_into also accepts an output that is exactly an input (in place: the same data,
///     sizes and strides).
/// Applied in run_single (fuzz_attention_single.cpp), HeadsCall::expect (fuzz_attention_heads.cpp),
/// merge (fuzz_attention_merge.cpp) and the backward calls (fuzz_attention_backward.cpp); an output
/// of a multi-head call against the masks' arrays and packed offsets: expect_apart_from_masks.
#pragma once

#include "fuzz_attention_model.hpp"

namespace ea_fuzz_attention {

/// Do two element sets (offsets in bytes from a common origin) share a byte?
inline bool elements_intersect(std::vector<std::pair<std::intptr_t, std::intptr_t>> a,
                               std::vector<std::pair<std::intptr_t, std::intptr_t>> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i].second <= b[j].first) {
      ++i;
    } else if (b[j].second <= a[i].first) {
      ++j;
    } else {
      return true;
    }
  }
  return false;
}

template <class E>
std::vector<std::pair<std::intptr_t, std::intptr_t>> byte_ranges(const Tensor<E>& t) {
  std::vector<std::pair<std::intptr_t, std::intptr_t>> out;
  for (Index b = 0; b < t.n[0]; ++b)
    for (Index h = 0; h < t.n[1]; ++h)
      for (Index i = 0; i < t.n[2]; ++i)
        for (Index j = 0; j < t.n[3]; ++j) {
          const auto p = reinterpret_cast<std::intptr_t>(&t.at(b, h, i, j));
          out.emplace_back(p, p + std::intptr_t(sizeof(E)));
        }
  return out;
}

/// The byte range [lo, hi] of a view as MultiHead.hpp's overlap check sees it; false when empty.
template <class E>
bool view_extent(const ea::HeadsView<E>& v, std::uintptr_t& lo, std::uintptr_t& hi) {
  if (v.data == nullptr || v.batch == 0 || v.heads == 0 || v.tokens == 0 || v.dim == 0) return false;
  const Index size = static_cast<Index>(sizeof(*v.data));
  Index low = 0, high = 0;
  const Index n[4] = {v.batch, v.heads, v.tokens, v.dim},
              s[4] = {v.batch_stride, v.head_stride, v.token_stride, v.dim_stride};
  for (int a = 0; a < 4; ++a) {
    const Index reach = (n[a] - 1) * s[a] * size;
    low += std::min<Index>(reach, 0);
    high += std::max<Index>(reach, 0);
  }
  lo = reinterpret_cast<std::uintptr_t>(v.data) + low;
  hi = reinterpret_cast<std::uintptr_t>(v.data) + high + size - 1;
  return true;
}

template <class A, class B>
bool views_apart(const ea::HeadsView<A>& a, const ea::HeadsView<B>& b) {
  std::uintptr_t alo, ahi, blo, bhi;
  if (!view_extent(a, alo, ahi) || !view_extent(b, blo, bhi)) return true;
  return !(alo <= bhi && blo <= ahi);
}

/// The byte ranges of a view's elements (the fuzzer's views are small).
template <class E>
std::vector<std::pair<std::intptr_t, std::intptr_t>> view_bytes(const ea::HeadsView<E>& v) {
  std::vector<std::pair<std::intptr_t, std::intptr_t>> out;
  if (v.data == nullptr) return out;
  for (Index b = 0; b < v.batch; ++b)
    for (Index h = 0; h < v.heads; ++h)
      for (Index i = 0; i < v.tokens; ++i)
        for (Index j = 0; j < v.dim; ++j) {
          const auto p = reinterpret_cast<std::intptr_t>(v.data + b * v.batch_stride + h * v.head_stride +
                                                         i * v.token_stride + j * v.dim_stride);
          out.emplace_back(p, p + std::intptr_t(sizeof(E)));
        }
  return out;
}

enum class Verdict { Apart, Shared, Either };

/// The overlap rule's verdict on two views (see the file's comment).
template <class A, class B>
Verdict verdict(const ea::HeadsView<A>& a, const ea::HeadsView<B>& b) {
  if (views_apart(a, b)) return Verdict::Apart;
  return elements_intersect(view_bytes(a), view_bytes(b)) ? Verdict::Shared : Verdict::Either;
}

/// What a verdict means for the call: must throw (Shared), may (Either), or no change (Apart).
inline void expect_apart(Expect& e, Verdict v, const char* why) {
  if (v == Verdict::Shared) e.fail(why);
  if (v == Verdict::Either) e.uncertain = true;
}

/// Are the strides of sizes n nested (no two elements can share memory)? The axes with more than
/// one element, sorted by |stride|: the smallest at least 1, each at least the one below times its
/// size.
inline bool nested(const Index (&n)[4], const Index (&s)[4]) {
  std::vector<std::pair<Index, Index>> axes;  // (|stride|, size)
  for (int a = 0; a < 4; ++a) {
    if (n[a] == 0) return true;  // no element
    if (n[a] > 1) axes.emplace_back(s[a] < 0 ? -s[a] : s[a], n[a]);
  }
  std::sort(axes.begin(), axes.end());
  if (!axes.empty() && axes[0].first < 1) return false;
  for (std::size_t i = 1; i < axes.size(); ++i)
    if (axes[i].first < axes[i - 1].first * axes[i - 1].second) return false;
  return true;
}
template <class E>
bool nested(const Tensor<E>& t) {
  return nested(t.n, t.s);
}
template <class E>
bool nested(const ea::HeadsView<E>& v) {
  const Index n[4] = {v.batch, v.heads, v.tokens, v.dim},
              s[4] = {v.batch_stride, v.head_stride, v.token_stride, v.dim_stride};
  return nested(n, s);
}

/// A mask or bias as the 4-D view the overlap rule compares.
template <class E>
ea::HeadsView<const E> as_heads(const ea::BroadcastView<E>& m) {
  return {m.data,         m.batch,       m.heads,      m.rows,      m.cols,
          m.batch_stride, m.head_stride, m.row_stride, m.col_stride};
}

/// `count` contiguous elements (key lengths, ALiBi slopes, packed offsets) as a 4-D view.
template <class E>
ea::HeadsView<const E> vec_view(const E* p, Index count) {
  return {p, 1, 1, 1, count, 0, 0, 0, 1};
}

/// An output of a multi-head call against the masks' arrays and, for a packed batch, the offsets
/// (cu_q, cu_k: not null then) of `sequences` sequences, for H query heads and B (or `sequences`)
/// key lengths.
template <class T, class O>
void expect_apart_from_masks(Expect& e, const ea::HeadsView<O>& o, const ea::Masks<T>& masks, Index H,
                             Index sequences, const std::int64_t* cu_q, const std::int64_t* cu_k) {
  if (!masks.mask.empty()) expect_apart(e, verdict(o, as_heads(masks.mask)), "an output overlaps the mask");
  if (!masks.bias.empty()) expect_apart(e, verdict(o, as_heads(masks.bias)), "an output overlaps the bias");
  if (masks.alibi_slopes != nullptr)
    expect_apart(e, verdict(o, vec_view(masks.alibi_slopes, H)), "an output overlaps the slopes");
  if (masks.key_lengths != nullptr)
    expect_apart(e, verdict(o, vec_view(masks.key_lengths, sequences)), "an output overlaps key_lengths");
  if (cu_q != nullptr) {
    expect_apart(e, verdict(o, vec_view(cu_q, sequences + 1)), "an output overlaps cu_seqlens");
    expect_apart(e, verdict(o, vec_view(cu_k, sequences + 1)), "an output overlaps cu_seqlens");
  }
}

}  // namespace ea_fuzz_attention
