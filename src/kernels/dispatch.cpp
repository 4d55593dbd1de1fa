// SPDX-License-Identifier: MIT
// Which kernels exist, which this CPU runs, and the dispatch to them. The tiled
// kernels, their CPU tests and their names come from the table (kernels.cmake, table.hpp);
// kernel_set() is the one switch from a Kernel to its entry points.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "kernels/abi.hpp"
#include "kernels/kernels.hpp"
#include "kernels/table.hpp"

namespace EigenAttention {
namespace {

/// The table of the bf16 dot-product unit (kernels.cmake: the AUTO of avx512bf16), keyed on the
/// CPU's vendor and family, never on a timing (results must not change between runs). AMD Zen 4
/// (family 19h; its earlier models lack AVX512-BF16, which the kernel requires anyway) and Zen 5
/// (1Ah) run vdpbf16ps at twice the FLOP rate of vfmadd231ps (1.85x measured on a Zen 5 EPYC,
/// eigen_attention_low_precision_bench --sections units): bf16 pairs are faster than widening
/// to float. The Intel cores measured (Sapphire Rapids, Emerald Rapids) run it at half that rate,
/// so they, and every CPU not in the table, keep widening by default.
[[maybe_unused]] bool bf16_dot_product_is_faster() {
#if defined(__x86_64__) || defined(_M_X64)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return false;
  const bool amd = ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163;  // "AuthenticAMD"
  if (!amd || __get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  unsigned family = (eax >> 8) & 0xf;
  if (family == 0xf) family += (eax >> 20) & 0xff;
  return family >= 0x19;
#else
  return false;
#endif
}

/// Does this CPU have AMX's bf16 tiles (kernels.cmake: the CPU of amx), and does the OS let this
/// process use them? CPUID leaf 7 (EDX bit 24 AMX-TILE, bit 22 AMX-BF16) and XCR0 (bits 17 and 18,
/// the tile configuration and data, enabled by the OS), then, on Linux, the permission to use the
/// tile data (arch_prctl ARCH_REQ_XCOMP_PERM), which Linux gives per process and only on request:
/// asked once, here, when the library first looks at the kernels. Not __builtin_cpu_supports:
/// GCC 12's says no on an AMX host and Clang 14 does not know the feature.
[[maybe_unused]] bool amx_bf16_usable() {
#if defined(__linux__) && defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  if ((edx & (1u << 24)) == 0 || (edx & (1u << 22)) == 0) return false;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & (1u << 27)) == 0) return false;  // OSXSAVE
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & (3u << 17)) != (3u << 17)) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

struct KernelsHere {
  std::vector<Kernel> available;  // fastest first, then Reference
  Kernel automatic = Kernel::Reference;
};

// Built once: resolving a kernel must not allocate (the _into calls allocate nothing).
const KernelsHere& kernels_here() {
  static const KernelsHere kernels = [] {
    KernelsHere k;
    bool chosen = false;
#define EIGEN_ATTENTION_IF_SUPPORTED(Enumerator, name, cpu_supports, auto_takes) \
  if (cpu_supports) {                                                            \
    k.available.push_back(Kernel::Enumerator);                                   \
    if (!chosen && (auto_takes)) {                                               \
      k.automatic = Kernel::Enumerator;                                          \
      chosen = true;                                                             \
    }                                                                            \
  }
    EIGEN_ATTENTION_TILED_KERNELS(EIGEN_ATTENTION_IF_SUPPORTED)
#undef EIGEN_ATTENTION_IF_SUPPORTED
    k.available.push_back(Kernel::Reference);
    return k;
  }();
  return kernels;
}

}  // namespace

bool kernel_available(Kernel kernel) {
  if (kernel == Kernel::Auto) return true;
  const std::vector<Kernel>& available = kernels_here().available;
  return std::find(available.begin(), available.end(), kernel) != available.end();
}

Kernel auto_kernel() { return kernels_here().automatic; }

const char* kernel_name(Kernel kernel) {
  switch (kernel) {
    case Kernel::Auto:
      return "auto";
    case Kernel::Reference:
      return "reference";
#define EIGEN_ATTENTION_NAME(Enumerator, name, value) \
  case Kernel::Enumerator:                            \
    return #name;
      EIGEN_ATTENTION_ALL_TILED_KERNELS(EIGEN_ATTENTION_NAME)
#undef EIGEN_ATTENTION_NAME
  }
  return "unknown";
}

KernelTiles kernel_tiles(Kernel kernel, bool is_double, std::ptrdiff_t d_k, std::ptrdiff_t d_v) {
  const Kernel k = internal::resolve_kernel("kernel_tiles", kernel);
  if (k == Kernel::Reference)
    throw std::invalid_argument("EigenAttention::kernel_tiles: the reference kernel has no tiles");
  if (d_k < 0 || d_v < 0)
    throw std::invalid_argument("EigenAttention::kernel_tiles: head dims d_k = " + std::to_string(d_k) +
                                ", d_v = " + std::to_string(d_v) + " must not be negative");
  const internal::RawTiles t = internal::kernel_set(k).tiles(is_double, d_k, d_v);
  KernelTiles r;
  r.kernel = k;
  r.task_rows = internal::kTaskRows;
  r.strip_rows = t.strip_rows;
  r.panel_keys = t.panel_keys;
  r.key_tile = t.key_tile;
  r.l1_bytes = t.l1_bytes;
  r.l2_bytes = t.l2_bytes;
  return r;
}

namespace internal {

namespace {

/// A kernel with a base (kernels.cmake BASE): its own entry points, and its base's for those it
/// leaves null.
[[maybe_unused]] KernelSet with_base(KernelSet own, const KernelSet& base) {
  const auto inherit = [](auto& entry, const auto& from) {
    if (entry == nullptr) entry = from;
  };
  const auto inherit_backward = [](auto& entry, const auto& from) {
    if (entry.weights == nullptr) entry = from;
  };
  inherit(own.rows_float, base.rows_float);
  inherit(own.rows_double, base.rows_double);
  inherit(own.rows_bfloat16, base.rows_bfloat16);
  inherit(own.rows_half, base.rows_half);
  inherit_backward(own.backward_float, base.backward_float);
  inherit_backward(own.backward_double, base.backward_double);
  inherit_backward(own.backward_bfloat16, base.backward_bfloat16);
  inherit_backward(own.backward_half, base.backward_half);
  inherit(own.decode_float, base.decode_float);
  inherit(own.decode_double, base.decode_double);
  inherit(own.tiles, base.tiles);
  return own;
}
// with_base() names every entry point: a new one must be added there (and here).
static_assert(sizeof(KernelSet) == sizeof(RowsKernel<float>) * 4 + sizeof(BackwardKernel<float>) * 4 +
                                       sizeof(DecodeKernel<float>) * 2 + sizeof(void (*)()),
              "KernelSet has an entry point that with_base() does not inherit");

}  // namespace

const KernelSet& kernel_set(Kernel kernel) {
  // Kernels with a base first: the switch below also lists them, by their own sets.
#define EIGEN_ATTENTION_BASED_CASE(Enumerator, name, base)                           \
  if (kernel == Kernel::Enumerator) {                                                \
    static const KernelSet merged = with_base(name##_kernel_set, base##_kernel_set); \
    return merged;                                                                   \
  }
  EIGEN_ATTENTION_BASED_KERNELS(EIGEN_ATTENTION_BASED_CASE)
#undef EIGEN_ATTENTION_BASED_CASE
  switch (kernel) {
#define EIGEN_ATTENTION_CASE(Enumerator, name, cpu_supports, auto_takes) \
  case Kernel::Enumerator:                                               \
    return name##_kernel_set;
    EIGEN_ATTENTION_TILED_KERNELS(EIGEN_ATTENTION_CASE)
#undef EIGEN_ATTENTION_CASE
    default:
      return portable_kernel_set;
  }
}

std::uint64_t next_call() {
  static std::atomic<std::uint64_t> calls{0};
  return calls.fetch_add(1, std::memory_order_relaxed) + 1;
}

Kernel resolve_kernel(const char* api, Kernel requested) {
  const std::vector<Kernel>& available = kernels_here().available;
  if (requested == Kernel::Auto) return kernels_here().automatic;
  if (std::find(available.begin(), available.end(), requested) != available.end()) return requested;
  throw std::invalid_argument(std::string("EigenAttention::") + api + ": kernel '" + kernel_name(requested) +
                              "' is not available on this CPU or in this build");
}

}  // namespace internal
}  // namespace EigenAttention
