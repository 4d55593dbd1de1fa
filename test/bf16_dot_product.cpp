// SPDX-License-Identifier: MIT
// The bf16 pairs: Kernel::Avx512Bf16, the bf16 fused forward and the bf16 backward on vdpbf16ps,
// and Kernel::Amx, the same two on AMX tiles (tdpbf16ps), Q and K as bf16 pairs and the
// weights (and the backward's dZ) rounded to bf16 before their products (docs/low_precision.md).
// Checked here against what they must compute: a two-key case worked by hand whose answer tells a
// rounded weight from an unrounded one; the exact result on the bf16 inputs within the P-rounded
// error model (low_precision.hpp) over shapes that cut pairs, panels, AMX's 16-row strips and
// depth blocks, and tiles; a key hidden in the odd half of a pair (or in AMX's padding) that holds
// NaN or infinity; the backward within the float backward's bound plus its products'
// rounding; bitwise the same for every thread count. Every other call is Avx512's, bit for bit,
// and Kernel::Auto takes the kernels exactly where the CPU says. (The suite's other 16-bit tests
// run every kernel too, these among them.)
#include <doctest/doctest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#endif

#include "common.hpp"
#include "decode.hpp"
#include "inputs.hpp"
#include "low_precision.hpp"
#include "reference_backward.hpp"

