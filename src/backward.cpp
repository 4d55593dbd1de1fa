// The compiled single-head backward entry points (Compiled.hpp): like the forward calls in
// attention.cpp, each is the batch = 1, heads = 1 case of the one problem, validated once by
// make_problem and run by execute_backward.
#include <EigenAttention/Compiled.hpp>

#include "check/call.hpp"
#include "execute.hpp"

namespace EigenAttention {
namespace compiled {
namespace {

// The Call of a single-head backward: the gradients given (not null) are checked; with
// Stage::BeforeSizing the absent ones are those the front door sizes afterwards.
template <typename T>
internal::Call<T> call_of(const char* api, const BackwardInputs<T>& in, const MatrixView<T>* dq,
                          const MatrixView<T>* dk, const MatrixView<T>* dv, const Masks<T>& masks) {
  internal::Call<T> c;
  c.api = api;
  c.form = internal::Form::Matrix;
  c.in = {internal::one_head(in.q), internal::one_head(in.k), internal::one_head(in.v)};
  const auto head = [](const MatrixView<T>* m) {
    return m != nullptr ? std::optional<HeadsView<T>>(internal::one_head(*m)) : std::nullopt;
  };
  internal::Gradients<T> g;
  g.attn = internal::one_head(in.attn);
  g.lse = internal::one_head(in.lse);
  g.d_attn = internal::one_head(in.d_attn);
  if (in.has_d_scores) g.d_scores = internal::one_head(in.d_scores);
  g.dq = head(dq), g.dk = head(dk), g.dv = head(dv);
  c.backward = g;
  c.masks = masks;
  return c;
}

template <typename T>
void validate_inputs(const char* api, const BackwardInputs<T>& in, const MatrixView<T>* dq,
                     const MatrixView<T>* dk, const MatrixView<T>* dv, const Options& opt,
                     const Masks<T>& masks) {
  internal::Call<T> c = call_of(api, in, dq, dk, dv, masks);
  c.stage = internal::Stage::BeforeSizing;
  internal::make_problem(c, opt);
}

template <typename T>
void run_backward(const char* api, const BackwardInputs<T>& in, const MatrixView<T>& dq,
                  const MatrixView<T>& dk, const MatrixView<T>& dv, const Options& opt,
                  const Masks<T>& masks) {
  internal::execute_backward(internal::make_problem(call_of(api, in, &dq, &dk, &dv, masks), opt),
                             opt.threads);
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
