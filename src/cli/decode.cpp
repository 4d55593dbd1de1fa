// SPDX-License-Identifier: MIT
// eigen-attention decode: a synthetic generation loop on a paged KV cache (KVCache.hpp).
#include <EigenAttention/EigenAttention.hpp>
#include <EigenAttention/KVCache.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "../index.hpp"
#include "commands.hpp"
#include "util.hpp"

namespace EigenAttention {
namespace cli {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// The settings of a run, checked.
struct DecodeSettings {
  index_t sequences = 8, heads = 32, kv_heads = 8, dim = 128;
  index_t prompt_min = 512, prompt_max = 8192, generate = 256;
  index_t page_size = 16;
  int threads = 0;
  std::string storage = "float";
};

index_t positive(const std::string& option, const std::string& text, index_t max) {
  const long long v = parse_integer(option, text);
  if (v < 1 || v > max) {
    throw usage_error(option, "must be an integer from 1 to " + std::to_string(max) + ", got " + text);
  }
  return static_cast<index_t>(v);
}

DecodeSettings check(const DecodeArgs& args) {
  DecodeSettings s;
  if (!args.sequences.empty()) s.sequences = positive("--sequences", args.sequences, 1 << 16);
  if (!args.heads.empty()) s.heads = positive("--heads", args.heads, 1 << 12);
  if (!args.kv_heads.empty()) s.kv_heads = positive("--kv-heads", args.kv_heads, 1 << 12);
  if (!args.dim.empty()) s.dim = positive("--dim", args.dim, 1 << 16);
  if (!args.generate.empty()) s.generate = positive("--generate", args.generate, 1 << 24);
  if (!args.prompt.empty()) {
    const std::size_t comma = args.prompt.find(',');
    if (comma != std::string::npos && args.prompt.find(',', comma + 1) != std::string::npos) {
      throw usage_error("--prompt", "wants MIN,MAX or one length, got " + args.prompt);
    }
    if (comma == std::string::npos) {
      s.prompt_min = s.prompt_max = positive("--prompt", args.prompt, 1 << 24);
    } else {
      s.prompt_min = positive("--prompt", args.prompt.substr(0, comma), 1 << 24);
      s.prompt_max = positive("--prompt", args.prompt.substr(comma + 1), 1 << 24);
      if (s.prompt_min > s.prompt_max) {
        throw usage_error("--prompt", "MIN must not exceed MAX, got " + args.prompt);
      }
    }
  }
  if (!args.page_size.empty()) {
    const long long p = parse_integer("--page-size", args.page_size);
    if (p < 16 || p > 256 || (p & (p - 1)) != 0) {
      throw usage_error("--page-size", "must be a power of two from 16 to 256, got " + args.page_size);
    }
    s.page_size = static_cast<index_t>(p);
  }
  if (!args.threads.empty()) {
    const long long t = parse_integer("--threads", args.threads);
    if (t < 0 || t > 4096) throw usage_error("--threads", "must be from 0 to 4096, got " + args.threads);
    s.threads = static_cast<int>(t);
  }
  if (args.storage != "float" && args.storage != "bf16" && args.storage != "half" && args.storage != "int8" &&
      args.storage != "e4m3" && args.storage != "e5m2") {
    throw usage_error("--storage",
                      "must be float, bf16, half, int8, e4m3 or e5m2, got '" + args.storage + "'");
  }
  s.storage = args.storage;
  if (s.heads % s.kv_heads != 0) {
    throw usage_error("--kv-heads", "must divide --heads (" + std::to_string(s.heads) + "), got " +
                                        std::to_string(s.kv_heads));
  }
  return s;
}

// The decimals that show x (> 0) with 3 significant digits in fixed notation, at least 1: a rate
// stays readable when it is tiny (an emulator, a tiny cache) without an exponent.
int decimals_for(double x) {
  if (!(x > 0) || !std::isfinite(x)) return 1;
  return std::clamp(2 - int(std::floor(std::log10(x))), 1, 12);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Bytes of one token's key (or value) of one head in storage T: d elements, and for the quantized
/// types their float scale.
template <typename T>
double row_bytes(index_t d) {
  return double(d) * double(scalar_type_bytes(kScalarType<T>)) + (kIsQuantized<T> ? 4.0 : 0.0);
}

template <typename T>
int generate(const DecodeSettings& s) {
  const index_t B = s.sequences, Hkv = s.kv_heads, d = s.dim, H = s.heads, width = Hkv * d;
  const double token_bytes = double(Hkv) * row_bytes<T>(d);  // a token's keys (or values), every head
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());

  // Prompt lengths: deterministic pseudo-random in [prompt_min, prompt_max] (xorshift64).
  std::vector<index_t> prompt(static_cast<std::size_t>(B));
  std::uint64_t x = 0x2545F4914F6CDD1Dull;
  for (index_t& p : prompt) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p = s.prompt_min + index_t((x >> 11) % std::uint64_t(s.prompt_max - s.prompt_min + 1));
  }
  index_t capacity = 0, prompt_tokens = 0;
  for (const index_t p : prompt) {
    capacity += (p + s.generate + s.page_size - 1) / s.page_size * s.page_size;
    prompt_tokens += p;
  }
  // The pool is reserved at once but touched as it fills: refuse what this machine cannot hold.
  const double cache_bytes = 2.0 * double(capacity) * token_bytes;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0 && cache_bytes > 0.8 * double(pages) * double(page)) {
    char what[200];
    std::snprintf(what, sizeof what, "the cache needs %.1f GiB, more than 80%% of this machine's %.1f GiB",
                  cache_bytes / 1073741824.0, double(pages) * double(page) / 1073741824.0);
    throw Failure("decode", what);
  }

