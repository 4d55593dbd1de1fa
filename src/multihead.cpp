// SPDX-License-Identifier: MIT
// The batched multi-head entry points (MultiHead.hpp): one Call each, validated once by
// make_problem and run by execute(), as the single-head calls are.
#include <EigenAttention/MultiHead.hpp>

#include <vector>

#include "check/call.hpp"
#include "execute.hpp"
#include "kernels/convert.hpp"
#include "scheduler.hpp"

namespace EigenAttention {
namespace {

using internal::index_t;

// Element (b, h, i, j) of a 4-D view.
template <typename T>
T& at(const HeadsView<T>& v, index_t b, index_t h, index_t i, index_t j) {
  return v.data[b * v.batch_stride + h * v.head_stride + i * v.token_stride + j * v.dim_stride];
}

// The call every multi-head entry point makes: attn is required unless said otherwise (an empty
// view is then reported by its shape); lse is wanted when given (not empty).
// T is the views' element type (float, double, BFloat16Bits, HalfBits); the log-sum-exps are of
// its compute type (C).
template <typename T, typename C = ComputeScalar<T>>
internal::Call<T> call_of(const char* api, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                          HeadsView<T> attn, HeadsView<C> lse, const Masks<T>& masks) {
  internal::Call<T> c;
  c.api = api;
  c.in = {q, k, v};
  c.out.attn = attn;
  if (!lse.empty()) c.out.lse = lse;
  c.masks = masks;
  return c;
}

template <typename T, typename C = ComputeScalar<T>>
void heads(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, HeadsView<T> attn,
           HeadsView<C> lse, const Options& opt, const Masks<T>& masks) {
  const internal::Call<T> c = call_of("attention_heads_into", q, k, v, attn, lse, masks);
  internal::execute(internal::make_problem(c, opt), opt.threads);
}

// The LSE-only form: Q and K, the log-sum-exps alone (no V, nothing else materialised).
template <typename T, typename C = ComputeScalar<T>>
void heads_lse(HeadsView<const T> q, HeadsView<const T> k, HeadsView<C> lse, const Options& opt,
               const Masks<T>& masks) {
  internal::Call<T> c;
  c.api = "attention_heads_lse_into";
  c.in.q = q, c.in.k = k;
  c.out.lse = lse;
  c.masks = masks;
  internal::execute(internal::make_problem(c, opt), opt.threads);
}

// The mean over heads of scores, summed in head order: rows (b, i) over up to `threads` threads
// (scheduler.hpp), each element the same sum however the rows fall.
template <typename T, typename C = ComputeScalar<T>>
void average_over_heads(HeadsView<const T> scores, HeadsView<T> average, int threads) {
  const index_t rows = scores.batch * scores.tokens;
  const double bytes = static_cast<double>(scores.heads + 1) * scores.dim * sizeof(T);
  internal::for_row_blocks(rows, threads, bytes, [&](index_t first, index_t count) {
    for (index_t r = first; r < first + count; ++r) {
      const index_t b = r / scores.tokens, i = r % scores.tokens;
      for (index_t j = 0; j < scores.dim; ++j) {
        C sum = 0;
        for (index_t h = 0; h < scores.heads; ++h) sum += internal::to_compute(at(scores, b, h, i, j));
        at(average, b, index_t(0), i, j) =
            internal::from_compute<T>(scores.heads > 0 ? sum / static_cast<C>(scores.heads) : C(0));
      }
    }
  });
}

template <typename T, typename C = ComputeScalar<T>>
void heads_decomposed(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, HeadsView<T> scores,
                      HeadsView<T> attn, HeadsView<C> lse, HeadsView<T> average, const Options& opt,
                      const Masks<T>& masks) {
  internal::Call<T> c = call_of("attention_heads_decomposed_into", q, k, v, attn, lse, masks);
  if (!scores.empty()) {
    c.out.scores = scores;
    if (attn.empty()) c.out.attn.reset();  // attn is required unless scores are given
  }
  if (!average.empty()) c.out.average_scores = average;
  internal::execute(internal::make_problem(c, opt), opt.threads);
  if (!average.empty()) average_over_heads<T>(scores, average, opt.threads);
}

template <typename T, typename C = ComputeScalar<T>>
internal::Call<T> varlen_call(const char* api, HeadsView<const T> q, HeadsView<const T> k,
                              HeadsView<const T> v, const std::int64_t* cu_q, const std::int64_t* cu_k,
                              index_t batch, HeadsView<T> attn, HeadsView<C> lse, const Masks<T>& masks) {
  internal::Call<T> c = call_of(api, q, k, v, attn, lse, masks);
  c.packed = internal::PackedSequences{cu_q, cu_k, batch};
  return c;
}

template <typename T, typename C = ComputeScalar<T>>
void varlen(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, const std::int64_t* cu_q,
            const std::int64_t* cu_k, index_t batch, HeadsView<T> attn, HeadsView<C> lse, const Options& opt,
            const Masks<T>& masks) {
  // Rows of the packed buffers that belong to no sequence are left as they are.
  const auto c = varlen_call("attention_varlen_into", q, k, v, cu_q, cu_k, batch, attn, lse, masks);
  internal::execute(internal::make_problem(c, opt), opt.threads);
}

template <typename T, typename C = ComputeScalar<T>>
void varlen_decomposed(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                       const std::int64_t* cu_q, const std::int64_t* cu_k, index_t batch, T* scores,
                       std::size_t scores_size, HeadsView<T> attn, HeadsView<C> lse, const Options& opt,
                       const Masks<T>& masks) {
  const char* api = "attention_varlen_decomposed_into";
  const std::vector<index_t> offsets = internal::varlen_score_offsets(api, cu_q, cu_k, batch, q.heads);
  const auto c = varlen_call(api, q, k, v, cu_q, cu_k, batch, attn, lse, masks);
  internal::Problem<T> p = internal::make_problem(c, opt);
  internal::check_packed_scores<T>(api, scores, scores_size, static_cast<std::size_t>(offsets.back()), p);
  p.packed_scores = scores;
  p.score_offsets = offsets.data();
  internal::execute(p, opt.threads);
}

// The call of both backward entry points.
template <typename T, typename C = ComputeScalar<T>>
internal::Call<T> backward_call(const char* api, HeadsView<const T> q, HeadsView<const T> k,
                                HeadsView<const T> v, HeadsView<const T> attn, HeadsView<const C> lse,
                                HeadsView<const T> d_attn, HeadsView<T> dq, HeadsView<T> dk, HeadsView<T> dv,
                                const Masks<T>& masks, const BackwardTerms<T>& terms) {
  internal::Call<T> c;
  c.api = api;
  c.in = {q, k, v};
  internal::Gradients<T> g;
  g.attn = attn, g.lse = lse, g.d_attn = d_attn;
  g.dq = dq, g.dk = dk, g.dv = dv;
  g.terms = terms;
  c.backward = g;
  c.masks = masks;
  return c;
}

template <typename T, typename C = ComputeScalar<T>>
void heads_backward(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, HeadsView<const T> attn,
                    HeadsView<const C> lse, HeadsView<const T> d_attn, HeadsView<const T> d_scores,
                    HeadsView<T> dq, HeadsView<T> dk, HeadsView<T> dv, HeadsView<T> d_bias,
                    const Options& opt, const Masks<T>& masks, const BackwardTerms<T>& terms) {
  internal::Call<T> c =
      backward_call("attention_heads_backward_into", q, k, v, attn, lse, d_attn, dq, dk, dv, masks, terms);
  if (!d_scores.empty()) c.backward->d_scores = d_scores;
  if (d_bias.data != nullptr) c.backward->d_bias = d_bias;
  internal::execute_backward(internal::make_problem(c, opt), opt.threads);
}

template <typename T, typename C = ComputeScalar<T>>
void varlen_backward(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                     HeadsView<const T> attn, HeadsView<const C> lse, HeadsView<const T> d_attn,
                     const std::int64_t* cu_q, const std::int64_t* cu_k, index_t batch, HeadsView<T> dq,
                     HeadsView<T> dk, HeadsView<T> dv, const Options& opt, const Masks<T>& masks,
                     const BackwardTerms<T>& terms) {
  internal::Call<T> c =
      backward_call("attention_varlen_backward_into", q, k, v, attn, lse, d_attn, dq, dk, dv, masks, terms);
  c.packed = internal::PackedSequences{cu_q, cu_k, batch};
  internal::execute_backward(internal::make_problem(c, opt), opt.threads);
}

}  // namespace

std::size_t varlen_scores_size(const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k,
                               index_t batch, index_t heads) {
  return static_cast<std::size_t>(
      internal::varlen_score_offsets("varlen_scores_size", cu_seqlens_q, cu_seqlens_k, batch, heads).back());
}

namespace abi {

// The exported calls of detail/AbiMultiHead.hpp for views of T with log-sum-exps of L.
#define EIGEN_ATTENTION_DEFINE_MULTIHEAD(T, L)                                                             \
  void attention_heads_into(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,              \
                            HeadsView<T> attn, HeadsView<L> lse, const Options& opt,                       \
                            const Masks<T>& masks) {                                                       \
    heads(q, k, v, attn, lse, opt, masks);                                                                 \
  }                                                                                                        \
  void attention_heads_lse_into(HeadsView<const T> q, HeadsView<const T> k, HeadsView<L> lse,              \
                                const Options& opt, const Masks<T>& masks) {                               \
    heads_lse(q, k, lse, opt, masks);                                                                      \
  }                                                                                                        \
  void attention_heads_decomposed_into(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,   \
                                       HeadsView<T> scores, HeadsView<T> attn, HeadsView<L> lse,           \
                                       HeadsView<T> average_scores, const Options& opt,                    \
                                       const Masks<T>& masks) {                                            \
    heads_decomposed(q, k, v, scores, attn, lse, average_scores, opt, masks);                              \
  }                                                                                                        \
  void attention_varlen_into(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,             \
                             const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k,           \
                             index_t batch, HeadsView<T> attn, HeadsView<L> lse, const Options& opt,       \
                             const Masks<T>& masks) {                                                      \
    varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, batch, attn, lse, opt, masks);                             \
  }                                                                                                        \
  void attention_varlen_decomposed_into(                                                                   \
      HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, const std::int64_t* cu_seqlens_q,  \
      const std::int64_t* cu_seqlens_k, index_t batch, T* scores, std::size_t scores_size,                 \
      HeadsView<T> attn, HeadsView<L> lse, const Options& opt, const Masks<T>& masks) {                    \
    varlen_decomposed(q, k, v, cu_seqlens_q, cu_seqlens_k, batch, scores, scores_size, attn, lse, opt,     \
                      masks);                                                                              \
  }                                                                                                        \
  void attention_heads_backward_into(                                                                      \
      HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, HeadsView<const T> attn,           \
      HeadsView<const L> lse, HeadsView<const T> d_attn, HeadsView<const T> d_scores, HeadsView<T> dq,     \
      HeadsView<T> dk, HeadsView<T> dv, HeadsView<T> d_bias, const Options& opt, const Masks<T>& masks,    \
      const BackwardTerms<T>& terms) {                                                                     \
    heads_backward(q, k, v, attn, lse, d_attn, d_scores, dq, dk, dv, d_bias, opt, masks, terms);           \
  }                                                                                                        \
  void attention_varlen_backward_into(                                                                     \
      HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, HeadsView<const T> attn,           \
      HeadsView<const L> lse, HeadsView<const T> d_attn, const std::int64_t* cu_seqlens_q,                 \
      const std::int64_t* cu_seqlens_k, index_t batch, HeadsView<T> dq, HeadsView<T> dk, HeadsView<T> dv,  \
      const Options& opt, const Masks<T>& masks, const BackwardTerms<T>& terms) {                          \
    varlen_backward(q, k, v, attn, lse, d_attn, cu_seqlens_q, cu_seqlens_k, batch, dq, dk, dv, opt, masks, \
                    terms);                                                                                \
  }

EIGEN_ATTENTION_DEFINE_MULTIHEAD(float, float)
EIGEN_ATTENTION_DEFINE_MULTIHEAD(double, double)
EIGEN_ATTENTION_DEFINE_MULTIHEAD(BFloat16Bits, float)
EIGEN_ATTENTION_DEFINE_MULTIHEAD(HalfBits, float)
#undef EIGEN_ATTENTION_DEFINE_MULTIHEAD

}  // namespace abi
}  // namespace EigenAttention
