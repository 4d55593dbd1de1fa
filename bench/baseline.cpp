// SPDX-License-Identifier: MIT
// The naive Eigen expression and Eigen's GEMM, compiled with the flags of
// EIGEN_ATTENTION_BENCH_BASELINE_FLAGS (default -march=native) and a private copy of Eigen.
// See baseline.hpp.

// Eigen without OpenMP is single-threaded; say so explicitly in case someone adds -fopenmp.
#define EIGEN_DONT_PARALLELIZE
// A private copy of Eigen: its templates, instantiated with this file's -m flags, must not merge
// with the library's or the harness's instantiations (compiled for the baseline instruction set).
#define Eigen EigenAttentionBenchEigen
#include <Eigen/Core>

#include <limits>

#include "baseline.hpp"

#ifndef EA_BENCH_BASELINE_FLAGS
#define EA_BENCH_BASELINE_FLAGS "(not recorded)"
#endif

namespace eabench {
namespace {

template <typename T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ColMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
template <typename T>
using ConstRowMap = Eigen::Map<const RowMat<T>>;
template <typename T>
using RowMap = Eigen::Map<RowMat<T>>;
template <typename T>
using ConstColMap = Eigen::Map<const ColMat<T>>;
template <typename T>
using ColMap = Eigen::Map<ColMat<T>>;

// Whole-matrix expressions; on column-major S every step is vectorised, on row-major S the
// colwise broadcasts are not (Eigen 3.4).
template <typename Mat>
void softmax_rows_expr(Mat& S) {
  using T = typename Mat::Scalar;
  using Col = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  const Col m = S.rowwise().maxCoeff();
  S.array() = (S.array().colwise() - m.array()).exp();
  const Col inv = S.rowwise().sum().cwiseInverse();
  S.array().colwise() *= inv.array();
}

template <typename T>
void naive(const T* q, const T* k, const T* v, Idx tq, Idx tk, Idx dk, Idx dv, bool causal, T scale, T* o,
           NaiveVariant variant) {
  const ConstRowMap<T> Q(q, tq, dk), K(k, tk, dk), V(v, tk, dv);
  RowMap<T> O(o, tq, dv);
  const T minus_inf = -std::numeric_limits<T>::infinity();
  if (variant == NaiveVariant::ColMajor) {
    ColMat<T> S(tq, tk);
    S.noalias() = scale * (Q * K.transpose());
    if (causal) S.template triangularView<Eigen::StrictlyUpper>().setConstant(minus_inf);
    softmax_rows_expr(S);
    O.noalias() = S * V;
    return;
  }
  RowMat<T> S(tq, tk);
  S.noalias() = scale * (Q * K.transpose());
  // The strict upper triangle of S, written through the transpose: Eigen 3.4 assigns a
  // triangularView column by column, which on row-major S strides across rows and is 24-32x
  // slower (T = 2048..4096) than walking S^T's strict lower triangle, the same elements in
  // storage order.
  if (causal) S.transpose().template triangularView<Eigen::StrictlyLower>().setConstant(minus_inf);
  if (variant == NaiveVariant::RowMajorExpr) {
    softmax_rows_expr(S);
  } else {
    for (Idx i = 0; i < tq; ++i) {
      auto r = S.row(i);
      const T m = r.maxCoeff();
      r.array() = (r.array() - m).exp();
      r *= T(1) / r.sum();
    }
  }
  O.noalias() = S * V;
}

// S = scale * Q K^T, the causal mask, and the row softmax (rowloop), into P (T_q x T_k).
template <typename T>
void naive_weights(const ConstRowMap<T>& Q, const ConstRowMap<T>& K, bool causal, T scale, RowMat<T>& P) {
  P.noalias() = scale * (Q * K.transpose());
  if (causal)
    P.transpose().template triangularView<Eigen::StrictlyLower>().setConstant(
        -std::numeric_limits<T>::infinity());
  for (Idx i = 0; i < P.rows(); ++i) {
    auto r = P.row(i);
    const T m = r.maxCoeff();
    r.array() = (r.array() - m).exp();
    r *= T(1) / r.sum();
  }
}

template <typename T>
void naive_backward(const T* q, const T* k, const T* v, const T* dout, Idx tq, Idx tk, Idx dk, Idx dv,
                    bool causal, T scale, T* dq, T* dk_out, T* dv_out) {
  const ConstRowMap<T> Q(q, tq, dk), K(k, tk, dk), V(v, tk, dv), dO(dout, tq, dv);
  RowMap<T> dQ(dq, tq, dk), dK(dk_out, tk, dk), dV(dv_out, tk, dv);
  RowMat<T> P(tq, tk);
  naive_weights(Q, K, causal, scale, P);
  dV.noalias() = P.transpose() * dO;
  RowMat<T> dS(tq, tk);
  dS.noalias() = dO * V.transpose();  // dP
  for (Idx i = 0; i < tq; ++i) {
    auto p = P.row(i).array();
    auto ds = dS.row(i).array();
    const T delta = (ds * p).sum();
    ds = p * (ds - delta);
  }
  dQ.noalias() = scale * (dS * K);
  dK.noalias() = scale * (dS.transpose() * Q);
}

}  // namespace

const char* naive_variant_name(NaiveVariant v) {
  switch (v) {
    case NaiveVariant::RowLoop:
      return "rowloop";
    case NaiveVariant::ColMajor:
      return "colmajor";
    case NaiveVariant::RowMajorExpr:
      return "rowmajor-expr";
  }
  return "?";
}

const char* baseline_simd() { return Eigen::SimdInstructionSetsInUse(); }
const char* baseline_flags() { return EA_BENCH_BASELINE_FLAGS; }

void naive_attention(const float* q, const float* k, const float* v, Idx tq, Idx tk, Idx dk, Idx dv,
                     bool causal, float scale, float* o, NaiveVariant variant) {
  naive(q, k, v, tq, tk, dk, dv, causal, scale, o, variant);
}
void naive_attention(const double* q, const double* k, const double* v, Idx tq, Idx tk, Idx dk, Idx dv,
                     bool causal, double scale, double* o, NaiveVariant variant) {
  naive(q, k, v, tq, tk, dk, dv, causal, scale, o, variant);
}

void naive_attention_backward(const float* q, const float* k, const float* v, const float* dout, Idx tq,
                              Idx tk, Idx dk, Idx dv, bool causal, float scale, float* dq, float* dk_out,
                              float* dv_out) {
  naive_backward(q, k, v, dout, tq, tk, dk, dv, causal, scale, dq, dk_out, dv_out);
}
void naive_attention_backward(const double* q, const double* k, const double* v, const double* dout, Idx tq,
                              Idx tk, Idx dk, Idx dv, bool causal, double scale, double* dq, double* dk_out,
                              double* dv_out) {
  naive_backward(q, k, v, dout, tq, tk, dk, dv, causal, scale, dq, dk_out, dv_out);
}

#define EA_BENCH_GEMMS(T)                                                                             \
  void gemm_square(const T* a, const T* b, T* c, Idx n) {                                             \
    ColMap<T>(c, n, n).noalias() = ConstColMap<T>(a, n, n) * ConstColMap<T>(b, n, n);                 \
  }                                                                                                   \
  void gemm_qkt(const T* q, const T* k, T* s, Idx tq, Idx tk, Idx d) {                                \
    RowMap<T>(s, tq, tk).noalias() = ConstRowMap<T>(q, tq, d) * ConstRowMap<T>(k, tk, d).transpose(); \
  }                                                                                                   \
  void gemm_pv(const T* p, const T* v, T* o, Idx tq, Idx tk, Idx dv) {                                \
    RowMap<T>(o, tq, dv).noalias() = ConstRowMap<T>(p, tq, tk) * ConstRowMap<T>(v, tk, dv);           \
  }
EA_BENCH_GEMMS(float)
EA_BENCH_GEMMS(double)
#undef EA_BENCH_GEMMS

}  // namespace eabench