namespace test_bf16_dot_product {

using namespace ea_test;
using B16 = Eigen::bfloat16;

namespace {

bool have(ea::Kernel kernel) {
  if (ea::kernel_available(kernel)) return true;
  MESSAGE("Kernel::" << ea::kernel_name(kernel)
                     << " is not available on this CPU or in this build: its cases are not run here");
  return false;
}

/// The kernels whose fused bf16 forward takes bf16 pairs, those available here (the others said).
std::vector<ea::Kernel> pairs_kernels() {
  std::vector<ea::Kernel> kernels;
  for (const ea::Kernel k : {ea::Kernel::Avx512Bf16, ea::Kernel::Amx})
    if (have(k)) kernels.push_back(k);
  return kernels;
}

/// Runs `check(kernel)` on each pairs kernel available here, the kernel's name captured.
template <class Check>
void on_pairs_kernels(Check check) {
  for (const ea::Kernel kernel : pairs_kernels()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    check(kernel);
  }
}

ea::Options pairs_options(int threads, ea::Kernel kernel) {
  ea::Options opt;
  opt.kernel = kernel;
  opt.threads = threads;
  return opt;
}

/// bf16 rounding of a long double (to nearest, ties to even: through float, exact for the
/// weights used here, which are floats).
long double bf16(long double x) {
  return static_cast<long double>(static_cast<float>(B16(static_cast<float>(x))));
}

}  // namespace

namespace {

/// Two keys, d = 1, scale 1: logits 0 and -x, so the weights before the division are exactly 1
/// and e = exp(-x) (rounded to float by the kernel's exp). V = (0, 1): ATTN = bf16(e) / (1 + e)
/// with the rounded weight, e / (1 + e) without. Finds x for which the two give different bf16
/// results, each far from a rounding boundary, so that a kernel keeping P in float fails.
void rounded_weight_case(ea::Kernel kernel) {
  ea::Options opt = pairs_options(1, kernel);
  opt.scale = 1.0;
  RowMatrix<B16> Q(1, 1), K(2, 1), V(2, 1);
  Q(0, 0) = B16(1.0f);
  K(0, 0) = B16(0.0f);
  V(0, 0) = B16(0.0f);
  V(1, 0) = B16(1.0f);
  int found = 0;
  for (int step = 1; step < 2000 && found < 8; ++step) {
    const float x = static_cast<float>(B16(0.005f * static_cast<float>(step)));  // exact in bf16
    const long double e = std::exp(-static_cast<long double>(x));
    const long double rounded = bf16(e) / (1 + e), unrounded = e / (1 + e);
    // Distance from v to the nearest bf16 rounding boundary, in bf16 spacings at v.
    const auto margin = [](long double v) {
      const long double scaled = v / std::ldexp(1.0L, std::ilogb(v) - 7);
      return std::fabs(scaled - std::floor(scaled) - 0.5L);
    };
    // Distinct bf16 results; e and both results at least 1/16 of a spacing (2^-12 relative or
    // more) from a boundary, so that the float rounding of exp and of the division (a few 2^-24)
    // cannot move them across one.
    if (bf16(rounded) == bf16(unrounded) || margin(e) < 0.0625L || margin(rounded) < 0.0625L ||
        margin(unrounded) < 0.0625L)
      continue;
    ++found;
    K(1, 0) = B16(-x);
    const RowMatrix<B16> out = ea::attention(Q, K, V, opt);
    CAPTURE(x);
    CHECK(static_cast<long double>(static_cast<float>(out(0, 0))) == bf16(rounded));
  }
  CHECK(found == 8);
}

void error_model_case(ea::Kernel kernel) {
  Rng rng(2701);
  // Odd d (a pair half of 0), d = 1, d_v != d_k, T = 1, key counts past a panel (48) and past a
  // key tile, T_q != T_k; every mask of the suite. For AMX: T_q cutting 16-row strips (5, 9, 70,
  // 130), d_k cutting its blocks of 32 (1, 7, 31, 33, 40), whole blocks (64, 128).
  const std::vector<Shape> shapes = {{1, 1, 1, 1},     {1, 9, 7, 3},      {5, 49, 33, 17},
                                     {9, 97, 64, 64},  {70, 301, 31, 65}, {130, 1100, 128, 40},
                                     {33, 130, 40, 33}};
  for (const Shape& s : shapes) {
    const RowMatrix<B16> Q = round_to<B16>(random_matrix<RowMatrix<float>>(rng, s.tq, s.dk, 2.0));
    const RowMatrix<B16> K = round_to<B16>(random_matrix<RowMatrix<float>>(rng, s.tk, s.dk, 2.0));
    const RowMatrix<B16> V = round_to<B16>(random_matrix<RowMatrix<float>>(rng, s.tk, s.dv));
    const MatrixLD Ql = widen_ld(Q), Kl = widen_ld(K), Vl = widen_ld(V);
    for (const MaskSpec& mask : all_masks()) {
      CAPTURE(s.tq);
      CAPTURE(s.tk);
      CAPTURE(s.dk);
      CAPTURE(s.dv);
      CAPTURE(mask_name(mask));
      ea::Options opt = make_options(mask, std::nullopt, kernel);
      const ReferenceResult ref = reference_for(Ql, Kl, Vl, opt);
      const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.dk)));
      const NaiveResult naive = naive_p_rounded<B16>(Q, K, V, mask, scale);
      const long double bound = low_precision_bound(naive.attn, ref.attn);
      Eigen::VectorXf lse;
      RowMatrix<B16> out;
      ea::attention_into(Q, K, V, out, lse, opt);
      CHECK(max_error(widen_ld(out), ref.attn) <= bound);
      // The LSE comes from the float logits of exact products: the float budget.
      EA_CHECK_NEAR(lse, ref.lse, budget_for<float>(ref, s.dk).lse);
      // Bitwise the same for every thread count.
      for (const int threads : {2, 3}) {
        opt.threads = threads;
        RowMatrix<B16> again;
        ea::attention_into(Q, K, V, again, opt);
        EA_CHECK_EQUAL(again.cast<float>(), out.cast<float>());
      }
    }
  }
}

