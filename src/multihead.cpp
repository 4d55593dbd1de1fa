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
  internal::Call<T> c = call_of("attention_heads", q, k, v, out, lse, masks);
  c.want_out = true;  // required: an empty view is reported by its shape
  internal::execute(internal::make_problem(c, opt), opt.threads);
}

template <typename T, typename C = ComputeScalar<T>>
void heads_decomposed(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, HeadsView<T> scores,
                      HeadsView<T> out, const Options& opt, const Masks<T>& masks, HeadsView<C> lse,
                      HeadsView<T> average) {
  internal::Call<T> c = call_of("attention_heads_decomposed", q, k, v, out, lse, masks);
  c.scores = scores;
  c.want_scores = !scores.empty();
  c.average = average;
  c.want_average = !average.empty();
  if (!c.want_scores) c.want_out = true;  // out is required unless scores are given
  internal::execute(internal::make_problem(c, opt), opt.threads);
  const index_t B = q.batch, H = q.heads, tq = q.tokens, tk = k.tokens;
  // Padded keys (beyond key_lengths) were cut from each head's problem: their weights are 0.
  if (masks.key_lengths != nullptr && !scores.empty()) {
    for (index_t b = 0; b < B; ++b)
      for (index_t h = 0; h < H; ++h)
        for (index_t i = 0; i < tq; ++i)
          for (index_t j = masks.key_lengths[b]; j < tk; ++j) at(scores, b, h, i, j) = T{0};
  }
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
  internal::Call<T> c = call_of("attention_varlen", q, k, v, out, lse, masks);
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
  const char* api = "attention_varlen_decomposed";
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
      backward_call("attention_heads_backward", q, k, v, out, lse, d_out, dq, dk, dv, masks);
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
      backward_call("attention_varlen_backward", q, k, v, out, lse, d_out, dq, dk, dv, masks);
  c.cu_q = cu_q;
  c.cu_k = cu_k;
  c.sequences = batch;
  internal::execute_backward(internal::make_problem(c, opt), opt.threads);
}

}  // namespace

void attention_heads_backward(HeadsView<const float> q, HeadsView<const float> k, HeadsView<const float> v,
                              HeadsView<const float> out, HeadsView<const float> lse,
                              HeadsView<const float> d_out, HeadsView<float> dq, HeadsView<float> dk,
                              HeadsView<float> dv, const Options& opt, const Masks<float>& masks,
                              HeadsView<const float> d_scores, HeadsView<float> d_bias) {
  heads_backward(q, k, v, out, lse, d_out, dq, dk, dv, opt, masks, d_scores, d_bias);
}
void attention_heads_backward(HeadsView<const double> q, HeadsView<const double> k, HeadsView<const double> v,
                              HeadsView<const double> out, HeadsView<const double> lse,
                              HeadsView<const double> d_out, HeadsView<double> dq, HeadsView<double> dk,
                              HeadsView<double> dv, const Options& opt, const Masks<double>& masks,
                              HeadsView<const double> d_scores, HeadsView<double> d_bias) {
  heads_backward(q, k, v, out, lse, d_out, dq, dk, dv, opt, masks, d_scores, d_bias);
}

void attention_varlen_backward(HeadsView<const float> q, HeadsView<const float> k, HeadsView<const float> v,
                               HeadsView<const float> out, HeadsView<const float> lse,
                               HeadsView<const float> d_out, HeadsView<float> dq, HeadsView<float> dk,
                               HeadsView<float> dv, const std::int64_t* cu_seqlens_q,
                               const std::int64_t* cu_seqlens_k, Eigen::Index batch, const Options& opt,
                               const Masks<float>& masks) {
  varlen_backward(q, k, v, out, lse, d_out, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, batch, opt, masks);
}
void attention_varlen_backward(HeadsView<const double> q, HeadsView<const double> k,
                               HeadsView<const double> v, HeadsView<const double> out,
                               HeadsView<const double> lse, HeadsView<const double> d_out,
                               HeadsView<double> dq, HeadsView<double> dk, HeadsView<double> dv,
                               const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k,
                               Eigen::Index batch, const Options& opt, const Masks<double>& masks) {
  varlen_backward(q, k, v, out, lse, d_out, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, batch, opt, masks);
}

std::size_t varlen_scores_size(const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k,
                               Eigen::Index batch, Eigen::Index heads) {
  return static_cast<std::size_t>(
      internal::varlen_score_offsets("varlen_scores_size", cu_seqlens_q, cu_seqlens_k, batch, heads).back());
}

