// SPDX-License-Identifier: MIT
/// \file HeadsView.hpp
/// Zero-copy views of batched multi-head tensors: [batch, heads, tokens, dim] in any strides.
#pragma once

// Lets the detail/ headers in (each refuses to be included on its own); never undefined, so
// that any public header may include them, in any order.
#ifndef EIGEN_ATTENTION_PUBLIC_HEADER
#define EIGEN_ATTENTION_PUBLIC_HEADER
#endif

#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <Eigen/Core>

#include <EigenAttention/Types.hpp>
#include <EigenAttention/detail/StrideProduct.hpp>

namespace EigenAttention {

/// How the four axes of a contiguous multi-head buffer are ordered.
enum class Layout {
  BHTD,  ///< [batch, heads, tokens, dim]: PyTorch's scaled_dot_product_attention
  BTHD   ///< [batch, tokens, heads, dim]: FlashAttention's, and a transformer's activations
};

/// A read-only or writable view (Scalar may be const) of batch x heads matrices of
/// tokens x dim each: element (b, h, t, c) is at
/// `data[b * batch_stride + h * head_stride + t * token_stride + c * dim_stride]`.
/// Nothing is copied; the caller's buffer must outlive the call. A default-constructed view
/// (data null, all sizes 0) means "not wanted" where an output is optional.
///
/// \code
/// std::vector<float> q(B * H * T * D);                      // PyTorch layout
/// auto Q = EigenAttention::HeadsView<const float>::bhtd(q.data(), B, H, T, D);
/// std::vector<float> o(B * T * H * D);                      // FlashAttention layout
/// auto O = EigenAttention::HeadsView<float>::bthd(o.data(), B, T, H, D);
/// \endcode
template <typename Scalar>
struct HeadsView {
  /// Element (0, 0, 0, 0). Null (the default) makes the view empty(): "not wanted".
  Scalar* data = nullptr;
  ///@{
  /// Sizes of the four axes: batch (sequences, B), heads (H, or H_kv for K and V), tokens
  /// (T_q or T_k) and dim (d_k or d_v). Default: 0 each.
  std::ptrdiff_t batch = 0, heads = 0, tokens = 0, dim = 0;
  ///@}
  ///@{
  /// Strides: the distance between neighbours along each axis, in elements (not bytes); any
  /// sign. 0 repeats one element along that axis, which suits inputs only. Default: 0, except
  /// dim_stride = 1.
  std::ptrdiff_t batch_stride = 0, head_stride = 0, token_stride = 0, dim_stride = 1;
  ///@}

  /// A contiguous [batch, heads, tokens, dim] buffer.
  /// \throws std::invalid_argument when a stride overflows std::ptrdiff_t.
  static HeadsView bhtd(Scalar* data, std::ptrdiff_t batch, std::ptrdiff_t heads, std::ptrdiff_t tokens,
                        std::ptrdiff_t dim) {
    const auto sizes = {batch, heads, tokens, dim};
    return {data,
            batch,
            heads,
            tokens,
            dim,
            detail::stride_product("HeadsView::bhtd", sizes, {heads, tokens, dim}),
            detail::stride_product("HeadsView::bhtd", sizes, {tokens, dim}),
            dim,
            1};
  }
  /// A contiguous [batch, tokens, heads, dim] buffer (note the order of the size arguments).
  /// \throws std::invalid_argument when a stride overflows std::ptrdiff_t.
  static HeadsView bthd(Scalar* data, std::ptrdiff_t batch, std::ptrdiff_t tokens, std::ptrdiff_t heads,
                        std::ptrdiff_t dim) {
    const auto sizes = {batch, tokens, heads, dim};
    return {data,  batch,
            heads, tokens,
            dim,   detail::stride_product("HeadsView::bthd", sizes, {tokens, heads, dim}),
            dim,   detail::stride_product("HeadsView::bthd", sizes, {heads, dim}),
            1};
  }
  /// A contiguous buffer in either layout, sizes given as (batch, heads, tokens, dim).
  static HeadsView contiguous(Scalar* data, Layout layout, std::ptrdiff_t batch, std::ptrdiff_t heads,
                              std::ptrdiff_t tokens, std::ptrdiff_t dim) {
    return layout == Layout::BHTD ? bhtd(data, batch, heads, tokens, dim)
                                  : bthd(data, batch, tokens, heads, dim);
  }
  /// One matrix (a Matrix, Map, Ref or block with direct access, e.g. `M.topRows(2)`) as
  /// batch = heads = 1. A HeadsView of non-const Scalar needs a writable matrix.
  template <class Derived>
  static HeadsView single(Derived&& m) {
    return {m.data(),
            1,
            1,
            static_cast<std::ptrdiff_t>(m.rows()),
            static_cast<std::ptrdiff_t>(m.cols()),
            0,
            0,
            static_cast<std::ptrdiff_t>(m.rowStride()),
            static_cast<std::ptrdiff_t>(m.colStride())};
  }
  /// A matrix whose rows are tokens and whose columns hold heads of `dim` elements side by side
  /// (head h in columns h dim .. (h + 1) dim - 1: a transformer's T x (H d) activations, FlashAttention's
  /// [1, T, H, d]) as the view [1, H, T, d] of the same elements. Any Matrix, Map, Ref or block
  /// with direct access; a HeadsView of non-const Scalar needs a writable matrix.
  /// \throws std::invalid_argument unless dim >= 1 divides its column count.
  /// \code
  /// // Q: T_q x (H * d_k), one row per token
  /// auto q = EigenAttention::HeadsView<const float>::side_by_side(Q, d_k);  // [1, H, T_q, d_k]
  /// \endcode
  template <class Derived>
  static HeadsView side_by_side(Derived&& matrix, std::ptrdiff_t dim) {
    auto&& m = matrix.derived();
    const auto cols = static_cast<std::ptrdiff_t>(m.cols());
    if (dim < 1 || cols % dim != 0) {
      throw std::invalid_argument("EigenAttention::HeadsView::side_by_side: " + std::to_string(cols) +
                                  " columns are not heads of " + std::to_string(dim) +
                                  " elements side by side");
    }
    const auto col_stride = static_cast<std::ptrdiff_t>(m.colStride());
    return {m.data(),  1, cols / dim,       static_cast<std::ptrdiff_t>(m.rows()),
            dim,       0, dim * col_stride, static_cast<std::ptrdiff_t>(m.rowStride()),
            col_stride};
  }
  /// A rank-4 Eigen::Tensor or TensorMap whose four dimensions are in `layout`'s order.
  /// (Eigen's tensors are column-major unless declared RowMajor; both are handled.)
  template <class Tensor>
  static HeadsView from_tensor(Tensor& t, Layout layout) {
    std::ptrdiff_t size[4], stride[4];
    for (int axis = 0; axis < 4; ++axis) size[axis] = static_cast<std::ptrdiff_t>(t.dimension(axis));
    const auto sizes = {size[0], size[1], size[2], size[3]};
    std::ptrdiff_t step = 1;
    const bool row_major = int(Tensor::Layout) == int(Eigen::RowMajor);
    for (int k = 0; k < 4; ++k) {
      const int axis = row_major ? 3 - k : k;
      stride[axis] = step;
      if (k < 3) step = detail::stride_product("HeadsView::from_tensor", sizes, {step, size[axis]});
    }
    if (layout == Layout::BHTD) {
      return {t.data(), size[0], size[1], size[2], size[3], stride[0], stride[1], stride[2], stride[3]};
    }
    return {t.data(), size[0], size[2], size[1], size[3], stride[0], stride[2], stride[1], stride[3]};
  }