/// Causal, 7 query rows over 20 keys: one strip whose rows see keys up to 7, so the last pair of
/// weights holds key 6 and the hidden key 7 (on AMX, the block of 16 pairs all keys to 31). V at
/// key 7 is NaN or infinite; the rows must stay finite and equal the call with that row of V
/// finite (hidden keys weigh exactly 0).
void hidden_key_case(ea::Kernel kernel) {
  Rng rng(2702);
  const RowMatrix<B16> Q = round_to<B16>(random_matrix<RowMatrix<float>>(rng, 7, 16));
  const RowMatrix<B16> K = round_to<B16>(random_matrix<RowMatrix<float>>(rng, 20, 16));
  RowMatrix<B16> V = round_to<B16>(random_matrix<RowMatrix<float>>(rng, 20, 10));
  ea::Options opt = pairs_options(1, kernel);
  opt.causal = true;
  const MatrixLD ref = reference_for(widen_ld(Q), widen_ld(K), widen_ld(V), opt).attn;
  const NaiveResult naive = naive_p_rounded<B16>(Q, K, V, {true, false}, 0.25f);
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    CAPTURE(bad);
    RowMatrix<B16> Vbad = V;
    Vbad.row(7).setConstant(B16(bad));
    const RowMatrix<B16> out = ea::attention(Q, K, Vbad, opt);
    CHECK(out.cast<float>().allFinite());
    CHECK(max_error(widen_ld(out), ref) <= low_precision_bound(naive.attn, ref));
  }
  // A NaN at a key that the last row sees reaches that row only.
  RowMatrix<B16> Vnan = V;
  Vnan(6, 0) = B16(std::numeric_limits<float>::quiet_NaN());
  const RowMatrix<B16> out = ea::attention(Q, K, Vnan, opt);
  CHECK(std::isnan(static_cast<float>(out(6, 0))));
  CHECK(out.topRows(6).cast<float>().allFinite());
  // Past the last visible key of a strip whose rows all see the same keys [0, 16) of a tile of 40
  // (chunked-local attention, chunks of 16 keys: an even end, inside AMX's block of 16 pairs, so
  // no key that the strip hides in its span): a NaN at key 18 reaches the rows of its own chunk
  // (16 to 31) only.
  const RowMatrix<B16> Qc = round_to<B16>(random_matrix<RowMatrix<float>>(rng, 40, 16));
  const RowMatrix<B16> Kc = round_to<B16>(random_matrix<RowMatrix<float>>(rng, 40, 16));
  const RowMatrix<B16> Vc = round_to<B16>(random_matrix<RowMatrix<float>>(rng, 40, 10));
  ea::Options chunked = pairs_options(1, kernel);
  chunked.chunk_size = 16;
  RowMatrix<B16> Vc_nan = Vc;
  Vc_nan.row(18).setConstant(B16(std::numeric_limits<float>::quiet_NaN()));
  const RowMatrix<B16> a = ea::attention(Qc, Kc, Vc_nan, chunked), b = ea::attention(Qc, Kc, Vc, chunked);
  EA_CHECK_EQUAL(a.topRows(16).cast<float>(), b.topRows(16).cast<float>());
  EA_CHECK_EQUAL(a.bottomRows(8).cast<float>(), b.bottomRows(8).cast<float>());
  CHECK(a.middleRows(16, 16).cast<float>().array().isNaN().all());
}

}  // namespace

TEST_CASE("bf16 dot product: a weight is rounded to bf16 before it multiplies V, the row sum is not") {
  on_pairs_kernels(rounded_weight_case);
}

TEST_CASE("bf16 dot product: within the P-rounded error model across pairs, panels and tiles") {
  on_pairs_kernels(error_model_case);
}

TEST_CASE("bf16 dot product: a hidden key in the odd half of a pair never reaches a row") {
  on_pairs_kernels(hidden_key_case);
}

