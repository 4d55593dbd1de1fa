// The batched multi-head entry points (MultiHead.hpp): validate once, then run one single-head
// problem per (sequence, query head) on the tiled kernels, split over threads.
#include <EigenAttention/MultiHead.hpp>

#include <vector>

#include "kernel.hpp"
#include "validate.hpp"

namespace EigenAttention {
namespace {

using internal::HeadsProblem;
using internal::index_t;

template <typename T>
void run(const char* api, const HeadsProblem<T>& p, const Options& opt, bool uniform_rows) {
  const Kernel kernel = internal::resolve_kernel(api, opt.kernel);
  internal::run_problems<T>(kernel, p.problems(), uniform_rows ? p.q.tokens : -1,
                            [&](index_t which) { return p.problem(which); }, opt.threads);
}

// Element (b, h, i, j) of a 4-D view.
template <typename T>
T& at(const HeadsView<T>& v, index_t b, index_t h, index_t i, index_t j) {
  return v.data[b * v.batch_stride + h * v.head_stride + i * v.token_stride + j * v.dim_stride];
}

template <typename T>
void heads(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, HeadsView<T> out,
           const Options& opt, const Masks<T>& masks, HeadsView<T> lse) {
  const char* api = "attention_heads";
  const HeadsProblem<T> p =
      internal::make_heads_problem<T>(api, q, k, v, out, lse, {}, {}, opt, masks, nullptr, nullptr, 0);
  run(api, p, opt, true);
}

template <typename T>
void heads_decomposed(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, HeadsView<T> scores,
                      HeadsView<T> out, const Options& opt, const Masks<T>& masks, HeadsView<T> lse,
                      HeadsView<T> average) {
  const char* api = "attention_heads_decomposed";
  const HeadsProblem<T> p =
      internal::make_heads_problem<T>(api, q, k, v, out, lse, scores, average, opt, masks, nullptr, nullptr, 0);
  run(api, p, opt, true);
  const index_t B = q.batch, H = q.heads, tq = q.tokens, tk = k.tokens;
  // Padded keys (beyond key_lengths) were cut from each head's problem: their weights are 0.
  if (masks.key_lengths != nullptr && !scores.empty()) {
    for (index_t b = 0; b < B; ++b)
      for (index_t h = 0; h < H; ++h)
        for (index_t i = 0; i < tq; ++i)
          for (index_t j = masks.key_lengths[b]; j < tk; ++j) at(scores, b, h, i, j) = T(0);
  }
  // The mean over heads, summed in head order (the same result for every thread count).
  if (!average.empty()) {
    for (index_t b = 0; b < B; ++b) {
      for (index_t i = 0; i < tq; ++i) {
        for (index_t j = 0; j < tk; ++j) {
          T sum = 0;
          for (index_t h = 0; h < H; ++h) sum += at(scores, b, h, i, j);
          at(average, b, index_t(0), i, j) = H > 0 ? sum / static_cast<T>(H) : T(0);
        }
      }
    }
  }
}

template <typename T>
void varlen(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, HeadsView<T> out,
            const std::int64_t* cu_q, const std::int64_t* cu_k, Eigen::Index batch, const Options& opt,
            const Masks<T>& masks, HeadsView<T> lse) {
  const char* api = "attention_varlen";
  if (cu_q == nullptr || cu_k == nullptr) {
    throw std::invalid_argument("EigenAttention::attention_varlen: cu_seqlens_q and cu_seqlens_k must be given");
  }
  const HeadsProblem<T> p =
      internal::make_heads_problem<T>(api, q, k, v, out, lse, {}, {}, opt, masks, cu_q, cu_k, batch);
  // Rows of the packed buffers that belong to no sequence are left as they are.
  run(api, p, opt, false);
}

template <typename T>
void varlen_decomposed(HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, T* scores,
                       std::size_t scores_size, HeadsView<T> out, const std::int64_t* cu_q, const std::int64_t* cu_k,
                       Eigen::Index batch, const Options& opt, const Masks<T>& masks, HeadsView<T> lse) {
  const char* api = "attention_varlen_decomposed";
  const std::vector<index_t> offsets = internal::varlen_score_offsets(api, cu_q, cu_k, batch, q.heads);
  HeadsProblem<T> p = internal::make_heads_problem<T>(api, q, k, v, out, lse, {}, {}, opt, masks, cu_q, cu_k, batch);
  internal::check_packed_scores<T>(api, scores, scores_size, static_cast<std::size_t>(offsets.back()), p);
  p.packed_scores = scores;
  p.score_offsets = offsets.data();
  run(api, p, opt, false);
}

}  // namespace

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
                     HeadsView<float> out, const Options& opt, const Masks<float>& masks, HeadsView<float> lse) {
  heads(q, k, v, out, opt, masks, lse);
}
void attention_heads(HeadsView<const double> q, HeadsView<const double> k, HeadsView<const double> v,
                     HeadsView<double> out, const Options& opt, const Masks<double>& masks, HeadsView<double> lse) {
  heads(q, k, v, out, opt, masks, lse);
}

void attention_heads_decomposed(HeadsView<const float> q, HeadsView<const float> k, HeadsView<const float> v,
                                HeadsView<float> scores, HeadsView<float> out, const Options& opt,
                                const Masks<float>& masks, HeadsView<float> lse, HeadsView<float> average_scores) {
  heads_decomposed(q, k, v, scores, out, opt, masks, lse, average_scores);
}
void attention_heads_decomposed(HeadsView<const double> q, HeadsView<const double> k, HeadsView<const double> v,
                                HeadsView<double> scores, HeadsView<double> out, const Options& opt,
                                const Masks<double>& masks, HeadsView<double> lse,
                                HeadsView<double> average_scores) {
  heads_decomposed(q, k, v, scores, out, opt, masks, lse, average_scores);
}

void attention_varlen(HeadsView<const float> q, HeadsView<const float> k, HeadsView<const float> v,
                      HeadsView<float> out, const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k,
                      Eigen::Index batch, const Options& opt, const Masks<float>& masks, HeadsView<float> lse) {
  varlen(q, k, v, out, cu_seqlens_q, cu_seqlens_k, batch, opt, masks, lse);
}
void attention_varlen(HeadsView<const double> q, HeadsView<const double> k, HeadsView<const double> v,
                      HeadsView<double> out, const std::int64_t* cu_seqlens_q, const std::int64_t* cu_seqlens_k,
                      Eigen::Index batch, const Options& opt, const Masks<double>& masks, HeadsView<double> lse) {
  varlen(q, k, v, out, cu_seqlens_q, cu_seqlens_k, batch, opt, masks, lse);
}

}  // namespace EigenAttention
