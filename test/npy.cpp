// SPDX-License-Identifier: MIT
// .npy reading and writing (EigenAttention::npy): round trips of every dtype and shape; bytes
// identical to NumPy's (embedded below, generated once with NumPy 1.24; the tests never run
// Python); every malformed or hostile input rejected with npy::Error naming the file and the
// problem; the matrix and multi-head views; atomic writes that leave nothing behind on failure.
#include <EigenAttention/Npy.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

#include "as_nobody.hpp"

namespace test_npy {

namespace {

namespace ea = EigenAttention;
namespace npy = EigenAttention::npy;
namespace fs = std::filesystem;
using Bytes = std::vector<unsigned char>;

// ---- What NumPy 1.24 writes (io.BytesIO + np.save / numpy.lib.format.write_array) ----------
// clang-format off
// np.save(f, np.arange(12, dtype='<f8').reshape(3, 4) * 0.5 - 1)
const unsigned char kNumpyF8_3x4[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x38, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x33, 0x2c, 0x20,
    0x34, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf0, 0xbf, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xe0, 0xbf,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xe0, 0x3f,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf0, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x40,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0c, 0x40,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x12, 0x40,
};
// np.save(f, np.array([1.5, -2.0, 0.25], dtype='<f4'))
const unsigned char kNumpyF4_3[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x34, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x33, 0x2c, 0x29,
    0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x00, 0xc0, 0x00, 0x00, 0x80, 0x3e,
};
// np.save(f, np.array(7, dtype='<i4'))
const unsigned char kNumpyI4_scalar[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x69, 0x34, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x29, 0x2c, 0x20,
    0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x07, 0x00, 0x00, 0x00,
};
// np.save(f, np.zeros((0,), dtype='<i8'))
const unsigned char kNumpyI8_empty[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x69, 0x38, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x30, 0x2c, 0x29,
    0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
};
// np.save(f, np.array([[True, False, True]]))
const unsigned char kNumpyB1_1x3[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x7c, 0x62, 0x31, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x31, 0x2c, 0x20,
    0x33, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x01, 0x00, 0x01,
};
// np.save(f, np.array([-1, 2, -3, 2**31 - 1], dtype='<i4').reshape(2, 1, 2, 1))
const unsigned char kNumpyI4_4d[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x69, 0x34, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x32, 0x2c, 0x20,
    0x31, 0x2c, 0x20, 0x32, 0x2c, 0x20, 0x31, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0xff, 0xff, 0xff, 0xff, 0x02, 0x00, 0x00, 0x00, 0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
};
// np.save(f, np.zeros((0, 3), dtype='<f4'))
const unsigned char kNumpyF4_0x3[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x34, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x30, 0x2c, 0x20,
    0x33, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
};
// format.write_array(f, np.array([[1.0, 2.0], [3.0, 4.0]]), version=(2, 0))
const unsigned char kNumpyF8_v2[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x02, 0x00, 0x74, 0x00, 0x00, 0x00, 0x7b, 0x27, 0x64, 0x65,
    0x73, 0x63, 0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x38, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f,
    0x72, 0x74, 0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61,
    0x6c, 0x73, 0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x32,
    0x2c, 0x20, 0x32, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf0, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x40,
};
// format.write_array(f, np.array([[1.0, 2.0], [3.0, 4.0]]), version=(3, 0))
const unsigned char kNumpyF8_v3[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x03, 0x00, 0x74, 0x00, 0x00, 0x00, 0x7b, 0x27, 0x64, 0x65,
    0x73, 0x63, 0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x38, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f,
    0x72, 0x74, 0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61,
    0x6c, 0x73, 0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x32,
    0x2c, 0x20, 0x32, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf0, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x40,
};
// np.save(f, np.array([[1, -2, 0.5], [65504, 2**-24, -0.0]], dtype='<f2'))
const unsigned char kNumpyF2_2x3[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x32, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x32, 0x2c, 0x20,
    0x33, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x00, 0x3c, 0x00, 0xc0, 0x00, 0x38, 0xff, 0x7b, 0x01, 0x00, 0x00, 0x80,
};
// clang-format on

template <std::size_t N>
Bytes bytes_of(const unsigned char (&a)[N]) {
  return Bytes(a, a + N);
}

template <typename T>
Bytes bytes_of_values(const std::vector<T>& v) {
  Bytes b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

Bytes bool_bytes(const std::vector<int>& v) { return Bytes(v.begin(), v.end()); }

/// A scratch directory, removed with all it holds when the test ends.
struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("ea_npy_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, ec);
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
  /// The names in the directory, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

Bytes slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void spit(const std::string& path, const Bytes& b) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

/// A .npy file of `header` (padded with spaces and '\n' to a multiple of `align`, as NumPy does,
/// when align > 0; taken as is otherwise) and `data`.
Bytes make_file(const std::string& header, const Bytes& data = {}, int major = 1, std::size_t align = 64) {
  const std::size_t prefix = major == 1 ? 10 : 12;
  std::string h = header;
  if (align > 0) {
    const std::size_t pad = align - (prefix + h.size() + 1) % align;
    h.append(pad, ' ');
    h += '\n';
  }
  Bytes f = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<unsigned char>(major), 0};
  for (std::size_t k = 0; k < prefix - 8; ++k)
    f.push_back(static_cast<unsigned char>((h.size() >> (8 * k)) & 0xff));
  f.insert(f.end(), h.begin(), h.end());
  f.insert(f.end(), data.begin(), data.end());
  return f;
}

std::string header_of(const std::string& descr, const std::string& shape,
                      const std::string& fortran = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
}

npy::Array parse(const Bytes& f, const std::string& name = "test.npy") {
  return npy::parse(f.data(), f.size(), name);
}

/// The message npy::parse throws for `f`, named "hostile.npy"; "(accepted)" if it does not throw.
std::string parse_error(const Bytes& f) {
  try {
    parse(f, "hostile.npy");
  } catch (const npy::Error& e) {
    return e.what();
  }
  return "(accepted)";
}

/// `f` is rejected with a message that starts with the file name and contains `word`.
void check_rejected(const Bytes& f, const std::string& word) {
  const std::string message = parse_error(f);
  CAPTURE(message);
  CAPTURE(word);
  CHECK(message.rfind("hostile.npy: ", 0) == 0);
  CHECK(message.find(word) != std::string::npos);
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const npy::Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void check_same(const npy::Array& a, const npy::Array& b) {
  CHECK(a.dtype == b.dtype);
  CHECK(a.shape == b.shape);
  CHECK(a.bytes == b.bytes);
}

const npy::DType kAllDTypes[] = {npy::DType::Float32, npy::DType::Float64, npy::DType::Int32,
                                 npy::DType::Int64,   npy::DType::Bool,    npy::DType::Float16};

/// The 16 bits of a half.
std::uint16_t bits_of(Eigen::half h) { return Eigen::numext::bit_cast<std::uint16_t>(h); }

/// The half of 16 bits.
Eigen::half half_of(std::uint16_t b) { return Eigen::numext::bit_cast<Eigen::half>(b); }

}  // namespace

TEST_CASE("npy: dtype descriptors and sizes") {
  CHECK(std::string(npy::dtype_descr(npy::DType::Float32)) == "<f4");
  CHECK(std::string(npy::dtype_descr(npy::DType::Float64)) == "<f8");
  CHECK(std::string(npy::dtype_descr(npy::DType::Int32)) == "<i4");
  CHECK(std::string(npy::dtype_descr(npy::DType::Int64)) == "<i8");
  CHECK(std::string(npy::dtype_descr(npy::DType::Bool)) == "|b1");
  CHECK(std::string(npy::dtype_descr(npy::DType::Float16)) == "<f2");
  CHECK(std::string(npy::dtype_name(npy::DType::Float16)) == "float16");
  CHECK(std::string(npy::dtype_name(npy::DType::Float32)) == "float32");
  CHECK(std::string(npy::dtype_name(static_cast<npy::DType>(42))) == "invalid");
  CHECK(npy::dtype_size(npy::DType::Float16) == 2);
  // Float16 was appended: the values of the others are those of earlier versions.
  CHECK(int(npy::DType::Float32) == 0);
  CHECK(int(npy::DType::Float64) == 1);
  CHECK(int(npy::DType::Int32) == 2);
  CHECK(int(npy::DType::Int64) == 3);
  CHECK(int(npy::DType::Bool) == 4);
  CHECK(int(npy::DType::Float16) == 5);
  CHECK(npy::dtype_size(npy::DType::Float32) == 4);
  CHECK(npy::dtype_size(npy::DType::Float64) == 8);
  CHECK(npy::dtype_size(npy::DType::Int32) == 4);
  CHECK(npy::dtype_size(npy::DType::Int64) == 8);
  CHECK(npy::dtype_size(npy::DType::Bool) == 1);
  CHECK_THROWS_AS(npy::dtype_size(static_cast<npy::DType>(42)), npy::Error);
}

TEST_CASE("npy: round trip of every dtype and shape, through a file and in memory") {
  TempDir dir;
  const std::vector<std::vector<std::int64_t>> shapes = {{},           {0},    {5},         {3, 4},
                                                         {2, 3, 4, 5}, {3, 0}, {2, 0, 4, 5}};
  for (npy::DType dtype : kAllDTypes) {
    for (const auto& shape : shapes) {
      npy::Array a;
      a.dtype = dtype;
      a.shape = shape;
      const std::int64_t n = a.size();
      a.bytes.resize(std::size_t(n) * npy::dtype_size(dtype));
      for (std::size_t i = 0; i < a.bytes.size(); ++i) {
        a.bytes[i] = dtype == npy::DType::Bool ? (i * 7 / 3) % 2 : static_cast<unsigned char>(i * 37 + 11);
      }
      CAPTURE(npy::dtype_descr(dtype));
      CAPTURE(shape.size());
      CAPTURE(n);
      const std::string path = dir / "a.npy";
      npy::write(path, a);
      const Bytes file = slurp(path);
      REQUIRE(file.size() >= a.bytes.size() + 64);
      CHECK((file.size() - a.bytes.size()) % 64 == 0);  // the data starts at a multiple of 64
      check_same(npy::read(path), a);
      check_same(parse(file), a);
      CHECK(dir.entries() == std::vector<std::string>{"a.npy"});
    }
  }
}

TEST_CASE("npy: writes exactly the bytes NumPy writes, and reads them back") {
  TempDir dir;
  const auto check = [&](const npy::Array& a, const Bytes& numpy) {
    const std::string path = dir / "x.npy";
    npy::write(path, a);
    CHECK(slurp(path) == numpy);
    check_same(parse(numpy), a);
  };
  SUBCASE("float64 (3, 4)") {
    ea::RowMatrix<double> m(3, 4);
    for (int i = 0; i < 12; ++i) m(i / 4, i % 4) = i * 0.5 - 1;
    check(npy::from_matrix(m), bytes_of(kNumpyF8_3x4));
  }
  SUBCASE("float32 (3,)") {
    check({npy::DType::Float32, {3}, bytes_of_values<float>({1.5f, -2.0f, 0.25f})}, bytes_of(kNumpyF4_3));
  }
  SUBCASE("int32 scalar ()") {
    check({npy::DType::Int32, {}, bytes_of_values<std::int32_t>({7})}, bytes_of(kNumpyI4_scalar));
  }
  SUBCASE("int64 (0,)") { check({npy::DType::Int64, {0}, {}}, bytes_of(kNumpyI8_empty)); }
  SUBCASE("bool (1, 3)") { check({npy::DType::Bool, {1, 3}, bool_bytes({1, 0, 1})}, bytes_of(kNumpyB1_1x3)); }
  SUBCASE("int32 (2, 1, 2, 1)") {
    check({npy::DType::Int32, {2, 1, 2, 1}, bytes_of_values<std::int32_t>({-1, 2, -3, 2147483647})},
          bytes_of(kNumpyI4_4d));
  }
  SUBCASE("float32 (0, 3)") { check(npy::zeros<float>({0, 3}), bytes_of(kNumpyF4_0x3)); }
  SUBCASE("float16 (2, 3)") {
    ea::RowMatrix<Eigen::half> m(2, 3);
    m << Eigen::half(1.0f), Eigen::half(-2.0f), Eigen::half(0.5f), Eigen::half(65504.0f),
        half_of(0x0001) /* 2^-24, the smallest subnormal */, Eigen::half(-0.0f);
    check(npy::from_matrix(m), bytes_of(kNumpyF2_2x3));
  }
}

TEST_CASE("npy: reads format versions 2.0 and 3.0") {
  for (const Bytes& f : {bytes_of(kNumpyF8_v2), bytes_of(kNumpyF8_v3)}) {
    CAPTURE(int(f[6]));
    const npy::Array a = parse(f);
    CHECK(a.dtype == npy::DType::Float64);
    CHECK(a.shape == std::vector<std::int64_t>{2, 2});
    const auto m = npy::as_matrix<double>(a, "v");
    CHECK(m(0, 0) == 1.0);
    CHECK(m(0, 1) == 2.0);
    CHECK(m(1, 0) == 3.0);
    CHECK(m(1, 1) == 4.0);
  }
}

TEST_CASE("npy: the header is parsed as the Python literal it is") {
  const Bytes two = bytes_of_values<double>({1.0, 2.0});
  const auto accepted = [&](const std::string& header, const std::vector<std::int64_t>& shape,
                            npy::DType dtype = npy::DType::Float64,
                            const Bytes& d = bytes_of_values<double>({1.0, 2.0})) {
    CAPTURE(header);
    npy::Array a;
    REQUIRE_NOTHROW(a = parse(make_file(header, d)));
    CHECK(a.dtype == dtype);
    CHECK(a.shape == shape);
    CHECK(a.bytes == d);
  };
  accepted("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", {2});
  accepted("{'shape': (2,), 'fortran_order': False, 'descr': '<f8'}",
           {2});  // any key order, no trailing comma
  accepted("{'fortran_order': False, 'descr': '<f8', 'shape': (2, )}", {2});
  accepted("{ \"descr\" : \"<f8\" ,\n 'fortran_order':False,'shape':( 2 , ) , }", {2});
  accepted("{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2)}", {1, 2});
  accepted("{'descr': '<f8', 'fortran_order': False, 'shape': ((1), 2L)}", {1, 2});  // Python 2 wrote 2L
  accepted("{'descr': '=f8', 'fortran_order': False, 'shape': (2,)}", {2});          // native = little
  accepted("{'descr': '<f8', 'fortran_order': True, 'shape': (2,)}", {2});           // 1-D: the same bytes
  accepted("{'descr': '<i8', 'fortran_order': False, 'shape': ()}", {}, npy::DType::Int64,
           bytes_of_values<std::int64_t>({-5}));
  accepted("{'descr': '<b1', 'fortran_order': False, 'shape': (0, 0, 7)}", {0, 0, 7}, npy::DType::Bool, {});
  // A zero dimension makes the count 0 however large the others: no overflow there.
  accepted("{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 4611686018427387904, 0)}",
           {4611686018427387904, 4611686018427387904, 0}, npy::DType::Float64, {});

  // Padding: 16 (old NumPy), none at all, or no final newline.
  for (std::size_t align : {std::size_t(16), std::size_t(1)}) {
    CAPTURE(align);
    const npy::Array a = parse(make_file(header_of("<f8", "(2,)"), two, 1, align));
    CHECK(a.shape == std::vector<std::int64_t>{2});
    CHECK(a.bytes == two);
  }
  CHECK(parse(make_file(header_of("<f8", "(2,)"), two, 1, 0)).bytes == two);
  CHECK(parse(make_file(header_of("<f8", "(2,)"), two, 2)).bytes == two);
  CHECK(parse(make_file(header_of("<f8", "(2,)"), two, 3)).bytes == two);
}

TEST_CASE("npy: malformed and hostile files are rejected, naming the file and the problem") {
  const Bytes f8x2 = bytes_of_values<double>({1.0, 2.0});
  const Bytes good = make_file(header_of("<f8", "(2,)"), f8x2);
  REQUIRE(parse_error(good) == "(accepted)");

  SUBCASE("too short, bad magic, unsupported versions") {
    check_rejected({}, "too short");
    check_rejected(Bytes(good.begin(), good.begin() + 4), "too short");
    check_rejected(Bytes(good.begin(), good.begin() + 9), "too short");
    const Bytes v2 = make_file(header_of("<f8", "(2,)"), f8x2, 2);
    check_rejected(Bytes(v2.begin(), v2.begin() + 11), "too short");
    check_rejected({'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '!'}, "magic");
    check_rejected({'P', 'K', 3, 4}, "magic");  // an .npz
    for (auto version : {std::pair<int, int>{0, 0}, {4, 0}, {1, 1}, {2, 5}, {255, 255}}) {
      Bytes f = good;
      f[6] = static_cast<unsigned char>(version.first);
      f[7] = static_cast<unsigned char>(version.second);
      check_rejected(f, "unsupported format version " + std::to_string(version.first) + "." +
                            std::to_string(version.second));
    }
  }
  SUBCASE("header length beyond the file") {
    Bytes f = good;
    f[8] = 0xff;
    f[9] = 0xff;
    check_rejected(f, "header length 65535 goes beyond the end of the file");
    Bytes g = make_file(header_of("<f8", "(2,)"), f8x2, 2);
    g[8] = g[9] = g[10] = g[11] = 0xff;
    check_rejected(g, "header length 4294967295 goes beyond");
    check_rejected(Bytes(good.begin(), good.begin() + 40), "beyond the end of the file");
  }
  SUBCASE("header not a dict, or not a Python literal") {
    check_rejected(make_file("['descr', 'shape']"), "header is not a dict");
    check_rejected(make_file("'<f8'"), "header is not a dict");
    check_rejected(make_file("(1, 2)"), "header is not a dict");
    check_rejected(make_file(""), "malformed header");
    check_rejected(make_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2,)"), "malformed header");
    check_rejected(make_file("{'descr' '<f8', 'fortran_order': False, 'shape': (2,)}"), "malformed header");
    check_rejected(make_file("{descr: '<f8', 'fortran_order': False, 'shape': (2,)}"), "malformed header");
    check_rejected(make_file("{'descr': '<f8',, 'fortran_order': False, 'shape': (2,)}"), "malformed header");
    check_rejected(make_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2,)} x", f8x2),
                   "malformed header");
    check_rejected(make_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2,)}{}", f8x2),
                   "malformed header");
    check_rejected(make_file("{'descr': '<f8', 'fortran_order': Falsey, 'shape': (2,)}", f8x2),
                   "malformed header");
    check_rejected(make_file(header_of("<f8", "(2,)") + '\0', f8x2), "malformed header");
    check_rejected(make_file("{'descr': '<f8\n', 'fortran_order': False, 'shape': (2,)}", f8x2),
                   "unterminated");
    check_rejected(make_file("{'descr': '\\x3cf8', 'fortran_order': False, 'shape': (2,)}", f8x2), "escape");
    check_rejected(make_file(std::string(100000, '(')), "nesting");
    check_rejected(make_file("{'descr': '<f8', 'fortran_order': False, 'shape': " + std::string(20, '(') +
                             "2," + std::string(20, ')') + "}"),
                   "nesting");
  }
  SUBCASE("missing, unknown, duplicate and non-string keys") {
    check_rejected(make_file("{'fortran_order': False, 'shape': (2,)}", f8x2), "missing the key 'descr'");
    check_rejected(make_file("{'descr': '<f8', 'shape': (2,)}", f8x2), "missing the key 'fortran_order'");
    check_rejected(make_file("{'descr': '<f8', 'fortran_order': False}", f8x2), "missing the key 'shape'");
    check_rejected(make_file("{}", f8x2), "missing the key");
    check_rejected(make_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'extra': 1}", f8x2),
                   "unexpected key 'extra'");
    check_rejected(make_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'shape': (2,)}", f8x2),
                   "duplicate key 'shape'");
    check_rejected(make_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 1: 2}", f8x2),
                   "header key");
  }
  SUBCASE("unsupported dtypes") {
    check_rejected(make_file(header_of("|O", "(2,)"), f8x2), "object");
    check_rejected(make_file(header_of("<c8", "(2,)"), f8x2), "complex");
    check_rejected(make_file(header_of("<c16", "(1,)"), Bytes(16)), "complex");
    check_rejected(make_file(header_of(">f8", "(2,)"), f8x2), "big-endian");
    check_rejected(make_file(header_of(">i4", "(4,)"), f8x2), "big-endian");
    check_rejected(make_file(header_of(">f2", "(8,)"), f8x2), "big-endian");
    check_rejected(make_file(header_of("|S8", "(2,)"), f8x2), "strings");
    check_rejected(make_file(header_of("<U2", "(2,)"), f8x2), "strings");
    check_rejected(make_file(header_of("|V16", "(1,)"), Bytes(16)), "structured");
    for (const char* descr :
         {"|i1", "|u1", "<u4", "<u2", "|f2", "f2", "<f16", "f8", "|f8", "<i2", "<M8[ns]", "", "<f8 "}) {
      CAPTURE(descr);
      check_rejected(make_file(header_of(descr, "(2,)"), f8x2), "unsupported dtype");
    }
    check_rejected(
        make_file("{'descr': [('a', '<f4'), ('b', '<f4')], 'fortran_order': False, 'shape': (2,)}", f8x2),
        "structured");
    check_rejected(make_file("{'descr': 8, 'fortran_order': False, 'shape': (2,)}", f8x2), "descr");
    check_rejected(make_file("{'descr': None, 'fortran_order': False, 'shape': (2,)}", f8x2), "descr");
  }
  SUBCASE("Fortran order") {
    check_rejected(make_file(header_of("<f8", "(1, 2)", "True"), f8x2),
                   "Fortran order is not supported; save with np.ascontiguousarray");
    check_rejected(make_file(header_of("<f8", "(2,)", "1"), f8x2), "fortran_order");
    check_rejected(make_file(header_of("<f8", "(2,)", "'False'"), f8x2), "fortran_order");
  }
  SUBCASE("shapes: not a tuple, non-numeric, negative, too many dimensions") {
    check_rejected(make_file(header_of("<f8", "[2]"), f8x2), "shape is a list, not a tuple");
    check_rejected(make_file(header_of("<f8", "(2)"), f8x2), "shape is an integer, not a tuple");
    check_rejected(make_file(header_of("<f8", "'(2,)'"), f8x2), "shape is a string");
    check_rejected(make_file(header_of("<f8", "None"), f8x2), "shape is None");
    check_rejected(make_file(header_of("<f8", "('2',)"), f8x2), "non-numeric");
    check_rejected(make_file(header_of("<f8", "(True, 2)"), f8x2), "non-numeric");
    check_rejected(make_file(header_of("<f8", "(None,)"), f8x2), "non-numeric");
    check_rejected(make_file(header_of("<f8", "((2,),)"), f8x2), "non-numeric");
    check_rejected(make_file(header_of("<f8", "(2.0,)"), f8x2), "malformed header");
    check_rejected(make_file(header_of("<f8", "(0x2,)"), f8x2), "malformed header");
    check_rejected(make_file(header_of("<f8", "(1_0,)"), f8x2), "malformed header");
    check_rejected(make_file(header_of("<f8", "(+2,)"), f8x2), "malformed header");
    check_rejected(make_file(header_of("<f8", "(-1,)"), f8x2), "negative dimension -1");
    check_rejected(make_file(header_of("<f8", "(2, -3)"), f8x2), "negative dimension -3");
    check_rejected(make_file(header_of("<f8", "(-9223372036854775808,)"), f8x2), "negative dimension");
    check_rejected(make_file(header_of("<f8", "(-99999999999999999999999,)"), f8x2), "negative dimension");
    std::string many = "(";
    for (int k = 0; k < 65; ++k) many += "1, ";
    check_rejected(make_file(header_of("<f8", many + ")"), Bytes(8)), "too many");
  }
  SUBCASE("shapes whose element or byte count overflows") {
    check_rejected(make_file(header_of("<f8", "(9223372036854775808,)"), f8x2), "overflows int64");
    check_rejected(make_file(header_of("<f8", "(99999999999999999999999999999999,)"), f8x2),
                   "overflows int64");
    check_rejected(make_file(header_of("<f8", "(4294967296, 4294967296)"), f8x2), "overflows");
    check_rejected(make_file(header_of("<f8", "(9223372036854775807,)"), f8x2), "overflows");
    check_rejected(make_file(header_of("<f8", "(2305843009213693952,)"), f8x2),
                   "overflows");  // 2^61 * 8 = 2^64
    check_rejected(make_file(header_of("|b1", "(3037000500, 3037000500)"), f8x2), "overflows");
  }
  SUBCASE("truncated data, trailing garbage") {
    check_rejected(make_file(header_of("<f8", "(3,)"), f8x2), "truncated");
    check_rejected(make_file(header_of("<f8", "(3, 4)"), Bytes(95)), "truncated");
    check_rejected(make_file(header_of("<f8", "(2,)")), "truncated");
    check_rejected(make_file(header_of("<i4", "()")), "truncated");
    check_rejected(make_file(header_of("<f8", "(1152921504606846975,)"), f8x2), "truncated");
    Bytes more = f8x2;
    more.push_back(0);
    check_rejected(make_file(header_of("<f8", "(2,)"), more), "trailing garbage");
    check_rejected(make_file(header_of("<f8", "(0,)"), f8x2), "trailing garbage");
  }
  SUBCASE("booleans other than 0 and 1") {
    check_rejected(make_file(header_of("|b1", "(3,)"), {1, 0, 2}), "boolean element 2 is the byte 2");
    check_rejected(make_file(header_of("|b1", "(1,)"), {0xff}), "boolean");
  }
  SUBCASE("every truncation of a valid file") {
    const Bytes numpy = bytes_of(kNumpyF8_3x4);
    for (std::size_t n = 0; n < numpy.size(); ++n) {
      CAPTURE(n);
      CHECK(parse_error(Bytes(numpy.begin(), numpy.begin() + std::ptrdiff_t(n))) != "(accepted)");
    }
  }
  SUBCASE("every single-byte change of a valid header is parsed or rejected, never crashes") {
    const Bytes numpy = bytes_of(kNumpyI4_4d);
    for (std::size_t i = 0; i < 128; ++i) {
      for (int value :
           {0x00, 0x0a, 0x20, 0x27, 0x28, 0x29, 0x2c, 0x2d, 0x30, 0x39, 0x3a, 0x7b, 0x7d, 0x93, 0xff}) {
        Bytes f = numpy;
        f[i] = static_cast<unsigned char>(value);
        const std::string message = parse_error(f);
        if (message != "(accepted)") {
          CAPTURE(message);
          CHECK(message.rfind("hostile.npy: ", 0) == 0);
        }
      }
    }
  }
}

