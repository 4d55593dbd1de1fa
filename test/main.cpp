// SPDX-License-Identifier: MIT
// The doctest runner of eigen_attention_tests; the cases live in one file per feature. It takes
// every doctest option and returns doctest's exit status. A run of cases says, at its start and
// before its summary, which kernels it exercised and which this host does not run, so that a
// host without AVX-512 says so (kernel_report.hpp); queries (--list-test-cases, --count, --help,
// ...) print nothing more, nor does a run whose reporters are not the console's alone.
// --list-kernels prints that line alone and runs nothing. The case below fails where a kernel
// that EA_REQUIRE_KERNELS names (e.g. EA_REQUIRE_KERNELS=avx512,amx) is not run here.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "kernel_report.hpp"

namespace {

namespace ea = EigenAttention;

bool g_print_kernels = true;  // false when a reporter other than the console writes the output

/// The doctest option `name` (given as --name, -name, --dt-name or -dt-name), or null.
const char* option_value(const char* arg, const char* name) {
  while (*arg == '-') ++arg;
  if (std::strncmp(arg, "dt-", 3) == 0) arg += 3;
  const std::size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0 || arg[n] != '=') return nullptr;
  return arg + n + 1;
}

/// Prints ea_test::kernels_line() where the console reporter prints: as a run starts (unless
/// --no-intro) and before its summary, unless --minimal or --quiet.
struct KernelLine : doctest::IReporter {
  const doctest::ContextOptions& opt;
  explicit KernelLine(const doctest::ContextOptions& in) : opt(in) {}
  void print() { *opt.cout << ea_test::kernels_line() << std::endl; }
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {
    if (g_print_kernels && !opt.no_intro && !opt.minimal && !opt.quiet) print();
  }
  void test_run_end(const doctest::TestRunStats&) override {
    if (g_print_kernels && !opt.minimal && !opt.quiet) print();
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

REGISTER_LISTENER("eigen_attention_kernels", 1, KernelLine);

TEST_CASE("kernels: this host runs every kernel EA_REQUIRE_KERNELS names") {
  MESSAGE(ea_test::kernels_line());
  const char* env = ea_test::required_kernels_env();
  const ea_test::KernelRequirement r = ea_test::required_kernels(env, ea::available_kernels());
  // (doctest writes a char pointer as an address: strings.)
  const std::string required = env != nullptr ? env : "";
  for (const std::string& name : r.unknown) {
    FAIL_CHECK("EA_REQUIRE_KERNELS=" << required << ": '" << name << "' is no kernel's name");
  }
  for (ea::Kernel k : r.missing) {
    FAIL_CHECK("EA_REQUIRE_KERNELS=" << required << ": this host does not run the kernel "
                                     << std::string(ea::kernel_name(k)) << ", so its tests did not run");
  }
}

TEST_CASE("kernels: EA_REQUIRE_KERNELS parsing and the line, on made-up hosts") {
  using K = ea::Kernel;
  const std::vector<K> avx2_host{K::Avx2, K::Portable, K::Reference};
  const std::vector<K> every = ea_test::all_kernels();
  CHECK(ea_test::required_kernels(nullptr, avx2_host).met());
  CHECK(ea_test::required_kernels("", avx2_host).met());
  CHECK(ea_test::required_kernels("avx2, portable,reference,auto", avx2_host).met());
  CHECK(ea_test::required_kernels("avx512,amx", every).met());
  const ea_test::KernelRequirement r = ea_test::required_kernels("avx512,amx,avx2,amx", avx2_host);
  CHECK(r.missing == std::vector<K>{K::Avx512, K::Amx});
  CHECK(r.unknown.empty());
  CHECK_FALSE(r.met());
  const ea_test::KernelRequirement u = ea_test::required_kernels("avx512 AVX2 sse", every);
  CHECK(u.missing.empty());
  CHECK(u.unknown == std::vector<std::string>{"AVX2", "sse"});
  CHECK_FALSE(u.met());

  CHECK(ea_test::kernels_line(avx2_host, K::Avx2, true, nullptr) ==
        "[EigenAttention] kernels exercised on this host: avx2, portable, reference (auto: avx2); not "
        "exercised on this host: amx, avx512bf16, avx512 (this CPU or OS lacks them: untested here)");
  CHECK(ea_test::kernels_line(every, K::Amx, true, "avx512") ==
        "[EigenAttention] kernels exercised on this host: amx, avx512bf16, avx512, avx2, portable, "
        "reference (auto: amx); not exercised on this host: none; EA_REQUIRE_KERNELS=avx512: met");
  CHECK(ea_test::kernels_line({K::Portable, K::Reference}, K::Portable, false, "avx512,x") ==
        "[EigenAttention] kernels exercised on this host: portable, reference (auto: portable); not "
        "exercised on this host: amx, avx512bf16, avx512, avx2 (this build has no instruction-set "
        "kernels: untested here); EA_REQUIRE_KERNELS=avx512,x: NOT met (missing: avx512; unknown name "
        "'x')");
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--list-kernels") == 0) {
      std::cout << ea_test::kernels_line() << std::endl;
      return 0;
    }
    for (const char* name : {"reporters", "r"}) {
      const char* value = option_value(argv[i], name);
      if (value != nullptr && std::strcmp(value, "console") != 0) g_print_kernels = false;
    }
  }
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