  /// The same view, read-only.
  operator HeadsView<const Scalar>() const {
    return {data, batch, heads, tokens, dim, batch_stride, head_stride, token_stride, dim_stride};
  }
  /// Is this the empty "not wanted" view?
  bool empty() const { return data == nullptr; }

  ///@{
  /// A slice along one axis: the same elements and strides, `count` of them along the axis from
  /// index `first` (batch entries, heads or tokens [first, first + count)). Not bounds-checked:
  /// needs 0 <= first and first + count <= the axis's size. A slice with no element (count 0, or
  /// another axis of size 0) takes no offset, so that a view whose data is null stays valid.
  /// \code
  /// auto rows = O.token_slice(16, 8);           // tokens 16 ... 23 of every sequence and head
  /// auto group = K.batch_slice(b, 1).head_slice(kv, 1);
  /// \endcode
  HeadsView batch_slice(std::ptrdiff_t first, std::ptrdiff_t count) const {
    return slice(first * batch_stride, count, heads, tokens, dim, &HeadsView::batch);
  }
  HeadsView head_slice(std::ptrdiff_t first, std::ptrdiff_t count) const {
    return slice(first * head_stride, count, batch, tokens, dim, &HeadsView::heads);
  }
  HeadsView token_slice(std::ptrdiff_t first, std::ptrdiff_t count) const {
    return slice(first * token_stride, count, batch, heads, dim, &HeadsView::tokens);
  }
  ///@}
  /// The matrix type head() maps: a row-major tokens x dim matrix of Scalar, const when Scalar is.
  using HeadMatrix = std::conditional_t<std::is_const_v<Scalar>, const RowMatrix<std::remove_const_t<Scalar>>,
                                        RowMatrix<Scalar>>;
  /// Head h of sequence b as an Eigen matrix view (tokens x dim) over the same elements,
  /// strides included. Not bounds-checked: needs 0 <= b < batch and 0 <= h < heads.
  Eigen::Map<HeadMatrix, Eigen::Unaligned, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>> head(
      std::ptrdiff_t b, std::ptrdiff_t h) const {
    return {data + b * batch_stride + h * head_stride, static_cast<Eigen::Index>(tokens),
            static_cast<Eigen::Index>(dim),
            Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(static_cast<Eigen::Index>(token_stride),
                                                          static_cast<Eigen::Index>(dim_stride))};
  }

 private:
  /// This view with the axis `size` set to `count` and data moved by `offset` elements, unless
  /// the slice holds no element (count or one of the other sizes a, b, c is 0).
  HeadsView slice(std::ptrdiff_t offset, std::ptrdiff_t count, std::ptrdiff_t a, std::ptrdiff_t b,
                  std::ptrdiff_t c, std::ptrdiff_t HeadsView::*size) const {
    HeadsView v = *this;
    if (count > 0 && a > 0 && b > 0 && c > 0) v.data += offset;
    v.*size = count;
    return v;
  }
};

}  // namespace EigenAttention