TEST_CASE("npy: read() names the path in its errors") {
  TempDir dir;
  const std::string missing = dir / "missing.npy";
  std::string m = error_of([&] { npy::read(missing); });
  CHECK(m.rfind(missing + ": ", 0) == 0);
  CHECK(contains(m, "cannot open"));

  m = error_of([&] { npy::read(dir.path.string()); });
  CHECK(m.rfind(dir.path.string() + ": ", 0) == 0);

  const std::string fortran = dir / "fortran.npy";
  spit(fortran, make_file(header_of("<f8", "(2, 2)", "True"), Bytes(32)));
  m = error_of([&] { npy::read(fortran); });
  CHECK(m == fortran + ": Fortran order is not supported; save with np.ascontiguousarray");

  const std::string cut = dir / "cut.npy";
  const Bytes numpy = bytes_of(kNumpyF8_3x4);
  spit(cut, Bytes(numpy.begin(), numpy.end() - 1));
  m = error_of([&] { npy::read(cut); });
  CHECK(m.rfind(cut + ": truncated", 0) == 0);

  const std::string ok = dir / "ok.npy";
  spit(ok, numpy);
  check_same(npy::read(ok), parse(numpy));
}

TEST_CASE("npy: from_matrix, as_matrix, as_heads, zeros, data") {
  SUBCASE("from_matrix copies any expression in row-major order; as_matrix views it") {
    Eigen::MatrixXd col(2, 3);  // column-major
    col << 1, 2, 3, 4, 5, 6;
    const npy::Array a = npy::from_matrix(col);
    CHECK(a.dtype == npy::DType::Float64);
    CHECK(a.shape == std::vector<std::int64_t>{2, 3});
    CHECK(a.bytes == bytes_of_values<double>({1, 2, 3, 4, 5, 6}));
    const auto m = npy::as_matrix<double>(a, "a");
    CHECK(m == col);
    CHECK(m.data() == a.data<double>());

    const Eigen::MatrixXf f = Eigen::MatrixXf::Random(4, 5);
    const npy::Array b = npy::from_matrix((f * 2.0f).block(1, 1, 3, 2));
    CHECK(b.dtype == npy::DType::Float32);
    CHECK(npy::as_matrix<float>(b, "b") == (f * 2.0f).block(1, 1, 3, 2));
    const npy::Array empty = npy::from_matrix(Eigen::MatrixXf(0, 3));
    CHECK(empty.shape == std::vector<std::int64_t>{0, 3});
    CHECK(empty.bytes.empty());
    CHECK(npy::as_matrix<float>(empty, "e").rows() == 0);
    CHECK(npy::as_matrix<float>(empty, "e").cols() == 3);
  }
  SUBCASE("as_matrix rejects the wrong dtype, rank or byte count, naming `what`") {
    const npy::Array a = npy::from_matrix(Eigen::MatrixXd::Ones(2, 2));
    std::string m = error_of([&] { npy::as_matrix<float>(a, "Q.npy"); });
    CHECK(m.rfind("Q.npy: ", 0) == 0);
    CHECK(contains(m, "float32"));
    CHECK(contains(m, "float64"));
    m = error_of([&] { npy::as_matrix<double>(npy::zeros<double>({2, 2, 2}), "K.npy"); });
    CHECK(m.rfind("K.npy: expected a 2-D", 0) == 0);
    CHECK(contains(m, "(2, 2, 2)"));
    m = error_of([&] { npy::as_matrix<double>(npy::zeros<double>({4}), "V.npy"); });
    CHECK(contains(m, "2-D"));
    npy::Array bad = a;
    bad.bytes.pop_back();
    m = error_of([&] { npy::as_matrix<double>(bad, "bad"); });
    CHECK(m.rfind("bad: holds 31 bytes", 0) == 0);
  }
  SUBCASE("as_heads in both layouts") {
    npy::Array a = npy::zeros<float>({2, 3, 4, 5});
    float* p = a.data<float>();
    for (int i = 0; i < 2 * 3 * 4 * 5; ++i) p[i] = float(i);
    const auto bhtd = npy::as_heads<float>(a, ea::Layout::BHTD, "x");
    CHECK(bhtd.batch == 2);
    CHECK(bhtd.heads == 3);
    CHECK(bhtd.tokens == 4);
    CHECK(bhtd.dim == 5);
    const auto bthd = npy::as_heads<float>(a, ea::Layout::BTHD, "x");
    CHECK(bthd.batch == 2);
    CHECK(bthd.tokens == 3);
    CHECK(bthd.heads == 4);
    CHECK(bthd.dim == 5);
    for (int b = 0; b < 2; ++b) {
      for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 4; ++j) {
          for (int c = 0; c < 5; ++c) {
            const float expected = float(((b * 3 + i) * 4 + j) * 5 + c);
            CHECK(bhtd.head(b, i)(j, c) == expected);  // [B, H, T, D]
            CHECK(bthd.head(b, j)(i, c) == expected);  // [B, T, H, D]
          }
        }
      }
    }
    const std::string m = error_of([&] {
      npy::as_heads<float>(npy::zeros<float>({3, 4, 5}), ea::Layout::BHTD, "Q");
    });
    CHECK(m.rfind("Q: expected a 4-D", 0) == 0);
    CHECK_THROWS_AS(npy::as_heads<double>(a, ea::Layout::BHTD, "Q"), npy::Error);
  }
  SUBCASE("zeros, size and data") {
    const npy::Array z = npy::zeros<std::int64_t>({2, 3});
    CHECK(z.dtype == npy::DType::Int64);
    CHECK(z.shape == std::vector<std::int64_t>{2, 3});
    CHECK(z.bytes == Bytes(48, 0));
    CHECK(z.size() == 6);
    CHECK(npy::zeros<bool>({}).bytes == Bytes(1, 0));
    CHECK(npy::zeros<bool>({}).size() == 1);
    CHECK(npy::zeros<std::int32_t>({7, 0}).size() == 0);
    CHECK(npy::zeros<float>({0}).bytes.empty());
    CHECK_THROWS_WITH_AS(npy::zeros<float>({2, -1}), "npy::zeros: negative dimension in shape (2, -1)",
                         npy::Error);
    CHECK(contains(error_of([] { npy::zeros<double>({std::int64_t(1) << 62}); }), "overflows"));
    CHECK(contains(error_of([] {
                     npy::zeros<double>({std::int64_t(1) << 32, std::int64_t(1) << 32});
                   }),
                   "overflows"));

    CHECK(z.data<std::int64_t>() == reinterpret_cast<const std::int64_t*>(z.bytes.data()));
    const std::string m = error_of([&] { z.data<double>("counts"); });
    CHECK(m == "counts: holds int64 ('<i8') elements, not float64 ('<f8')");
    CHECK_THROWS_AS(z.data<std::int32_t>(), npy::Error);
    npy::Array flags = npy::zeros<bool>({3});
    flags.data<bool>()[1] = true;
    CHECK(flags.bytes == Bytes{0, 1, 0});
    npy::Array neg;
    neg.shape = {-1};
    CHECK_THROWS_AS(neg.size(), npy::Error);
  }
}

