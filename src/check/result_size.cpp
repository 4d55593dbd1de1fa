// SPDX-License-Identifier: MIT
// The size check of an output before the caller's translation unit sizes it (outputs.hpp).
#include "check/array.hpp"
#include "outputs.hpp"

namespace EigenAttention {
namespace internal {

void check_result_size(const char* api, const char* name, const char* what, std::ptrdiff_t rows,
                       std::ptrdiff_t cols, std::size_t element_bytes, std::ptrdiff_t max_elements) {
  const std::string shown = num(rows) + "x" + num(cols);
  index_t bytes = 0, count = 0;
  if (rows < 0 || cols < 0)
    fail(api, std::string(name) + " (" + what + ") would have a negative size: " + shown);
  if (!mul(rows, cols, count) || !mul(count, static_cast<index_t>(element_bytes), bytes)) {
    fail(api, std::string(name) + " (" + what + ") would be " + shown + " elements of " +
                  std::to_string(element_bytes) + " bytes, more than Eigen::Index can count (" +
                  num(kIndexMax) + " bytes)");
  }
  if (count > max_elements) {
    fail(api, std::string(name) + " (" + what + ") would be " + shown + " elements, more than " +
                  "the caller's Eigen::Index can count (" + num(max_elements) + ")");
  }
}

}  // namespace internal
}  // namespace EigenAttention
