// SPDX-License-Identifier: MIT
/// \file Scalars.hpp
/// The scalar types every call accepts, and the type each computes in: float and double
/// compute in themselves; Eigen::bfloat16 and Eigen::half are storage types, computed in float.
///
/// Across the boundary into the compiled library a bfloat16 or half travels as its 16 bits
/// (BFloat16Bits, HalfBits): no Eigen type crosses it (see Compiled.hpp). ScalarTraits maps
/// each type to its compute type and to that boundary type. This header needs no Eigen: the
/// Eigen types are mapped in Types.hpp.
#pragma once

#include <cstdint>
#include <type_traits>

namespace EigenAttention {

/// A bfloat16 as the compiled library receives it: the 16 bits of an Eigen::bfloat16 (the
/// upper half of a float: 1 sign, 8 exponent and 7 fraction bits).
struct BFloat16Bits {
  std::uint16_t bits;  ///< the bit pattern
};

/// An IEEE half (binary16) as the compiled library receives it: the 16 bits of an Eigen::half
/// (1 sign, 5 exponent and 10 fraction bits).
struct HalfBits {
  std::uint16_t bits;  ///< the bit pattern
};

/// The scalar types of the library, by one name each: NumPy's ("float32", "float64", "float16")
/// and "bfloat16" (scalar_type_name()). Every message, file and tool names them so.
enum class ScalarType : std::int32_t {
  Float32,   ///< float
  Float64,   ///< double
  BFloat16,  ///< Eigen::bfloat16 (BFloat16Bits across the boundary)
  Float16,   ///< Eigen::half, IEEE binary16 (HalfBits across the boundary)
};

/// The name of a scalar type: "float32", "float64", "bfloat16" or "float16" ("unknown" for a value
/// that is no ScalarType).
constexpr const char* scalar_type_name(ScalarType t) {
  switch (t) {
    case ScalarType::Float32:
      return "float32";
    case ScalarType::Float64:
      return "float64";
    case ScalarType::BFloat16:
      return "bfloat16";
    case ScalarType::Float16:
      return "float16";
  }
  return "unknown";
}

/// Bytes of one element of a scalar type (0 for a value that is no ScalarType).
constexpr int scalar_type_bytes(ScalarType t) {
  return t == ScalarType::Float64                                ? 8
         : t == ScalarType::Float32                              ? 4
         : t == ScalarType::BFloat16 || t == ScalarType::Float16 ? 2
                                                                 : 0;
}

/// What a scalar type means to the library: `Compute`, the type of all arithmetic and of the
/// results that are not rounded back (LSE; SCORES on request), and `Abi`, the type that
/// crosses into the compiled library. float and double are both of their own.
template <typename Scalar>
struct ScalarTraits {
  using Compute = Scalar;  ///< arithmetic
  using Abi = Scalar;      ///< across the boundary
  /// its one name
  static constexpr ScalarType type =
      std::is_same_v<Scalar, double> ? ScalarType::Float64 : ScalarType::Float32;
};
/// bfloat16 at the boundary: computed in float.
template <>
struct ScalarTraits<BFloat16Bits> {
  using Compute = float;                                    ///< arithmetic
  using Abi = BFloat16Bits;                                 ///< across the boundary
  static constexpr ScalarType type = ScalarType::BFloat16;  ///< its one name
};
/// half at the boundary: computed in float.
template <>
struct ScalarTraits<HalfBits> {
  using Compute = float;                                   ///< arithmetic
  using Abi = HalfBits;                                    ///< across the boundary
  static constexpr ScalarType type = ScalarType::Float16;  ///< its one name
};

/// The type a call on `Scalar` inputs computes in (float for bfloat16 and half).
template <typename Scalar>
using ComputeScalar = typename ScalarTraits<std::remove_const_t<Scalar>>::Compute;

/// The type that carries `Scalar` into the compiled library (const kept).
template <typename Scalar>
using AbiScalar =
    std::conditional_t<std::is_const_v<Scalar>, const typename ScalarTraits<std::remove_const_t<Scalar>>::Abi,
                       typename ScalarTraits<std::remove_const_t<Scalar>>::Abi>;

/// The ScalarType of `Scalar` (const ignored).
template <typename Scalar>
inline constexpr ScalarType kScalarType = ScalarTraits<std::remove_const_t<Scalar>>::type;

/// Is `Scalar` a 16-bit storage type (computed in float)?
template <typename Scalar>
inline constexpr bool kIsLowPrecision = !std::is_same_v<ComputeScalar<Scalar>, std::remove_const_t<Scalar>>;

}  // namespace EigenAttention
