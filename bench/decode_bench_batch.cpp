// SPDX-License-Identifier: MIT
// eigen_attention_decode_bench, sections 3 and 4: one decode step of a batch of sequences of
// mixed lengths in one batched call (continuous batching), beside one call per sequence; and the
// time of appending one token, which must not grow with the sequence's length.
#include "decode_bench.hpp"

#include <type_traits>

namespace ea_decode_bench {

namespace {

std::uint64_t next(std::uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s >> 11;
}

template <typename T>
void batch_rows(const Args& a, ea::Kernel kernel, const BandwidthTable& bw, Summary& sum, const char* name,
                const KeysValues& kv, const std::vector<Idx>& len, const std::vector<Idx>& first) {
  const Idx B = Idx(len.size()), Hkv = a.kv_heads, d = a.d, H = a.heads;
  Idx tokens = 0;
  for (Idx l : len) tokens += l;
  const Idx bytes = 2 * tokens * Hkv * row_bytes(name, d);
  Mat<float> q(B, H * d), out(B, H * d), out_loop(B, H * d), out1(1, H * d);
  const auto q_heads = ea::HeadsView<const float>::side_by_side(q, d);  // [1, H, B, d]
  fill_uniform(q.data(), q.size(), 11);
  std::vector<std::int64_t> cu(static_cast<std::size_t>(B + 1));
  for (Idx b = 0; b <= B; ++b) cu[static_cast<std::size_t>(b)] = b;

  for (const Idx ps : a.batch_page_sizes) {
    Idx capacity = 0;
    for (Idx l : len) capacity += (l + ps - 1) / ps * ps;
    ea::PagedKVCache<T> cache(Hkv, d, d, ps, capacity);
    std::vector<ea::SequenceId> ids;
    for (Idx b = 0; b < B; ++b) ids.push_back(cache.create());
    // The prompts arrive interleaved: pieces of 1..32 tokens of a random unfinished sequence, so
    // that the sequences' pages alternate in the pool.
    std::vector<Idx> have(static_cast<std::size_t>(B), 0);
    std::uint64_t seed = 0x9E3779B97F4A7C15ull + std::uint64_t(ps);
    for (Idx left = tokens; left > 0;) {
      Idx b = Idx(next(seed) % std::uint64_t(B));
      while (have[static_cast<std::size_t>(b)] == len[static_cast<std::size_t>(b)]) b = (b + 1) % B;
      Idx& h = have[static_cast<std::size_t>(b)];
      const Idx n = std::min<Idx>(1 + Idx(next(seed) % 32), len[static_cast<std::size_t>(b)] - h);
      const Idx row = first[static_cast<std::size_t>(b)] + h;
      cache.append(ids[static_cast<std::size_t>(b)], kv.k.middleRows(row, n), kv.v.middleRows(row, n));
      h += n;
      left -= n;
    }
    Idx adjacent = 0, pairs = 0;
    for (const ea::SequenceId s : ids) {
      const auto [x, y] = adjacent_pages(cache, s);
      adjacent += x;
      pairs += y;
    }
    std::printf("%-7s (page %ld: %ld of %ld consecutive page pairs adjacent in memory)\n", name, long(ps),
                long(adjacent), long(pairs));
    for (const int threads : a.threads) {
      ea::Options opt;
      opt.kernel = kernel;
      opt.threads = threads;
      const auto batched = [&] {
        ea::attention_decode_into(cache, ids.data(), B, q_heads, cu.data(), out, opt);
        g_sink = g_sink + double(out(0, 0));
      };
      const auto loop = [&] {
        const std::int64_t one[2] = {0, 1};
        for (Idx b = 0; b < B; ++b) {
          ea::attention_decode_into(cache, &ids[static_cast<std::size_t>(b)], 1,
                                    ea::HeadsView<const float>::side_by_side(q.row(b), d), one, out1, opt);
          out_loop.row(b) = out1;
        }
        g_sink = g_sink + double(out_loop(0, 0));
      };
      const Timing warm = measure(a.seconds, a.reps, batched);
      const double cold = a.cold ? measure_cold(a.reps, batched) : kNaN;
      const Timing looped = measure(a.seconds, a.reps, loop);
      const double gbs = double(bytes) / warm.median / 1e9, cold_gbs = double(bytes) / cold / 1e9;
      const double frac = gbs / bw.warm(bytes, threads), cold_frac = cold_gbs / bw.cold(bytes, threads);
      const double diff = max_diff(out.data(), out_loop.data(), out.size());
      const bool bad = !(diff <= 1e-6);
      if (bad) ++sum.failed;
      std::printf("%-7s %4ld %3d | %8.3f %8.1f %7.2f %5.2f | %8s %7s %5s | %8.3f %6.2f | %9s\n", name,
                  long(ps), threads, warm.median * 1e3, double(B) / warm.median, gbs, frac,
                  fmt(cold * 1e3, 3).c_str(), fmt(cold_gbs, 2).c_str(), fmt(cold_frac, 2).c_str(),
                  looped.median * 1e3, looped.median / warm.median, (fmt_e(diff) + (bad ? "!" : "")).c_str());
      std::fflush(stdout);
      char line[200];
      std::snprintf(line, sizeof line,
                    "batch %s page %ld, %d thread(s): %.2f GB/s = %.2f of the bandwidth (cold %s)", name,
                    long(ps), threads, gbs, frac, fmt(cold_frac, 2).c_str());
      sum.lines.push_back(line);
    }
  }
}

template <typename T>
void append_rows(const Args& a, Summary& sum, const char* name, const KeysValues& kv) {
  constexpr Idx ps = 16;
  const Idx Hkv = a.kv_heads, d = a.d, n = a.append_tokens;
  Mat<float> k1(1, Hkv * d), v1(1, Hkv * d);
  fill_uniform(k1.data(), k1.size(), 21);
  fill_uniform(v1.data(), v1.size(), 22);
  double first = kNaN, last = kNaN;
  for (const Idx t_len : a.append_ts) {
    ea::PagedKVCache<T> cache(Hkv, d, d, ps, t_len + n + ps);
    const ea::SequenceId s = cache.create();
    cache.append(s, kv.k.topRows(t_len), kv.v.topRows(t_len));
    // Runs of n one-token appends from length t_len; the sequence is truncated back to t_len
    // after each run (outside the timed region), so every run appends at t_len .. t_len + n.
    const auto run = [&] {
      const Clock::time_point t0 = Clock::now();
      for (Idx i = 0; i < n; ++i) cache.append(s, k1, v1);
      const double t = seconds_since(t0) / double(n);
      cache.truncate(s, t_len);
      return t;
    };
    run();  // warm-up: faults the pages in
    std::vector<double> t;
    for (int r = 0; r < a.reps; ++r) t.push_back(run());
    std::sort(t.begin(), t.end());
    const double median = t[t.size() / 2];
    if (std::isnan(first)) first = median;
    last = median;
    const double bytes = 2.0 * double(Hkv) * double(row_bytes(name, d));
    std::printf("%-7s %4ld %7ld | %9.2f %9.3f | %7.2f\n", name, long(ps), long(t_len), median * 1e6,
                bytes / median / 1e9, median / first);
    std::fflush(stdout);
  }
  char line[200];
  std::snprintf(line, sizeof line, "append %s: one token at T = %ld takes %.2fx the time at T = %ld", name,
                long(a.append_ts.back()), last / first, long(a.append_ts.front()));
  sum.lines.push_back(line);
}

}  // namespace

void batch_section(const Args& a, ea::Kernel kernel, const BandwidthTable& bw, Summary& sum) {
  const std::vector<Idx> len = batch_lengths(a);
  std::string lens;
  Idx tokens = 0;
  std::vector<Idx> first;
  for (Idx l : len) {
    lens += (lens.empty() ? "" : ",") + std::to_string(l);
    first.push_back(tokens);
    tokens += l;
  }
  std::printf(
      "== 3. a batch of %ld sequences of lengths %s (%ld tokens), T_q = 1 each, H = %ld, H_kv = %ld, d = "
      "%ld\n"
      "   batched: attention_decode_into(cache, ids, %ld, Q [%ld x H d], cu_seqlens_q = 0,1,...,%ld, out, "
      "opt)\n"
      "   loop:    one attention_decode_into(cache, &ids[b], 1, ...) per sequence (x = loop / batched)\n"
      "   prompts appended interleaved in pieces of 1..32 tokens; bytes = 2 * (sum of lengths) * H_kv * d *\n"
      "   sizeof(storage); tok/s = %ld / time; frac against section 1 at the same bytes and threads;\n"
      "   max|diff| batched against loop ('!' above 1e-6, exit 1)\n",
      long(a.batch), lens.c_str(), long(tokens), long(a.heads), long(a.kv_heads), long(a.d), long(a.batch),
      long(a.batch), long(a.batch), long(a.batch));
  std::printf("%-7s %4s %3s | %8s %8s %7s %5s | %8s %7s %5s | %8s %6s | %9s\n", "storage", "page", "thr",
              "ms/step", "tok/s", "GB/s", "frac", "cold ms", "GB/s", "frac", "loop ms", "x", "max|diff|");
  std::fflush(stdout);
  const KeysValues kv(tokens, a.kv_heads * a.d, 5);
  for (const std::string& s : a.storages)
    with_storage(s,
                 [&](auto tag) { batch_rows<decltype(tag)>(a, kernel, bw, sum, s.c_str(), kv, len, first); });
  std::printf("\n");
}

void append_section(const Args& a, Summary& sum) {
  std::printf(
      "== 4. append of one token: cache.append(s, k, v), k and v 1 x (H_kv d) float, to a sequence of T\n"
      "   tokens, page size 16; median of %d runs of %ld appends each (truncated back to T between\n"
      "   runs, untimed); GB/s = 2 * H_kv * d * sizeof(storage) written / time; x T0 = time / time at\n"
      "   the first T (flat = does not grow with T)\n",
      a.reps, long(a.append_tokens));
  std::printf("%-7s %4s %7s | %9s %9s | %7s\n", "storage", "page", "T", "us/append", "GB/s", "x T0");
  std::fflush(stdout);
  const KeysValues kv(*std::max_element(a.append_ts.begin(), a.append_ts.end()), a.kv_heads * a.d, 8);
  for (const std::string& s : a.storages)
    with_storage(s, [&](auto tag) { append_rows<decltype(tag)>(a, sum, s.c_str(), kv); });
  std::printf("\n");
}

}  // namespace ea_decode_bench