namespace {

/// The backward on pairs rounds P and dZ to bf16 before dV += Pᵀ dO, dK += dZᵀ Q and dQ += dZ K.
/// Against the float backward (Avx512) on the same widened inputs, forward results and d_scores:
/// each gradient within the float bound of each (the reference's) plus the rounding of its
/// products' terms (reference_heads_backward's product_rounding, 2^-9) plus the final rounding to
/// bf16 (2^-9 |g|, doubled). Shapes cut pairs of query rows and of keys (odd T_q, T_k, d_k, d_v),
/// the backward's query and key tiles (128 x 256) and AMX's blocks (16 rows or keys, 32 elements
/// of a depth); causal, soft-cap and a bias; 1, 2, 3 threads.
void backward_case(ea::Kernel kernel) {
  Rng rng(2705);
  struct Case {
    Eigen::Index tq, tk, dk, dv;
    bool causal;
    float softcap;
  };
  for (const Case& c : {Case{1, 1, 1, 1, false, 0.0f}, Case{7, 9, 5, 3, true, 0.0f},
                        Case{149, 301, 33, 17, true, 4.0f}, Case{130, 257, 64, 64, false, 0.0f}}) {
    CAPTURE(c.tq);
    CAPTURE(c.tk);
    CAPTURE(c.dk);
    const RowMatrix<B16> Q = round_to<B16>(random_matrix<RowMatrix<float>>(rng, c.tq, c.dk, 1.5)),
                         K = round_to<B16>(random_matrix<RowMatrix<float>>(rng, c.tk, c.dk, 1.5)),
                         V = round_to<B16>(random_matrix<RowMatrix<float>>(rng, c.tk, c.dv)),
                         dO = round_to<B16>(random_matrix<RowMatrix<float>>(rng, c.tq, c.dv)),
                         dS = round_to<B16>(random_matrix<RowMatrix<float>>(rng, c.tq, c.tk)),
                         bias = round_to<B16>(random_matrix<RowMatrix<float>>(rng, c.tq, c.tk));
    ea::Options opt = pairs_options(1, kernel);
    opt.causal = c.causal;
    opt.softcap = c.softcap;
    ea::Masks<B16> masks;
    masks.bias = ea::BroadcastView<B16>::matrix(bias.data(), c.tq, c.tk);
    Eigen::VectorXf lse;
    RowMatrix<B16> out;
    ea::attention_into(Q, K, V, out, lse, opt, masks);
    // The float backward on the same values.
    const RowMatrix<float> Qf = Q.cast<float>(), Kf = K.cast<float>(), Vf = V.cast<float>(),
                           dOf = dO.cast<float>(), dSf = dS.cast<float>(), biasf = bias.cast<float>(),
                           outf = out.cast<float>();
    ea::Masks<float> masksf;
    masksf.bias = ea::BroadcastView<float>::matrix(biasf.data(), c.tq, c.tk);
    ea::Options wide_opt = opt;
    wide_opt.kernel = ea::Kernel::Avx512;
    const ea::Gradients<float> wide =
        ea::attention_backward(Qf, Kf, Vf, outf, lse, dOf, dSf, wide_opt, masksf);
    // The bound.
    MultiHeadSpec spec;
    spec.causal = c.causal;
    spec.softcap = c.softcap;
    spec.bias = Array4::one_head(widen_ld(bias));
    const BackwardReference ref = reference_heads_backward<float>(
        Array4::one_head(widen_ld(Q)), Array4::one_head(widen_ld(K)), Array4::one_head(widen_ld(V)), spec,
        Array4::one_head(widen_ld(dO)), Array4::one_head(widen_ld(dS)), std::nullopt, 0x1p-9L);
    const auto check = [](const RowMatrix<B16>& got, const RowMatrix<float>& want, const MatrixLD& tol,
                          const char* what) {
      CAPTURE(what);
      long bad = 0;
      for (Eigen::Index i = 0; i < got.rows(); ++i)
        for (Eigen::Index j = 0; j < got.cols(); ++j) {
          const long double x = static_cast<float>(got(i, j)), y = want(i, j);
          if (!(std::fabs(x - y) <= 2 * tol(i, j) + 0x1p-8L * std::fabs(y))) ++bad;
        }
      CHECK(bad == 0);
    };
    std::optional<ea::Gradients<B16>> first;
    for (const int threads : {1, 2, 3}) {
      CAPTURE(threads);
      opt.threads = threads;
      const ea::Gradients<B16> g = ea::attention_backward(Q, K, V, out, lse, dO, dS, opt, masks);
      check(g.dq, wide.dq, ref.dq_tol.slice(0, 0), "dQ");
      check(g.dk, wide.dk, ref.dk_tol.slice(0, 0), "dK");
      check(g.dv, wide.dv, ref.dv_tol.slice(0, 0), "dV");
      if (threads == 1) {
        first = g;
      } else {  // bitwise the same for every thread count
        EA_CHECK_EQUAL(g.dq.cast<float>(), first->dq.cast<float>());
        EA_CHECK_EQUAL(g.dk.cast<float>(), first->dk.cast<float>());
        EA_CHECK_EQUAL(g.dv.cast<float>(), first->dv.cast<float>());
      }
    }
  }
}

}  // namespace

