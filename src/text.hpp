// SPDX-License-Identifier: MIT
// Text helpers shared by the library's npy reader and writer and the eigen-attention tool: one
// definition each, inline. Internal (src/, not installed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace EigenAttention {
namespace internal {

/// Text made safe to print or draw (it may come from a hostile file): printable ASCII (0x20 to
/// 0x7E) is kept, anything else becomes '?', one '?' per UTF-8 character. At most `max_chars`
/// characters are kept; a longer text is cut there and ends in "...".
inline std::string printable(const std::string& text, std::size_t max_chars = std::string::npos) {
  std::string out;
  bool in_multibyte = false;
  for (const char ch : text) {
    const auto byte = static_cast<unsigned char>(ch);
    if (byte >= 0x80 && (byte & 0xC0) == 0x80 && in_multibyte) continue;  // the rest of a character
    if (out.size() == max_chars) {
      out.append(3, '.');
      return out;
    }
    out += byte >= 0x20 && byte <= 0x7E ? ch : '?';
    in_multibyte = byte >= 0x80;
  }
  return out;
}

/// A count and its noun, singular for exactly one: "1 token", "0 tokens", "3 tokens", "1 entry"
/// (`plural` when the noun does not take an "s": counted(n, "entry", "entries")).
inline std::string counted(long long n, const std::string& noun, const std::string& plural = {}) {
  return std::to_string(n) + " " + (n == 1 ? noun : plural.empty() ? noun + "s" : plural);
}

/// A shape as NumPy writes it (the Python tuple of the .npy header): "(2, 8, 128, 64)", "(6,)",
/// "()".
inline std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

}  // namespace internal
}  // namespace EigenAttention
