// SPDX-License-Identifier: MIT
// eigen_attention_distributed_bench: sequence-parallel attention over MPI (EigenAttention::MPI,
// <EigenAttention/Distributed.hpp>) on the ranks it is started with, against the single-process
// call on the whole problem. See docs/distributed.md.
//
//   mpirun -np N [--allow-run-as-root --oversubscribe] eigen_attention_distributed_bench [options]
//
// In one run, after a header that names the CPU, the MPI library and the ranks (and says when
// they outnumber the hardware threads: then times are not speed-ups):
//   baseline  attention_heads_into on rank 0 over the whole problem (T = 16384, H = H_kv = 8,
//             d = 128, float, causal, 1 thread): GFLOP/s with 4 T^2 d H FLOPs, half causal;
//   link      a ping-pong between ranks 0 and 1 of one K/V block (one message of
//             2 T/N d H_kv floats) and of 8 bytes: the loopback bandwidth and latency;
//   methods   ring_attention_heads_into with Sharding::Contiguous and with Sharding::ZigZag, and
//             ulysses_attention, 1 thread a rank: per rank the medians over --reps runs of
//             Stats::seconds, compute_seconds, wait_seconds, bytes sent and received, messages
//             and visible_pairs; the imbalance (max / min over ranks of visible_pairs and of
//             compute_seconds); for the ring, the time of the same ring of K/V blocks alone
//             (MPI_Isend/MPI_Irecv/MPI_Waitall of one K/V message, P - 1 steps, no
//             compute) and the fraction of
//             communication hidden, 1 - wait_seconds / that time, clamped to [0, 1]; whether
//             every run gave the same bits; the largest difference from the baseline's output;
// then `model-input` lines that scripts/distributed_model.py --check reads. Ranks wait for each
// other in a sleeping barrier (MPI_Ibarrier, MPI_Test, 1 ms sleeps), so that idle ranks leave
// the cores to the busy ones when oversubscribed. Exit status 1 when a result differs from the
// baseline by more than 1e-4 or a run's bits differ from the first's; 2 for a usage error.
#include <EigenAttention/Distributed.hpp>
#include <EigenAttention/EigenAttention.hpp>

#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"

// For the command-line helpers of harness.hpp.
const char* const bench::kProgram = "eigen_attention_distributed_bench";
const char* const bench::kUsage =
    "usage: mpirun -np N eigen_attention_distributed_bench [options]\n"
    "  --T N, --t N        sequence length T (default 16384)\n"
    "  --heads H           query heads (default 8)\n"
    "  --kv-heads H_kv     K/V heads, a divisor of H (default H)\n"
    "  --d N               head dimension d_k = d_v (default 128)\n"
    "  --causal 0|1        causal mask (default 1)\n"
    "  --methods LIST      of ring-contiguous, ring-zigzag, ulysses (default all three)\n"
    "  --reps N            measured runs per method, after one warm-up run (default 3)\n"
    "  --no-baseline       skip the single-process call (and the check against it)\n"
    "  --quick             T = 4096, 1 rep (explicit options win)\n"
    "  --help\n"
    "Run under mpirun (as root: --allow-run-as-root; more ranks than cores: --oversubscribe).\n"
    "Exit status: 0, 1 when a result is wrong or not reproducible, 2 for a usage error.\n";

