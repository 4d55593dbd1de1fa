// SPDX-License-Identifier: MIT
// The only file that uses Eigen's internals (Eigen::internal, which Eigen does not promise to
// keep): its GEMM with blocking and packing buffers we own (for decode's query-head groups), and
// its packet math, with the few x86 intrinsics that the softmax's exp needs and Eigen 3.4 has no
// packet operation for (vscalef, 64-bit integer shifts and adds). A future Eigen that renames
// them breaks this file only. Included by tiled.hpp, in each kernel translation unit under that
// unit's private name for Eigen; everything here is in an anonymous namespace for the same
// reason as there. Internal.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

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

/// 1 / k!, rounded once to the compute type by the caller.
constexpr long double inverse_factorial(int k) {
  long double f = 1;
  for (int i = 2; i <= k; ++i) f *= i;
  return 1 / f;
}

/// Is Packet N lanes of T? (Compared by its traits: std::is_same on the vector types themselves
/// warns that their alignment attributes are ignored.)
template <typename Packet, typename T, int N>
constexpr bool kPacketOf = std::is_same_v<typename Eigen::internal::unpacket_traits<Packet>::type, T>&&
                               Eigen::internal::unpacket_traits<Packet>::size == N;

/// AVX-512's vscalefps/pd: p * 2^m in one instruction, rounded once, subnormal results and
/// NaN included.
template <typename Packet>
constexpr bool kHasScalef =
#if defined(EIGEN_VECTORIZE_AVX512)
    kPacketOf<Packet, float, 16> || kPacketOf<Packet, double, 8>;
#else
    false;
#endif

/// p * 2^m for packets p in [1/2, 2) and m the integers t - 1.5 * 2^(mantissa bits) (t from
/// exp_at_most_zero: the low bits of t's mantissa hold m, so that t's bits shifted left by the
/// mantissa's width are m's). With vscalef, exact for every m; else m added to p's exponent field
/// (an integer shift and add), exact when p * 2^m is a normal number. Packets of double have no
/// 64-bit integer packet in Eigen 3.4 on x86: those shifts and adds are written out; any other
/// packet of double (NEON) takes Eigen's pldexp, which gives the same values.
template <typename Packet>
Packet scale_by_power_of_two(const Packet& p, const Packet& t, const Packet& m) {
  namespace ei = Eigen::internal;
  using T = typename ei::unpacket_traits<Packet>::type;
  (void)t;
  (void)m;
#if defined(EIGEN_VECTORIZE_AVX512)
  if constexpr (kPacketOf<Packet, float, 16>) return _mm512_scalef_ps(p, m);
  if constexpr (kPacketOf<Packet, double, 8>) return _mm512_scalef_pd(p, m);
#endif
#if defined(EIGEN_VECTORIZE_AVX2)
  if constexpr (kPacketOf<Packet, double, 4>) {
    const __m256i e = _mm256_slli_epi64(_mm256_castpd_si256(t), 52);
    return _mm256_castsi256_pd(_mm256_add_epi64(_mm256_castpd_si256(p), e));
  }
#endif
#if defined(EIGEN_VECTORIZE_SSE2)
  if constexpr (kPacketOf<Packet, double, 2>) {
    const __m128i e = _mm_slli_epi64(_mm_castpd_si128(t), 52);
    return _mm_castsi128_pd(_mm_add_epi64(_mm_castpd_si128(p), e));
  }
#endif
  if constexpr (std::is_same_v<T, float>) {
    using PacketI = typename ei::unpacket_traits<Packet>::integer_packet;
    const PacketI e = ei::plogical_shift_left<23>(ei::preinterpret<PacketI>(t));
    return ei::preinterpret<Packet>(ei::padd(ei::preinterpret<PacketI>(p), e));
  } else {
    return ei::pldexp(p, m);
  }
}

