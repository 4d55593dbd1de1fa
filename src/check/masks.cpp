// SPDX-License-Identifier: MIT
// The masks of a call, or the offsets of a packed batch (masks.hpp).
#include "check/masks.hpp"

#include "check/options.hpp"

namespace EigenAttention {
namespace internal {
namespace {

template <typename T>
void check_packed(const Call<T>& c, const PackedSequences& s, InputList& inputs) {
  const char* api = c.api;
  if (s.cu_q == nullptr || s.cu_k == nullptr) fail(api, "cu_seqlens_q and cu_seqlens_k must both be given");
  check_sequence_count(api, s.sequences);
  if (c.in.q.batch != 1) {
    fail(api,
         "a packed batch has batch size 1 in its views, but Q is " + array_of("Q", c.in.q, c.form).shape());
  }
  if (!c.masks.mask.empty() || !c.masks.bias.empty() || c.masks.key_lengths != nullptr) {
    fail(api,
         "a packed variable-length batch takes no mask, bias or key_lengths (ALiBi, causal and window "
         "apply)");
  }
  check_offsets(api, "cu_seqlens_q", s.cu_q, s.sequences, c.in.q.tokens);
  check_offsets(api, "cu_seqlens_k", s.cu_k, s.sequences, c.in.k.tokens);
  inputs.push_back(vector_of("cu_seqlens_q", s.cu_q, s.sequences + 1));
  inputs.push_back(vector_of("cu_seqlens_k", s.cu_k, s.sequences + 1));
}

/// A mask or bias of [B or 1, H or 1, T_q, T_k] (T_q x T_k for the single-head calls).
template <typename T, typename Element>
void check_broadcast(const Call<T>& c, const char* name, const BroadcastView<Element>& m, InputList& inputs) {
  if (m.empty()) return;
  const index_t B = c.in.q.batch, H = c.in.q.heads, tq = c.in.q.tokens, tk = c.in.k.tokens;
  const Array a = array_of(name, m, c.form);
  const bool batch_ok = m.batch == 1 || m.batch == B, heads_ok = m.heads == 1 || m.heads == H;
  if (!batch_ok || !heads_ok || m.rows != tq || m.cols != tk) {
    fail(c.api, std::string(name) + " is " + a.shape() + " but must be " +
                    (c.form == Form::Matrix ? num(tq) + "x" + num(tk) + " (T_q x T_k)"
                                            : "[" + either_or_1(B) + ", " + either_or_1(H) + ", " + num(tq) +
                                                  ", " + num(tk) + "]"));
  }
  check_countable(c.api, a);
  inputs.push_back(a);
}

template <typename T>
void check_key_lengths(const Call<T>& c, InputList& inputs) {
  const index_t B = c.in.q.batch, tk = c.in.k.tokens;
  const std::int64_t* lengths = c.masks.key_lengths;
  const Array a = vector_of("key_lengths", lengths, B);
  check_countable(c.api, a);
  for (index_t b = 0; b < B; ++b) {
    if (lengths[b] < 0 || lengths[b] > tk) {
      fail(c.api, "key_lengths[" + num(b) + "] = " + std::to_string(lengths[b]) +
                      " is outside [0, T_k = " + num(tk) + "]");
    }
  }
  inputs.push_back(a);
}

}  // namespace

template <typename T>
void check_masks(const Call<T>& c, InputList& inputs) {
  if (c.packed) {
    check_packed(c, *c.packed, inputs);
  } else {
    check_broadcast(c, "mask", c.masks.mask, inputs);
    check_broadcast(c, "bias", c.masks.bias, inputs);
    if (c.masks.key_lengths != nullptr) check_key_lengths(c, inputs);
  }
  if (c.masks.alibi_slopes != nullptr)
    inputs.push_back(vector_of("alibi_slopes", c.masks.alibi_slopes, c.in.q.heads));
  if (c.masks.sinks != nullptr) inputs.push_back(vector_of("sinks", c.masks.sinks, c.in.q.heads));
}

template void check_masks<float>(const Call<float>&, InputList&);
template void check_masks<double>(const Call<double>&, InputList&);
template void check_masks<BFloat16Bits>(const Call<BFloat16Bits>&, InputList&);
template void check_masks<HalfBits>(const Call<HalfBits>&, InputList&);

}  // namespace internal
}  // namespace EigenAttention
