// SPDX-License-Identifier: MIT
// Arrays as the validator sees them: up to four axes, sizes and byte strides, printed the way the
// caller wrote them; the one prefix of every message (fail); overflow-checked index arithmetic.
// Internal to the library (src/check/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include <EigenAttention/HeadsView.hpp>
#include <EigenAttention/Masks.hpp>

#include "problem.hpp"
#include "text.hpp"

namespace EigenAttention {
namespace internal {

constexpr index_t kIndexMax = std::numeric_limits<index_t>::max();

/// Throws std::invalid_argument("EigenAttention::<api>: <what>"): the one prefix of every message.
[[noreturn]] void fail(const char* api, const std::string& what);

/// a * b into r, false when it overflows; a + b likewise.
inline bool mul(index_t a, index_t b, index_t& r) { return !__builtin_mul_overflow(a, b, &r); }
inline bool add(index_t a, index_t b, index_t& r) { return !__builtin_add_overflow(a, b, &r); }

inline std::string num(index_t n) { return std::to_string(n); }
/// A size that may also be 1 (broadcast): "4 or 1", or "1" when it is 1.
inline std::string either_or_1(index_t n) { return n == 1 ? num(n) : num(n) + " or 1"; }

enum class Print { Matrix, Heads, Vector };

struct Array {
  const char* name;
  std::uintptr_t data;  // element 0, as an address
  index_t bytes;        // per element
  index_t size[4];
  index_t stride[4];  // in elements
  Print print;

  /// 0 when any size is 0 (sizes checked before), else 1.
  index_t count_or_zero() const;
  /// "3x7", "[1, 2, 3, 7]", "2 entries".
  std::string shape() const;
  /// The strides of the axes shape() prints: "(7,1)", "(0,0,7,1)", "(1)".
  std::string strides() const;
  /// "Q (3x7)", "Q [1, 2, 3, 7]", "key_lengths (2 entries)".
  std::string named() const;
};

template <class View>
Array array_of(const char* name, const View& v, Form form) {
  return {name,
          reinterpret_cast<std::uintptr_t>(v.data),
          static_cast<index_t>(sizeof(*v.data)),
          {v.batch, v.heads, v.tokens, v.dim},
          {v.batch_stride, v.head_stride, v.token_stride, v.dim_stride},
          form == Form::Matrix ? Print::Matrix : Print::Heads};
}
template <class Element>
Array array_of(const char* name, const BroadcastView<Element>& m, Form form) {
  return {name,
          reinterpret_cast<std::uintptr_t>(m.data),
          static_cast<index_t>(sizeof(*m.data)),
          {m.batch, m.heads, m.rows, m.cols},
          {m.batch_stride, m.head_stride, m.row_stride, m.col_stride},
          form == Form::Matrix ? Print::Matrix : Print::Heads};
}
template <class Element>
Array vector_of(const char* name, const Element* data, index_t n) {
  return {name,
          reinterpret_cast<std::uintptr_t>(data),
          static_cast<index_t>(sizeof(Element)),
          {1, 1, 1, n},
          {0, 0, 0, 1},
          Print::Vector};
}

/// A few Arrays, without allocating (the _into calls allocate nothing).
template <std::size_t N>
struct ArrayList {
  Array items[N];
  std::size_t size = 0;
  void push_back(const Array& a) { items[size++] = a; }
  Array* begin() { return items; }
  Array* end() { return items + size; }
  const Array* begin() const { return items; }
  const Array* end() const { return items + size; }
};

/// The inputs of one call: Q, K, V, attn, lse, d_attn, d_scores, mask, bias, key_lengths or the
/// two offsets, ALiBi slopes.
using InputList = ArrayList<15>;
/// The outputs of one call: attn, lse, scores, average_scores; or dq, dk, dv, d_bias, d_sinks.
using OutputList = ArrayList<5>;

/// The element count and the byte span must fit index_t (see array.cpp).
void check_countable(const char* api, const Array& a);
/// Sizes not negative, countable, and data behind every element.
void check_sizes(const char* api, const Array& a);

}  // namespace internal
}  // namespace EigenAttention
