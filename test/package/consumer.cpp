// SPDX-License-Identifier: MIT
// A consumer of the EigenAttention package, compiled the way users compile theirs: the package
// tests build it against the installed static and shared libraries with many compilers and
// flags (-O3 -march=native, -mavx2, -mavx512f, -O0 -g, -DEIGEN_DONT_VECTORIZE,
// -DEIGEN_MAX_ALIGN_BYTES=64, -D_GLIBCXX_ASSERTIONS, -D_GLIBCXX_DEBUG, AddressSanitizer,
// -DEIGEN_DEFAULT_DENSE_INDEX_TYPE=int; g++ and clang++; C++17 and C++20), through find_package,
// add_subdirectory, pkg-config and the Debian package. It calls every public function that
// returns or fills Eigen objects and checks what comes back, and that nothing the consumer does
// to Eigen's globals changes the library's bits. Exits 1 on any failure.
//
// Tolerances: against the PyTorch float64 golden case 1e-12 (double) and 1e-6 (float), as the
// library's own tests; against this file's double-precision reference on random inputs in
// [-1, 1] with d_k <= 24, 1e-12 (double) and 2e-5 (float): the error model of
// test/support/tolerance.hpp, (d_k + 4) u |logit| doubled, is below 1e-5 there. A misread
// layout, size or pointer across the boundary gives errors of order 1.
#include <EigenAttention/EigenAttention.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <unistd.h>

namespace ea = EigenAttention;

namespace {

// test/data/seed_3x4.txt: no mask, default scale, T_q = T_k = 3, d_k = d_v = 4. Row-major.
constexpr int kTq = 3, kTk = 3, kDk = 4, kDv = 4;
// clang-format off
const double kQ[kTq * kDk] = {
    -0.1467950974849952, 0.78614129872353578,  0.9468216090039564,   -1.1143440212610307,
    1.6907901257942333,  -0.89482787917263862, -0.35562502700621362, 1.2323857451651945,
    0.13817266368739245, -1.6821984860536687,  0.31767831539796804,  0.13280696453151092};
const double kK[kTk * kDk] = {
    0.13732409647332361, 0.24054612860502139,  1.3954507962006726,   1.3470226203485132,
    2.4382081623118323,  0.202758282866977,    2.4505412457460647,   2.0256017922932585,
    1.7791550193449599,  -0.91793073464733577, -0.45781890986397766, -0.72447329475094702};
const double kV[kTk * kDv] = {
    1.2798780914046086,   -0.99406624436692703, 1.8149727228058179,   -0.60284831108268266,
    1.6148147001014055,   1.930198142133551,    -0.42250146281146128, -0.083186381344667909,
    -0.98372600557300027, -1.2493538035174234,  -0.18827148228626306, 0.28268715134692357};
const double kScores[kTq * kTk] = {
    0.37298127239221901,  0.35044422493822763, 0.27657450266955325,
    0.079563749520887392, 0.71276286968413849, 0.20767338079497411,
    0.22605192928594076,  0.33837590258586309, 0.43557216812819616};
const double kAttn[kTq * kDv] = {
    0.77119951428045053, -0.039880707635077894, 0.47681654625887132,  -0.1758192587680191,
    1.0485181541809165,  1.0372244009865998,    -0.19583629520834772, -0.048550439480421009,
    0.40724962437703049, -0.11576179882046944,  0.18530795403279957,  -0.041292635243202189};
const double kLse[kTq] = {0.98079762189827935, 3.1215632443384624, 1.6052538036798618};
// clang-format on

int failures = 0;
int checks = 0;

void expect(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    std::printf("FAIL %s\n", what.c_str());
    ++failures;
  }
}

