// SPDX-License-Identifier: MIT
// Must not compile: npy::as_heads with an integer element type (float or double only).
#include <EigenAttention/EigenAttention.hpp>

int main() {
  const auto a = EigenAttention::npy::zeros<int>({1, 1, 2, 3});
  auto h = EigenAttention::npy::as_heads<int>(a, EigenAttention::Layout::BHTD, "a");
  (void)h;
}