/// exp(x) for packets of x <= 0 (a logit less its row's maximum), -inf or NaN; lanes above 0
/// are outside its domain. NaN for NaN, 0 for -inf. Where the result is not a normal number
/// (x below about -87.3 in float, -708.4 in double), vscalef (AVX-512) rounds it as std::exp
/// does; the other packets give 0 below -86.5 (float) or -707 (double), flushed as
/// flush-to-zero arithmetic would (a weight below 2^-124 beside the row's largest, 1, changes no
/// sum in float).
/// Cody and Waite's reduction x = m ln2 + r, |r| <= ln2 / 2 (about), with m rounded to an
/// integer by the addition of 1.5 * 2^(mantissa bits), ln2 in two parts (a short one whose
/// product with m is exact, then the rest) so that r is exact to about its last bit; exp(r) by
/// its Taylor polynomial, of degree 7 (float: truncation below 0.1 ulp at |r| = ln2 / 2) or 13
/// (double: below 0.04 ulp), in Horner's form; then scale_by_power_of_two. At most 0.91 ulp
/// from exp (1.22 where pmadd is a multiply and an add: SSE2), in about half the operations of
/// Eigen's general pexp (which clamps twice, takes a floor, scales in four multiplies and, for
/// double, divides).
template <typename Packet>
Packet exp_at_most_zero(const Packet& x) {
  namespace ei = Eigen::internal;
  using T = typename ei::unpacket_traits<Packet>::type;
  constexpr bool kFloat = std::is_same_v<T, float>;
  // With vscalef: x held above where exp rounds to 0 anyway (so that r stays finite for -inf);
  // pmax returns its first argument, x, when it is NaN. Else: the smallest x whose m leaves
  // p 2^m normal (m >= -125 in float, -1021 in double).
  const Packet lo =
      ei::pset1<Packet>(kHasScalef<Packet> ? (kFloat ? T(-104) : T(-746)) : (kFloat ? T(-86.5) : T(-707)));
  const Packet xc = kHasScalef<Packet> ? ei::pmax(x, lo) : x;
  const Packet shifter =
      ei::pset1<Packet>(kFloat ? T(12582912.0) : T(6755399441055744.0));  // 1.5 * 2^23, 2^52
  const Packet log2e = ei::pset1<Packet>(T(1.4426950408889634073599246810018921L));
  // ln2 = hi + lo, hi of 9 (float) or 16 (double) bits, so that m hi is exact even where pmadd
  // is a multiply and an add (m has at most 8 or 11 bits).
  constexpr long double ln2 = 0.6931471805599453094172321214581766L, bits = kFloat ? 512.0L : 65536.0L;
  constexpr long double hi = static_cast<long double>(static_cast<long long>(ln2 * bits + 0.5L)) / bits;
  const Packet ln2_hi = ei::pset1<Packet>(-T(hi)), ln2_lo = ei::pset1<Packet>(-T(ln2 - hi));
  const Packet t = ei::pmadd(xc, log2e, shifter);
  const Packet m = ei::psub(t, shifter);
  Packet r = ei::pmadd(m, ln2_hi, xc);
  r = ei::pmadd(m, ln2_lo, r);
  // sum_k r^k / k! by Horner, from the highest coefficient down. (Estrin's scheme, a shorter
  // chain of multiply-adds, measured no faster in the softmax's loop, and 1.15 ulp, not 0.91.)
  constexpr int kDegree = kFloat ? 7 : 13;
  Packet y = ei::pset1<Packet>(T(inverse_factorial(kDegree)));
  for (int k = kDegree - 1; k >= 0; --k) y = ei::pmadd(y, r, ei::pset1<Packet>(T(inverse_factorial(k))));
  if constexpr (kHasScalef<Packet>) {
    return scale_by_power_of_two(y, t, m);
  } else {
    y = ei::pandnot(scale_by_power_of_two(y, t, m), ei::pcmp_lt(x, lo));
    // NaN: x's NaN, which pmax returns as its first argument when either is NaN (the lanes of y
    // for a NaN x hold garbage); elsewhere y >= 0 >= x.
    return ei::pmax(x, y);
  }
}

/// What exp_shifted_in_packets' shift is: the largest element of the row (every argument is
/// then at most 0: exp_at_most_zero), or any value (the backward's log-sum-exps, which come from
/// the caller: Eigen's pexp, for every argument).
enum class Shift { RowMax, Any };

