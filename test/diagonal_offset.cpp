// SPDX-License-Identifier: MIT
// Options::diagonal_offset: a block of a longer sequence computed with the masks of its global
// positions. Rows of a block equal the whole call's rows; key blocks merged by their
// log-sum-exps equal the whole call within the merge's rounding; the alignment and key lengths
// do not move a given offset; out-of-range offsets and decode calls are rejected.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "common.hpp"
#include "random.hpp"

namespace test_diagonal_offset {

using namespace ea_test;

namespace {

struct Variant {
  const char* name;
  bool causal;
  bool bottom_right;
  std::ptrdiff_t window_left, window_right;
  bool alibi;
  double softcap;
};

const std::vector<Variant> kVariants = {
    {"none", false, false, -1, -1, false, 0},
    {"causal top-left", true, false, -1, -1, false, 0},
    {"causal bottom-right", true, true, -1, -1, false, 0},
    {"window 5/2", false, false, 5, 2, false, 0},
    {"causal window 7", true, true, 7, -1, false, 0},
    {"alibi causal", true, false, -1, -1, true, 0},
    {"alibi softcap", false, true, -1, -1, true, 3.0},
};

template <class T>
ea::Options options_of(const Variant& v, ea::Kernel kernel) {
  ea::Options opt;
  opt.causal = v.causal;
  opt.alignment = v.bottom_right ? ea::CausalAlignment::BottomRight : ea::CausalAlignment::TopLeft;
  opt.window_left = v.window_left;
  opt.window_right = v.window_right;
  opt.softcap = v.softcap;
  opt.kernel = kernel;
  return opt;
}

/// out (and lse) of attention_heads_into on one head: Q rows [q0, q0 + nq), K/V rows [k0, k0 + nk).
template <class T>
void block_call(const RowMatrix<T>& Q, const RowMatrix<T>& K, const RowMatrix<T>& V, Eigen::Index q0,
                Eigen::Index nq, Eigen::Index k0, Eigen::Index nk, const ea::Options& opt, const T* slope,
                RowMatrix<T>& out, RowMatrix<T>& lse) {
  out.setZero(nq, V.cols());
  lse.setZero(nq, 1);
  ea::Masks<T> masks;
  masks.alibi_slopes = slope;
  ea::attention_heads_into(ea::HeadsView<const T>::single(Q.middleRows(q0, nq)),
                           ea::HeadsView<const T>::single(K.middleRows(k0, nk)),
                           ea::HeadsView<const T>::single(V.middleRows(k0, nk)),
                           ea::HeadsView<T>::single(out), ea::HeadsView<T>::single(lse), opt, masks);
}

}  // namespace

TEST_CASE_TEMPLATE("diagonal_offset: query blocks are the whole call's rows", T, float, double) {
  Rng rng(1501);
  const Eigen::Index tq = 45, tk = 71, dk = 9, dv = 5;
  const auto Q = random_matrix<RowMatrix<T>>(rng, tq, dk);
  const auto K = random_matrix<RowMatrix<T>>(rng, tk, dk);
  const auto V = random_matrix<RowMatrix<T>>(rng, tk, dv);
  const T slope = T(0.25);
  const T tol = T(32) * std::numeric_limits<T>::epsilon() * T(4);  // as the merge test below
  for (const Variant& v : kVariants) {
    const std::string vname = v.name;
    CAPTURE(vname);
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      const ea::Options whole = options_of<T>(v, kernel);
      RowMatrix<T> out_all, lse_all;
      block_call<T>(Q, K, V, 0, tq, 0, tk, whole, v.alibi ? &slope : nullptr, out_all, lse_all);
      const Eigen::Index o = v.bottom_right ? tk - tq : 0;
      for (const Eigen::Index q0 : {Eigen::Index(0), Eigen::Index(1), Eigen::Index(17), Eigen::Index(44)}) {
        const Eigen::Index nq = std::min<Eigen::Index>(19, tq - q0);
        CAPTURE(q0);
        ea::Options block = whole;
        block.alignment = ea::CausalAlignment::TopLeft;  // must not matter once the offset is set
        block.diagonal_offset = o + q0;
        RowMatrix<T> out, lse;
        block_call<T>(Q, K, V, q0, nq, 0, tk, block, v.alibi ? &slope : nullptr, out, lse);
        // Not bitwise: the kernels' row micro-tiles differ with the row count. Within a few
        // roundings of the same sums (the key tiles are the same).
        CHECK((out - out_all.middleRows(q0, nq)).cwiseAbs().maxCoeff() <= tol);
        CHECK((lse - lse_all.middleRows(q0, nq)).cwiseAbs().maxCoeff() <= tol * T(8));
      }
    }
  }
}

