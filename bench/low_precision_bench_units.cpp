// SPDX-License-Identifier: MIT
// eigen_attention_low_precision_bench: the vector units that a 16-bit attention could use, one
// core, each instruction in a loop of its own (inline assembly, so that the loop is exactly the
// instructions named and nothing the compiler chose):
//   throughput  12 (or 24) independent accumulators, so that the instruction's latency is hidden
//               and the loop runs at the unit's issue rate: vfmadd231ps zmm (16 float FMAs,
//               32 FLOPs), vdpbf16ps zmm (32 bf16 products summed pairwise into 16 floats,
//               64 FLOPs), vfmadd231ph zmm (32 half FMAs, 64 FLOPs, accumulated in half);
//   latency     one accumulator, every instruction waiting for the previous one;
//   conversions the widening of 16 halves (vcvtph2ps) or 16 bfloat16 (no instruction of its own:
//               vpmovzxwd + vpslld 16, or vpunpck[lh]wd with zero) to 16 floats, from a register
//               and from L1, and the narrowing back (vcvtps2ph, vcvtneps2bf16);
//   AMX         tdpbf16ps on four independent 16 x 16 float tiles (two A and two B tiles of
//               16 x 32 bfloat16: 16384 FLOPs each), where the CPU has AMX-BF16 and Linux lets
//               the process use the tile data (arch_prctl ARCH_REQ_XCOMP_PERM).
// The clock comes from a chain of dependent integer adds (1 cycle each), so that rates can be
// given per cycle too. Each function is compiled with its own target attribute and called only
// when __builtin_cpu_supports says that this CPU (and its OS) has every feature it needs.
#include "low_precision_bench.hpp"

#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace ea_low_precision_bench {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define EA_LP_UNITS 1
#else
#define EA_LP_UNITS 0
#endif

#if EA_LP_UNITS
bool cpu_has_avx512fp16() {
  // CPUID leaf 7, EDX bit 23; the OS's support of the AVX-512 state is avx512f's. (Clang 14's
  // __builtin_cpu_supports does not know "avx512fp16".)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 &&
         (edx & (1u << 23)) != 0;
}
#else
bool cpu_has_avx512fp16() { return false; }
#endif

