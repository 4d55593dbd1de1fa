// SPDX-License-Identifier: MIT
// Compiled with -Werror=deprecated-declarations, must not compile: a 0.2 form of a multi-head
// call (Deprecated.hpp) warns at its use, naming the 0.3 call that replaces it.
#include <EigenAttention/EigenAttention.hpp>

int main() {
  float q[8] = {}, k[8] = {}, v[8] = {}, o[8] = {};
  using In = EigenAttention::HeadsView<const float>;
  EigenAttention::attention_heads(In::bhtd(q, 1, 1, 2, 4), In::bhtd(k, 1, 1, 2, 4), In::bhtd(v, 1, 1, 2, 4),
                                  EigenAttention::HeadsView<float>::bhtd(o, 1, 1, 2, 4));
}
