// SPDX-License-Identifier: MIT
// A toy generation loop on a paged KV cache: a tiny "model" (random projections) prefills two
// prompts, forks the first one (a second sample sharing its prompt's pages), and generates
// tokens one at a time for the three sequences with one batched decode per step. Then it
// checks that the last step equals attention_heads_into over the same keys laid out contiguously,
// and that rejecting speculative tokens (truncate) and appending them again gives the same
// output as before. Exits non-zero when a check fails (the test suite runs it).
#include <EigenAttention/EigenAttention.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

namespace ea = EigenAttention;
using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

int main() {
  const int H = 8, H_kv = 2, d = 32, model = 64;  // GQA: 4 query heads share each KV head
  std::srand(7);
  // The "model": projections of a token's hidden state to queries, keys and values.
  const Matrix Wq = Matrix::Random(model, H * d) / std::sqrt(float(model));
  const Matrix Wk = Matrix::Random(model, H_kv * d) / std::sqrt(float(model));
  const Matrix Wv = Matrix::Random(model, H_kv * d) / std::sqrt(float(model));

  ea::PagedKVCache<float> cache(H_kv, d, d, /*page_size=*/16, /*capacity_tokens=*/4096);
  ea::Options opt;
  opt.causal = true;
  opt.threads = 2;

  // Prefill: each prompt's keys and values go into the cache; the prompt's own attention
  // (the last T rows of the sequence) is a decode of T query rows.
  std::vector<ea::SequenceId> seqs;
  std::vector<Matrix> hidden;  // each sequence's last hidden state
  for (const int prompt : {37, 100}) {
    const Matrix x = Matrix::Random(prompt, model);
    const auto s = cache.create();
    cache.append(s, x * Wk, x * Wv);
    const Matrix out = ea::attention_decode(cache, s, x * Wq, opt);  // prompt x (H d)
    seqs.push_back(s);
    hidden.push_back(out.bottomRows(1).leftCols(model));
  }
  // A second sample of prompt 0 shares its pages (copy-on-write of the partly filled last one).
  seqs.push_back(cache.fork(seqs[0]));
  hidden.push_back(hidden[0] + Matrix::Constant(1, model, 0.01f));
  std::printf("prefilled %d sequences, %td of %td pages in use\n", int(seqs.size()),
              cache.num_pages() - cache.free_pages(), cache.num_pages());

  // Generation: per step, every sequence appends its new token's K and V, then one batched
  // decode computes all new tokens' attention (queries packed with cumulative offsets).
  const int steps = 20;
  Matrix out;
  for (int step = 0; step < steps; ++step) {
    Matrix q(static_cast<Eigen::Index>(seqs.size()), H * d);
    std::vector<std::int64_t> cu = {0};
    for (std::size_t b = 0; b < seqs.size(); ++b) {
      cache.append(seqs[b], hidden[b] * Wk, hidden[b] * Wv);
      q.row(static_cast<Eigen::Index>(b)) = hidden[b] * Wq;
      cu.push_back(cu.back() + 1);
    }
    // q holds the heads side by side (one row per sequence): the view [1, H, batch, d].
    ea::attention_decode_into(cache, seqs.data(), static_cast<std::ptrdiff_t>(seqs.size()),
                              ea::HeadsView<const float>::side_by_side(q, d), cu.data(), out, opt);
    for (std::size_t b = 0; b < seqs.size(); ++b)
      hidden[b] = out.row(static_cast<Eigen::Index>(b)).leftCols(model).array().tanh();
  }
  for (std::size_t b = 0; b < seqs.size(); ++b)
    std::printf("sequence %zu: %lld tokens\n", b, static_cast<long long>(cache.length(seqs[b])));

  // Check 1: the last step of sequence 1 equals attention_heads_into over its keys, contiguous.
  const auto s1 = seqs[1];
  const std::int64_t t = cache.length(s1);
  Matrix keys(t, H_kv * d), values(t, H_kv * d);
  {
    // Read the cache back through a PagedKVView of its pages ([page, head, slot, d] layout).
    const std::vector<std::int32_t> pages = cache.pages(s1);
    for (std::int64_t n = 0; n < t; ++n)
      for (int h = 0; h < H_kv; ++h)
        for (int c = 0; c < d; ++c) {
          const std::ptrdiff_t at = ((pages[n / 16] * H_kv + h) * 16 + n % 16) * d + c;
          keys(n, h * d + c) = cache.key_pages()[at];
          values(n, h * d + c) = cache.value_pages()[at];
        }
  }
  const Matrix q1 = hidden[1];  // one more query: append its token, decode, compare
  cache.append(s1, q1 * Wk, q1 * Wv);
  keys.conservativeResize(t + 1, Eigen::NoChange);
  values.conservativeResize(t + 1, Eigen::NoChange);
  keys.bottomRows(1) = q1 * Wk;
  values.bottomRows(1) = q1 * Wv;
  const Matrix decoded = ea::attention_decode(cache, s1, q1 * Wq, opt);
  Matrix expected(1, H * d);
  ea::Options heads_opt = opt;
  heads_opt.alignment = ea::CausalAlignment::BottomRight;
  const Matrix qq = q1 * Wq;
  ea::attention_heads_into(ea::HeadsView<const float>::bthd(qq.data(), 1, 1, H, d),
                           ea::HeadsView<const float>::bthd(keys.data(), 1, t + 1, H_kv, d),
                           ea::HeadsView<const float>::bthd(values.data(), 1, t + 1, H_kv, d),
                           ea::HeadsView<float>::bthd(expected.data(), 1, 1, H, d), heads_opt);
  const float diff = (decoded - expected).cwiseAbs().maxCoeff();
  std::printf("decode vs attention_heads_into on the same keys: max |difference| %.2e\n", diff);

  // Check 2: speculative decoding rejects 3 tokens: truncate, append them again, same output.
  const std::int64_t before = cache.length(s1);
  cache.truncate(s1, before - 3);
  cache.append(s1, keys.bottomRows(3), values.bottomRows(3));
  const Matrix again = ea::attention_decode(cache, s1, q1 * Wq, opt);
  const bool same = (again.array() == decoded.array()).all();
  std::printf("truncate then append again: %s\n", same ? "bitwise the same" : "DIFFERENT");

  const bool ok = diff < 1e-5f && same;
  std::printf("%s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