void attention_varlen_decomposed(HeadsView<const float> q, HeadsView<const float> k, HeadsView<const float> v,
                                 float* scores, std::size_t scores_size, HeadsView<float> out,
                                 const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k,
                                 Eigen::Index batch, const Options& opt, const Masks<float>& masks,
                                 HeadsView<float> lse) {
  varlen_decomposed(q, k, v, scores, scores_size, out, cu_seqlens_q, cu_seqlens_k, batch, opt, masks, lse);
}
void attention_varlen_decomposed(HeadsView<const double> q, HeadsView<const double> k,
                                 HeadsView<const double> v, double* scores, std::size_t scores_size,
                                 HeadsView<double> out, const std::int64_t* cu_seqlens_q,
                                 const std::int64_t* cu_seqlens_k, Eigen::Index batch, const Options& opt,
                                 const Masks<double>& masks, HeadsView<double> lse) {
  varlen_decomposed(q, k, v, scores, scores_size, out, cu_seqlens_q, cu_seqlens_k, batch, opt, masks, lse);
}

void attention_heads(HeadsView<const float> q, HeadsView<const float> k, HeadsView<const float> v,
                     HeadsView<float> out, const Options& opt, const Masks<float>& masks,
                     HeadsView<float> lse) {
  heads(q, k, v, out, opt, masks, lse);
}
void attention_heads(HeadsView<const double> q, HeadsView<const double> k, HeadsView<const double> v,
                     HeadsView<double> out, const Options& opt, const Masks<double>& masks,
                     HeadsView<double> lse) {
  heads(q, k, v, out, opt, masks, lse);
}

void attention_heads_decomposed(HeadsView<const float> q, HeadsView<const float> k, HeadsView<const float> v,
                                HeadsView<float> scores, HeadsView<float> out, const Options& opt,
                                const Masks<float>& masks, HeadsView<float> lse,
                                HeadsView<float> average_scores) {
  heads_decomposed(q, k, v, scores, out, opt, masks, lse, average_scores);
}
void attention_heads_decomposed(HeadsView<const double> q, HeadsView<const double> k,
                                HeadsView<const double> v, HeadsView<double> scores, HeadsView<double> out,
                                const Options& opt, const Masks<double>& masks, HeadsView<double> lse,
                                HeadsView<double> average_scores) {
  heads_decomposed(q, k, v, scores, out, opt, masks, lse, average_scores);
}

void attention_varlen(HeadsView<const float> q, HeadsView<const float> k, HeadsView<const float> v,
                      HeadsView<float> out, const std::int64_t* cu_seqlens_q,
                      const std::int64_t* cu_seqlens_k, Eigen::Index batch, const Options& opt,
                      const Masks<float>& masks, HeadsView<float> lse) {
  varlen(q, k, v, out, cu_seqlens_q, cu_seqlens_k, batch, opt, masks, lse);
}
void attention_varlen(HeadsView<const double> q, HeadsView<const double> k, HeadsView<const double> v,
                      HeadsView<double> out, const std::int64_t* cu_seqlens_q,
                      const std::int64_t* cu_seqlens_k, Eigen::Index batch, const Options& opt,
                      const Masks<double>& masks, HeadsView<double> lse) {
  varlen(q, k, v, out, cu_seqlens_q, cu_seqlens_k, batch, opt, masks, lse);
}

