// Which kernels exist, which this CPU runs, and the dispatch to them.
#include <stdexcept>
#include <string>

#include "kernel.hpp"

namespace EigenAttention {

namespace {

// Built once: resolving a kernel must not allocate (the _into calls allocate nothing).
const std::vector<Kernel>& kernels_here() {
  static const std::vector<Kernel> kernels{Kernel::Portable, Kernel::Reference};
  return kernels;
}

}  // namespace

std::vector<Kernel> available_kernels() { return kernels_here(); }

const char* kernel_name(Kernel kernel) {
  switch (kernel) {
    case Kernel::Auto: return "auto";
    case Kernel::Reference: return "reference";
    case Kernel::Portable: return "portable";
  }
  return "unknown";
}

namespace internal {

Kernel resolve_kernel(const char* api, Kernel requested) {
  const std::vector<Kernel>& available = kernels_here();
  if (requested == Kernel::Auto) return available.front();
  for (Kernel k : available) {
    if (k == requested) return k;
  }
  throw std::invalid_argument(std::string("EigenAttention::") + api + ": kernel '" +
                              kernel_name(requested) + "' is not available on this CPU");
}

template <typename T>
void run_kernel(Kernel kernel, const Problem<T>& p, const Outputs<T>& out) {
  switch (kernel) {
    case Kernel::Reference: reference_kernel(p, out); return;
    case Kernel::Portable:
    case Kernel::Auto: portable_kernel(p, out); return;
  }
}

template void run_kernel<float>(Kernel, const Problem<float>&, const Outputs<float>&);
template void run_kernel<double>(Kernel, const Problem<double>&, const Outputs<double>&);

}  // namespace internal
}  // namespace EigenAttention
