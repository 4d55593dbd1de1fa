// SPDX-License-Identifier: MIT
/// \file NpyImpl.hpp
/// The inline definitions of Npy.hpp (included at its end; not for direct use). The checks,
/// the parser and the file I/O they call are compiled once in the library, and see pointers and
/// sizes only.
#pragma once

#ifndef EIGEN_ATTENTION_PUBLIC_HEADER
#error \
    "EigenAttention: <EigenAttention/detail/NpyImpl.hpp> is internal, include <EigenAttention/EigenAttention.hpp> (or another public header) instead"
#endif

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

namespace EigenAttention {
namespace npy {
namespace detail {

/// Is T an element type of an Array?
template <typename T>
inline constexpr bool is_element_type_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Eigen::half> ||
    std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t> || std::is_same_v<T, bool>;

/// Is T a floating-point element type (the matrices and views)?
template <typename T>
inline constexpr bool is_real_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Eigen::half>;

static_assert(sizeof(Eigen::half) == 2, "EigenAttention: Eigen::half is not 16 bits");

/// The DType that holds T.
template <typename T>
constexpr DType dtype_of() {
  static_assert(is_element_type_v<T>,
                "npy: the element type must be float, double, Eigen::half, std::int32_t, std::int64_t "
                "or bool");
  if constexpr (std::is_same_v<T, float>) return DType::Float32;
  if constexpr (std::is_same_v<T, double>) return DType::Float64;
  if constexpr (std::is_same_v<T, Eigen::half>) return DType::Float16;
  if constexpr (std::is_same_v<T, std::int32_t>) return DType::Int32;
  if constexpr (std::is_same_v<T, std::int64_t>) return DType::Int64;
  return DType::Bool;
}

/// An Array as the compiled library sees it: pointers and sizes, no container.
struct ArrayRef {
  DType dtype;
  const std::int64_t* shape;
  std::size_t ndim;
  const unsigned char* bytes;
  std::size_t size;  ///< bytes
};

static_assert(alignof(ArrayRef) == alignof(const void*),
              "EigenAttention: npy::detail::ArrayRef is laid out differently here than in the library "
              "(a struct packing flag such as -fpack-struct?)");

inline ArrayRef ref(const Array& a) {
  return {a.dtype, a.shape.data(), a.shape.size(), a.bytes.data(), a.bytes.size()};
}

/// Where the compiled reader puts what it parsed: a function compiled here, in the caller's
/// translation unit, that fills the caller's Array.
struct Sink {
  Array* array;
  void (*fill)(Array* array, DType dtype, const std::int64_t* shape, std::size_t ndim,
               const unsigned char* bytes, std::size_t size);
};

inline void fill_array(Array* a, DType dtype, const std::int64_t* shape, std::size_t ndim,
                       const unsigned char* bytes, std::size_t size) {
  a->dtype = dtype;
  a->shape.assign(shape, shape + ndim);
  a->bytes.assign(bytes, bytes + size);
}

/// Where the compiled header reader puts what it parsed (as Sink, for read_header()).
struct HeaderSink {
  Header* header;
  void (*fill)(Header* header, DType dtype, const std::int64_t* shape, std::size_t ndim, std::size_t offset);
};
inline void fill_header(Header* h, DType dtype, const std::int64_t* shape, std::size_t ndim,
                        std::size_t offset) {
  h->dtype = dtype;
  h->shape.assign(shape, shape + ndim);
  h->data_offset = offset;
}
/// The compiled header reader and prefix writer behind read_header() and prefix().
EIGEN_ATTENTION_EXPORT void read_header_file(const char* path, HeaderSink sink);
EIGEN_ATTENTION_EXPORT std::size_t prefix_bytes(DType dtype, const std::int64_t* shape, std::size_t ndim,
                                                char* out, std::size_t capacity);
/// The compiled reader, parser and writer behind read(), parse() and write().
EIGEN_ATTENTION_EXPORT void read_file(const char* path, Sink sink);
EIGEN_ATTENTION_EXPORT void parse_bytes(const unsigned char* data, std::size_t size, const char* name,
                                        Sink sink);
EIGEN_ATTENTION_EXPORT void write_file(const char* path, ArrayRef array);
EIGEN_ATTENTION_EXPORT void write_to(AtomicFile& file, ArrayRef array);

/// The number of elements of `shape` (1 for a scalar). \throws Error for a negative dimension
/// or a count that overflows.
EIGEN_ATTENTION_EXPORT std::int64_t element_count(const std::int64_t* shape, std::size_t ndim);
/// Throws Error naming `what` unless an array holds `dtype` elements (it holds `have`).
EIGEN_ATTENTION_EXPORT void check_dtype(DType have, DType dtype, const char* what);
/// Throws Error naming `what` unless `a` holds `dtype` elements in `ndim` dimensions and exactly
/// the bytes its shape needs, and the strides of a view of it (products of its non-zero
/// dimensions) are at most `max_index` (the caller's Eigen::Index).
EIGEN_ATTENTION_EXPORT void check_array(ArrayRef a, DType dtype, std::size_t ndim, const char* what,
                                        std::int64_t max_index);
/// The bytes an array of `shape` and `dtype` takes. \throws Error naming `what` for a negative
/// dimension or a count that overflows.
EIGEN_ATTENTION_EXPORT std::size_t byte_count(const std::int64_t* shape, std::size_t ndim, DType dtype,
                                              const char* what);

}  // namespace detail

inline std::int64_t Array::size() const { return detail::element_count(shape.data(), shape.size()); }

inline Array read(const std::string& path) {
  Array a;
  detail::read_file(path.c_str(), {&a, &detail::fill_array});
  return a;
}

inline Header read_header(const std::string& path) {
  Header h;
  detail::read_header_file(path.c_str(), {&h, &detail::fill_header});
  return h;
}

inline std::string prefix(DType dtype, const std::vector<std::int64_t>& shape) {
  std::string out(128, '\0');
  out.resize(detail::prefix_bytes(dtype, shape.data(), shape.size(), &out[0], out.size()));
  if (out.size() > 128) detail::prefix_bytes(dtype, shape.data(), shape.size(), &out[0], out.size());
  return out;
}

inline Array parse(const unsigned char* data, std::size_t size, const std::string& name) {
  Array a;
  detail::parse_bytes(data, size, name.c_str(), {&a, &detail::fill_array});
  return a;
}

inline void write(const std::string& path, const Array& array) {
  detail::write_file(path.c_str(), detail::ref(array));
}

inline void write(AtomicFile& file, const Array& array) { detail::write_to(file, detail::ref(array)); }

template <typename T>
const T* Array::data(const char* what) const {
  detail::check_dtype(dtype, detail::dtype_of<T>(), what);
  return reinterpret_cast<const T*>(bytes.data());
}

template <typename T>
T* Array::data(const char* what) {
  detail::check_dtype(dtype, detail::dtype_of<T>(), what);
  return reinterpret_cast<T*>(bytes.data());
}

template <class Derived>
Array from_matrix(const Eigen::MatrixBase<Derived>& m) {
  using T = typename Derived::Scalar;
  static_assert(detail::is_real_v<T>,
                "npy::from_matrix: the matrix must hold float or double (or Eigen::half)");
  Array a;
  a.dtype = detail::dtype_of<T>();
  a.shape = {std::int64_t(m.rows()), std::int64_t(m.cols())};
  a.bytes.resize(std::size_t(m.rows()) * std::size_t(m.cols()) * sizeof(T));
  if (!a.bytes.empty()) {
    Eigen::Map<RowMatrix<T>>(reinterpret_cast<T*>(a.bytes.data()), m.rows(), m.cols()) = m.derived();
  }
  return a;
}

template <typename T>
Eigen::Map<const RowMatrix<T>> as_matrix(const Array& a, const char* what) {
  static_assert(detail::is_real_v<T>, "npy::as_matrix: T must be float or double (or Eigen::half)");
  detail::check_array(detail::ref(a), detail::dtype_of<T>(), 2, what,
                      std::numeric_limits<Eigen::Index>::max());
  return Eigen::Map<const RowMatrix<T>>(reinterpret_cast<const T*>(a.bytes.data()), Eigen::Index(a.shape[0]),
                                        Eigen::Index(a.shape[1]));
}

template <typename T>
HeadsView<const T> as_heads(const Array& a, Layout layout, const char* what) {
  static_assert(detail::is_real_v<T>, "npy::as_heads: T must be float or double (or Eigen::half)");
  detail::check_array(detail::ref(a), detail::dtype_of<T>(), 4, what,
                      std::numeric_limits<std::ptrdiff_t>::max());
  const T* p = reinterpret_cast<const T*>(a.bytes.data());
  const auto s = [&](int k) { return std::ptrdiff_t(a.shape[std::size_t(k)]); };
  // The shape is in the layout's own order: [B, H, T, D] or [B, T, H, D].
  return layout == Layout::BHTD ? HeadsView<const T>::bhtd(p, s(0), s(1), s(2), s(3))
                                : HeadsView<const T>::bthd(p, s(0), s(1), s(2), s(3));
}

template <typename T>
Array zeros(std::vector<std::int64_t> shape) {
  Array a;
  a.dtype = detail::dtype_of<T>();
  a.bytes.assign(detail::byte_count(shape.data(), shape.size(), a.dtype, "npy::zeros"), 0);
  a.shape = std::move(shape);
  return a;
}

}  // namespace npy
}  // namespace EigenAttention