TEST_CASE("npy: float16 ('<f2') as Eigen::half") {
  // Every bit pattern class: zeros of both signs, subnormals, normals, the largest finite,
  // infinities and NaNs (quiet and signalling payloads, both signs).
  const std::vector<std::uint16_t> patterns = {0x0000, 0x8000, 0x0001, 0x03ff, 0x8200, 0x0400,
                                               0x3c00, 0xc000, 0x3555, 0x7bff, 0xfbff, 0x7c00,
                                               0xfc00, 0x7e00, 0x7c01, 0xfe55};
  ea::RowMatrix<Eigen::half> m(4, 4);
  for (int i = 0; i < 16; ++i) m(i / 4, i % 4) = half_of(patterns[std::size_t(i)]);

  SUBCASE("a half matrix round-trips bit for bit, as '<f2'") {
    TempDir dir;
    const npy::Array a = npy::from_matrix(m);
    CHECK(a.dtype == npy::DType::Float16);
    CHECK(a.shape == std::vector<std::int64_t>{4, 4});
    CHECK(a.bytes.size() == 32);
    CHECK(a.bytes == bytes_of_values<std::uint16_t>(patterns));  // row-major, little-endian bits
    const std::string path = dir / "h.npy";
    npy::write(path, a);
    const Bytes file = slurp(path);
    const std::string text(file.begin(), file.end());
    CHECK(contains(text, "{'descr': '<f2', 'fortran_order': False, 'shape': (4, 4), }"));
    CHECK(file.size() == 128 + 32);
    const npy::Array back = npy::read(path);
    check_same(back, a);
    const auto view = npy::as_matrix<Eigen::half>(back, "h.npy");
    REQUIRE(view.rows() == 4);
    REQUIRE(view.cols() == 4);
    for (int i = 0; i < 16; ++i) {
      CAPTURE(i);
      CHECK(bits_of(view(i / 4, i % 4)) == patterns[std::size_t(i)]);
    }
    CHECK(bits_of(back.data<Eigen::half>()[13]) == 0x7e00);
  }
  SUBCASE("NumPy's bytes read as the values NumPy wrote; widening to float is exact") {
    const npy::Array a = parse(bytes_of(kNumpyF2_2x3));
    CHECK(a.dtype == npy::DType::Float16);
    const Eigen::MatrixXf f = npy::as_matrix<Eigen::half>(a, "x").cast<float>();
    CHECK(f(0, 0) == 1.0f);
    CHECK(f(0, 1) == -2.0f);
    CHECK(f(0, 2) == 0.5f);
    CHECK(f(1, 0) == 65504.0f);
    CHECK(f(1, 1) == std::ldexp(1.0f, -24));
    CHECK(f(1, 2) == 0.0f);
    CHECK(std::signbit(f(1, 2)));
  }
  SUBCASE("'=f2' is native (little-endian); big-endian '>f2' is rejected as every big-endian dtype") {
    const Bytes data = bytes_of_values<std::uint16_t>({0x3c00, 0xc000});
    const npy::Array native = parse(make_file(header_of("=f2", "(2,)"), data));
    CHECK(native.dtype == npy::DType::Float16);
    CHECK(native.bytes == data);
    const std::string m = parse_error(make_file(header_of(">f2", "(2,)"), data));
    CHECK(m.rfind("hostile.npy: unsupported dtype '>f2': big-endian data is not supported", 0) == 0);
    CHECK(contains(m, "'<f2'"));  // among the supported ones
    check_rejected(make_file(header_of("<f2", "(3,)"), data), "truncated");
    check_rejected(make_file(header_of("<f2", "(1,)"), data), "trailing garbage");
  }
  SUBCASE("no conversion: the views and data() of another type throw, naming float16") {
    const npy::Array a = npy::from_matrix(m);
    std::string e = error_of([&] { npy::as_matrix<float>(a, "Q.npy"); });
    CHECK(e.rfind("Q.npy: expected a 2-D float32 ('<f4') array, got a 2-D float16 ('<f2') array", 0) == 0);
    e = error_of([&] { a.data<float>("Q.npy"); });
    CHECK(e == "Q.npy: holds float16 ('<f2') elements, not float32 ('<f4')");
    const npy::Array f = npy::from_matrix(Eigen::MatrixXf::Ones(2, 2));
    CHECK_THROWS_AS(npy::as_matrix<Eigen::half>(f, "f"), npy::Error);
  }
  SUBCASE("zeros and as_heads") {
    npy::Array z = npy::zeros<Eigen::half>({1, 2, 3, 4});
    CHECK(z.dtype == npy::DType::Float16);
    CHECK(z.bytes == Bytes(48, 0));
    Eigen::half* p = z.data<Eigen::half>();
    for (int i = 0; i < 24; ++i) p[i] = Eigen::half(float(i));
    const auto h = npy::as_heads<Eigen::half>(z, ea::Layout::BHTD, "z");
    CHECK(h.heads == 2);
    CHECK(h.tokens == 3);
    CHECK(float(h.head(0, 1)(2, 3)) == 23.0f);
    const auto t = npy::as_heads<Eigen::half>(z, ea::Layout::BTHD, "z");
    CHECK(t.tokens == 2);
    CHECK(t.heads == 3);
    CHECK(float(t.head(0, 2)(1, 3)) == 23.0f);
  }
}

