// SPDX-License-Identifier: MIT
// check_shard (shard.hpp): one rank's shard of a distributed call, as the real Call of the
// multi-head call it computes, through make_problem.
#include "check/shard.hpp"

#include "check/call.hpp"

namespace EigenAttention {
namespace internal {
namespace {

template <typename T>
Masks<T> shard_masks(const Masks<T>& masks) {
  Masks<T> m = masks;
  m.key_lengths = nullptr;  // global: checked against the whole sequence by the component
  m.block_mask = {};        // the same
  return m;
}

template <typename T, typename L = ComputeScalar<T>>
void forward(const char* api, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
             HeadsView<T> attn, HeadsView<L> lse, const Options& opt, const Masks<T>& masks) {
  Call<T> c;
  c.api = api;
  c.form = Form::Heads;
  c.in = {q, k, v};
  c.out.attn = attn;
  if (!lse.empty()) c.out.lse = lse;
  c.masks = shard_masks(masks);
  (void)make_problem(c, opt);
}

template <typename T, typename L = ComputeScalar<T>>
void backward(const char* api, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
              HeadsView<const T> attn, HeadsView<const L> lse, HeadsView<const T> d_attn, HeadsView<T> dq,
              HeadsView<T> dk, HeadsView<T> dv, const Options& opt, const Masks<T>& masks,
              const BackwardTerms<T>& terms) {
  Call<T> c;
  c.api = api;
  c.form = Form::Heads;
  c.in = {q, k, v};
  Gradients<T> g;
  g.attn = attn, g.lse = lse, g.d_attn = d_attn;
  g.dq = dq, g.dk = dk, g.dv = dv;
  g.terms = terms;
  c.backward = g;
  c.masks = shard_masks(masks);
  (void)make_problem(c, opt);
}

}  // namespace
}  // namespace internal

namespace abi {

#define EIGEN_ATTENTION_DEFINE_SHARD_CHECK(T, L)                                                          \
  void check_shard(const char* api, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,     \
                   HeadsView<T> attn, HeadsView<L> lse, const Options& opt, const Masks<T>& masks) {      \
    internal::forward(api, q, k, v, attn, lse, opt, masks);                                               \
  }                                                                                                       \
  void check_shard_backward(const char* api, HeadsView<const T> q, HeadsView<const T> k,                  \
                            HeadsView<const T> v, HeadsView<const T> attn, HeadsView<const L> lse,        \
                            HeadsView<const T> d_attn, HeadsView<T> dq, HeadsView<T> dk, HeadsView<T> dv, \
                            const Options& opt, const Masks<T>& masks, const BackwardTerms<T>& terms) {   \
    internal::backward(api, q, k, v, attn, lse, d_attn, dq, dk, dv, opt, masks, terms);                   \
  }

EIGEN_ATTENTION_DEFINE_SHARD_CHECK(float, float)
EIGEN_ATTENTION_DEFINE_SHARD_CHECK(double, double)
EIGEN_ATTENTION_DEFINE_SHARD_CHECK(BFloat16Bits, float)
EIGEN_ATTENTION_DEFINE_SHARD_CHECK(HalfBits, float)
#undef EIGEN_ATTENTION_DEFINE_SHARD_CHECK

}  // namespace abi
}  // namespace EigenAttention
