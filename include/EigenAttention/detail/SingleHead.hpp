// SPDX-License-Identifier: MIT
/// \file detail/SingleHead.hpp
/// The front door of every single-head call (Attention.hpp, Backward.hpp): compile-time checks of
/// the scalar types, views of the inputs, the check that no output to be resized is an input or
/// another output, and one call into the library (detail/AbiSingleHead.hpp), which validates,
/// sizes the resizable outputs through this translation unit, and computes. Not part of the
/// documented API.
#pragma once

#ifndef EIGEN_ATTENTION_PUBLIC_HEADER
#error \
    "EigenAttention: <EigenAttention/detail/SingleHead.hpp> is internal, include <EigenAttention/EigenAttention.hpp> (or another public header) instead"
#endif

#include <cstddef>
#include <limits>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include <EigenAttention/Masks.hpp>
#include <EigenAttention/Options.hpp>
#include <EigenAttention/Types.hpp>
#include <EigenAttention/detail/AbiMultiHead.hpp>
#include <EigenAttention/detail/AbiSingleHead.hpp>
#include <EigenAttention/detail/FrontDoor.hpp>

namespace EigenAttention {
namespace detail {

/// The output a front door's argument stands for.
enum class Role { Scores, Attn, Lse };

/// An output argument (a forwarding reference) and its role.
template <Role R, class Out>
struct OutputArg {
  Out&& out;
};
template <Role R, class Out>
OutputArg<R, Out> output(Out&& out) {
  return {std::forward<Out>(out)};
}

/// The MatrixView of a strided map as the compiled library takes it (Eigen's 16-bit types as
/// their bits).
template <class Map>
auto abi_view(const Map& m) {
  using Scalar = std::remove_const_t<std::remove_pointer_t<decltype(m.data())>>;
  using Element = std::conditional_t<std::is_const_v<std::remove_pointer_t<decltype(m.data())>>,
                                     const AbiScalar<Scalar>, AbiScalar<Scalar>>;
  return MatrixView<Element>{reinterpret_cast<Element*>(m.data()), static_cast<std::ptrdiff_t>(m.rows()),
                             static_cast<std::ptrdiff_t>(m.cols()),
                             static_cast<std::ptrdiff_t>(m.rowStride()),
                             static_cast<std::ptrdiff_t>(m.colStride())};
}

/// The abi::Output of an output argument: its storage as it is, and, for an Eigen::Matrix, the
/// function (compiled here, in the caller's translation unit) that resizes it.
template <class Out>
abi::Output<AbiScalar<ScalarOf<Out>>> abi_output(Out& out) {
  using Derived = OutputOf<Out>;
  using Abi = AbiScalar<ScalarOf<Out>>;
  static_assert(kIsWritable<Derived>,
                "EigenAttention: an output must be writable dense storage with direct access "
                "(an Eigen::Matrix, Map, Ref or a block of one)");
  Derived& o = const_cast<Derived&>(static_cast<const Derived&>(out.derived()));
  const auto view_of = [](Derived& m) {
    return MatrixView<Abi>{reinterpret_cast<Abi*>(m.data()), static_cast<std::ptrdiff_t>(m.rows()),
                           static_cast<std::ptrdiff_t>(m.cols()), static_cast<std::ptrdiff_t>(m.rowStride()),
                           static_cast<std::ptrdiff_t>(m.colStride())};
  };
  abi::Output<Abi> a;
  a.view = view_of(o);
  if constexpr (kIsResizable<Derived>) {
    a.matrix = &o;
    a.resize = [](void* matrix, std::ptrdiff_t rows, std::ptrdiff_t cols) {
      Derived& m = *static_cast<Derived*>(matrix);
      m.resize(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
      return MatrixView<Abi>{reinterpret_cast<Abi*>(m.data()), static_cast<std::ptrdiff_t>(m.rows()),
                             static_cast<std::ptrdiff_t>(m.cols()),
                             static_cast<std::ptrdiff_t>(m.rowStride()),
                             static_cast<std::ptrdiff_t>(m.colStride())};
    };
    a.compile_rows = Derived::RowsAtCompileTime == Eigen::Dynamic ? -1 : Derived::RowsAtCompileTime;
    a.compile_cols = Derived::ColsAtCompileTime == Eigen::Dynamic ? -1 : Derived::ColsAtCompileTime;
    a.max_elements = static_cast<std::ptrdiff_t>(std::numeric_limits<Eigen::Index>::max());
  }
  return a;
}

/// The compile-time checks of an output of role R for inputs of Scalar.
template <typename Scalar, Role R, class Out>
constexpr bool check_output() {
  (void)OutputCheck<Out>{};
  if constexpr (R == Role::Scores) {
    (void)ScoresCheck<Scalar, ScalarOf<Out>>{};
  } else if constexpr (R == Role::Lse) {
    (void)LseCheck<Scalar, ScalarOf<Out>>{};
  } else {
    (void)ScalarCheck<Scalar, ScalarOf<Out>>{};
  }
  return true;
}

/// The shape the output of role R must have.
template <Role R>
std::pair<Eigen::Index, Eigen::Index> shape_of(Eigen::Index tq, Eigen::Index tk, Eigen::Index dv) {
  return R == Role::Scores ? std::pair{tq, tk}
         : R == Role::Attn ? std::pair{tq, dv}
                           : std::pair{tq, Eigen::Index(1)};
}
constexpr const char* name_of(Role r) {
  return r == Role::Scores ? "scores" : r == Role::Attn ? "attn" : "lse";
}

/// The front door of every single-head forward: Q, K and V (null: attention_scores*) and the
/// outputs asked for, each with its role.
template <class DQ, class DK, class DV, Role... R, class... Outs>
void forward(const char* api, const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
             const Eigen::MatrixBase<DV>* V, const Options& opt, const Masks<typename DQ::Scalar>& masks,
             OutputArg<R, Outs>... outs) {
  using Scalar = typename DQ::Scalar;
  using Abi = AbiScalar<Scalar>;
  using Compute = ComputeScalar<Scalar>;
  (void)ScalarCheck<Scalar, typename DK::Scalar, typename DV::Scalar>{};
  (void)(check_output<Scalar, R, Outs>() && ...);
  InputView<DQ> q(Q.derived());
  InputView<DK> k(K.derived());
  std::optional<InputView<DV>> v;
  if (V != nullptr) v.emplace(V->derived());
  const Eigen::Index tq = Q.rows(), tk = K.rows(), dv = V != nullptr ? V->cols() : 0;
  // A resizable output that is an input or another output would free what the other views.
  if ((will_resize(outs.out, shape_of<R>(tq, tk, dv).first, shape_of<R>(tq, tk, dv).second) || ...)) {
    const Extent v_extent = v ? input_extent("V", *V, v->map()) : Extent{"V", nullptr, 0, 0, false};
    check_resizable_apart(api, {input_extent("Q", Q, q.map()), input_extent("K", K, k.map()), v_extent},
                          {output_extent(name_of(R), outs.out)...}, mask_extents(masks));
  }
  // Each output in its slot: SCORES of the compute type of a 16-bit input go to float_scores.
  abi::Output<Abi>* scores = nullptr;
  abi::Output<Abi>* attn = nullptr;
  abi::Output<AbiScalar<Compute>>* lse = nullptr;
  abi::Output<AbiScalar<Compute>>* float_scores = nullptr;
  auto slots = std::make_tuple(abi_output(outs.out)...);
  const auto bind = [&](auto role, auto& a) {
    using A = std::remove_reference_t<decltype(a)>;
    constexpr Role r = decltype(role)::value;
    if constexpr (r == Role::Attn) {
      attn = &a;
    } else if constexpr (r == Role::Lse) {
      lse = &a;
    } else if constexpr (std::is_same_v<A, abi::Output<Abi>>) {
      scores = &a;
    } else {
      float_scores = &a;
    }
  };
  std::apply([&](auto&... a) { (bind(std::integral_constant<Role, R>{}, a), ...); }, slots);
  const auto vv = v ? abi_view(v->map()) : MatrixView<const Abi>{};
  abi::attention(api, abi_view(q.map()), abi_view(k.map()), v ? &vv : nullptr, scores, attn, lse,
                 float_scores, opt, bits(masks));
}

/// The front door of both single-head backward calls: the forward's inputs and results, d_attn,
/// d_scores (null: not given), and the three gradients.
template <class DQ, class DK, class DV, class DA, class DL, class DG, class DS, class GQ, class GK, class GV>
void backward(const char* api, const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
              const Eigen::MatrixBase<DV>& V, const Eigen::MatrixBase<DA>& A, const Eigen::MatrixBase<DL>& L,
              const Eigen::MatrixBase<DG>& G, const Eigen::MatrixBase<DS>* S, GQ&& dq, GK&& dk, GV&& dv,
              const Options& opt, const Masks<typename DQ::Scalar>& masks,
              const BackwardTerms<typename DQ::Scalar>& terms) {
  using Scalar = typename DQ::Scalar;
  using Abi = AbiScalar<Scalar>;
  (void)ScalarCheck<Scalar, typename DK::Scalar, typename DV::Scalar, typename DA::Scalar,
                    typename DG::Scalar, typename DS::Scalar>{};
  (void)LseCheck<Scalar, typename DL::Scalar>{};
  (void)(check_output<Scalar, Role::Attn, GQ>() && check_output<Scalar, Role::Attn, GK>() &&
         check_output<Scalar, Role::Attn, GV>());
  InputView<DQ> q(Q.derived());
  InputView<DK> k(K.derived());
  InputView<DV> v(V.derived());
  InputView<DA> a(A.derived());
  InputView<DL> l(L.derived());
  InputView<DG> g(G.derived());
  std::optional<InputView<DS>> s;
  if (S != nullptr) s.emplace(S->derived());
  if (will_resize(dq, Q.rows(), Q.cols()) || will_resize(dk, K.rows(), K.cols()) ||
      will_resize(dv, V.rows(), V.cols())) {
    const Extent s_extent =
        s ? input_extent("d_scores", *S, s->map()) : Extent{"d_scores", nullptr, 0, 0, false};
    check_resizable_apart(api,
                          {input_extent("Q", Q, q.map()), input_extent("K", K, k.map()),
                           input_extent("V", V, v.map()), input_extent("attn", A, a.map()),
                           input_extent("lse", L, l.map()), input_extent("d_attn", G, g.map()), s_extent,
                           extent_of("terms.d_lse", nullptr, terms.d_lse.data, terms.d_lse.tokens, 1,
                                     terms.d_lse.token_stride, 1, false),
                           extent_of("terms.d_sinks", nullptr, terms.d_sinks, 1, 1, 1, 1, false)},
                          {output_extent("dq", dq), output_extent("dk", dk), output_extent("dv", dv)},
                          mask_extents(masks));
  }
  auto oq = abi_output(dq);
  auto ok = abi_output(dk);
  auto ov = abi_output(dv);
  const auto sv = s ? abi_view(s->map()) : MatrixView<const Abi>{};
  abi::attention_backward(api, abi_view(q.map()), abi_view(k.map()), abi_view(v.map()), abi_view(a.map()),
                          abi_view(l.map()), abi_view(g.map()), s ? &sv : nullptr, oq, ok, ov, opt,
                          bits(masks), bits(terms));
}

}  // namespace detail
}  // namespace EigenAttention
