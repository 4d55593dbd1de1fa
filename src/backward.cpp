// SPDX-License-Identifier: MIT
// The compiled single-head backward entry points (Compiled.hpp): like the forward calls in
// attention.cpp, each is the batch = 1, heads = 1 case of the one problem, validated once by
// make_problem and run by execute_backward.
#include <EigenAttention/Compiled.hpp>

#include "execute.hpp"
#include "validate.hpp"

namespace EigenAttention {
namespace compiled {
namespace {

template <typename T>
internal::Call<T> call_of(const char* api, const BackwardInputs<T>& in) {
  internal::Call<T> c;
  c.api = api;
  c.form = internal::Form::Matrix;
  c.q = internal::one_head(in.q);
  c.k = internal::one_head(in.k);
  c.v = internal::one_head(in.v);
  c.backward = true;
  c.fwd_out = internal::one_head(in.attn);
  c.fwd_lse = internal::one_head(in.lse);
  c.d_out = internal::one_head(in.d_attn);
  c.want_d_scores = in.has_d_scores;
  if (in.has_d_scores) c.d_scores = internal::one_head(in.d_scores);
  return c;
}

template <typename T>
void validate_inputs(const char* api, const BackwardInputs<T>& in, const MatrixView<T>* dq,
                     const MatrixView<T>* dk, const MatrixView<T>* dv, const Options& opt,
                     const Masks<T>& masks) {
  internal::Call<T> c = call_of(api, in);
  c.masks = masks;
  // The gradients that will not be resized are checked now; the others are absent (empty views).
  if (dq != nullptr) c.dq = internal::one_head(*dq);
  if (dk != nullptr) c.dk = internal::one_head(*dk);
  if (dv != nullptr) c.dv = internal::one_head(*dv);
  c.inputs_only = true;
  internal::make_problem(c, opt);
}

template <typename T>
void run_backward(const char* api, const BackwardInputs<T>& in, const MatrixView<T>& dq,
                  const MatrixView<T>& dk, const MatrixView<T>& dv, const Options& opt,
                  const Masks<T>& masks) {
  internal::Call<T> c = call_of(api, in);
  c.masks = masks;
  c.dq = internal::one_head(dq);
  c.dk = internal::one_head(dk);
  c.dv = internal::one_head(dv);
  internal::execute_backward(internal::make_problem(c, opt), opt.threads);
}

}  // namespace

void validate_backward(const char* api, const BackwardInputs<float>& in, const MatrixView<float>* dq,
                       const MatrixView<float>* dk, const MatrixView<float>* dv, const Options& opt,
                       const Masks<float>& masks) {
  validate_inputs(api, in, dq, dk, dv, opt, masks);
}
void validate_backward(const char* api, const BackwardInputs<double>& in, const MatrixView<double>* dq,
                       const MatrixView<double>* dk, const MatrixView<double>* dv, const Options& opt,
                       const Masks<double>& masks) {
  validate_inputs(api, in, dq, dk, dv, opt, masks);
}

void backward(const char* api, const BackwardInputs<float>& in, const MatrixView<float>& dq,
              const MatrixView<float>& dk, const MatrixView<float>& dv, const Options& opt,
              const Masks<float>& masks) {
  run_backward(api, in, dq, dk, dv, opt, masks);
}
void backward(const char* api, const BackwardInputs<double>& in, const MatrixView<double>& dq,
              const MatrixView<double>& dk, const MatrixView<double>& dv, const Options& opt,
              const Masks<double>& masks) {
  run_backward(api, in, dq, dk, dv, opt, masks);
}

void validate_backward(const char* api, const BackwardInputs<BFloat16Bits>& in,
                       const MatrixView<BFloat16Bits>* dq, const MatrixView<BFloat16Bits>* dk,
                       const MatrixView<BFloat16Bits>* dv, const Options& opt,
                       const Masks<BFloat16Bits>& masks) {
  validate_inputs(api, in, dq, dk, dv, opt, masks);
}
void validate_backward(const char* api, const BackwardInputs<HalfBits>& in, const MatrixView<HalfBits>* dq,
                       const MatrixView<HalfBits>* dk, const MatrixView<HalfBits>* dv, const Options& opt,
                       const Masks<HalfBits>& masks) {
  validate_inputs(api, in, dq, dk, dv, opt, masks);
}

void backward(const char* api, const BackwardInputs<BFloat16Bits>& in, const MatrixView<BFloat16Bits>& dq,
              const MatrixView<BFloat16Bits>& dk, const MatrixView<BFloat16Bits>& dv, const Options& opt,
              const Masks<BFloat16Bits>& masks) {
  run_backward(api, in, dq, dk, dv, opt, masks);
}
void backward(const char* api, const BackwardInputs<HalfBits>& in, const MatrixView<HalfBits>& dq,
              const MatrixView<HalfBits>& dk, const MatrixView<HalfBits>& dv, const Options& opt,
              const Masks<HalfBits>& masks) {
  run_backward(api, in, dq, dk, dv, opt, masks);
}

}  // namespace compiled
}  // namespace EigenAttention