namespace {

namespace ea = EigenAttention;
namespace ead = EigenAttention::distributed;
using Idx = std::ptrdiff_t;

struct Args {
  Idx t = 16384, d = 128;
  int heads = 8, kv_heads = 0;  // 0: = heads
  bool causal = true;
  std::vector<std::string> methods{"ring-contiguous", "ring-zigzag", "ulysses"};
  int reps = 3;
  bool baseline = true;
};

Args parse_args(int argc, char** argv) {
  Args a;
  bool t_given = false, reps_given = false, quick = false;
  bench::ArgReader args(argc, argv);
  while (args.next()) {
    const std::string& arg = args.name();
    if (arg == "--help" || arg == "-h") {
      std::fputs(bench::kUsage, stdout);
      MPI_Finalize();
      std::exit(0);
    } else if (arg == "--T" || arg == "--t") {
      a.t = static_cast<Idx>(bench::parse_int(args.value(), "T"));
      if (a.t < 1) bench::usage_error("T must be >= 1");
      t_given = true;
    } else if (arg == "--heads") {
      a.heads = static_cast<int>(bench::parse_int(args.value(), "heads"));
    } else if (arg == "--kv-heads") {
      a.kv_heads = static_cast<int>(bench::parse_int(args.value(), "kv-heads"));
    } else if (arg == "--d") {
      a.d = static_cast<Idx>(bench::parse_int(args.value(), "d"));
    } else if (arg == "--causal") {
      a.causal = bench::parse_int(args.value(), "causal") != 0;
    } else if (arg == "--methods") {
      a.methods = bench::split(args.value());
      for (const std::string& m : a.methods) {
        if (m != "ring-contiguous" && m != "ring-zigzag" && m != "ulysses")
          bench::usage_error("unknown method '" + m + "'");
      }
    } else if (arg == "--reps") {
      a.reps = bench::parse_reps(args.value());
      reps_given = true;
    } else if (arg == "--no-baseline") {
      a.baseline = false;
    } else if (arg == "--quick") {
      quick = true;
    } else {
      bench::usage_error("unknown option '" + std::string(args.given()) + "'");
    }
  }
  if (quick) {
    if (!t_given) a.t = 4096;
    if (!reps_given) a.reps = 1;
  }
  if (a.kv_heads == 0) a.kv_heads = a.heads;
  if (a.heads < 1 || a.kv_heads < 1 || a.heads % a.kv_heads != 0) bench::usage_error("H_kv must divide H");
  if (a.d < 1) bench::usage_error("d must be >= 1");
  return a;
}

// ---------------------------------------------------------------------------------------------
// MPI helpers

int g_rank = 0, g_ranks = 1;

// A barrier that sleeps while it waits: the idle ranks leave the cores to the busy ones.
void quiet_barrier() {
  MPI_Request req;
  MPI_Ibarrier(MPI_COMM_WORLD, &req);
  int done = 0;
  while (true) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ---------------------------------------------------------------------------------------------
// Inputs: a value for every (tensor, head, global token, column), the same on every rank
// whatever its shard, uniform in [-1, 1).

float input_value(int tensor, Idx head, Idx token, Idx col) {
  std::uint64_t x = (static_cast<std::uint64_t>(tensor) << 58) ^ (static_cast<std::uint64_t>(head) << 40) ^
                    (static_cast<std::uint64_t>(token) << 16) ^ static_cast<std::uint64_t>(col);
  x += 0x9e3779b97f4a7c15ULL;  // splitmix64
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return static_cast<float>(static_cast<double>(x >> 40) / static_cast<double>(1ULL << 23) - 1.0);
}

// A [1, heads, rows, d] buffer holding the tokens of `segments` (all tokens: one segment).
std::vector<float> make_input(int tensor, Idx heads, Idx d, const std::vector<ead::Segment>& segments) {
  Idx rows = 0;
  for (const ead::Segment& s : segments) rows += s.count;
  std::vector<float> buf(static_cast<std::size_t>(heads * rows * d));
  for (Idx h = 0; h < heads; ++h) {
    for (const ead::Segment& s : segments) {
      for (Idx i = 0; i < s.count; ++i) {
        float* row = buf.data() + (h * rows + s.local_first + i) * d;
        for (Idx c = 0; c < d; ++c) row[c] = input_value(tensor, h, s.global_first + i, c);
      }
    }
  }
  return buf;
}

double attention_flops(const Args& a) {
  const double f =
      4.0 * static_cast<double>(a.t) * static_cast<double>(a.t) * static_cast<double>(a.d) * a.heads;
  return a.causal ? f / 2 : f;
}

// ---------------------------------------------------------------------------------------------
// The baseline: attention_heads_into on rank 0 over the whole problem.

struct Baseline {
  double seconds = std::nan(""), gflops = std::nan("");
  std::vector<float> out;  // [1, H, T, d], rank 0 only
};

Baseline run_baseline(const Args& a) {
  Baseline b;
  if (g_rank == 0) {
    const std::vector<ead::Segment> all{{0, 0, a.t}};
    const std::vector<float> q = make_input(0, a.heads, a.d, all), k = make_input(1, a.kv_heads, a.d, all),
                             v = make_input(2, a.kv_heads, a.d, all);
    b.out.assign(q.size(), 0.0f);
    ea::Options opt;
    opt.causal = a.causal;
    opt.threads = 1;
    const auto call = [&] {
      ea::attention_heads_into(ea::HeadsView<const float>::bhtd(q.data(), 1, a.heads, a.t, a.d),
                               ea::HeadsView<const float>::bhtd(k.data(), 1, a.kv_heads, a.t, a.d),
                               ea::HeadsView<const float>::bhtd(v.data(), 1, a.kv_heads, a.t, a.d),
                               ea::HeadsView<float>::bhtd(b.out.data(), 1, a.heads, a.t, a.d), opt);
    };
    const bench::Timing t = bench::measure(0.0, a.reps, call);
    b.seconds = t.median;
    b.gflops = attention_flops(a) / t.median / 1e9;
    std::printf(
        "baseline: attention_heads_into, one process, 1 thread, whole problem: %.3f s, %.1f GFLOP/s (median "
        "of %d"
        " after 1 warm-up)\n\n",
        b.seconds, b.gflops, t.reps);
    std::fflush(stdout);
  }
  quiet_barrier();
  return b;
}

// ---------------------------------------------------------------------------------------------
// The link: ping-pong between ranks 0 and 1.

struct Link {
  double bytes = 0, gbs = std::nan(""), latency_us = std::nan("");
  // Asynchronous progress: ranks 0 and 1 exchange one block (MPI_Irecv, MPI_Isend), then compute
  // (a loop, no MPI call) for 3 transfer times, then MPI_Waitall: the wait against the
  // transfer's own time says how much of it the MPI library moved while the rank computed.
  double overlap_wait_s = std::nan(""), overlap_xfer_s = std::nan("");
};

Link run_pingpong(std::int64_t bytes) {
  Link link;
  link.bytes = static_cast<double>(bytes);
  if (g_ranks < 2) return link;
  if (g_rank <= 1) {
    const int peer = 1 - g_rank;
    std::vector<char> buf(static_cast<std::size_t>(std::max<std::int64_t>(bytes, 8)), 1);
    const auto pingpong = [&](std::int64_t n, int iters) {
      std::vector<double> one_way;
      for (int it = 0; it < iters + 1; ++it) {
        const auto t0 = bench::Clock::now();
        if (g_rank == 0) {
          MPI_Send(buf.data(), static_cast<int>(n), MPI_BYTE, peer, 7, MPI_COMM_WORLD);
          MPI_Recv(buf.data(), static_cast<int>(n), MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
          MPI_Recv(buf.data(), static_cast<int>(n), MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(buf.data(), static_cast<int>(n), MPI_BYTE, peer, 7, MPI_COMM_WORLD);
        }
        if (it > 0) one_way.push_back(bench::seconds_since(t0) / 2);  // the first is a warm-up
      }
      return median(one_way);
    };
    const double small = pingpong(8, 200);
    const double large = pingpong(bytes, 9);
    link.latency_us = small * 1e6;
    link.gbs = static_cast<double>(bytes) / large / 1e9;

    std::vector<char> in(buf.size());
    std::vector<double> waits;
    for (int it = 0; it < 5; ++it) {
      MPI_Request req[2];
      MPI_Sendrecv(nullptr, 0, MPI_BYTE, peer, 8, nullptr, 0, MPI_BYTE, peer, 8, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
      MPI_Irecv(in.data(), static_cast<int>(bytes), MPI_BYTE, peer, 9, MPI_COMM_WORLD, &req[0]);
      MPI_Isend(buf.data(), static_cast<int>(bytes), MPI_BYTE, peer, 9, MPI_COMM_WORLD, &req[1]);
      const auto t0 = bench::Clock::now();
      volatile double x = 1.0;
      while (bench::seconds_since(t0) < 3 * large) {
        for (int i = 0; i < 1000; ++i) x = x * 1.0000001 + 1e-9;
      }
      const auto t1 = bench::Clock::now();
      MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
      waits.push_back(bench::seconds_since(t1));
    }
    link.overlap_wait_s = median(waits);
    link.overlap_xfer_s = large;
  }
  quiet_barrier();  // before the broadcast, whose wait spins
  MPI_Bcast(&link.gbs, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Bcast(&link.latency_us, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return link;
}

// ---------------------------------------------------------------------------------------------
// One method.

// The per-rank fields gathered on rank 0 (medians over the runs, then comm_alone, hidden).
enum Field {
  kRows,
  kSeconds,
  kCompute,
  kWait,
  kSent,
  kReceived,
  kMessages,
  kPairs,
  kBlocks,
  kSkipped,
  kCommAlone,
  kHidden,
  kSameBits,
  kFields
};

// The same ring of K/V blocks as the ring methods, alone: P - 1 steps, each sending the block
// held (K and V in one message, as ring_attention_heads_into sends them: Stats::messages = P - 1) to
// rank + 1 and receiving rank - 1's, MPI_Isend/MPI_Irecv then MPI_Waitall, no compute.
double comm_alone(const std::vector<float>& k, const std::vector<float>& v, const std::vector<Idx>& rows_of,
                  Idx kv_heads, Idx d, int reps) {
  if (g_ranks < 2) return std::nan("");
  const int next = (g_rank + 1) % g_ranks, prev = (g_rank + g_ranks - 1) % g_ranks;
  Idx max_rows = 0;
  for (Idx r : rows_of) max_rows = std::max(max_rows, r);
  const std::size_t cap = static_cast<std::size_t>(2 * kv_heads * max_rows * d);
  std::array<std::vector<float>, 2> buf{std::vector<float>(cap), std::vector<float>(cap)};
  std::vector<double> samples;
  for (int rep = 0; rep < reps + 1; ++rep) {  // the first is a warm-up
    std::copy(k.begin(), k.end(), buf[0].begin());
    std::copy(v.begin(), v.end(), buf[0].begin() + static_cast<std::ptrdiff_t>(k.size()));
    quiet_barrier();
    const auto t0 = bench::Clock::now();
    int cur = 0;
    for (int step = 0; step + 1 < g_ranks; ++step) {
      const int held = (g_rank - step + g_ranks) % g_ranks;              // the block this rank holds
      const int incoming = (g_rank - step - 1 + 2 * g_ranks) % g_ranks;  // the one it receives
      const int n_send = static_cast<int>(2 * kv_heads * rows_of[static_cast<std::size_t>(held)] * d);
      const int n_recv = static_cast<int>(2 * kv_heads * rows_of[static_cast<std::size_t>(incoming)] * d);
      MPI_Request req[2];
      MPI_Irecv(buf[1 - cur].data(), n_recv, MPI_FLOAT, prev, 11, MPI_COMM_WORLD, &req[0]);
      MPI_Isend(buf[cur].data(), n_send, MPI_FLOAT, next, 11, MPI_COMM_WORLD, &req[1]);
      MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
      cur = 1 - cur;
    }
    if (rep > 0) samples.push_back(bench::seconds_since(t0));
  }
  return median(samples);
}

struct MethodResult {
  bool ran = false;
  std::vector<std::array<double, kFields>> per_rank;  // rank 0 only
  double max_diff = std::nan("");
  bool same_bits = true;
};

MethodResult run_method(const Args& a, const std::string& method, const Baseline& base) {
  MethodResult res;
  const bool ring = method.rfind("ring", 0) == 0;
  const ead::Sharding sharding = method == "ring-zigzag" ? ead::Sharding::ZigZag : ead::Sharding::Contiguous;
  const std::vector<ead::Segment> segs = ead::shard_segments(sharding, a.t, g_ranks, g_rank);
  Idx rows = 0;
  for (const ead::Segment& s : segs) rows += s.count;
  std::vector<Idx> rows_of(static_cast<std::size_t>(g_ranks));
  for (int r = 0; r < g_ranks; ++r) {
    for (const ead::Segment& s : ead::shard_segments(sharding, a.t, g_ranks, r))
      rows_of[static_cast<std::size_t>(r)] += s.count;
  }
  const std::vector<float> q = make_input(0, a.heads, a.d, segs), k = make_input(1, a.kv_heads, a.d, segs),
                           v = make_input(2, a.kv_heads, a.d, segs);
  std::vector<float> out(q.size(), 0.0f), first;
  ea::Options opt;
  opt.causal = a.causal;
  opt.threads = 1;
  ead::Config config;
  config.sharding = sharding;
  ead::Stats stats;
  config.stats = &stats;
  const auto call = [&] {
    const auto qv = ea::HeadsView<const float>::bhtd(q.data(), 1, a.heads, rows, a.d);
    const auto kv = ea::HeadsView<const float>::bhtd(k.data(), 1, a.kv_heads, rows, a.d);
    const auto vv = ea::HeadsView<const float>::bhtd(v.data(), 1, a.kv_heads, rows, a.d);
    const auto ov = ea::HeadsView<float>::bhtd(out.data(), 1, a.heads, rows, a.d);
    if (ring)
      ead::ring_attention_heads_into(MPI_COMM_WORLD, qv, kv, vv, ov, opt, {}, config);
    else
      ead::ulysses_attention_heads_into(MPI_COMM_WORLD, qv, kv, vv, ov, opt, {}, config);
  };

  std::vector<std::array<double, kFields>> runs;
  try {
    quiet_barrier();
    call();  // warm-up
    for (int rep = 0; rep < a.reps; ++rep) {
      quiet_barrier();
      stats = ead::Stats{};
      call();
      std::array<double, kFields> f{};
      f[kRows] = static_cast<double>(rows);
      f[kSeconds] = stats.seconds;
      f[kCompute] = stats.compute_seconds;
      f[kWait] = stats.wait_seconds;
      f[kSent] = static_cast<double>(stats.bytes_sent);
      f[kReceived] = static_cast<double>(stats.bytes_received);
      f[kMessages] = static_cast<double>(stats.messages);
      f[kPairs] = static_cast<double>(stats.visible_pairs);
      f[kBlocks] = static_cast<double>(stats.blocks_computed);
      f[kSkipped] = static_cast<double>(stats.blocks_skipped);
      runs.push_back(f);
      if (rep == 0)
        first = out;
      else if (std::memcmp(first.data(), out.data(), out.size() * sizeof(float)) != 0)
        res.same_bits = false;
    }
  } catch (const std::exception& e) {
    if (g_rank == 0) std::printf("%s: not run: %s\n\n", method.c_str(), e.what());
    quiet_barrier();
    return res;
  }
  res.ran = true;

  std::array<double, kFields> mine{};
  for (int f = 0; f < kFields; ++f) {
    std::vector<double> col;
    for (const auto& r : runs) col.push_back(r[static_cast<std::size_t>(f)]);
    mine[static_cast<std::size_t>(f)] = median(col);
  }
  mine[kCommAlone] = ring ? comm_alone(k, v, rows_of, a.kv_heads, a.d, a.reps) : std::nan("");
  mine[kHidden] = std::isfinite(mine[kCommAlone]) && mine[kCommAlone] > 0
                      ? std::clamp(1.0 - mine[kWait] / mine[kCommAlone], 0.0, 1.0)
                      : std::nan("");
  mine[kSameBits] = res.same_bits ? 1.0 : 0.0;
  if (g_rank == 0) res.per_rank.resize(static_cast<std::size_t>(g_ranks));
  MPI_Gather(mine.data(), kFields, MPI_DOUBLE, g_rank == 0 ? res.per_rank.data() : nullptr, kFields,
             MPI_DOUBLE, 0, MPI_COMM_WORLD);

  // The check: every rank's rows (of the last run) against the baseline's output.
  int have_base = g_rank == 0 && !base.out.empty() ? 1 : 0;
  MPI_Bcast(&have_base, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (have_base) {
    if (g_rank == 0) {
      double diff = 0;
      std::vector<float> buf;
      for (int r = 0; r < g_ranks; ++r) {
        const Idx rr = rows_of[static_cast<std::size_t>(r)];
        if (r == 0) {
          buf = out;
        } else {
          buf.assign(static_cast<std::size_t>(a.heads * rr * a.d), 0.0f);
          MPI_Recv(buf.data(), static_cast<int>(buf.size()), MPI_FLOAT, r, 21, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
        }
        for (const ead::Segment& s : ead::shard_segments(sharding, a.t, g_ranks, r)) {
          for (Idx h = 0; h < a.heads; ++h) {
            for (Idx i = 0; i < s.count; ++i) {
              const float* got = buf.data() + (h * rr + s.local_first + i) * a.d;
              const float* want = base.out.data() + (h * a.t + s.global_first + i) * a.d;
              for (Idx c = 0; c < a.d; ++c)
                diff = std::max(diff, static_cast<double>(std::fabs(got[c] - want[c])));
            }
          }
        }
      }
      res.max_diff = diff;
    } else {
      MPI_Send(out.data(), static_cast<int>(out.size()), MPI_FLOAT, 0, 21, MPI_COMM_WORLD);
    }
  }
  int same = res.same_bits ? 1 : 0, all_same = 0;
  MPI_Reduce(&same, &all_same, 1, MPI_INT, MPI_MIN, 0, MPI_COMM_WORLD);
  res.same_bits = all_same == 1;
  quiet_barrier();
  return res;
}

// ---------------------------------------------------------------------------------------------
// Output (rank 0)

double max_of(const MethodResult& r, Field f) {
  double m = -1e300;
  for (const auto& x : r.per_rank) m = std::max(m, x[f]);
  return m;
}
double min_of(const MethodResult& r, Field f) {
  double m = 1e300;
  for (const auto& x : r.per_rank) m = std::min(m, x[f]);
  return m;
}
double sum_of(const MethodResult& r, Field f) {
  double s = 0;
  for (const auto& x : r.per_rank) s += x[f];
  return s;
}

struct Summary {
  double seconds_max, compute_max, wait_max, comm_alone_max, hidden, imb_pairs, imb_compute, sent_max,
      recv_max, msgs_per_step;
};

Summary print_method(const Args& a, const std::string& method, const MethodResult& r) {
  const bool ring = method.rfind("ring", 0) == 0;
  std::printf("%s (%s), medians of %d runs after 1 warm-up, 1 thread a rank\n", method.c_str(),
              method == "ring-zigzag" ? "ring_attention_heads_into, Sharding::ZigZag"
                                      : (ring ? "ring_attention_heads_into, Sharding::Contiguous"
                                              : "ulysses_attention, Sharding::Contiguous"),
              a.reps);
  std::printf("  %4s %6s %9s %9s %9s %9s %9s %5s %14s %8s %6s %10s %7s %8s\n", "rank", "rows", "seconds",
              "compute", "wait", "sent MiB", "recv MiB", "msgs", "visible_pairs", "blocks", "skip",
              "comm alone", "hidden", "GFLOP/s");
  for (int rank = 0; rank < g_ranks; ++rank) {
    const auto& x = r.per_rank[static_cast<std::size_t>(rank)];
    const double gflops = 4.0 * static_cast<double>(a.d) * x[kPairs] / x[kCompute] / 1e9;
    char alone[32] = "n/a", hid[32] = "n/a";
    if (std::isfinite(x[kCommAlone])) std::snprintf(alone, sizeof alone, "%.4f", x[kCommAlone]);
    if (std::isfinite(x[kHidden])) std::snprintf(hid, sizeof hid, "%.3f", x[kHidden]);
    std::printf("  %4d %6.0f %9.4f %9.4f %9.4f %9.2f %9.2f %5.0f %14.0f %8.0f %6.0f %10s %7s %8.1f\n", rank,
                x[kRows], x[kSeconds], x[kCompute], x[kWait], x[kSent] / 1048576.0, x[kReceived] / 1048576.0,
                x[kMessages], x[kPairs], x[kBlocks], x[kSkipped], alone, hid, gflops);
  }
  Summary s{};
  s.seconds_max = max_of(r, kSeconds);
  s.compute_max = max_of(r, kCompute);
  s.wait_max = max_of(r, kWait);
  s.comm_alone_max = ring && g_ranks > 1 ? max_of(r, kCommAlone) : std::nan("");
  // Over all ranks: 1 - (total wait) / (total time of the communication alone).
  s.hidden = ring && g_ranks > 1 && sum_of(r, kCommAlone) > 0
                 ? std::clamp(1.0 - sum_of(r, kWait) / sum_of(r, kCommAlone), 0.0, 1.0)
                 : std::nan("");
  s.imb_pairs = max_of(r, kPairs) / min_of(r, kPairs);
  s.imb_compute = max_of(r, kCompute) / min_of(r, kCompute);
  s.sent_max = max_of(r, kSent);
  s.recv_max = max_of(r, kReceived);
  s.msgs_per_step = ring && g_ranks > 1 ? max_of(r, kMessages) / (g_ranks - 1) : max_of(r, kMessages);
  std::printf("  slowest rank %.4f s; imbalance max/min: visible_pairs %.3f, compute_seconds %.3f",
              s.seconds_max, s.imb_pairs, s.imb_compute);
  if (std::isfinite(s.hidden)) std::printf("; hidden %.3f (1 - sum wait / sum comm alone)", s.hidden);
  std::printf("\n  same bits in every run: %s", r.same_bits ? "yes" : "NO");
  if (std::isfinite(r.max_diff))
    std::printf("; max |out - single process| = %.3g %s", r.max_diff,
                r.max_diff <= 1e-4 ? "(ok, <= 1e-4)" : "(FAILED)");
  std::printf("\n\n");
  std::fflush(stdout);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_ranks);
  const Args a = parse_args(argc, argv);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());

  if (g_rank == 0) {
    bench::print_machine_common("EigenAttention distributed benchmark", {ea::Kernel::Auto});
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    std::string libs(lib, static_cast<std::size_t>(len));
    libs = libs.substr(0, libs.find_first_of("\n,"));
    std::printf("  mpi       %s; %d rank%s, %u hardware threads on this host\n", libs.c_str(), g_ranks,
                g_ranks == 1 ? "" : "s", cores);
    if (static_cast<unsigned>(g_ranks) > cores) {
      std::printf(
          "            OVERSUBSCRIBED: %d ranks share %u hardware threads, so times are not speed-ups; what\n"
          "            this run shows is the overlap (wait, hidden) and the balance (visible_pairs)\n",
          g_ranks, cores);
    }
    std::printf(
        "  shape     T = %td, H = %d, H_kv = %d, d = %td, float, %s, B = 1, [1, H, T/N, d] per rank;\n"
        "            FLOPs 4*T*T*d*H%s = %.1f GFLOP; times: wall clock, Stats of each rank\n\n",
        a.t, a.heads, a.kv_heads, a.d, a.causal ? "causal" : "not causal", a.causal ? "/2" : "",
        attention_flops(a) / 1e9);
    std::fflush(stdout);
  }

  Baseline base;
  if (a.baseline) base = run_baseline(a);

  const Idx block_rows = ead::contiguous_rows(a.t, g_ranks, 0);
  const Link link = run_pingpong(static_cast<std::int64_t>(2 * block_rows * a.kv_heads * a.d) *
                                 static_cast<std::int64_t>(sizeof(float)));
  if (g_rank == 0 && g_ranks > 1) {
    std::printf(
        "link: ping-pong rank 0 <-> 1 (loopback, shared memory): %.2f GB/s one way for a K/V block of "
        "%.2f MiB, latency %.2f us (8 bytes)\n",
        link.gbs, link.bytes / 1048576.0, link.latency_us);
    std::printf(
        "      asynchronous progress: that block exchanged while rank 0 computed for 3x its transfer\n"
        "      time (%.4f s) without an MPI call: MPI_Waitall then took %.4f s, so the MPI library\n"
        "      moved %.0f %% of the transfer in the background\n\n",
        3 * link.overlap_xfer_s, link.overlap_wait_s,
        100 * std::clamp(1.0 - link.overlap_wait_s / link.overlap_xfer_s, 0.0, 1.0));
    std::fflush(stdout);
  }

  bool ok = true;
  std::vector<std::pair<std::string, Summary>> summaries;
  for (const std::string& m : a.methods) {
    const MethodResult r = run_method(a, m, base);
    if (!r.ran) continue;
    if (g_rank == 0) {
      summaries.emplace_back(m, print_method(a, m, r));
      if (!r.same_bits || (std::isfinite(r.max_diff) && r.max_diff > 1e-4)) ok = false;
    }
  }

  if (g_rank == 0) {
    std::printf("model-input n=%d t=%td h=%d hkv=%d d=%td causal=%d cores=%u\n", g_ranks, a.t, a.heads,
                a.kv_heads, a.d, a.causal ? 1 : 0, cores);
    if (std::isfinite(base.gflops))
      std::printf("model-input n=%d baseline_seconds=%.6f baseline_gflops=%.3f\n", g_ranks, base.seconds,
                  base.gflops);
    if (std::isfinite(link.gbs))
      std::printf(
          "model-input n=%d pingpong_bytes=%.0f pingpong_gbs=%.4f latency_us=%.3f async_wait_s=%.6f "
          "async_xfer_s=%.6f\n",
          g_ranks, link.bytes, link.gbs, link.latency_us, link.overlap_wait_s, link.overlap_xfer_s);
    for (const auto& [name, s] : summaries) {
      std::printf(
          "model-input n=%d method=%s seconds_max=%.6f compute_max=%.6f wait_max=%.6f comm_alone_max=%.6f "
          "hidden=%.4f bytes_sent_max=%.0f bytes_recv_max=%.0f messages_per_step=%.2f imbalance_pairs=%.4f "
          "imbalance_compute=%.4f\n",
          g_ranks, name.c_str(), s.seconds_max, s.compute_max, s.wait_max, s.comm_alone_max, s.hidden,
          s.sent_max, s.recv_max, s.msgs_per_step, s.imb_pairs, s.imb_compute);
    }
    std::printf("  load      %s (1/5/15 min, at the end)\n", bench::load_average().c_str());
    std::fflush(stdout);
  }
  int local_ok = ok ? 1 : 0;
  MPI_Bcast(&local_ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return local_ok ? 0 : 1;
}
