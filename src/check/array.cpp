// SPDX-License-Identifier: MIT
// Arrays as the validator sees them (array.hpp).
#include "check/array.hpp"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

namespace EigenAttention {
namespace internal {

void fail(const char* api, const std::string& what) {
  throw std::invalid_argument(std::string("EigenAttention::") + api + ": " + what);
}

index_t Array::count_or_zero() const {
  for (const index_t n : size)
    if (n == 0) return 0;
  return 1;
}

std::string Array::shape() const {
  switch (print) {
    case Print::Matrix:
      return num(size[2]) + "x" + num(size[3]);
    case Print::Vector:
      return counted(size[3], "entry", "entries");
    case Print::Heads:
      break;
  }
  return "[" + num(size[0]) + ", " + num(size[1]) + ", " + num(size[2]) + ", " + num(size[3]) + "]";
}

std::string Array::strides() const {
  std::string list;
  for (int axis = print == Print::Heads ? 0 : print == Print::Matrix ? 2 : 3; axis < 4; ++axis)
    list += (list.empty() ? "" : ",") + num(stride[axis]);
  return "(" + list + ")";
}

std::string Array::named() const {
  return std::string(name) + (print == Print::Heads ? " " + shape() : " (" + shape() + ")");
}

// The element count and the byte span (sum over axes of |stride| * size * bytes, a size of 0
// counting as 1) must fit index_t: every offset the kernels and the overlap rule compute is
// bounded by them. A matrix counts its two axes; a 4-D view counts a size of 0 as 1 in the
// element count too, as the scheduler multiplies batch, heads and tiles whatever dim is.
void check_countable(const char* api, const Array& a) {
  const auto what = [&] { return a.named() + " with strides " + a.strides(); };
  const bool zero_as_one = a.print == Print::Heads;
  index_t count = 1, span = 0;
  for (int axis = 0; axis < 4; ++axis) {
    const index_t n = zero_as_one ? std::max<index_t>(a.size[axis], 1) : a.size[axis];
    if (!mul(count, n, count)) {
      fail(api, what() + " has more elements than Eigen::Index can count (" + num(kIndexMax) +
                    (zero_as_one ? "; a size of 0 counts as 1 here)" : ")"));
    }
  }
  for (int axis = 0; axis < 4; ++axis) {
    index_t reach = 0;
    const bool ok = a.stride[axis] != std::numeric_limits<index_t>::min() &&
                    mul(std::abs(a.stride[axis]), std::max<index_t>(a.size[axis], 1), reach) &&
                    mul(reach, a.bytes, reach) && add(span, reach, span);
    if (!ok) fail(api, what() + " spans more bytes than Eigen::Index can count (" + num(kIndexMax) + ")");
  }
}

void check_sizes(const char* api, const Array& a) {
  for (const index_t n : a.size) {
    if (n < 0) fail(api, std::string(a.name) + " has a negative size: " + a.shape());
  }
  check_countable(api, a);
  if (a.data == 0 && a.count_or_zero() != 0) fail(api, a.named() + " has no data");
}

}  // namespace internal
}  // namespace EigenAttention
