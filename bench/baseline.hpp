// SPDX-License-Identifier: MIT
// The yardsticks of eigen_attention_bench and eigen_attention_backward_bench: the naive Eigen
// expression for attention, its naive backward, and Eigen's own GEMM. They live in baseline.cpp,
// which is compiled with its own flags (by default -march=native, see bench/CMakeLists.txt) and
// its own renamed copy of Eigen, so that only plain pointers cross this boundary and no Eigen
// template instantiated for one instruction set can replace another's at link time.
#pragma once

#include <cstddef>

namespace eabench {

using Idx = std::ptrdiff_t;

/// How the naive path computes the row softmax of S (T_q x T_k).
enum class NaiveVariant {
  RowLoop,      ///< row-major S, one pass per row: max, exp, normalise (each row contiguous).
  ColMajor,     ///< column-major S, whole-matrix expressions: S.rowwise().maxCoeff(),
                ///< (S.array().colwise() - m).exp(), S.rowwise().sum(), colwise normalise.
  RowMajorExpr  ///< the same expressions on row-major S (Eigen 3.4 does not vectorise the
                ///< colwise broadcasts there; for reference only).
};
const char* naive_variant_name(NaiveVariant v);

/// Eigen::SimdInstructionSetsInUse() of baseline.cpp, e.g. "AVX512, FMA, AVX2, ...".
const char* baseline_simd();
/// The compile flags of baseline.cpp (from CMake).
const char* baseline_flags();

/// The naive expression, all matrices row-major with unit column stride:
///   S = scale * (Q * K^T)            (a fresh T_q x T_k matrix each call, noalias)
///   causal: strict upper triangle of S = -inf (triangularView)
///   row softmax of S (see NaiveVariant)
///   O = S * V                        (O: T_q x d_v, caller storage)
void naive_attention(const float* q, const float* k, const float* v, Idx tq, Idx tk, Idx dk, Idx dv,
                     bool causal, float scale, float* o, NaiveVariant variant);
void naive_attention(const double* q, const double* k, const double* v, Idx tq, Idx tk, Idx dk, Idx dv,
                     bool causal, double scale, double* o, NaiveVariant variant);

/// The naive backward of the expression above, every T_q x T_k matrix materialised, all matrices
/// row-major with unit column stride (dout = dL/dO):
///   S = scale * (Q * K^T); causal: strict upper triangle = -inf; P = row softmax of S (rowloop)
///   dV = P^T * dO
///   dP = dO * V^T                    (a second fresh T_q x T_k matrix)
///   dS = P .* (dP - rowsum(dP .* P)) (in place of dP, row by row)
///   dQ = scale * dS * K,  dK = scale * dS^T * Q
/// dq (T_q x dk), dk (T_k x dk) and dv (T_k x dv) are caller storage.
void naive_attention_backward(const float* q, const float* k, const float* v, const float* dout, Idx tq,
                              Idx tk, Idx dk, Idx dv, bool causal, float scale, float* dq, float* dk_out,
                              float* dv_out);
void naive_attention_backward(const double* q, const double* k, const double* v, const double* dout, Idx tq,
                              Idx tk, Idx dk, Idx dv, bool causal, double scale, double* dq, double* dk_out,
                              double* dv_out);

/// C = A * B, all n x n column-major (Eigen's default MatrixX layout).
void gemm_square(const float* a, const float* b, float* c, Idx n);
void gemm_square(const double* a, const double* b, double* c, Idx n);

/// S = Q * K^T: Q (tq x d), K (tk x d), S (tq x tk), all row-major.
void gemm_qkt(const float* q, const float* k, float* s, Idx tq, Idx tk, Idx d);
void gemm_qkt(const double* q, const double* k, double* s, Idx tq, Idx tk, Idx d);

/// O = P * V: P (tq x tk), V (tk x dv), O (tq x dv), all row-major.
void gemm_pv(const float* p, const float* v, float* o, Idx tq, Idx tk, Idx dv);
void gemm_pv(const double* p, const double* v, double* o, Idx tq, Idx tk, Idx dv);

}  // namespace eabench
