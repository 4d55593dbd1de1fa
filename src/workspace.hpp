// Per-thread scratch memory that kernels reuse from call to call, so that a loop of attention
// calls allocates only while its sizes still grow. Internal to the library.
#pragma once

#include <cstddef>
#include <vector>

#include <Eigen/Core>

namespace EigenAttention {
namespace internal {

/// A growable, 64-byte aligned buffer of T owned by the calling thread.
/// `take(n)` returns room for n elements; the contents are not kept across calls.
template <typename T, int Slot = 0>
class ThreadWorkspace {
 public:
  static T* take(std::size_t n) {
    thread_local std::vector<T, Eigen::aligned_allocator<T>> buffer;
    if (buffer.size() < n) {
      buffer.clear();
      buffer.shrink_to_fit();
      buffer.resize(n);
    }
    return buffer.data();
  }
};

}  // namespace internal
}  // namespace EigenAttention
