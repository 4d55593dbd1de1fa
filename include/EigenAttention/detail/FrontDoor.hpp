// SPDX-License-Identifier: MIT
/// \file detail/FrontDoor.hpp
/// Helpers of the template front doors: turn any Eigen dense expression into a strided view,
/// and check scalar types at compile time. Not part of the documented API.
#pragma once

#ifndef EIGEN_ATTENTION_PUBLIC_HEADER
#error \
    "EigenAttention: <EigenAttention/detail/FrontDoor.hpp> is internal, include <EigenAttention/EigenAttention.hpp> (or another public header) instead"
#endif

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include <EigenAttention/Masks.hpp>
#include <EigenAttention/Types.hpp>
#include <EigenAttention/detail/CheckedArithmetic.hpp>

namespace EigenAttention {
namespace detail {

/// Does Derived have data(), rowStride() and colStride()? (Some expressions flagged
/// DirectAccessBit, such as Eigen 3.4's IndexedView with a stepped sequence, have not.)
template <class Derived, class = void>
inline constexpr bool kHasStridedData = false;
template <class Derived>
inline constexpr bool
    kHasStridedData<Derived, std::void_t<decltype(std::declval<const Derived&>().data()),
                                         decltype(std::declval<const Derived&>().rowStride()),
                                         decltype(std::declval<const Derived&>().colStride())>> = true;

template <class Derived>
inline constexpr bool kHasDirectAccess =
    (int(Derived::Flags) & Eigen::DirectAccessBit) != 0 && kHasStridedData<Derived>;

template <class Derived>
inline constexpr bool kIsWritable = kHasDirectAccess<Derived> &&
                                    (int(Derived::Flags) & Eigen::LvalueBit) != 0;

template <class Derived>
inline constexpr bool kIsResizable = std::is_base_of_v<Eigen::PlainObjectBase<Derived>, Derived>;

/// The checks of the scalar types shared by every front door, as a class: a front door
/// instantiates it first (`(void)ScalarCheck<...>{}`), so that its message is the first error a
/// mismatch gives (a checking function template's body could be instantiated only at the end
/// of the translation unit, after the errors the mismatch causes further on).
template <typename Scalar>
inline constexpr bool kSupportedScalar =
    std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double> ||
    std::is_same_v<Scalar, Eigen::bfloat16> || std::is_same_v<Scalar, Eigen::half>;

template <typename Scalar, typename... Others>
struct ScalarCheck {
  static_assert((std::is_same_v<Scalar, Others> && ...),
                "EigenAttention: Q, K, V (and the outputs) must have the same scalar type; "
                "convert one with .template cast<float>() or .template cast<double>()");
  static_assert(kSupportedScalar<Scalar>,
                "EigenAttention: the scalar type must be float, double, Eigen::bfloat16 or Eigen::half");
  static constexpr bool ok = (std::is_same_v<Scalar, Others> && ...) && kSupportedScalar<Scalar>;
};

/// The log-sum-exps (an output of the forward, an input of the backward) are of the compute
/// type: float for bfloat16 and half inputs, as Scalar otherwise.
template <typename Scalar, typename Lse>
struct LseCheck {
  static constexpr bool ok = std::is_same_v<Lse, ComputeScalar<Scalar>>;
  static_assert(ok,
                "EigenAttention: the LSE must be of the compute type (float for Eigen::bfloat16 and "
                "Eigen::half inputs, the input type otherwise)");
};

/// SCORES may be written in the input type or, for bfloat16 and half inputs, in float.
template <typename Scalar, typename Scores>
struct ScoresCheck {
  static constexpr bool ok = std::is_same_v<Scores, Scalar> || std::is_same_v<Scores, ComputeScalar<Scalar>>;
  static_assert(ok,
                "EigenAttention: SCORES must be of the input type or, for Eigen::bfloat16 and Eigen::half "
                "inputs, of float");
};

template <class T>
using RemoveCvref = std::remove_cv_t<std::remove_reference_t<T>>;

/// The expression an output argument of type T (a forwarding reference) stands for: T itself,
/// or D when T is Eigen::MatrixBase<D> (Eigen's idiom of passing outputs as MatrixBase
/// references). void when T is not an Eigen object.
template <class T, class = void>
struct OutputType {
  using type = void;
};
template <class T>
struct OutputType<T, std::void_t<decltype(std::declval<RemoveCvref<T>&>().derived())>> {
  using type = RemoveCvref<decltype(std::declval<RemoveCvref<T>&>().derived())>;
};
template <class T>
using OutputOf = typename OutputType<T>::type;

/// Is T (after removing references and const) an Eigen matrix expression?
template <class T>
inline constexpr bool kIsMatrix = std::is_base_of_v<Eigen::MatrixBase<OutputOf<T>>, OutputOf<T>>;

/// Selects the overloads whose output arguments are Eigen matrices (an Options argument in that
/// place selects the overload without it).
template <class... T>
using EnableIfMatrix = std::enable_if_t<(kIsMatrix<T> && ...), int>;

/// The scalar type of an output argument (a forwarding reference).
template <class T>
using ScalarOf = typename OutputOf<T>::Scalar;

/// The compile-time checks of an output argument, a forwarding reference `T&&`: not a const
/// Eigen::Matrix (a const Map, Ref or block still writes into non-const storage, as in Eigen).
template <class T>
struct OutputCheck {
  static constexpr bool ok = !(std::is_const_v<std::remove_reference_t<T>> && kIsResizable<OutputOf<T>>);
  static_assert(ok,
                "EigenAttention: an output must not be a const Eigen::Matrix: pass it non-const (from a "
                "`const Eigen::MatrixBase<D>& out` parameter, Eigen's idiom is "
                "`const_cast<Eigen::MatrixBase<D>&>(out)`)");
};

/// Where an argument's elements lie, for the checks before a front door resizes an output.
struct Extent {
  const char* name;    ///< "Q", "out", ...
  const void* object;  ///< the Eigen object itself (a resized Matrix frees what views saw)
  std::uintptr_t lo;   ///< first byte of its elements, as an address; lo == hi when unknown or empty
  std::uintptr_t hi;   ///< one past the last byte
  bool resizable;      ///< an output that output_view() may resize
};

/// The bytes [lo, hi) that a data pointer with these sizes and strides (in elements) covers. A
/// view whose span does not fit std::ptrdiff_t gets no range (the library rejects it, naming
/// it); only its object is compared then.
template <typename Scalar>
Extent extent_of(const char* name, const void* object, const Scalar* data, std::ptrdiff_t rows,
                 std::ptrdiff_t cols, std::ptrdiff_t row_stride, std::ptrdiff_t col_stride, bool resizable) {
  Extent e{name, object, 0, 0, resizable};
  if (data == nullptr || rows <= 0 || cols <= 0) return e;
  std::ptrdiff_t dr, dc, lo, hi, lo_bytes, hi_bytes;
  const std::ptrdiff_t size = sizeof(Scalar);
  if (!checked_mul(rows - 1, row_stride, dr) || !checked_mul(cols - 1, col_stride, dc) ||
      !checked_add(dr < 0 ? dr : 0, dc < 0 ? dc : 0, lo) ||
      !checked_add(dr > 0 ? dr : 0, dc > 0 ? dc : 0, hi) || !checked_mul(lo, size, lo_bytes) ||
      !checked_add(hi, 1, hi) || !checked_mul(hi, size, hi_bytes)) {
    return e;
  }
  // Addresses as integers: the span may lie outside any object the compiler knows of.
  const auto base = reinterpret_cast<std::uintptr_t>(data);
  e.lo = base + static_cast<std::uintptr_t>(lo_bytes);
  e.hi = base + static_cast<std::uintptr_t>(hi_bytes);
  return e;
}

/// The Extent of an input: the argument `m` and the view the front door took of it.
template <class Derived, typename Scalar>
Extent input_extent(const char* name, const Eigen::MatrixBase<Derived>& m,
                    const ConstStridedMap<Scalar>& view) {
  return extent_of(name, &m.derived(), view.data(), view.rows(), view.cols(), view.outerStride(),
                   view.innerStride(), false);
}

/// The Extent of an output argument as it is now, before any resize.
template <class Out>
Extent output_extent(const char* name, const Out& out) {
  const auto& o = out.derived();
  return extent_of(name, &o, o.data(), o.rows(), o.cols(), o.rowStride(), o.colStride(),
                   kIsResizable<OutputOf<Out>>);
}

/// The Extents of what the masks of a single-head call point to (its one [T_q, T_k] mask and
/// bias, its one key length and ALiBi slope): inputs too, that a resized output must not free.
template <typename Scalar>
std::array<Extent, 5> mask_extents(const Masks<Scalar>& m) {
  return {extent_of("masks.mask", nullptr, m.mask.data, m.mask.rows, m.mask.cols, m.mask.row_stride,
                    m.mask.col_stride, false),
          extent_of("masks.bias", nullptr, m.bias.data, m.bias.rows, m.bias.cols, m.bias.row_stride,
                    m.bias.col_stride, false),
          extent_of("masks.key_lengths", nullptr, m.key_lengths, 1, 1, 1, 1, false),
          extent_of("masks.alibi_slopes", nullptr, m.alibi_slopes, 1, 1, 1, 1, false),
          extent_of("masks.sinks", nullptr, m.sinks, 1, 1, 1, 1, false)};
}

/// Throws std::invalid_argument before anything is resized when an output that may be resized
/// (an Eigen::Matrix) is the same object as, or shares memory with, an input (the matrices, and
/// what `masks` points to) or another output: resizing it would free memory that the other's
/// view still points to.
inline void check_resizable_apart(const char* api, std::initializer_list<Extent> inputs,
                                  std::initializer_list<Extent> outputs,
                                  const std::array<Extent, 5>& masks = {}) {
  const auto apart = [&](const Extent& out, const Extent& other) {
    if (out.object != nullptr && out.object == other.object) {
      throw std::invalid_argument(std::string("EigenAttention::") + api + ": " + out.name +
                                  " is the same matrix as " + other.name +
                                  "; an output must not be an input or another output");
    }
    if (out.lo != out.hi && other.lo != other.hi && out.lo < other.hi && other.lo < out.hi) {
      throw std::invalid_argument(std::string("EigenAttention::") + api + ": " + out.name + " overlaps " +
                                  other.name +
                                  "; an output must not share memory with an input or another output");
    }
  };
  for (const Extent& out : outputs) {
    if (!out.resizable) continue;
    for (const Extent& in : inputs) apart(out, in);
    for (const Extent& in : masks) apart(out, in);
    for (const Extent& other : outputs) {
      if (&other != &out) apart(out, other);
    }
  }
}

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

/// Will output_view() resize `out` to rows x cols? Only then do the front doors validate the
/// inputs and check_resizable_apart() first: a call that throws must resize nothing, and a resize
/// must not free storage an input views. Otherwise the compiled call validates everything once.
template <class Out>
bool will_resize(const Out& out, Eigen::Index rows, Eigen::Index cols) {
  using Derived = OutputOf<Out>;
  if constexpr (kIsResizable<Derived>) {
    constexpr int kRows = Derived::RowsAtCompileTime, kCols = Derived::ColsAtCompileTime;
    const Derived& o = static_cast<const Derived&>(out.derived());
    const bool fits =
        (kRows == Eigen::Dynamic || kRows == rows) && (kCols == Eigen::Dynamic || kCols == cols);
    return fits && (o.rows() != rows || o.cols() != cols);
  } else {
    (void)out, (void)rows, (void)cols;
    return false;
  }
}

/// A writable strided view of an output, which arrives as a forwarding reference so that
/// temporaries such as `M.block(...)` bind and const matrices are rejected (OutputCheck). Like
/// Eigen's own functions, it writes through a const Map, Ref or block (their storage is not
/// const). A resizable output (an Eigen::Matrix) is first resized to rows x cols, which
/// allocates only when its size changes (check_resizable_apart() runs before); any other output
/// must already have that shape (checked later).
template <class Out>
StridedMap<ScalarOf<Out>> output_view(Out&& out, Eigen::Index rows, Eigen::Index cols) {
  using Derived = OutputOf<Out>;
  static_assert(kIsWritable<Derived>,
                "EigenAttention: an output must be writable dense storage with direct access "
                "(an Eigen::Matrix, Map, Ref or a block of one)");
  Derived& o = const_cast<Derived&>(static_cast<const Derived&>(out.derived()));
  if constexpr (kIsResizable<Derived>) {
    if (will_resize(out, rows, cols)) o.resize(rows, cols);
  }
  return StridedMap<typename Derived::Scalar>(
      o.data(), o.rows(), o.cols(),
      Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(o.rowStride(), o.colStride()));
}

}  // namespace detail
}  // namespace EigenAttention
