// SPDX-License-Identifier: MIT
// The packed weights of attention_varlen_decomposed_into (call.hpp).
#include <vector>

#include "check/array.hpp"
#include "check/call.hpp"
#include "check/options.hpp"
#include "check/overlap.hpp"

namespace EigenAttention {
namespace internal {

std::vector<index_t> varlen_score_offsets(const char* api, const std::int64_t* cu_q, const std::int64_t* cu_k,
                                          index_t batch, index_t heads) {
  if (cu_q == nullptr || cu_k == nullptr) fail(api, "cu_seqlens_q and cu_seqlens_k must both be given");
  check_sequence_count(api, batch);
  if (heads < 0) fail(api, "the number of heads is negative: " + num(heads));
  check_offsets(api, "cu_seqlens_q", cu_q, batch, -1);
  check_offsets(api, "cu_seqlens_k", cu_k, batch, -1);
  std::vector<index_t> offsets(static_cast<std::size_t>(batch) + 1, 0);
  for (index_t b = 0; b < batch; ++b) {
    const index_t tq = cu_q[b + 1] - cu_q[b], tk = cu_k[b + 1] - cu_k[b];
    index_t block = 0, next = 0;
    if (!mul(tq, tk, block) || !mul(block, heads, block) || !add(offsets[b], block, next)) {
      fail(api, "the packed weights of " + counted(batch, "sequence") +
                    " overflow Eigen::Index at sequence " + num(b) + " (T_q = " + num(tq) +
                    ", T_k = " + num(tk) + ", heads = " + num(heads) + ")");
    }
    offsets[b + 1] = next;
  }
  return offsets;
}

template <typename T>
void check_packed_scores(const char* api, const T* scores, std::size_t size, std::size_t required,
                         const Problem<T>& p) {
  if (size != required) {
    fail(api, "scores holds " + counted(static_cast<long long>(size), "element") +
                  " but the packed weights need " + std::to_string(required) + " (varlen_scores_size)");
  }
  if (required > 0 && scores == nullptr) fail(api, "scores is null");
  const Form f = Form::Heads;
  const Array packed = vector_of("scores", scores, static_cast<index_t>(required));
  std::vector<Array> others = {array_of("Q", p.q, f), array_of("K", p.k, f), array_of("V", p.v, f),
                               vector_of("cu_seqlens_q", p.cu_q, p.sequences + 1),
                               vector_of("cu_seqlens_k", p.cu_k, p.sequences + 1)};
  if (p.want_out) others.push_back(array_of("attn", p.out, f));
  if (p.want_lse) others.push_back(array_of("lse", p.lse, f));
  if (p.masks.alibi_slopes != nullptr)
    others.push_back(vector_of("alibi_slopes", p.masks.alibi_slopes, p.q.heads));
  for (const Array& other : others) check_apart(api, packed, other);
}

template void check_packed_scores<float>(const char*, const float*, std::size_t, std::size_t,
                                         const Problem<float>&);
template void check_packed_scores<double>(const char*, const double*, std::size_t, std::size_t,
                                          const Problem<double>&);
template void check_packed_scores<BFloat16Bits>(const char*, const BFloat16Bits*, std::size_t, std::size_t,
                                                const Problem<BFloat16Bits>&);
template void check_packed_scores<HalfBits>(const char*, const HalfBits*, std::size_t, std::size_t,
                                            const Problem<HalfBits>&);

}  // namespace internal
}  // namespace EigenAttention
