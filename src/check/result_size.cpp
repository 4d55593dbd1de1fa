// compiled::check_result_size (Compiled.hpp): the size check of a by-value result, before the
// caller allocates it.
#include <EigenAttention/Compiled.hpp>

#include "check/array.hpp"

namespace EigenAttention {
namespace compiled {

void check_result_size(const char* api, const char* name, const char* what, std::ptrdiff_t rows,
                       std::ptrdiff_t cols, std::size_t element_bytes, std::ptrdiff_t max_elements) {
  using internal::fail;
  using internal::num;
  const std::string shown = num(rows) + "x" + num(cols);
  internal::index_t bytes = 0, count = 0;
  if (rows < 0 || cols < 0)
    fail(api, std::string(name) + " (" + what + ") would have a negative size: " + shown);
  if (!internal::mul(rows, cols, count) ||
      !internal::mul(count, static_cast<internal::index_t>(element_bytes), bytes)) {
    fail(api, std::string(name) + " (" + what + ") would be " + shown + " elements of " +
                  std::to_string(element_bytes) + " bytes, more than Eigen::Index can count (" +
                  num(internal::kIndexMax) + " bytes)");
  }
  if (count > max_elements) {
    fail(api, std::string(name) + " (" + what + ") would be " + shown + " elements, more than " +
                  "the caller's Eigen::Index can count (" + num(max_elements) + ")");
  }
}

}  // namespace compiled
}  // namespace EigenAttention
