// SPDX-License-Identifier: MIT
/// \file common.hpp
/// Glue between the tests and the library: the kernels to test, Options built from a mask,
/// and the long-double reference called with the same Options.
#pragma once

#include <EigenAttention/EigenAttention.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "reference.hpp"
#include "tolerance.hpp"

namespace ea_test {

namespace ea = EigenAttention;

template <class T>
using RowMatrix = ea::RowMatrix<T>;
template <class T>
using ColMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

/// A matrix of one row per token with heads of d elements side by side, as the view [1, H, T, d]
/// decode takes its queries in.
template <class Derived>
ea::HeadsView<const typename Derived::Scalar> side_by_side(const Eigen::MatrixBase<Derived>& m,
                                                           std::ptrdiff_t d) {
  return ea::HeadsView<const typename Derived::Scalar>::side_by_side(m.derived(), d);
}

/// Every kernel available here, then Kernel::Auto (which must behave like the first).
inline std::vector<ea::Kernel> kernels_under_test() {
  std::vector<ea::Kernel> ks = ea::available_kernels();
  ks.push_back(ea::Kernel::Auto);
  return ks;
}

inline ea::Options make_options(const MaskSpec& mask, std::optional<double> scale = std::nullopt,
                                ea::Kernel kernel = ea::Kernel::Auto) {
  ea::Options opt;
  opt.causal = mask.causal;
  opt.alignment = mask.bottom_right ? ea::CausalAlignment::BottomRight : ea::CausalAlignment::TopLeft;
  opt.scale = scale;
  opt.kernel = kernel;
  return opt;
}

/// The reference for the library's Options (the kernel does not matter to it).
template <class DQ, class DK, class DV>
ReferenceResult reference_for(const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
                              const Eigen::MatrixBase<DV>& V, const ea::Options& opt) {
  MaskSpec mask;
  mask.causal = opt.causal;
  mask.bottom_right = opt.alignment == ea::CausalAlignment::BottomRight;
  std::optional<long double> scale;
  if (opt.scale) scale = static_cast<long double>(*opt.scale);
  return reference_attention(Q, K, V, mask, scale);
}

/// The error budget of precision T for the problem `ref` describes.
template <class T>
Budget budget_for(const ReferenceResult& ref, Eigen::Index d_k) {
  return attention_budget<T>(ref.logit_magnitude, ref.max_abs_v, d_k, ref.scores.cols());
}

/// A readable name for a mask, for CAPTURE.
inline std::string mask_name(const MaskSpec& m) {
  if (!m.causal) return "non-causal";
  return m.bottom_right ? "causal bottom-right" : "causal top-left";
}

/// The three masks: none, causal top-left, causal bottom-right.
inline std::vector<MaskSpec> all_masks() {
  return {MaskSpec{false, false}, MaskSpec{true, false}, MaskSpec{true, true}};
}

template <class Derived>
bool all_finite(const Eigen::MatrixBase<Derived>& m) {
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j)
      if (!std::isfinite(static_cast<long double>(m(i, j)))) return false;
  return true;
}

template <class Derived>
bool any_nan(const Eigen::MatrixBase<Derived>& m) {
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j)
      if (std::isnan(static_cast<long double>(m(i, j)))) return true;
  return false;
}

/// merge_attention_into of two one-head partial results (out T_q x d_v, lse T_q x 1) into
/// `out` and `lse`.
template <class T>
void merge_one_head(const RowMatrix<T>& out_a, const RowMatrix<T>& lse_a, const RowMatrix<T>& out_b,
                    const RowMatrix<T>& lse_b, RowMatrix<T>& out, RowMatrix<T>& lse) {
  out.resize(out_a.rows(), out_a.cols());
  lse.resize(lse_a.rows(), 1);
  ea::merge_attention_into(ea::HeadsView<const T>::single(out_a), ea::HeadsView<const T>::single(lse_a),
                           ea::HeadsView<const T>::single(out_b), ea::HeadsView<const T>::single(lse_b),
                           ea::HeadsView<T>::single(out), ea::HeadsView<T>::single(lse));
}

/// CHECKs log-sum-exps of two computations against each other: -inf exactly where expected is,
/// else within tol * max(1, |expected|), tol a few ulps (an absolute bound near 0, a few ulps
/// of |LSE| elsewhere; not for a comparison with the exact LSE, whose error is absolute:
/// Budget::lse).
template <class A, class B>
void check_lse_near(const Eigen::DenseBase<A>& lse, const Eigen::DenseBase<B>& expected,
                    typename A::Scalar tol) {
  using T = typename A::Scalar;
  for (Eigen::Index i = 0; i < expected.size(); ++i) {
    if (std::isinf(expected(i))) {
      CHECK(lse(i) == expected(i));
    } else {
      CHECK(std::abs(lse(i) - expected(i)) <= tol * std::max(T(1), std::abs(expected(i))));
    }
  }
}

}  // namespace ea_test