TEST_CASE("npy: writes are atomic and leave nothing behind on failure") {
  TempDir dir;
  const npy::Array a = npy::from_matrix(Eigen::MatrixXd::Constant(3, 3, 2.5));

  SUBCASE("overwriting replaces the file and leaves no temporary") {
    const std::string path = dir / "x.npy";
    spit(path, Bytes{'o', 'l', 'd'});
    npy::write(path, a);
    check_same(npy::read(path), a);
    CHECK(dir.entries() == std::vector<std::string>{"x.npy"});
  }
  SUBCASE("a directory that does not exist, or a path through a file") {
    const std::string path = dir / "missing/x.npy";
    const std::string m = error_of([&] { npy::write(path, a); });
    CHECK(m.rfind(path + ": cannot create", 0) == 0);
    CHECK(contains(m, std::strerror(ENOENT)));
    spit(dir / "file", Bytes{1});
    // ENOTDIR whoever runs it, root included.
    const std::string through_file = dir / "file/x.npy";
    const std::string n = error_of([&] { npy::write(through_file, a); });
    CHECK(n.rfind(through_file + ": cannot create", 0) == 0);
    CHECK(contains(n, std::strerror(ENOTDIR)));
    CHECK(dir.entries() == std::vector<std::string>{"file"});
  }
  SUBCASE("an unwritable directory") {
    const fs::path ro = dir.path / "ro";
    fs::create_directory(ro);
    const std::string path = (ro / "x.npy").string();
    std::string m;
    if (::geteuid() != 0) {
      fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
      m = error_of([&] { npy::write(path, a); });
      fs::permissions(ro, fs::perms::owner_all);
    } else {
      // Root ignores directory permissions (CI runs as root): the write runs as nobody, in a
      // child process, into ro (root's, 0555), after a write into rw (nobody's) that must work,
      // which shows that nobody reaches the directory (each parent 0755) and that only ro's
      // permissions stop the write.
      const auto rwx_r_x = fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                           fs::perms::others_read | fs::perms::others_exec;
      fs::permissions(dir.path, rwx_r_x);
      fs::permissions(ro, rwx_r_x & ~fs::perms::owner_write);
      const fs::path rw = dir.path / "rw";
      fs::create_directory(rw);
      REQUIRE(::chown(rw.c_str(), ea_test::kNobody, ea_test::kNobody) == 0);
      const std::string control = (rw / "x.npy").string();
      const ea_test::ChildOutcome child = ea_test::run_as_nobody([&] {
        return error_of([&] { npy::write(control, a); }) + "\n" + error_of([&] { npy::write(path, a); });
      });
      CAPTURE(child.text);
      REQUIRE(child.exited);
      REQUIRE(child.status == 0);
      const std::size_t newline = child.text.find('\n');
      REQUIRE(newline != std::string::npos);
      INFO("nobody must be able to write in its own directory " << rw.string()
                                                                << " (is every parent searchable by all?)");
      REQUIRE(child.text.substr(0, newline) == "(no error)");
      check_same(npy::read(control), a);
      m = child.text.substr(newline + 1);
    }
    CAPTURE(m);
    CHECK(m.rfind(path + ": cannot create", 0) == 0);
    CHECK(contains(m, std::strerror(EACCES)));
    CHECK(fs::is_empty(ro));
  }
  SUBCASE("a rename that fails (the target is a directory) removes the temporary") {
    fs::create_directory(dir.path / "target.npy");
    const std::string path = dir / "target.npy";
    const std::string m = error_of([&] { npy::write(path, a); });
    CHECK(m.rfind(path + ": cannot rename", 0) == 0);
    CHECK(dir.entries() == std::vector<std::string>{"target.npy"});
    CHECK(fs::is_empty(dir.path / "target.npy"));
  }
  SUBCASE("a write that fails half-way removes the temporary and keeps the old file") {
    const std::string path = dir / "big.npy";
    const npy::Array small = npy::zeros<float>({2});
    npy::write(path, small);
    const Bytes before = slurp(path);
    // The file-size limit makes write() fail with EFBIG once 4 KiB are written.
    struct rlimit old {};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit = old;
    limit.rlim_cur = 4096;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &limit) == 0);
    const std::string m = error_of([&] { npy::write(path, npy::zeros<double>({100, 100})); });
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
    CHECK(m.rfind(path + ": write error", 0) == 0);
    CHECK(dir.entries() == std::vector<std::string>{"big.npy"});
    CHECK(slurp(path) == before);
  }
  SUBCASE("an inconsistent array is refused before anything is created") {
    const std::string path = dir / "bad.npy";
    npy::Array short_bytes = a;
    short_bytes.bytes.pop_back();
    CHECK(contains(error_of([&] { npy::write(path, short_bytes); }), "needs 72"));
    npy::Array negative = a;
    negative.shape = {-3, -3};
    CHECK(contains(error_of([&] { npy::write(path, negative); }), "negative dimension"));
    npy::Array flags = npy::zeros<bool>({2});
    flags.bytes[1] = 7;
    CHECK(contains(error_of([&] { npy::write(path, flags); }), "boolean"));
    npy::Array odd = a;
    odd.dtype = static_cast<npy::DType>(9);
    CHECK(contains(error_of([&] { npy::write(path, odd); }), "invalid DType"));
    CHECK(error_of([&] { npy::write("", a); }) == "npy::write: empty path");
    CHECK(dir.entries().empty());
  }
}

