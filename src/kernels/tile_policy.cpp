// SPDX-License-Identifier: MIT
// The tile policy (tile_policy.hpp): the CPU's cache sizes and the tiles chosen from them.
#include "kernels/tile_policy.hpp"

#include <algorithm>

#include <Eigen/Core>

namespace EigenAttention {
namespace internal {

CacheSizes cache_sizes() {
  static const CacheSizes sizes{static_cast<index_t>(Eigen::l1CacheSize()),
                                static_cast<index_t>(Eigen::l2CacheSize())};
  return sizes;
}

ForwardTiles forward_tiles(const CacheSizes& c, index_t dk, index_t dv, index_t strip_rows, index_t panel,
                           index_t element) {
  const index_t by_l2 = c.l2 / 2 / std::max<index_t>((dk + dv) * element, 1);
  const index_t by_l1 = c.l1 / 2 / std::max<index_t>(strip_rows * element, 1);
  const index_t keys = std::min<index_t>({by_l2, by_l1, kMaxKeyTile}) / panel * panel;
  return {std::max(keys, panel)};
}

bool decode_streams(const CacheSizes& c, index_t rows, index_t dv, index_t element) {
  return rows <= kStreamRows && rows * dv * element <= c.l1 / 4;
}

}  // namespace internal
}  // namespace EigenAttention
