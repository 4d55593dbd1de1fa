// SPDX-License-Identifier: MIT
// eigen_attention_decode_bench, section 2: one decode step (T_q = 1) of one long sequence, per
// storage type, page size and thread count: attention_decode_into on a PagedKVCache whose pages
// lie in random order in the pool, beside the same keys in one contiguous buffer seen through a
// PagedKVView (block table 0, 1, 2, ...; NHD and HND pages), and beside today's way
// without the cache: attention_heads_into with T_q = 1 on [1, T_k, H_kv, d] (BTHD) keys and values.
#include "decode_bench.hpp"

#include <EigenAttention/MultiHead.hpp>

#include <memory>
#include <tuple>
#include <type_traits>

namespace ea_decode_bench {

namespace {

constexpr Idx kContigPage = 256;  // page size of the contiguous views (any would do: no gather)

struct StepCtx {
  const Args& a;
  ea::Kernel kernel;
  const BandwidthTable& bw;
  Summary& sum;
  const KeysValues& kv;
  Mat<float> q;
  Mat<float> float_ref;    // the float contiguous output (1st thread count): what the others match
  std::string cache_keys;  // "contig NHD" or "contig HND": the contiguous row in the cache's layout
};

// The layout of a PagedKVCache's pages, as the library reports it: "NHD" ([pages, page_size,
// H_kv, d]), "HND" ([pages, H_kv, page_size, d]) or "other".
std::string cache_layout(Idx kv_heads, Idx d) {
  const ea::PagedKVCache<float> probe(kv_heads, d, d, 16, 16);
  const ea::abi::PagedKV l = ea::abi::kv_pool_layout(probe.pool());
  if (l.k_token_stride == kv_heads * d && l.k_head_stride == d) return "NHD";
  if (l.k_token_stride == d && l.k_head_stride == 16 * d) return "HND";
  return "other";
}

ea::Options options(const StepCtx& c, int threads) {
  ea::Options opt;
  opt.kernel = c.kernel;
  opt.threads = threads;
  return opt;
}

void print_step_header() {
  std::printf("%-7s %-11s %4s %3s | %8s %8s %7s %5s | %8s %7s %5s | %6s %6s | %9s\n", "storage", "keys",
              "page", "thr", "ms/step", "tok/s", "GB/s", "frac", "cold ms", "GB/s", "frac", "x float",
              "x cont", "max|diff|");
  std::fflush(stdout);
}

// One row: `call` timed warm (and cold), its output `out` checked against `ref` (tolerance
// `tol`; no check when ref is null).
template <class Call>
double step_row(StepCtx& c, const char* storage, const std::string& keys, Idx page, int threads, Idx bytes,
                Call&& call, const Mat<float>& out, const Mat<float>* ref, double tol) {
  const Args& a = c.a;
  const Timing warm = measure(a.seconds, a.reps, call);
  const double cold = a.cold ? measure_cold(a.reps, call) : kNaN;
  const double gbs = double(bytes) / warm.median / 1e9, cold_gbs = double(bytes) / cold / 1e9;
  const double frac = gbs / c.bw.warm(bytes, threads), cold_frac = cold_gbs / c.bw.cold(bytes, threads);
  const auto find = [&](const std::string& s, const std::string& k, Idx p) {
    const auto it = c.sum.step.find({s, k, p, threads});
    return it == c.sum.step.end() ? kNaN : it->second;
  };
  // Speed against float storage with the same keys and threads, and against the contiguous view
  // of the same storage in the cache's layout.
  const double x_float = find("float", keys, page) / warm.median;
  const double x_contig =
      keys != c.cache_keys ? find(storage, c.cache_keys, kContigPage) / warm.median : kNaN;
  double diff = kNaN;
  std::string diff_cell = "-";
  if (ref != nullptr) {
    diff = max_diff(out.data(), ref->data(), out.size());
    const bool bad = !(diff <= tol);
    if (bad) ++c.sum.failed;
    diff_cell = fmt_e(diff) + (bad ? "!" : "");
  }
  std::printf("%-7s %-11s %4s %3d | %8.3f %8.1f %7.2f %5.2f | %8s %7s %5s | %6s %6s | %9s\n", storage,
              keys.c_str(), page > 0 ? std::to_string(page).c_str() : "-", threads, warm.median * 1e3,
              1 / warm.median, gbs, frac, fmt(cold * 1e3, 3).c_str(), fmt(cold_gbs, 2).c_str(),
              fmt(cold_frac, 2).c_str(), fmt(x_float, 2).c_str(), fmt(x_contig, 2).c_str(),
              diff_cell.c_str());
  std::fflush(stdout);
  c.sum.step[{storage, keys, page, threads}] = warm.median;
  return warm.median;
}

// The keys and values of c.kv, converted to T, in pages of kContigPage tokens laid out NHD
// [pages, page, H_kv, d] or HND [pages, H_kv, page, d]; the last page padded with zeros.
template <typename T>
Buffer<T> contiguous_pages(const Mat<float>& src, Idx kv_heads, Idx d, bool hnd) {
  const Idx tokens = src.rows(), pages = (tokens + kContigPage - 1) / kContigPage;
  Buffer<T> buf(pages * kContigPage * kv_heads * d);
  for (Idx n = 0; n < tokens; ++n) {
    const Idx p = n / kContigPage, slot = n % kContigPage;
    for (Idx h = 0; h < kv_heads; ++h) {
      T* dst = buf.data() + (hnd ? ((p * kv_heads + h) * kContigPage + slot) * d
                                 : ((p * kContigPage + slot) * kv_heads + h) * d);
      for (Idx e = 0; e < d; ++e) dst[e] = T(src(n, h * d + e));
    }
  }
  return buf;
}

// The keys (or values) of `flat`, a quantized cache holding one sequence in its pages 0, 1, 2, ...
// (a fresh cache's order), and their scales, copied into buffers laid out NHD or HND.
template <typename T>
std::pair<Buffer<T>, Buffer<float>> quantized_pages(const ea::PagedKVCache<T>& flat, bool values, bool hnd) {
  const Idx P = flat.page_size(), H = flat.kv_heads(), d = values ? flat.d_v() : flat.d_k(),
            pages = flat.num_pages();
  Buffer<T> buf(pages * P * H * d);
  Buffer<float> scales(pages * P * H);
  const T* src = values ? flat.value_pages() : flat.key_pages();
  const float* src_scales = values ? flat.value_scales() : flat.key_scales();
  for (Idx p = 0; p < pages; ++p)
    for (Idx h = 0; h < H; ++h)
      for (Idx slot = 0; slot < P; ++slot) {
        const Idx from = (p * H + h) * P + slot, to = hnd ? from : (p * P + slot) * H + h;
        scales.data()[to] = src_scales[from];
        std::memcpy(static_cast<void*>(buf.data() + to * d), src + from * d,
                    static_cast<std::size_t>(d) * sizeof(T));
      }
  return {std::move(buf), std::move(scales)};
}

template <typename T>
void storage_rows(StepCtx& c) {
  const Args& a = c.a;
  const char* name = storage_name<T>();
  const Idx Hkv = a.kv_heads, d = a.d, Tk = a.t_k, H = a.heads;
  const Idx bytes = 2 * Tk * Hkv * row_bytes(name, d);
  Mat<float> out(1, H * d), contig_ref;
  const auto q = ea::HeadsView<const float>::side_by_side(c.q, d);  // [1, H, 1, d]

  // Contiguous views: one buffer, block table 0, 1, 2, ...
  {
    const Idx pages = (Tk + kContigPage - 1) / kContigPage;
    std::vector<std::int32_t> table(static_cast<std::size_t>(pages));
    for (Idx p = 0; p < pages; ++p) table[static_cast<std::size_t>(p)] = static_cast<std::int32_t>(p);
    const std::int64_t length[1] = {Tk};
    const bool hnd_first = c.cache_keys == "contig HND";
    // A quantized storage's elements and scales: a fresh cache's (its pages in order), copied.
    std::unique_ptr<ea::PagedKVCache<T>> flat;
    if constexpr (ea::kIsQuantized<T>) {
      flat = std::make_unique<ea::PagedKVCache<T>>(Hkv, d, d, kContigPage, Tk);
      flat->append(flat->create(), c.kv.k, c.kv.v);
    }
    for (const bool hnd : {hnd_first, !hnd_first}) {
      Buffer<T> kb, vb;
      Buffer<float> ks, vs;
      if constexpr (ea::kIsQuantized<T>) {
        std::tie(kb, ks) = quantized_pages(*flat, false, hnd);
        std::tie(vb, vs) = quantized_pages(*flat, true, hnd);
      } else {
        kb = contiguous_pages<T>(c.kv.k, Hkv, d, hnd);
        vb = contiguous_pages<T>(c.kv.v, Hkv, d, hnd);
      }
      const auto view = (hnd ? ea::PagedKVView<T>::hnd(kb.data(), vb.data(), pages, kContigPage, Hkv, d, d,
                                                       table.data(), pages, length, 1)
                             : ea::PagedKVView<T>::nhd(kb.data(), vb.data(), pages, kContigPage, Hkv, d, d,
                                                       table.data(), pages, length, 1))
                            .with_scales(ea::kIsQuantized<T> ? ks.data() : nullptr,
                                         ea::kIsQuantized<T> ? vs.data() : nullptr);
      for (const int threads : a.threads) {
        const ea::Options opt = options(c, threads);
        const auto call = [&] {
          ea::attention_decode_into(view, q, nullptr, out, opt);
          g_sink = g_sink + double(out(0, 0));
        };
        call();
        // The first contiguous output is the reference of its storage (and of everything, for
        // float); the others must match it (bitwise, as the cuts of the keys are the same).
        const bool first = hnd == hnd_first && threads == a.threads.front();
        if (first) contig_ref = out;
        const Mat<float>* ref = first && std::is_same_v<T, float> ? nullptr : &contig_ref;
        step_row(c, name, hnd ? "contig HND" : "contig NHD", kContigPage, threads, bytes, call, out, ref,
                 1e-6);
        if (first && std::is_same_v<T, float>) c.float_ref = out;
      }
    }
  }
  if (!std::is_same_v<T, float> && c.float_ref.size() == out.size()) {
    std::printf("%-7s (%s rounding of K and V: max|diff| to the float output %s)\n", name, name,
                fmt_e(max_diff(contig_ref.data(), c.float_ref.data(), out.size())).c_str());
  }

  // The paged cache, pages in random order.
  for (const Idx ps : a.page_sizes) {
    ea::PagedKVCache<T> cache(Hkv, d, d, ps, Tk);
    shuffle_free_pages(cache, 0x5DEECE66Dull + std::uint64_t(ps));
    const ea::SequenceId s = cache.create();
    const Clock::time_point t0 = Clock::now();
    cache.append(s, c.kv.k, c.kv.v);
    const double fill = seconds_since(t0);
    const auto [adjacent, pairs] = adjacent_pages(cache, s);
    std::printf(
        "%-7s (page %ld: %ld pages, %ld of %ld consecutive pairs adjacent in memory; prompt append %.3f s = "
        "%.2f GB/s written)\n",
        name, long(ps), long(cache.pages(s).size()), long(adjacent), long(pairs), fill,
        double(bytes) / fill / 1e9);
    const std::int64_t cu[2] = {0, 1};
    for (const int threads : a.threads) {
      const ea::Options opt = options(c, threads);
      const auto call = [&] {
        ea::attention_decode_into(cache, &s, 1, q, cu, out, opt);
        g_sink = g_sink + double(out(0, 0));
      };
      step_row(c, name, "paged", ps, threads, bytes, call, out, &contig_ref, 1e-6);
    }
  }
}

// The arithmetic's ceiling: the same step on a sequence short enough (n tokens, a power of two)
// that its keys and values stay in the L2 cache between back-to-back calls (at most 3/4 of it),
// so that memory does not bound it. frac = its GB/s over section 1's read bandwidth of the full
// step (same threads): below 0.9, no decode from memory can reach 0.9 of that bandwidth with
// this kernel's arithmetic, whatever its memory access.
template <typename T>
void in_cache_rows(StepCtx& c, const char* name) {
  const Args& a = c.a;
  const Idx Hkv = a.kv_heads, d = a.d;
  const Idx per_token = 2 * Hkv * row_bytes(name, d), full = a.t_k * per_token;
  const Idx l2 = static_cast<Idx>(l2_bytes());
  Idx n = 16;
  while (2 * n <= a.t_k && 2 * n * per_token <= l2 / 4 * 3) n *= 2;
  if (l2 == 0 || n * per_token > l2 / 4 * 3) {
    std::printf("%-7s (in L2: not measured, the L2 size is unknown or holds fewer than 16 tokens)\n", name);
    return;
  }
  ea::PagedKVCache<T> cache(Hkv, d, d, 16, n);
  const ea::SequenceId s = cache.create();
  cache.append(s, c.kv.k.topRows(n), c.kv.v.topRows(n));
  Mat<float> out(1, a.heads * d);
  const auto q = ea::HeadsView<const float>::side_by_side(c.q, d);
  const std::int64_t cu[2] = {0, 1};
  for (const int threads : a.threads) {
    const ea::Options opt = options(c, threads);
    const Timing warm = measure(a.seconds, a.reps, [&] {
      ea::attention_decode_into(cache, &s, 1, q, cu, out, opt);
      g_sink = g_sink + double(out(0, 0));
    });
    const double gbs = double(n * per_token) / warm.median / 1e9, frac = gbs / c.bw.warm(full, threads);
    std::printf("%-7s %-11s %4d %3d | %8.3f %8.1f %7.2f %5.2f | %8s %7s %5s | %6s %6s | %9s\n", name,
                ("in L2 " + std::to_string(n)).c_str(), 16, threads, warm.median * 1e3, 1 / warm.median, gbs,
                frac, "-", "-", "-", "-", "-", "-");
    c.sum.lines.push_back(
        std::string(name) + " " + std::to_string(threads) +
        " thread(s): the arithmetic's ceiling (K and V of " + std::to_string(n) + " tokens in L2) " +
        fmt(gbs, 2) + " GB/s = " + fmt(frac, 2) + " of the read bandwidth" +
        (frac < 0.9 ? ": under 0.9, the step is bound by its arithmetic, not by memory" : ""));
  }
  std::fflush(stdout);
}

void heads_rows(StepCtx& c) {
  const Args& a = c.a;
  const Idx Hkv = a.kv_heads, d = a.d, Tk = a.t_k, H = a.heads;
  const Idx bytes = 2 * Tk * Hkv * d * Idx(sizeof(float));
  Mat<float> out(1, H * d);
  const auto Q = ea::HeadsView<const float>::bthd(c.q.data(), 1, 1, H, d);
  const auto K = ea::HeadsView<const float>::bthd(c.kv.k.data(), 1, Tk, Hkv, d);
  const auto V = ea::HeadsView<const float>::bthd(c.kv.v.data(), 1, Tk, Hkv, d);
  const auto O = ea::HeadsView<float>::bthd(out.data(), 1, 1, H, d);
  for (const int threads : a.threads) {
    const ea::Options opt = options(c, threads);
    const auto call = [&] {
      ea::attention_heads_into(Q, K, V, O, opt);
      g_sink = g_sink + double(out(0, 0));
    };
    call();
    step_row(c, "float", "heads BTHD", 0, threads, bytes, call, out, &c.float_ref, 1e-5);
  }
}

}  // namespace

void step_section(const Args& a, ea::Kernel kernel, const BandwidthTable& bw, Summary& sum) {
  const std::string layout = cache_layout(a.kv_heads, a.d);
  std::printf(
      "== 2. one decode step: T_q = 1, T_k = %ld, H = %ld, H_kv = %ld, d = %ld; the cache's pages are %s\n"
      "   paged:      attention_decode_into(cache, &s, 1, q, cu = {0, 1}, out, opt) (q: [1, H, 1, d] over a "
      "1 x H d row) on a PagedKVCache whose\n"
      "               free pages were shuffled before the sequence was appended (its pages lie in random\n"
      "               order in the pool)\n"
      "   contig NHD: attention_decode_into(PagedKVView::nhd(...), q, nullptr, out, opt) over one "
      "contiguous\n"
      "               buffer [pages, page, H_kv, d], page size %ld, block table 0, 1, 2, ... (the same "
      "keys)\n"
      "   contig HND: the same over [pages, H_kv, page, d] (PagedKVView::hnd: each head's keys contiguous\n"
      "               within a page)\n"
      "   heads BTHD: today's way: attention_heads_into(Q [1,1,H,d], K/V [1,T_k,H_kv,d] BTHD, out), GQA\n"
      "   tok/s = 1 / time (one token of one sequence per step); GB/s = bytes/step / time;\n"
      "   frac = GB/s / the bandwidth of section 1 (same bytes, same threads); x float = float time /\n"
      "   this time (same keys, page and threads); x cont = contig %s time (the cache's layout) / this\n"
      "   time (same storage and threads: >= 0.95 = within 5%% of a contiguous cache); max|diff| against\n"
      "   the first contig %s output of the same storage (the float one for heads BTHD); '!' = above\n"
      "   tolerance (1e-6; 1e-5 for heads BTHD), exit 1\n",
      long(a.t_k), long(a.heads), long(a.kv_heads), long(a.d),
      layout == "NHD"   ? "NHD [pages, page_size, H_kv, d]"
      : layout == "HND" ? "HND [pages, H_kv, page_size, d]"
                        : "laid out otherwise",
      long(kContigPage), layout == "HND" ? "HND" : "NHD", layout == "HND" ? "HND" : "NHD");
  print_step_header();
  const KeysValues kv(a.t_k, a.kv_heads * a.d, 2);
  StepCtx c{a,
            kernel,
            bw,
            sum,
            kv,
            Mat<float>(1, a.heads * a.d),
            Mat<float>(),
            layout == "HND" ? "contig HND" : "contig NHD"};
  fill_uniform(c.q.data(), c.q.size(), 1);
  for (const std::string& s : a.storages) {
    with_storage(s, [&](auto tag) {
      storage_rows<decltype(tag)>(c);
      in_cache_rows<decltype(tag)>(c, storage_name<decltype(tag)>());
    });
    if (s == "float") heads_rows(c);
  }
  std::printf("\n");
}

}  // namespace ea_decode_bench