  PagedKVCache<T> cache(Hkv, d, d, s.page_size, capacity);
  Options opt;
  opt.threads = s.threads;
  const std::string storage_name = scalar_type_name(kScalarType<T>);
  std::printf(
      "eigen-attention decode: %td sequences, H = %td, H_kv = %td, d = %td, %s storage, page size %td, ",
      s.sequences, s.heads, s.kv_heads, s.dim, storage_name.c_str(), s.page_size);
  std::printf("%u thread%s (kernel %s)\n", s.threads == 0 ? hardware : unsigned(s.threads),
              (s.threads == 0 ? hardware : unsigned(s.threads)) == 1 ? "" : "s", kernel_name(auto_kernel()));
  std::fflush(stdout);

  // Prefill: each sequence's prompt keys and values (random), appended in one call each.
  SplitMix64 random(1);
  std::vector<SequenceId> ids;
  const Clock::time_point t_prefill = Clock::now();
  {
    RowMatrix<float> k, v;
    for (const index_t p : prompt) {
      k.resize(p, width);
      v.resize(p, width);
      random.fill(k);
      random.fill(v);
      ids.push_back(cache.create());
      cache.append(ids.back(), k, v);
    }
  }
  const double prefill = since(t_prefill);
  std::string lengths;
  for (const index_t p : prompt) lengths += (lengths.empty() ? "" : ", ") + std::to_string(p);
  std::printf("prompts:   %td tokens appended in %.3f s (lengths %s; random keys and values, no attention)\n",
              prompt_tokens, prefill, lengths.c_str());
  std::fflush(stdout);

  // Generation: per step, one new token per sequence (its key and value appended, then all
  // sequences decoded in one batched call).
  RowMatrix<float> q(B, H * d), out(B, H * d), k1(1, width), v1(1, width);
  std::vector<std::int64_t> cu(static_cast<std::size_t>(B + 1));
  for (index_t b = 0; b <= B; ++b) cu[static_cast<std::size_t>(b)] = b;
  std::vector<double> decode_times, append_times;
  double bytes_read = 0, decode_total = 0, checksum = 0;
  const Clock::time_point t_generate = Clock::now();
  for (index_t step = 0; step < s.generate; ++step) {
    const Clock::time_point t0 = Clock::now();
    for (const SequenceId id : ids) {
      random.fill(k1);
      random.fill(v1);
      cache.append(id, k1, v1);
    }
    const Clock::time_point t1 = Clock::now();
    random.fill(q);
    attention_decode_into(cache, ids.data(), B, HeadsView<const float>::side_by_side(q, d), cu.data(), out,
                          opt);
    const double t_decode = since(t1);
    append_times.push_back(std::chrono::duration<double>(t1 - t0).count());
    decode_times.push_back(t_decode);
    decode_total += t_decode;
    index_t keys = 0;
    for (const SequenceId id : ids) keys += cache.length(id);
    bytes_read += 2.0 * double(keys) * token_bytes;
    checksum += double(out(0, 0));
  }
  const double total = since(t_generate);
  if (!std::isfinite(checksum)) throw Failure("decode", "the outputs are not finite");
  const double tokens = double(B) * double(s.generate);
  const double tokens_per_s = tokens / total, gb_per_s = bytes_read / decode_total / 1e9;
  std::printf("generated: %.0f tokens (%td steps of %td) in %.3f s: %.*f tokens/s\n", tokens, s.generate,
              s.sequences, total, decimals_for(tokens_per_s), tokens_per_s);
  std::printf("decode:    %.3f ms/step (median), %.*f GB/s (%.1f MiB read per step on average)\n",
              median(decode_times) * 1e3, decimals_for(gb_per_s), gb_per_s,
              bytes_read / double(s.generate) / 1048576.0);
  std::printf("append:    %.3f ms/step (median, %td one-token appends)\n", median(append_times) * 1e3,
              s.sequences);
  std::printf(
      "tokens/s = generated tokens / the generation's time (appends and decodes); GB/s = the bytes the\n"
      "decodes must read (2 x cached tokens x H_kv x %.0f bytes%s, summed over the steps) / their time.\n",
      row_bytes<T>(d), kIsQuantized<T> ? " (d elements and a float scale)" : "");
  return 0;
}

}  // namespace

int decode_command(const DecodeArgs& args) {
  const DecodeSettings s = check(args);
  if (s.storage == "bf16") return generate<Eigen::bfloat16>(s);
  if (s.storage == "half") return generate<Eigen::half>(s);
  if (s.storage == "int8") return generate<Int8>(s);
  if (s.storage == "e4m3") return generate<Float8E4M3>(s);
  if (s.storage == "e5m2") return generate<Float8E5M2>(s);
  return generate<float>(s);
}

}  // namespace cli
}  // namespace EigenAttention
