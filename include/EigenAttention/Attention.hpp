/// \file Attention.hpp
/// Scaled dot-product attention for one head: the calls.
///
/// With Q (T_q x d_k), K (T_k x d_k), V (T_k x d_v) and s = Options::scale (default 1/sqrt(d_k)):
///
/// | step | what                                                                      |
/// |------|---------------------------------------------------------------------------|
/// | 1    | raw logits L = Q K^T (T_q x T_k)                                          |
/// | 2    | mask: when causal, L(i, j) = -inf for every key j > i + offset            |
/// |      | (offset = 0 for TopLeft, T_k - T_q for BottomRight)                       |
/// | 3    | scale: L = s * L                                                          |
/// | 4    | row softmax: SCORES(i, j) = exp(L(i, j) - m_i) / sum_j exp(L(i, j) - m_i), |
/// |      | m_i the row maximum; LSE(i) = m_i + log(sum_j exp(L(i, j) - m_i))          |
/// | 5    | ATTN = SCORES V (T_q x d_v), summing over the keys each query sees         |
///
/// - Options::window_left/window_right (sliding window) and Options::softcap apply here too,
///   in the order of the table in MultiHead.hpp (the mask and scale steps above commute: the
///   scale is positive). Boolean masks, biases, padding and ALiBi are in MultiHead.hpp.
/// - A query that sees no key (BottomRight with i < T_q - T_k, or T_k = 0) gets a zero SCORES
///   row, a zero ATTN row and LSE = -inf; never NaN.
/// - T_q = 0 gives empty results of the right shapes; d_v = 0 gives an empty ATTN.
/// - NaN or Inf in an input reaches only the output rows that depend on it: a query row's own
///   outputs, and the rows of the queries that see the key row holding it.
/// - Masked keys never touch the result: their SCORES are exact zeros and their V rows are
///   not read into that query's ATTN row.
///
/// Inputs are any Eigen dense expressions of one scalar type, float or double: row- or
/// column-major matrices, Maps over your buffers (any strides), blocks, Refs. Expressions without
/// direct memory access (e.g. `A * B`, `M.cast<float>()`) are evaluated once into a temporary.
/// Results come back as row-major matrices (one row per token; see RowMatrix).
///
/// Which call to use:
/// - attention(): ATTN only. Fastest, and memory stays O(T) however long the sequences.
/// - attention_decomposed(): ATTN and the T_q x T_k SCORES, for inspecting the weights.
/// - attention_scores(): SCORES alone; needs no V.
/// - the `_into` forms write into storage you provide and allocate nothing in a loop: the
///   tiled kernels keep a small per-thread workspace that only grows (Kernel::Reference, the
///   yardstick, does allocate).
///
/// Errors: shape mismatches, a non-finite or non-positive scale, d_k = 0 with the default
/// scale, outputs of the wrong shape, and outputs that overlap an input or each other throw
/// std::invalid_argument with a message naming the shapes or value; no output is written then.
#pragma once

// Lets the detail/ headers in (each refuses to be included on its own); never undefined, so
// that any public header may include them, in any order.
#ifndef EIGEN_ATTENTION_PUBLIC_HEADER
#define EIGEN_ATTENTION_PUBLIC_HEADER
#endif

#include <Eigen/Core>

#include <EigenAttention/Compiled.hpp>
#include <EigenAttention/Options.hpp>
#include <EigenAttention/Types.hpp>
#include <EigenAttention/detail/FrontDoor.hpp>

