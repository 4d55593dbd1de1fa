// eigen_attention_multihead_bench: how fast the batched multi-head calls (MultiHead.hpp) are,
// against the single-head call measured in the same run. See bench/README.md.
//
// Three sections, each per (scalar type, threads):
//   heads   attention_heads on [1, H, T, d] (BHTD) buffers, MHA and GQA (H:H_kv), causal and not,
//           with its GFLOP/s and the ratio to the single-head rate of attention_into on one T x d
//           head with the same options and threads (the target: >= 0.9). One BTHD row per
//           (H, H_kv) at one T checks that the layout neither changes the result nor the speed.
//   window  a sliding window (window_left = W, window_right = 0, causal) against the full causal
//           call at the same shape: the time ratio against the ratio of computed pairs.
//   varlen  attention_varlen on a packed batch of uneven causal sequences against attention_heads
//           on the same batch padded to the longest sequence, with Masks::key_lengths.
// GFLOP/s = 4 * (computed pairs) * d / seconds, computed pairs = the (i, j) pairs no mask hides,
// counted exactly (T^2 per head, T(T+1)/2 causal, ...). Times are medians (as attention_bench).
//
// Every result is checked (max |diff|): multi-head heads against single-head attention_into
// calls on the same head, BTHD against BHTD, varlen against padded, and sampled rows of every
// call against an exact double-precision softmax. The run exits 1 when one is off.
#include <EigenAttention/EigenAttention.hpp>

#include "harness.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace ea = EigenAttention;
using Clock = bench::Clock;
using Idx = Eigen::Index;

namespace {

template <typename T>
using Mat = ea::RowMatrix<T>;
template <typename T>
using ConstMap = Eigen::Map<const Mat<T>>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------------------------------------
// Options

struct Args {
  // heads
  std::vector<Idx> ts{2048, 8192};
  std::vector<Idx> hs{8, 32};
  std::vector<Idx> ds{64, 128};
  std::vector<std::pair<Idx, Idx>> gqa{{32, 8}};
  Idx bthd_t = -1;  // T of the BTHD rows; -1: the smallest T; 0: none
  std::vector<int> causal{0, 1};
  // window
  Idx window_t = 16384, window_h = 8, window_d = 64, window = 256;
  // varlen
  Idx varlen_seqs = 8, varlen_min = 256, varlen_max = 4096, varlen_h = 8, varlen_d = 64;
  // all
  std::vector<std::string> types{"float"};
  std::vector<int> threads{1, 2};
  std::string kernel = "auto";
  int reps = 0;
  double seconds = 1.0;
  bool s_heads = true, s_window = true, s_varlen = true;
  bool seconds_given = false;
};

}  // namespace

// For the command-line helpers of harness.hpp.
const char* const bench::kProgram = "eigen_attention_multihead_bench";
const char* const bench::kUsage =
    "usage: eigen_attention_multihead_bench [options]\n"
    "  --quick            small sizes everywhere (T = 512,1024, H = 4,8, d = 64, GQA 8:2; window\n"
    "                     at T = 2048; varlen 4 sequences of 64..1024) and --seconds 0.3\n"
    "  --sections LIST    of heads,window,varlen (default all)\n"
    "  --type LIST        float, double or both (default float)\n"
    "  --threads LIST     Options::threads values (default 1,2; 0 = all hardware threads)\n"
    "  --kernel K         auto|avx512|avx2|portable|reference (default auto)\n"
    "  --reps N           measured runs per call (default: 3..5, about --seconds per call)\n"
    "  --seconds S        time budget of one measured call when --reps is not given (default 1)\n"
    " heads section:\n"
    "  --t LIST           sequence lengths (T_q = T_k = T) (default 2048,8192)\n"
    "  --h LIST           query heads, MHA (H_kv = H) (default 8,32)\n"
    "  --d LIST           head dimensions (d_k = d_v = d) (default 64,128)\n"
    "  --causal LIST      0, 1 or both (default 0,1)\n"
    "  --gqa LIST         H:H_kv pairs, or none (default 32:8)\n"
    "  --bthd-t N         T of the BTHD rows, 0 = none (default: the smallest T)\n"
    " window section (causal, window_left = W, window_right = 0, against full causal):\n"
    "  --window W         (default 256)\n"
    "  --window-shape T,H,d   (default 16384,8,64)\n"
    " varlen section (causal, against padded + key_lengths):\n"
    "  --varlen-seqs N    sequences (default 8)\n"
    "  --varlen-range MIN,MAX   their lengths, drawn deterministically (default 256,4096)\n"
    "  --varlen-shape H,d (default 8,64)\n"
    "  --help\n";

