// SPDX-License-Identifier: MIT
// libFuzzer target: every attention call of EigenAttention on configurations decoded from the
// fuzz input, checked against the documented contract.
//
// What an input decodes into (bytes read front to back; past the end every byte reads 0):
//   [0] scalar type (bit 0: double) and "big" mode (bits 1-3 all set: long sequences that cross
//       the kernels' tiles and may use several threads); bit 4: Options::diagonal_offset, read
//       after the other options (decode_diagonal_offset: small offsets of both signs, +-2^60, one
//       past it and the type's extremes, which must throw); bits 5-6 both set: the 16-bit calls
//       (bit 7: Eigen::half, else Eigen::bfloat16) instead of float and double, against the float
//       calls on the widened inputs (fuzz_attention_lowp.cpp says what they decode and check)
//   [1] the call: attention, attention_into (+lse), attention_decomposed, attention_decomposed_into
//       (+lse), attention_scores, attention_scores_into (+lse, through Compiled.hpp),
//       attention_heads_into, attention_heads_decomposed_into, attention_varlen_into,
//       attention_varlen_decomposed_into, merge_attention_into; the backward: attention_backward and
//       attention_backward_into (with or without d_scores), attention_heads_backward_into (with or
//       without d_scores and d_bias), attention_varlen_backward_into
//   [2..] Options (causal, alignment incl. an invalid value, scale, windows, softcap, threads,
//       kernel incl. invalid values), then the shapes, layouts (row/col-major, padded,
//       reversed, zero strides), masks, bias, key lengths, ALiBi slopes, packed offsets,
//       deliberate faults (wrong shapes, outputs over inputs, claimed sizes far beyond the
//       buffers for sizes that validation must reject), for the backward where ATTN and LSE come
//       from (the library's forward on the same inputs, or arbitrary values), and the element
//       values (a palette of 0, +-1, small and large normals, NaN, +-Inf, denormals, +-1e38,
//       +-FLT_MAX; raw bits; or a PRNG seeded from the input).
//   [end] the multi-head calls, forward and backward: the attention sinks (Masks::sinks: none,
//       small values, -inf, NaN, large ones, raw bits); the multi-head backward then its
//       BackwardTerms (d_lse, with a shape fault at times, and whether d_sinks is wanted, with or
//       without sinks). Read after everything else, so that inputs from before they existed
//       decode as they did (the input's end reads as none).
// make_seeds.py writes the seed corpus in this format. Run an input with EA_FUZZ_VERBOSE=1 set
// to print what it decodes into.
//
// The contract checked:
// - each call either throws std::invalid_argument (std::length_error and std::bad_alloc are
//   tolerated too) or returns; it throws exactly when the configuration breaks a documented
//   rule (the model below mirrors MultiHead.hpp / Attention.hpp / Backward.hpp / Options.hpp),
//   and then writes nothing (the backward's resizable outputs keep their size and values too);
// - no call writes outside its outputs' elements, nor into any input;
// - a row that sees no key has zero SCORES, zero ATTN and LSE = -inf (its sink, with sinks);
//   hidden keys weigh exactly 0; every weight is in [0, 1] or NaN; a NaN sink makes its head's LSE
//   NaN, and the ATTN and visible weights of its rows that see a key with finite inputs;
// - a row whose inputs (its Q row, the K/V rows and bias entries of the keys it sees, the scale,
//   the ALiBi slope) are finite with magnitude <= 1e3 has no NaN, weights summing to 1 (1e-3),
//   a finite LSE and an ATTN inside the range of the V rows it sees; when its logits are also
//   small (<= 50) it matches a long-double reference (the sink one more term of its softmax: the
//   weights sum to 1 - P_sink);
// - merge_attention_into's rows follow its formula;
// - the backward (whatever ATTN and LSE hold): a row that sees no key has a zero dQ row, a key
//   that no row of its K/V head sees (padded keys included) zero dK and dV rows, and a dbias entry
//   that no (sequence, head) it sums over sees is 0 (an empty sum too); with the forward's ATTN
//   and LSE, a gradient element whose inputs (the rows that see it: their Q, dOUT, ATTN rows, LSE,
//   the K/V rows, bias and d_scores entries they see, the scale, the slope) are finite with
//   magnitude <= 1e3 is finite, and when their logits are also small (<= 50) it matches the
//   long-double reference of test/support/reference_backward.hpp within 4x its per-element bound,
//   sinks and dL/dLSE included; dL/dsinks is 0 without rows or for a sink of -inf, finite, and
//   the reference's sum when every row of its head is tame or sees no key;
// - results with several threads are bitwise equal to one thread's;
// - with Options::diagonal_offset, query row i's diagonal key is i + diagonal_offset in every
//   sequence (the per-row checks above measure the causal frontier, windows, chunks and ALiBi from
//   it; the backward's long-double reference knows the alignments only and is left out);
// - attention_heads_into without key lengths or a block mask: the distributed calls' local check
//   of a rank's shard (abi::check_shard, src/check/shard.hpp; it needs no MPI) on the same views
//   writes nothing and passes exactly when the call validates, or throws the call's message;
// - the 16-bit calls: fuzz_attention_lowp.cpp.
// A violation prints the decoded configuration and traps. Any other exception escapes (a crash).
//
// Files: this one decodes the scalar type and the call and dispatches; fuzz_attention_model.hpp
// holds what the calls share (memory, values, options, per-row checks); fuzz_overlap.hpp the
// model of the overlap rule; fuzz_attention_single.cpp, fuzz_attention_heads.cpp,
// fuzz_attention_merge.cpp and fuzz_attention_backward.cpp one call family each;
// fuzz_attention_lowp.cpp the 16-bit calls of the single-head, multi-head and backward families.

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "fuzz_attention_model.hpp"

