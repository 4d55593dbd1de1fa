/// \file detail/FrontDoor.hpp
/// Helpers of the template front doors: turn any Eigen dense expression into a strided view,
/// and check scalar types at compile time. Not part of the documented API.
#pragma once

#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include <EigenAttention/Types.hpp>

namespace EigenAttention {
namespace detail {

/// Does Derived have data(), rowStride() and colStride()? (Some expressions flagged
/// DirectAccessBit, such as Eigen 3.4's IndexedView with a stepped sequence, have not.)
template <class Derived, class = void>
inline constexpr bool kHasStridedData = false;
template <class Derived>
inline constexpr bool kHasStridedData<Derived, std::void_t<decltype(std::declval<const Derived&>().data()),
                                                           decltype(std::declval<const Derived&>().rowStride()),
                                                           decltype(std::declval<const Derived&>().colStride())>> =
    true;

template <class Derived>
inline constexpr bool kHasDirectAccess =
    (int(Eigen::internal::traits<Derived>::Flags) & Eigen::DirectAccessBit) != 0 && kHasStridedData<Derived>;

template <class Derived>
inline constexpr bool kIsWritable =
    kHasDirectAccess<Derived> && (int(Eigen::internal::traits<Derived>::Flags) & Eigen::LvalueBit) != 0;

template <class Derived>
inline constexpr bool kIsResizable = std::is_base_of_v<Eigen::PlainObjectBase<Derived>, Derived>;

/// The checks of the scalar types shared by every front door, as a class: a front door
/// instantiates it first (`(void)ScalarCheck<...>{}`), so that its message is the first error a
/// mismatch gives (a checking function template's body could be instantiated only at the end
/// of the translation unit, after the errors the mismatch causes further on).
template <typename Scalar, typename... Others>
struct ScalarCheck {
  static_assert((std::is_same_v<Scalar, Others> && ...),
                "EigenAttention: Q, K, V (and the outputs) must have the same scalar type; "
                "convert one with .template cast<float>() or .template cast<double>()");
  static_assert(std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double>,
                "EigenAttention: the scalar type must be float or double");
  static constexpr bool ok =
      (std::is_same_v<Scalar, Others> && ...) && (std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double>);
};

template <class T>
using RemoveCvref = std::remove_cv_t<std::remove_reference_t<T>>;

/// Is T (after removing references and const) an Eigen matrix expression?
template <class T, class = void>
inline constexpr bool kIsMatrix = false;
template <class T>
inline constexpr bool kIsMatrix<T, std::void_t<typename RemoveCvref<T>::Scalar>> =
    std::is_base_of_v<Eigen::MatrixBase<RemoveCvref<T>>, RemoveCvref<T>>;

/// Selects the overloads whose output arguments are Eigen matrices (an Options argument in that
/// place selects the overload without it).
template <class... T>
using EnableIfMatrix = std::enable_if_t<(kIsMatrix<T> && ...), int>;

/// The scalar type of an output argument (a forwarding reference).
template <class T>
using ScalarOf = typename RemoveCvref<T>::Scalar;

/// The compile-time checks of an output argument, a forwarding reference `T&&`: writable
/// dense storage with direct access, and not a const object.
template <class T>
struct OutputCheck {
  static_assert(!std::is_const_v<std::remove_reference_t<T>>,
                "EigenAttention: an output must not be const: pass a non-const Eigen::Matrix, Map, Ref "
                "or block");
  static constexpr bool ok = !std::is_const_v<std::remove_reference_t<T>>;
};

/// A read-only strided view of an input. Expressions with direct memory access (matrices, maps,
/// blocks, Refs, transposes of those) are viewed in place; anything else (a product, a sum, a
/// cast) is evaluated once into a row-major temporary that this object owns.
template <class Derived, bool = kHasDirectAccess<Derived>>
class InputView {
 public:
  using Scalar = typename Derived::Scalar;
  explicit InputView(const Derived& m)
      : map_(m.data(), m.rows(), m.cols(),
             Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(m.rowStride(), m.colStride())) {}
  const ConstStridedMap<Scalar>& map() const { return map_; }

 private:
  ConstStridedMap<Scalar> map_;
};

template <class Derived>
class InputView<Derived, false> {
 public:
  using Scalar = typename Derived::Scalar;
  explicit InputView(const Derived& m)
      : copy_(m),
        map_(copy_.data(), copy_.rows(), copy_.cols(),
             Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(copy_.cols(), 1)) {}
  const ConstStridedMap<Scalar>& map() const { return map_; }

 private:
  RowMatrix<Scalar> copy_;
  ConstStridedMap<Scalar> map_;
};

/// A writable strided view of an output, which arrives as a forwarding reference so that
/// temporaries such as `M.block(...)` bind and const objects are rejected (OutputCheck).
/// A resizable output (an Eigen::Matrix) is first resized to rows x cols, which allocates only
/// when its size changes; any other output must already have that shape (checked later).
template <class Out>
StridedMap<ScalarOf<Out>> output_view(Out&& out, Eigen::Index rows, Eigen::Index cols) {
  using Derived = RemoveCvref<Out>;
  static_assert(kIsWritable<Derived>,
                "EigenAttention: an output must be writable dense storage with direct access "
                "(an Eigen::Matrix, Map, Ref or a block of one)");
  Derived& o = out;
  if constexpr (kIsResizable<Derived>) {
    constexpr int kRows = Derived::RowsAtCompileTime, kCols = Derived::ColsAtCompileTime;
    const bool fits = (kRows == Eigen::Dynamic || kRows == rows) && (kCols == Eigen::Dynamic || kCols == cols);
    if (fits && (o.rows() != rows || o.cols() != cols)) o.resize(rows, cols);
  }
  return StridedMap<typename Derived::Scalar>(
      o.data(), o.rows(), o.cols(), Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(o.rowStride(), o.colStride()));
}

}  // namespace detail
}  // namespace EigenAttention