namespace {

using bench::kUsage;
using bench::parse_int;
using bench::parse_ints;
using bench::split;
using bench::usage_error;

std::vector<Idx> parse_tuple(const std::string& s, const char* what, std::size_t n) {
  const std::vector<Idx> v = parse_ints<Idx>(s, what, 1, Idx(1) << 24);
  if (v.size() != n) usage_error(std::string(what) + " needs " + std::to_string(n) + " values");
  return v;
}

Args parse_args(int argc, char** argv) {
  Args a;
  bool t_given = false, h_given = false, d_given = false, gqa_given = false, window_given = false,
       wshape_given = false, vseqs_given = false, vrange_given = false, vshape_given = false;
  bool quick = false;
  bench::ArgReader args(argc, argv);
  while (args.next()) {
    const std::string& arg = args.name();
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--quick") {
      quick = true;
    } else if (arg == "--sections") {
      a.s_heads = a.s_window = a.s_varlen = false;
      for (const std::string& s : split(args.value())) {
        if (s == "heads") a.s_heads = true;
        else if (s == "window") a.s_window = true;
        else if (s == "varlen") a.s_varlen = true;
        else usage_error("unknown section '" + s + "'");
      }
    } else if (arg == "--t") {
      a.ts = parse_ints<Idx>(args.value(), "T", 1, Idx(1) << 24);
      t_given = true;
    } else if (arg == "--h") {
      a.hs = parse_ints<Idx>(args.value(), "H", 1, 4096);
      h_given = true;
    } else if (arg == "--d") {
      a.ds = parse_ints<Idx>(args.value(), "d", 1, 65536);
      d_given = true;
    } else if (arg == "--causal") {
      a.causal = parse_ints<int>(args.value(), "causal", 0, 1);
    } else if (arg == "--gqa") {
      a.gqa.clear();
      gqa_given = true;
      const std::string v = args.value();
      if (v != "none") {
        for (const std::string& pair : split(v)) {
          const std::vector<std::string> hk = split(pair, ':');
          if (hk.size() != 2) usage_error("--gqa wants H:H_kv pairs, not '" + pair + "'");
          const Idx h = parse_int(hk[0], "H"), kv = parse_int(hk[1], "H_kv");
          if (h < 1 || kv < 1 || h % kv != 0) usage_error("--gqa: H must be a multiple of H_kv in '" + pair + "'");
          a.gqa.emplace_back(h, kv);
        }
      }
    } else if (arg == "--bthd-t") {
      a.bthd_t = static_cast<Idx>(parse_int(args.value(), "bthd-t"));
    } else if (arg == "--window") {
      a.window = static_cast<Idx>(parse_int(args.value(), "window"));
      if (a.window < 0) usage_error("--window must be >= 0");
      window_given = true;
    } else if (arg == "--window-shape") {
      const std::vector<Idx> v = parse_tuple(args.value(), "window-shape", 3);
      a.window_t = v[0], a.window_h = v[1], a.window_d = v[2];
      wshape_given = true;
    } else if (arg == "--varlen-seqs") {
      a.varlen_seqs = static_cast<Idx>(parse_int(args.value(), "varlen-seqs"));
      if (a.varlen_seqs < 1) usage_error("--varlen-seqs must be >= 1");
      vseqs_given = true;
    } else if (arg == "--varlen-range") {
      const std::vector<Idx> v = parse_tuple(args.value(), "varlen-range", 2);
      if (v[0] > v[1]) usage_error("--varlen-range: MIN > MAX");
      a.varlen_min = v[0], a.varlen_max = v[1];
      vrange_given = true;
    } else if (arg == "--varlen-shape") {
      const std::vector<Idx> v = parse_tuple(args.value(), "varlen-shape", 2);
      a.varlen_h = v[0], a.varlen_d = v[1];
      vshape_given = true;
    } else if (arg == "--type") {
      a.types = bench::parse_types(args.value());
    } else if (arg == "--threads") {
      a.threads = parse_ints<int>(args.value(), "threads", 0, 4096);
    } else if (arg == "--kernel") {
      a.kernel = args.value();
    } else if (arg == "--reps") {
      a.reps = bench::parse_reps(args.value());
    } else if (arg == "--seconds") {
      a.seconds = bench::parse_seconds(args.value());
      a.seconds_given = true;
    } else {
      usage_error("unknown option '" + std::string(args.given()) + "'");
    }
  }
  if (quick) {  // explicit options win
    if (!t_given) a.ts = {512, 1024};
    if (!h_given) a.hs = {4, 8};
    if (!d_given) a.ds = {64};
    if (!gqa_given) a.gqa = {{8, 2}};
    if (!window_given) a.window = 128;
    if (!wshape_given) a.window_t = 2048, a.window_h = 4, a.window_d = 64;
    if (!vseqs_given) a.varlen_seqs = 4;
    if (!vrange_given) a.varlen_min = 64, a.varlen_max = 1024;
    if (!vshape_given) a.varlen_h = 4, a.varlen_d = 64;
    if (!a.seconds_given) a.seconds = 0.3;
  }
  if (a.bthd_t < 0) a.bthd_t = *std::min_element(a.ts.begin(), a.ts.end());
  return a;
}

// ---------------------------------------------------------------------------------------------
// Timing (as attention_bench: warm-up, runs of ~seconds/5, the median per call)

using bench::measure;
using bench::seconds_since;
using bench::Timing;

// ---------------------------------------------------------------------------------------------
// The machine (as attention_bench)

using bench::load_average;

