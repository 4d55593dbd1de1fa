// SPDX-License-Identifier: MIT
// Options::chunk_size and chunk_origin: chunked-local attention (Llama 4's attention_chunk). A
// hand-worked example; the same call with the equivalent boolean mask, built here from the
// definition, single head and multi-head, forward, decomposed and backward; key blocks whose
// chunk_origin places them in the grid, merged, equal the whole call (what the distributed
// calls do); out-of-range values, and a chunk_origin for decoding, are rejected. (The PyTorch
// golden cases, the long-double crosschecks, decode and the distributed calls test it too.)
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "common.hpp"
#include "random.hpp"

namespace test_chunked_local {

using namespace ea_test;

namespace {

/// The boolean mask (row-major, T_q x T_k, true = may attend) that chunk_size n and chunk_origin
/// o give query i (diagonal key i + offset) and key j, before any other mask.
std::vector<char> chunk_mask(Eigen::Index tq, Eigen::Index tk, std::ptrdiff_t offset, std::ptrdiff_t n,
                             std::ptrdiff_t o) {
  std::vector<char> m(static_cast<std::size_t>(tq * tk));
  for (Eigen::Index i = 0; i < tq; ++i)
    for (Eigen::Index j = 0; j < tk; ++j)
      m[static_cast<std::size_t>(i * tk + j)] = floor_div(j + o, n) == floor_div(i + offset + o, n);
  return m;
}

struct Variant {
  const char* name;
  Eigen::Index tq, tk;
  bool causal, bottom_right;
  std::ptrdiff_t chunk, origin, window_left;
};

// Odd sizes that fill no tile, chunks that straddle query and key tiles, chunks of 1 and
// larger than T, T = 1, T_q != T_k both ways, a window inside the chunks, origins of both signs.
const std::vector<Variant> kVariants = {
    {"Llama 4: causal chunks of 64", 300, 300, true, false, 64, 0, -1},
    {"no causal mask, chunks of 7", 45, 71, false, false, 7, 0, -1},
    {"causal bottom-right, T_q < T_k", 37, 130, true, true, 16, 0, -1},
    {"causal top-left, T_q > T_k", 50, 20, true, false, 8, 0, -1},
    {"chunks of one key", 19, 19, false, false, 1, 0, -1},
    {"a chunk longer than the keys", 33, 40, true, true, 1000, 0, -1},
    {"one query", 1, 700, true, true, 256, 0, -1},
    {"a window inside the chunks", 90, 90, true, false, 32, 0, 5},
    {"origin 13", 60, 75, true, true, 20, 13, -1},
    {"origin -29", 60, 75, false, false, 20, -29, -1},
};

ea::Options options_of(const Variant& v, ea::Kernel kernel, int threads) {
  ea::Options opt;
  opt.causal = v.causal;
  opt.alignment = v.bottom_right ? ea::CausalAlignment::BottomRight : ea::CausalAlignment::TopLeft;
  opt.window_left = v.window_left;
  opt.chunk_size = v.chunk;
  opt.chunk_origin = v.origin;
  opt.kernel = kernel;
  opt.threads = threads;
  return opt;
}

/// The same call with chunk_size off and the chunks as a boolean mask.
ea::Options masked_options(ea::Options opt) {
  opt.chunk_size = 0;
  opt.chunk_origin = 0;
  return opt;
}

}  // namespace

TEST_CASE_TEMPLATE("chunked-local: a hand-worked example, chunks of 2 with the causal mask", T, float,
                   double) {
  // Q = 0: every visible key weighs the same. Query i sees keys j <= i of its own chunk
  // [2 floor(i / 2), 2 floor(i / 2) + 2): rows 0..4 see {0}, {0, 1}, {2}, {2, 3}, {4}.
  const RowMatrix<T> Q = RowMatrix<T>::Zero(5, 3), K = RowMatrix<T>::Ones(5, 3);
  RowMatrix<T> V(5, 1);
  V << 1, 2, 4, 8, 16;
  ea::Options opt;
  opt.causal = true;
  opt.chunk_size = 2;
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    opt.kernel = kernel;
    RowMatrix<T> expected_scores(5, 5);
    expected_scores << 1, 0, 0, 0, 0,  //
        0.5, 0.5, 0, 0, 0,             //
        0, 0, 1, 0, 0,                 //
        0, 0, 0.5, 0.5, 0,             //
        0, 0, 0, 0, 1;
    const auto r = ea::attention_decomposed(Q, K, V, opt);
    CHECK(r.scores == expected_scores);  // exact: 1 and 1/2
    RowMatrix<T> expected_out(5, 1);
    expected_out << 1, 1.5, 4, 6, 16;
    CHECK(r.attn == expected_out);
    const RowMatrix<T> fused = ea::attention(Q, K, V, opt);
    CHECK(fused == expected_out);
    // LSE = log(number of visible keys): exp(0) each
    for (Eigen::Index i = 0; i < 5; ++i) CHECK(r.lse(i) == doctest::Approx(std::log(i % 2 == 0 ? 1.0 : 2.0)));
  }
}

