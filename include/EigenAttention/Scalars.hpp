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

/// A quantized KV-cache element (PagedKVCache, PagedKVView; docs/decode.md): a signed 8-bit
/// integer q standing for scale x q, with one float scale per token and KV head (symmetric:
/// scale = max |x| / 127 over the token's head, q = x / scale rounded to nearest even).
struct Int8 {
  std::int8_t bits;  ///< q, in [-127, 127]
};
/// A quantized KV-cache element: an OCP FP8 E4M3 number ("e4m3fn": 4 exponent bits, bias 7, 3
/// fraction bits, no infinity, S.1111.111 is NaN, largest 448) standing for scale x its value,
/// with one float scale per token and KV head (scale = max |x| / 448).
struct Float8E4M3 {
  std::uint8_t bits;  ///< the bit pattern
};
/// A quantized KV-cache element: an OCP FP8 E5M2 number (5 exponent bits, bias 15, 2 fraction
/// bits: the top byte of an IEEE half, largest finite 57344) standing for scale x its value, with
/// one float scale per token and KV head (scale = max |x| / 57344).
struct Float8E5M2 {
  std::uint8_t bits;  ///< the bit pattern
};

/// The scalar types of the library, by one name each: NumPy's ("float32", "float64", "float16"),
/// "bfloat16", and for the quantized KV-cache storage types "int8" and ml_dtypes' (and PyTorch's)
/// "float8_e4m3fn" and "float8_e5m2" (scalar_type_name()). Every message, file and tool names them
/// so.
enum class ScalarType : std::int32_t {
  Float32,     ///< float
  Float64,     ///< double
  BFloat16,    ///< Eigen::bfloat16 (BFloat16Bits across the boundary)
  Float16,     ///< Eigen::half, IEEE binary16 (HalfBits across the boundary)
  Int8,        ///< Int8: KV-cache storage only, with a float scale per token and head
  Float8E4M3,  ///< Float8E4M3: KV-cache storage only, with a float scale per token and head
  Float8E5M2,  ///< Float8E5M2: KV-cache storage only, with a float scale per token and head
};

/// The name of a scalar type: "float32", "float64", "bfloat16", "float16", "int8", "float8_e4m3fn"
/// or "float8_e5m2" ("unknown" for a value that is no ScalarType).
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
    case ScalarType::Int8:
      return "int8";
    case ScalarType::Float8E4M3:
      return "float8_e4m3fn";
    case ScalarType::Float8E5M2:
      return "float8_e5m2";
  }
  return "unknown";
}

/// Bytes of one element of a scalar type (0 for a value that is no ScalarType).
constexpr int scalar_type_bytes(ScalarType t) {
  return t == ScalarType::Float64                                                              ? 8
         : t == ScalarType::Float32                                                            ? 4
         : t == ScalarType::BFloat16 || t == ScalarType::Float16                               ? 2
         : t == ScalarType::Int8 || t == ScalarType::Float8E4M3 || t == ScalarType::Float8E5M2 ? 1
                                                                                               : 0;
}

/// Is `t` a quantized storage type (Int8, Float8E4M3, Float8E5M2: a float scale per token and
/// KV head beside the elements)?
constexpr bool scalar_type_quantized(ScalarType t) {
  return t == ScalarType::Int8 || t == ScalarType::Float8E4M3 || t == ScalarType::Float8E5M2;
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
/// The traits of a storage type computed in float: `Abi`, what carries it across the boundary,
/// and `kType`, its one name (the base of the ScalarTraits of the 16-bit and 8-bit types).
template <typename AbiType, ScalarType kType>
struct ComputedInFloat {
  using Compute = float;                     ///< arithmetic
  using Abi = AbiType;                       ///< across the boundary
  static constexpr ScalarType type = kType;  ///< its one name
};
/// bfloat16 at the boundary: computed in float.
template <>
struct ScalarTraits<BFloat16Bits> : ComputedInFloat<BFloat16Bits, ScalarType::BFloat16> {};
/// half at the boundary: computed in float.
template <>
struct ScalarTraits<HalfBits> : ComputedInFloat<HalfBits, ScalarType::Float16> {};
/// The quantized KV-cache storage types: decoded in float.
template <>
struct ScalarTraits<Int8> : ComputedInFloat<Int8, ScalarType::Int8> {};
/// A quantized KV-cache storage type (FP8 E4M3): decoded in float.
template <>
struct ScalarTraits<Float8E4M3> : ComputedInFloat<Float8E4M3, ScalarType::Float8E4M3> {};
/// A quantized KV-cache storage type (FP8 E5M2): decoded in float.
template <>
struct ScalarTraits<Float8E5M2> : ComputedInFloat<Float8E5M2, ScalarType::Float8E5M2> {};

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

/// Is `Scalar` a quantized KV-cache storage type (Int8, Float8E4M3, Float8E5M2)?
template <typename Scalar>
inline constexpr bool kIsQuantized = scalar_type_quantized(kScalarType<Scalar>);

/// Is `Scalar` a 16-bit storage type (computed in float)?
template <typename Scalar>
inline constexpr bool kIsLowPrecision =
    !std::is_same_v<ComputeScalar<Scalar>, std::remove_const_t<Scalar>> && !kIsQuantized<Scalar>;

}  // namespace EigenAttention