TEST_CASE_TEMPLATE("diagonal_offset: key blocks merged by their log-sum-exps are the whole call", T, float,
                   double) {
  Rng rng(1502);
  const Eigen::Index tq = 38, tk = 61, dk = 7, dv = 6;
  const auto Q = random_matrix<RowMatrix<T>>(rng, tq, dk);
  const auto K = random_matrix<RowMatrix<T>>(rng, tk, dk);
  const auto V = random_matrix<RowMatrix<T>>(rng, tk, dv);
  const T slope = T(0.125);
  // Merging two partial results rounds each output a few times in T: a handful of epsilons of
  // the largest |V| (1 here, normal values up to ~4), independent of the sizes.
  const T tol = T(32) * std::numeric_limits<T>::epsilon() * T(4);
  for (const Variant& v : kVariants) {
    const std::string vname = v.name;
    CAPTURE(vname);
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      const ea::Options whole = options_of<T>(v, kernel);
      RowMatrix<T> out_all, lse_all;
      block_call<T>(Q, K, V, 0, tq, 0, tk, whole, v.alibi ? &slope : nullptr, out_all, lse_all);
      const Eigen::Index o = v.bottom_right ? tk - tq : 0;
      for (const Eigen::Index k1 : {Eigen::Index(1), Eigen::Index(20), Eigen::Index(40), Eigen::Index(60)}) {
        CAPTURE(k1);
        RowMatrix<T> out_a, lse_a, out_b, lse_b;
        ea::Options block = whole;
        block.diagonal_offset = o;  // keys [0, k1)
        block_call<T>(Q, K, V, 0, tq, 0, k1, block, v.alibi ? &slope : nullptr, out_a, lse_a);
        block.diagonal_offset = o - k1;  // keys [k1, tk): key k1 + j is local key j
        block_call<T>(Q, K, V, 0, tq, k1, tk - k1, block, v.alibi ? &slope : nullptr, out_b, lse_b);
        RowMatrix<T> out, lse;
        merge_one_head<T>(out_a, lse_a, out_b, lse_b, out, lse);
        CHECK((out - out_all).cwiseAbs().maxCoeff() <= tol);
        check_lse_near(lse, lse_all, tol);
      }
    }
  }
}

TEST_CASE_TEMPLATE("diagonal_offset: the frontier is exactly j <= i + offset, whatever the alignment", T,
                   float, double) {
  Rng rng(1503);
  const Eigen::Index tq = 6, tk = 9;
  const auto Q = random_matrix<RowMatrix<T>>(rng, tq, 4, 0.5);
  const auto K = random_matrix<RowMatrix<T>>(rng, tk, 4, 0.5);
  for (const std::ptrdiff_t offset : {-8, -3, 0, 2, 8, 100}) {
    for (const auto alignment : {ea::CausalAlignment::TopLeft, ea::CausalAlignment::BottomRight}) {
      CAPTURE(offset);
      ea::Options opt;
      opt.causal = true;
      opt.alignment = alignment;
      opt.diagonal_offset = offset;
      const RowMatrix<T> s = ea::attention_scores(Q, K, opt);
      for (Eigen::Index i = 0; i < tq; ++i)
        for (Eigen::Index j = 0; j < tk; ++j) CHECK((s(i, j) > T(0)) == (j <= i + offset));
    }
  }
}

TEST_CASE("diagonal_offset: outside +-2^60 is rejected, and decoding rejects it") {
  const RowMatrix<float> Q = RowMatrix<float>::Ones(2, 3), K = RowMatrix<float>::Ones(4, 3);
  ea::Options opt;
  opt.diagonal_offset = (std::ptrdiff_t(1) << 60) + 1;
  CHECK_THROWS_WITH_AS(ea::attention(Q, K, K, opt), doctest::Contains("diagonal_offset must be within"),
                       std::invalid_argument);
  opt.diagonal_offset = -(std::ptrdiff_t(1) << 60);
  CHECK_NOTHROW(ea::attention(Q, K, K, opt));
  // The limits themselves are taken, and mean what they say. Every logit is 3 / sqrt(3) = sqrt(3)
  // and V's rows are ones: a row that sees any key averages to exactly 1 with LSE sqrt(3) +
  // log(keys seen); causal, an offset of -2^60 hides every key (zeros, LSE -inf) and +2^60 shows
  // them all. Without causal the offset moves nothing.
  const auto check = [&](bool causal, std::ptrdiff_t offset, float out_value, float lse_value) {
    CAPTURE(causal);
    CAPTURE(offset);
    ea::Options o = opt;
    o.causal = causal;
    o.diagonal_offset = offset;
    RowMatrix<float> out(2, 3);
    ea::Vector<float> lse(2);
    ea::attention_into(Q, K, K, out, lse, o);
    CHECK((out.array() == out_value).all());
    for (Eigen::Index i = 0; i < 2; ++i) {
      if (std::isinf(lse_value)) {
        CHECK(lse(i) == lse_value);
      } else {
        CHECK(std::fabs(lse(i) - lse_value) <= 8 * std::numeric_limits<float>::epsilon() * lse_value);
      }
    }
  };
  const float all_keys = std::sqrt(3.0f) + std::log(4.0f);
  const std::ptrdiff_t limit = std::ptrdiff_t(1) << 60;
  check(false, -limit, 1.0f, all_keys);
  check(false, limit, 1.0f, all_keys);
  check(true, -limit, 0.0f, -std::numeric_limits<float>::infinity());
  check(true, limit, 1.0f, all_keys);
  ea::PagedKVCache<float> cache(1, 3, 3, 16, 64);
  const auto s = cache.create();
  cache.append(s, K, K);
  CHECK_THROWS_WITH_AS(ea::attention_decode(cache, s, Q.topRows(1), opt),
                       doctest::Contains("diagonal_offset is not used by decoding"), std::invalid_argument);
}

}  // namespace test_diagonal_offset
