// SPDX-License-Identifier: MIT
// eigen_attention_decode_bench: the command line (--help lists it), the header (machine,
// shapes, formulas), the buffers and the cache eviction.
#include "decode_bench.hpp"

#include <fstream>
#include <thread>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#endif

// For the command-line helpers of harness.hpp.
const char* const bench::kProgram = "eigen_attention_decode_bench";
const char* const bench::kUsage =
    "usage: eigen_attention_decode_bench [options]\n"
    "  --quick              T_k = 2048, batch of 4 sequences of 64..512 tokens, page sizes 16,256,\n"
    "                       appends at T = 256,2048, 5 runs, --seconds 0.1: a check that it runs\n"
    "  --sections LIST      of bandwidth,step,batch,append,latent,tree,quantized (default all; step and\n"
    "                       batch need the bandwidth of their byte sizes and measure it when it\n"
    "                       is left out)\n"
    "  --t-k N              keys of the single sequence (default 32768)\n"
    "  --shape H,H_kv,d     query heads, KV heads, head dim (default 32,8,128)\n"
    "  --page-sizes LIST    page sizes of the single sequence (default 16,32,64,128,256)\n"
    "  --storage LIST       float, bf16, half, int8, e4m3, e5m2 (default float, bf16, half)\n"
    "  --threads LIST       Options::threads values, and the bandwidth's threads (default 1,2)\n"
    "  --batch N            sequences of the batch (default 8)\n"
    "  --batch-range MIN,MAX  their lengths, drawn deterministically (default 512,8192)\n"
    "  --batch-page-sizes LIST  (default 16,256)\n"
    "  --append-t LIST      lengths at which one-token appends are timed (default 1024,8192,32768)\n"
    "  --latent-heads LIST  query heads of the MLA section (default 16,32,64,128)\n"
    "  --kernel K           auto|avx512|avx2|portable|reference (default auto)\n"
    "  --reps N             measured runs per row, the median printed (default 7, at least 5)\n"
    "  --seconds S          a warm run lasts about S / 5 (default 0.5)\n"
    "  --no-cold            skip the cold columns (single calls after evicting the caches)\n"
    "  --help\n";

