// SPDX-License-Identifier: MIT
// The small parts of the API: the version and the kernel list.
#include <doctest/doctest.h>

#include <EigenAttention/EigenAttention.hpp>

#include <cstring>
#include <set>
#include <string>

namespace test_api {

namespace ea = EigenAttention;

TEST_CASE("version: the library matches the header macros") {
  const std::string expected = std::to_string(EIGEN_ATTENTION_VERSION_MAJOR) + "." +
                               std::to_string(EIGEN_ATTENTION_VERSION_MINOR) + "." +
                               std::to_string(EIGEN_ATTENTION_VERSION_PATCH);
  REQUIRE(ea::version() != nullptr);
  CHECK(std::string(ea::version()) == expected);
  CHECK(EIGEN_ATTENTION_VERSION == EIGEN_ATTENTION_VERSION_MAJOR * 10000 +
                                       EIGEN_ATTENTION_VERSION_MINOR * 100 + EIGEN_ATTENTION_VERSION_PATCH);
}

TEST_CASE("available_kernels: ends with Portable then Reference, no duplicates, no Auto") {
  const auto ks = ea::available_kernels();
  REQUIRE(ks.size() >= 2);
  CHECK(ks[ks.size() - 2] == ea::Kernel::Portable);
  CHECK(ks[ks.size() - 1] == ea::Kernel::Reference);
  std::set<int> seen;
  for (const auto k : ks) {
    CAPTURE(static_cast<int>(k));
    CHECK(k != ea::Kernel::Auto);
    CHECK(seen.insert(static_cast<int>(k)).second);
  }
}

TEST_CASE("kernel_name: short lower-case names") {
  CHECK(std::strcmp(ea::kernel_name(ea::Kernel::Auto), "auto") == 0);
  CHECK(std::strcmp(ea::kernel_name(ea::Kernel::Reference), "reference") == 0);
  CHECK(std::strcmp(ea::kernel_name(ea::Kernel::Portable), "portable") == 0);
}

TEST_CASE("kernel_name: the instruction-set kernels") {
  CHECK(std::strcmp(ea::kernel_name(ea::Kernel::Avx2), "avx2") == 0);
  CHECK(std::strcmp(ea::kernel_name(ea::Kernel::Avx512), "avx512") == 0);
  CHECK(std::strcmp(ea::kernel_name(ea::Kernel::Avx512Bf16), "avx512bf16") == 0);
  CHECK(std::strcmp(ea::kernel_name(ea::Kernel::Amx), "amx") == 0);
}

#if EIGEN_ATTENTION_TEST_ISA_KERNELS && (defined(__x86_64__) || defined(_M_X64))
// The suite tests every kernel in available_kernels(); make sure that list holds every kernel
// this CPU can run, so that none goes untested here.
TEST_CASE("available_kernels: lists every instruction-set kernel this CPU supports, best first") {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  const bool bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
  std::vector<ea::Kernel> expected;
  // Amx: CPUID and the OS's permission, which GCC 12's builtin does not test (bf16_dot_product.cpp
  // checks it against CPUID and XCR0); always with AVX512-BF16.
  if (ea::kernel_available(ea::Kernel::Amx)) {
    CHECK(bf16);
    expected.push_back(ea::Kernel::Amx);
  }
  if (bf16) expected.push_back(ea::Kernel::Avx512Bf16);
  if (avx512) expected.push_back(ea::Kernel::Avx512);
  if (avx2) expected.push_back(ea::Kernel::Avx2);
  expected.push_back(ea::Kernel::Portable);
  expected.push_back(ea::Kernel::Reference);
  CHECK(ea::available_kernels() == expected);
}
#endif

TEST_CASE("Options::kernel: a kernel this build does not know throws std::invalid_argument") {
  Eigen::MatrixXf Q = Eigen::MatrixXf::Ones(2, 3), K = Eigen::MatrixXf::Ones(2, 3),
                  V = Eigen::MatrixXf::Ones(2, 1);
  ea::Options opt;
  opt.kernel = static_cast<ea::Kernel>(99);
  CHECK_THROWS_WITH_AS(ea::attention(Q, K, V, opt), doctest::Contains("not available"),
                       std::invalid_argument);
}

}  // namespace test_api
