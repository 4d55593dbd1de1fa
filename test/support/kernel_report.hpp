// SPDX-License-Identifier: MIT
/// \file kernel_report.hpp
/// Which kernels a run of the suite exercises: the kernels this host runs (available_kernels(),
/// the ones kernels_under_test() loops over), the ones it does not run and so leaves untested
/// here, and what Kernel::Auto picks; and EA_REQUIRE_KERNELS, the kernels a host must run (a CI
/// host that should have AVX-512 insists on it). The runner (test/main.cpp) prints kernels_line()
/// at the start of a run and before its summary; its case "kernels: ..." fails where a required
/// kernel is missing.
#pragma once

#include <EigenAttention/EigenAttention.hpp>

#include <cstdlib>
#include <string>
#include <vector>

namespace ea_test {

namespace ea = EigenAttention;

/// Every kernel of the library but Auto, fastest first (the order of available_kernels()).
inline std::vector<ea::Kernel> all_kernels() {
  std::vector<ea::Kernel> kernels;
  for (int k = static_cast<int>(ea::kFastestKernel); k >= static_cast<int>(ea::Kernel::Reference); --k) {
    kernels.push_back(static_cast<ea::Kernel>(k));
  }
  return kernels;
}

inline bool contains_kernel(const std::vector<ea::Kernel>& kernels, ea::Kernel k) {
  for (ea::Kernel x : kernels) {
    if (x == k) return true;
  }
  return false;
}

/// "a, b, c", or "none".
inline std::string kernel_list(const std::vector<ea::Kernel>& kernels) {
  std::string text;
  for (ea::Kernel k : kernels) text += (text.empty() ? "" : ", ") + std::string(ea::kernel_name(k));
  return text.empty() ? "none" : text;
}

/// What EA_REQUIRE_KERNELS asks of a host: the names it gives that are no kernel's, and the
/// kernels it names that the host does not run.
struct KernelRequirement {
  std::vector<std::string> unknown;
  std::vector<ea::Kernel> missing;
  bool met() const { return unknown.empty() && missing.empty(); }
};

/// `names`: kernel names (kernel_name()'s) separated by commas or spaces, or null (nothing
/// required); `available`: the kernels the host runs. "auto" is always run.
inline KernelRequirement required_kernels(const char* names, const std::vector<ea::Kernel>& available) {
  KernelRequirement r;
  if (names == nullptr) return r;
  const std::string text = names;
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t end = text.find_first_of(", ", i);
    const std::string name = text.substr(i, end == std::string::npos ? std::string::npos : end - i);
    i = end == std::string::npos ? text.size() : end + 1;
    if (name.empty() || name == "auto") continue;
    bool known = false;
    for (ea::Kernel k : all_kernels()) {
      if (name != ea::kernel_name(k)) continue;
      known = true;
      if (!contains_kernel(available, k) && !contains_kernel(r.missing, k)) r.missing.push_back(k);
    }
    if (!known) r.unknown.push_back(name);
  }
  return r;
}

inline const char* required_kernels_env() { return std::getenv("EA_REQUIRE_KERNELS"); }

/// The line a run prints: the kernels exercised here, what Auto picks, the kernels not exercised
/// here and why, and (with EA_REQUIRE_KERNELS, `required`) whether the requirement is met.
/// `isa_build`: whether the build has the instruction-set kernels at all.
inline std::string kernels_line(const std::vector<ea::Kernel>& available, ea::Kernel auto_kernel,
                                bool isa_build, const char* required) {
  std::vector<ea::Kernel> absent;
  for (ea::Kernel k : all_kernels()) {
    if (!contains_kernel(available, k)) absent.push_back(k);
  }
  std::string line = "[EigenAttention] kernels exercised on this host: " + kernel_list(available) +
                     " (auto: " + ea::kernel_name(auto_kernel) + "); not exercised on this host: ";
  if (absent.empty()) {
    line += "none";
  } else {
    line += kernel_list(absent) + (isa_build ? " (this CPU or OS lacks them: untested here)"
                                             : " (this build has no instruction-set kernels: untested here)");
  }
  if (required != nullptr) {
    const KernelRequirement r = required_kernels(required, available);
    line += std::string("; EA_REQUIRE_KERNELS=") + required + ": ";
    if (r.met()) {
      line += "met";
    } else {
      std::string why;
      if (!r.missing.empty()) why = "missing: " + kernel_list(r.missing);
      for (const std::string& name : r.unknown)
        why += (why.empty() ? "" : "; ") + ("unknown name '" + name + "'");
      line += "NOT met (" + why + ")";
    }
  }
  return line;
}

/// This host's line (the test programs define EIGEN_ATTENTION_TEST_ISA_KERNELS).
inline std::string kernels_line() {
  return kernels_line(ea::available_kernels(), ea::auto_kernel(), EIGEN_ATTENTION_TEST_ISA_KERNELS != 0,
                      required_kernels_env());
}

}  // namespace ea_test
