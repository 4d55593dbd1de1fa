// The small parts of the API: the version and the kernel list.
#include <doctest/doctest.h>

#include <EigenAttention/EigenAttention.hpp>

#include <cstring>
#include <set>
#include <string>

namespace ea = EigenAttention;

TEST_CASE("version: the library matches the header macros") {
  const std::string expected = std::to_string(EIGEN_ATTENTION_VERSION_MAJOR) + "." +
                               std::to_string(EIGEN_ATTENTION_VERSION_MINOR) + "." +
                               std::to_string(EIGEN_ATTENTION_VERSION_PATCH);
  REQUIRE(ea::version() != nullptr);
  CHECK(std::string(ea::version()) == expected);
  CHECK(EIGEN_ATTENTION_VERSION ==
        EIGEN_ATTENTION_VERSION_MAJOR * 10000 + EIGEN_ATTENTION_VERSION_MINOR * 100 + EIGEN_ATTENTION_VERSION_PATCH);
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