namespace ea_fuzz_attention {
namespace {

template <class T>
void run(Call call, Reader& r, bool big, bool diagonal, int lowp16) {
  if (call == Call::Merge) {
    note(format("merge_attention_into<%s>", type_name<T>()));
    merge<T>(r);
    return;
  }
  const ea::Options opt = decode_options(r, diagonal);
  if (lowp16 != 0) {
    if (lowp16 == 1) {
      lowp<Eigen::bfloat16>(call, opt, r, big);
    } else {
      lowp<Eigen::half>(call, opt, r, big);
    }
    return;
  }
  if (int(call) <= int(Call::ScoresIntoLse)) {
    single<T>(call, opt, r, big);
  } else if (int(call) >= int(Call::Backward)) {
    note(format("backward: %s<%s>%s", call_name(call), type_name<T>(), big ? " (big)" : ""));
    backward<T>(call, opt, r, big);
  } else {
    note(format("multi-head: %s<%s>%s", call_name(call), type_name<T>(), big ? " (big)" : ""));
    heads<T>(call, opt, r, big);
  }
}

}  // namespace
}  // namespace ea_fuzz_attention

using namespace ea_fuzz_attention;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_verbose = std::getenv("EA_FUZZ_VERBOSE") != nullptr;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ea_fuzz::description().clear();
  g_printed = 0;
  Reader r(data, size);
  const std::uint8_t head = r.u8();
  const bool is_double = head & 1, big = (head & 0x0e) == 0x0e, diagonal = head & 0x10;
  const int lowp16 = (head & 0x60) != 0x60 ? 0 : (head & 0x80) ? 2 : 1;
  const Call call = static_cast<Call>(r.u8() % int(Call::kCount));
  if (is_double) {
    run<double>(call, r, big, diagonal, lowp16);
  } else {
    run<float>(call, r, big, diagonal, lowp16);
  }
  if (g_verbose) {
    std::fprintf(stderr, "%s(%zu of %zu input bytes used)\n", ea_fuzz::description().c_str() + g_printed,
                 r.consumed(), size);
  }
  return 0;
}
