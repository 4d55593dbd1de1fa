// SPDX-License-Identifier: MIT
// The compiled single-head backward (detail/AbiSingleHead.hpp): like the forward in
// attention.cpp, the batch = 1, heads = 1 case of the one problem, validated by make_problem,
// its resizable gradients sized through the caller's translation unit, and run by
// execute_backward.
#include "check/call.hpp"
#include "execute.hpp"
#include "outputs.hpp"

namespace EigenAttention {
namespace {

template <typename T, typename C = ComputeScalar<T>>
void backward(const char* api, MatrixView<const T> q, MatrixView<const T> k, MatrixView<const T> v,
              MatrixView<const T> attn, MatrixView<const C> lse, MatrixView<const T> d_attn,
              const MatrixView<const T>* d_scores, abi::Output<T>& dq, abi::Output<T>& dk, abi::Output<T>& dv,
              const Options& opt, const Masks<T>& masks, const BackwardTerms<T>& terms) {
  const internal::Slot<T> gq{&dq, "dQ", "T_q x d_k", q.rows, q.cols},
      gk{&dk, "dK", "T_k x d_k", k.rows, k.cols}, gv{&dv, "dV", "T_k x d_v", v.rows, v.cols};
  const auto call = [&](internal::Stage stage) {
    internal::Call<T> c;
    c.api = api;
    c.form = internal::Form::Matrix;
    c.in = {internal::one_head(q), internal::one_head(k), internal::one_head(v)};
    internal::Gradients<T> g;
    g.attn = internal::one_head(attn);
    g.lse = internal::one_head(lse);
    g.d_attn = internal::one_head(d_attn);
    if (d_scores != nullptr) g.d_scores = internal::one_head(*d_scores);
    g.dq = gq.view(stage), g.dk = gk.view(stage), g.dv = gv.view(stage);
    g.terms = terms;
    c.backward = g;
    c.masks = masks;
    c.stage = stage;
    return c;
  };
  internal::execute_backward(internal::with_outputs_sized<T>(opt, call, gq, gk, gv), opt.threads);
}

}  // namespace

namespace abi {

#define EIGEN_ATTENTION_DEFINE_SINGLE_HEAD_BACKWARD(T, L)                                                 \
  void attention_backward(const char* api, MatrixView<const T> q, MatrixView<const T> k,                  \
                          MatrixView<const T> v, MatrixView<const T> attn, MatrixView<const L> lse,       \
                          MatrixView<const T> d_attn, const MatrixView<const T>* d_scores, Output<T>& dq, \
                          Output<T>& dk, Output<T>& dv, const Options& opt, const Masks<T>& masks,        \
                          const BackwardTerms<T>& terms) {                                                \
    backward(api, q, k, v, attn, lse, d_attn, d_scores, dq, dk, dv, opt, masks, terms);                   \
  }
EIGEN_ATTENTION_DEFINE_SINGLE_HEAD_BACKWARD(float, float)
EIGEN_ATTENTION_DEFINE_SINGLE_HEAD_BACKWARD(double, double)
EIGEN_ATTENTION_DEFINE_SINGLE_HEAD_BACKWARD(BFloat16Bits, float)
EIGEN_ATTENTION_DEFINE_SINGLE_HEAD_BACKWARD(HalfBits, float)
#undef EIGEN_ATTENTION_DEFINE_SINGLE_HEAD_BACKWARD

}  // namespace abi
}  // namespace EigenAttention
