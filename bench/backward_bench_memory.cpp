// SPDX-License-Identifier: MIT
// eigen_attention_backward_bench: the extra peak memory of one backward call, measured in a
// forked child as eigen_attention_bench's --memory-probe measures the forward's.
#include "backward_bench.hpp"

namespace ea_backward_bench {

namespace {

// A "VmRSS:" or "VmHWM:" line of /proc/self/status, in KiB; -1 when absent.
long status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::size_t n = std::strlen(field);
  while (std::getline(in, line)) {
    if (line.compare(0, n, field) == 0) return std::atol(line.c_str() + n);
  }
  return -1;
}

// Resets the peak resident set size (VmHWM, and so ru_maxrss) to the current one: Linux >= 4.0.
bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

// In a child: allocate and write Q, K, V, dO, ATTN, LSE, dQ, dK and dV; read the resident size;
// run the forward (the child's first library call: ATTN and LSE), reset the peak, run the
// backward, read the peak. The extra memory of the backward is that peak minus the resident
// size before the forward: it includes the workspace the forward left behind (which the
// backward may reuse), the pool threads' stacks when threads > 1, and the library code pages
// the two calls touch first.
template <typename T>
MemoryReport backward_memory_in_child(Idx t, Idx d, const ea::Options& opt) {
  return ea_attention_bench::in_child<MemoryReport>([&](MemoryReport& r) {
    const Inputs<T> in(t, d);
    Mat<T> dout(t, d), out(t, d), dq(t, d), dk(t, d), dv(t, d);
    Vec<T> lse(t);
    fill(dout, 4);
    out.setZero();
    dq.setZero();
    dk.setZero();
    dv.setZero();
    lse.setZero();
    r.base_kib = status_kib("VmRSS:");
    Clock::time_point t0 = Clock::now();
    ea::attention_into(in.q, in.k, in.v, out, lse, opt);
    r.fwd_s = bench::seconds_since(t0);
    r.after_fwd_kib = status_kib("VmRSS:");
    r.hwm_reset = reset_peak_rss() ? 1 : 0;
    t0 = Clock::now();
    ea::attention_backward_into(in.q, in.k, in.v, out, lse, dout, dq, dk, dv, opt);
    r.bwd_s = bench::seconds_since(t0);
    r.peak_kib = status_kib("VmHWM:");
    g_sink = g_sink + double(dq(0, 0) + dk(0, 0) + dv(0, 0));
    r.ok = r.base_kib > 0 && r.peak_kib > 0 ? 1 : 0;
    if (!r.ok) std::snprintf(r.error, sizeof r.error, "cannot read /proc/self/status");
  });
}

}  // namespace

double MemoryRow::buffers_mib() const {
  const double bytes = type == "float" ? 4.0 : 8.0;
  return (8.0 * double(t) * double(d) + double(t)) * bytes / kMiB;
}

template <typename T>
MemoryRow backward_memory(const Args& a, const char* type, int threads) {
  MemoryRow row;
  row.type = type;
  row.t = a.memory_t;
  row.d = a.memory_d;
  row.threads = threads;
  ea::Options opt;
  opt.kernel = bench::parse_kernel(a.kernel);
  opt.threads = threads;
  std::fprintf(stderr, "[memory: %s T = %ld d = %ld, %d thread(s): forward then backward in a child]\n", type,
               long(row.t), long(row.d), threads);
  row.r = backward_memory_in_child<T>(row.t, row.d, opt);
  return row;
}

void print_memory(const std::vector<MemoryRow>& rows) {
  std::printf(
      "\nmemory: one backward call, non-causal, in a forked child (VmRSS before the forward, then the peak\n"
      "VmHWM of the backward after resetting it through /proc/self/clear_refs); extra = peak - before, so "
      "it\n"
      "includes the workspace the forward left and the pool threads' stacks. Target <= %.0f MiB.\n",
      kTargetMemoryMiB);
  std::printf("%-6s %6s %4s %3s | %10s | %10s %10s | %10s %10s | %s\n", "type", "T", "d", "thr", "buffers",
              "extra", "of which", "forward", "backward", "target");
  std::printf("%-6s %6s %4s %3s | %10s | %10s %10s | %10s %10s | %s\n", "", "", "", "", "MiB", "peak MiB",
              "fwd kept", "s", "s", "");
  for (const MemoryRow& m : rows) {
    if (!m.r.ok) {
      std::printf("%-6s %6ld %4ld %3d | FAILED: %s\n", m.type.c_str(), long(m.t), long(m.d), m.threads,
                  m.r.error);
      continue;
    }
    const double extra = m.extra_mib();
    print_row("%-6s %6ld %4ld %3d | %10.1f | %10.2f %10.2f | %10.2f %10.2f | %s%s\n", m.type.c_str(),
              long(m.t), long(m.d), m.threads, m.buffers_mib(), extra, m.forward_retained_mib(), m.r.fwd_s,
              m.r.bwd_s, extra <= kTargetMemoryMiB ? "met" : "NOT MET",
              m.r.hwm_reset ? "" : "  (peak not reset: includes the forward's peak)");
  }
  std::fflush(stdout);
}

template MemoryRow backward_memory<float>(const Args&, const char*, int);
template MemoryRow backward_memory<double>(const Args&, const char*, int);

}  // namespace ea_backward_bench
