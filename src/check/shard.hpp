// SPDX-License-Identifier: MIT
// The check of one rank's shard of a distributed call (EigenAttention::MPI, src/distributed/):
// the library's own validator (make_problem, call.hpp) on the real call, so that a shard is held
// to the same rules, messages, overlap rule and overflow-checked extents as a single-process
// call. Exported from the core library, in its abi:: namespace, for the component, which may link
// its shared form; not installed, not part of the API.
#pragma once

#include <EigenAttention/BackwardTerms.hpp>
#include <EigenAttention/HeadsView.hpp>
#include <EigenAttention/Masks.hpp>
#include <EigenAttention/Options.hpp>
#include <EigenAttention/Scalars.hpp>
#include <EigenAttention/export.hpp>

namespace EigenAttention {
namespace abi {

// check_shard: the forward on this rank's views, q [B, H, T_q,r, d_k], k and v, attn required,
// lse wanted when not empty, as attention_heads_into() checks them. check_shard_backward: the
// backward's, as attention_heads_backward_into() checks them (attn, lse and d_attn inputs; dq, dk
// and dv outputs). Masks::key_lengths are global (the whole sequence's T_k) and are left to the
// component's collective check. `api` starts every message: "EigenAttention::<api>: <what>".
// \throws std::invalid_argument; nothing is written.
#define EIGEN_ATTENTION_SHARD_CHECK(T, L)                                                              \
  EIGEN_ATTENTION_EXPORT void check_shard(const char* api, HeadsView<const T> q, HeadsView<const T> k, \
                                          HeadsView<const T> v, HeadsView<T> attn, HeadsView<L> lse,   \
                                          const Options& opt, const Masks<T>& masks);                  \
  EIGEN_ATTENTION_EXPORT void check_shard_backward(                                                    \
      const char* api, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,               \
      HeadsView<const T> attn, HeadsView<const L> lse, HeadsView<const T> d_attn, HeadsView<T> dq,     \
      HeadsView<T> dk, HeadsView<T> dv, const Options& opt, const Masks<T>& masks,                     \
      const BackwardTerms<T>& terms);

EIGEN_ATTENTION_SHARD_CHECK(float, float)
EIGEN_ATTENTION_SHARD_CHECK(double, double)
EIGEN_ATTENTION_SHARD_CHECK(BFloat16Bits, float)
EIGEN_ATTENTION_SHARD_CHECK(HalfBits, float)
#undef EIGEN_ATTENTION_SHARD_CHECK

}  // namespace abi
}  // namespace EigenAttention
