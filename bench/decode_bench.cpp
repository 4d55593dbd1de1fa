// SPDX-License-Identifier: MIT
// eigen_attention_decode_bench: how close decode attention over a paged KV cache (KVCache.hpp)
// comes to the machine's memory bandwidth, the one limit of a decode step.
//
// In one run, side by side (medians of >= 5 runs each, after warm-up calls):
//   1. bandwidth  the streaming read bandwidth of a float buffer of the bytes a decode step reads,
//                 on 1 and 2 threads: the yardstick of every fraction below;
//   2. step       one decode step (T_q = 1) of one sequence of T_k = 32768 keys, H = 32, H_kv = 8,
//                 d = 128: a PagedKVCache with its pages in random order, per page size (16 .. 256),
//                 storage (float, bf16, half; int8, e4m3, e5m2 on request) and threads, against the same keys
//                 in one contiguous buffer (PagedKVView, block table 0, 1, 2, ...) and against
//                 attention_heads_into with T_q = 1 (today's way without a cache);
//   3. batch      8 sequences of mixed lengths (512 .. 8192) in one batched call, against one call
//                 per sequence;
//   4. append     the time of appending one token at T = 1k, 8k, 32k;
//   5. latent     MLA absorbed decode over a latent cache (d_k = 576, d_v = 512, one KV head) with
//                 16 .. 128 query heads, against the bandwidth, the FMA peak and a K/V cache;
//   6. tree       speculative decoding's verify call (4, 8, 16 drafts, a tree mask) against the
//                 causal call and one-token calls;
//   7. quantized  the error of int8, e4m3 and e5m2 caches (and bf16, half) on realistic keys and
//                 values against the float cache (not timed).
// bytes/step = 2 * T_k * H_kv * (d * sizeof(storage) + 4 for a quantized row's scale); GB/s = bytes / time;
// the fraction is the decode's GB/s over the bandwidth of the same bytes on the same number of threads, warm
// (calls back to back) and cold (the caches evicted before each call). Every output is checked against the
// contiguous float one; the run exits 1 when one is off. Never run as a test; --quick is a quick "does it
// run".
//
// The sections live in decode_bench_*.cpp; decode_bench.hpp lists them.
#include "decode_bench.hpp"

namespace ea_decode_bench {
namespace {

void print_summary(const Args& a, const Summary& sum) {
  std::printf("== summary\n");
  const auto step = [&](const std::string& s, const std::string& k, Idx p, int t) {
    const auto it = sum.step.find({s, k, p, t});
    return it == sum.step.end() ? kNaN : it->second;
  };
  if (a.s_step) {
    // Paged against contiguous: speed ratios (contiguous time / paged time) against both
    // contiguous layouts, and the page sizes within 5% of (at >= 0.95x the speed of) both.
    for (const std::string& s : a.storages) {
      for (const int t : a.threads) {
        std::string nhd, hnd, within;
        for (const Idx p : a.page_sizes) {
          const double paged = step(s, "paged", p, t);
          const double xn = step(s, "contig NHD", 256, t) / paged, xh = step(s, "contig HND", 256, t) / paged;
          nhd += " " + fmt(xn, 2);
          hnd += " " + fmt(xh, 2);
          if (xn >= 0.95 && xh >= 0.95) within += " " + std::to_string(p);
        }
        std::printf("  %-5s %d thread(s), page sizes", s.c_str(), t);
        for (const Idx p : a.page_sizes) std::printf(" %ld", long(p));
        std::printf(": paged speed / contiguous NHD%s, / contiguous HND%s; within 5%% of both:%s\n",
                    nhd.c_str(), hnd.c_str(), within.empty() ? " none" : within.c_str());
      }
    }
    for (const std::string& s : a.storages) {
      if (s == "float") continue;
      for (const int t : a.threads) {
        std::string ratios;
        double lo = std::numeric_limits<double>::infinity();
        for (const Idx p : a.page_sizes) {
          const double x = step("float", "paged", p, t) / step(s, "paged", p, t);
          lo = std::min(lo, x);
          ratios += " " + fmt(x, 2);
        }
        const double xn = step("float", "contig NHD", 256, t) / step(s, "contig NHD", 256, t);
        const double xh = step("float", "contig HND", 256, t) / step(s, "contig HND", 256, t);
        std::printf(
            "  %-5s %d thread(s): tokens/s over float, paged (pages as above)%s, contig NHD %s, HND %s; "
            "paged >= 1.7x: %s\n",
            s.c_str(), t, ratios.c_str(), fmt(xn, 2).c_str(), fmt(xh, 2).c_str(), lo >= 1.7 ? "yes" : "no");
      }
    }
    for (const int t : a.threads) {
      const double peer = step("float", "heads BTHD", 0, t);
      const Idx p = a.page_sizes.front();
      const double paged = step("float", "paged", p, t);
      if (std::isfinite(peer) && std::isfinite(paged)) {
        std::printf(
            "  float %d thread(s): paged decode (page %ld) takes %.2fx the time of attention_heads_into with "
            "T_q "
            "= 1\n",
            t, long(p), paged / peer);
      }
    }
  }
  for (const std::string& line : sum.lines) std::printf("  %s\n", line.c_str());
}

}  // namespace
}  // namespace ea_decode_bench

