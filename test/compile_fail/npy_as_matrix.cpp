// SPDX-License-Identifier: MIT
// Must not compile: npy::as_matrix with an integer element type (float or double only).
#include <EigenAttention/EigenAttention.hpp>

int main() {
  const auto a = EigenAttention::npy::zeros<int>({2, 3});
  auto m = EigenAttention::npy::as_matrix<int>(a, "a");
  (void)m;
}
