// SPDX-License-Identifier: MIT
// The heatmap's text (heatmap_text.hpp).
#include "heatmap_text.hpp"

#include <cstdint>

#include "heatmap_raster.hpp"

namespace EigenAttention {
namespace cli {
namespace detail {

std::string fit(std::string text, std::size_t max_chars) {
  if (text.size() > max_chars) {
    text.resize(max_chars - 1);
    text += '.';
  }
  return text;
}

void draw_text(Canvas& canvas, int x, int y, const std::string& s, Rgb c) {
  for (std::size_t k = 0; k < s.size(); ++k) {
    const std::uint8_t* rows = font5x8::glyph(static_cast<unsigned char>(s[k]));
    for (int gy = 0; gy < font5x8::kGlyphHeight; ++gy) {
      for (int gx = 0; gx < font5x8::kGlyphWidth; ++gx) {
        if ((rows[gy] >> (font5x8::kGlyphWidth - 1 - gx)) & 1) {
          canvas.fill(x + static_cast<int>(k) * kCharW + gx * kScale, y + gy * kScale, kScale, kScale, c);
        }
      }
    }
  }
}

void draw_text_up(Canvas& canvas, int x, int bottom, const std::string& s, Rgb c) {
  for (std::size_t k = 0; k < s.size(); ++k) {
    const std::uint8_t* rows = font5x8::glyph(static_cast<unsigned char>(s[k]));
    for (int gy = 0; gy < font5x8::kGlyphHeight; ++gy) {
      for (int gx = 0; gx < font5x8::kGlyphWidth; ++gx) {
        if ((rows[gy] >> (font5x8::kGlyphWidth - 1 - gx)) & 1) {
          canvas.fill(x + gy * kScale, bottom - static_cast<int>(k) * kCharW - (gx + 1) * kScale, kScale,
                      kScale, c);
        }
      }
    }
  }
}

}  // namespace detail
}  // namespace cli
}  // namespace EigenAttention