TEST_CASE("bf16 dot product: the backward within the P-rounded model of the float backward") {
  on_pairs_kernels(backward_case);
}

namespace {

/// 64 query rows of one GQA group (8 heads x 8 tokens) go through decode's GEMM path, which on
/// the pairs kernels takes bf16 pairs for a bf16 cache. Two keys, d = 1, scale 1, logits 0 and -x,
/// V = (0, 1): each row's output (float) is bf16(e) / (1 + e) with e = exp(-x), to float
/// rounding, where an unrounded weight would give e / (1 + e), 2^-9 of it away or so.
void prefill_case(ea::Kernel kernel) {
  ea::PagedKVCache<B16> cache(1, 1, 1, 16, 8);
  const ea::SequenceId id = cache.create();
  const float x = 0.37109375f;  // exact in bf16; bf16(exp(-x)) is 2^-10 of it off
  Eigen::Matrix<float, 2, 1> k, v;
  k << 0.0f, -x;
  v << 0.0f, 1.0f;
  cache.append(id, k, v);
  RowMatrix<float> q = RowMatrix<float>::Ones(8, 8);
  ea::Options opt = pairs_options(1, kernel);
  opt.scale = 1.0;
  opt.causal = false;
  const RowMatrix<float> out = ea::attention_decode(cache, id, q, opt);
  const long double e = std::exp(-static_cast<long double>(x));
  const long double rounded = bf16(e) / (1 + e), unrounded = e / (1 + e);
  REQUIRE(std::fabs(rounded - unrounded) > 1e-4L);
  for (Eigen::Index i = 0; i < out.size(); ++i) CHECK(std::fabs(out.data()[i] - rounded) <= 1e-6L);

  // Random cases against the long-double reference: the float budget plus the weights' rounding
  // and the queries' split into two bf16 parts (check_reference's pairs), bitwise for 1 and 2
  // threads; the streaming path (one token) and float and int8 caches are Avx512's, bit for bit.
  Rng rng(2706);
  for (const Eigen::Index dk : {Eigen::Index(64), Eigen::Index(33)}) {
    decode::Case c;
    // (d = 33: 8 heads x 5 tokens, 40 rows: AMX's strips of 16 cut.)
    c.H = 8, c.Hkv = 1, c.dk = dk, c.dv = dk == 64 ? 64 : 17, c.Tk = 300, c.Tq = dk == 64 ? 8 : 5,
    c.page = 16;
    c.causal = true;
    c.alibi = dk == 33;
    CAPTURE(c.describe());
    const decode::Sequence<B16> s = decode::make_sequence<B16>(rng, c);
    ea::PagedKVCache<B16> bf(c.Hkv, c.dk, c.dv, c.page, 512);
    const ea::SequenceId sid = bf.create();
    decode::append_in_pieces(rng, bf, sid, s);
    const ea::SequenceId ids[1] = {sid};
    const ea::Masks<float> masks = decode_masks(c, s);
    decode::Result<float> one, two;
    ea::attention_decode_into(bf, ids, 1, side_by_side(s.Q, c.dk), nullptr, one.out, one.lse,
                              decode::options_of(c, kernel, 1), masks);
    ea::attention_decode_into(bf, ids, 1, side_by_side(s.Q, c.dk), nullptr, two.out, two.lse,
                              decode::options_of(c, kernel, 2), masks);
    EA_CHECK_EQUAL(two.out, one.out);
    EA_CHECK_EQUAL(two.lse, one.lse);
    decode::check_reference(one, decode::reference_of(c, s), c, 1, "bf16-pair prefill vs the reference",
                            true);
    // One token, two heads: the streaming path, the base's.
    const RowMatrix<float> q1 = s.Q.topRows(1).leftCols(2 * c.dk);
    ea::Options o = decode::options_of(c, ea::Kernel::Avx512);
    ea::Masks<float> none;
    ea::PagedKVCache<B16> two_heads(2, c.dk, c.dv, c.page, 512);
    const ea::SequenceId t = two_heads.create();
    two_heads.append(t, s.K.leftCols(c.dk).replicate(1, 2).eval(), s.V.leftCols(c.dv).replicate(1, 2).eval());
    const RowMatrix<float> base = ea::attention_decode(two_heads, t, q1, o);
    o.kernel = kernel;
    EA_CHECK_EQUAL(ea::attention_decode(two_heads, t, q1, o), base);
  }
}

}  // namespace

