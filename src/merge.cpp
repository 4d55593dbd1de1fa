// SPDX-License-Identifier: MIT
// merge_attention_into (MultiHead.hpp): combine two partial results over disjoint key sets.
#include <EigenAttention/MultiHead.hpp>

#include "check/call.hpp"
#include "lse_merge.hpp"

#include <algorithm>
#include <vector>

#include "index.hpp"
#include "kernels/convert.hpp"
#include "scheduler.hpp"

namespace EigenAttention {
using internal::index_t;
namespace {

// E: the element type of the out views; T: of the log-sum-exps and the arithmetic (float for the
// 16-bit types, whose rows are merged in float and rounded once). Rows (b, h, i) over up to
// opt.threads threads (scheduler.hpp): each row is merged by itself, the same way wherever it falls.
template <typename E, typename T = ComputeScalar<E>>
void merge(HeadsView<const E> out_a, HeadsView<const T> lse_a, HeadsView<const E> out_b,
           HeadsView<const T> lse_b, HeadsView<E> out, HeadsView<T> lse, const Options& opt) {
  internal::check_merge<E>("merge_attention_into", out_a, lse_a, out_b, lse_b, out, lse, opt);
  // Row (b, h, i) of a view. An empty row (d_v = 0) takes no offset: its view's data may be null.
  const auto row = [](const auto& v, index_t b, index_t h, index_t i) {
    return v.dim == 0 ? v.data : v.data + b * v.batch_stride + h * v.head_stride + i * v.token_stride;
  };
  const index_t rows = out_a.batch * out_a.heads * out_a.tokens;
  const double bytes = static_cast<double>(out_a.dim) * 3 * sizeof(E) + 3 * sizeof(T);
  internal::for_row_blocks(rows, opt.threads, bytes, [&](index_t first, index_t count) {
    // The merged row in float before it is rounded: each thread's own, grown once and kept.
    thread_local std::vector<T> merged_storage, sums_storage;
    std::vector<T>& merged = merged_storage;
    std::vector<T>& sums = sums_storage;  // merge_lse_row's row of sums
    if (kIsLowPrecision<E> && static_cast<index_t>(merged.size()) < out_a.dim)
      merged.resize(static_cast<std::size_t>(out_a.dim));
    if (static_cast<index_t>(sums.size()) < out_a.dim) sums.resize(static_cast<std::size_t>(out_a.dim));
    T weights[2];
    for (index_t r = first; r < first + count; ++r) {
      const index_t bh = r / out_a.tokens, i = r % out_a.tokens, b = bh / out_a.heads, h = bh % out_a.heads;
      const T lses[2] = {*row(lse_a, b, h, i), *row(lse_b, b, h, i)};
      const E* parts[2] = {row(out_a, b, h, i), row(out_b, b, h, i)};
      const index_t strides[2] = {out_a.dim_stride, out_b.dim_stride};
      const auto value = [&](index_t p, index_t c) { return internal::to_compute(parts[p][c * strides[p]]); };
      // A side that saw no key takes no part, whatever its out row holds; merging in place is
      // fine (merge_lse_row adds both into its sums before writing out).
      if constexpr (kIsLowPrecision<E>) {
        *row(lse, b, h, i) = internal::merge_lse_row<T>(
            2, [&](index_t p) { return lses[p]; }, value, out_a.dim, merged.data(), 1, weights, sums.data());
        internal::narrow(merged.data(), out_a.dim, row(out, b, h, i), out.dim_stride);
      } else {
        *row(lse, b, h, i) = internal::merge_lse_row<T>(
            2, [&](index_t p) { return lses[p]; }, value, out_a.dim, row(out, b, h, i), out.dim_stride,
            weights, sums.data());
      }
    }
  });
}

}  // namespace

namespace abi {

void merge_attention_into(HeadsView<const float> attn_a, HeadsView<const float> lse_a,
                          HeadsView<const float> attn_b, HeadsView<const float> lse_b, HeadsView<float> attn,
                          HeadsView<float> lse, const Options& opt) {
  merge(attn_a, lse_a, attn_b, lse_b, attn, lse, opt);
}
void merge_attention_into(HeadsView<const double> attn_a, HeadsView<const double> lse_a,
                          HeadsView<const double> attn_b, HeadsView<const double> lse_b,
                          HeadsView<double> attn, HeadsView<double> lse, const Options& opt) {
  merge(attn_a, lse_a, attn_b, lse_b, attn, lse, opt);
}
void merge_attention_into(HeadsView<const BFloat16Bits> attn_a, HeadsView<const float> lse_a,
                          HeadsView<const BFloat16Bits> attn_b, HeadsView<const float> lse_b,
                          HeadsView<BFloat16Bits> attn, HeadsView<float> lse, const Options& opt) {
  merge(attn_a, lse_a, attn_b, lse_b, attn, lse, opt);
}
void merge_attention_into(HeadsView<const HalfBits> attn_a, HeadsView<const float> lse_a,
                          HeadsView<const HalfBits> attn_b, HeadsView<const float> lse_b,
                          HeadsView<HalfBits> attn, HeadsView<float> lse, const Options& opt) {
  merge(attn_a, lse_a, attn_b, lse_b, attn, lse, opt);
}

}  // namespace abi
}  // namespace EigenAttention
