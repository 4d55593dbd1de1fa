// SPDX-License-Identifier: MIT
/// \file detail/Distributed.hpp
/// What the front doors of Distributed.hpp use and do not document: the calls on 16-bit views
/// across the boundary into the MPI component (abi::, on the boundary types BFloat16Bits and
/// HalfBits, log-sum-exps in float), and the helpers of the one-head front doors. Installed with
/// the MPI component only, as Distributed.hpp is. Not part of the documented API: call the front
/// doors.
#pragma once

#ifndef EIGEN_ATTENTION_DISTRIBUTED_CALLS_DECLARED
#error \
    "EigenAttention: <EigenAttention/detail/Distributed.hpp> is internal, include <EigenAttention/EigenAttention.hpp> (or another public header: this one's is <EigenAttention/Distributed.hpp>) instead"
#endif

#include <mpi.h>

#include <cstddef>
#include <type_traits>

#include <Eigen/Core>

#include <EigenAttention/BackwardTerms.hpp>
#include <EigenAttention/HeadsView.hpp>
#include <EigenAttention/Masks.hpp>
#include <EigenAttention/Options.hpp>
#include <EigenAttention/Scalars.hpp>
#include <EigenAttention/Types.hpp>
#include <EigenAttention/detail/AbiMultiHead.hpp>
#include <EigenAttention/detail/FrontDoor.hpp>
#include <EigenAttention/detail/SingleHead.hpp>