namespace ea_decode_bench {

namespace {

std::vector<Idx> parse_tuple(const std::string& s, const char* what, std::size_t n) {
  const std::vector<Idx> v = parse_ints<Idx>(s, what, 1, Idx(1) << 30);
  if (v.size() != n) usage_error(std::string(what) + " needs " + std::to_string(n) + " values");
  return v;
}

std::vector<Idx> parse_page_sizes(const std::string& s) {
  const std::vector<Idx> v = parse_ints<Idx>(s, "page size", 16, 256);
  for (Idx p : v)
    if ((p & (p - 1)) != 0)
      usage_error("page sizes are powers of two from 16 to 256, not " + std::to_string(p));
  return v;
}

}  // namespace

Args parse_args(int argc, char** argv) {
  Args a;
  bool t_given = false, pages_given = false, batch_given = false, range_given = false, bpages_given = false,
       append_given = false, reps_given = false, seconds_given = false;
  bench::ArgReader args(argc, argv);
  while (args.next()) {
    const std::string& arg = args.name();
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--quick") {
      a.quick = true;
    } else if (arg == "--sections") {
      bench::parse_sections(args.value(), {{"bandwidth", &a.s_bandwidth},
                                           {"step", &a.s_step},
                                           {"batch", &a.s_batch},
                                           {"append", &a.s_append},
                                           {"latent", &a.s_latent},
                                           {"tree", &a.s_tree},
                                           {"quantized", &a.s_quantized}});
    } else if (arg == "--latent-heads") {
      a.latent_heads = parse_ints<Idx>(args.value(), "latent heads", 1, 1024);
    } else if (arg == "--t-k") {
      a.t_k = static_cast<Idx>(parse_int(args.value(), "T_k"));
      if (a.t_k < 1 || a.t_k > (Idx(1) << 24)) usage_error("--t-k out of range");
      t_given = true;
    } else if (arg == "--shape") {
      const std::vector<Idx> v = parse_tuple(args.value(), "shape", 3);
      if (v[0] % v[1] != 0) usage_error("--shape: H must be a multiple of H_kv");
      a.heads = v[0], a.kv_heads = v[1], a.d = v[2];
    } else if (arg == "--page-sizes") {
      a.page_sizes = parse_page_sizes(args.value());
      pages_given = true;
    } else if (arg == "--storage") {
      a.storages.clear();
      for (const std::string& s : split(args.value())) {
        if (s != "float" && s != "bf16" && s != "half" && !quantized(s))
          usage_error("unknown storage '" + s + "'");
        a.storages.push_back(s);
      }
      // float first: the other storages' rows compare with it.
      std::stable_sort(a.storages.begin(), a.storages.end(), [](const std::string& x, const std::string& y) {
        return x == "float" && y != "float";
      });
    } else if (arg == "--threads") {
      a.threads = parse_ints<int>(args.value(), "threads", 0, 4096);
      for (int& t : a.threads)
        if (t == 0) t = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    } else if (arg == "--batch") {
      a.batch = static_cast<Idx>(parse_int(args.value(), "batch"));
      if (a.batch < 1 || a.batch > 4096) usage_error("--batch out of range");
      batch_given = true;
    } else if (arg == "--batch-range") {
      const std::vector<Idx> v = parse_tuple(args.value(), "batch-range", 2);
      if (v[0] > v[1]) usage_error("--batch-range: MIN > MAX");
      a.batch_min = v[0], a.batch_max = v[1];
      range_given = true;
    } else if (arg == "--batch-page-sizes") {
      a.batch_page_sizes = parse_page_sizes(args.value());
      bpages_given = true;
    } else if (arg == "--append-t") {
      a.append_ts = parse_ints<Idx>(args.value(), "append T", 1, Idx(1) << 24);
      append_given = true;
    } else if (arg == "--kernel") {
      a.kernel = args.value();
    } else if (arg == "--reps") {
      a.reps = bench::parse_reps(args.value());
      if (a.reps < 5) usage_error("--reps must be >= 5 (the median of at least five runs)");
      reps_given = true;
    } else if (arg == "--seconds") {
      a.seconds = bench::parse_seconds(args.value());
      seconds_given = true;
    } else if (arg == "--no-cold") {
      a.cold = false;
    } else {
      usage_error("unknown option '" + std::string(args.given()) + "'");
    }
  }
  if (a.quick) {  // explicit options win
    if (!t_given) a.t_k = 2048;
    if (!pages_given) a.page_sizes = {16, 256};
    if (!batch_given) a.batch = 4;
    if (!range_given) a.batch_min = 64, a.batch_max = 512;
    if (!bpages_given) a.batch_page_sizes = {16, 256};
    if (!append_given) a.append_ts = {256, 2048};
    if (!reps_given) a.reps = 5;
    if (!seconds_given) a.seconds = 0.1;
  }
  return a;
}

std::vector<Idx> batch_lengths(const Args& a) {
  std::uint64_t s = 0x2545F4914F6CDD1Dull;
  std::vector<Idx> out;
  for (Idx b = 0; b < a.batch; ++b) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    out.push_back(a.batch_min + Idx((s >> 11) % std::uint64_t(a.batch_max - a.batch_min + 1)));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Buffers and inputs

void* huge_alloc(std::size_t bytes) {
  constexpr std::size_t kHuge = std::size_t(2) << 20;
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, rounded);
  if (p == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  madvise(p, rounded, MADV_HUGEPAGE);  // a hint, as the cache's pool gives it
#endif
  return p;
}

void fill_uniform(float* p, Idx n, unsigned seed) {
  std::uint64_t s = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (Idx i = 0; i < n; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    p[i] = float(double(s >> 11) * (2.0 / 9007199254740992.0) - 1.0);
  }
}

// ---------------------------------------------------------------------------------------------
// Caches

namespace {

// The data (or unified) caches of cpu0 from /sys: (level, bytes) each.
std::vector<std::pair<int, std::size_t>> data_caches() {
  std::vector<std::pair<int, std::size_t>> caches;
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream size_file(dir + "size"), type_file(dir + "type"), level_file(dir + "level");
    std::string size, type;
    int level = 0;
    if (!(size_file >> size) || !(type_file >> type) || !(level_file >> level) || type == "Instruction")
      continue;
    std::size_t v = std::strtoull(size.c_str(), nullptr, 10);
    if (!size.empty() && (size.back() == 'K' || size.back() == 'k')) v <<= 10;
    if (!size.empty() && (size.back() == 'M' || size.back() == 'm')) v <<= 20;
    caches.emplace_back(level, v);
  }
  return caches;
}

}  // namespace