// Compares `actual` with the row-major golden numbers: |a - e| <= tol * max(1, |e|), i.e. an
// absolute bound for entries below 1 in magnitude and a relative one above.
template <class Derived>
void expect_near(const char* what, const Eigen::MatrixBase<Derived>& actual, const double* expected,
                 Eigen::Index rows, Eigen::Index cols, double tol) {
  if (actual.rows() != rows || actual.cols() != cols) {
    std::printf("FAIL %s: shape %ldx%ld, expected %ldx%ld\n", what, static_cast<long>(actual.rows()),
                static_cast<long>(actual.cols()), static_cast<long>(rows), static_cast<long>(cols));
    ++failures;
    return;
  }
  double worst = 0;  // largest error in units of the allowed error
  for (Eigen::Index i = 0; i < rows; ++i)
    for (Eigen::Index j = 0; j < cols; ++j) {
      const double e = expected[i * cols + j], a = static_cast<double>(actual(i, j));
      const double allowed = tol * std::max(1.0, std::abs(e));
      const double err = std::abs(a - e) / allowed;
      if (!(err <= 1.0)) {
        std::printf("FAIL %s(%ld, %ld) = %.17g, expected %.17g (tolerance %.1g)\n", what,
                    static_cast<long>(i), static_cast<long>(j), a, e, allowed);
        ++failures;
      }
      worst = std::max(worst, err);
    }
  ++checks;
}

// The reference: softmax(scale Q K^T, causal as asked) V, in double, in this translation unit.
struct Reference {
  Eigen::MatrixXd scores, attn;
  Eigen::VectorXd lse;
};

template <class MQ, class MK, class MV>
Reference reference(const MQ& Q, const MK& K, const MV& V, bool causal) {
  const Eigen::MatrixXd q = Q.template cast<double>(), k = K.template cast<double>(),
                        v = V.template cast<double>();
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.cols()));
  // Dot products and row updates, not Eigen's matrix products: the consumer is compiled in every
  // cell of the matrix, and the products' kernels were a fifth of its compile time.
  Eigen::MatrixXd logits(q.rows(), k.rows());
  for (Eigen::Index i = 0; i < q.rows(); ++i)
    for (Eigen::Index j = 0; j < k.rows(); ++j) logits(i, j) = scale * q.row(i).dot(k.row(j));
  Reference r{Eigen::MatrixXd::Zero(q.rows(), k.rows()), Eigen::MatrixXd::Zero(q.rows(), v.cols()),
              Eigen::VectorXd::Zero(q.rows())};
  for (Eigen::Index i = 0; i < q.rows(); ++i) {
    const Eigen::Index end = causal ? std::min<Eigen::Index>(i + 1, k.rows()) : k.rows();
    const double m = logits.row(i).head(end).maxCoeff();
    double sum = 0;
    for (Eigen::Index j = 0; j < end; ++j) sum += std::exp(logits(i, j) - m);
    for (Eigen::Index j = 0; j < end; ++j) r.scores(i, j) = std::exp(logits(i, j) - m) / sum;
    r.lse(i) = m + std::log(sum);
  }
  for (Eigen::Index i = 0; i < q.rows(); ++i)
    for (Eigen::Index j = 0; j < k.rows(); ++j) r.attn.row(i) += r.scores(i, j) * v.row(j);
  return r;
}

template <class A, class B>
void expect_close(const char* what, const A& actual, const B& expected, double tol) {
  ++checks;
  if (actual.rows() != expected.rows() || actual.cols() != expected.cols()) {
    std::printf("FAIL %s: shape %ldx%ld, expected %ldx%ld\n", what, long(actual.rows()), long(actual.cols()),
                long(expected.rows()), long(expected.cols()));
    ++failures;
    return;
  }
  const double err =
      (actual.template cast<double>() - expected.template cast<double>()).cwiseAbs().maxCoeff();
  if (!(err <= tol)) {
    std::printf("FAIL %s: max error %.3g > %.1g\n", what, err, tol);
    ++failures;
  }
}

template <class A, class B>
bool same_bits(const A& a, const B& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (Eigen::Index i = 0; i < a.rows(); ++i)
    for (Eigen::Index j = 0; j < a.cols(); ++j)
      if (!(a(i, j) == b(i, j)) && !(std::isnan(a(i, j)) && std::isnan(b(i, j)))) return false;
  return true;
}