#if EA_LP_UNITS
namespace {

// Iterations of every loop per call; bench::measure repeats the call to fill a run.
constexpr long kIterations = 1 << 16;

// ---------------------------------------------------------------------------------------------
// The loops. Accumulators: zmm0-11 (and zmm16-27 for 24); sources: zmm12, zmm13; zero: zmm14.

#define EA_LP_R12(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11)
#define EA_LP_R24(M) EA_LP_R12(M) M(16) M(17) M(18) M(19) M(20) M(21) M(22) M(23) M(24) M(25) M(26) M(27)
#define EA_LP_ZERO(i) "vpxord %%zmm" #i ", %%zmm" #i ", %%zmm" #i "\n\t"
// zmm12 = zmm13 = the 32-bit pattern at c, broadcast; zmm14 = 0.
#define EA_LP_SOURCES \
  "vpbroadcastd (%[c]), %%zmm12\n\tvpbroadcastd (%[c]), %%zmm13\n\t" EA_LP_ZERO(14) \
      ".p2align 5\n"                                                                   \
      "1:\n\t"
#define EA_LP_LOOP_END "dec %[n]\n\tjnz 1b\n\tvzeroupper\n\t"
#define EA_LP_CLOBBERS                                                                                     \
  "cc", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
      "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21",   \
      "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27"

#define EA_LP_FMA(i) "vfmadd231ps %%zmm13, %%zmm12, %%zmm" #i "\n\t"
#define EA_LP_FMA0(i) "vfmadd231ps %%zmm13, %%zmm12, %%zmm0\n\t"
#define EA_LP_DP(i) "vdpbf16ps %%zmm13, %%zmm12, %%zmm" #i "\n\t"
#define EA_LP_DP0(i) "vdpbf16ps %%zmm13, %%zmm12, %%zmm0\n\t"
#define EA_LP_FMAPH(i) "vfmadd231ph %%zmm13, %%zmm12, %%zmm" #i "\n\t"
#define EA_LP_CVTPH(i) "vcvtph2ps %%ymm12, %%zmm" #i "\n\t"
#define EA_LP_CVTPH_M(i) "vcvtph2ps 32*" #i "(%[p]), %%zmm" #i "\n\t"
#define EA_LP_BFZX(i) "vpmovzxwd %%ymm12, %%zmm" #i "\n\tvpslld $16, %%zmm" #i ", %%zmm" #i "\n\t"
#define EA_LP_BFZX_M(i) "vpmovzxwd 32*" #i "(%[p]), %%zmm" #i "\n\tvpslld $16, %%zmm" #i ", %%zmm" #i "\n\t"
// Low words of each 128-bit lane of zmm12 into the high halves of 32-bit lanes (zero below); the
// next one the high words: 32 bf16 widened by two instructions (in lane-interleaved order).
#define EA_LP_BFUNPCK(i) \
  "vpunpcklwd %%zmm12, %%zmm14, %%zmm" #i "\n\tvpunpckhwd %%zmm12, %%zmm14, %%zmm" #i "\n\t"
#define EA_LP_CVTPS2PH(i) "vcvtps2ph $0, %%zmm12, %%ymm" #i "\n\t"
#define EA_LP_CVTNEBF(i) "vcvtneps2bf16 %%zmm12, %%ymm" #i "\n\t"

// One loop function: `name`, its target features, the body repeated (R12 or R24) per iteration.
#define EA_LP_LOOP(name, isa, body)                                                        \
  __attribute__((target(isa), noinline)) void name(long n, const void* c, const void* p) { \
    asm volatile(EA_LP_R24(EA_LP_ZERO) EA_LP_SOURCES body EA_LP_LOOP_END                   \
                 : [n] "+r"(n)                                                             \
                 : [c] "r"(c), [p] "r"(p)                                                  \
                 : EA_LP_CLOBBERS);                                                        \
  }

EA_LP_LOOP(fma12, "avx512f", EA_LP_R12(EA_LP_FMA))
EA_LP_LOOP(fma24, "avx512f", EA_LP_R24(EA_LP_FMA))
EA_LP_LOOP(fma_chain, "avx512f", EA_LP_R12(EA_LP_FMA0))
EA_LP_LOOP(dp12, "avx512f,avx512bf16", EA_LP_R12(EA_LP_DP))
EA_LP_LOOP(dp24, "avx512f,avx512bf16", EA_LP_R24(EA_LP_DP))
EA_LP_LOOP(dp_chain, "avx512f,avx512bf16", EA_LP_R12(EA_LP_DP0))
EA_LP_LOOP(fmaph12, "avx512f,avx512fp16", EA_LP_R12(EA_LP_FMAPH))
EA_LP_LOOP(cvtph12, "avx512f", EA_LP_R12(EA_LP_CVTPH))
EA_LP_LOOP(cvtph12_mem, "avx512f", EA_LP_R12(EA_LP_CVTPH_M))
EA_LP_LOOP(bfzx12, "avx512f", EA_LP_R12(EA_LP_BFZX))
EA_LP_LOOP(bfzx12_mem, "avx512f", EA_LP_R12(EA_LP_BFZX_M))
EA_LP_LOOP(bfunpck12, "avx512f,avx512bw", EA_LP_R12(EA_LP_BFUNPCK))
EA_LP_LOOP(cvtps2ph12, "avx512f", EA_LP_R12(EA_LP_CVTPS2PH))
EA_LP_LOOP(cvtnebf12, "avx512f,avx512bf16", EA_LP_R12(EA_LP_CVTNEBF))

// AMX: CPUID leaf 7 EDX bits 22 (AMX-BF16) and 24 (AMX-TILE), and Linux's permission for this
// process to use the tile data (XFEATURE_XTILEDATA = 18), asked once.
bool amx_usable() {
  static const bool usable = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    if ((edx & (1u << 22)) == 0 || (edx & (1u << 24)) == 0) return false;
#if defined(__linux__) && defined(SYS_arch_prctl)
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return usable;
}

// The tile configuration (palette 1): tiles 0-7 of 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
  std::uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  std::uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
// Four tdpbf16ps per iteration into four accumulator tiles (0-3) from two A (4, 5) and two B
// (6, 7) tiles loaded once from `p` (1 KiB of bfloat16 ones).
__attribute__((target("amx-tile,amx-bf16"), noinline)) void amx4(long n, const void*, const void* p) {
  // Static: GCC's _tile_loadconfig tells the compiler it reads 8 bytes only, so a local
  // configuration's other stores could be dropped before it.
  static const TileConfig config;
  _tile_loadconfig(&config);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, p, 64);
  _tile_loadd(5, p, 64);
  _tile_loadd(6, p, 64);
  _tile_loadd(7, p, 64);
  for (long i = 0; i < n; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_release();
}

// 48 dependent integer adds per iteration, register to register: 48 cycles (an add's latency is
// one cycle on every x86-64 core of this century; an add of an immediate would not do: Golden
// Cove's renamer folds chains of those), the loop counter running beside them.
#define EA_LP_ADD4 "add %[one], %[x]\n\tadd %[one], %[x]\n\tadd %[one], %[x]\n\tadd %[one], %[x]\n\t"
#define EA_LP_IMUL4 "imul %[one], %[x]\n\timul %[one], %[x]\n\timul %[one], %[x]\n\timul %[one], %[x]\n\t"
#define EA_LP_X12(M) M M M M M M M M M M M M
__attribute__((noinline)) void add_chain(long n, const void*, const void*) {
  long x = 0, one = 1;
  asm volatile(".p2align 5\n1:\n\t" EA_LP_X12(EA_LP_ADD4) "dec %[n]\n\tjnz 1b\n\t"
               : [n] "+r"(n), [x] "+r"(x)
               : [one] "r"(one)
               : "cc");
  g_sink = g_sink + double(x);
}
// The same with imul (3 cycles each on Intel and AMD cores since Sandy Bridge and Zen): a check.
__attribute__((noinline)) void imul_chain(long n, const void*, const void*) {
  long x = 1, one = 1;
  asm volatile(".p2align 5\n1:\n\t" EA_LP_X12(EA_LP_IMUL4) "dec %[n]\n\tjnz 1b\n\t"
               : [n] "+r"(n), [x] "+r"(x)
               : [one] "r"(one)
               : "cc");
  g_sink = g_sink + double(x);
}

// ---------------------------------------------------------------------------------------------
// The table

using Loop = void (*)(long, const void*, const void*);

enum class Unit { Flops, Elements, Latency };

struct UnitRow {
  const char* what;     // the instruction(s) and the loop
  const char* feature;  // for __builtin_cpu_supports, besides avx512f; nullptr: avx512f only
  Loop loop;
  double instr;      // instructions per iteration
  double per_instr;  // FLOPs (Flops), elements (Elements) per instruction
  Unit unit;
  std::uint32_t c;  // the 32-bit pattern broadcast into the sources
};

// CPU and OS support (__builtin_cpu_supports needs a literal name).
bool supports(const char* feature) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f")) return false;
  if (feature == nullptr) return true;
  const std::string f = feature;
  if (f == "avx512bf16") return __builtin_cpu_supports("avx512bf16");
  if (f == "avx512fp16") return cpu_has_avx512fp16();
  if (f == "avx512bw") return __builtin_cpu_supports("avx512bw");
  if (f == "amx-bf16") return amx_usable();
  return false;
}