namespace compiled {

void attention_heads(HeadsView<const BFloat16Bits> q, HeadsView<const BFloat16Bits> k,
                     HeadsView<const BFloat16Bits> v, HeadsView<BFloat16Bits> out, const Options& opt,
                     const Masks<BFloat16Bits>& masks, HeadsView<float> lse) {
  heads(q, k, v, out, opt, masks, lse);
}
void attention_heads_decomposed(HeadsView<const BFloat16Bits> q, HeadsView<const BFloat16Bits> k,
                                HeadsView<const BFloat16Bits> v, HeadsView<BFloat16Bits> scores,
                                HeadsView<BFloat16Bits> out, const Options& opt,
                                const Masks<BFloat16Bits>& masks, HeadsView<float> lse,
                                HeadsView<BFloat16Bits> average_scores) {
  heads_decomposed(q, k, v, scores, out, opt, masks, lse, average_scores);
}
void attention_varlen(HeadsView<const BFloat16Bits> q, HeadsView<const BFloat16Bits> k,
                      HeadsView<const BFloat16Bits> v, HeadsView<BFloat16Bits> out,
                      const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k, Eigen::Index batch,
                      const Options& opt, const Masks<BFloat16Bits>& masks, HeadsView<float> lse) {
  varlen(q, k, v, out, cu_seqlens_q, cu_seqlens_k, batch, opt, masks, lse);
}
void attention_varlen_decomposed(HeadsView<const BFloat16Bits> q, HeadsView<const BFloat16Bits> k,
                                 HeadsView<const BFloat16Bits> v, BFloat16Bits* scores,
                                 std::size_t scores_size, HeadsView<BFloat16Bits> out,
                                 const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k,
                                 Eigen::Index batch, const Options& opt, const Masks<BFloat16Bits>& masks,
                                 HeadsView<float> lse) {
  varlen_decomposed(q, k, v, scores, scores_size, out, cu_seqlens_q, cu_seqlens_k, batch, opt, masks, lse);
}
void attention_heads_backward(HeadsView<const BFloat16Bits> q, HeadsView<const BFloat16Bits> k,
                              HeadsView<const BFloat16Bits> v, HeadsView<const BFloat16Bits> out,
                              HeadsView<const float> lse, HeadsView<const BFloat16Bits> d_out,
                              HeadsView<BFloat16Bits> dq, HeadsView<BFloat16Bits> dk,
                              HeadsView<BFloat16Bits> dv, const Options& opt,
                              const Masks<BFloat16Bits>& masks, HeadsView<const BFloat16Bits> d_scores,
                              HeadsView<BFloat16Bits> d_bias) {
  heads_backward(q, k, v, out, lse, d_out, dq, dk, dv, opt, masks, d_scores, d_bias);
}
void attention_varlen_backward(HeadsView<const BFloat16Bits> q, HeadsView<const BFloat16Bits> k,
                               HeadsView<const BFloat16Bits> v, HeadsView<const BFloat16Bits> out,
                               HeadsView<const float> lse, HeadsView<const BFloat16Bits> d_out,
                               HeadsView<BFloat16Bits> dq, HeadsView<BFloat16Bits> dk,
                               HeadsView<BFloat16Bits> dv, const std::int64_t* cu_seqlens_q,
                               const std::int64_t* cu_seqlens_k, Eigen::Index batch, const Options& opt,
                               const Masks<BFloat16Bits>& masks) {
  varlen_backward(q, k, v, out, lse, d_out, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, batch, opt, masks);
}

void attention_heads(HeadsView<const HalfBits> q, HeadsView<const HalfBits> k, HeadsView<const HalfBits> v,
                     HeadsView<HalfBits> out, const Options& opt, const Masks<HalfBits>& masks,
                     HeadsView<float> lse) {
  heads(q, k, v, out, opt, masks, lse);
}
void attention_heads_decomposed(HeadsView<const HalfBits> q, HeadsView<const HalfBits> k,
                                HeadsView<const HalfBits> v, HeadsView<HalfBits> scores,
                                HeadsView<HalfBits> out, const Options& opt, const Masks<HalfBits>& masks,
                                HeadsView<float> lse, HeadsView<HalfBits> average_scores) {
  heads_decomposed(q, k, v, scores, out, opt, masks, lse, average_scores);
}
void attention_varlen(HeadsView<const HalfBits> q, HeadsView<const HalfBits> k, HeadsView<const HalfBits> v,
                      HeadsView<HalfBits> out, const std::int64_t* cu_seqlens_q,
                      const std::int64_t* cu_seqlens_k, Eigen::Index batch, const Options& opt,
                      const Masks<HalfBits>& masks, HeadsView<float> lse) {
  varlen(q, k, v, out, cu_seqlens_q, cu_seqlens_k, batch, opt, masks, lse);
}
void attention_varlen_decomposed(HeadsView<const HalfBits> q, HeadsView<const HalfBits> k,
                                 HeadsView<const HalfBits> v, HalfBits* scores, std::size_t scores_size,
                                 HeadsView<HalfBits> out, const std::int64_t* cu_seqlens_q,
                                 const std::int64_t* cu_seqlens_k, Eigen::Index batch, const Options& opt,
                                 const Masks<HalfBits>& masks, HeadsView<float> lse) {
  varlen_decomposed(q, k, v, scores, scores_size, out, cu_seqlens_q, cu_seqlens_k, batch, opt, masks, lse);
}
void attention_heads_backward(HeadsView<const HalfBits> q, HeadsView<const HalfBits> k,
                              HeadsView<const HalfBits> v, HeadsView<const HalfBits> out,
                              HeadsView<const float> lse, HeadsView<const HalfBits> d_out,
                              HeadsView<HalfBits> dq, HeadsView<HalfBits> dk, HeadsView<HalfBits> dv,
                              const Options& opt, const Masks<HalfBits>& masks,
                              HeadsView<const HalfBits> d_scores, HeadsView<HalfBits> d_bias) {
  heads_backward(q, k, v, out, lse, d_out, dq, dk, dv, opt, masks, d_scores, d_bias);
}
void attention_varlen_backward(HeadsView<const HalfBits> q, HeadsView<const HalfBits> k,
                               HeadsView<const HalfBits> v, HeadsView<const HalfBits> out,
                               HeadsView<const float> lse, HeadsView<const HalfBits> d_out,
                               HeadsView<HalfBits> dq, HeadsView<HalfBits> dk, HeadsView<HalfBits> dv,
                               const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k,
                               Eigen::Index batch, const Options& opt, const Masks<HalfBits>& masks) {
  varlen_backward(q, k, v, out, lse, d_out, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, batch, opt, masks);
}

}  // namespace compiled
}  // namespace EigenAttention