namespace EigenAttention {

/// ATTN = softmax(mask(Q K^T) * scale) V, never forming the T_q x T_k matrix.
/// \param Q T_q x d_k queries, one row per token.
/// \param K T_k x d_k keys.
/// \param V T_k x d_v values.
/// \param opt causal mask and its alignment, scale, window, soft-cap, kernel, threads
/// (default: Options{}).
/// \returns T_q x d_v, row-major.
/// \throws std::invalid_argument on mismatched shapes or a bad scale (message names them).
/// \code
/// Eigen::MatrixXf Q = Eigen::MatrixXf::Random(5, 8), K = Eigen::MatrixXf::Random(7, 8),
///                 V = Eigen::MatrixXf::Random(7, 3);
/// EigenAttention::Options opt;
/// opt.causal = true;
/// auto O = EigenAttention::attention(Q, K, V, opt);  // 5 x 3
/// \endcode
template <class DQ, class DK, class DV>
RowMatrix<typename DQ::Scalar> attention(const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
                                         const Eigen::MatrixBase<DV>& V, const Options& opt = {}) {
  using Scalar = typename DQ::Scalar;
  (void)detail::ScalarCheck<Scalar, typename DK::Scalar, typename DV::Scalar>{};
  detail::InputView<DQ> q(Q.derived());
  detail::InputView<DK> k(K.derived());
  detail::InputView<DV> v(V.derived());
  return compiled::attention<Scalar>(q.map(), k.map(), v.map(), opt);
}

/// attention() into caller storage: `out` receives ATTN (T_q x d_v).
/// `out` may be an Eigen::Matrix (resized if needed; no allocation when it already fits), or a
/// Map, Ref or block of the right shape, but not a const object (that does not compile). It must
/// not overlap Q, K or V.
/// \throws std::invalid_argument as attention(), or when `out` has the wrong shape or overlaps.
template <class DQ, class DK, class DV, class DO, detail::EnableIfMatrix<DO> = 0>
void attention_into(const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
                    const Eigen::MatrixBase<DV>& V, DO&& out, const Options& opt = {}) {
  using Scalar = typename DQ::Scalar;
  (void)detail::ScalarCheck<Scalar, typename DK::Scalar, typename DV::Scalar, detail::ScalarOf<DO>>{};
  (void)detail::OutputCheck<DO>{};
  detail::InputView<DQ> q(Q.derived());
  detail::InputView<DK> k(K.derived());
  detail::InputView<DV> v(V.derived());
  compiled::validate<Scalar>("attention_into", q.map(), k.map(), &v.map(), opt);
  detail::check_resizable_apart("attention_into",
                                {detail::input_extent("Q", Q, q.map()), detail::input_extent("K", K, k.map()),
                                 detail::input_extent("V", V, v.map())},
                                {detail::output_extent("out", out)});
  const auto o = detail::output_view(out, Q.rows(), V.cols());
  compiled::attention_into<Scalar>(q.map(), k.map(), v.map(), o, nullptr, opt);
}

/// attention_into() that also writes each query row's log-sum-exp into `lse` (T_q entries;
/// -inf for a row that sees no key). With (ATTN, LSE) of two disjoint key sets, the result
/// over their union can be merged exactly.
template <class DQ, class DK, class DV, class DO, class DL, detail::EnableIfMatrix<DO, DL> = 0>
void attention_into(const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
                    const Eigen::MatrixBase<DV>& V, DO&& out, DL&& lse, const Options& opt = {}) {
  using Scalar = typename DQ::Scalar;
  (void)detail::ScalarCheck<Scalar, typename DK::Scalar, typename DV::Scalar, detail::ScalarOf<DO>,
                        detail::ScalarOf<DL>>{};
  (void)detail::OutputCheck<DO>{};
  (void)detail::OutputCheck<DL>{};
  detail::InputView<DQ> q(Q.derived());
  detail::InputView<DK> k(K.derived());
  detail::InputView<DV> v(V.derived());
  compiled::validate<Scalar>("attention_into", q.map(), k.map(), &v.map(), opt);
  detail::check_resizable_apart("attention_into",
                                {detail::input_extent("Q", Q, q.map()), detail::input_extent("K", K, k.map()),
                                 detail::input_extent("V", V, v.map())},
                                {detail::output_extent("out", out), detail::output_extent("lse", lse)});
  const auto o = detail::output_view(out, Q.rows(), V.cols());
  const auto l = detail::output_view(lse, Q.rows(), 1);
  compiled::attention_into<Scalar>(q.map(), k.map(), v.map(), o, &l, opt);
}

/// SCORES (T_q x T_k softmax weights), ATTN (T_q x d_v) and LSE (T_q), computed in one pass.
/// \throws std::invalid_argument on mismatched shapes or a bad scale.
/// \code
/// auto r = EigenAttention::attention_decomposed(Q, K, V);
/// r.scores;  // T_q x T_k, rows sum to 1
/// r.attn;    // T_q x d_v, equal to r.scores * V
/// \endcode
template <class DQ, class DK, class DV>
DecomposedResult<typename DQ::Scalar> attention_decomposed(const Eigen::MatrixBase<DQ>& Q,
                                                           const Eigen::MatrixBase<DK>& K,
                                                           const Eigen::MatrixBase<DV>& V,
                                                           const Options& opt = {}) {
  using Scalar = typename DQ::Scalar;
  (void)detail::ScalarCheck<Scalar, typename DK::Scalar, typename DV::Scalar>{};
  detail::InputView<DQ> q(Q.derived());
  detail::InputView<DK> k(K.derived());
  detail::InputView<DV> v(V.derived());
  return compiled::attention_decomposed<Scalar>(q.map(), k.map(), v.map(), opt);
}

/// attention_decomposed() into caller storage: `scores` (T_q x T_k) and `attn` (T_q x d_v).
/// Outputs as for attention_into(); they must overlap neither the inputs nor each other.
template <class DQ, class DK, class DV, class DS, class DO, detail::EnableIfMatrix<DS, DO> = 0>
void attention_decomposed_into(const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
                               const Eigen::MatrixBase<DV>& V, DS&& scores, DO&& attn, const Options& opt = {}) {
  using Scalar = typename DQ::Scalar;
  (void)detail::ScalarCheck<Scalar, typename DK::Scalar, typename DV::Scalar, detail::ScalarOf<DS>,
                        detail::ScalarOf<DO>>{};
  (void)detail::OutputCheck<DS>{};
  (void)detail::OutputCheck<DO>{};
  detail::InputView<DQ> q(Q.derived());
  detail::InputView<DK> k(K.derived());
  detail::InputView<DV> v(V.derived());
  compiled::validate<Scalar>("attention_decomposed_into", q.map(), k.map(), &v.map(), opt);
  detail::check_resizable_apart("attention_decomposed_into",
                                {detail::input_extent("Q", Q, q.map()), detail::input_extent("K", K, k.map()),
                                 detail::input_extent("V", V, v.map())},
                                {detail::output_extent("scores", scores), detail::output_extent("attn", attn)});
  const auto s = detail::output_view(scores, Q.rows(), K.rows());
  const auto o = detail::output_view(attn, Q.rows(), V.cols());
  compiled::attention_decomposed_into<Scalar>(q.map(), k.map(), v.map(), s, o, nullptr, opt);
}

/// attention_decomposed_into() that also writes the log-sum-exps into `lse` (T_q entries).
template <class DQ, class DK, class DV, class DS, class DO, class DL, detail::EnableIfMatrix<DS, DO, DL> = 0>
void attention_decomposed_into(const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K,
                               const Eigen::MatrixBase<DV>& V, DS&& scores, DO&& attn, DL&& lse,
                               const Options& opt = {}) {
  using Scalar = typename DQ::Scalar;
  (void)detail::ScalarCheck<Scalar, typename DK::Scalar, typename DV::Scalar, detail::ScalarOf<DS>,
                        detail::ScalarOf<DO>, detail::ScalarOf<DL>>{};
  (void)detail::OutputCheck<DS>{};
  (void)detail::OutputCheck<DO>{};
  (void)detail::OutputCheck<DL>{};
  detail::InputView<DQ> q(Q.derived());
  detail::InputView<DK> k(K.derived());
  detail::InputView<DV> v(V.derived());
  compiled::validate<Scalar>("attention_decomposed_into", q.map(), k.map(), &v.map(), opt);
  detail::check_resizable_apart("attention_decomposed_into",
                                {detail::input_extent("Q", Q, q.map()), detail::input_extent("K", K, k.map()),
                                 detail::input_extent("V", V, v.map())},
                                {detail::output_extent("scores", scores), detail::output_extent("attn", attn),
                                 detail::output_extent("lse", lse)});
  const auto s = detail::output_view(scores, Q.rows(), K.rows());
  const auto o = detail::output_view(attn, Q.rows(), V.cols());
  const auto l = detail::output_view(lse, Q.rows(), 1);
  compiled::attention_decomposed_into<Scalar>(q.map(), k.map(), v.map(), s, o, &l, opt);
}

/// SCORES alone: the T_q x T_k softmax weights. Needs no V.
/// \throws std::invalid_argument on mismatched shapes or a bad scale.
template <class DQ, class DK>
RowMatrix<typename DQ::Scalar> attention_scores(const Eigen::MatrixBase<DQ>& Q,
                                                const Eigen::MatrixBase<DK>& K,
                                                const Options& opt = {}) {
  using Scalar = typename DQ::Scalar;
  (void)detail::ScalarCheck<Scalar, typename DK::Scalar>{};
  detail::InputView<DQ> q(Q.derived());
  detail::InputView<DK> k(K.derived());
  return compiled::attention_scores<Scalar>(q.map(), k.map(), opt);
}

/// attention_scores() into caller storage (`scores`, T_q x T_k).
template <class DQ, class DK, class DS, detail::EnableIfMatrix<DS> = 0>
void attention_scores_into(const Eigen::MatrixBase<DQ>& Q, const Eigen::MatrixBase<DK>& K, DS&& scores,
                           const Options& opt = {}) {
  using Scalar = typename DQ::Scalar;
  (void)detail::ScalarCheck<Scalar, typename DK::Scalar, detail::ScalarOf<DS>>{};
  (void)detail::OutputCheck<DS>{};
  detail::InputView<DQ> q(Q.derived());
  detail::InputView<DK> k(K.derived());
  compiled::validate<Scalar>("attention_scores_into", q.map(), k.map(), nullptr, opt);
  detail::check_resizable_apart("attention_scores_into",
                                {detail::input_extent("Q", Q, q.map()), detail::input_extent("K", K, k.map())},
                                {detail::output_extent("scores", scores)});
  const auto s = detail::output_view(scores, Q.rows(), K.rows());
  compiled::attention_scores_into<Scalar>(q.map(), k.map(), s, nullptr, opt);
}

}  // namespace EigenAttention
