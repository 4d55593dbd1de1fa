// A hint for the large buffers the library allocates itself (the T_q x T_k SCORES returned by
// value). Internal.
#pragma once

#include <cstddef>

namespace EigenAttention {
namespace internal {

/// Asks the OS to back [data, data + bytes) with huge pages where it can (Linux transparent
/// huge pages in "madvise" mode), before anything touches it. A fresh T x T result otherwise
/// costs one page fault per 4 KiB: at T = 4096 in float, 16384 faults, as long as the whole
/// computation. Only whole 2 MiB pages inside the buffer are advised; a no-op elsewhere.
void prefer_huge_pages(void* data, std::size_t bytes);

}  // namespace internal
}  // namespace EigenAttention
