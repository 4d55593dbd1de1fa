// SPDX-License-Identifier: MIT
// The heatmap's PNG encoding (heatmap_png.hpp). libpng reports errors by longjmp: nothing with a
// destructor lives between its setjmp and its calls, and the write callback stores the file's
// exception and leaves by png_error.
#include "heatmap_png.hpp"

#include <png.h>

#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

namespace EigenAttention {
namespace cli {
namespace detail {

namespace {

struct PngState {
  AtomicFile* file;
  std::exception_ptr write_error;  // the file's own error, rethrown as it is
  char message[256];
};

void on_error(png_structp png, png_const_charp message) {
  auto* state = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(state->message, sizeof state->message, "%s", message ? message : "libpng error");
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}

void on_write(png_structp png, png_bytep data, png_size_t size) {
  auto* state = static_cast<PngState*>(png_get_io_ptr(png));
  bool failed = false;
  try {
    state->file->write(data, size);
  } catch (...) {
    state->write_error = std::current_exception();
    failed = true;
  }
  if (failed) png_error(png, "write error");
}

void on_flush(png_structp) {}

bool encode(PngState* state, const unsigned char* rgb, int width, int height) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, state, on_error, on_warning);
  if (png == nullptr) {
    std::snprintf(state->message, sizeof state->message, "cannot start libpng");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_write_struct(&png, nullptr);
    std::snprintf(state->message, sizeof state->message, "cannot start libpng");
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, state, on_write, on_flush);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8,
               PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  const std::size_t stride = static_cast<std::size_t>(width) * 3;
  for (int y = 0; y < height; ++y) png_write_row(png, rgb + static_cast<std::size_t>(y) * stride);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

}  // namespace

void write_png(AtomicFile& file, const unsigned char* rgb, int width, int height) {
  PngState state{&file, nullptr, {}};
  if (!encode(&state, rgb, width, height)) {
    if (state.write_error) std::rethrow_exception(state.write_error);
    throw std::runtime_error(std::string(file.path()) + ": cannot write the PNG: " + state.message);
  }
}

}  // namespace detail
}  // namespace cli
}  // namespace EigenAttention