// Odd sizes that fill no tile, T_q != T_k, d_v != d_k.
constexpr int kRows = 37, kKeys = 53, kDim = 24, kValueDim = 19;

// Every single-head call: by value, into matrices, maps and blocks, the compiled:: forms.
template <typename T>
void check_single_head(double tol) {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  const Mat Q = Mat::Random(kRows, kDim), K = Mat::Random(kKeys, kDim), V = Mat::Random(kKeys, kValueDim);
  for (const bool causal : {false, true}) {
    ea::Options opt;
    opt.causal = causal;
    const Reference ref = reference(Q, K, V, causal);
    const std::string tag = std::string(sizeof(T) == 4 ? "float" : "double") + (causal ? " causal " : " ");

    // By value: allocated in this translation unit, freed here, read with this TU's alignment.
    {
      auto attn = ea::attention(Q, K, V, opt);
      expect_close((tag + "attention").c_str(), attn, ref.attn, tol);
      auto r = ea::attention_decomposed(Q, K, V, opt);
      expect_close((tag + "attention_decomposed scores").c_str(), r.scores, ref.scores, tol);
      expect_close((tag + "attention_decomposed attn").c_str(), r.attn, ref.attn, tol);
      expect_close((tag + "attention_decomposed lse").c_str(), r.lse, ref.lse, tol);
      auto s = ea::attention_scores(Q, K, opt);
      expect_close((tag + "attention_scores").c_str(), s, ref.scores, tol);
      expect(std::abs(static_cast<double>(attn.sum()) - ref.attn.sum()) < 1e3 * tol * kRows * kValueDim,
             tag + "reading a by-value result");
      // Results moved and copied into this TU's own matrices, then destroyed here.
      Mat copy = attn;
      ea::RowMatrix<T> moved = std::move(attn);
      expect(same_bits(copy, moved), tag + "copies of a by-value result");
    }
    // Into: a resizable matrix (starts empty), with LSE; a block of a larger matrix; a Map.
    {
      Mat out;
      Vec lse;
      ea::attention_into(Q, K, V, out, lse, opt);
      expect_close((tag + "attention_into").c_str(), out, ref.attn, tol);
      expect_close((tag + "attention_into lse").c_str(), lse, ref.lse, tol);
      Mat big = Mat::Constant(kRows + 4, kValueDim + 3, T(7));
      ea::attention_into(Q, K, V, big.block(2, 1, kRows, kValueDim), opt);
      expect_close((tag + "attention_into a block").c_str(), big.block(2, 1, kRows, kValueDim), ref.attn,
                   tol);
      expect(big(0, 0) == T(7) && big(kRows + 3, kValueDim + 2) == T(7),
             tag + "attention_into writes only its block");
      std::vector<T> buffer(static_cast<std::size_t>(kRows) * kKeys);
      Eigen::Map<ea::RowMatrix<T>> scores(buffer.data(), kRows, kKeys);
      ea::RowMatrix<T> attn2;
      ea::attention_decomposed_into(Q, K, V, scores, attn2, opt);
      expect_close((tag + "attention_decomposed_into scores").c_str(), scores, ref.scores, tol);
      expect_close((tag + "attention_decomposed_into attn").c_str(), attn2, ref.attn, tol);
      Mat s2;
      ea::attention_scores_into(Q, K, s2, opt);
      expect_close((tag + "attention_scores_into").c_str(), s2, ref.scores, tol);
    }
    // Strided maps, and the plain-view entry point of the compiled library (abi::).
    {
      const ea::ConstStridedMap<T> q(Q.data(), Q.rows(), Q.cols(),
                                     Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(1, Q.rows()));
      const ea::ConstStridedMap<T> k(K.data(), K.rows(), K.cols(),
                                     Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(1, K.rows()));
      const ea::ConstStridedMap<T> v(V.data(), V.rows(), V.cols(),
                                     Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(1, V.rows()));
      expect_close((tag + "attention on strided maps").c_str(), ea::attention(q, k, v, opt), ref.attn, tol);
      const auto r = ea::attention_decomposed(q, k, v, opt);
      expect_close((tag + "attention_decomposed on strided maps").c_str(), r.scores, ref.scores, tol);
      expect_close((tag + "attention_scores on strided maps").c_str(), ea::attention_scores(q, k, opt),
                   ref.scores, tol);
      ea::RowMatrix<T> out(kRows, kValueDim);
      ea::abi::Output<T> o;
      o.view = {out.data(), kRows, kValueDim, kValueDim, 1};
      const ea::MatrixView<const T> qv = ea::compiled::view(q), kv = ea::compiled::view(k),
                                    vv = ea::compiled::view(v);
      ea::abi::attention("consumer", qv, kv, &vv, nullptr, &o, nullptr, nullptr, opt, ea::Masks<T>{});
      expect_close((tag + "abi::attention").c_str(), out, ref.attn, tol);
    }
  }
  // A bad call throws std::invalid_argument naming the shapes, across the boundary.
  try {
    (void)ea::attention(Q, Mat::Random(kKeys, kDim + 1), V);
    expect(false, "a shape mismatch throws");
  } catch (const std::invalid_argument& e) {
    expect(std::string(e.what()).find("K has 25 columns but Q has 24") != std::string::npos,
           std::string("the message names the shapes: ") + e.what());
  }
}

