// SPDX-License-Identifier: MIT
/// \file Npy.hpp
/// Reading and writing NumPy .npy files (format versions 1.0, 2.0, 3.0), into and out of Eigen
/// matrices and multi-head views. Part of the library (target EigenAttention::EigenAttention)
/// and of the umbrella header.
///
/// The dtypes are float32, float64, float16 (as Eigen::half), int32, int64 and bool. The
/// reader parses untrusted files: every malformed or hostile input (truncated data, a header
/// longer than the file, an unsupported dtype such as object or complex, big-endian data,
/// Fortran order, a non-numeric shape, a shape whose element or byte count overflows) throws
/// npy::Error whose message names the file and the problem. Stricter than NumPy in two ways:
/// bytes after the data are rejected (NumPy ignores them), and so are booleans other than 0
/// and 1. The writer writes to a temporary file in the same directory and renames it (an
/// AtomicFile), so no half-written file is ever left.
///
/// Array holds standard-library containers, so everything that touches one is inline, compiled
/// in your translation unit with your flags (a consumer built with `-D_GLIBCXX_DEBUG` has
/// containers of another layout); the library's compiled part sees pointers and sizes only.
#pragma once

// Lets the detail/ headers in (each refuses to be included on its own); never undefined, so
// that any public header may include them, in any order.
#ifndef EIGEN_ATTENTION_PUBLIC_HEADER
#define EIGEN_ATTENTION_PUBLIC_HEADER
#endif

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <Eigen/Core>

#include <EigenAttention/AtomicFile.hpp>
#include <EigenAttention/HeadsView.hpp>
#include <EigenAttention/Types.hpp>
#include <EigenAttention/export.hpp>

namespace EigenAttention {
namespace npy {

/// A malformed, hostile or unsupported file, or an I/O failure; what() names the file.
class EIGEN_ATTENTION_EXPORT Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The element types supported (little-endian or byte-order-free only). Float16 is IEEE
/// binary16 (NumPy's float16, held as Eigen::half); it comes last, so that the values of the
/// others are those of earlier versions.
enum class DType { Float32, Float64, Int32, Int64, Bool, Float16 };

/// "<f4", "<f8", "<i4", "<i8", "|b1", "<f2".
EIGEN_ATTENTION_EXPORT const char* dtype_descr(DType dtype);
/// "float32", "float64", "int32", "int64", "bool", "float16" (NumPy's names); "invalid" for a
/// value outside the enumeration.
EIGEN_ATTENTION_EXPORT const char* dtype_name(DType dtype);
/// Bytes per element.
EIGEN_ATTENTION_EXPORT std::size_t dtype_size(DType dtype);

/// A C-order (row-major) array as read from, or to be written to, a .npy file.
struct Array {
  DType dtype = DType::Float64;      ///< the type of every element in `bytes`; default Float64
  std::vector<std::int64_t> shape;   ///< empty: a scalar (one element)
  std::vector<unsigned char> bytes;  ///< the elements, little-endian, C order

  /// The number of elements (the product of the shape; 1 for a scalar).
  inline std::int64_t size() const;
  ///@{
  /// The elements as T (T matching dtype: float for Float32, double for Float64, Eigen::half
  /// for Float16, std::int32_t, std::int64_t, bool). Throws Error naming `what` on a dtype
  /// mismatch (no conversion: a Float16 array is not read as float).
  template <typename T>
  const T* data(const char* what = "array") const;
  template <typename T>
  T* data(const char* what = "array");
  ///@}
};

/// Reads a .npy file. \throws Error naming the file and the problem.
inline Array read(const std::string& path);

/// What a .npy file holds, without its data: for reading parts of a large file (rows of a C-order
/// array lie at data_offset + row * row_bytes), as the tool's distributed `run` does.
struct Header {
  DType dtype = DType::Float64;     ///< the type of every element
  std::vector<std::int64_t> shape;  ///< empty: a scalar (one element)
  std::size_t data_offset = 0;      ///< bytes before the data (magic, version, header)
};
/// Reads and checks the header of a .npy file: every check of read() (the file's size exactly
/// what the shape needs among them) but the values of booleans. \throws Error as read().
inline Header read_header(const std::string& path);
/// The bytes before the data of a C-order .npy file of `dtype` and `shape`, exactly as write()
/// writes them (and NumPy): for writing the data in parts after it. \throws Error for a bad
/// dtype or shape.
inline std::string prefix(DType dtype, const std::vector<std::int64_t>& shape);
/// Parses the bytes of a .npy file (what read() does after loading it); `name` is used in
/// messages. \throws Error.
inline Array parse(const unsigned char* data, std::size_t size, const std::string& name);
/// Writes a .npy file (version 1.0, or 2.0 when the header needs it) atomically: to a temporary
/// file beside `path`, then renamed over it. \throws Error (no file is left behind then).
inline void write(const std::string& path, const Array& array);
/// Writes a .npy file's bytes to `file` (one of several outputs committed together, say); the
/// caller commits it. Checks the array as write() does. \throws Error naming file.path().
inline void write(AtomicFile& file, const Array& array);

/// An Array holding a copy of a matrix (2-D, float, double or Eigen::half: Float32, Float64 or
/// Float16, the bits kept).
template <class Derived>
Array from_matrix(const Eigen::MatrixBase<Derived>& m);

/// A 2-D array of float, double or Eigen::half as a row-major matrix. \throws Error (named
/// `what`) if it is not 2-D or not of scalar type T (no conversion: as_matrix<float> of a
/// Float16 array throws; widen the view, `.cast<float>()`, which is exact).
template <typename T>
Eigen::Map<const RowMatrix<T>> as_matrix(const Array& a, const char* what);

/// A 4-D array of float, double or Eigen::half as a contiguous view in `layout` ([batch,
/// heads, tokens, dim] for BHTD, [batch, tokens, heads, dim] for BTHD). \throws Error as
/// as_matrix().
template <typename T>
HeadsView<const T> as_heads(const Array& a, Layout layout, const char* what);

/// A new zero-filled array of T (float, double, Eigen::half, std::int32_t, std::int64_t or
/// bool) with the given shape. \throws Error for a negative dimension or a size that
/// overflows.
template <typename T>
Array zeros(std::vector<std::int64_t> shape);

}  // namespace npy
}  // namespace EigenAttention

#include <EigenAttention/detail/NpyImpl.hpp>