/// row[t] = exp(row[t] - shift) for t in [e0, e1), and exactly 0 where row[t] is -inf, in whole
/// packets: row, e0 and e1 must lie on 64-byte boundaries (tiled.hpp's exp_in_packets). Returns
/// the sum of the new row[e0, e1), added packet by packet in order, then across the packet.
template <Shift kShift, typename T>
T exp_shifted_in_packets(T* row, index_t e0, index_t e1, T shift) {
  constexpr index_t kLanes = 64 / static_cast<index_t>(sizeof(T));
  const T minus_inf = -std::numeric_limits<T>::infinity();
  // exp(-inf) must be exactly 0 (Eigen's exp clamps its argument, which gives a subnormal; and a
  // shift of +inf or NaN would give NaN): a key that a mask or an additive bias of -inf hides
  // weighs nothing. Eigen 3.4's select() is not vectorised, so the packets are written out: the
  // lanes that hold -inf take exp(0) (not the clamped argument, whose subnormal result costs an
  // assist of about a hundred cycles per packet on Intel cores), then are zeroed.
  namespace ei = Eigen::internal;
  using Packet = typename ei::packet_traits<T>::type;
  if constexpr (ei::packet_traits<T>::Vectorizable && ei::packet_traits<T>::HasExp) {
    constexpr index_t kSize = ei::packet_traits<T>::size;
    static_assert(kLanes % kSize == 0, "a 64-byte line holds whole packets");
    const Packet vshift = ei::pset1<Packet>(shift), vminus_inf = ei::pset1<Packet>(minus_inf);
    Packet sum = ei::pset1<Packet>(T(0));
    for (index_t t = e0; t < e1; t += kSize) {
      const Packet x = ei::pload<Packet>(row + t);
      const Packet hidden = ei::pcmp_eq(x, vminus_inf);
      const Packet y = ei::pandnot(ei::psub(x, vshift), hidden);
      const Packet e = ei::pandnot(kShift == Shift::RowMax ? exp_at_most_zero(y) : ei::pexp(y), hidden);
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

/// The largest of row[e0, e1) (-inf when empty), in whole packets (row, e0 and e1 on 64-byte
/// boundaries, as exp_shifted_in_packets'): exact in any order; a NaN may or may not win (as
/// Eigen's maxCoeff, whose reduction of an unaligned segment costs more than the rest here).
template <typename T>
T max_in_packets(const T* row, index_t e0, index_t e1) {
  namespace ei = Eigen::internal;
  using Packet = typename ei::packet_traits<T>::type;
  const T minus_inf = -std::numeric_limits<T>::infinity();
  if constexpr (ei::packet_traits<T>::Vectorizable) {
    // Four chains of maxima (a row of 128 floats is 8 packets: one chain would wait on each).
    constexpr index_t kSize = ei::packet_traits<T>::size;
    Packet m0 = ei::pset1<Packet>(minus_inf), m1 = m0, m2 = m0, m3 = m0;
    index_t t = e0;
    for (; t + 4 * kSize <= e1; t += 4 * kSize) {
      m0 = ei::pmax(m0, ei::pload<Packet>(row + t));
      m1 = ei::pmax(m1, ei::pload<Packet>(row + t + kSize));
      m2 = ei::pmax(m2, ei::pload<Packet>(row + t + 2 * kSize));
      m3 = ei::pmax(m3, ei::pload<Packet>(row + t + 3 * kSize));
    }
    for (; t < e1; t += kSize) m0 = ei::pmax(m0, ei::pload<Packet>(row + t));
    return ei::predux_max(ei::pmax(ei::pmax(m0, m1), ei::pmax(m2, m3)));
  } else {
    T max = minus_inf;
    for (index_t t = e0; t < e1; ++t) max = row[t] > max ? row[t] : max;
    return max;
  }
}

/// A row of T in memory, as dot_rows_block and axpy_rows_block read it: whole packets, or one element.
template <typename T>
struct PlainRow {
  const T* data;
  template <class Packet>
  Packet packet(index_t c) const {
    return Eigen::internal::ploadu<Packet>(data + c);
  }
  T at(index_t c) const { return data[c]; }
};

#if defined(EIGEN_VECTORIZE_AVX512)
/// The 16 sums of acc[r][b] (r, b < 4: 16 packets of 16 floats) as one packet whose element
/// 4 r + b is the sum of acc[r][b]: a transposing butterfly (30 shuffles and 15 additions for the
/// 16 sums, where 16 separate reductions take about 100 instructions). Lanes are 128 bits.
inline Eigen::internal::Packet16f reduce_4x4(const Eigen::internal::Packet16f (&acc)[4][4]) {
  __m512 y[4];
  for (int b = 0; b < 4; ++b) {
    // Rows 0 and 1, 2 and 3 of key b: the two 256-bit halves of each added, side by side.
    const __m512 x01 = _mm512_add_ps(_mm512_shuffle_f32x4(acc[0][b], acc[1][b], 0x44),
                                     _mm512_shuffle_f32x4(acc[0][b], acc[1][b], 0xEE));
    const __m512 x23 = _mm512_add_ps(_mm512_shuffle_f32x4(acc[2][b], acc[3][b], 0x44),
                                     _mm512_shuffle_f32x4(acc[2][b], acc[3][b], 0xEE));
    // Lane r of y[b]: four partial sums of acc[r][b].
    y[b] = _mm512_add_ps(_mm512_shuffle_f32x4(x01, x23, 0x88), _mm512_shuffle_f32x4(x01, x23, 0xDD));
  }
  // Within each lane r: element b = the sum of the four partial sums of y[b].
  const __m512 z01 = _mm512_add_ps(_mm512_unpacklo_ps(y[0], y[1]), _mm512_unpackhi_ps(y[0], y[1]));
  const __m512 z23 = _mm512_add_ps(_mm512_unpacklo_ps(y[2], y[3]), _mm512_unpackhi_ps(y[2], y[3]));
  return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(z01), _mm512_castps_pd(z23))),
                       _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(z01), _mm512_castps_pd(z23))));
}
#endif