std::size_t llc_bytes() {
  std::size_t best = 0;
  for (const auto& [level, bytes] : data_caches()) best = std::max(best, bytes);
  return best;
}

std::size_t l2_bytes() {
  for (const auto& [level, bytes] : data_caches())
    if (level == 2) return bytes;
  return 0;
}

namespace {

Buffer<float>& evict_buffer() {
  static Buffer<float> buf([] {
    const std::size_t bytes = std::max<std::size_t>(2 * llc_bytes(), std::size_t(64) << 20);
    Buffer<float> b(static_cast<Idx>(bytes / sizeof(float)));
    fill_uniform(b.data(), b.size(), 99);
    return b;
  }());
  return buf;
}

}  // namespace

std::size_t evict_bytes() { return sizeof(float) * static_cast<std::size_t>(evict_buffer().size()); }

void evict_caches() {
  Buffer<float>& b = evict_buffer();
  g_sink = g_sink + stream_sum(b.data(), b.size(), 1, false);
}

// ---------------------------------------------------------------------------------------------
// The header

void print_machine(const Args& a, ea::Kernel kernel) {
  bench::print_machine_common("EigenAttention decode benchmark", {kernel});
  const Idx G = a.heads / a.kv_heads;
  const double f32 = 2.0 * double(a.t_k) * double(a.kv_heads) * double(a.d) * 4;
  const std::size_t llc = llc_bytes();
  std::printf("  llc       %s (largest data cache of cpu0, /sys); float K+V of the sequence = %.1f MiB%s\n",
              llc > 0 ? (fmt(double(llc) / kMiB, 0) + " MiB").c_str() : "unknown", f32 / kMiB,
              llc > 0 && f32 <= double(llc) ? ": fits in it, so warm rows may read from the cache" : "");
  std::printf(
      "  shape     H = %ld query heads, H_kv = %ld KV heads (GQA %ld), d = %ld, T_q = 1 token per sequence;\n"
      "            single sequence T_k = %ld; storage %s\n",
      long(a.heads), long(a.kv_heads), long(G), long(a.d), long(a.t_k),
      [&] {
        std::string s;
        for (const std::string& x : a.storages) s += (s.empty() ? "" : ", ") + x;
        return s;
      }()
          .c_str());
  std::printf(
      "  formulas  bytes/step = 2 * T_k * H_kv * d * sizeof(storage)   (K and V read once: %.1f MiB float,\n"
      "                         %.1f MiB bf16/half at T_k = %ld; a batch: the sum over its sequences)\n"
      "            flops/step = 4 * H * T_k * d   (Q K^T and P V, 2 T_k d each per query head; softmax\n"
      "                         not counted: %.3f GFLOP at T_k = %ld)\n"
      "            intensity  = flops / bytes = 2 * (H / H_kv) / sizeof(storage) = %.1f FLOP/B float,\n"
      "                         %.1f FLOP/B bf16/half: far below any CPU's FLOP/B, so a step is bound by\n"
      "                         memory bandwidth, and GB/s = bytes / time / 1e9 is the figure of merit\n",
      f32 / kMiB, f32 / 2 / kMiB, long(a.t_k), 4.0 * double(a.heads) * double(a.t_k) * double(a.d) / 1e9,
      long(a.t_k), 2.0 * double(G) / 4, 2.0 * double(G) / 2);
  std::printf(
      "  timing    warm: after 1-2 warm-up calls, median of %d runs, each of enough back-to-back calls to\n"
      "            last ~%.2g s (data that fits in the last-level cache may come from it);\n",
      a.reps, a.seconds / 5);
  if (a.cold) {
    std::printf(
        "            cold: median of %d single calls, each after a %.0f MiB read that evicts the caches\n"
        "            (a real step reads this layer's K/V after the other layers' weights and caches)\n",
        a.reps, double(std::max<std::size_t>(2 * llc, std::size_t(64) << 20)) / kMiB);
  } else {
    std::printf("            cold: not measured (--no-cold)\n");
  }
  std::printf(
      "  fraction  decode GB/s / read bandwidth of a buffer of the same bytes (section 1), measured in this\n"
      "            run with the same number of threads (1-thread decode / 1-thread bandwidth, ...), warm\n"
      "            against warm, cold against cold\n\n");
  std::fflush(stdout);
}

}  // namespace ea_decode_bench
