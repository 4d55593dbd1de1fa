// SPDX-License-Identifier: MIT
// A validated decode problem on 16-bit queries (BFloat16Bits, HalfBits) as the same problem on
// float copies of them (T_q rows: small; the decode kernel widens the cache's pages itself), and
// the rounding of float results into 16-bit views (decode's attention, the backward pass's
// gradients), row by row on the scheduler. The forward and backward passes widen tile by tile in
// their kernels: no array is copied whole for them. Internal to the library.
#pragma once

#include <cstddef>
#include <vector>

#include "kernels/convert.hpp"
#include "problem.hpp"
#include "scheduler.hpp"

namespace EigenAttention {
namespace internal {

/// A [batch, heads, tokens, dim] float buffer holding a view's elements, widened.
class WideArray {
 public:
  template <typename T>
  explicit WideArray(const HeadsView<const T>& v)
      : data_(static_cast<std::size_t>(v.batch * v.heads * v.tokens * v.dim)),
        view_{data_.data(),     v.batch, v.heads, v.tokens, v.dim, v.heads * v.tokens * v.dim,
              v.tokens * v.dim, v.dim,   1} {
    if (v.data == nullptr) {
      view_.data = nullptr;
      return;
    }
    for (index_t b = 0; b < v.batch; ++b)
      for (index_t h = 0; h < v.heads; ++h)
        for (index_t t = 0; t < v.tokens; ++t)
          widen(v.data + b * v.batch_stride + h * v.head_stride + t * v.token_stride, v.dim_stride, v.dim,
                data_.data() + ((b * v.heads + h) * v.tokens + t) * v.dim);
  }
  /// An output's buffer (zeros).
  template <typename T>
  explicit WideArray(const HeadsView<T>& v, bool)
      : data_(static_cast<std::size_t>(v.batch * v.heads * v.tokens * v.dim)),
        view_{data_.data(),     v.batch, v.heads, v.tokens, v.dim, v.heads * v.tokens * v.dim,
              v.tokens * v.dim, v.dim,   1} {
    if (v.data == nullptr) view_.data = nullptr;
  }
  const HeadsView<float>& view() const { return view_; }
  HeadsView<const float> input() const {
    return {view_.data,         view_.batch,       view_.heads,        view_.tokens,    view_.dim,
            view_.batch_stride, view_.head_stride, view_.token_stride, view_.dim_stride};
  }

 private:
  std::vector<float> data_;
  HeadsView<float> view_;
};

/// Rounds tokens [first, first + count) of every (batch, head) of the float view `src` into `out`
/// (of the same shape), row by row over up to `threads` threads (scheduler.hpp).
template <typename T>
void narrow_into(const HeadsView<float>& src, const HeadsView<T>& out, index_t first, index_t count,
                 int threads) {
  if (out.dim == 0) return;  // an empty view's data may be null: no offsets from it
  const index_t rows = out.batch * out.heads * count;
  const double bytes = static_cast<double>(out.dim) * (sizeof(float) + sizeof(T));
  for_row_blocks(rows, threads, bytes, [&](index_t begin, index_t n) {
    for (index_t r = begin; r < begin + n; ++r) {
      const index_t bh = r / count, t = first + r % count, b = bh / out.heads, h = bh % out.heads;
      narrow(src.data + b * src.batch_stride + h * src.head_stride + t * src.token_stride, out.dim,
             out.data + b * out.batch_stride + h * out.head_stride + t * out.token_stride, out.dim_stride);
    }
  });
}

/// The float problem of a 16-bit forward problem p (decode's), on widened copies that `keep` owns.
template <typename T>
Problem<float> widened(const Problem<T>& p, std::vector<WideArray>& keep) {
  keep.reserve(16);  // views into keep's arrays must not move
  const auto in = [&](const HeadsView<const T>& v) {
    keep.emplace_back(v);
    return keep.back().input();
  };
  Problem<float> f;
  f.q = in(p.q), f.k = in(p.k), f.v = in(p.v);
  f.masks.mask = p.masks.mask;
  f.masks.key_lengths = p.masks.key_lengths;
  f.masks.score_mod = p.masks.score_mod;  // (float on both sides)
  f.masks.mask_mod = p.masks.mask_mod;
  f.masks.block_mask = p.masks.block_mask;
  if (!p.masks.bias.empty()) {
    const BroadcastView<T>& b = p.masks.bias;
    const HeadsView<const float> wide = in(HeadsView<const T>{
        b.data, b.batch, b.heads, b.rows, b.cols, b.batch_stride, b.head_stride, b.row_stride, b.col_stride});
    f.masks.bias = {wide.data,         wide.batch,       wide.heads,        wide.tokens,    wide.dim,
                    wide.batch_stride, wide.head_stride, wide.token_stride, wide.dim_stride};
  }
  if (p.masks.alibi_slopes != nullptr) {
    const HeadsView<const float> slopes =
        in(HeadsView<const T>{p.masks.alibi_slopes, 1, 1, 1, p.q.heads, 0, 0, 0, 1});
    f.masks.alibi_slopes = slopes.data;
  }
  f.scale = p.scale, f.causal = p.causal, f.bottom_right = p.bottom_right;
  f.fixed_offset = p.fixed_offset, f.offset = p.offset;
  f.window_left = p.window_left, f.window_right = p.window_right, f.softcap = p.softcap;
  f.chunk = p.chunk, f.chunk_origin = p.chunk_origin;
  f.kernel = p.kernel;
  f.cu_q = p.cu_q, f.cu_k = p.cu_k, f.sequences = p.sequences;
  return f;
}

}  // namespace internal
}  // namespace EigenAttention