namespace EigenAttention {
namespace distributed {
namespace abi {

// The four distributed calls on views of T, whose log-sum-exps are of type L: as the float and
// double ones of Distributed.hpp (computed in float, results rounded once).
#define EIGEN_ATTENTION_ABI_DISTRIBUTED(T, L)                                                            \
  void ring_attention_heads_into(MPI_Comm comm, HeadsView<const T> q, HeadsView<const T> k,              \
                                 HeadsView<const T> v, HeadsView<T> attn, HeadsView<L> lse,              \
                                 const Options& opt, const Masks<T>& masks, const Config& config);       \
  void ring_attention_heads_backward_into(                                                               \
      MPI_Comm comm, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,                   \
      HeadsView<const T> attn, HeadsView<const L> lse, HeadsView<const T> d_attn, HeadsView<T> dq,       \
      HeadsView<T> dk, HeadsView<T> dv, const Options& opt, const Masks<T>& masks, const Config& config, \
      const BackwardTerms<T>& terms);                                                                    \
  void ulysses_attention_heads_into(MPI_Comm comm, HeadsView<const T> q, HeadsView<const T> k,           \
                                    HeadsView<const T> v, HeadsView<T> attn, HeadsView<L> lse,           \
                                    const Options& opt, const Masks<T>& masks, const Config& config);    \
  void ulysses_attention_heads_backward_into(                                                            \
      MPI_Comm comm, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,                   \
      HeadsView<const T> attn, HeadsView<const L> lse, HeadsView<const T> d_attn, HeadsView<T> dq,       \
      HeadsView<T> dk, HeadsView<T> dv, const Options& opt, const Masks<T>& masks, const Config& config, \
      const BackwardTerms<T>& terms);

EIGEN_ATTENTION_ABI_DISTRIBUTED(BFloat16Bits, float)
EIGEN_ATTENTION_ABI_DISTRIBUTED(HalfBits, float)
#undef EIGEN_ATTENTION_ABI_DISTRIBUTED

}  // namespace abi

namespace detail {

/// A matrix map as the [1, 1, T, d] view of one head (HeadsView::single).
template <class Derived>
HeadsView<const typename Derived::Scalar> single(const ConstStridedMap<typename Derived::Scalar>& m) {
  return HeadsView<const typename Derived::Scalar>::single(m);
}
/// Enables a multi-head distributed front door for views of float or double (const or not).
template <typename Q>
using EnableIfFloatOrDouble = std::enable_if_t<
    std::is_same_v<std::remove_const_t<Q>, float> || std::is_same_v<std::remove_const_t<Q>, double>, int>;
/// Enables one for views of Eigen::bfloat16 or Eigen::half (const or not).
template <typename Q>
using EnableIfLowPrecision = std::enable_if_t<kIsLowPrecision<std::remove_const_t<Q>>, int>;

/// The one-head front doors take float or double.
template <typename Scalar>
struct DistributedScalarCheck {
  static_assert(std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double>,
                "EigenAttention: the distributed calls take float or double");
};

/// Which algorithm a one-head front door runs.
enum class Method { Ring, Ulysses };

/// The multi-head forward of `method` (lse may be empty).
template <typename Scalar>
void forward_heads(Method method, MPI_Comm comm, HeadsView<const Scalar> q, HeadsView<const Scalar> k,
                   HeadsView<const Scalar> v, HeadsView<Scalar> attn, HeadsView<Scalar> lse,
                   const Options& opt, const Masks<Scalar>& masks, const Config& config) {
  if (method == Method::Ring) {
    ring_attention_heads_into(comm, q, k, v, attn, lse, opt, masks, config);
  } else {
    ulysses_attention_heads_into(comm, q, k, v, attn, lse, opt, masks, config);
  }
}

/// The one-head forward into caller storage: `attn` (T_q,r x d_v) and, when `lse` is not null,
/// `*lse` (T_q,r entries; DL is its pointer type, or std::nullptr_t), each an Eigen matrix (resized when
/// needed, after this rank's own arguments are checked), a Map, Ref or block.
template <class DQ, class DK, class DV, class DO, class DL>
void forward_one_into(Method method, const char* api, MPI_Comm comm, const Eigen::MatrixBase<DQ>& Q,
                      const Eigen::MatrixBase<DK>& K, const Eigen::MatrixBase<DV>& V, DO&& attn, DL lse,
                      const Options& opt, const Masks<typename DQ::Scalar>& masks, const Config& config) {
  using Scalar = typename DQ::Scalar;
  (void)EigenAttention::detail::ScalarCheck<Scalar, typename DK::Scalar, typename DV::Scalar,
                                            EigenAttention::detail::ScalarOf<DO>>{};
  (void)DistributedScalarCheck<Scalar>{};
  (void)EigenAttention::detail::OutputCheck<DO>{};
  EigenAttention::detail::InputView<DQ> q(Q.derived());
  EigenAttention::detail::InputView<DK> k(K.derived());
  EigenAttention::detail::InputView<DV> v(V.derived());
  bool resize = EigenAttention::detail::will_resize(attn, Q.rows(), V.cols());
  if constexpr (!std::is_same_v<DL, std::nullptr_t>) {
    (void)EigenAttention::detail::ScalarCheck<Scalar,
                                              EigenAttention::detail::ScalarOf<std::remove_pointer_t<DL>&>>{};
    (void)EigenAttention::detail::OutputCheck<std::remove_pointer_t<DL>&>{};
    resize = resize || EigenAttention::detail::will_resize(*lse, Q.rows(), 1);
  }
  if (resize) {
    // This rank's own arguments, as the core checks them, before anything is resized (key
    // lengths are global and checked by the collective call).
    Masks<Scalar> local = masks;
    local.key_lengths = nullptr;
    auto fa = EigenAttention::detail::abi_output(attn);
    const auto vv = EigenAttention::detail::abi_view(v.map());
    const auto qv = EigenAttention::detail::abi_view(q.map()), kv = EigenAttention::detail::abi_view(k.map());
    const Masks<AbiScalar<Scalar>> bits = EigenAttention::detail::bits(local);
    if constexpr (std::is_same_v<DL, std::nullptr_t>) {
      EigenAttention::abi::attention_check(api, qv, kv, &vv, &fa, nullptr, opt, bits);
    } else {
      auto fl = EigenAttention::detail::abi_output(*lse);
      EigenAttention::abi::attention_check(api, qv, kv, &vv, &fa, &fl, opt, bits);
    }
    if constexpr (std::is_same_v<DL, std::nullptr_t>) {
      EigenAttention::detail::check_resizable_apart(api,
                                                    {EigenAttention::detail::input_extent("Q", Q, q.map()),
                                                     EigenAttention::detail::input_extent("K", K, k.map()),
                                                     EigenAttention::detail::input_extent("V", V, v.map())},
                                                    {EigenAttention::detail::output_extent("attn", attn)},
                                                    EigenAttention::detail::mask_extents(masks));
    } else {
      EigenAttention::detail::check_resizable_apart(api,
                                                    {EigenAttention::detail::input_extent("Q", Q, q.map()),
                                                     EigenAttention::detail::input_extent("K", K, k.map()),
                                                     EigenAttention::detail::input_extent("V", V, v.map())},
                                                    {EigenAttention::detail::output_extent("attn", attn),
                                                     EigenAttention::detail::output_extent("lse", *lse)},
                                                    EigenAttention::detail::mask_extents(masks));
    }
  }
  auto o = EigenAttention::detail::output_view(attn, Q.rows(), V.cols());
  HeadsView<Scalar> l;
  if constexpr (!std::is_same_v<DL, std::nullptr_t>) {
    auto lv = EigenAttention::detail::output_view(*lse, Q.rows(), 1);
    l = HeadsView<Scalar>::single(lv);
  }
  forward_heads<Scalar>(method, comm, single<DQ>(q.map()), single<DK>(k.map()), single<DV>(v.map()),
                        HeadsView<Scalar>::single(o), l, opt, masks, config);
}

/// The one-head backward: the gradients, freshly allocated.
template <class DQ, class DK, class DV, class DA, class DL, class DG>
Gradients<typename DQ::Scalar> backward_one(Method method, MPI_Comm comm, const Eigen::MatrixBase<DQ>& Q,
                                            const Eigen::MatrixBase<DK>& K, const Eigen::MatrixBase<DV>& V,
                                            const Eigen::MatrixBase<DA>& attn,
                                            const Eigen::MatrixBase<DL>& lse,
                                            const Eigen::MatrixBase<DG>& d_attn, const Options& opt,
                                            const Masks<typename DQ::Scalar>& masks, const Config& config,
                                            const BackwardTerms<typename DQ::Scalar>& terms) {
  using Scalar = typename DQ::Scalar;
  (void)EigenAttention::detail::ScalarCheck<Scalar, typename DK::Scalar, typename DV::Scalar,
                                            typename DA::Scalar, typename DL::Scalar, typename DG::Scalar>{};
  (void)DistributedScalarCheck<Scalar>{};
  EigenAttention::detail::InputView<DQ> q(Q.derived());
  EigenAttention::detail::InputView<DK> k(K.derived());
  EigenAttention::detail::InputView<DV> v(V.derived());
  EigenAttention::detail::InputView<DA> a(attn.derived());
  EigenAttention::detail::InputView<DL> l(lse.derived());
  EigenAttention::detail::InputView<DG> g(d_attn.derived());
  Gradients<Scalar> grads{RowMatrix<Scalar>(Q.rows(), Q.cols()), RowMatrix<Scalar>(K.rows(), K.cols()),
                          RowMatrix<Scalar>(V.rows(), V.cols())};
  if (method == Method::Ring) {
    ring_attention_heads_backward_into(
        comm, single<DQ>(q.map()), single<DK>(k.map()), single<DV>(v.map()), single<DA>(a.map()),
        single<DL>(l.map()), single<DG>(g.map()), HeadsView<Scalar>::single(grads.dq),
        HeadsView<Scalar>::single(grads.dk), HeadsView<Scalar>::single(grads.dv), opt, masks, config, terms);
  } else {
    ulysses_attention_heads_backward_into(
        comm, single<DQ>(q.map()), single<DK>(k.map()), single<DV>(v.map()), single<DA>(a.map()),
        single<DL>(l.map()), single<DG>(g.map()), HeadsView<Scalar>::single(grads.dq),
        HeadsView<Scalar>::single(grads.dk), HeadsView<Scalar>::single(grads.dv), opt, masks, config, terms);
  }
  return grads;
}

}  // namespace detail
}  // namespace distributed
}  // namespace EigenAttention