TEST_CASE_TEMPLATE("chunked-local: the same call as the boolean mask of the chunks, forward and backward", T,
                   float, double) {
  Rng rng(2601);
  const Eigen::Index dk = 9, dv = 6;
  // One computation of the same function in two ways; the chunked call skips what the mask
  // hides, so their sums over key tiles may round apart: a few epsilons of the result's scale
  // (|V| ~ 1; the gradients' inputs are of that size too).
  const T tol = T(64) * std::numeric_limits<T>::epsilon();
  for (const Variant& v : kVariants) {
    const std::string vname = v.name;
    CAPTURE(vname);
    const auto Q = random_matrix<RowMatrix<T>>(rng, v.tq, dk);
    const auto K = random_matrix<RowMatrix<T>>(rng, v.tk, dk);
    const auto V = random_matrix<RowMatrix<T>>(rng, v.tk, dv);
    const auto dO = random_matrix<RowMatrix<T>>(rng, v.tq, dv);
    const std::ptrdiff_t offset = v.bottom_right ? v.tk - v.tq : 0;
    const std::vector<char> mask = chunk_mask(v.tq, v.tk, offset, v.chunk, v.origin);
    ea::Masks<T> masks;
    masks.mask = ea::BroadcastView<bool>::matrix(reinterpret_cast<const bool*>(mask.data()), v.tq, v.tk);
    for (const auto kernel : kernels_under_test()) {
      const std::string kname = ea::kernel_name(kernel);
      CAPTURE(kname);
      RowMatrix<T> out1, out2;
      for (const int threads : {1, 2}) {
        CAPTURE(threads);
        const ea::Options opt = options_of(v, kernel, threads);
        const auto chunked = ea::attention_decomposed(Q, K, V, opt);
        const auto masked = ea::attention_decomposed(Q, K, V, masked_options(opt), masks);
        CHECK((chunked.scores - masked.scores).cwiseAbs().maxCoeff() <= tol);
        CHECK((chunked.attn - masked.attn).cwiseAbs().maxCoeff() <= tol);
        check_lse_near(chunked.lse, masked.lse, tol);
        // Weights outside the chunk are exactly 0.
        for (Eigen::Index i = 0; i < v.tq; ++i)
          for (Eigen::Index j = 0; j < v.tk; ++j)
            if (!mask[static_cast<std::size_t>(i * v.tk + j)]) CHECK(chunked.scores(i, j) == T(0));
        RowMatrix<T> out;
        Eigen::Matrix<T, Eigen::Dynamic, 1> lse;
        ea::attention_into(Q, K, V, out, lse, opt);
        CHECK((out - masked.attn).cwiseAbs().maxCoeff() <= tol);
        (threads == 1 ? out1 : out2) = out;
        const auto g = ea::attention_backward(Q, K, V, out, lse, dO, opt);
        const auto gm = ea::attention_backward(Q, K, V, out, lse, dO, masked_options(opt), masks);
        const T gtol = tol * T(4) * T(std::sqrt(static_cast<double>(std::max(v.tq, v.tk))));
        CHECK((g.dq - gm.dq).cwiseAbs().maxCoeff() <= gtol);
        CHECK((g.dk - gm.dk).cwiseAbs().maxCoeff() <= gtol);
        CHECK((g.dv - gm.dv).cwiseAbs().maxCoeff() <= gtol);
      }
      CHECK(out1 == out2);  // bitwise the same on any thread count
    }
  }
}