void print_machine(const Args& a, ea::Kernel kernel) {
  bench::print_machine_common("EigenAttention multi-head benchmark", {kernel});
  std::printf("  timing    after 1-2 warm-up calls, median of %s, each run = enough back-to-back calls "
              "to last ~%.2g s;\n            GFLOP/s = 4 * (computed pairs) * d / time, computed pairs = the "
              "(i, j) pairs no mask hides\n",
              a.reps > 0 ? (std::to_string(a.reps) + " runs").c_str() : "3..5 runs (about --seconds per call)",
              a.seconds / 5);
  std::printf("  checks    max|diff| against single-head calls / the other layout / padded (ref) and against\n"
              "            an exact double softmax on sampled rows (exact); '!' = above tolerance, exit 1\n");
  std::printf("\n");
  std::fflush(stdout);
}

// ---------------------------------------------------------------------------------------------
// Inputs: deterministic pseudo-random, uniform in [-1, 1]. Head h of tensor `tensor` (1 = Q,
// 2 = K, 3 = V) is always the same stream, whatever H, so head 0 of every config is the
// single-head problem and GQA's K/V head 0 is MHA's.

template <typename T>
void fill_stream(T* p, Idx n, unsigned tensor, Idx head) {
  std::uint64_t s = 0x9E3779B97F4A7C15ull * (std::uint64_t(tensor) * 1000003ull + std::uint64_t(head) + 1);
  for (int warm = 0; warm < 4; ++warm) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
  }
  for (Idx i = 0; i < n; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    p[i] = T(double(s >> 11) * (2.0 / 9007199254740992.0) - 1.0);
  }
}

// [heads, t, d] (BHTD with B = 1), head by head.
template <typename T>
std::vector<T> make_heads(Idx heads, Idx t, Idx d, unsigned tensor) {
  std::vector<T> buf(static_cast<std::size_t>(heads * t * d));
  for (Idx h = 0; h < heads; ++h) fill_stream(buf.data() + h * t * d, t * d, tensor, h);
  return buf;
}

// BHTD [1, H, T, d] -> BTHD [1, T, H, d].
template <typename T>
std::vector<T> to_bthd(const std::vector<T>& src, Idx heads, Idx t, Idx d) {
  std::vector<T> dst(src.size());
  for (Idx h = 0; h < heads; ++h)
    for (Idx i = 0; i < t; ++i)
      std::copy_n(src.data() + (h * t + i) * d, d, dst.data() + (i * heads + h) * d);
  return dst;
}

template <typename T>
const T* row_of(const ea::HeadsView<T>& v, Idx b, Idx h, Idx t) {
  return v.data + b * v.batch_stride + h * v.head_stride + t * v.token_stride;
}

// ---------------------------------------------------------------------------------------------
// Masks, pairs, exact rows

// max() that keeps a NaN (std::max(x, NaN) is x): a NaN in an output must fail its check.
double worst(double a, double b) { return (std::isnan(a) || std::isnan(b)) ? kNaN : std::max(a, b); }

// Keys [lo, hi) that query row i sees (TopLeft alignment, T_q = T_k or key lengths: offset 0).
std::pair<Idx, Idx> visible(Idx i, Idx tk, const ea::Options& o) {
  Idx lo = 0, hi = tk;
  if (o.causal) hi = std::min(hi, i + 1);
  if (o.window_right >= 0) hi = std::min<Idx>(hi, i + o.window_right + 1);
  if (o.window_left >= 0) lo = std::max<Idx>(lo, i - o.window_left);
  return {lo, std::max(lo, hi)};
}

// The (i, j) pairs no mask hides, counted exactly.
double computed_pairs(Idx tq, Idx tk, const ea::Options& o) {
  double n = 0;
  for (Idx i = 0; i < tq; ++i) {
    const auto [lo, hi] = visible(i, tk, o);
    n += double(hi - lo);
  }
  return n;
}

double gflops(double pairs, Idx d, Idx heads, double seconds) { return 4.0 * pairs * double(d) * double(heads) / seconds / 1e9; }

// Max |diff| between row `i` of `out` and the exact softmax(scale q k^T) v over keys [lo, hi),
// computed in double. Rows with dim stride 1 (every buffer of this bench).
template <typename T>
double exact_row_diff(const T* q, const T* k0, Idx k_stride, const T* v0, Idx v_stride, const T* out, Idx d, Idx lo,
                      Idx hi) {
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> s(static_cast<std::size_t>(std::max<Idx>(hi - lo, 0)));
  double m = -std::numeric_limits<double>::infinity();
  for (Idx j = lo; j < hi; ++j) {
    double dot = 0;
    for (Idx c = 0; c < d; ++c) dot += double(q[c]) * double(k0[j * k_stride + c]);
    s[j - lo] = scale * dot;
    m = std::max(m, s[j - lo]);
  }
  std::vector<double> acc(static_cast<std::size_t>(d), 0.0);
  double sum = 0;
  for (Idx j = lo; j < hi; ++j) {
    const double w = std::exp(s[j - lo] - m);
    sum += w;
    for (Idx c = 0; c < d; ++c) acc[c] += w * double(v0[j * v_stride + c]);
  }
  double diff = 0;
  for (Idx c = 0; c < d; ++c) {
    const double want = sum > 0 ? acc[c] / sum : 0.0;
    diff = worst(diff, std::abs(double(out[c]) - want));
  }
  return diff;
}

