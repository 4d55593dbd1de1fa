// SPDX-License-Identifier: MIT
// merge_attention_into's checks (call.hpp).
#include <algorithm>

#include "check/array.hpp"
#include "check/call.hpp"
#include "check/options.hpp"
#include "check/overlap.hpp"

namespace EigenAttention {
namespace internal {

template <typename T>
void check_merge(const char* api, HeadsView<const T> attn_a, HeadsView<const ComputeScalar<T>> lse_a,
                 HeadsView<const T> attn_b, HeadsView<const ComputeScalar<T>> lse_b, HeadsView<T> attn,
                 HeadsView<ComputeScalar<T>> lse, const Options& opt) {
  check_threads(api, opt);
  const Form f = Form::Heads;
  const Array oa = array_of("attn_a", attn_a, f), la = array_of("lse_a", lse_a, f),
              ob = array_of("attn_b", attn_b, f), lb = array_of("lse_b", lse_b, f),
              o = array_of("attn", attn, f), l = array_of("lse", lse, f);
  const auto same_shape = [&](const Array& a, const Array& b) {
    check_sizes(api, a);
    if (!std::equal(a.size, a.size + 4, b.size)) {
      fail(api, std::string(a.name) + " is " + a.shape() + " but " + b.name + " is " + b.shape());
    }
  };
  check_sizes(api, oa);
  same_shape(ob, oa);
  same_shape(o, oa);
  check_sizes(api, la);
  Array must = la;
  must.size[0] = attn_a.batch, must.size[1] = attn_a.heads, must.size[2] = attn_a.tokens, must.size[3] = 1;
  if (!std::equal(la.size, la.size + 4, must.size)) {
    fail(api, "lse_a is " + la.shape() + " but must be " + must.shape() + " ([B, H, T, 1])");
  }
  same_shape(lb, la);
  same_shape(l, la);
  check_distinct_elements(api, o);
  check_distinct_elements(api, l);
  // An output may be exactly one of the inputs (merging in place) or apart from all of them: a
  // partial overlap would read values already overwritten.
  const auto alias_or_apart = [&](const Array& out_array, const Array& in) {
    const bool same = out_array.data == in.data && std::equal(out_array.size, out_array.size + 4, in.size) &&
                      std::equal(out_array.stride, out_array.stride + 4, in.stride);
    if (!same) check_apart(api, out_array, in);
  };
  for (const Array* in : {&oa, &la, &ob, &lb}) {
    alias_or_apart(o, *in);
    alias_or_apart(l, *in);
  }
  check_apart(api, o, l);
}

template void check_merge<float>(const char*, HeadsView<const float>, HeadsView<const float>,
                                 HeadsView<const float>, HeadsView<const float>, HeadsView<float>,
                                 HeadsView<float>, const Options&);
template void check_merge<double>(const char*, HeadsView<const double>, HeadsView<const double>,
                                  HeadsView<const double>, HeadsView<const double>, HeadsView<double>,
                                  HeadsView<double>, const Options&);
template void check_merge<BFloat16Bits>(const char*, HeadsView<const BFloat16Bits>, HeadsView<const float>,
                                        HeadsView<const BFloat16Bits>, HeadsView<const float>,
                                        HeadsView<BFloat16Bits>, HeadsView<float>, const Options&);
template void check_merge<HalfBits>(const char*, HeadsView<const HalfBits>, HeadsView<const float>,
                                    HeadsView<const HalfBits>, HeadsView<const float>, HeadsView<HalfBits>,
                                    HeadsView<float>, const Options&);

}  // namespace internal
}  // namespace EigenAttention
