// One attention problem after validation: the inputs as strided views, the resolved scale and
// the causal frontier. Internal to the library.
#pragma once

#include <algorithm>

#include <EigenAttention/Types.hpp>

namespace EigenAttention {
namespace internal {

using Eigen::Index;

template <typename T>
struct Problem {
  ConstStridedMap<T> q;  // T_q x d_k
  ConstStridedMap<T> k;  // T_k x d_k
  ConstStridedMap<T> v;  // T_k x d_v (0 x 0 when the call needs no V)
  T scale;               // finite, > 0
  bool causal;
  Index offset;          // key j is visible to query i iff !causal or j <= i + offset

  Index tq() const { return q.rows(); }
  Index tk() const { return k.rows(); }
  Index dk() const { return q.cols(); }
  Index dv() const { return v.cols(); }

  /// Query row i sees exactly the keys [0, visible(i)). Non-decreasing in i.
  Index visible(Index i) const {
    if (!causal) return tk();
    return std::clamp<Index>(i + offset + 1, 0, tk());
  }
};

}  // namespace internal
}  // namespace EigenAttention
