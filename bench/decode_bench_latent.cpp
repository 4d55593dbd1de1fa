// SPDX-License-Identifier: MIT
// eigen_attention_decode_bench, section 5: MLA absorbed decode (DeepSeek V2/V3, Kimi) over a
// latent cache (PagedKVCache::latent: one KV head, d_k = 576 = [c; k_rope], d_v = 512 = c, each
// token stored once), H query heads, T_q = 1, one sequence of T_k tokens with its pages in random
// order; beside the same tokens in a cache that holds K and V apart (576 + 512 numbers a token),
// the same-run streaming read bandwidth of the latent bytes and the same-run FMA peak.
//
// A step reads T_k * 576 * sizeof(storage) bytes and computes 2 * H * T_k * (576 + 512) FLOPs
// (the logits and P V): 2 H (576 + 512) / (576 sizeof(storage)) FLOPs a byte, 15 for H = 16 in
// float. So the step is bound by the arithmetic, not the bandwidth, once H exceeds a few heads:
// its roofline is min(bandwidth, peak / intensity), and 'roof' is the step's fraction of it.
// Every latent output is compared with the K/V cache's bit for bit.
#include "decode_bench.hpp"

#include "fma_peak.hpp"

namespace ea_decode_bench {

namespace {

constexpr Idx kLatent = 576, kValue = 512;

template <typename T>
void latent_rows(const Args& a, const char* name, ea::Kernel kernel, BandwidthTable& bw, Summary& sum,
                 const std::vector<eabench::FmaPeak>& peaks) {
  const Idx t_k = a.t_k, page = 64, bytes = t_k * kLatent * static_cast<Idx>(sizeof(T));
  Mat<float> rows(t_k, kLatent);
  fill_uniform(rows.data(), rows.size(), 57);
  auto latent = ea::PagedKVCache<T>::latent(kLatent, kValue, page, t_k + page);
  ea::PagedKVCache<T> apart(1, kLatent, kValue, page, t_k + page);
  // Both pools' pages in random order (as shuffle_free_pages, whose one-token appends are K and V
  // of one width).
  const auto shuffle = [](auto& cache, auto&& append_one) {
    std::vector<ea::SequenceId> ids;
    for (Idx p = 0; p < cache.num_pages(); ++p) {
      ids.push_back(cache.create());
      append_one(cache, ids.back());
    }
    std::uint64_t seed = 5;
    for (Idx i = Idx(ids.size()) - 1; i > 0; --i) {
      seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
      std::swap(ids[std::size_t(i)], ids[std::size_t((seed >> 11) % std::uint64_t(i + 1))]);
    }
    for (const ea::SequenceId s : ids) cache.release(s);
  };
  const Mat<float> one = Mat<float>::Zero(1, kLatent);
  shuffle(latent, [&](auto& c, ea::SequenceId s) { c.append(s, one); });
  shuffle(apart, [&](auto& c, ea::SequenceId s) { c.append(s, one, one.leftCols(kValue)); });
  const auto s_latent = latent.create();
  const auto s_apart = apart.create();
  latent.append(s_latent, rows);
  apart.append(s_apart, rows, rows.leftCols(kValue));
  for (const int threads : a.threads) bw.measure(a, bytes, threads, std::string("latent, ") + name);
  for (const Idx H : a.latent_heads) {
    Mat<float> q(1, H * kLatent), out_latent, out_apart;
    fill_uniform(q.data(), q.size(), 91);
    for (std::size_t ti = 0; ti < a.threads.size(); ++ti) {
      const int threads = a.threads[ti];
      ea::Options opt;
      opt.kernel = kernel;
      opt.threads = threads;
      opt.scale = 1 / std::sqrt(192.0);
      const ea::SequenceId one_l[1] = {s_latent}, one_a[1] = {s_apart};
      const auto run_latent = [&] {
        ea::attention_decode_into(latent, one_l, 1, ea::HeadsView<const float>::side_by_side(q, kLatent),
                                  nullptr, out_latent, opt);
      };
      const auto run_apart = [&] {
        ea::attention_decode_into(apart, one_a, 1, ea::HeadsView<const float>::side_by_side(q, kLatent),
                                  nullptr, out_apart, opt);
      };
      const double t_l = measure(a.seconds, a.reps, run_latent).median;
      const double t_a = measure(a.seconds, a.reps, run_apart).median;
      const bool same =
          out_latent.rows() == out_apart.rows() && out_latent.cols() == out_apart.cols() &&
          std::memcmp(out_latent.data(), out_apart.data(), sizeof(float) * out_latent.size()) == 0;
      if (!same) ++sum.failed;
      const double gbs = double(bytes) / t_l / 1e9, band = bw.warm(bytes, threads);
      const double flops = 2.0 * double(H) * double(t_k) * double(kLatent + kValue);
      const double peak = sizeof(T) == 8 ? peaks[ti].double_gflops : peaks[ti].float_gflops;
      const double roof = std::min(band, peak / (flops / double(bytes)));  // GB/s the roofline allows
      std::printf("%-6s %4ld %3d | %8.3f %7.1f %5.2f | %8.1f %5.2f | %5.2f | %8.3f %5.2f | %s\n", name,
                  long(H), threads, t_l * 1e3, gbs, gbs / band, flops / t_l / 1e9, flops / t_l / 1e9 / peak,
                  gbs / roof, t_a * 1e3, t_a / t_l, same ? "yes" : "NO !");
      std::fflush(stdout);
      if (H == a.latent_heads.front() || H == a.latent_heads.back()) {
        sum.lines.push_back(std::string("latent ") + name + " H=" + std::to_string(H) + " " +
                            std::to_string(threads) + " thread(s): " + fmt(gbs / band, 2) +
                            " of the bandwidth, " + fmt(flops / t_l / 1e9 / peak, 2) + " of the FMA peak, " +
                            fmt(gbs / roof, 2) + " of the roofline; " + fmt(t_a / t_l, 2) +
                            "x the K/V cache's speed");
      }
    }
  }
}

}  // namespace

void latent_section(const Args& a, ea::Kernel kernel, Summary& sum) {
  std::printf(
      "== 5. MLA absorbed decode: a latent cache (d_k = 576, d_v = 512 = its first 512, one KV head), T_k = "
      "%ld, T_q = 1, pages of 64 in random order\n"
      "   bytes/step = T_k * 576 * sizeof; FLOPs/step = 2 H T_k (576 + 512); 'roof' = GB/s over "
      "min(bandwidth, "
      "peak / (FLOPs/byte)); 'K/V ms' = the same call on a cache holding K and V apart; 'same' = bitwise "
      "equal\n",
      long(a.t_k));
  std::vector<eabench::FmaPeak> peaks;
  for (const int t : a.threads) {
    peaks.push_back(eabench::measure_fma_peak(t, a.quick ? 0.05 : 1.0));
    std::printf("   FMA peak (%s), %d thread(s): %.1f GFLOP/s float, %.1f double\n",
                eabench::fma_unit().c_str(), t, peaks.back().float_gflops, peaks.back().double_gflops);
  }
  BandwidthTable bw;
  print_bandwidth_header(false);
  for (const std::string& s : a.storages) {
    if (s == "half") continue;  // as bf16 (2 bytes); the float and bf16 rows say it all
    std::printf("%-6s %4s %3s | %8s %7s %5s | %8s %5s | %5s | %8s %5s | %s\n", "store", "H", "thr", "ms/step",
                "GB/s", "frac", "GFLOP/s", "peak", "roof", "K/V ms", "x K/V", "same");
    if (s == "float") latent_rows<float>(a, "float", kernel, bw, sum, peaks);
    if (s == "bf16") latent_rows<Eigen::bfloat16>(a, "bf16", kernel, bw, sum, peaks);
  }
  std::printf("\n");
}

}  // namespace ea_decode_bench