// The multi-head calls: GQA, decomposed with averaged weights, a single-matrix view of a block,
// varlen, merge.
template <typename T>
void check_multi_head(double tol) {
  const std::string tag = sizeof(T) == 4 ? "float " : "double ";
  constexpr int B = 2, H = 4, Hkv = 2, Tq = 19, Tk = 23, D = 16;
  std::vector<T> q(B * H * Tq * D), k(B * Hkv * Tk * D), v(B * Hkv * Tk * D), o(B * H * Tq * D),
      l(B * H * Tq);
  std::vector<T> s(B * H * Tq * Tk), avg(B * Tq * Tk);
  for (auto* buf : {&q, &k, &v})
    for (T& x : *buf) x = static_cast<T>(std::rand()) / static_cast<T>(RAND_MAX) * T(2) - T(1);
  const auto Q = ea::HeadsView<const T>::bhtd(q.data(), B, H, Tq, D);
  const auto K = ea::HeadsView<const T>::bhtd(k.data(), B, Hkv, Tk, D);
  const auto V = ea::HeadsView<const T>::bhtd(v.data(), B, Hkv, Tk, D);
  const auto O = ea::HeadsView<T>::bhtd(o.data(), B, H, Tq, D);
  const auto L = ea::HeadsView<T>::bhtd(l.data(), B, H, Tq, 1);
  ea::Options opt;
  opt.causal = true;
  ea::attention_heads_into(Q, K, V, O, L, opt);
  double worst = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const Reference ref = reference(Q.head(b, h), K.head(b, h / (H / Hkv)), V.head(b, h / (H / Hkv)), true);
      worst = std::max(worst, (O.head(b, h).template cast<double>() - ref.attn).cwiseAbs().maxCoeff());
      worst = std::max(worst, (L.head(b, h).template cast<double>() - ref.lse).cwiseAbs().maxCoeff());
    }
  expect(worst <= tol, tag + "attention_heads_into (GQA) against the reference");

  const auto S = ea::HeadsView<T>::bhtd(s.data(), B, H, Tq, Tk);
  const auto A = ea::HeadsView<T>::bhtd(avg.data(), B, 1, Tq, Tk);
  ea::attention_heads_decomposed_into(Q, K, V, S, O, {}, A, opt);
  double avg_err = 0;
  for (int b = 0; b < B; ++b) {
    Eigen::MatrixXd mean = Eigen::MatrixXd::Zero(Tq, Tk);
    for (int h = 0; h < H; ++h) mean += S.head(b, h).template cast<double>() / H;
    avg_err = std::max(avg_err, (A.head(b, 0).template cast<double>() - mean).cwiseAbs().maxCoeff());
  }
  expect(avg_err <= tol, tag + "attention_heads_decomposed_into averaged weights");

  // HeadsView::single of a temporary block: rows 2..5 of one matrix as queries.
  using Row = ea::RowMatrix<T>;
  Row q1 = Row::Random(8, D), k1 = Row::Random(11, D), v1 = Row::Random(11, D), o1(4, D);
  ea::attention_heads_into(ea::HeadsView<const T>::single(q1.middleRows(2, 4)),
                           ea::HeadsView<const T>::single(k1), ea::HeadsView<const T>::single(v1),
                           ea::HeadsView<T>::single(o1));
  expect_close((tag + "HeadsView::single of a block").c_str(), o1,
               reference(q1.middleRows(2, 4), k1, v1, false).attn, tol);

  // Varlen: two packed sequences of 5 and 9 tokens, each attended on its own.
  const std::int64_t cu[3] = {0, 5, 14};
  Row qp = Row::Random(14, D), kp = Row::Random(14, D), vp = Row::Random(14, D), op(14, D);
  std::vector<T> packed(ea::varlen_scores_size(cu, cu, 2, 1));
  ea::attention_varlen_decomposed_into(ea::HeadsView<const T>::bthd(qp.data(), 1, 14, 1, D),
                                       ea::HeadsView<const T>::bthd(kp.data(), 1, 14, 1, D),
                                       ea::HeadsView<const T>::bthd(vp.data(), 1, 14, 1, D), cu, cu, 2,
                                       packed.data(), packed.size(),
                                       ea::HeadsView<T>::bthd(op.data(), 1, 14, 1, D), opt);
  const Reference r0 = reference(qp.topRows(5), kp.topRows(5), vp.topRows(5), true);
  const Reference r1 = reference(qp.bottomRows(9), kp.bottomRows(9), vp.bottomRows(9), true);
  expect_close((tag + "attention_varlen_decomposed_into seq 0").c_str(), op.topRows(5), r0.attn, tol);
  expect_close((tag + "attention_varlen_decomposed_into seq 1").c_str(), op.bottomRows(9), r1.attn, tol);
  expect_close((tag + "attention_varlen_decomposed_into weights").c_str(),
               Eigen::Map<const Row>(packed.data() + 25, 9, 9), r1.scores, tol);
  Row op2(14, D);
  ea::attention_varlen_into(ea::HeadsView<const T>::bthd(qp.data(), 1, 14, 1, D),
                            ea::HeadsView<const T>::bthd(kp.data(), 1, 14, 1, D),
                            ea::HeadsView<const T>::bthd(vp.data(), 1, 14, 1, D), cu, cu, 2,
                            ea::HeadsView<T>::bthd(op2.data(), 1, 14, 1, D), opt);
  expect_close((tag + "attention_varlen_into seq 1").c_str(), op2.bottomRows(9), r1.attn, tol);

  // Merge: keys split in two halves, merged by LSE = all keys at once.
  Row ka = k1.topRows(5), kb = k1.bottomRows(6), va = v1.topRows(5), vb = v1.bottomRows(6);
  Row oa(8, D), ob(8, D), om(8, D);
  Eigen::Matrix<T, Eigen::Dynamic, 1> la(8), lb(8), lm(8);
  ea::attention_heads_into(ea::HeadsView<const T>::single(q1), ea::HeadsView<const T>::single(ka),
                           ea::HeadsView<const T>::single(va), ea::HeadsView<T>::single(oa),
                           ea::HeadsView<T>::single(la));
  ea::attention_heads_into(ea::HeadsView<const T>::single(q1), ea::HeadsView<const T>::single(kb),
                           ea::HeadsView<const T>::single(vb), ea::HeadsView<T>::single(ob),
                           ea::HeadsView<T>::single(lb));
  ea::merge_attention_into(ea::HeadsView<const T>::single(oa), ea::HeadsView<const T>::single(la),
                           ea::HeadsView<const T>::single(ob), ea::HeadsView<const T>::single(lb),
                           ea::HeadsView<T>::single(om), ea::HeadsView<T>::single(lm));
  const Reference whole = reference(q1, k1, v1, false);
  expect_close((tag + "merge_attention_into").c_str(), om, whole.attn, tol);
  expect_close((tag + "merge_attention_into lse").c_str(), lm, whole.lse, tol);
}

