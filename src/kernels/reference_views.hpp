// SPDX-License-Identifier: MIT
// The reference kernels' view of the ABI's strided matrices as Eigen maps (plain Eigen, compiled
// with the library-wide flags: reference.cpp and reference_backward.cpp only). Internal.
#pragma once

#include "kernels/kernels.hpp"

namespace EigenAttention {
namespace internal {

template <typename T>
using StridedConst =
    Eigen::Map<const RowMatrix<T>, Eigen::Unaligned, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>>;

template <typename T>
StridedConst<T> view(const RawMatrix<const T>& m) {
  return StridedConst<T>(m.data, m.rows, m.cols,
                         Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(m.row_stride, m.col_stride));
}

template <typename T>
StridedMap<T> view(const RawMatrix<T>& m) {
  return StridedMap<T>(m.data, m.rows, m.cols,
                       Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(m.row_stride, m.col_stride));
}

}  // namespace internal
}  // namespace EigenAttention