using namespace ea_decode_bench;

int main(int argc, char** argv) {
  try {
    const Args a = parse_args(argc, argv);
    const ea::Kernel kernel = bench::parse_kernel(a.kernel);
    print_machine(a, kernel);

    // Section 1: the bandwidth of every byte size the other sections read, on each thread count.
    std::vector<std::pair<Idx, std::string>> sizes;
    Idx batch_tokens = 0;
    for (Idx l : batch_lengths(a)) batch_tokens += l;
    for (const std::string& s : a.storages) {
      const Idx b = row_bytes(s, a.d);
      const std::string unit = s == "float" ? "float" : quantized(s) ? "8-bit + scales" : "bf16/half";
      if (a.s_step || a.s_bandwidth) sizes.emplace_back(2 * a.t_k * a.kv_heads * b, "step, " + unit);
      if (a.s_batch) sizes.emplace_back(2 * batch_tokens * a.kv_heads * b, "batch, " + unit);
    }
    BandwidthTable bw;
    if (!sizes.empty()) {
      print_bandwidth_header(true);
      std::vector<Idx> done;
      for (const auto& [bytes, label] : sizes) {
        if (std::find(done.begin(), done.end(), bytes) != done.end()) continue;
        done.push_back(bytes);
        for (const int t : a.threads) bw.measure(a, bytes, t, label);
      }
      std::printf("\n");
    }

    Summary sum;
    if (a.s_step) step_section(a, kernel, bw, sum);
    if (a.s_batch) batch_section(a, kernel, bw, sum);
    if (a.s_append) append_section(a, sum);
    if (a.s_latent) latent_section(a, kernel, sum);
    if (a.s_tree) tree_section(a, kernel, sum);
    if (a.s_quantized) quantized_section(a, kernel, sum);

    // The bandwidth again, to show how steady the machine was.
    if (!sizes.empty()) {
      BandwidthTable again;
      std::printf("== bandwidth again at the end (a drift against section 1 = a noisy machine)\n");
      print_bandwidth_header(false);
      for (const int t : a.threads) again.measure(a, sizes.front().first, t, sizes.front().second);
      std::printf("\n");
    }
    print_summary(a, sum);
    std::printf("load at end: %s\n", bench::load_average().c_str());
    if (sum.failed > 0) {
      std::printf("FAILED: %d result check(s) above tolerance (marked '!')\n", sum.failed);
      return 1;
    }
    std::printf("all result checks passed\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eigen_attention_decode_bench: %s\n", e.what());
    return 1;
  }
}
