// SPDX-License-Identifier: MIT
// libFuzzer target: npy::parse on arbitrary bytes.
//
// The contract checked (Npy.hpp):
// - parse either returns an Array or throws npy::Error; any other exception escapes (a crash);
// - a returned Array is consistent: a supported dtype, at most 64 non-negative dimensions,
//   bytes.size() == size() * dtype_size(dtype), booleans 0 or 1;
// - as_matrix / as_heads on it either give views of its shape or throw npy::Error;
// - it round-trips: npy::write to a temporary file succeeds, and npy::read of that file (and
//   npy::parse of its bytes) gives the same dtype, shape and bytes; writing it again gives the
//   same file.
// A violation prints what was parsed and traps. Temporary files go to a private directory under
// /dev/shm (or $TMPDIR, or /tmp), removed at exit.

#include <EigenAttention/Npy.hpp>

#include <dirent.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_common.hpp"

namespace npy = EigenAttention::npy;
using ea_fuzz::format;

namespace {

std::string g_dir;

void remove_dir() {
  if (g_dir.empty()) return;
  if (DIR* d = opendir(g_dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") std::remove((g_dir + "/" + name).c_str());
    }
    closedir(d);
  }
  rmdir(g_dir.c_str());
}

std::vector<unsigned char> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::string shape_text(const npy::Array& a) {
  std::string s = "(";
  for (auto d : a.shape) s += format("%lld,", (long long)d);
  return s + ")";
}

template <class F>
void expect_only_npy_errors(const char* what, F&& f) {
  try {
    f();
  } catch (const npy::Error&) {
  }
  (void)what;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::vector<std::string> bases = {"/dev/shm"};
  if (const char* t = std::getenv("TMPDIR")) bases.push_back(t);
  bases.push_back("/tmp");
  for (const std::string& base : bases) {
    std::string templ = base + "/ea-fuzz-npy.XXXXXX";
    if (mkdtemp(templ.data()) != nullptr) {
      g_dir = templ;
      break;
    }
  }
  if (g_dir.empty()) {
    std::fprintf(stderr, "fuzz_npy: cannot create a temporary directory\n");
    std::abort();
  }
  std::atexit(remove_dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ea_fuzz::description().clear();
  npy::Array a;
  try {
    a = npy::parse(data, size, "input.npy");
  } catch (const npy::Error& e) {
    EA_EXPECT(std::strstr(e.what(), "input.npy") != nullptr, "npy::Error does not name the file: %s",
              e.what());
    return 0;
  }
  ea_fuzz::note(format("parsed: dtype %d (%s), shape %s, %zu bytes", int(a.dtype), npy::dtype_descr(a.dtype),
                       shape_text(a).c_str(), a.bytes.size()));

  // A consistent Array.
  EA_EXPECT(a.shape.size() <= 64, "%zu dimensions", a.shape.size());
  for (auto d : a.shape) EA_EXPECT(d >= 0, "negative dimension %lld", (long long)d);
  std::int64_t count = -1;
  try {
    count = a.size();
  } catch (const npy::Error& e) {
    EA_EXPECT(false, "size() of a parsed array throws: %s", e.what());
  }
  const std::size_t elem = npy::dtype_size(a.dtype);
  EA_EXPECT(a.bytes.size() == static_cast<std::size_t>(count) * elem,
            "%zu bytes for %lld elements of %zu bytes", a.bytes.size(), (long long)count, elem);
  if (a.dtype == npy::DType::Bool) {
    for (unsigned char b : a.bytes) EA_EXPECT(b <= 1, "boolean byte %u", unsigned(b));
  }

  // Views of it.
  expect_only_npy_errors("as_matrix<float>", [&] {
    const auto m = npy::as_matrix<float>(a, "m");
    EA_EXPECT(a.dtype == npy::DType::Float32 && a.shape.size() == 2 && m.rows() == a.shape[0] &&
                  m.cols() == a.shape[1],
              "as_matrix<float> gave %tdx%td", m.rows(), m.cols());
  });
  expect_only_npy_errors("as_matrix<double>", [&] {
    const auto m = npy::as_matrix<double>(a, "m");
    EA_EXPECT(a.dtype == npy::DType::Float64 && a.shape.size() == 2 && m.rows() == a.shape[0] &&
                  m.cols() == a.shape[1],
              "as_matrix<double> gave %tdx%td", m.rows(), m.cols());
  });
  // The views' strides are products of dimensions: an array whose non-zero dimensions multiply
  // past int64 (possible when another dimension is 0) must be refused with npy::Error.
  bool strides_overflow = false;
  std::int64_t product = 1;
  for (auto d : a.shape)
    strides_overflow = strides_overflow || (d != 0 && __builtin_mul_overflow(product, d, &product));
  for (auto layout : {EigenAttention::Layout::BHTD, EigenAttention::Layout::BTHD}) {
    expect_only_npy_errors("as_heads", [&] {
      const auto h = npy::as_heads<float>(a, layout, "h");
      EA_EXPECT(!strides_overflow, "as_heads<float> accepted a shape whose strides overflow");
      EA_EXPECT(a.dtype == npy::DType::Float32 && a.shape.size() == 4, "as_heads<float> accepted this array");
      const bool bhtd = layout == EigenAttention::Layout::BHTD;
      EA_EXPECT(h.batch == a.shape[0] && h.dim == a.shape[3] && h.heads == a.shape[bhtd ? 1 : 2] &&
                    h.tokens == a.shape[bhtd ? 2 : 1],
                "as_heads<float> gave [%td, %td, %td, %td]", h.batch, h.heads, h.tokens, h.dim);
      // Its last element is the array's last element.
      if (count > 0) {
        const float* last = &h.data[(h.batch - 1) * h.batch_stride + (h.heads - 1) * h.head_stride +
                                    (h.tokens - 1) * h.token_stride + (h.dim - 1) * h.dim_stride];
        EA_EXPECT(
            reinterpret_cast<const unsigned char*>(last) + sizeof(float) == a.bytes.data() + a.bytes.size(),
            "as_heads<float>'s last element is not the array's last");
      }
    });
    expect_only_npy_errors("as_heads", [&] {
      const auto h = npy::as_heads<double>(a, layout, "h");
      EA_EXPECT(a.dtype == npy::DType::Float64 && a.shape.size() == 4 && h.batch == a.shape[0],
                "as_heads<double> accepted this array");
    });
  }

  // The round trip.
  const std::string path = g_dir + "/round-trip.npy";
  try {
    npy::write(path, a);
  } catch (const npy::Error& e) {
    EA_EXPECT(false, "npy::write of a parsed array threw: %s", e.what());
  }
  const std::vector<unsigned char> file = slurp(path);
  npy::Array back;
  try {
    back = npy::read(path);
  } catch (const npy::Error& e) {
    EA_EXPECT(false, "npy::read of what npy::write wrote threw: %s", e.what());
  }
  EA_EXPECT(back.dtype == a.dtype && back.shape == a.shape && back.bytes == a.bytes,
            "round trip changed the array: dtype %d -> %d, shape %s -> %s, %zu -> %zu bytes", int(a.dtype),
            int(back.dtype), shape_text(a).c_str(), shape_text(back).c_str(), a.bytes.size(),
            back.bytes.size());
  npy::Array again;
  try {
    again = npy::parse(file.data(), file.size(), "written.npy");
  } catch (const npy::Error& e) {
    EA_EXPECT(false, "npy::parse of the written bytes threw: %s", e.what());
  }
  EA_EXPECT(again.dtype == a.dtype && again.shape == a.shape && again.bytes == a.bytes,
            "parse of the written bytes differs from read");
  // The header is padded to a multiple of 64 bytes, as NumPy's.
  EA_EXPECT(file.size() >= a.bytes.size() && (file.size() - a.bytes.size()) % 64 == 0,
            "written header of %zu bytes is not a multiple of 64", file.size() - a.bytes.size());
  // Writing what was read gives the same file.
  npy::write(path, back);
  EA_EXPECT(slurp(path) == file, "writing the re-read array gives a different file");
  std::remove(path.c_str());
  return 0;
}
