// SPDX-License-Identifier: MIT
// The batched multi-head entry points (MultiHead.hpp): one Call each, validated once by
// make_problem and run by execute(), as the single-head calls are.
#include <EigenAttention/MultiHead.hpp>

#include <vector>

#include "execute.hpp"
#include "kernels/convert.hpp"
#include "validate.hpp"

namespace EigenAttention {
namespace {

using internal::index_t;

// Element (b, h, i, j) of a 4-D view.
template <typename T>
T& at(const HeadsView<T>& v, index_t b, index_t h, index_t i, index_t j) {
  return v.data[b * v.batch_stride + h * v.head_stride + i * v.token_stride + j * v.dim_stride];
}

// The call every multi-head entry point makes: outputs are wanted when given (not empty).
// T is the views' element type (float, double, BFloat16Bits, HalfBits); the log-sum-exps are of
// its compute type (C).
template <typename T, typename C = ComputeScalar<T>>
internal::Call<T> call_of(const char* api, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                          HeadsView<T> out, HeadsView<C> lse, const Masks<T>& masks) {
  internal::Call<T> c;
  c.api = api;
  c.q = q;
  c.k = k;
  c.v = v;
  c.out = out;
  c.want_out = !out.empty();
  c.lse = lse;
  c.want_lse = !lse.empty();
  c.masks = masks;
  return c;
}

template <typename T, typename C = ComputeScalar<T>>
void heads(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, HeadsView<T> out,
           const Options& opt, const Masks<T>& masks, HeadsView<C> lse) {
  internal::Call<T> c = call_of("attention_heads_into", q, k, v, out, lse, masks);
  c.want_out = true;  // required: an empty view is reported by its shape
  internal::execute(internal::make_problem(c, opt), opt.threads);
}

template <typename T, typename C = ComputeScalar<T>>
void heads_decomposed(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, HeadsView<T> scores,
                      HeadsView<T> out, const Options& opt, const Masks<T>& masks, HeadsView<C> lse,
                      HeadsView<T> average) {
  internal::Call<T> c = call_of("attention_heads_decomposed_into", q, k, v, out, lse, masks);
  c.scores = scores;
  c.want_scores = !scores.empty();
  c.average = average;
  c.want_average = !average.empty();
  if (!c.want_scores) c.want_out = true;  // out is required unless scores are given
  internal::execute(internal::make_problem(c, opt), opt.threads);
  const index_t B = q.batch, H = q.heads, tq = q.tokens, tk = k.tokens;
  // The mean over heads, summed in head order (the same result for every thread count).
  if (!average.empty()) {
    for (index_t b = 0; b < B; ++b) {
      for (index_t i = 0; i < tq; ++i) {
        for (index_t j = 0; j < tk; ++j) {
          C sum = 0;
          for (index_t h = 0; h < H; ++h) sum += internal::to_compute(at(scores, b, h, i, j));
          at(average, b, index_t(0), i, j) =
              internal::from_compute<T>(H > 0 ? sum / static_cast<C>(H) : C(0));
        }
      }
    }
  }
}

template <typename T, typename C = ComputeScalar<T>>
void varlen(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, HeadsView<T> out,
            const std::int64_t* cu_q, const std::int64_t* cu_k, Eigen::Index batch, const Options& opt,
            const Masks<T>& masks, HeadsView<C> lse) {
  internal::Call<T> c = call_of("attention_varlen_into", q, k, v, out, lse, masks);
  c.want_out = true;
  c.cu_q = cu_q;
  c.cu_k = cu_k;
  c.sequences = batch;
  // Rows of the packed buffers that belong to no sequence are left as they are.
  internal::execute(internal::make_problem(c, opt), opt.threads);
}

template <typename T, typename C = ComputeScalar<T>>
void varlen_decomposed(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, T* scores,
                       std::size_t scores_size, HeadsView<T> out, const std::int64_t* cu_q,
                       const std::int64_t* cu_k, Eigen::Index batch, const Options& opt,
                       const Masks<T>& masks, HeadsView<C> lse) {
  const char* api = "attention_varlen_decomposed_into";
  const std::vector<index_t> offsets = internal::varlen_score_offsets(api, cu_q, cu_k, batch, q.heads);
  internal::Call<T> c = call_of(api, q, k, v, out, lse, masks);
  c.want_out = true;
  c.cu_q = cu_q;
  c.cu_k = cu_k;
  c.sequences = batch;
  internal::Problem<T> p = internal::make_problem(c, opt);
  internal::check_packed_scores<T>(api, scores, scores_size, static_cast<std::size_t>(offsets.back()), p);
  p.packed_scores = scores;
  p.score_offsets = offsets.data();
  internal::execute(p, opt.threads);
}

// The call of both backward entry points.
template <typename T, typename C = ComputeScalar<T>>
internal::Call<T> backward_call(const char* api, HeadsView<const T> q, HeadsView<const T> k,
                                HeadsView<const T> v, HeadsView<const T> out, HeadsView<const C> lse,
                                HeadsView<const T> d_out, HeadsView<T> dq, HeadsView<T> dk, HeadsView<T> dv,
                                const Masks<T>& masks) {
  internal::Call<T> c = call_of<T>(api, q, k, v, {}, {}, masks);
  c.backward = true;
  c.fwd_out = out;
  c.fwd_lse = lse;
  c.d_out = d_out;
  c.dq = dq;
  c.dk = dk;
  c.dv = dv;
  return c;
}

template <typename T, typename C = ComputeScalar<T>>
void heads_backward(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, HeadsView<const T> out,
                    HeadsView<const C> lse, HeadsView<const T> d_out, HeadsView<T> dq, HeadsView<T> dk,
                    HeadsView<T> dv, const Options& opt, const Masks<T>& masks, HeadsView<const T> d_scores,
                    HeadsView<T> d_bias) {
  internal::Call<T> c =
      backward_call("attention_heads_backward_into", q, k, v, out, lse, d_out, dq, dk, dv, masks);
  c.d_scores = d_scores;
  c.want_d_scores = !d_scores.empty();
  c.d_bias = d_bias;
  internal::execute_backward(internal::make_problem(c, opt), opt.threads);
}

template <typename T, typename C = ComputeScalar<T>>
void varlen_backward(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, HeadsView<const T> out,
                     HeadsView<const C> lse, HeadsView<const T> d_out, HeadsView<T> dq, HeadsView<T> dk,
                     HeadsView<T> dv, const std::int64_t* cu_q, const std::int64_t* cu_k, Eigen::Index batch,
                     const Options& opt, const Masks<T>& masks) {
  internal::Call<T> c =
      backward_call("attention_varlen_backward_into", q, k, v, out, lse, d_out, dq, dk, dv, masks);
  c.cu_q = cu_q;
  c.cu_k = cu_k;
  c.sequences = batch;
  internal::execute_backward(internal::make_problem(c, opt), opt.threads);
}

}  // namespace

std::size_t varlen_scores_size(const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k,
                               Eigen::Index batch, Eigen::Index heads) {
  return static_cast<std::size_t>(
      internal::varlen_score_offsets("varlen_scores_size", cu_seqlens_q, cu_seqlens_k, batch, heads).back());
}

namespace abi {

// The exported calls of detail/AbiMultiHead.hpp for views of T with log-sum-exps of L.
#define EIGEN_ATTENTION_DEFINE_MULTIHEAD(T, L)                                                              \
  void attention_heads_into(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,               \
                            HeadsView<T> attn, HeadsView<L> lse, const Options& opt,                        \
                            const Masks<T>& masks) {                                                        \
    heads(q, k, v, attn, opt, masks, lse);                                                                  \
  }                                                                                                         \
  void attention_heads_decomposed_into(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,    \
                                       HeadsView<T> scores, HeadsView<T> attn, HeadsView<L> lse,            \
                                       HeadsView<T> average_scores, const Options& opt,                     \
                                       const Masks<T>& masks) {                                             \
    heads_decomposed(q, k, v, scores, attn, opt, masks, lse, average_scores);                               \
  }                                                                                                         \
  void attention_varlen_into(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,              \
                             const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k,            \
                             std::ptrdiff_t batch, HeadsView<T> attn, HeadsView<L> lse, const Options& opt, \
                             const Masks<T>& masks) {                                                       \
    varlen(q, k, v, attn, cu_seqlens_q, cu_seqlens_k, batch, opt, masks, lse);                              \
  }                                                                                                         \
  void attention_varlen_decomposed_into(                                                                    \
      HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, const std::int64_t* cu_seqlens_q,   \
      const std::int64_t* cu_seqlens_k, std::ptrdiff_t batch, T* scores, std::size_t scores_size,           \
      HeadsView<T> attn, HeadsView<L> lse, const Options& opt, const Masks<T>& masks) {                     \
    varlen_decomposed(q, k, v, scores, scores_size, attn, cu_seqlens_q, cu_seqlens_k, batch, opt, masks,    \
                      lse);                                                                                 \
  }                                                                                                         \
  void attention_heads_backward_into(                                                                       \
      HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, HeadsView<const T> attn,            \
      HeadsView<const L> lse, HeadsView<const T> d_attn, HeadsView<const T> d_scores, HeadsView<T> dq,      \
      HeadsView<T> dk, HeadsView<T> dv, HeadsView<T> d_bias, const Options& opt, const Masks<T>& masks) {   \
    heads_backward(q, k, v, attn, lse, d_attn, dq, dk, dv, opt, masks, d_scores, d_bias);                   \
  }                                                                                                         \
  void attention_varlen_backward_into(                                                                      \
      HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, HeadsView<const T> attn,            \
      HeadsView<const L> lse, HeadsView<const T> d_attn, const std::int64_t* cu_seqlens_q,                  \
      const std::int64_t* cu_seqlens_k, std::ptrdiff_t batch, HeadsView<T> dq, HeadsView<T> dk,             \
      HeadsView<T> dv, const Options& opt, const Masks<T>& masks) {                                         \
    varlen_backward(q, k, v, attn, lse, d_attn, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, batch, opt, masks); \
  }

EIGEN_ATTENTION_DEFINE_MULTIHEAD(float, float)
EIGEN_ATTENTION_DEFINE_MULTIHEAD(double, double)
EIGEN_ATTENTION_DEFINE_MULTIHEAD(BFloat16Bits, float)
EIGEN_ATTENTION_DEFINE_MULTIHEAD(HalfBits, float)
#undef EIGEN_ATTENTION_DEFINE_MULTIHEAD

}  // namespace abi
}  // namespace EigenAttention
