// SPDX-License-Identifier: MIT
// The one overlap rule (overlap.hpp).
#include "check/overlap.hpp"

#include <algorithm>
#include <cstdlib>
#include <utility>

namespace EigenAttention {
namespace internal {
namespace {

// The one overlap rule. Two arrays overlap when an element of one shares a byte with an element
// of the other. Decided exactly for blocks of one parent array (equal strides on the axes that
// have more than one element, strides nested like a parent's: [Q | ATTN] side by side is fine),
// and conservatively (by the byte ranges they span) for anything else.

// The sorted axes of a and b as one lattice, when they form one (blocks of one parent, at any
// offset); false otherwise.
struct Lattice {
  int axes = 0;
  index_t stride[4], na[4], nb[4];  // sorted by stride, in bytes, all > 0
  index_t delta = 0;                // b's first element minus a's, in bytes
};

bool as_lattice(const Array& a, const Array& b, Lattice& l) {
  if (a.bytes != b.bytes) return false;
  std::uintptr_t a0 = a.data, b0 = b.data;
  for (int axis = 0; axis < 4; ++axis) {
    const index_t na = a.size[axis], nb = b.size[axis];
    if (na == 1 && nb == 1) continue;
    if (na > 1 && nb > 1 && a.stride[axis] != b.stride[axis]) return false;
    index_t s = (na > 1 ? a.stride[axis] : b.stride[axis]) * a.bytes;
    if (s == 0) return false;
    if (s < 0) {  // walk the axis backwards from its last element
      a0 += static_cast<std::uintptr_t>((na - 1) * s);
      b0 += static_cast<std::uintptr_t>((nb - 1) * s);
      s = -s;
    }
    l.stride[l.axes] = s;
    l.na[l.axes] = na;
    l.nb[l.axes] = nb;
    ++l.axes;
  }
  for (int i = 1; i < l.axes; ++i) {  // insertion sort by stride
    for (int j = i; j > 0 && l.stride[j] < l.stride[j - 1]; --j) {
      std::swap(l.stride[j], l.stride[j - 1]);
      std::swap(l.na[j], l.na[j - 1]);
      std::swap(l.nb[j], l.nb[j - 1]);
    }
  }
  l.delta = static_cast<index_t>(b0 - a0);
  for (int i = 0; i + 1 < l.axes; ++i) {
    if (l.stride[i + 1] % l.stride[i] != 0 || std::max(l.na[i], l.nb[i]) * l.stride[i] > l.stride[i + 1]) {
      return false;
    }
  }
  return true;
}

// Is there an index difference e (e_k in [-(nb_k - 1), na_k - 1]) with sum e_k stride_k equal to
// `units` times the smallest stride? Write `units` in the mixed radix of the strides; each e_k
// is its digit plus the carry from below less a carry to the axis above, and as |e_k| stays below
// the radix there are two carries per axis to try.
bool reachable(const Lattice& l, index_t units) {
  index_t digit[4], radix[4];
  for (int i = 0; i < l.axes; ++i) {
    if (i + 1 < l.axes) {
      radix[i] = l.stride[i + 1] / l.stride[i];
      digit[i] = ((units % radix[i]) + radix[i]) % radix[i];
      units = (units - digit[i]) / radix[i];
    } else {
      digit[i] = units;
    }
  }
  for (unsigned carries = 0; carries < (1u << (l.axes - 1)); ++carries) {
    bool all = true;
    for (int i = 0; i < l.axes && all; ++i) {
      const index_t in = i > 0 ? (carries >> (i - 1)) & 1 : 0;
      const index_t out = i + 1 < l.axes ? (carries >> i) & 1 : 0;
      const index_t e = digit[i] + in - (out ? radix[i] : 0);
      all = e >= -(l.nb[i] - 1) && e <= l.na[i] - 1;
    }
    if (all) return true;
  }
  return false;
}

// Do two elements (of `bytes` each) share a byte? Their addresses differ by delta - sum e_k
// stride_k = r + m stride_0 (r = delta mod stride_0): try each such difference below `bytes` in
// magnitude.
bool lattice_overlaps(const Lattice& l, index_t bytes) {
  if (l.axes == 0) return l.delta > -bytes && l.delta < bytes;
  const index_t s0 = l.stride[0], r = ((l.delta % s0) + s0) % s0;
  for (index_t m = -(bytes / s0) - 1; m <= bytes / s0; ++m) {
    const index_t diff = r + m * s0;
    if (diff > -bytes && diff < bytes && reachable(l, (l.delta - diff) / s0)) return true;
  }
  return false;
}

// The byte range [lo, hi] an array's elements cover (sizes checked, spans countable).
void byte_range(const Array& a, std::uintptr_t& lo, std::uintptr_t& hi) {
  index_t low = 0, high = 0;
  for (int axis = 0; axis < 4; ++axis) {
    const index_t reach = (a.size[axis] - 1) * a.stride[axis] * a.bytes;
    low += std::min<index_t>(reach, 0);
    high += std::max<index_t>(reach, 0);
  }
  lo = a.data + static_cast<std::uintptr_t>(low);
  hi = a.data + static_cast<std::uintptr_t>(high + a.bytes - 1);
}

}  // namespace

bool may_overlap(const Array& a, const Array& b) {
  if (a.count_or_zero() == 0 || b.count_or_zero() == 0) return false;
  std::uintptr_t a_lo, a_hi, b_lo, b_hi;
  byte_range(a, a_lo, a_hi);
  byte_range(b, b_lo, b_hi);
  if (a_hi < b_lo || b_hi < a_lo) return false;
  Lattice l;
  return as_lattice(a, b, l) ? lattice_overlaps(l, a.bytes) : true;
}

void check_apart(const char* api, const Array& out, const Array& other) {
  if (may_overlap(out, other)) {
    fail(api, "output " + out.named() + " overlaps " + other.named() +
                  " in memory; outputs must not alias inputs or each other");
  }
}

// No two elements of an output share memory: its axes with more than one element, sorted by
// |stride|, are nested (each stride at least the size times the stride below it, the smallest
// at least one element).
void check_distinct_elements(const char* api, const Array& a) {
  if (a.count_or_zero() == 0) return;
  index_t stride[4], size[4];
  int axes = 0;
  for (int axis = 0; axis < 4; ++axis) {
    if (a.size[axis] <= 1) continue;
    stride[axes] = std::abs(a.stride[axis]);
    size[axes++] = a.size[axis];
  }
  for (int i = 1; i < axes; ++i) {
    for (int j = i; j > 0 && stride[j] < stride[j - 1]; --j) {
      std::swap(stride[j], stride[j - 1]);
      std::swap(size[j], size[j - 1]);
    }
  }
  bool ok = axes == 0 || stride[0] >= 1;
  for (int i = 0; ok && i + 1 < axes; ++i) ok = stride[i + 1] >= size[i] * stride[i];
  if (!ok) {
    fail(api, a.named() + " has strides " + a.strides() + " under which two of its elements share memory");
  }
}

}  // namespace internal
}  // namespace EigenAttention
