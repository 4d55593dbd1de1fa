// SPDX-License-Identifier: MIT
// Batched multi-head attention as a transformer layer calls it: B sequences, H query heads
// sharing H_kv key/value heads (GQA), right padding, a sliding window, and the log-sum-exp.
// Also shows the exact merge of two partial results (split-K over the keys).
#include <EigenAttention/EigenAttention.hpp>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <vector>

namespace ea = EigenAttention;

int main() {
  const Eigen::Index B = 2, H = 8, H_kv = 2, T = 64, D = 32;
  // Activations in FlashAttention's layout [B, T, heads, D], as a projection writes them.
  std::vector<float> q(B * T * H * D), k(B * T * H_kv * D), v(B * T * H_kv * D), o(B * T * H * D),
      lse(B * H * T);
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.37f * i);
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = std::cos(0.11f * i);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.05f * i + 1);

  const auto Q = ea::HeadsView<const float>::bthd(q.data(), B, T, H, D);
  const auto K = ea::HeadsView<const float>::bthd(k.data(), B, T, H_kv, D);
  const auto V = ea::HeadsView<const float>::bthd(v.data(), B, T, H_kv, D);
  const auto O = ea::HeadsView<float>::bthd(o.data(), B, T, H, D);
  const auto L = ea::HeadsView<float>::bhtd(lse.data(), B, H, T, 1);

  ea::Options opt;
  opt.causal = true;
  opt.window_left = 16;                         // each token sees itself and the 16 before it
  opt.threads = 0;                              // every hardware thread; the result is the same for any count
  const std::int64_t key_lengths[] = {64, 40};  // the second sequence is right-padded
  ea::Masks<float> masks;
  masks.key_lengths = key_lengths;
  ea::attention_heads_into(Q, K, V, O, L, opt, masks);
  std::cout << "ATTN[0, token 5, head 3, :4] = " << O.head(0, 3).row(5).head(4) << "\n";

  // Split-K: attend to keys [0, 32) and [32, 64) separately, then merge exactly.
  std::vector<float> o1(o.size()), o2(o.size()), l1(lse.size()), l2(lse.size());
  ea::Options plain;
  const auto part = [&](Eigen::Index first, Eigen::Index n, std::vector<float>& out, std::vector<float>& l) {
    ea::HeadsView<const float> Kp = K, Vp = V;
    Kp.data += first * K.token_stride;
    Vp.data += first * V.token_stride;
    Kp.tokens = Vp.tokens = n;
    ea::attention_heads_into(Q, Kp, Vp, ea::HeadsView<float>::bthd(out.data(), B, T, H, D),
                             ea::HeadsView<float>::bhtd(l.data(), B, H, T, 1), plain);
  };
  part(0, 32, o1, l1);
  part(32, 32, o2, l2);
  ea::merge_attention_into(
      ea::HeadsView<float>::bthd(o1.data(), B, T, H, D), ea::HeadsView<float>::bhtd(l1.data(), B, H, T, 1),
      ea::HeadsView<float>::bthd(o2.data(), B, T, H, D), ea::HeadsView<float>::bhtd(l2.data(), B, H, T, 1),
      ea::HeadsView<float>::bthd(o1.data(), B, T, H, D), ea::HeadsView<float>::bhtd(l1.data(), B, H, T, 1));
  ea::attention_heads_into(Q, K, V, O, plain);  // the whole, in one call
  float worst = 0;
  for (std::size_t i = 0; i < o.size(); ++i) worst = std::max(worst, std::abs(o[i] - o1[i]));
  std::cout << "merged halves vs whole: max |diff| = " << worst << "\n";
  return worst < 1e-5f ? 0 : 1;
}
