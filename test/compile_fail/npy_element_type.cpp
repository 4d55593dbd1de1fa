// SPDX-License-Identifier: MIT
// Must not compile: an .npy array of an element type that npy::Array cannot hold (short).
#include <EigenAttention/EigenAttention.hpp>

int main() {
  auto a = EigenAttention::npy::zeros<short>({2, 3});
  (void)a;
}