TEST_CASE("bf16 dot product: prefill over a bf16 cache rounds the weights, and nothing else is lost") {
  on_pairs_kernels(prefill_case);
}

namespace {

/// Calls that `kernel` does not change: the float, double and half forwards and backwards, the
/// decomposed bf16 call, decode and prefill over float and int8 caches.
void every_other_call_case(ea::Kernel kernel) {
  Rng rng(2703);
  const RowMatrix<float> Q = random_matrix<RowMatrix<float>>(rng, 40, 24),
                         K = random_matrix<RowMatrix<float>>(rng, 90, 24),
                         V = random_matrix<RowMatrix<float>>(rng, 90, 12);
  ea::Options a = make_options({true, true}), b = a;
  a.kernel = ea::Kernel::Avx512;
  b.kernel = kernel;
  // float, double and half forwards and backwards; the decomposed bf16 call (SCORES in float
  // products).
  EA_CHECK_EQUAL(ea::attention(Q, K, V, a), ea::attention(Q, K, V, b));
  const RowMatrix<double> Qd = Q.cast<double>(), Kd = K.cast<double>(), Vd = V.cast<double>();
  EA_CHECK_EQUAL(ea::attention(Qd, Kd, Vd, a), ea::attention(Qd, Kd, Vd, b));
  const RowMatrix<Eigen::half> Qh = round_to<Eigen::half>(Q), Kh = round_to<Eigen::half>(K),
                               Vh = round_to<Eigen::half>(V);
  EA_CHECK_EQUAL(ea::attention(Qh, Kh, Vh, a).cast<float>(), ea::attention(Qh, Kh, Vh, b).cast<float>());
  const RowMatrix<B16> Qb = round_to<B16>(Q), Kb = round_to<B16>(K), Vb = round_to<B16>(V);
  const ea::DecomposedResult<B16> ra = ea::attention_decomposed(Qb, Kb, Vb, a),
                                  rb = ea::attention_decomposed(Qb, Kb, Vb, b);
  EA_CHECK_EQUAL(ra.scores.cast<float>(), rb.scores.cast<float>());
  EA_CHECK_EQUAL(ra.attn.cast<float>(), rb.attn.cast<float>());
  Eigen::VectorXf lse;
  RowMatrix<float> out;
  ea::attention_into(Q, K, V, out, lse, a);
  const RowMatrix<float> dO = random_matrix<RowMatrix<float>>(rng, 40, 12);
  const ea::Gradients<float> ga = ea::attention_backward(Q, K, V, out, lse, dO, a),
                             gb = ea::attention_backward(Q, K, V, out, lse, dO, b);
  EA_CHECK_EQUAL(ga.dq, gb.dq);
  EA_CHECK_EQUAL(ga.dk, gb.dk);
  EA_CHECK_EQUAL(ga.dv, gb.dv);
  const RowMatrix<Eigen::half> dOh = round_to<Eigen::half>(dO);
  Eigen::VectorXf lse_h;
  RowMatrix<Eigen::half> out_h;
  ea::attention_into(Qh, Kh, Vh, out_h, lse_h, a);
  const ea::Gradients<Eigen::half> ha = ea::attention_backward(Qh, Kh, Vh, out_h, lse_h, dOh, a),
                                   hb = ea::attention_backward(Qh, Kh, Vh, out_h, lse_h, dOh, b);
  EA_CHECK_EQUAL(ha.dq.cast<float>(), hb.dq.cast<float>());
  EA_CHECK_EQUAL(ha.dv.cast<float>(), hb.dv.cast<float>());
  // Decode and prefill over float and int8 caches (GEMM path: 8 heads x 8 tokens of a group).
  RowMatrix<float> qd = random_matrix<RowMatrix<float>>(rng, 8, 8 * 24);
  ea::PagedKVCache<float> fc(1, 24, 12, 16, 128);
  ea::PagedKVCache<ea::Int8> ic(1, 24, 12, 16, 128);
  const ea::SequenceId fs = fc.create(), is = ic.create();
  fc.append(fs, K, V);
  ic.append(is, K, V);
  for (const Eigen::Index tokens : {Eigen::Index(1), Eigen::Index(8)}) {
    const RowMatrix<float> qt = qd.topRows(tokens);
    EA_CHECK_EQUAL(ea::attention_decode(fc, fs, qt, a), ea::attention_decode(fc, fs, qt, b));
    EA_CHECK_EQUAL(ea::attention_decode(ic, is, qt, a), ea::attention_decode(ic, is, qt, b));
  }
}

}  // namespace