// .npy: write and read back through the library's compiled reader/writer, with this TU's
// standard library (e.g. _GLIBCXX_DEBUG's containers).
void check_npy() {
  namespace npy = ea::npy;
  const Eigen::MatrixXd M = Eigen::MatrixXd::Random(5, 3);
  const std::string path = "ea_consumer_" + std::to_string(::getpid()) + ".npy";
  npy::write(path, npy::from_matrix(M));
  const npy::Array a = npy::read(path);
  std::remove(path.c_str());
  expect(a.dtype == npy::DType::Float64 && a.shape == std::vector<std::int64_t>{5, 3} && a.size() == 15,
         "npy::read: dtype and shape");
  expect(same_bits(npy::as_matrix<double>(a, "M"), M), "npy: write then read gives the same bits");
  const npy::Array z = npy::zeros<float>({2, 3, 4, 5});
  const auto view = npy::as_heads<float>(z, ea::Layout::BHTD, "z");
  expect(view.batch == 2 && view.heads == 3 && view.tokens == 4 && view.dim == 5, "npy::as_heads");
  try {
    const unsigned char junk[4] = {1, 2, 3, 4};
    (void)npy::parse(junk, sizeof junk, "junk.npy");
    expect(false, "npy::parse rejects junk");
  } catch (const npy::Error& e) {
    expect(std::string(e.what()).find("junk.npy") != std::string::npos, "npy::Error names the file");
  }
}