/// s[r * lds + b] = scale * (q_r . k[b]) for the R rows q_r = q + r * ldq and the B key rows k[b]
/// (d elements each; a PlainRow or a row that widens its elements as it reads them): the decode
/// kernel's logits of B keys for R query rows, each key read once and each packet of q loaded once
/// for all B. One packet accumulator per row and key, reduced at the end (the R B sums together,
/// reduce_4x4, where the instruction set allows); the tail past the last whole packet is added
/// element by element.
template <int R, int B, typename T, class Row>
void dot_rows_block(const T* q, index_t ldq, const Row* k, index_t d, T scale, T* s, index_t lds) {
  namespace ei = Eigen::internal;
  using Packet = typename ei::packet_traits<T>::type;
  constexpr index_t kSize = ei::packet_traits<T>::size;
  Packet acc[R][B];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) acc[r][b] = ei::pset1<Packet>(T(0));
  index_t c = 0;
  for (; c + kSize <= d; c += kSize) {
    Packet kk[B];
    for (int b = 0; b < B; ++b) kk[b] = k[b].template packet<Packet>(c);
    for (int r = 0; r < R; ++r) {
      const Packet qq = ei::ploadu<Packet>(q + r * ldq + c);
      for (int b = 0; b < B; ++b) acc[r][b] = ei::pmadd(qq, kk[b], acc[r][b]);
    }
  }
  T sum[R][B];
#if defined(EIGEN_VECTORIZE_AVX512)
  if constexpr (std::is_same_v<T, float> && R == 4 && B == 4) {
    alignas(64) float all[16];
    _mm512_store_ps(all, reduce_4x4(acc));
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < B; ++b) sum[r][b] = all[4 * r + b];
  } else
#endif
  {
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < B; ++b) sum[r][b] = ei::predux(acc[r][b]);
  }
  for (int r = 0; r < R; ++r) {
    for (int b = 0; b < B; ++b) {
      T x = sum[r][b];
      for (index_t t = c; t < d; ++t) x += q[r * ldq + t] * k[b].at(t);
      s[r * lds + b] = scale * x;
    }
  }
}

/// o_r += sum_{b < B} p[r * ldp + b] * v[b] for the R rows o_r = o + r * ldo and B value rows
/// v[b]: the decode kernel's product of B value rows with the weights they get, each value read
/// once and each packet of o loaded and stored once for all B.
template <int R, int B, typename T, class Row>
void axpy_rows_block(const T* p, index_t ldp, const Row* v, index_t d, T* o, index_t ldo) {
  namespace ei = Eigen::internal;
  using Packet = typename ei::packet_traits<T>::type;
  constexpr index_t kSize = ei::packet_traits<T>::size;
  // The R B weights, broadcast once (the stores into o may alias p as far as the compiler knows).
  Packet w[R][B];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) w[r][b] = ei::pset1<Packet>(p[r * ldp + b]);
  index_t c = 0;
  for (; c + kSize <= d; c += kSize) {
    Packet vv[B];
    for (int b = 0; b < B; ++b) vv[b] = v[b].template packet<Packet>(c);
    for (int r = 0; r < R; ++r) {
      Packet acc = ei::ploadu<Packet>(o + r * ldo + c);
      for (int b = 0; b < B; ++b) acc = ei::pmadd(w[r][b], vv[b], acc);
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
