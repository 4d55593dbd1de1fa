// SPDX-License-Identifier: MIT
// The reference kernels' view of the ABI's strided matrices as Eigen maps, and of a 16-bit
// problem as its float problem (plain Eigen, compiled with the library-wide flags:
// reference.cpp and reference_backward.cpp only). Internal.
#pragma once

#include "kernels/convert.hpp"
#include "kernels/kernels.hpp"
#include "kernels/program.hpp"
#include "kernels/sink.hpp"

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

/// Which pairs (i, j) the programmable mask (mask_mod and the block mask; program.hpp) lets
/// query i see: every pair when there is none.
template <typename T>
Eigen::Array<bool, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> programmed_visible(
    const RawProblem<T>& p) {
  Eigen::Array<bool, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> seen =
      Eigen::Array<bool, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>::Constant(p.q.rows, p.k.rows, true);
  for (index_t i = 0; i < p.q.rows; ++i)
    for_each_programmed_hidden(p, i, 0, p.k.rows, [&](index_t j) { seen(i, j) = false; });
  return seen;
}

/// A 16-bit matrix widened to float, row-major and contiguous, as a RawMatrix (`keep` owns it);
/// an absent one (null data: no bias, no d_scores) stays absent.
template <typename T>
RawMatrix<const float> widen_matrix(const RawMatrix<const T>& m, RowMatrix<float>& keep) {
  keep.resize(m.rows, m.cols);
  for (index_t i = 0; i < m.rows; ++i)
    widen(m.data + i * m.row_stride, m.col_stride, m.cols, keep.row(i).data());
  return raw_matrix<const float>(m.data == nullptr ? nullptr : keep.data(), m.rows, m.cols, m.cols, 1);
}

/// The float buffers of a widened problem's inputs.
struct WidenedInputs {
  RowMatrix<float> q, k, v, bias;
};

/// A 16-bit problem's inputs widened exactly to float (into `keep`) with its logit options and
/// masks: the float problem the reference kernels compute, before its outputs are set (none yet).
template <typename T>
RawProblem<float> widened_inputs(const RawProblem<T>& p, WidenedInputs& keep) {
  RawProblem<float> r{widen_matrix(p.q, keep.q),
                      widen_matrix(p.k, keep.k),
                      widen_matrix(p.v, keep.v),
                      p.scale,
                      p.causal,
                      p.offset,
                      p.window_left,
                      p.window_right,
                      p.softcap,
                      p.has_alibi,
                      p.alibi_slope,
                      widen_matrix(p.bias, keep.bias),
                      p.mask,
                      {nullptr, 0, 0, 0, 0},
                      {nullptr, 0, 0, 0, 0},
                      {nullptr, 0, 0, 0, 0},
                      false,
                      false,
                      false,
                      {}};
  r.chunk = p.chunk, r.chunk_origin = p.chunk_origin;
  r.has_sink = p.has_sink, r.sink = p.sink;
  r.score_mod = p.score_mod, r.mask_mod = p.mask_mod, r.blocks = p.blocks;
  r.block_rows = p.block_rows, r.block_cols = p.block_cols, r.col_blocks = p.col_blocks;
  r.batch_index = p.batch_index, r.head_index = p.head_index, r.logit_grad = p.logit_grad;
  return r;
}

}  // namespace internal
}  // namespace EigenAttention
