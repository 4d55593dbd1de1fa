/// \file Compiled.hpp
/// The compiled entry points behind the template front doors of Attention.hpp.
///
/// Each is implemented once, in the library, for `float` and `double`; they take strided views
/// (see Types.hpp) so that one compiled function serves row- and column-major matrices, maps and
/// blocks. Most callers use Attention.hpp instead; call these directly when you hold raw
/// buffers with known strides. They validate their arguments (the only place that does) and
/// throw std::invalid_argument naming the shapes when something does not fit. The semantics
/// are those documented in Attention.hpp.
#pragma once

#include <EigenAttention/Options.hpp>
#include <EigenAttention/Types.hpp>

namespace EigenAttention {
namespace compiled {

/// Checks Q (T_q x d_k), K (T_k x d_k) and, when `v` is not null, V (T_k x d_v) against each
/// other and `opt` (scale finite and > 0, or d_k > 0 for the default scale). `api` names the
/// calling function in the message. The front doors call it before resizing any output.
/// \throws std::invalid_argument naming the shapes or the value at fault.
template <typename Scalar>
void validate(const char* api, const ConstStridedMap<Scalar>& q, const ConstStridedMap<Scalar>& k,
              const ConstStridedMap<Scalar>* v, const Options& opt);

/// ATTN (T_q x d_v), never forming T_q x T_k (unless opt.kernel is Kernel::Reference).
template <typename Scalar>
RowMatrix<Scalar> attention(const ConstStridedMap<Scalar>& q, const ConstStridedMap<Scalar>& k,
                            const ConstStridedMap<Scalar>& v, const Options& opt);

/// ATTN into `out` (T_q x d_v) and, when `lse` is not null, the log-sum-exps into `*lse`
/// (T_q x 1). Allocates nothing once the calling thread's small workspace has grown.
/// \throws std::invalid_argument for bad shapes, wrong output shapes, or outputs that overlap
/// an input or each other; nothing is written then.
template <typename Scalar>
void attention_into(const ConstStridedMap<Scalar>& q, const ConstStridedMap<Scalar>& k,
                    const ConstStridedMap<Scalar>& v, const StridedMap<Scalar>& out,
                    const StridedMap<Scalar>* lse, const Options& opt);

/// SCORES, ATTN and LSE, freshly allocated.
template <typename Scalar>
DecomposedResult<Scalar> attention_decomposed(const ConstStridedMap<Scalar>& q,
                                              const ConstStridedMap<Scalar>& k,
                                              const ConstStridedMap<Scalar>& v, const Options& opt);

/// SCORES (T_q x T_k) and ATTN (T_q x d_v) into caller storage; LSE too when `lse` is not null.
template <typename Scalar>
void attention_decomposed_into(const ConstStridedMap<Scalar>& q, const ConstStridedMap<Scalar>& k,
                               const ConstStridedMap<Scalar>& v, const StridedMap<Scalar>& scores,
                               const StridedMap<Scalar>& attn, const StridedMap<Scalar>* lse,
                               const Options& opt);

/// SCORES alone (T_q x T_k), freshly allocated.
template <typename Scalar>
RowMatrix<Scalar> attention_scores(const ConstStridedMap<Scalar>& q, const ConstStridedMap<Scalar>& k,
                                   const Options& opt);

/// SCORES alone into caller storage; LSE too when `lse` is not null.
template <typename Scalar>
void attention_scores_into(const ConstStridedMap<Scalar>& q, const ConstStridedMap<Scalar>& k,
                           const StridedMap<Scalar>& scores, const StridedMap<Scalar>* lse,
                           const Options& opt);

#define EIGEN_ATTENTION_DECLARE_COMPILED(Scalar)                                                   \
  extern template void validate<Scalar>(const char*, const ConstStridedMap<Scalar>&, const ConstStridedMap<Scalar>&, \
                                        const ConstStridedMap<Scalar>*, const Options&);           \
  extern template RowMatrix<Scalar> attention<Scalar>(const ConstStridedMap<Scalar>&,              \
                                                      const ConstStridedMap<Scalar>&,              \
                                                      const ConstStridedMap<Scalar>&, const Options&); \
  extern template void attention_into<Scalar>(                                                     \
      const ConstStridedMap<Scalar>&, const ConstStridedMap<Scalar>&, const ConstStridedMap<Scalar>&, \
      const StridedMap<Scalar>&, const StridedMap<Scalar>*, const Options&);                       \
  extern template DecomposedResult<Scalar> attention_decomposed<Scalar>(                           \
      const ConstStridedMap<Scalar>&, const ConstStridedMap<Scalar>&, const ConstStridedMap<Scalar>&, \
      const Options&);                                                                             \
  extern template void attention_decomposed_into<Scalar>(                                          \
      const ConstStridedMap<Scalar>&, const ConstStridedMap<Scalar>&, const ConstStridedMap<Scalar>&, \
      const StridedMap<Scalar>&, const StridedMap<Scalar>&, const StridedMap<Scalar>*, const Options&); \
  extern template RowMatrix<Scalar> attention_scores<Scalar>(                                      \
      const ConstStridedMap<Scalar>&, const ConstStridedMap<Scalar>&, const Options&);             \
  extern template void attention_scores_into<Scalar>(const ConstStridedMap<Scalar>&,               \
                                                     const ConstStridedMap<Scalar>&,               \
                                                     const StridedMap<Scalar>&,                    \
                                                     const StridedMap<Scalar>*, const Options&);

EIGEN_ATTENTION_DECLARE_COMPILED(float)
EIGEN_ATTENTION_DECLARE_COMPILED(double)
#undef EIGEN_ATTENTION_DECLARE_COMPILED

}  // namespace compiled

}  // namespace EigenAttention
