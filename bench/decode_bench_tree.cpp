// SPDX-License-Identifier: MIT
// eigen_attention_decode_bench, section 6: the verify call of speculative decoding. T_q drafts
// at the end of one sequence of T_k keys (the --shape heads, page 16, float), decoded in one call
// with a tree mask (Masks::mask, a binary tree of drafts: draft i's parent is (i - 1) / 2), beside
// the same call with the causal mask alone (a chain of drafts) and beside T_q one-token decodes
// over the whole cache (what a pass over the cache per draft costs). The tree's drafts go row by row
// (kernels/decode.hpp), so its cost over the causal call is the price of the tree.
#include "decode_bench.hpp"

namespace ea_decode_bench {

void tree_section(const Args& a, ea::Kernel kernel, Summary& sum) {
  const Idx page = 16, width = a.kv_heads * a.d;
  std::printf(
      "== 6. speculative decoding's verify call: T_q drafts at the end of T_k = %ld keys, H = %ld, H_kv = "
      "%ld, "
      "d = %ld, float, page 16\n"
      "   'tree' = one call with a binary tree mask, 'causal' = the same call without it (a chain), "
      "'1 by 1' = T_q calls of one token\n",
      long(a.t_k), long(a.heads), long(a.kv_heads), long(a.d));
  std::printf("%4s %3s | %9s %9s %9s | %6s %6s\n", "T_q", "thr", "tree ms", "causal ms", "1by1 ms", "x caus",
              "x 1by1");
  const KeysValues kv(a.t_k, width, 3);
  ea::PagedKVCache<float> cache(a.kv_heads, a.d, a.d, page, a.t_k + page);
  const auto s = cache.create();
  cache.append(s, kv.k, kv.v);
  for (const Idx tq : {Idx(4), Idx(8), Idx(16)}) {
    Mat<float> q(tq, a.heads * a.d), out;
    fill_uniform(q.data(), q.size(), 17);
    std::vector<char> tree(static_cast<std::size_t>(tq * tq), 0);
    for (Idx i = 0; i < tq; ++i)
      for (Idx p = i; p >= 0; p = p == 0 ? -1 : (p - 1) / 2) tree[static_cast<std::size_t>(i * tq + p)] = 1;
    ea::Masks<float> masks;
    masks.mask = ea::BroadcastView<bool>::matrix(reinterpret_cast<const bool*>(tree.data()), tq, tq);
    for (const int threads : a.threads) {
      ea::Options opt;
      opt.kernel = kernel;
      opt.threads = threads;
      opt.causal = true;
      const ea::SequenceId one[1] = {s};
      const auto q_view = ea::HeadsView<const float>::side_by_side(q, a.d);
      const double t_tree = measure(a.seconds, a.reps, [&] {
                              ea::attention_decode_into(cache, one, 1, q_view, nullptr, out, opt, masks);
                            }).median;
      const double t_causal = measure(a.seconds, a.reps, [&] {
                                ea::attention_decode_into(cache, one, 1, q_view, nullptr, out, opt);
                              }).median;
      // One pass over the cache per draft: T_q calls of one token (its cost, not its answer).
      const double t_one = measure(a.seconds, a.reps, [&] {
                             for (Idx i = 0; i < tq; ++i) {
                               Mat<float> o;
                               const auto qi =
                                   ea::HeadsView<const float>::side_by_side(q.middleRows(i, 1), a.d);
                               ea::attention_decode_into(cache, one, 1, qi, nullptr, o, opt);
                             }
                           }).median;
      std::printf("%4ld %3d | %9.3f %9.3f %9.3f | %6.2f %6.2f\n", long(tq), threads, t_tree * 1e3,
                  t_causal * 1e3, t_one * 1e3, t_tree / t_causal, t_tree / t_one);
      std::fflush(stdout);
      if (tq == 8)
        sum.lines.push_back("tree verify, T_q = 8, " + std::to_string(threads) +
                            " thread(s): " + fmt(t_tree / t_causal, 2) + "x the causal call's time, " +
                            fmt(t_tree / t_one, 2) + "x eight one-token calls'");
    }
  }
  std::printf("\n");
}

}  // namespace ea_decode_bench
