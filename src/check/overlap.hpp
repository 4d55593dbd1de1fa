// SPDX-License-Identifier: MIT
// The one overlap rule of the library: two arrays overlap when an element of one shares a byte
// with an element of the other. Internal to the library (src/check/).
#pragma once

#include "check/array.hpp"

namespace EigenAttention {
namespace internal {

/// Do a and b share a byte? Decided exactly for blocks of one parent array (equal strides on the
/// axes that have more than one element, strides nested like a parent's: [Q | ATTN] side by side
/// is fine), and conservatively (by the byte ranges they span) for anything else. Sizes checked
/// and spans countable (check_sizes) before.
bool may_overlap(const Array& a, const Array& b);

/// Throws unless output `out` lies apart from `other` (an input or another output).
void check_apart(const char* api, const Array& out, const Array& other);

/// Throws unless no two elements of an output share memory: its axes with more than one element,
/// sorted by |stride|, are nested (each stride at least the size times the stride below it, the
/// smallest at least one element).
void check_distinct_elements(const char* api, const Array& a);

/// Every output apart from every input, then from every other output (in the order given).
template <class Outputs, class Inputs>
void check_memory(const char* api, const Outputs& outputs, const Inputs& inputs) {
  for (const Array& out : outputs) check_distinct_elements(api, out);
  for (const Array& out : outputs) {
    for (const Array& in : inputs) check_apart(api, out, in);
  }
  for (auto i = outputs.begin(); i != outputs.end(); ++i) {
    for (auto j = i + 1; j != outputs.end(); ++j) check_apart(api, *i, *j);
  }
}

}  // namespace internal
}  // namespace EigenAttention
