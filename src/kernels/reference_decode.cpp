// SPDX-License-Identifier: MIT
// The reference decode (decode_problem.hpp): each sequence's keys and values of each KV head
// gathered from their pages into plain matrices of the compute type, then the forward's
// reference kernel (reference.cpp, the formula in Eigen expressions) on every query head, with
// the queries at the end of the sequence (bottom-right alignment). Slow and single-threaded:
// the yardstick the decode kernels are tested against, and Kernel::Reference.
#include <cstdint>
#include <type_traits>

#include <Eigen/Core>

#include "decode_problem.hpp"
#include "kernels/kernels.hpp"

namespace EigenAttention {
namespace internal {
namespace {

template <typename T>
T stored_value(const void* base, KVStorage storage, index_t at) {
  switch (storage) {
    case KVStorage::Float32:
      return static_cast<T>(static_cast<const float*>(base)[at]);
    case KVStorage::Float64:
      return static_cast<T>(static_cast<const double*>(base)[at]);
    case KVStorage::BFloat16: {
      const auto x = Eigen::numext::bit_cast<Eigen::bfloat16>(static_cast<const std::uint16_t*>(base)[at]);
      return static_cast<T>(static_cast<float>(x));
    }
    case KVStorage::Float16: {
      const auto x = Eigen::numext::bit_cast<Eigen::half>(static_cast<const std::uint16_t*>(base)[at]);
      return static_cast<T>(static_cast<float>(x));
    }
  }
  return T(0);
}

/// Token n of KV head h of a sequence, element c, from its page.
template <typename T>
T cached(const compiled::RawPagedKV& kv, bool values, const PagedSequence& s, index_t h, index_t n,
         index_t c) {
  const index_t page = s.pages[n / kv.page_size], slot = n % kv.page_size;
  const index_t at = values ? page * kv.v_page_stride + slot * kv.v_token_stride + h * kv.v_head_stride + c
                            : page * kv.k_page_stride + slot * kv.k_token_stride + h * kv.k_head_stride + c;
  return stored_value<T>(values ? kv.v : kv.k, kv.storage, at);
}

}  // namespace

template <typename T>
void reference_decode(const DecodeProblem<T>& p) {
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const index_t dk = p.kv.d_k, dv = p.kv.d_v;
  for (index_t b = 0; b < p.batch; ++b) {
    const PagedSequence& s = p.sequences[b];
    const index_t q0 = p.cu_q[b], tq = p.cu_q[b + 1] - q0, tk = s.length;
    if (tq == 0) continue;
    for (index_t g = 0; g < p.kv.kv_heads; ++g) {
      Matrix K(tk, dk), V(tk, dv);
      for (index_t n = 0; n < tk; ++n) {
        for (index_t c = 0; c < dk; ++c) K(n, c) = cached<T>(p.kv, false, s, g, n, c);
        for (index_t c = 0; c < dv; ++c) V(n, c) = cached<T>(p.kv, true, s, g, n, c);
      }
      for (index_t h = g * p.group; h < (g + 1) * p.group; ++h) {
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
        r.softcap = p.softcap;
        r.has_alibi = p.alibi_slopes != nullptr;
        r.alibi_slope = r.has_alibi ? p.alibi_slopes[h] : T(0);
        r.bias = {nullptr, 0, 0, 0, 0};
        r.mask = {nullptr, 0, 0, 0, 0};
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
        reference_kernel(r);
      }
    }
  }
}

template void reference_decode<float>(const DecodeProblem<float>&);
template void reference_decode<double>(const DecodeProblem<double>&);

}  // namespace internal
}  // namespace EigenAttention
