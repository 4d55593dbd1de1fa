// SPDX-License-Identifier: MIT
// The one index type of the library's sources and of the eigen-attention tool: index_t, the
// type of Eigen::Index and of the sizes and strides that cross the boundary (std::ptrdiff_t).
// Internal (src/, not installed).
#pragma once

#include <cstddef>

namespace EigenAttention {
namespace internal {

/// Sizes, strides and indices: what Eigen::Index is, without depending on Eigen's configuration.
using index_t = std::ptrdiff_t;

}  // namespace internal

namespace cli {
using internal::index_t;
}  // namespace cli
}  // namespace EigenAttention
