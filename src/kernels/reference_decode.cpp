// SPDX-License-Identifier: MIT
// The reference decode (execute.hpp): each sequence's keys and values of each KV head
// gathered from their pages into plain matrices of the compute type, then the forward's
// reference kernel (reference.cpp, the formula in Eigen expressions) on every query head, with
// the queries at the end of the sequence (bottom-right alignment). Slow and single-threaded:
// the yardstick the decode kernels are tested against, and Kernel::Reference.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <Eigen/Core>

#include "execute.hpp"
#include "kernels/convert.hpp"
#include "kernels/kernels.hpp"
#include "kernels/quantized.hpp"

namespace EigenAttention {
namespace internal {
namespace {

/// Element `at` of pages of the type `storage`, in T (widened by convert.hpp).
template <typename T>
T stored_value(const void* base, ScalarType storage, index_t at) {
  switch (storage) {
    case ScalarType::Float32:
      return static_cast<T>(static_cast<const float*>(base)[at]);
    case ScalarType::Float64:
      return static_cast<T>(static_cast<const double*>(base)[at]);
    case ScalarType::BFloat16:
      return static_cast<T>(to_compute(static_cast<const BFloat16Bits*>(base)[at]));
    case ScalarType::Float16:
      return static_cast<T>(to_compute(static_cast<const HalfBits*>(base)[at]));
    case ScalarType::Int8:
      return static_cast<T>(to_compute(static_cast<const Int8*>(base)[at]));
    case ScalarType::Float8E4M3:
      return static_cast<T>(to_compute(static_cast<const Float8E4M3*>(base)[at]));
    case ScalarType::Float8E5M2:
      return static_cast<T>(to_compute(static_cast<const Float8E5M2*>(base)[at]));
  }
  return T(0);
}

/// Token n of KV head h of a sequence, element c, from its page (of a quantized type: times the
/// token's scale, fl(scale x value) as every decode kernel reads it).
template <typename T>
T cached(const abi::PagedKV& kv, bool values, const PagedSequence& s, index_t h, index_t n, index_t c) {
  const index_t page = s.pages[n / kv.page_size], slot = n % kv.page_size;
  const index_t at = values ? page * kv.v_page_stride + slot * kv.v_token_stride + h * kv.v_head_stride + c
                            : page * kv.k_page_stride + slot * kv.k_token_stride + h * kv.k_head_stride + c;
  const T x = stored_value<T>(values ? kv.v : kv.k, kv.storage, at);
  const float* scales = values ? kv.v_scales : kv.k_scales;
  if (scales == nullptr) return x;
  return static_cast<T>(
      scales[page * kv.scale_page_stride + slot * kv.scale_token_stride + h * kv.scale_head_stride] *
      static_cast<float>(x));
}

}  // namespace

template <typename T>
void reference_decode(const Problem<T>& p) {
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const abi::PagedKV& kv = p.paged->kv;
  const index_t dk = kv.d_k, dv = kv.d_v, group = p.q.heads / kv.kv_heads;
  for (index_t b = 0; b < p.sequences; ++b) {
    const PagedSequence& s = p.paged->sequences[b];
    const index_t q0 = p.cu_q[b], tq = p.cu_q[b + 1] - q0, tk = s.length;
    if (tq == 0) continue;
    for (index_t g = 0; g < kv.kv_heads; ++g) {
      Matrix K(tk, dk), V(tk, dv);
      for (index_t n = 0; n < tk; ++n) {
        for (index_t c = 0; c < dk; ++c) K(n, c) = cached<T>(kv, false, s, g, n, c);
        for (index_t c = 0; c < dv; ++c) V(n, c) = cached<T>(kv, true, s, g, n, c);
      }
      for (index_t h = g * group; h < (g + 1) * group; ++h) {
        // A tree mask (speculative decoding) as the forward's T_q x T_k mask: every earlier key
        // visible, the last T_q keys as the tree says.
        const BroadcastView<bool>& tree = p.paged->tree;
        Eigen::Matrix<bool, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> mask;
        if (!tree.empty()) {
          mask.setConstant(tq, tk, true);
          const bool* t = tree.data + (tree.batch == 1 ? 0 : b * tree.batch_stride) +
                          (tree.heads == 1 ? 0 : h * tree.head_stride);
          for (index_t i = 0; i < tq; ++i)
            for (index_t j = std::max<index_t>(0, tq - tk); j < tq; ++j)  // (T_q > T_k: drafts before key 0)
              mask(i, tk - tq + j) = t[i * tree.row_stride + j * tree.col_stride];
        }
        RawProblem<T> r{};
        r.q = raw_matrix<const T>(p.q.data + q0 * p.q.token_stride + h * p.q.head_stride, tq, dk,
                                  p.q.token_stride, p.q.dim_stride);
        r.k = raw_matrix<const T>(K.data(), tk, dk, dk, 1);
        r.v = raw_matrix<const T>(V.data(), tk, dv, dv, 1);
        r.scale = p.scale;
        r.causal = p.causal;
        r.offset = tk - tq;
        r.window_left = p.window_left;
        r.window_right = p.window_right;
        r.chunk = p.chunk;
        r.softcap = p.softcap;
        r.has_alibi = p.paged->alibi_slopes != nullptr;
        r.alibi_slope = r.has_alibi ? p.paged->alibi_slopes[h] : T(0);
        r.has_sink = p.paged->sinks != nullptr;
        r.sink = r.has_sink ? p.paged->sinks[h] : T(0);
        r.bias = {nullptr, 0, 0, 0, 0};
        r.mask = tree.empty() ? RawMatrix<const bool>{nullptr, 0, 0, 0, 0}
                              : raw_matrix<const bool>(mask.data(), tq, tk, tk, 1);
        r.scores = {nullptr, 0, 0, 0, 0};
        r.attn = dv == 0 ? RawMatrix<T>{p.out.data, tq, 0, 0, 0}
                         : raw_matrix<T>(p.out.data + q0 * p.out.token_stride + h * p.out.head_stride, tq, dv,
                                         p.out.token_stride, p.out.dim_stride);
        r.lse = p.want_lse ? raw_matrix<T>(p.lse.data + q0 * p.lse.token_stride + h * p.lse.head_stride, tq,
                                           1, p.lse.token_stride, p.lse.dim_stride)
                           : RawMatrix<T>{nullptr, 0, 0, 0, 0};
        r.want_scores = false;
        r.want_attn = true;
        r.want_lse = p.want_lse;
        p.program(r, b, h);
        reference_kernel(r);
      }
    }
  }
}

template void reference_decode<float>(const Problem<float>&);
template void reference_decode<double>(const Problem<double>&);

}  // namespace internal
}  // namespace EigenAttention