// The library's Eigen is its own: setting this TU's Eigen cache sizes changes no bit of the
// library's results (the Portable and Reference kernels use Eigen's blocked products).
void check_eigen_globals() {
  const Eigen::MatrixXf Q = Eigen::MatrixXf::Random(300, 64), K = Eigen::MatrixXf::Random(300, 64),
                        V = Eigen::MatrixXf::Random(300, 64);
  for (const ea::Kernel kernel : ea::available_kernels()) {
    ea::Options opt;
    opt.kernel = kernel;
    const auto before = ea::attention_decomposed(Q, K, V, opt);
    std::ptrdiff_t l1, l2, l3;
    Eigen::internal::manage_caching_sizes(Eigen::GetAction, &l1, &l2, &l3);
    Eigen::setCpuCacheSizes(1024, 2048, 4096);
    const auto after = ea::attention_decomposed(Q, K, V, opt);
    Eigen::setCpuCacheSizes(l1, l2, l3);
    expect(same_bits(before.scores, after.scores) && same_bits(before.attn, after.attn),
           std::string("Eigen::setCpuCacheSizes in the caller changes no bit (kernel ") +
               ea::kernel_name(kernel) + ")");
  }
  const std::vector<ea::Kernel> kernels = ea::available_kernels();
  expect(!kernels.empty() && kernels.back() == ea::Kernel::Reference,
         "available_kernels ends with Reference");
}

