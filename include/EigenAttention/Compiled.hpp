// SPDX-License-Identifier: MIT
/// \file Compiled.hpp
/// The compiled entry points behind the template front doors of Attention.hpp.
///
/// The library is compiled once, for `float`, `double` and the 16-bit storage types (as their
/// bits: BFloat16Bits, HalfBits of Scalars.hpp); what it takes and writes crosses the
/// boundary as MatrixView (a pointer, sizes and strides: no Eigen object), so one compiled
/// function serves row- and column-major matrices, maps and blocks, and nothing depends on the
/// flags your code is compiled with. Every Eigen object you hold is allocated by code compiled
/// in your own translation unit (the inline functions below), never by the library.
///
/// Most callers use Attention.hpp instead. Call these when you hold raw buffers with known
/// strides: the exported functions take MatrixView, and the inline templates take the strided
/// Eigen maps of Types.hpp. They validate their arguments (the only place that does) and throw
/// std::invalid_argument naming the shapes when something does not fit. The semantics are those
/// documented in Attention.hpp.
#pragma once

#include <cstddef>
#include <limits>
#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include <EigenAttention/Masks.hpp>
#include <EigenAttention/Options.hpp>
#include <EigenAttention/Types.hpp>
#include <EigenAttention/detail/AbiMultiHead.hpp>
#include <EigenAttention/export.hpp>