TEST_CASE("bf16 dot product: every other call is Avx512's, bit for bit") {
  on_pairs_kernels(every_other_call_case);
}

#if EIGEN_ATTENTION_TEST_ISA_KERNELS && (defined(__x86_64__) || defined(_M_X64))
TEST_CASE(
    "bf16 dot product: Kernel::Auto takes Amx wherever it runs, else Avx512Bf16 on AMD family 19h and "
    "later") {
  // Amx where CPUID says AMX-TILE and AMX-BF16 (leaf 7, EDX bits 24 and 22) and the OS enables
  // their state (XCR0 bits 17 and 18): on Linux, which lends it on request, the kernel is there
  // exactly then (with AVX512-BF16, which every AMX CPU has). Else the table (dispatch.cpp),
  // recomputed here from CPUID: Zen 4 and Zen 5 run vdpbf16ps at twice the FMA rate; elsewhere
  // (Intel cores run it at half) Auto keeps Avx512's widening.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx);
  const bool amx_cpu = (edx & (1u << 24)) != 0 && (edx & (1u << 22)) != 0;
  __get_cpuid(1, &eax, &ebx, &ecx, &edx);
  bool amx_os = false;
  if ((ecx & (1u << 27)) != 0) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    amx_os = (lo & (3u << 17)) == (3u << 17);
  }
  const bool pairs = ea::kernel_available(ea::Kernel::Avx512Bf16);
  const bool amx = ea::kernel_available(ea::Kernel::Amx);
  CHECK((!amx || (amx_cpu && amx_os)));
#if defined(__linux__)
  if (pairs) CHECK(amx == (amx_cpu && amx_os));  // the same build holds both kernels
#endif
  const std::string amx_text = std::string("AMX-BF16 ") + (amx_cpu ? "in" : "not in") +
                               " this CPU, its state " + (amx_os ? "" : "not ") +
                               "enabled by the OS: Kernel::Amx " + (amx ? "runs" : "does not run") + " here";
  MESSAGE(amx_text);
  __get_cpuid(0, &eax, &ebx, &ecx, &edx);
  const bool amd = ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163;
  __get_cpuid(1, &eax, &ebx, &ecx, &edx);
  unsigned family = (eax >> 8) & 0xf;
  if (family == 0xf) family += (eax >> 20) & 0xff;
  const ea::Kernel expected = amx                              ? ea::Kernel::Amx
                              : pairs && amd && family >= 0x19 ? ea::Kernel::Avx512Bf16
                              : pairs                          ? ea::Kernel::Avx512
                                                               : ea::available_kernels().front();
  CHECK(ea::auto_kernel() == expected);
  MESSAGE("Kernel::Auto runs " << std::string(ea::kernel_name(ea::auto_kernel())) << " here");
  // Auto is that kernel, call for call.
  Rng rng(2704);
  const RowMatrix<B16> Q = round_to<B16>(random_matrix<RowMatrix<float>>(rng, 20, 16)),
                       K = round_to<B16>(random_matrix<RowMatrix<float>>(rng, 50, 16)),
                       V = round_to<B16>(random_matrix<RowMatrix<float>>(rng, 50, 16));
  ea::Options automatic, chosen;
  chosen.kernel = ea::auto_kernel();
  EA_CHECK_EQUAL(ea::attention(Q, K, V, automatic).cast<float>(),
                 ea::attention(Q, K, V, chosen).cast<float>());
}
#endif

}  // namespace test_bf16_dot_product
