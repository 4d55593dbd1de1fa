// SPDX-License-Identifier: MIT
// The compiled single-head forward (detail/AbiSingleHead.hpp): the batch = 1, heads = 1 case of
// the one problem (problem.hpp), validated by make_problem, its resizable outputs sized through
// the caller's translation unit (outputs.hpp), and run like any other.
#include "check/call.hpp"
#include "execute.hpp"
#include "outputs.hpp"

namespace EigenAttention {
namespace {

template <typename T, typename C = ComputeScalar<T>>
void forward(const char* api, MatrixView<const T> q, MatrixView<const T> k, const MatrixView<const T>* v,
             abi::Output<T>* scores, abi::Output<T>* attn, abi::Output<C>* lse, abi::Output<C>* float_scores,
             const Options& opt, const Masks<T>& masks) {
  using internal::index_t;
  const index_t tq = q.rows, tk = k.rows, dv = v != nullptr ? v->cols : 0;
  const internal::Slot<T> s{scores, "SCORES", "T_q x T_k", tq, tk, true},
      a{attn, "ATTN", "T_q x d_v", tq, dv};
  const internal::Slot<C> l{lse, "LSE", "T_q x 1", tq, 1},
      f{float_scores, "SCORES", "T_q x T_k", tq, tk, true};
  const auto call = [&](internal::Stage stage) {
    internal::Call<T> c;
    c.api = api;
    c.form = internal::Form::Matrix;
    c.in = {internal::one_head(q), internal::one_head(k), std::nullopt};
    if (v != nullptr) c.in.v = internal::one_head(*v);
    c.out.scores = s.view(stage);
    c.out.attn = a.view(stage);
    c.out.lse = l.view(stage);
    c.out.compute_scores = f.view(stage);
    c.masks = masks;
    c.stage = stage;
    return c;
  };
  internal::execute(internal::with_outputs_sized<T>(opt, call, s, a, l, f), opt.threads);
}

template <typename T, typename C = ComputeScalar<T>>
void check(const char* api, MatrixView<const T> q, MatrixView<const T> k, const MatrixView<const T>* v,
           abi::Output<T>* attn, abi::Output<C>* lse, const Options& opt, const Masks<T>& masks) {
  const internal::Slot<T> a{attn, "ATTN", "T_q x d_v", q.rows, v != nullptr ? v->cols : 0};
  const internal::Slot<C> l{lse, "LSE", "T_q x 1", q.rows, 1};
  internal::Call<T> c;
  c.api = api;
  c.form = internal::Form::Matrix;
  c.in = {internal::one_head(q), internal::one_head(k), std::nullopt};
  if (v != nullptr) c.in.v = internal::one_head(*v);
  c.out.attn = a.view(internal::Stage::BeforeSizing);
  c.out.lse = l.view(internal::Stage::BeforeSizing);
  c.masks = masks;
  c.stage = internal::Stage::BeforeSizing;
  internal::make_problem(c, opt);
}

}  // namespace

namespace abi {

#define EIGEN_ATTENTION_DEFINE_SINGLE_HEAD(T, L)                                                          \
  void attention(const char* api, MatrixView<const T> q, MatrixView<const T> k,                           \
                 const MatrixView<const T>* v, Output<T>* scores, Output<T>* attn, Output<L>* lse,        \
                 Output<L>* float_scores, const Options& opt, const Masks<T>& masks) {                    \
    forward(api, q, k, v, scores, attn, lse, float_scores, opt, masks);                                   \
  }                                                                                                       \
  void attention_check(const char* api, MatrixView<const T> q, MatrixView<const T> k,                     \
                       const MatrixView<const T>* v, Output<T>* attn, Output<L>* lse, const Options& opt, \
                       const Masks<T>& masks) {                                                           \
    check(api, q, k, v, attn, lse, opt, masks);                                                           \
  }
EIGEN_ATTENTION_DEFINE_SINGLE_HEAD(float, float)
EIGEN_ATTENTION_DEFINE_SINGLE_HEAD(double, double)
EIGEN_ATTENTION_DEFINE_SINGLE_HEAD(BFloat16Bits, float)
EIGEN_ATTENTION_DEFINE_SINGLE_HEAD(HalfBits, float)
#undef EIGEN_ATTENTION_DEFINE_SINGLE_HEAD

}  // namespace abi
}  // namespace EigenAttention
