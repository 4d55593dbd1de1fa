// SPDX-License-Identifier: MIT
// eigen_attention_bench: the extra peak memory of one fused call, measured in a forked child;
// --scaling (time and memory against T) and --memory-probe.
#include "attention_bench.hpp"

namespace ea_attention_bench {

// ---------------------------------------------------------------------------------------------
// Peak memory of one fused call, in a forked child

long maxrss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;  // KiB on Linux
}

// In a child: allocate and touch Q, K, V (T x d) and O; read ru_maxrss; run attention_into (the
// first library call of the child); read it again. The difference is the extra peak resident
// memory of the call: its workspace and packing buffers, the pool threads' stacks when threads
// > 1, and the pages of library code it touches for the first time (a few hundred KiB).
// Call it before this process has started any library threads (in_child).
template <typename T>
ChildReport fused_memory_in_child(Idx t, Idx d, const ea::Options& opt) {
  return in_child<ChildReport>([&](ChildReport& r) {
    const Inputs<T> in(t, d);
    Mat<T> out(t, d);
    out.setZero();
    r.before_kib = maxrss_kib();
    const Clock::time_point t0 = Clock::now();
    ea::attention_into(in.q, in.k, in.v, out, opt);
    r.seconds = seconds_since(t0);
    r.after_kib = maxrss_kib();
    g_sink = g_sink + double(out(0, 0));
    r.ok = 1;
  });
}

double extra_mib(const ChildReport& r) { return r.ok ? double(r.after_kib - r.before_kib) / 1024.0 : kNaN; }

// Phase 1 of --scaling: the groups of one scalar type and their memory children.
template <typename T>
void scaling_children(const Args& a, const std::vector<ea::Kernel>& kernels, const char* type,
                      std::vector<ScalingGroup>& groups) {
  for (ea::Kernel k : kernels) {
    for (Idx d : a.ds) {
      for (int c : a.causal) {
        for (int thr : a.threads) {
          ScalingGroup g;
          g.type = type;
          g.opt.causal = c != 0;
          g.opt.kernel = k;
          g.opt.threads = thr;
          g.d = d;
          std::fprintf(stderr, "[%s d = %ld causal = %d %d thread(s): extra peak memory, one child per T]\n",
                       type, long(d), c, thr);
          for (Idx t : a.ts) g.mem.push_back(fused_memory_in_child<T>(t, d, g.opt));
          groups.push_back(g);
        }
      }
    }
  }
}

// Phase 2: the timings, in this process.
template <typename T>
bool scaling_timings(const Args& a, const std::vector<ScalingGroup>& groups, Csv& csv) {
  bool all_ok = true;
  for (const ScalingGroup& g : groups) {
    if (g.type != (sizeof(T) == 4 ? "float" : "double")) continue;
    const char* type = g.type.c_str();
    const Idx d = g.d;
    const int c = int(g.opt.causal);
    std::printf("\nfused attention_into: %s, d = %ld, causal = %d, kernel %s, %d thread(s)\n", type, long(d),
                c, resolved_name(g.opt.kernel), g.opt.threads);
    std::printf("%7s | %10s %9s %12s | %14s %14s %16s\n", "T", "time s", "GFLOP/s", "time/T^2", "extra peak",
                "Q,K,V,O", "naive S (T^2)");
    std::printf("%7s | %10s %9s %12s | %14s %14s %16s\n", "", "(median)", "", "(vs first)", "MiB (fused)",
                "MiB", "MiB");
    double first = kNaN;
    for (std::size_t i = 0; i < a.ts.size(); ++i) {
      const Idx t = a.ts[i];
      const ChildReport& mem = g.mem[i];
      Timing tm;
      {
        const Inputs<T> in(t, d);
        Mat<T> out(t, d);
        tm = measure(a.seconds, a.reps, [&] { ea::attention_into(in.q, in.k, in.v, out, g.opt); });
      }
      const double per_t2 = tm.median / (double(t) * double(t));
      if (i == 0) first = per_t2;
      const double rate = gflops(attention_flops(t, d, g.opt.causal), tm);
      const double io_mib = 4.0 * double(t) * double(d) * sizeof(T) / kMiB;
      const double naive_mib = double(t) * double(t) * sizeof(T) / kMiB;
      const std::string extra = mem.ok ? fmt(extra_mib(mem), 2) : std::string("failed");
      print_row("%7ld | %10.4f %9.1f %12.3f | %14s %14.1f %16.0f\n", long(t), tm.median, rate, per_t2 / first,
                extra.c_str(), io_mib, naive_mib);
      if (!mem.ok) {
        std::printf("        memory child: %s\n", mem.error);
        all_ok = false;
      }
      std::ostringstream line;
      line << "scaling," << type << ',' << d << ',' << c << ',' << resolved_name(g.opt.kernel) << ','
           << g.opt.threads << ',' << t << ',' << csv_num(tm.median) << ',' << csv_num(rate) << ','
           << csv_num(per_t2 / first) << ',' << csv_num(extra_mib(mem)) << ',' << csv_num(io_mib) << ','
           << csv_num(naive_mib);
      csv.add(line.str());
    }
  }
  return all_ok;
}

