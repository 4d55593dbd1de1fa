// SPDX-License-Identifier: MIT
// A stream longer than the cache, in constant memory (StreamingLLM, Xiao et al. 2023): the cache
// keeps the first kSinkTokens tokens of the stream ("sink tokens") and a window of the latest
// ones; when a page's worth of tokens past the window has come in, erase() drops the oldest page
// of the window (whole pages: at most kSinkTokens tokens copied). Each step decodes the new token
// with gpt-oss's learned sink logits (Masks::sinks) too. 1000 tokens go through a cache of 112.
// Checks, exiting non-zero when one fails (the test suite runs it): the cache never holds more
// than its capacity, and the last step equals attention_heads_into over the same kept tokens
// laid out contiguously (with the same sinks).
#include <EigenAttention/EigenAttention.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

namespace ea = EigenAttention;
using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

int main() {
  const int H = 4, H_kv = 2, d = 16, page = 16, kSinkTokens = 4, window = 64, steps = 1000;
  const int capacity = kSinkTokens + window + 2 * page;  // 100 tokens: 7 pages of 16
  std::srand(11);
  ea::PagedKVCache<float> cache(H_kv, d, d, page, capacity);
  const std::vector<float> sinks = {0.5f, -1.0f, 1.5f, 0.0f};  // one learned logit per query head
  ea::Masks<float> masks;
  masks.sinks = sinks.data();
  ea::Options opt;
  opt.causal = true;

  const auto s = cache.create();
  Matrix kept_k(0, H_kv * d), kept_v(0, H_kv * d);  // what the cache should hold, for the check
  Matrix q, out;
  std::int64_t most = 0;
  for (int t = 0; t < steps; ++t) {
    const Matrix k = Matrix::Random(1, H_kv * d), v = Matrix::Random(1, H_kv * d);
    q = Matrix::Random(1, H * d);
    cache.append(s, k, v);
    kept_k.conservativeResize(kept_k.rows() + 1, Eigen::NoChange);
    kept_v.conservativeResize(kept_v.rows() + 1, Eigen::NoChange);
    kept_k.bottomRows(1) = k;
    kept_v.bottomRows(1) = v;
    out = ea::attention_decode(cache, s, q, opt, masks);  // 1 x (H d)
    most = std::max(most, cache.length(s));
    if (cache.length(s) == kSinkTokens + window + page) {  // evict the window's oldest page
      cache.erase(s, kSinkTokens, kSinkTokens + page);
      Matrix k2(kept_k.rows() - page, kept_k.cols()), v2(kept_v.rows() - page, kept_v.cols());
      k2 << kept_k.topRows(kSinkTokens), kept_k.bottomRows(kept_k.rows() - kSinkTokens - page);
      v2 << kept_v.topRows(kSinkTokens), kept_v.bottomRows(kept_v.rows() - kSinkTokens - page);
      kept_k = k2;
      kept_v = v2;
    }
  }
  std::printf("%d tokens streamed through a cache of %td pages (%td tokens); it held at most %lld\n", steps,
              cache.num_pages(), cache.num_pages() * cache.page_size(), static_cast<long long>(most));
  bool ok = most <= capacity && cache.free_pages() >= 0;

  // The last step's decode against the same keys and values in one contiguous block. (kept_* are
  // the cache's tokens after the last step's eviction, if any: the decode saw them before it.)
  const Matrix K = kept_k, V = kept_v;
  Matrix expect(1, H * d), lse(1, H);
  if (cache.length(s) == K.rows()) {
    Matrix again = ea::attention_decode(cache, s, q, opt, masks);
    ea::attention_heads_into(
        ea::HeadsView<const float>::side_by_side(q, d), ea::HeadsView<const float>::side_by_side(K, d),
        ea::HeadsView<const float>::side_by_side(V, d), ea::HeadsView<float>::side_by_side(expect, d),
        ea::HeadsView<float>{lse.data(), 1, H, 1, 1, 0, 1, H, 1},
        [&] {
          ea::Options o = opt;
          o.alignment = ea::CausalAlignment::BottomRight;
          return o;
        }(),
        masks);
    const float diff = (again - expect).cwiseAbs().maxCoeff();
    std::printf("decode on the cache vs attention_heads_into on the kept tokens: max |diff| %.3g\n", diff);
    ok = ok && diff <= 1e-5f;
  } else {
    ok = false;
  }
  std::printf(ok ? "ok\n" : "FAILED\n");
  return ok ? 0 : 1;
}