// Seconds of one call of `loop` (kIterations iterations): the median of 5 runs.
double time_loop(const Args& a, Loop loop, std::uint32_t c) {
  // 12 x 32 bytes for the vector loops' memory operands, in L1 after the warm-up; 1 KiB of
  // bfloat16 ones for the AMX loop's tiles.
  alignas(64) static std::uint16_t buffer[16 * 32];
  for (int i = 0; i < 16 * 32; ++i)
    buffer[i] = loop == amx4 ? std::uint16_t(0x3F80) : static_cast<std::uint16_t>(0x3C00 + i);
  return measure(a.unit_seconds, 5, [&] { loop(kIterations, &c, buffer); }).median;
}

}  // namespace
#endif

void units_section(const Args& a, UnitsReport& report) {
  std::printf(
      "vector units, one core (inline assembly; each loop runs %ld iterations per call, the median of 5\n"
      "runs of back-to-back calls of ~%.2g s each; 12 or 24 = independent accumulators, chain = one):\n",
      long(1 << 16), a.unit_seconds / 5);
#if EA_LP_UNITS
  report.has_bf16 = supports("avx512bf16");
  report.has_fp16 = supports("avx512fp16");
  // The clock, measured again beside every row (before and after it): on a busy host the share of
  // the core this process gets drifts, and each row's per-cycle rates use its own clock.
  const auto clock_ghz = [&] { return 48.0 * double(kIterations) / time_loop(a, add_chain, 0) / 1e9; };
  report.clock_ghz = clock_ghz();
  std::printf(
      "  clock     %.2f GHz: a chain of dependent integer adds, 1 cycle each (check: a chain of imuls,\n"
      "            3 cycles each, gives %.2f GHz); each row below measures it again before and after\n"
      "            itself, and its per-cycle columns use the mean of the two (clk GHz)\n\n",
      report.clock_ghz, 3 * 48.0 * double(kIterations) / time_loop(a, imul_chain, 0) / 1e9);
  const std::uint32_t one_f = 0x3F800000u, one_bf = 0x3F803F80u, one_h = 0x3C003C00u;
  const UnitRow units[] = {
      {"vfmadd231ps zmm, 12 acc", nullptr, fma12, 12, 32, Unit::Flops, one_f},
      {"vfmadd231ps zmm, 24 acc", nullptr, fma24, 24, 32, Unit::Flops, one_f},
      {"vdpbf16ps zmm, 12 acc", "avx512bf16", dp12, 12, 64, Unit::Flops, one_bf},
      {"vdpbf16ps zmm, 24 acc", "avx512bf16", dp24, 24, 64, Unit::Flops, one_bf},
      {"vfmadd231ph zmm, 12 acc (half sums)", "avx512fp16", fmaph12, 12, 64, Unit::Flops, one_h},
      {"tdpbf16ps tmm (AMX), 4 acc tiles", "amx-bf16", amx4, 4, 16384, Unit::Flops, one_bf},
      {"vfmadd231ps zmm, chain", nullptr, fma_chain, 12, 32, Unit::Latency, one_f},
      {"vdpbf16ps zmm, chain", "avx512bf16", dp_chain, 12, 64, Unit::Latency, one_bf},
      {"vcvtph2ps zmm <- ymm (half)", nullptr, cvtph12, 12, 16, Unit::Elements, one_h},
      {"vcvtph2ps zmm <- m256, L1 (half)", nullptr, cvtph12_mem, 12, 16, Unit::Elements, one_h},
      {"vpmovzxwd+vpslld zmm <- ymm (bf16)", nullptr, bfzx12, 24, 8, Unit::Elements, one_bf},
      {"vpmovzxwd m256+vpslld, L1 (bf16)", nullptr, bfzx12_mem, 24, 8, Unit::Elements, one_bf},
      {"vpunpck[lh]wd zmm with 0 (bf16)", "avx512bw", bfunpck12, 24, 16, Unit::Elements, one_bf},
      {"vcvtps2ph ymm <- zmm (to half)", nullptr, cvtps2ph12, 12, 16, Unit::Elements, one_f},
      {"vcvtneps2bf16 ymm <- zmm (to bf16)", "avx512bf16", cvtnebf12, 12, 16, Unit::Elements, one_f},
  };
  std::printf("  %-38s | %9s %7s %9s | %9s %9s | %s\n", "loop", "G instr/s", "clk GHz", "instr/cyc",
              "GFLOP/s", "G elem/s", "");
  double fma_flops_per_cycle = kNaN, dp_ratio = kNaN, dp24_ratio = kNaN, amx_ratio = kNaN;
  for (const UnitRow& u : units) {
    if (!supports(u.feature)) {
      std::printf("  %-38s | absent: this CPU (or its OS) lacks avx512f%s%s\n", u.what,
                  u.feature != nullptr ? " or " : "", u.feature != nullptr ? u.feature : "");
      continue;
    }
    const double before = clock_ghz();
    const double s = time_loop(a, u.loop, u.c);
    const double ghz = 0.5 * (before + clock_ghz());
    const double ips = u.instr * double(kIterations) / s;  // instructions per second
    const double per_cycle = ips / (ghz * 1e9);
    if (u.unit == Unit::Latency) {
      std::printf("  %-38s | %9.2f %7.2f %9.3f | %9s %9s | latency %.2f cycles\n", u.what, ips / 1e9, ghz,
                  per_cycle, "-", "-", 1 / per_cycle);
      continue;
    }
    const double flops = u.unit == Unit::Flops ? ips * u.per_instr / 1e9 : kNaN;
    const double elems = u.unit == Unit::Elements ? ips * u.per_instr / 1e9 : kNaN;
    std::string note;
    if (u.unit == Unit::Flops) {
      note = fmt(per_cycle * u.per_instr, 1) + " FLOPs/cycle";
      if (std::isfinite(fma_flops_per_cycle)) {
        const double x = per_cycle * u.per_instr / fma_flops_per_cycle;
        note += ", " + fmt(x, 2) + "x vfmadd231ps per FLOP";
        if (u.loop == dp12) dp_ratio = x;
        if (u.loop == dp24) dp24_ratio = x;
        if (u.loop == amx4) amx_ratio = x;
      }
    }
    if (u.unit == Unit::Elements) note = fmt(per_cycle * u.per_instr, 1) + " elements/cycle";
    std::printf("  %-38s | %9.2f %7.2f %9.3f | %9s %9s | %s\n", u.what, ips / 1e9, ghz, per_cycle,
                fmt(flops).c_str(), fmt(elems, 2).c_str(), note.c_str());
    if (u.loop == fma12) {
      report.fma_gflops = flops;
      fma_flops_per_cycle = per_cycle * u.per_instr;
    }
    if (u.loop == dp12) report.dpbf16_gflops = flops;
    if (u.loop == dp24) report.dpbf16_24_gflops = flops;
    std::fflush(stdout);
  }
  if (!report.has_bf16) std::printf("  the AVX512-BF16 unit is absent here (vdpbf16ps not measured)\n");
  if (std::isfinite(dp_ratio)) {
    std::printf(
        "  => per FLOP and cycle, vdpbf16ps (12 acc) runs at %.2fx (24 acc: %.2fx) the rate of vfmadd231ps:\n"
        "     a bf16 kernel built on vdpbf16ps would %s FP32 FMAs on widened tiles in its two products "
        "here\n",
        dp_ratio, dp24_ratio, std::max(dp_ratio, dp24_ratio) > 1 ? "beat" : "not beat");
  }
  if (std::isfinite(amx_ratio)) {
    std::printf(
        "  => per FLOP and cycle, AMX's tdpbf16ps runs at %.2fx the rate of vfmadd231ps (Kernel::Amx's\n"
        "     unit: the bf16 forward, backward and prefill)\n",
        amx_ratio);
  }
#else
  (void)a;
  (void)report;
  std::printf("  not measured: this build is not x86-64 with GCC or Clang\n");
#endif
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace ea_low_precision_bench
