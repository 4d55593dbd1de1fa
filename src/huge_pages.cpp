// SPDX-License-Identifier: MIT
// A hint for the large buffers the single-head calls size (outputs.hpp: the T_q x T_k SCORES).
// A fresh T x T result otherwise costs one page fault per 4 KiB: at T = 4096 in float, 16384
// faults, as long as the whole computation. Only whole 2 MiB pages inside the buffer are
// advised (Linux transparent huge pages in "madvise" mode); a no-op elsewhere.
#include <cstdint>

#include "outputs.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace EigenAttention {
namespace internal {

void prefer_huge_pages(void* data, std::size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::uintptr_t kHuge = std::uintptr_t(2) << 20;
  if (bytes < 2 * kHuge) return;
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1);
  const std::uintptr_t last = (begin + bytes) & ~(kHuge - 1);
  if (last > first)
    madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);  // a hint: failure is fine
#else
  (void)data;
  (void)bytes;
#endif
}

}  // namespace internal
}  // namespace EigenAttention