void check_golden() {
  const Eigen::MatrixXd Q = Eigen::Map<const ea::RowMatrix<double>>(kQ, kTq, kDk);
  const Eigen::MatrixXd K = Eigen::Map<const ea::RowMatrix<double>>(kK, kTk, kDk);
  const Eigen::MatrixXd V = Eigen::Map<const ea::RowMatrix<double>>(kV, kTk, kDv);
  expect_near("golden double attention", ea::attention(Q, K, V), kAttn, kTq, kDv, 1e-12);
  const auto r = ea::attention_decomposed(Q, K, V);
  expect_near("golden double scores", r.scores, kScores, kTq, kTk, 1e-12);
  expect_near("golden double lse", r.lse, kLse, kTq, 1, 1e-12);
  float q[kTq * kDk], k[kTk * kDk], v[kTk * kDv];
  std::transform(kQ, kQ + kTq * kDk, q, [](double x) { return static_cast<float>(x); });
  std::transform(kK, kK + kTk * kDk, k, [](double x) { return static_cast<float>(x); });
  std::transform(kV, kV + kTk * kDv, v, [](double x) { return static_cast<float>(x); });
  using Map = Eigen::Map<const ea::RowMatrix<float>>;
  const Map Qf(q, kTq, kDk), Kf(k, kTk, kDk), Vf(v, kTk, kDv);
  expect_near("golden float Map attention", ea::attention(Qf, Kf, Vf), kAttn, kTq, kDv, 1e-6);
  expect_near("golden float Map scores", ea::attention_decomposed(Qf, Kf, Vf).scores, kScores, kTq, kTk,
              1e-6);
}

}  // namespace

// bfloat16 and half: computed in float inside the library whatever this translation unit's flags;
// ATTN and SCORES come back rounded to the 16-bit type (tol: its half ulp of values below 1, plus
// float error), LSE in float.
template <typename T>
void check_low_precision(double tol) {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  const Mat Q = Eigen::MatrixXf::Random(kRows, kDim).cast<T>(),
            K = Eigen::MatrixXf::Random(kKeys, kDim).cast<T>(),
            V = Eigen::MatrixXf::Random(kKeys, kValueDim).cast<T>();
  const std::string tag = std::is_same_v<T, Eigen::bfloat16> ? "bfloat16 " : "half ";
  for (const bool causal : {false, true}) {
    ea::Options opt;
    opt.causal = causal;
    const Reference ref = reference(Q, K, V, causal);
    expect_close((tag + "attention").c_str(), ea::attention(Q, K, V, opt), ref.attn, tol);
    const auto r = ea::attention_decomposed(Q, K, V, opt);
    expect_close((tag + "attention_decomposed scores").c_str(), r.scores, ref.scores, tol);
    expect_close((tag + "attention_decomposed lse (float)").c_str(), r.lse, ref.lse, 2e-5);
    Eigen::MatrixXf scores;
    Mat attn;
    ea::attention_decomposed_into(Q, K, V, scores, attn, opt);
    expect_close((tag + "attention_decomposed_into float scores").c_str(), scores, ref.scores, 2e-5);
    expect_close((tag + "attention_decomposed_into attn").c_str(), attn, ref.attn, tol);
  }
}

int main() {
  const std::string headers = std::to_string(EIGEN_ATTENTION_VERSION_MAJOR) + "." +
                              std::to_string(EIGEN_ATTENTION_VERSION_MINOR) + "." +
                              std::to_string(EIGEN_ATTENTION_VERSION_PATCH);
  std::printf(
      "EigenAttention consumer: library %s, headers %s, Eigen::Index of %zu bytes, EIGEN_MAX_ALIGN_BYTES "
      "%d\n",
      ea::version(), headers.c_str(), sizeof(Eigen::Index), int(EIGEN_MAX_ALIGN_BYTES));
  expect(headers == ea::version(), "the headers and the library are of one version");
  std::srand(7);
  check_golden();
  check_single_head<float>(2e-5);
  check_single_head<double>(1e-12);
  check_multi_head<float>(2e-5);
  check_multi_head<double>(1e-12);
  check_low_precision<Eigen::bfloat16>(8e-3);
  check_low_precision<Eigen::half>(1e-3);
  check_npy();
  check_eigen_globals();
  std::printf("%d passed, %d failed\n", checks - failures, failures);
  return failures == 0 ? 0 : 1;
}