namespace EigenAttention {
namespace compiled {

/// \name Exported functions (plain views)
/// One overload per scalar type, compiled in the library. `api` names the public call in error
/// messages (e.g. "attention_into").
///@{

/// Checks a call as run() would, before a front door resizes its outputs: the inputs against
/// each other, `opt` and `masks`, and the outputs that are given (not null: those that will not be
/// resized) for their shapes and overlaps. Outputs left null are not required (the front door
/// sizes them afterwards).
/// \throws std::invalid_argument naming the shapes or the value at fault.
EIGEN_ATTENTION_EXPORT void validate(const char* api, MatrixView<const float> q, MatrixView<const float> k,
                                     const MatrixView<const float>* v, const MatrixView<float>* scores,
                                     const MatrixView<float>* attn, const MatrixView<float>* lse,
                                     const Options& opt, const Masks<float>& masks);
/// \overload
/// The same check for double.
EIGEN_ATTENTION_EXPORT void validate(const char* api, MatrixView<const double> q, MatrixView<const double> k,
                                     const MatrixView<const double>* v, const MatrixView<double>* scores,
                                     const MatrixView<double>* attn, const MatrixView<double>* lse,
                                     const Options& opt, const Masks<double>& masks);
/// \overload
/// The same check for bfloat16 inputs (SCORES in bfloat16 or, as float_scores, in float).
EIGEN_ATTENTION_EXPORT void validate(const char* api, MatrixView<const BFloat16Bits> q,
                                     MatrixView<const BFloat16Bits> k,
                                     const MatrixView<const BFloat16Bits>* v,
                                     const MatrixView<BFloat16Bits>* scores,
                                     const MatrixView<BFloat16Bits>* attn, const MatrixView<float>* lse,
                                     const MatrixView<float>* float_scores, const Options& opt,
                                     const Masks<BFloat16Bits>& masks);
/// \overload
/// The same check for half inputs.
EIGEN_ATTENTION_EXPORT void validate(const char* api, MatrixView<const HalfBits> q,
                                     MatrixView<const HalfBits> k, const MatrixView<const HalfBits>* v,
                                     const MatrixView<HalfBits>* scores, const MatrixView<HalfBits>* attn,
                                     const MatrixView<float>* lse, const MatrixView<float>* float_scores,
                                     const Options& opt, const Masks<HalfBits>& masks);

/// Computes what is asked for into caller storage: SCORES (T_q x T_k) into `*scores`, ATTN
/// (T_q x d_v) into `*attn` and the log-sum-exps (T_q x 1) into `*lse`, each when not null
/// (`v` may be null only when `attn` is). At least one of `scores` and `attn` must be given.
/// Allocates nothing once the calling thread's small workspace has grown (Kernel::Reference
/// aside). \throws std::invalid_argument for bad shapes or options, outputs of the wrong shape,
/// or outputs that overlap an input or each other; nothing is written then.
EIGEN_ATTENTION_EXPORT void run(const char* api, MatrixView<const float> q, MatrixView<const float> k,
                                const MatrixView<const float>* v, const MatrixView<float>* scores,
                                const MatrixView<float>* attn, const MatrixView<float>* lse,
                                const Options& opt, const Masks<float>& masks);
/// \overload
/// The same computation for double.
EIGEN_ATTENTION_EXPORT void run(const char* api, MatrixView<const double> q, MatrixView<const double> k,
                                const MatrixView<const double>* v, const MatrixView<double>* scores,
                                const MatrixView<double>* attn, const MatrixView<double>* lse,
                                const Options& opt, const Masks<double>& masks);
/// \overload
/// The same computation for bfloat16 inputs, in float: ATTN rounded to bfloat16, the LSE in
/// float, SCORES into `*scores` (rounded) or `*float_scores` (float), at most one of them.
EIGEN_ATTENTION_EXPORT void run(const char* api, MatrixView<const BFloat16Bits> q,
                                MatrixView<const BFloat16Bits> k, const MatrixView<const BFloat16Bits>* v,
                                const MatrixView<BFloat16Bits>* scores, const MatrixView<BFloat16Bits>* attn,
                                const MatrixView<float>* lse, const MatrixView<float>* float_scores,
                                const Options& opt, const Masks<BFloat16Bits>& masks);
/// \overload
/// The same computation for half inputs, in float.
EIGEN_ATTENTION_EXPORT void run(const char* api, MatrixView<const HalfBits> q, MatrixView<const HalfBits> k,
                                const MatrixView<const HalfBits>* v, const MatrixView<HalfBits>* scores,
                                const MatrixView<HalfBits>* attn, const MatrixView<float>* lse,
                                const MatrixView<float>* float_scores, const Options& opt,
                                const Masks<HalfBits>& masks);

/// The inputs of a backward call (Backward.hpp), as views: the forward's Q (T_q x d_k),
/// K (T_k x d_k), V (T_k x d_v), its ATTN (T_q x d_v) and LSE (T_q x 1), d_attn = dL/dATTN
/// (T_q x d_v) and, when `has_d_scores`, d_scores = dL/dSCORES (T_q x T_k).
template <typename Scalar>
struct BackwardInputs {
  MatrixView<const Scalar> q;                   ///< the forward's Q (T_q x d_k)
  MatrixView<const Scalar> k;                   ///< the forward's K (T_k x d_k)
  MatrixView<const Scalar> v;                   ///< the forward's V (T_k x d_v)
  MatrixView<const Scalar> attn;                ///< the forward's ATTN (T_q x d_v)
  MatrixView<const ComputeScalar<Scalar>> lse;  ///< the forward's LSE (T_q x 1), in the compute type
  MatrixView<const Scalar> d_attn;              ///< dL/dATTN (T_q x d_v)
  MatrixView<const Scalar> d_scores;            ///< dL/dSCORES (T_q x T_k), read when has_d_scores
  bool has_d_scores = false;                    ///< is d_scores given?
};

/// Checks a backward call as backward() would, before a front door resizes its outputs: the
/// inputs, and the gradients that are given (not null: those that will not be resized), as
/// validate() does for the forward. The front doors call it before resizing any output.
/// \throws std::invalid_argument naming the shapes or the value at fault.
EIGEN_ATTENTION_EXPORT void validate_backward(const char* api, const BackwardInputs<float>& in,
                                              const MatrixView<float>* dq, const MatrixView<float>* dk,
                                              const MatrixView<float>* dv, const Options& opt,
                                              const Masks<float>& masks);
/// \overload
/// The same check for double.
EIGEN_ATTENTION_EXPORT void validate_backward(const char* api, const BackwardInputs<double>& in,
                                              const MatrixView<double>* dq, const MatrixView<double>* dk,
                                              const MatrixView<double>* dv, const Options& opt,
                                              const Masks<double>& masks);
/// \overload
/// The same check for bfloat16.
EIGEN_ATTENTION_EXPORT void validate_backward(const char* api, const BackwardInputs<BFloat16Bits>& in,
                                              const MatrixView<BFloat16Bits>* dq,
                                              const MatrixView<BFloat16Bits>* dk,
                                              const MatrixView<BFloat16Bits>* dv, const Options& opt,
                                              const Masks<BFloat16Bits>& masks);
/// \overload
/// The same check for half.
EIGEN_ATTENTION_EXPORT void validate_backward(const char* api, const BackwardInputs<HalfBits>& in,
                                              const MatrixView<HalfBits>* dq, const MatrixView<HalfBits>* dk,
                                              const MatrixView<HalfBits>* dv, const Options& opt,
                                              const Masks<HalfBits>& masks);

/// Writes the gradients dL/dQ (T_q x d_k) into `dq`, dL/dK (T_k x d_k) into `dk` and dL/dV
/// (T_k x d_v) into `dv`. Allocates nothing once the workspaces have grown (Kernel::Reference
/// aside). \throws std::invalid_argument for bad shapes or options, outputs of the wrong shape,
/// or outputs that overlap an input or each other; nothing is written then.
EIGEN_ATTENTION_EXPORT void backward(const char* api, const BackwardInputs<float>& in,
                                     const MatrixView<float>& dq, const MatrixView<float>& dk,
                                     const MatrixView<float>& dv, const Options& opt,
                                     const Masks<float>& masks);
/// \overload
/// The same computation for double.
EIGEN_ATTENTION_EXPORT void backward(const char* api, const BackwardInputs<double>& in,
                                     const MatrixView<double>& dq, const MatrixView<double>& dk,
                                     const MatrixView<double>& dv, const Options& opt,
                                     const Masks<double>& masks);
/// \overload
/// The same computation for bfloat16, in float (see docs/low_precision.md); the gradients
/// are rounded to bfloat16.
EIGEN_ATTENTION_EXPORT void backward(const char* api, const BackwardInputs<BFloat16Bits>& in,
                                     const MatrixView<BFloat16Bits>& dq, const MatrixView<BFloat16Bits>& dk,
                                     const MatrixView<BFloat16Bits>& dv, const Options& opt,
                                     const Masks<BFloat16Bits>& masks);
/// \overload
/// The same computation for half, in float.
EIGEN_ATTENTION_EXPORT void backward(const char* api, const BackwardInputs<HalfBits>& in,
                                     const MatrixView<HalfBits>& dq, const MatrixView<HalfBits>& dk,
                                     const MatrixView<HalfBits>& dv, const Options& opt,
                                     const Masks<HalfBits>& masks);

/// Throws std::invalid_argument (naming `api`, the result `name` and its shape `what`, e.g.
/// "T_q x T_k") unless a rows x cols result of `element_bytes`-byte elements can be counted:
/// its byte count fits std::ptrdiff_t and its element count is at most `max_elements` (the
/// largest size the caller's Eigen::Index holds). Called before a by-value result is allocated.
EIGEN_ATTENTION_EXPORT void check_result_size(const char* api, const char* name, const char* what,
                                              std::ptrdiff_t rows, std::ptrdiff_t cols,
                                              std::size_t element_bytes, std::ptrdiff_t max_elements);

/// Asks the OS to back [data, data + bytes) with huge pages when it is large (a T_q x T_k SCORES
/// result: thousands of page faults fewer). Only a hint; never fails.
EIGEN_ATTENTION_EXPORT void prefer_huge_pages(void* data, std::size_t bytes);
///@}

/// The MatrixView of a strided Eigen map (ConstStridedMap, StridedMap, or any Map/Matrix with
/// direct access: its data(), sizes and strides).
template <class Derived>
MatrixView<std::remove_pointer_t<decltype(std::declval<Derived&>().data())>> view(Derived& m) {
  return {m.data(), static_cast<std::ptrdiff_t>(m.rows()), static_cast<std::ptrdiff_t>(m.cols()),
          static_cast<std::ptrdiff_t>(m.rowStride()), static_cast<std::ptrdiff_t>(m.colStride())};
}

/// The writable MatrixView of an output map (outputs arrive as `const StridedMap&`, Eigen's
/// idiom for writable views).
template <typename Scalar>
MatrixView<Scalar> view(const StridedMap<Scalar>& m) {
  return {const_cast<Scalar*>(m.data()), static_cast<std::ptrdiff_t>(m.rows()),
          static_cast<std::ptrdiff_t>(m.cols()), static_cast<std::ptrdiff_t>(m.rowStride()),
          static_cast<std::ptrdiff_t>(m.colStride())};
}

/// A view as the compiled library takes it: a view of Eigen::bfloat16 or Eigen::half becomes one
/// of its bits (BFloat16Bits, HalfBits); float and double views stay as they are.
template <typename Scalar>
MatrixView<AbiScalar<Scalar>> abi(const MatrixView<Scalar>& m) {
  return {reinterpret_cast<AbiScalar<Scalar>*>(m.data), m.rows, m.cols, m.row_stride, m.col_stride};
}

namespace detail {

/// run() for any scalar type (or, with `check_only`, validate() of the same arguments): the views
/// of Eigen's 16-bit types as their bits, and SCORES of the compute type (float_scores) where the
/// input type has its own.
template <typename Scalar>
void run_any(bool check_only, const char* api, MatrixView<const Scalar> q, MatrixView<const Scalar> k,
             const MatrixView<const Scalar>* v, const MatrixView<Scalar>* scores,
             const MatrixView<Scalar>* attn, const MatrixView<ComputeScalar<Scalar>>* lse,
             const MatrixView<ComputeScalar<Scalar>>* float_scores, const Options& opt,
             const Masks<Scalar>& masks) {
  using Abi = AbiScalar<Scalar>;
  const MatrixView<const Abi> va = v != nullptr ? abi(*v) : MatrixView<const Abi>{};
  const MatrixView<Abi> sa = scores != nullptr ? abi(*scores) : MatrixView<Abi>{};
  const MatrixView<Abi> aa = attn != nullptr ? abi(*attn) : MatrixView<Abi>{};
  if constexpr (kIsLowPrecision<Scalar>) {
    const auto call = [&](auto f) {
      f(api, abi(q), abi(k), v != nullptr ? &va : nullptr, scores != nullptr ? &sa : nullptr,
        attn != nullptr ? &aa : nullptr, lse, float_scores, opt, EigenAttention::detail::bits(masks));
    };
    if (check_only) {
      call([](auto&&... a) { compiled::validate(a...); });
    } else {
      call([](auto&&... a) { compiled::run(a...); });
    }
  } else {
    const MatrixView<Abi>* s = scores != nullptr ? &sa : float_scores;
    if (check_only) {
      compiled::validate(api, q, k, v != nullptr ? &va : nullptr, s, attn != nullptr ? &aa : nullptr, lse,
                         opt, masks);
    } else {
      compiled::run(api, q, k, v != nullptr ? &va : nullptr, s, attn != nullptr ? &aa : nullptr, lse, opt,
                    masks);
    }
  }
}

/// check_result_size() for a result of Scalar sized by this translation unit's Eigen::Index.
template <typename Scalar>
void check_result(const char* api, const char* name, const char* what, std::ptrdiff_t rows,
                  std::ptrdiff_t cols) {
  check_result_size(api, name, what, rows, cols, sizeof(Scalar),
                    static_cast<std::ptrdiff_t>(std::numeric_limits<Eigen::Index>::max()));
}

/// A new row-major result matrix, allocated here (in the caller's translation unit).
template <typename Scalar>
RowMatrix<Scalar> result(std::ptrdiff_t rows, std::ptrdiff_t cols) {
  return RowMatrix<Scalar>(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
}

}  // namespace detail

/// \name Inline forms on strided Eigen maps
/// Compiled into your translation unit; they allocate the by-value results here and call the
/// exported functions above.
///@{

/// Checks the inputs as validate() above (V is optional), before by-value results are allocated.
template <typename Scalar>
void validate(const char* api, const ConstStridedMap<Scalar>& q, const ConstStridedMap<Scalar>& k,
              const ConstStridedMap<Scalar>* v, const Options& opt, const Masks<Scalar>& masks = {}) {
  const MatrixView<const Scalar> vv = v != nullptr ? view(*v) : MatrixView<const Scalar>{};
  detail::run_any<Scalar>(true, api, view(q), view(k), v != nullptr ? &vv : nullptr, nullptr, nullptr,
                          nullptr, nullptr, opt, masks);
}

/// Checks a call into caller storage as validate() above, before its front door resizes the
/// outputs: `scores`, `attn` and `lse` are those outputs that will not be resized (null: will be,
/// or not asked for). SCORES may be of the input type or of the compute type.
template <typename Scalar, typename ScoresScalar = Scalar>
void validate_into(const char* api, const ConstStridedMap<Scalar>& q, const ConstStridedMap<Scalar>& k,
                   const ConstStridedMap<Scalar>* v, const StridedMap<ScoresScalar>* scores,
                   const StridedMap<Scalar>* attn, const StridedMap<ComputeScalar<Scalar>>* lse,
                   const Options& opt, const Masks<Scalar>& masks) {
  using Compute = ComputeScalar<Scalar>;
  const MatrixView<const Scalar> vv = v != nullptr ? view(*v) : MatrixView<const Scalar>{};
  const MatrixView<ScoresScalar> s = scores != nullptr ? view(*scores) : MatrixView<ScoresScalar>{};
  const MatrixView<Scalar> a = attn != nullptr ? view(*attn) : MatrixView<Scalar>{};
  const MatrixView<Compute> l = lse != nullptr ? view(*lse) : MatrixView<Compute>{};
  const MatrixView<Compute>* lp = lse != nullptr ? &l : nullptr;
  const MatrixView<Scalar>* ap = attn != nullptr ? &a : nullptr;
  if constexpr (std::is_same_v<ScoresScalar, Scalar>) {
    detail::run_any<Scalar>(true, api, view(q), view(k), v != nullptr ? &vv : nullptr,
                            scores != nullptr ? &s : nullptr, ap, lp, nullptr, opt, masks);
  } else {
    detail::run_any<Scalar>(true, api, view(q), view(k), v != nullptr ? &vv : nullptr, nullptr, ap, lp,
                            scores != nullptr ? &s : nullptr, opt, masks);
  }
}

/// ATTN (T_q x d_v), never forming T_q x T_k (unless opt.kernel is Kernel::Reference).
template <typename Scalar>
RowMatrix<Scalar> attention(const ConstStridedMap<Scalar>& q, const ConstStridedMap<Scalar>& k,
                            const ConstStridedMap<Scalar>& v, const Options& opt,
                            const Masks<Scalar>& masks = {}) {
  const char* api = "attention";
  const MatrixView<const Scalar> qv = view(q), kv = view(k), vv = view(v);
  validate<Scalar>(api, q, k, &v, opt, masks);
  detail::check_result<Scalar>(api, "ATTN", "T_q x d_v", qv.rows, vv.cols);
  RowMatrix<Scalar> attn = detail::result<Scalar>(qv.rows, vv.cols);
  const MatrixView<Scalar> a = view(attn);
  detail::run_any<Scalar>(false, api, qv, kv, &vv, nullptr, &a, nullptr, nullptr, opt, masks);
  return attn;
}

/// ATTN into `out` (T_q x d_v) and, when `lse` is not null, the log-sum-exps into `*lse`
/// (T_q x 1, of the compute type). \throws std::invalid_argument as run().
template <typename Scalar>
void attention_into(const ConstStridedMap<Scalar>& q, const ConstStridedMap<Scalar>& k,
                    const ConstStridedMap<Scalar>& v, const StridedMap<Scalar>& out,
                    const StridedMap<ComputeScalar<Scalar>>* lse, const Options& opt,
                    const Masks<Scalar>& masks = {}) {
  const MatrixView<const Scalar> vv = view(v);
  const MatrixView<Scalar> o = view(out);
  const MatrixView<ComputeScalar<Scalar>> l =
      lse != nullptr ? view(*lse) : MatrixView<ComputeScalar<Scalar>>{};
  detail::run_any<Scalar>(false, "attention_into", view(q), view(k), &vv, nullptr, &o,
                          lse != nullptr ? &l : nullptr, nullptr, opt, masks);
}

/// SCORES, ATTN and LSE, freshly allocated (SCORES in float into scores_float instead, for
/// bfloat16 and half inputs with opt.float_scores).
template <typename Scalar>
DecomposedResult<Scalar> attention_decomposed(const ConstStridedMap<Scalar>& q,
                                              const ConstStridedMap<Scalar>& k,
                                              const ConstStridedMap<Scalar>& v, const Options& opt,
                                              const Masks<Scalar>& masks = {}) {
  using Compute = ComputeScalar<Scalar>;
  const char* api = "attention_decomposed";
  const MatrixView<const Scalar> qv = view(q), kv = view(k), vv = view(v);
  validate<Scalar>(api, q, k, &v, opt, masks);
  const bool in_float = kIsLowPrecision<Scalar> && opt.float_scores;
  if (in_float) {
    detail::check_result<Compute>(api, "SCORES", "T_q x T_k", qv.rows, kv.rows);
  } else {
    detail::check_result<Scalar>(api, "SCORES", "T_q x T_k", qv.rows, kv.rows);
  }
  detail::check_result<Scalar>(api, "ATTN", "T_q x d_v", qv.rows, vv.cols);
  detail::check_result<Compute>(api, "LSE", "T_q x 1", qv.rows, 1);
  DecomposedResult<Scalar> r;
  if (in_float) {
    r.scores_float = detail::result<Compute>(qv.rows, kv.rows);
    prefer_huge_pages(r.scores_float.data(),
                      static_cast<std::size_t>(r.scores_float.size()) * sizeof(Compute));
  } else {
    r.scores = detail::result<Scalar>(qv.rows, kv.rows);
    prefer_huge_pages(r.scores.data(), static_cast<std::size_t>(r.scores.size()) * sizeof(Scalar));
  }
  r.attn = detail::result<Scalar>(qv.rows, vv.cols);
  r.lse = Vector<Compute>(static_cast<Eigen::Index>(qv.rows));
  const MatrixView<Scalar> s = view(r.scores), a = view(r.attn);
  const MatrixView<Compute> l = view(r.lse), sf = view(r.scores_float);
  detail::run_any<Scalar>(false, api, qv, kv, &vv, in_float ? nullptr : &s, &a, &l, in_float ? &sf : nullptr,
                          opt, masks);
  return r;
}

/// SCORES (T_q x T_k, of the input type or of the compute type) and ATTN (T_q x d_v) into caller
/// storage; LSE too when `lse` is not null.
template <typename Scalar, typename ScoresScalar>
void attention_decomposed_into(const ConstStridedMap<Scalar>& q, const ConstStridedMap<Scalar>& k,
                               const ConstStridedMap<Scalar>& v, const StridedMap<ScoresScalar>& scores,
                               const StridedMap<Scalar>& attn, const StridedMap<ComputeScalar<Scalar>>* lse,
                               const Options& opt, const Masks<Scalar>& masks = {}) {
  using Compute = ComputeScalar<Scalar>;
  const MatrixView<const Scalar> vv = view(v);
  const MatrixView<Scalar> a = view(attn);
  const MatrixView<Compute> l = lse != nullptr ? view(*lse) : MatrixView<Compute>{};
  const MatrixView<ScoresScalar> s = view(scores);
  if constexpr (std::is_same_v<ScoresScalar, Scalar>) {
    detail::run_any<Scalar>(false, "attention_decomposed_into", view(q), view(k), &vv, &s, &a,
                            lse != nullptr ? &l : nullptr, nullptr, opt, masks);
  } else {
    detail::run_any<Scalar>(false, "attention_decomposed_into", view(q), view(k), &vv, nullptr, &a,
                            lse != nullptr ? &l : nullptr, &s, opt, masks);
  }
}

/// SCORES alone (T_q x T_k), freshly allocated.
template <typename Scalar>
RowMatrix<Scalar> attention_scores(const ConstStridedMap<Scalar>& q, const ConstStridedMap<Scalar>& k,
                                   const Options& opt, const Masks<Scalar>& masks = {}) {
  const char* api = "attention_scores";
  const MatrixView<const Scalar> qv = view(q), kv = view(k);
  validate<Scalar>(api, q, k, nullptr, opt, masks);
  detail::check_result<Scalar>(api, "SCORES", "T_q x T_k", qv.rows, kv.rows);
  RowMatrix<Scalar> scores = detail::result<Scalar>(qv.rows, kv.rows);
  prefer_huge_pages(scores.data(), static_cast<std::size_t>(scores.size()) * sizeof(Scalar));
  const MatrixView<Scalar> s = view(scores);
  detail::run_any<Scalar>(false, api, qv, kv, nullptr, &s, nullptr, nullptr, nullptr, opt, masks);
  return scores;
}

/// SCORES alone (of the input type or of the compute type) into caller storage; LSE too when
/// `lse` is not null.
template <typename Scalar, typename ScoresScalar>
void attention_scores_into(const ConstStridedMap<Scalar>& q, const ConstStridedMap<Scalar>& k,
                           const StridedMap<ScoresScalar>& scores,
                           const StridedMap<ComputeScalar<Scalar>>* lse, const Options& opt,
                           const Masks<Scalar>& masks = {}) {
  using Compute = ComputeScalar<Scalar>;
  const MatrixView<ScoresScalar> s = view(scores);
  const MatrixView<Compute> l = lse != nullptr ? view(*lse) : MatrixView<Compute>{};
  if constexpr (std::is_same_v<ScoresScalar, Scalar>) {
    detail::run_any<Scalar>(false, "attention_scores_into", view(q), view(k), nullptr, &s, nullptr,
                            lse != nullptr ? &l : nullptr, nullptr, opt, masks);
  } else {
    detail::run_any<Scalar>(false, "attention_scores_into", view(q), view(k), nullptr, nullptr, nullptr,
                            lse != nullptr ? &l : nullptr, &s, opt, masks);
  }
}

/// The BackwardInputs of strided maps (`d_scores` may be null), as the compiled library takes
/// them (views of Eigen's 16-bit types as their bits).
template <typename Scalar>
BackwardInputs<AbiScalar<Scalar>> backward_inputs(
    const ConstStridedMap<Scalar>& q, const ConstStridedMap<Scalar>& k, const ConstStridedMap<Scalar>& v,
    const ConstStridedMap<Scalar>& attn, const ConstStridedMap<ComputeScalar<Scalar>>& lse,
    const ConstStridedMap<Scalar>& d_attn, const ConstStridedMap<Scalar>* d_scores) {
  BackwardInputs<AbiScalar<Scalar>> in;
  in.q = abi(view(q)), in.k = abi(view(k)), in.v = abi(view(v));
  in.attn = abi(view(attn)), in.lse = view(lse), in.d_attn = abi(view(d_attn));
  if (d_scores != nullptr) in.d_scores = abi(view(*d_scores));
  in.has_d_scores = d_scores != nullptr;
  return in;
}

/// The gradients dL/dQ, dL/dK and dL/dV, freshly allocated.
template <typename Scalar>
Gradients<Scalar> attention_backward(const BackwardInputs<AbiScalar<Scalar>>& in, const Options& opt,
                                     const Masks<Scalar>& masks = {}) {
  const char* api = "attention_backward";
  const Masks<AbiScalar<Scalar>> m = EigenAttention::detail::bits(masks);
  validate_backward(api, in, nullptr, nullptr, nullptr, opt, m);
  detail::check_result<Scalar>(api, "dQ", "T_q x d_k", in.q.rows, in.q.cols);
  detail::check_result<Scalar>(api, "dK", "T_k x d_k", in.k.rows, in.k.cols);
  detail::check_result<Scalar>(api, "dV", "T_k x d_v", in.v.rows, in.v.cols);
  Gradients<Scalar> g{detail::result<Scalar>(in.q.rows, in.q.cols),
                      detail::result<Scalar>(in.k.rows, in.k.cols),
                      detail::result<Scalar>(in.v.rows, in.v.cols)};
  MatrixView<Scalar> dq = view(g.dq), dk = view(g.dk), dv = view(g.dv);
  backward(api, in, abi(dq), abi(dk), abi(dv), opt, m);
  return g;
}
///@}

}  // namespace compiled
}  // namespace EigenAttention
