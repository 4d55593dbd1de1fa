/// \file NpyImpl.hpp
/// The inline template definitions of Npy.hpp (included at its end; not for direct use). The
/// checks they make are non-template functions compiled once in EigenAttention::npy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

namespace EigenAttention {
namespace npy {
namespace detail {

template <typename T>
inline constexpr bool is_element_type_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, std::int32_t> ||
    std::is_same_v<T, std::int64_t> || std::is_same_v<T, bool>;

template <typename T>
inline constexpr bool is_real_v = std::is_same_v<T, float> || std::is_same_v<T, double>;

/// The DType that holds T.
template <typename T>
constexpr DType dtype_of() {
  static_assert(is_element_type_v<T>,
                "npy: the element type must be float, double, std::int32_t, std::int64_t or bool");
  if constexpr (std::is_same_v<T, float>) return DType::Float32;
  if constexpr (std::is_same_v<T, double>) return DType::Float64;
  if constexpr (std::is_same_v<T, std::int32_t>) return DType::Int32;
  if constexpr (std::is_same_v<T, std::int64_t>) return DType::Int64;
  return DType::Bool;
}

/// Throws Error naming `what` unless `a` holds `dtype` elements.
void check_dtype(const Array& a, DType dtype, const char* what);
/// Throws Error naming `what` unless `a` holds `dtype` elements in `ndim` dimensions and exactly
/// the bytes its shape needs.
void check_array(const Array& a, DType dtype, std::size_t ndim, const char* what);
/// The bytes an array of `shape` and `dtype` takes. \throws Error naming `what` for a negative
/// dimension or a count that overflows.
std::size_t byte_count(const std::vector<std::int64_t>& shape, DType dtype, const char* what);

}  // namespace detail

template <typename T>
const T* Array::data(const char* what) const {
  detail::check_dtype(*this, detail::dtype_of<T>(), what);
  return reinterpret_cast<const T*>(bytes.data());
}

template <typename T>
T* Array::data(const char* what) {
  detail::check_dtype(*this, detail::dtype_of<T>(), what);
  return reinterpret_cast<T*>(bytes.data());
}

template <class Derived>
Array from_matrix(const Eigen::MatrixBase<Derived>& m) {
  using T = typename Derived::Scalar;
  static_assert(detail::is_real_v<T>, "npy::from_matrix: the matrix must hold float or double");
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
  static_assert(detail::is_real_v<T>, "npy::as_matrix: T must be float or double");
  detail::check_array(a, detail::dtype_of<T>(), 2, what);
  return Eigen::Map<const RowMatrix<T>>(reinterpret_cast<const T*>(a.bytes.data()), Eigen::Index(a.shape[0]),
                                        Eigen::Index(a.shape[1]));
}

template <typename T>
HeadsView<const T> as_heads(const Array& a, Layout layout, const char* what) {
  static_assert(detail::is_real_v<T>, "npy::as_heads: T must be float or double");
  detail::check_array(a, detail::dtype_of<T>(), 4, what);
  const T* p = reinterpret_cast<const T*>(a.bytes.data());
  const auto s = [&](int k) { return Eigen::Index(a.shape[std::size_t(k)]); };
  // The shape is in the layout's own order: [B, H, T, D] or [B, T, H, D].
  return layout == Layout::BHTD ? HeadsView<const T>::bhtd(p, s(0), s(1), s(2), s(3))
                                : HeadsView<const T>::bthd(p, s(0), s(1), s(2), s(3));
}

template <typename T>
Array zeros(std::vector<std::int64_t> shape) {
  Array a;
  a.dtype = detail::dtype_of<T>();
  a.bytes.assign(detail::byte_count(shape, a.dtype, "npy::zeros"), 0);
  a.shape = std::move(shape);
  return a;
}

}  // namespace npy
}  // namespace EigenAttention
