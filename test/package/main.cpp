// A consumer of the EigenAttention package, built by the package tests both through
// find_package (against an installed copy) and through add_subdirectory (against the source).
// It uses only the public API, on the golden case test/data/seed_3x4.txt (embedded below):
// Eigen::MatrixXd in double, and row-major Maps over plain float buffers. Exits 1 on a mismatch.
#include <EigenAttention/EigenAttention.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

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
  std::printf("  %-38s worst error %.2f of tolerance %.0e\n", what, worst, tol);
}

void check_double() {
  const Eigen::MatrixXd Q = Eigen::Map<const EigenAttention::RowMatrix<double>>(kQ, kTq, kDk);
  const Eigen::MatrixXd K = Eigen::Map<const EigenAttention::RowMatrix<double>>(kK, kTk, kDk);
  const Eigen::MatrixXd V = Eigen::Map<const EigenAttention::RowMatrix<double>>(kV, kTk, kDv);
  const double tol = 1e-12;

  expect_near("double attention", EigenAttention::attention(Q, K, V), kAttn, kTq, kDv, tol);
  const auto r = EigenAttention::attention_decomposed(Q, K, V);
  expect_near("double attention_decomposed scores", r.scores, kScores, kTq, kTk, tol);
  expect_near("double attention_decomposed attn", r.attn, kAttn, kTq, kDv, tol);
  expect_near("double attention_decomposed lse", r.lse, kLse, kTq, 1, tol);
}

void check_float_maps() {
  // Plain buffers, as a caller's own storage would be; viewed in place as row-major matrices.
  float q[kTq * kDk], k[kTk * kDk], v[kTk * kDv];
  std::transform(kQ, kQ + kTq * kDk, q, [](double x) { return static_cast<float>(x); });
  std::transform(kK, kK + kTk * kDk, k, [](double x) { return static_cast<float>(x); });
  std::transform(kV, kV + kTk * kDv, v, [](double x) { return static_cast<float>(x); });
  using Map = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
  const Map Q(q, kTq, kDk), K(k, kTk, kDk), V(v, kTk, kDv);
  const double tol = 1e-6;

  expect_near("float Map attention", EigenAttention::attention(Q, K, V), kAttn, kTq, kDv, tol);
  const auto r = EigenAttention::attention_decomposed(Q, K, V);
  expect_near("float Map attention_decomposed scores", r.scores, kScores, kTq, kTk, tol);
  expect_near("float Map attention_decomposed attn", r.attn, kAttn, kTq, kDv, tol);
  expect_near("float Map attention_decomposed lse", r.lse, kLse, kTq, 1, tol);
}

}  // namespace

int main() {
  const std::string headers = std::to_string(EIGEN_ATTENTION_VERSION_MAJOR) + "." +
                              std::to_string(EIGEN_ATTENTION_VERSION_MINOR) + "." +
                              std::to_string(EIGEN_ATTENTION_VERSION_PATCH);
  std::printf("EigenAttention consumer: library %s, headers %s\n", EigenAttention::version(),
              headers.c_str());
  if (headers != EigenAttention::version()) {
    std::printf("FAIL: the headers and the library are of different versions\n");
    ++failures;
  }
  check_double();
  check_float_maps();
  if (failures) {
    std::printf("%d check(s) FAILED\n", failures);
    return 1;
  }
  std::printf("all checks passed\n");
  return 0;
}