// Rows worth checking in a sequence of t rows: the ends, tile and window edges, the middle.
std::vector<Idx> sample_rows(Idx t, Idx window) {
  std::vector<Idx> r{0, 1, 127, 128, 129, t / 2, t - 2, t - 1};
  if (window >= 0) {
    for (Idx x : {window - 1, window, window + 1, window + 128}) r.push_back(x);
  }
  std::vector<Idx> out;
  for (Idx x : r) {
    if (x >= 0 && x < t && std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Sampled rows of head h (K/V head kv) of sequence b, the sequence's rows starting at token
// `first` (varlen) with t_q queries and t_k keys.
template <typename T>
double exact_rows_diff(const ea::HeadsView<const T>& q, const ea::HeadsView<const T>& k,
                       const ea::HeadsView<const T>& v, const ea::HeadsView<const T>& out, Idx b, Idx h, Idx kv,
                       Idx first, Idx t_q, Idx t_k, const ea::Options& opt) {
  double diff = 0;
  for (Idx i : sample_rows(t_q, opt.window_left)) {
    const auto [lo, hi] = visible(i, t_k, opt);
    diff = worst(diff, exact_row_diff(row_of(q, b, h, first + i), row_of(k, b, kv, first), k.token_stride,
                                         row_of(v, b, kv, first), v.token_stride, row_of(out, b, h, first + i),
                                         q.dim, lo, hi));
  }
  return diff;
}

// Max |diff| between `rows` rows of head (bx, hx) of x from token first_x and head (by, hy) of y
// from token first_y.
template <typename T>
double rows_diff(const ea::HeadsView<const T>& x, Idx bx, Idx hx, Idx first_x, const ea::HeadsView<const T>& y,
                 Idx by, Idx hy, Idx first_y, Idx rows) {
  double diff = 0;
  for (Idx i = 0; i < rows; ++i) {
    const T* a = row_of(x, bx, hx, first_x + i);
    const T* c = row_of(y, by, hy, first_y + i);
    for (Idx j = 0; j < x.dim; ++j) diff = worst(diff, std::abs(double(a[j]) - double(c[j])));
  }
  return diff;
}

template <typename T>
double all_heads_diff(const ea::HeadsView<const T>& x, const ea::HeadsView<const T>& y) {
  double diff = 0;
  for (Idx b = 0; b < x.batch; ++b)
    for (Idx h = 0; h < x.heads; ++h) diff = worst(diff, rows_diff(x, b, h, 0, y, b, h, 0, x.tokens));
  return diff;
}

// Library against library (other layout, other head, padded): 1e-5 as the issue asks for
// float, 1e-10 for double. Against the exact double rows: 1e-4 for float (an accumulated
// rounding error), 1e-10 for double.
template <typename T>
double ref_tolerance() {
  return sizeof(T) == 4 ? 1e-5 : 1e-10;
}
template <typename T>
double exact_tolerance() {
  return sizeof(T) == 4 ? 1e-4 : 1e-10;
}

struct Checks {
  int failed = 0;
  std::vector<std::string> below_target;
};

std::string fmt_e(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

// "1.2e-07", or "3.4e-03!" / "nan!" when above `tol` or NaN (counted as a failure).
std::string check_cell(double diff, double tol, Checks& checks) {
  const bool bad = !(diff <= tol);
  if (bad) ++checks.failed;
  return (std::isnan(diff) ? std::string("nan") : fmt_e(diff)) + (bad ? "!" : "");
}

volatile double g_sink = 0;

// attention_heads(q, k, v, out, opt, masks), timed (its first output element kept alive).
template <typename T>
Timing time_heads(const Args& a, const ea::HeadsView<const T>& q, const ea::HeadsView<const T>& k,
                  const ea::HeadsView<const T>& v, const ea::HeadsView<T>& out, const ea::Options& opt,
                  const ea::Masks<T>& masks = {}) {
  return measure(a.seconds, a.reps, [&] {
    ea::attention_heads(q, k, v, out, opt, masks);
    g_sink = g_sink + double(out.data[0]);
  });
}

// Sampled rows of the first and the last query head of sequence 0 (the last with its K/V head
// under GQA) against the exact rows.
template <typename T>
double exact_first_last_heads(const ea::HeadsView<const T>& q, const ea::HeadsView<const T>& k,
                              const ea::HeadsView<const T>& v, const ea::HeadsView<const T>& out,
                              const ea::Options& opt) {
  const Idx last = q.heads - 1, last_kv = last / (q.heads / k.heads);
  return worst(exact_rows_diff<T>(q, k, v, out, 0, 0, 0, 0, q.tokens, k.tokens, opt),
               exact_rows_diff<T>(q, k, v, out, 0, last, last_kv, 0, q.tokens, k.tokens, opt));
}

// ---------------------------------------------------------------------------------------------
// Section 1: attention_heads against the single-head call

struct HeadsCtx {
  const Args* a;
  const char* type;
  ea::Kernel kernel;
  Checks* checks;
};

void print_heads_header() {
  std::printf("%-6s %4s %3s %3s %6s %4s %4s %-7s | %9s %9s %9s %6s | %9s %9s\n", "type", "d", "cau", "thr", "T", "H",
              "H_kv", "layout", "ms", "GFLOP/s", "1-head", "ratio", "vs ref", "vs exact");
  std::printf("%-6s %4s %3s %3s %6s %4s %4s %-7s | %9s %9s %9s %6s | %9s %9s\n", "", "", "", "", "", "", "", "", "",
              "", "GFLOP/s", "", "max|diff|", "max|diff|");
  std::fflush(stdout);
}

// One row of the table, for the call timed `tm` on these views: its rate against the single-head
// rate, the `ref` check and sampled rows against exact, and a note when below the 0.9 target.
template <typename T>
void heads_row(const HeadsCtx& c, const char* layout, const ea::HeadsView<const T>& q,
               const ea::HeadsView<const T>& k, const ea::HeadsView<const T>& v, const ea::HeadsView<const T>& out,
               const ea::Options& opt, const Timing& tm, double single_rate, double ref) {
  const Idx t = q.tokens, d = q.dim, H = q.heads, Hkv = k.heads;
  const double exact = exact_first_last_heads<T>(q, k, v, out, opt);
  const double rate = gflops(computed_pairs(t, t, opt), d, H, tm.median);
  const double ratio = rate / single_rate;
  std::printf("%-6s %4ld %3d %3d %6ld %4ld %4ld %-7s | %9.2f %9.1f %9.1f %5.2f%s | %9s %9s\n", c.type, long(d),
              int(opt.causal), opt.threads, long(t), long(H), long(Hkv), layout, tm.median * 1e3, rate, single_rate,
              ratio, ratio < 0.9 ? "*" : " ", check_cell(ref, ref_tolerance<T>(), *c.checks).c_str(),
              check_cell(exact, exact_tolerance<T>(), *c.checks).c_str());
  std::fflush(stdout);
  if (ratio < 0.9) {
    char what[160];
    std::snprintf(what, sizeof what, "%s d=%ld causal=%d threads=%d T=%ld H=%ld H_kv=%ld %s: %.2f", c.type, long(d),
                  int(opt.causal), opt.threads, long(t), long(H), long(Hkv), layout, ratio);
    c.checks->below_target.push_back(what);
  }
}

// MHA or GQA (H, H_kv) at one (T, d, causal, threads): the BHTD row, and the BTHD row when asked.
template <typename T>
void heads_config(const HeadsCtx& c, Idx t, Idx d, bool causal, int threads, Idx H, Idx Hkv, bool with_bthd,
                  const Mat<T>& single_out, double single_rate) {
  const Args& a = *c.a;
  ea::Options opt;
  opt.causal = causal;
  opt.kernel = c.kernel;
  opt.threads = threads;
  const std::vector<T> q = make_heads<T>(H, t, d, 1), k = make_heads<T>(Hkv, t, d, 2), v = make_heads<T>(Hkv, t, d, 3);
  std::vector<T> o(q.size(), T(0));
  const auto Q = ea::HeadsView<const T>::bhtd(q.data(), 1, H, t, d);
  const auto K = ea::HeadsView<const T>::bhtd(k.data(), 1, Hkv, t, d);
  const auto V = ea::HeadsView<const T>::bhtd(v.data(), 1, Hkv, t, d);
  const auto O = ea::HeadsView<T>::bhtd(o.data(), 1, H, t, d);
  const Timing tm = time_heads<T>(a, Q, K, V, O, opt);
  const ea::HeadsView<const T> Oc = O;

  // Head 0 against the single-head call (the same inputs), the last head against its own
  // single-head call (catches a wrong GQA head mapping); heads_row adds sampled rows against exact.
  const Idx last = H - 1, last_kv = last / (H / Hkv);
  double ref = rows_diff<T>(Oc, 0, 0, 0, ea::HeadsView<const T>::single(single_out), 0, 0, 0, t);
  {
    Mat<T> out_last(t, d);
    ea::attention_into(ConstMap<T>(q.data() + last * t * d, t, d), ConstMap<T>(k.data() + last_kv * t * d, t, d),
                       ConstMap<T>(v.data() + last_kv * t * d, t, d), out_last, opt);
    const auto L = ea::HeadsView<const T>::single(out_last);
    ref = worst(ref, rows_diff<T>(Oc, 0, last, 0, L, 0, 0, 0, t));
  }
  heads_row<T>(c, "BHTD", Q, K, V, Oc, opt, tm, single_rate, ref);
  if (!with_bthd) return;

  // The same inputs in BTHD buffers, every head against the BHTD result.
  const std::vector<T> qb = to_bthd(q, H, t, d), kb = to_bthd(k, Hkv, t, d), vb = to_bthd(v, Hkv, t, d);
  std::vector<T> ob(o.size(), T(0));
  const auto Qb = ea::HeadsView<const T>::bthd(qb.data(), 1, t, H, d);
  const auto Kb = ea::HeadsView<const T>::bthd(kb.data(), 1, t, Hkv, d);
  const auto Vb = ea::HeadsView<const T>::bthd(vb.data(), 1, t, Hkv, d);
  const auto Ob = ea::HeadsView<T>::bthd(ob.data(), 1, t, H, d);
  const Timing tb = time_heads<T>(a, Qb, Kb, Vb, Ob, opt);
  const ea::HeadsView<const T> Obc = Ob;
  heads_row<T>(c, "BTHD", Qb, Kb, Vb, Obc, opt, tb, single_rate, all_heads_diff<T>(Obc, Oc));
}

template <typename T>
void heads_section(const Args& a, const char* type, ea::Kernel kernel, Checks& checks) {
  const HeadsCtx c{&a, type, kernel, &checks};
  // (H, H_kv) rows: MHA for every --h, then the GQA pairs.
  std::vector<std::pair<Idx, Idx>> configs;
  for (Idx h : a.hs) configs.emplace_back(h, h);
  for (const auto& p : a.gqa) configs.push_back(p);
  for (Idx d : a.ds) {
    for (int causal : a.causal) {
      for (int threads : a.threads) {
        for (Idx t : a.ts) {
          ea::Options opt;
          opt.causal = causal != 0;
          opt.kernel = kernel;
          opt.threads = threads;
          Mat<T> q1(t, d), k1(t, d), v1(t, d), o1(t, d);
          fill_stream(q1.data(), t * d, 1, 0);
          fill_stream(k1.data(), t * d, 2, 0);
          fill_stream(v1.data(), t * d, 3, 0);
          const Timing ts = measure(a.seconds, a.reps, [&] {
            ea::attention_into(q1, k1, v1, o1, opt);
            g_sink = g_sink + double(o1(0, 0));
          });
          const double pairs = computed_pairs(t, t, opt);
          const double rate = gflops(pairs, d, 1, ts.median);
          const auto Q1 = ea::HeadsView<const T>::single(q1);
          const auto K1 = ea::HeadsView<const T>::single(k1);
          const auto V1 = ea::HeadsView<const T>::single(v1);
          const auto O1 = ea::HeadsView<const T>::single(o1);
          const double exact = exact_rows_diff<T>(Q1, K1, V1, O1, 0, 0, 0, 0, t, t, opt);
          std::printf("%-6s %4ld %3d %3d %6ld %4d %4d %-7s | %9.2f %9.1f %9s %6s | %9s %9s\n", type, long(d), causal,
                      threads, long(t), 1, 1, "1-head", ts.median * 1e3, rate, "", "", "",
                      check_cell(exact, exact_tolerance<T>(), checks).c_str());
          std::fflush(stdout);
          for (const auto& [H, Hkv] : configs) {
            heads_config<T>(c, t, d, causal != 0, threads, H, Hkv, t == a.bthd_t, o1, rate);
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Section 2: sliding window against full causal

template <typename T>
void window_section(const Args& a, const char* type, ea::Kernel kernel, Checks& checks) {
  const Idx t = a.window_t, H = a.window_h, d = a.window_d;
  const std::vector<T> q = make_heads<T>(H, t, d, 1), k = make_heads<T>(H, t, d, 2), v = make_heads<T>(H, t, d, 3);
  std::vector<T> o(q.size(), T(0));
  const auto Q = ea::HeadsView<const T>::bhtd(q.data(), 1, H, t, d);
  const auto K = ea::HeadsView<const T>::bhtd(k.data(), 1, H, t, d);
  const auto V = ea::HeadsView<const T>::bhtd(v.data(), 1, H, t, d);
  const auto O = ea::HeadsView<T>::bhtd(o.data(), 1, H, t, d);
  const ea::HeadsView<const T> Oc = O;
  for (int threads : a.threads) {
    double time_of[2] = {kNaN, kNaN}, pairs_of[2] = {kNaN, kNaN};
    for (int w = 0; w < 2; ++w) {
      ea::Options opt;
      opt.causal = true;
      opt.kernel = kernel;
      opt.threads = threads;
      if (w == 1) {
        opt.window_left = static_cast<std::ptrdiff_t>(a.window);
        opt.window_right = 0;
      }
      const Timing tm = time_heads<T>(a, Q, K, V, O, opt);
      const double pairs = computed_pairs(t, t, opt);
      // Head 0 against the single-head call with the same options, sampled rows against exact.
      Mat<T> o1(t, d);
      ea::attention_into(ConstMap<T>(q.data(), t, d), ConstMap<T>(k.data(), t, d), ConstMap<T>(v.data(), t, d), o1,
                         opt);
      const double ref = rows_diff<T>(Oc, 0, 0, 0, ea::HeadsView<const T>::single(o1), 0, 0, 0, t);
      const double exact = exact_first_last_heads<T>(Q, K, V, Oc, opt);
      char call[64];
      if (w == 0) std::snprintf(call, sizeof call, "causal");
      else std::snprintf(call, sizeof call, "window %ld,0", long(a.window));
      std::printf("%-6s %3d %6ld %4ld %4ld %-13s | %12.0f %10.2f %9.1f | %9s %9s\n", type, threads, long(t), long(H),
                  long(d), call, pairs, tm.median * 1e3, gflops(pairs, d, H, tm.median),
                  check_cell(ref, ref_tolerance<T>(), checks).c_str(),
                  check_cell(exact, exact_tolerance<T>(), checks).c_str());
      std::fflush(stdout);
      time_of[w] = tm.median;
      pairs_of[w] = pairs;
    }
    const double time_ratio = time_of[1] / time_of[0], pair_ratio = pairs_of[1] / pairs_of[0];
    std::printf("%-6s %3d   window/causal: time ratio %.4f, computed-pairs ratio %.4f (~2W/T = %.4f); "
                "time ratio / pairs ratio = %.2f\n",
                type, threads, time_ratio, pair_ratio, 2.0 * double(a.window) / double(t), time_ratio / pair_ratio);
    std::fflush(stdout);
  }
}

// ---------------------------------------------------------------------------------------------
// Section 3: varlen against padded

std::vector<Idx> varlen_lengths(const Args& a) {
  std::uint64_t s = 0x2545F4914F6CDD1Dull;
  std::vector<Idx> out;
  for (Idx b = 0; b < a.varlen_seqs; ++b) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    out.push_back(a.varlen_min + Idx((s >> 11) % std::uint64_t(a.varlen_max - a.varlen_min + 1)));
  }
  return out;
}

template <typename T>
void varlen_section(const Args& a, const char* type, ea::Kernel kernel, Checks& checks) {
  const Idx H = a.varlen_h, d = a.varlen_d, B = a.varlen_seqs;
  const std::vector<Idx> len = varlen_lengths(a);
  std::vector<std::int64_t> cu(static_cast<std::size_t>(B + 1), 0), key_lengths;
  for (Idx b = 0; b < B; ++b) {
    cu[b + 1] = cu[b] + len[b];
    key_lengths.push_back(len[b]);
  }
  const Idx total = cu[B];
  const Idx max_len = *std::max_element(len.begin(), len.end());

  // Packed [1, H, total, d] data, then the same data packed BTHD and padded BHTD (zeros after
  // each sequence's end).
  const std::vector<T> q = make_heads<T>(H, total, d, 1), k = make_heads<T>(H, total, d, 2),
                       v = make_heads<T>(H, total, d, 3);
  const std::vector<T> qb = to_bthd(q, H, total, d), kb = to_bthd(k, H, total, d), vb = to_bthd(v, H, total, d);
  const auto pad = [&](const std::vector<T>& src) {
    std::vector<T> dst(static_cast<std::size_t>(B * H * max_len * d), T(0));
    for (Idx b = 0; b < B; ++b)
      for (Idx h = 0; h < H; ++h)
        std::copy_n(src.data() + (h * total + cu[b]) * d, len[b] * d, dst.data() + ((b * H + h) * max_len) * d);
    return dst;
  };
  const std::vector<T> qp = pad(q), kp = pad(k), vp = pad(v);
  std::vector<T> o(q.size(), T(0)), ob(q.size(), T(0)), op(qp.size(), T(0));

  const auto Q = ea::HeadsView<const T>::bhtd(q.data(), 1, H, total, d);
  const auto K = ea::HeadsView<const T>::bhtd(k.data(), 1, H, total, d);
  const auto V = ea::HeadsView<const T>::bhtd(v.data(), 1, H, total, d);
  const auto O = ea::HeadsView<T>::bhtd(o.data(), 1, H, total, d);
  const auto Qb = ea::HeadsView<const T>::bthd(qb.data(), 1, total, H, d);
  const auto Kb = ea::HeadsView<const T>::bthd(kb.data(), 1, total, H, d);
  const auto Vb = ea::HeadsView<const T>::bthd(vb.data(), 1, total, H, d);
  const auto Ob = ea::HeadsView<T>::bthd(ob.data(), 1, total, H, d);
  const auto Qp = ea::HeadsView<const T>::bhtd(qp.data(), B, H, max_len, d);
  const auto Kp = ea::HeadsView<const T>::bhtd(kp.data(), B, H, max_len, d);
  const auto Vp = ea::HeadsView<const T>::bhtd(vp.data(), B, H, max_len, d);
  const auto Op = ea::HeadsView<T>::bhtd(op.data(), B, H, max_len, d);
  const ea::HeadsView<const T> Oc = O, Obc = Ob, Opc = Op;

  ea::Options base;
  base.causal = true;
  base.kernel = kernel;
  double useful = 0, padded_pairs = 0;  // per head
  for (Idx b = 0; b < B; ++b) {
    useful += computed_pairs(len[b], len[b], base);
    padded_pairs += computed_pairs(max_len, len[b], base);  // padded query rows still see len[b] keys
  }
  ea::Masks<T> masks;
  masks.key_lengths = key_lengths.data();

  for (int threads : a.threads) {
    ea::Options opt = base;
    opt.threads = threads;
    const Timing tv = measure(a.seconds, a.reps, [&] {
      ea::attention_varlen(Qb, Kb, Vb, Ob, cu.data(), cu.data(), B, opt);
      g_sink = g_sink + double(ob[0]);
    });
    const Timing th = measure(a.seconds, a.reps, [&] {
      ea::attention_varlen(Q, K, V, O, cu.data(), cu.data(), B, opt);
      g_sink = g_sink + double(o[0]);
    });
    const Timing tp = time_heads<T>(a, Qp, Kp, Vp, Op, opt, masks);
    // Both varlen calls against padded (real rows only), against each other, and sampled rows
    // of the first and last sequence, first and last head, against exact.
    const double ref_layouts = all_heads_diff<T>(Obc, Oc);
    double ref_vb = 0, ref_vh = 0, exact_v = 0, exact_h = 0, exact_p = 0;
    for (Idx b = 0; b < B; ++b) {
      for (Idx h = 0; h < H; ++h) {
        ref_vb = worst(ref_vb, rows_diff<T>(Obc, 0, h, cu[b], Opc, b, h, 0, len[b]));
        ref_vh = worst(ref_vh, rows_diff<T>(Oc, 0, h, cu[b], Opc, b, h, 0, len[b]));
      }
    }
    for (Idx b : {Idx(0), B - 1}) {
      for (Idx h : {Idx(0), H - 1}) {
        exact_v = worst(exact_v, exact_rows_diff<T>(Qb, Kb, Vb, Obc, 0, h, h, cu[b], len[b], len[b], opt));
        exact_h = worst(exact_h, exact_rows_diff<T>(Q, K, V, Oc, 0, h, h, cu[b], len[b], len[b], opt));
        exact_p = worst(exact_p, exact_rows_diff<T>(Qp, Kp, Vp, Opc, b, h, h, 0, len[b], len[b], opt));
      }
    }
    const auto row = [&](const char* call, double computed, const Timing& tm, const std::string& ref, double exact) {
      std::printf("%-6s %3d %4ld %4ld %-16s | %12.0f %12.0f %10.2f %9.1f | %9s %9s\n", type, threads, long(H), long(d),
                  call, useful, computed, tm.median * 1e3, gflops(useful, d, H, tm.median), ref.c_str(),
                  check_cell(exact, exact_tolerance<T>(), checks).c_str());
    };
    row("varlen BTHD", useful, tv, check_cell(ref_vb, ref_tolerance<T>(), checks), exact_v);
    row("varlen BHTD", useful, th, check_cell(ref_vh, ref_tolerance<T>(), checks), exact_h);
    row("padded+key_len", padded_pairs, tp, "-", exact_p);
    std::printf("%-6s %3d   varlen speed-up over padded: %.2fx (BTHD), %.2fx (BHTD); padded/useful pairs = %.2f; "
                "varlen BTHD vs BHTD max|diff| %s\n",
                type, threads, tp.median / tv.median, tp.median / th.median, padded_pairs / useful,
                check_cell(ref_layouts, ref_tolerance<T>(), checks).c_str());
    std::fflush(stdout);
  }
}

template <typename T>
void run_type(const Args& a, const char* type, ea::Kernel kernel, Checks& checks) {
  if (a.s_heads) {
    std::printf("== heads: attention_heads, B = 1, [1, H, T, d] BHTD (and BTHD at T = %ld) against attention_into "
                "on one head\n   (ratio = GFLOP/s / 1-head GFLOP/s, same options and threads; '*' = below the "
                "0.9 target)\n",
                long(a.bthd_t));
    print_heads_header();
    heads_section<T>(a, type, kernel, checks);
    std::printf("\n");
  }
  if (a.s_window) {
    std::printf("== window: causal, window_left = %ld, window_right = 0, against full causal, BHTD\n", long(a.window));
    std::printf("%-6s %3s %6s %4s %4s %-13s | %12s %10s %9s | %9s %9s\n", "type", "thr", "T", "H", "d", "call",
                "pairs/head", "ms", "GFLOP/s", "vs ref", "vs exact");
    window_section<T>(a, type, kernel, checks);
    std::printf("\n");
  }
  if (a.s_varlen) {
    const std::vector<Idx> len = varlen_lengths(a);
    std::string lens;
    Idx total = 0;
    for (Idx l : len) {
      lens += (lens.empty() ? "" : ",") + std::to_string(l);
      total += l;
    }
    std::printf("== varlen: causal, %ld sequences of lengths %s (total %ld, max %ld);\n   attention_varlen on the "
                "packed batch against attention_heads on [%ld, H, %ld, d] with key_lengths\n   (GFLOP/s over the "
                "useful pairs for all three; 'computed' = the pairs each call cannot skip; vs ref = against padded)\n",
                long(len.size()), lens.c_str(), long(total), long(*std::max_element(len.begin(), len.end())),
                long(len.size()), long(*std::max_element(len.begin(), len.end())));
    std::printf("%-6s %3s %4s %4s %-16s | %12s %12s %10s %9s | %9s %9s\n", "type", "thr", "H", "d", "call",
                "useful/head", "computed", "ms", "GFLOP/s", "vs ref", "vs exact");
    varlen_section<T>(a, type, kernel, checks);
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse_args(argc, argv);
    const ea::Kernel kernel = bench::parse_kernel(a.kernel);
    print_machine(a, kernel);
    Checks checks;
    for (const std::string& type : a.types) {
      if (type == "float") run_type<float>(a, "float", kernel, checks);
      else run_type<double>(a, "double", kernel, checks);
    }
    std::printf("load at end: %s\n", load_average().c_str());
    if (!checks.below_target.empty()) {
      std::printf("below the 0.9x target (multi-head GFLOP/s / 1-head GFLOP/s):\n");
      for (const std::string& s : checks.below_target) std::printf("  %s\n", s.c_str());
    }
    if (checks.failed > 0) {
      std::printf("FAILED: %d result check(s) above tolerance (marked '!')\n", checks.failed);
      return 1;
    }
    std::printf("all result checks passed\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eigen_attention_multihead_bench: %s\n", e.what());
    return 1;
  }
}