TEST_CASE("npy: read_header() and prefix(): a file's header without its data, checked as read() checks it") {
  TempDir dir;
  const Bytes f8x2 = bytes_of_values<double>({1.0, 2.0}), numpy = bytes_of(kNumpyF8_3x4);
  // A good file, version 1.0 and 2.0: the header read() would give, and where the data starts.
  for (const int version : {1, 2}) {
    CAPTURE(version);
    const Bytes file = make_file(header_of("<f8", "(2,)"), f8x2, version);
    const std::string path = dir / ("good" + std::to_string(version) + ".npy");
    spit(path, file);
    const npy::Header h = npy::read_header(path);
    CHECK(h.dtype == npy::DType::Float64);
    CHECK(h.shape == std::vector<std::int64_t>{2});
    REQUIRE(h.data_offset == file.size() - f8x2.size());
  }
  // Every rejection of read() (but boolean values, which read_header() does not read) is the
  // same error, word for word.
  const std::vector<std::pair<const char*, Bytes>> bad = {
      {"empty", {}},
      {"magic", {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '!'}},
      {"truncated", make_file(header_of("<f8", "(3,)"), f8x2)},
      {"trailing", make_file(header_of("<f8", "(1,)"), f8x2)},
      {"fortran", make_file(header_of("<f8", "(1, 2)", "True"), f8x2)},
      {"dtype", make_file(header_of(">f8", "(2,)"), f8x2)},
      {"header beyond the end", Bytes(numpy.begin(), numpy.begin() + 40)}};
  for (const auto& entry : bad) {
    const std::string& name = entry.first;  // not a structured binding: CAPTURE's lambda uses it
    CAPTURE(name);
    const std::string path = dir / "bad.npy";
    spit(path, entry.second);
    const std::string read_error = error_of([&] { npy::read(path); });
    REQUIRE(read_error != "(no error)");
    CHECK(error_of([&] { npy::read_header(path); }) == read_error);
  }
  CHECK(contains(error_of([&] { npy::read_header(dir / "missing.npy"); }), "cannot open"));
  // prefix(): exactly the bytes write() puts before the data.
  for (const auto& shape : {std::vector<std::int64_t>{}, {3, 4}, {1, 2, 3, 4}, {0, 7}}) {
    npy::Array a;
    a.dtype = npy::DType::Float32;
    a.shape = shape;
    a.bytes.resize(static_cast<std::size_t>(a.size()) * 4);
    const std::string path = dir / "written.npy";
    npy::write(path, a);
    const Bytes written = slurp(path);
    const std::string prefix = npy::prefix(a.dtype, shape);
    REQUIRE(prefix.size() == written.size() - a.bytes.size());
    CHECK(std::equal(prefix.begin(), prefix.end(), written.begin(),
                     [](char c, unsigned char b) { return static_cast<unsigned char>(c) == b; }));
  }
}

TEST_CASE("npy: a count of one byte is written in the singular") {
  CHECK(parse_error(Bytes(1, 0x93)) == "hostile.npy: too short to be a .npy file (1 byte)");
  CHECK(parse_error(make_file(header_of("<f8", "(1,)"), Bytes(1))) ==
        "hostile.npy: truncated: the data has 1 byte but shape (1,) of float64 ('<f8') needs 8");
  CHECK(parse_error(make_file(header_of("|b1", "(1,)"), Bytes(2))) ==
        "hostile.npy: trailing garbage: 1 byte after the data that shape (1,) needs (NumPy ignores "
        "them; this reader rejects them)");
  npy::Array one = npy::zeros<double>({1, 1});
  one.bytes.resize(1);
  CHECK(error_of([&] {
          npy::as_matrix<double>(one, "bad");
        }).rfind("bad: holds 1 byte but shape (1, 1)", 0) == 0);
  TempDir dir;
  const std::string path = dir / "one.npy";
  CHECK(error_of([&] {
          npy::write(path, one);
        }).find("cannot write: the array holds 1 byte but shape (1, 1)") != std::string::npos);
  CHECK_FALSE(fs::exists(path));
}

}  // namespace test_npy
