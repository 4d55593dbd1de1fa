// SPDX-License-Identifier: MIT
// The compiled single-head entry points (Compiled.hpp): each call is the batch = 1, heads = 1
// case of the one problem (problem.hpp), validated once by make_problem and run like any other.
// (compiled::check_result_size is in validate.cpp with the other checks, and
// compiled::prefer_huge_pages in huge_pages.cpp.) What arrives is plain views (MatrixView); the
// by-value results are allocated by the inline functions of Compiled.hpp, in the caller's
// translation unit.
#include <EigenAttention/Compiled.hpp>

#include <stdexcept>
#include <string>

#include "execute.hpp"
#include "validate.hpp"

namespace EigenAttention {
namespace compiled {
namespace {

template <typename T>
internal::Call<T> call_of(const char* api, MatrixView<const T> q, MatrixView<const T> k,
                          const MatrixView<const T>* v) {
  internal::Call<T> c;
  c.api = api;
  c.form = internal::Form::Matrix;
  c.q = internal::one_head(q);
  c.k = internal::one_head(k);
  c.has_v = v != nullptr;
  if (v != nullptr) c.v = internal::one_head(*v);
  return c;
}

// The Call of a single-head forward: the outputs given (not null) are wanted.
template <typename T>
internal::Call<T> call_for(const char* api, MatrixView<const T> q, MatrixView<const T> k,
                           const MatrixView<const T>* v, const MatrixView<T>* scores,
                           const MatrixView<T>* attn, const MatrixView<ComputeScalar<T>>* lse,
                           const MatrixView<ComputeScalar<T>>* compute_scores, const Masks<T>& masks) {
  internal::Call<T> c = call_of(api, q, k, v);
  c.masks = masks;
  const auto bind = [](const auto* m, auto& view, bool& wanted) {
    if (m != nullptr) view = internal::one_head(*m);
    wanted = m != nullptr;
  };
  bind(scores, c.scores, c.want_scores);
  bind(attn, c.out, c.want_out);
  bind(lse, c.lse, c.want_lse);
  if (compute_scores != nullptr) {
    if (scores != nullptr)
      throw std::invalid_argument(std::string("EigenAttention::") + api +
                                  ": SCORES are asked for twice (scores and float_scores)");
    bind(compute_scores, c.compute_scores, c.want_scores);
    c.scores_compute = true;
  }
  return c;
}

// validate(): the checks of run() on the outputs given, none required.
template <typename T>
void validate_views(const char* api, MatrixView<const T> q, MatrixView<const T> k,
                    const MatrixView<const T>* v, const MatrixView<T>* scores, const MatrixView<T>* attn,
                    const MatrixView<ComputeScalar<T>>* lse,
                    const MatrixView<ComputeScalar<T>>* compute_scores, const Options& opt,
                    const Masks<T>& masks) {
  internal::Call<T> c = call_for(api, q, k, v, scores, attn, lse, compute_scores, masks);
  c.inputs_only = true;
  internal::make_problem(c, opt);
}

template <typename T>
void run_views(const char* api, MatrixView<const T> q, MatrixView<const T> k, const MatrixView<const T>* v,
               const MatrixView<T>* scores, const MatrixView<T>* attn,
               const MatrixView<ComputeScalar<T>>* lse, const MatrixView<ComputeScalar<T>>* compute_scores,
               const Options& opt, const Masks<T>& masks) {
  internal::execute(
      internal::make_problem(call_for(api, q, k, v, scores, attn, lse, compute_scores, masks), opt),
      opt.threads);
}

}  // namespace

void validate(const char* api, MatrixView<const float> q, MatrixView<const float> k,
              const MatrixView<const float>* v, const MatrixView<float>* scores,
              const MatrixView<float>* attn, const MatrixView<float>* lse, const Options& opt,
              const Masks<float>& masks) {
  validate_views(api, q, k, v, scores, attn, lse, nullptr, opt, masks);
}
void validate(const char* api, MatrixView<const double> q, MatrixView<const double> k,
              const MatrixView<const double>* v, const MatrixView<double>* scores,
              const MatrixView<double>* attn, const MatrixView<double>* lse, const Options& opt,
              const Masks<double>& masks) {
  validate_views(api, q, k, v, scores, attn, lse, nullptr, opt, masks);
}

void run(const char* api, MatrixView<const float> q, MatrixView<const float> k,
         const MatrixView<const float>* v, const MatrixView<float>* scores, const MatrixView<float>* attn,
         const MatrixView<float>* lse, const Options& opt, const Masks<float>& masks) {
  run_views(api, q, k, v, scores, attn, lse, nullptr, opt, masks);
}
void run(const char* api, MatrixView<const double> q, MatrixView<const double> k,
         const MatrixView<const double>* v, const MatrixView<double>* scores, const MatrixView<double>* attn,
         const MatrixView<double>* lse, const Options& opt, const Masks<double>& masks) {
  run_views(api, q, k, v, scores, attn, lse, nullptr, opt, masks);
}

void validate(const char* api, MatrixView<const BFloat16Bits> q, MatrixView<const BFloat16Bits> k,
              const MatrixView<const BFloat16Bits>* v, const MatrixView<BFloat16Bits>* scores,
              const MatrixView<BFloat16Bits>* attn, const MatrixView<float>* lse,
              const MatrixView<float>* float_scores, const Options& opt, const Masks<BFloat16Bits>& masks) {
  validate_views(api, q, k, v, scores, attn, lse, float_scores, opt, masks);
}
void validate(const char* api, MatrixView<const HalfBits> q, MatrixView<const HalfBits> k,
              const MatrixView<const HalfBits>* v, const MatrixView<HalfBits>* scores,
              const MatrixView<HalfBits>* attn, const MatrixView<float>* lse,
              const MatrixView<float>* float_scores, const Options& opt, const Masks<HalfBits>& masks) {
  validate_views(api, q, k, v, scores, attn, lse, float_scores, opt, masks);
}

void run(const char* api, MatrixView<const BFloat16Bits> q, MatrixView<const BFloat16Bits> k,
         const MatrixView<const BFloat16Bits>* v, const MatrixView<BFloat16Bits>* scores,
         const MatrixView<BFloat16Bits>* attn, const MatrixView<float>* lse,
         const MatrixView<float>* float_scores, const Options& opt, const Masks<BFloat16Bits>& masks) {
  run_views(api, q, k, v, scores, attn, lse, float_scores, opt, masks);
}
void run(const char* api, MatrixView<const HalfBits> q, MatrixView<const HalfBits> k,
         const MatrixView<const HalfBits>* v, const MatrixView<HalfBits>* scores,
         const MatrixView<HalfBits>* attn, const MatrixView<float>* lse,
         const MatrixView<float>* float_scores, const Options& opt, const Masks<HalfBits>& masks) {
  run_views(api, q, k, v, scores, attn, lse, float_scores, opt, masks);
}

}  // namespace compiled
}  // namespace EigenAttention
