// SPDX-License-Identifier: MIT
/// \file detail/StrideProduct.hpp
/// The checked stride arithmetic of the contiguous-view factories (HeadsView, BroadcastView).
/// Not part of the documented API.
#pragma once

#ifndef EIGEN_ATTENTION_PUBLIC_HEADER
#error \
    "EigenAttention: <EigenAttention/detail/StrideProduct.hpp> is internal, include <EigenAttention/EigenAttention.hpp> (or another public header) instead"
#endif

#include <cstddef>

#include <initializer_list>
#include <stdexcept>
#include <string>

#include <Eigen/Core>

#include <EigenAttention/detail/CheckedArithmetic.hpp>

namespace EigenAttention {
namespace detail {

/// The product of `factors` (a stride of a contiguous view whose sizes are `sizes`), computed
/// without overflow. \throws std::invalid_argument naming `factory` and `sizes` when it does not
/// fit in std::ptrdiff_t. Negative sizes are left to the call's validation, which names them.
inline std::ptrdiff_t stride_product(const char* factory, std::initializer_list<std::ptrdiff_t> sizes,
                                     std::initializer_list<std::ptrdiff_t> factors) {
  for (std::ptrdiff_t f : factors) {
    if (f == 0) return 0;  // an empty view: no element is ever addressed
  }
  std::ptrdiff_t product = 1;
  for (std::ptrdiff_t f : factors) {
    std::ptrdiff_t next;
    if (!checked_mul(product, f, next)) {
      std::string shape;
      for (std::ptrdiff_t s : sizes) shape += (shape.empty() ? "" : " x ") + std::to_string(s);
      throw std::invalid_argument(std::string("EigenAttention::") + factory + ": a view of " + shape +
                                  " elements has strides that overflow std::ptrdiff_t");
    }
    product = next;
  }
  return product;
}

}  // namespace detail
}  // namespace EigenAttention