template <typename T>
int memory_probe(const Args& a, const std::vector<ea::Kernel>& kernels, const char* type, Csv& csv) {
  constexpr double kTargetMiB = 64;
  bool within = true;
  for (ea::Kernel k : kernels) {
    for (Idx d : a.ds) {
      for (Idx t : a.ts) {
        for (int thr : a.threads) {
          for (int c : a.causal) {
            ea::Options opt;
            opt.kernel = k;
            opt.threads = thr;
            opt.causal = c != 0;
            const ChildReport r = fused_memory_in_child<T>(t, d, opt);
            const double io_mib = 4.0 * double(t) * double(d) * sizeof(T) / kMiB;
            if (!r.ok) {
              std::printf("memory probe %s T = %ld d = %ld: FAILED: %s\n", type, long(t), long(d), r.error);
              within = false;
              continue;
            }
            const double extra = extra_mib(r);
            const bool ok = extra <= kTargetMiB;
            within = within && ok;
            std::printf(
                "memory probe: fused attention_into, %s, T = %ld, d = %ld, causal = %d, kernel %s, %d "
                "thread(s)\n"
                "  Q, K, V, O (allocated and touched before): %.1f MiB\n"
                "  peak RSS before the call: %.1f MiB; after: %.1f MiB\n"
                "  extra peak resident memory of the call: %.2f MiB (target <= %.0f MiB: %s)\n"
                "  the call took %.2f s; the naive way would hold a %.0f MiB T x T matrix\n",
                type, long(t), long(d), int(opt.causal), resolved_name(k), thr, io_mib, r.before_kib / 1024.0,
                r.after_kib / 1024.0, extra, kTargetMiB, ok ? "met" : "NOT MET", r.seconds,
                double(t) * double(t) * sizeof(T) / kMiB);
            std::fflush(stdout);
            std::ostringstream line;
            line << "memory," << type << ',' << d << ',' << int(opt.causal) << ',' << resolved_name(k) << ','
                 << thr << ',' << t << ',' << csv_num(r.seconds) << ',' << csv_num(extra) << ','
                 << csv_num(io_mib);
            csv.add(line.str());
          }
        }
      }
    }
  }
  return within ? 0 : 1;
}

template ChildReport fused_memory_in_child<float>(Idx, Idx, const ea::Options&);
template ChildReport fused_memory_in_child<double>(Idx, Idx, const ea::Options&);
template void scaling_children<float>(const Args&, const std::vector<ea::Kernel>&, const char*,
                                      std::vector<ScalingGroup>&);
template void scaling_children<double>(const Args&, const std::vector<ea::Kernel>&, const char*,
                                       std::vector<ScalingGroup>&);
template bool scaling_timings<float>(const Args&, const std::vector<ScalingGroup>&, Csv&);
template bool scaling_timings<double>(const Args&, const std::vector<ScalingGroup>&, Csv&);
template int memory_probe<float>(const Args&, const std::vector<ea::Kernel>&, const char*, Csv&);
template int memory_probe<double>(const Args&, const std::vector<ea::Kernel>&, const char*, Csv&);

}  // namespace ea_attention_bench
