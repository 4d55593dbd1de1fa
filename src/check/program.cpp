// SPDX-License-Identifier: MIT
// The programmable parts of a call's masks (program.hpp).
#include "check/program.hpp"

#include <string>

#include "check/array.hpp"

namespace EigenAttention {
namespace internal {

template <typename T>
void check_program(const Call<T>& c, const ResolvedOptions<ComputeScalar<T>>& o) {
  const BlockMaskView& bm = c.masks.block_mask;
  if (bm.empty()) return;
  const std::string it = "masks.block_mask [" + num(bm.batch) + ", " + num(bm.heads) + ", " + num(bm.rows) +
                         ", " + num(bm.cols) + "] of " + num(bm.block_rows) + "x" + num(bm.block_cols) +
                         " tiles";
  if (bm.block_rows < 1 || bm.block_cols < 1 || bm.rows < 0 || bm.cols < 0)
    fail(c.api, it + ": its sizes must be >= 0 and its tiles >= 1");
  const bool packed = c.packed.has_value();
  const index_t B = packed ? c.packed->sequences : c.in.q.batch, H = c.in.q.heads;
  if ((bm.batch != 1 && bm.batch != B) || (bm.heads != 1 && bm.heads != H))
    fail(c.api,
         it + ": its batch must be 1 or " + num(B) + " and its heads 1 or " + num(H) + " (the query heads)");
  for (index_t b = 0; b < B; ++b) {
    // Sequence b's query rows and keys, and the positions its call measures (Programmable.hpp).
    index_t tq = c.in.q.tokens, tk = c.in.k.tokens, keys = tk;
    if (c.paged) {
      tq = c.packed->cu_q[b + 1] - c.packed->cu_q[b], tk = keys = c.paged->sequences[b].length;
    } else if (packed) {
      tq = c.packed->cu_q[b + 1] - c.packed->cu_q[b], tk = keys = c.packed->cu_k[b + 1] - c.packed->cu_k[b];
    } else if (c.masks.key_lengths != nullptr) {
      keys = c.masks.key_lengths[b];
    }
    const bool sizes = packed ? tq <= bm.rows && tk <= bm.cols : tq == bm.rows && tk == bm.cols;
    if (!sizes) {
      fail(c.api, it +
                      (packed ? " does not cover sequence " + num(b) + "'s " : " does not fit T_q x T_k = ") +
                      num(tq) + "x" + num(tk));
    }
    const index_t offset = c.paged ? keys - tq : o.fixed_offset ? o.offset : o.bottom_right ? keys - tq : 0;
    const index_t origin = c.paged ? 0 : o.chunk_origin;
    if (offset != bm.offset || origin != bm.origin) {
      fail(c.api, it + " was evaluated with query positions i + " + num(bm.offset) + " and key origin " +
                      num(bm.origin) + ", but the call's " +
                      (B > 1 ? "sequence " + num(b) + " has " : "are ") + "i + " + num(offset) + " and " +
                      num(origin) + " (build it with the call's Options, or set Options::diagonal_offset)");
    }
  }
  if (c.masks.mask_mod.empty() && has_partial_tiles(bm))
    fail(c.api, it + " has Partial tiles, which need masks.mask_mod to decide them (none is given)");
}

template void check_program<float>(const Call<float>&, const ResolvedOptions<float>&);
template void check_program<double>(const Call<double>&, const ResolvedOptions<double>&);
template void check_program<BFloat16Bits>(const Call<BFloat16Bits>&, const ResolvedOptions<float>&);
template void check_program<HalfBits>(const Call<HalfBits>&, const ResolvedOptions<float>&);

}  // namespace internal
}  // namespace EigenAttention
