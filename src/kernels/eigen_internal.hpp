// SPDX-License-Identifier: MIT
// The only file that uses Eigen's internals (Eigen::internal, which Eigen does not promise to
// keep): its GEMM with blocking and packing buffers we own (for decode's query-head groups), and
// its packet math. A future Eigen that renames them breaks this file only. Included by tiled.hpp,
// in each kernel translation unit under that unit's private name for Eigen; everything here is in
// an anonymous namespace for the same reason as there. Internal.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include <Eigen/Core>

#include "kernels/abi.hpp"

namespace EigenAttention {
namespace internal {
namespace {

/// Eigen's GEMM blocking with packing buffers that we own: C (m x n) += A (m x k) B (k x n)
/// for row-major C. Eigen evaluates a row-major product as its transpose, so m and n swap.
template <typename T>
class Blocking : public Eigen::internal::level3_blocking<T, T> {
 public:
  Blocking(index_t m, index_t n, index_t k) {
    this->m_mc = std::max<index_t>(n, 1);
    this->m_nc = std::max<index_t>(m, 1);
    this->m_kc = std::max<index_t>(k, 1);
    Eigen::internal::computeProductBlockingSizes<T, T, 1, index_t>(this->m_kc, this->m_mc, this->m_nc, 1);
  }
  index_t size_a() const { return this->m_kc * this->m_mc; }
  index_t size_b() const { return this->m_kc * this->m_nc; }
  void use(T* a, T* b) {
    this->m_blockA = a;
    this->m_blockB = b;
  }
};

/// C (m x n, row stride ldc) += alpha * A (m x k, row stride lda) * B^T, B being n x k (ldb).
template <typename T>
void gemm_abt(index_t m, index_t n, index_t k, const T* a, index_t lda, const T* b, index_t ldb, T* c,
              index_t ldc, T alpha, Blocking<T>& blocking) {
  if (m == 0 || n == 0 || k == 0) return;
  Eigen::internal::general_matrix_matrix_product<index_t, T, Eigen::RowMajor, false, T, Eigen::ColMajor,
                                                 false, Eigen::RowMajor, 1>::run(m, n, k, a, lda, b, ldb, c,
                                                                                 1, ldc, alpha, blocking);
}

/// C (m x n, row stride ldc) += A (m x k, row stride lda) * B, B being k x n (ldb).
template <typename T>
void gemm_ab(index_t m, index_t n, index_t k, const T* a, index_t lda, const T* b, index_t ldb, T* c,
             index_t ldc, Blocking<T>& blocking) {
  if (m == 0 || n == 0 || k == 0) return;
  Eigen::internal::general_matrix_matrix_product<index_t, T, Eigen::RowMajor, false, T, Eigen::RowMajor,
                                                 false, Eigen::RowMajor, 1>::run(m, n, k, a, lda, b, ldb, c,
                                                                                 1, ldc, T(1), blocking);
}

/// row[t] = exp(row[t] - shift) for t in [e0, e1), and exactly 0 where row[t] is -inf, in whole
/// packets: row, e0 and e1 must lie on 64-byte boundaries (tiled.hpp's exp_in_packets). Returns
/// the sum of the new row[e0, e1), added packet by packet in order, then across the packet.
template <typename T>
T exp_shifted_in_packets(T* row, index_t e0, index_t e1, T shift) {
  constexpr index_t kLanes = 64 / static_cast<index_t>(sizeof(T));
  const T minus_inf = -std::numeric_limits<T>::infinity();
  // exp(-inf) must be exactly 0 (Eigen's exp clamps its argument, which gives a subnormal): a
  // key that a mask or an additive bias of -inf hides weighs nothing. Eigen 3.4's select() is not
  // vectorised, so the packets are written out: exp, then zero the lanes that held -inf.
  namespace ei = Eigen::internal;
  using Packet = typename ei::packet_traits<T>::type;
  if constexpr (ei::packet_traits<T>::Vectorizable && ei::packet_traits<T>::HasExp) {
    constexpr index_t kSize = ei::packet_traits<T>::size;
    static_assert(kLanes % kSize == 0, "a 64-byte line holds whole packets");
    const Packet vshift = ei::pset1<Packet>(shift), vminus_inf = ei::pset1<Packet>(minus_inf);
    Packet sum = ei::pset1<Packet>(T(0));
    for (index_t t = e0; t < e1; t += kSize) {
      const Packet x = ei::pload<Packet>(row + t);
      const Packet e = ei::pandnot(ei::pexp(ei::psub(x, vshift)), ei::pcmp_eq(x, vminus_inf));
      ei::pstore(row + t, e);
      sum = ei::padd(sum, e);
    }
    return ei::predux(sum);
  } else {
    T sum = 0;
    for (index_t t = e0; t < e1; ++t) {
      row[t] = row[t] == minus_inf ? T(0) : std::exp(row[t] - shift);
      sum += row[t];
    }
    return sum;
  }
}

/// A row of T in memory, as dot_rows and axpy_rows read it: whole packets, or one element.
template <typename T>
struct PlainRow {
  const T* data;
  template <class Packet>
  Packet packet(index_t c) const {
    return Eigen::internal::ploadu<Packet>(data + c);
  }
  T at(index_t c) const { return data[c]; }
};

/// s[r * lds] = scale * (q_r . k) for the R rows q_r = q + r * ldq (d elements each, as the row
/// k, a PlainRow or a row that widens its elements as it reads them): the decode kernel's logits
/// of one key for R query rows, the key read once. One packet accumulator per row, reduced at
/// the end; the tail past the last whole packet is added element by element.
template <int R, typename T, class Row>
void dot_rows(const T* q, index_t ldq, const Row& k, index_t d, T scale, T* s, index_t lds) {
  namespace ei = Eigen::internal;
  using Packet = typename ei::packet_traits<T>::type;
  constexpr index_t kSize = ei::packet_traits<T>::size;
  Packet acc[R];
  for (int r = 0; r < R; ++r) acc[r] = ei::pset1<Packet>(T(0));
  index_t c = 0;
  for (; c + kSize <= d; c += kSize) {
    const Packet kk = k.template packet<Packet>(c);
    for (int r = 0; r < R; ++r) acc[r] = ei::pmadd(ei::ploadu<Packet>(q + r * ldq + c), kk, acc[r]);
  }
  for (int r = 0; r < R; ++r) {
    T sum = ei::predux(acc[r]);
    for (index_t t = c; t < d; ++t) sum += q[r * ldq + t] * k.at(t);
    s[r * lds] = scale * sum;
  }
}

/// o_r += p[r * ldp] * v for the R rows o_r = o + r * ldo (d elements each, as the row v): the
/// decode kernel's product of one value row with the R weights it gets, the value read once.
template <int R, typename T, class Row>
void axpy_rows(const T* p, index_t ldp, const Row& v, index_t d, T* o, index_t ldo) {
  namespace ei = Eigen::internal;
  using Packet = typename ei::packet_traits<T>::type;
  constexpr index_t kSize = ei::packet_traits<T>::size;
  Packet w[R];
  for (int r = 0; r < R; ++r) w[r] = ei::pset1<Packet>(p[r * ldp]);
  index_t c = 0;
  for (; c + kSize <= d; c += kSize) {
    const Packet vv = v.template packet<Packet>(c);
    for (int r = 0; r < R; ++r)
      ei::pstoreu(o + r * ldo + c, ei::pmadd(w[r], vv, ei::ploadu<Packet>(o + r * ldo + c)));
  }
  for (int r = 0; r < R; ++r)
    for (index_t t = c; t < d; ++t) o[r * ldo + t] += p[r * ldp] * v.at(t);
}

/// o_r += sum_{b < B} p[r * ldp + b] * v[b] for the R rows o_r = o + r * ldo and B value rows
/// v[b]: axpy_rows for B keys at once, each packet of o loaded and stored once for all B.
template <int R, int B, typename T, class Row>
void axpy_rows_block(const T* p, index_t ldp, const Row* v, index_t d, T* o, index_t ldo) {
  namespace ei = Eigen::internal;
  using Packet = typename ei::packet_traits<T>::type;
  constexpr index_t kSize = ei::packet_traits<T>::size;
  index_t c = 0;
  for (; c + kSize <= d; c += kSize) {
    Packet vv[B];
    for (int b = 0; b < B; ++b) vv[b] = v[b].template packet<Packet>(c);
    for (int r = 0; r < R; ++r) {
      Packet acc = ei::ploadu<Packet>(o + r * ldo + c);
      for (int b = 0; b < B; ++b) acc = ei::pmadd(ei::pset1<Packet>(p[r * ldp + b]), vv[b], acc);
      ei::pstoreu(o + r * ldo + c, acc);
    }
  }
  for (int r = 0; r < R; ++r)
    for (index_t t = c; t < d; ++t)
      for (int b = 0; b < B; ++b) o[r * ldo + t] += p[r * ldp + b] * v[b].at(t);
}

}  // namespace
}  // namespace internal
}  // namespace EigenAttention
