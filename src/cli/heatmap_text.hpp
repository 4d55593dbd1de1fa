// SPDX-License-Identifier: MIT
// The heatmap's text (heatmap.hpp): the 5x8 font drawn at twice its size, its measures, labels
// cut to fit, and text drawn on a canvas, across or reading upwards.
#pragma once

#include <cstddef>
#include <string>

#include "font5x8.hpp"
#include "heatmap.hpp"

namespace EigenAttention {
namespace cli {
namespace detail {

class Canvas;

constexpr int kScale = 2;
constexpr int kCharW = font5x8::kAdvance * kScale;       // 12: advance per character
constexpr int kGlyphH = font5x8::kGlyphHeight * kScale;  // 16: height of a line's ink
constexpr int kLineH = font5x8::kLineHeight * kScale;    // 18: line pitch

// At most `max_chars` characters; a longer text keeps its first max_chars - 1 and ends in '.'.
std::string fit(std::string text, std::size_t max_chars);

// The width in pixels of a line of `text`.
inline int text_width(const std::string& text) { return static_cast<int>(text.size()) * kCharW - kScale; }

// Horizontal text, (x, y) the top-left of the first glyph.
void draw_text(Canvas& canvas, int x, int y, const std::string& s, Rgb c);

// Text turned a quarter turn anticlockwise (reading upwards): x the left edge (the glyphs'
// tops), `bottom` one past the lowest pixel row of the first glyph.
void draw_text_up(Canvas& canvas, int x, int bottom, const std::string& s, Rgb c);

}  // namespace detail
}  // namespace cli
}  // namespace EigenAttention
