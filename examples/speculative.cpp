// SPDX-License-Identifier: MIT
// One step of speculative decoding with a draft tree (SpecInfer, Medusa, EAGLE), on a
// PagedKVCache:
//   1. draft: a small model proposes a tree of 6 tokens after the prompt, parents
//      {-1, 0, 0, 1, 1, 2} (two candidates for the next token, two or one for each of the first
//      two, ...), appended to the sequence in that order;
//   2. verify: ONE decode call with T_q = 6 computes attention for every draft, with the tree mask
//      (Masks::mask, 6 x 6): each draft sees the prompt, its ancestors and itself;
//   3. accept: the target model keeps a root-to-leaf path (here 0 -> 1 -> 4: in a real model, the
//      longest path whose drafts match its own predictions); erase() drops the other drafts, so
//      the cache holds the prompt and the accepted path, in order;
//   4. continue: the next token is appended and decoded as usual.
// Checks, exiting non-zero when one fails (the test suite runs it): each draft's row of the
// verify call equals a plain causal decode on a sequence of the prompt and that draft's path
// alone (what the tree mask means), and after step 3 the next decode is bitwise the decode on a
// fresh cache of the prompt and the accepted path.
#include <EigenAttention/EigenAttention.hpp>

#include <cstdio>
#include <vector>

namespace ea = EigenAttention;
using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

int main() {
  const int H = 8, H_kv = 2, d = 32, page = 16, prompt = 45, drafts = 6;
  const int parent[drafts] = {-1, 0, 0, 1, 1, 2};
  std::srand(7);
  ea::PagedKVCache<float> cache(H_kv, d, d, page, 256);
  ea::Options opt;
  opt.causal = true;  // implied by the tree; kept as any decode has it

  // The prompt, then the drafts' keys and values (as the target model's layer computes them).
  const Matrix K = Matrix::Random(prompt + drafts, H_kv * d), V = Matrix::Random(prompt + drafts, H_kv * d);
  const Matrix Q = Matrix::Random(drafts, H * d);  // the drafts' queries
  const auto s = cache.create();
  cache.append(s, K, V);

  // 2. Verify all drafts in one call. tree(i, j): may draft i see draft j (an ancestor or itself)?
  Eigen::Matrix<bool, drafts, drafts, Eigen::RowMajor> tree;
  tree.setConstant(false);
  for (int i = 0; i < drafts; ++i)
    for (int a = i; a >= 0; a = parent[a]) tree(i, a) = true;
  ea::Masks<float> masks;
  masks.mask = ea::BroadcastView<bool>::matrix(tree.data(), drafts, drafts);
  const Matrix verify = ea::attention_decode(cache, s, Q, opt, masks);  // drafts x (H d)

  // What the tree mask means: draft i attends as if the sequence were the prompt and its path.
  float worst = 0;
  for (int i = 0; i < drafts; ++i) {
    std::vector<int> path;
    for (int a = i; a >= 0; a = parent[a]) path.insert(path.begin(), a);
    ea::PagedKVCache<float> alone(H_kv, d, d, page, 128);
    const auto p = alone.create();
    alone.append(p, K.topRows(prompt), V.topRows(prompt));
    for (const int a : path) alone.append(p, K.row(prompt + a), V.row(prompt + a));
    const Matrix row = ea::attention_decode(alone, p, Q.row(i), opt);
    worst = std::max(worst, (row - verify.row(i)).cwiseAbs().maxCoeff());
  }
  std::printf("verify: %d drafts in one decode call; each row vs a decode of its own path: max |diff| %.3g\n",
              drafts, worst);
  bool ok = worst <= 1e-5f;

  // 3. Accept 0 -> 1 -> 4; erase drafts 5, then 2 and 3 (from the back, so positions hold).
  const int accepted[] = {0, 1, 4};
  cache.erase(s, prompt + 5, prompt + 6);
  cache.erase(s, prompt + 2, prompt + 4);
  std::printf("accepted 3 of %d drafts; the sequence holds %lld tokens\n", drafts,
              static_cast<long long>(cache.length(s)));
  ok = ok && cache.length(s) == prompt + 3;

  // 4. Continue: the token after the path (the target's own prediction), decoded as usual.
  const Matrix k = Matrix::Random(1, H_kv * d), v = Matrix::Random(1, H_kv * d), q = Matrix::Random(1, H * d);
  cache.append(s, k, v);
  const Matrix next = ea::attention_decode(cache, s, q, opt);
  ea::PagedKVCache<float> fresh(H_kv, d, d, page, 128);
  const auto f = fresh.create();
  fresh.append(f, K.topRows(prompt), V.topRows(prompt));
  for (const int a : accepted) fresh.append(f, K.row(prompt + a), V.row(prompt + a));
  fresh.append(f, k, v);
  const bool same = (ea::attention_decode(fresh, f, q, opt).array() == next.array()).all();
  std::printf("next token after the accepted path: %s the decode on a fresh cache of prompt + path\n",
              same ? "bitwise equal to" : "DIFFERENT from");
  ok = ok && same;
  std::printf(ok ? "ok\n" : "FAILED\n");
  return ok ? 0 : 1;
}
