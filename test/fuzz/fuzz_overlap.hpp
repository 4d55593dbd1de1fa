/// \file fuzz_overlap.hpp
/// fuzz_attention's model of the library's overlap rule: when outputs may share memory with an
/// input or with each other. Every call family decides "must throw because of an overlap" with
/// these predicates, and only with them:
///   - single head (fuzz_attention_single.cpp, run_single): an output whose own elements share
///     memory (self_overlaps) must be rejected; so must an output sharing an element with another
///     input or output (elements_intersect of byte_ranges); one placed among another's elements
///     without sharing any may be (the library's check is conservative: either outcome passes);
///   - multi-head (fuzz_attention_heads.cpp, HeadsCall::expect) and merge_attention
///     (fuzz_attention_merge.cpp, merge): two views overlap when the byte ranges MultiHead.hpp's
///     check computes (view_extent) intersect (views_apart); for attention_heads and varlen every
///     output must be apart from every input and every other output; merge_attention also
///     accepts an output that is exactly an input (in place), and rejects a partial overlap.
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

/// Do two distinct elements of t share memory?
template <class E>
bool self_overlaps(const Tensor<E>& t) {
  auto r = byte_ranges(t);
  std::sort(r.begin(), r.end());
  for (std::size_t i = 1; i < r.size(); ++i)
    if (r[i].first < r[i - 1].second) return true;
  return false;
}

/// The byte range [lo, hi] of a view as MultiHead.hpp's overlap check sees it; false when empty.
template <class E>
bool view_extent(const ea::HeadsView<E>& v, std::uintptr_t& lo, std::uintptr_t& hi) {
  if (v.data == nullptr || v.batch == 0 || v.heads == 0 || v.tokens == 0 || v.dim == 0) return false;
  const Index size = static_cast<Index>(sizeof(*v.data));
  Index low = 0, high = 0;
  const Index n[4] = {v.batch, v.heads, v.tokens, v.dim}, s[4] = {v.batch_stride, v.head_stride, v.token_stride,
                                                                  v.dim_stride};
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


}  // namespace ea_fuzz_attention
