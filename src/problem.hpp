// One single-head attention problem after validation: the inputs as strided views and the
// resolved options. Internal to the library.
#pragma once

#include <algorithm>

#include <EigenAttention/Types.hpp>

#include "kernel_abi.hpp"

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
  Index offset;          // 0, or T_k - T_q for bottom-right alignment
  Index window_left, window_right;  // -1: unbounded
  T softcap;                        // 0: off

  Index tq() const { return q.rows(); }
  Index tk() const { return k.rows(); }
  Index dk() const { return q.cols(); }
  Index dv() const { return v.cols(); }
};

template <class Map>
RawMatrix<typename Map::Scalar> raw_of(Map* m) {
  if (m == nullptr) return {nullptr, 0, 0, 0, 0};
  return raw_matrix(m->data(), m->rows(), m->cols(), m->outerStride(), m->innerStride());
}

template <typename T>
RawMatrix<const T> raw_input(const ConstStridedMap<T>& m) {
  return raw_matrix(m.data(), m.rows(), m.cols(), m.outerStride(), m.innerStride());
}

/// The kernel's view of p, writing to the outputs that are not null.
template <typename T>
RawProblem<T> to_raw(const Problem<T>& p, StridedMap<T>* scores, StridedMap<T>* attn, StridedMap<T>* lse) {
  return RawProblem<T>{raw_input(p.q), raw_input(p.k), raw_input(p.v), p.scale, p.causal, p.offset,
                       p.window_left, p.window_right, p.softcap, false, T(0),
                       RawMatrix<const T>{nullptr, 0, 0, 0, 0}, RawMatrix<const bool>{nullptr, 0, 0, 0, 0},
                       raw_of(scores), raw_of(attn), raw_of(lse),
                       scores != nullptr, attn != nullptr, lse != nullptr};
}

}  // namespace internal
}  // namespace EigenAttention
