// SPDX-License-Identifier: MIT
// The heatmap's PNG encoding (heatmap.hpp): an RGB image written with libpng to an open file.
#pragma once

#include <EigenAttention/AtomicFile.hpp>

namespace EigenAttention {
namespace cli {
namespace detail {

// Appends the PNG of the width x height RGB image `rgb` (rows top to bottom) to `file`.
// Throws npy::Error naming file.path() when writing fails, std::runtime_error
// ("<path>: cannot write the PNG: <libpng's message>") when libpng does.
void write_png(AtomicFile& file, const unsigned char* rgb, int width, int height);

}  // namespace detail
}  // namespace cli
}  // namespace EigenAttention
