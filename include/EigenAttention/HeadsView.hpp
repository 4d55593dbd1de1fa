/// \file HeadsView.hpp
/// Zero-copy views of batched multi-head tensors: [batch, heads, tokens, dim] in any strides.
#pragma once

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
  Scalar* data = nullptr;
  Eigen::Index batch = 0, heads = 0, tokens = 0, dim = 0;
  Eigen::Index batch_stride = 0, head_stride = 0, token_stride = 0, dim_stride = 1;

  /// A contiguous [batch, heads, tokens, dim] buffer.
  /// \throws std::invalid_argument when a stride overflows Eigen::Index.
  static HeadsView bhtd(Scalar* data, Eigen::Index batch, Eigen::Index heads, Eigen::Index tokens,
                        Eigen::Index dim) {
    const auto sizes = {batch, heads, tokens, dim};
    return {data, batch, heads, tokens, dim, detail::stride_product("HeadsView::bhtd", sizes, {heads, tokens, dim}),
            detail::stride_product("HeadsView::bhtd", sizes, {tokens, dim}), dim, 1};
  }
  /// A contiguous [batch, tokens, heads, dim] buffer (note the order of the size arguments).
  /// \throws std::invalid_argument when a stride overflows Eigen::Index.
  static HeadsView bthd(Scalar* data, Eigen::Index batch, Eigen::Index tokens, Eigen::Index heads,
                        Eigen::Index dim) {
    const auto sizes = {batch, tokens, heads, dim};
    return {data, batch, heads, tokens, dim, detail::stride_product("HeadsView::bthd", sizes, {tokens, heads, dim}),
            dim, detail::stride_product("HeadsView::bthd", sizes, {heads, dim}), 1};
  }
  /// A contiguous buffer in either layout, sizes given as (batch, heads, tokens, dim).
  static HeadsView contiguous(Scalar* data, Layout layout, Eigen::Index batch, Eigen::Index heads,
                              Eigen::Index tokens, Eigen::Index dim) {
    return layout == Layout::BHTD ? bhtd(data, batch, heads, tokens, dim) : bthd(data, batch, tokens, heads, dim);
  }
  /// One matrix (a Matrix, Map, Ref or block with direct access) as batch = heads = 1.
  template <class Derived>
  static HeadsView single(Derived& m) {
    return {m.data(), 1, 1, m.rows(), m.cols(), 0, 0, m.rowStride(), m.colStride()};
  }
  /// A rank-4 Eigen::Tensor or TensorMap whose four dimensions are in `layout`'s order.
  /// (Eigen's tensors are column-major unless declared RowMajor; both are handled.)
  template <class Tensor>
  static HeadsView from_tensor(Tensor& t, Layout layout) {
    Eigen::Index size[4], stride[4];
    for (int axis = 0; axis < 4; ++axis) size[axis] = t.dimension(axis);
    const auto sizes = {size[0], size[1], size[2], size[3]};
    Eigen::Index step = 1;
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
  /// Head h of sequence b as an Eigen matrix view (tokens x dim).
  using HeadMatrix = std::conditional_t<std::is_const_v<Scalar>, const RowMatrix<std::remove_const_t<Scalar>>,
                                        RowMatrix<Scalar>>;
  Eigen::Map<HeadMatrix, Eigen::Unaligned, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>> head(Eigen::Index b,
                                                                                              Eigen::Index h) const {
    return {data + b * batch_stride + h * head_stride, tokens, dim,
            Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(token_stride, dim_stride)};
  }
};

}  // namespace EigenAttention