TEST_CASE_TEMPLATE(
    "chunked-local: key blocks placed in the chunk grid by chunk_origin, merged, are the whole call", T,
    float, double) {
  // What the distributed calls do: keys [k1, T_k) are a block whose local key 0 is global key
  // k1, so chunk_origin = k1 (and diagonal_offset = offset - k1).
  Rng rng(2602);
  const Eigen::Index tq = 41, tk = 67, dk = 7, dv = 5;
  const auto Q = random_matrix<RowMatrix<T>>(rng, tq, dk);
  const auto K = random_matrix<RowMatrix<T>>(rng, tk, dk);
  const auto V = random_matrix<RowMatrix<T>>(rng, tk, dv);
  const T tol = T(32) * std::numeric_limits<T>::epsilon() * T(4);  // as diagonal_offset.cpp's merge
  const auto call = [&](Eigen::Index k0, Eigen::Index nk, const ea::Options& opt, RowMatrix<T>& out,
                        RowMatrix<T>& lse) {
    out.setZero(tq, dv);
    lse.setZero(tq, 1);
    ea::attention_heads_into(ea::HeadsView<const T>::single(Q),
                             ea::HeadsView<const T>::single(K.middleRows(k0, nk)),
                             ea::HeadsView<const T>::single(V.middleRows(k0, nk)),
                             ea::HeadsView<T>::single(out), ea::HeadsView<T>::single(lse), opt);
  };
  for (const bool causal : {false, true}) {
    for (const std::ptrdiff_t chunk : {std::ptrdiff_t(5), std::ptrdiff_t(16)}) {
      for (const auto kernel : kernels_under_test()) {
        const std::string kname = ea::kernel_name(kernel);
        CAPTURE(kname);
        CAPTURE(causal);
        CAPTURE(chunk);
        ea::Options whole;
        whole.causal = causal;
        whole.alignment = ea::CausalAlignment::BottomRight;
        whole.chunk_size = chunk;
        whole.kernel = kernel;
        RowMatrix<T> out_all, lse_all;
        call(0, tk, whole, out_all, lse_all);
        const std::ptrdiff_t o = tk - tq;
        for (const Eigen::Index k1 :
             {Eigen::Index(1), Eigen::Index(23), Eigen::Index(40), Eigen::Index(66)}) {
          CAPTURE(k1);
          RowMatrix<T> out_a, lse_a, out_b, lse_b;
          ea::Options block = whole;
          block.diagonal_offset = o;
          call(0, k1, block, out_a, lse_a);
          block.diagonal_offset = o - k1;
          block.chunk_origin = k1;
          call(k1, tk - k1, block, out_b, lse_b);
          RowMatrix<T> out, lse;
          merge_one_head<T>(out_a, lse_a, out_b, lse_b, out, lse);
          CHECK((out - out_all).cwiseAbs().maxCoeff() <= tol);
          check_lse_near(lse, lse_all, tol);
          // Without the origin the second block's chunks are misplaced (key 23 is not on the
          // chunk grid's lines): the check above can fail.
          if (k1 == 23) {
            block.chunk_origin = 0;
            call(k1, tk - k1, block, out_b, lse_b);
            merge_one_head<T>(out_a, lse_a, out_b, lse_b, out, lse);
            CHECK((out - out_all).cwiseAbs().maxCoeff() > T(1e-3));
          }
        }
      }
    }
  }
}

TEST_CASE("chunked-local: out-of-range values are rejected, and decoding rejects a chunk_origin") {
  const RowMatrix<float> Q = RowMatrix<float>::Ones(2, 3), K = RowMatrix<float>::Ones(4, 3);
  ea::Options opt;
  opt.chunk_size = -1;
  CHECK_THROWS_WITH_AS(ea::attention(Q, K, K, opt),
                       doctest::Contains("chunk_size must be between 0 (off) and 2^60, got -1"),
                       std::invalid_argument);
  opt.chunk_size = (std::ptrdiff_t(1) << 60) + 1;
  CHECK_THROWS_WITH_AS(ea::attention(Q, K, K, opt), doctest::Contains("chunk_size must be between"),
                       std::invalid_argument);
  opt.chunk_size = std::ptrdiff_t(1) << 60;  // the largest: one chunk, whatever the origin
  opt.chunk_origin = -(std::ptrdiff_t(1) << 60);
  CHECK_NOTHROW(ea::attention(Q, K, K, opt));
  opt.chunk_origin = (std::ptrdiff_t(1) << 60) + 1;
  CHECK_THROWS_WITH_AS(ea::attention(Q, K, K, opt), doctest::Contains("chunk_origin must be within +-2^60"),
                       std::invalid_argument);
  // Multi-head and backward calls share the one check.
  opt.chunk_origin = 0;
  opt.chunk_size = -5;
  RowMatrix<float> out(2, 3), lse(2, 1);
  CHECK_THROWS_WITH_AS(
      ea::attention_heads_into(ea::HeadsView<const float>::single(Q), ea::HeadsView<const float>::single(K),
                               ea::HeadsView<const float>::single(K), ea::HeadsView<float>::single(out),
                               ea::HeadsView<float>::single(lse), opt),
      doctest::Contains("got -5"), std::invalid_argument);
  // Decoding measures chunks from the cache's first token: a chunk size, but no origin.
  ea::PagedKVCache<float> cache(1, 3, 3, 16, 64);
  const auto s = cache.create();
  cache.append(s, K, K);
  opt.chunk_size = 2;
  CHECK_NOTHROW(ea::attention_decode(cache, s, Q.topRows(1), opt));
  opt.chunk_origin = 3;
  CHECK_THROWS_WITH_AS(ea::attention_decode(cache, s, Q.topRows(1), opt),
                       doctest::Contains("chunk_origin must be 0 for decoding"), std::invalid_argument);
}

}  // namespace test_chunked_local
