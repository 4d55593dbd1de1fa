// SPDX-License-Identifier: MIT
// The CPU's cache sizes, for the tile policy (tile_policy.hpp).
#include "kernels/tile_policy.hpp"

#include <Eigen/Core>

namespace EigenAttention {
namespace internal {

CacheSizes cache_sizes() {
  static const CacheSizes sizes{static_cast<index_t>(Eigen::l1CacheSize()),
                                static_cast<index_t>(Eigen::l2CacheSize())};
  return sizes;
}

}  // namespace internal
}  // namespace EigenAttention
