// merge_attention (MultiHead.hpp): combine two partial results over disjoint key sets.
#include <EigenAttention/MultiHead.hpp>

#include "validate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace EigenAttention {
namespace {

template <typename T>
void merge(HeadsView<const T> out_a, HeadsView<const T> lse_a, HeadsView<const T> out_b,
           HeadsView<const T> lse_b, HeadsView<T> out, HeadsView<T> lse) {
  internal::check_merge<T>("merge_attention", out_a, lse_a, out_b, lse_b, out, lse);
  const T minus_inf = -std::numeric_limits<T>::infinity();
  // Row (b, h, i) of a view. An empty row (d_v = 0) takes no offset: its view's data may be null.
  const auto row = [](const auto& v, Eigen::Index b, Eigen::Index h, Eigen::Index i) {
    return v.dim == 0 ? v.data : v.data + b * v.batch_stride + h * v.head_stride + i * v.token_stride;
  };
  const Eigen::Index dim = out_a.dim;
  for (Eigen::Index b = 0; b < out_a.batch; ++b) {
    for (Eigen::Index h = 0; h < out_a.heads; ++h) {
      for (Eigen::Index i = 0; i < out_a.tokens; ++i) {
        const T la = *row(lse_a, b, h, i), lb = *row(lse_b, b, h, i);
        const T* oa = row(out_a, b, h, i);
        const T* ob = row(out_b, b, h, i);
        T* o = row(out, b, h, i);
        T* l = row(lse, b, h, i);
        if (la == minus_inf || lb == minus_inf) {
          // A side that saw no key contributes nothing, whatever its out row holds (it should be
          // zeros, but 0 * NaN would still be NaN): the result is the other side, exactly.
          const bool take_b = la == minus_inf;
          const T* src = take_b ? ob : oa;
          const Eigen::Index stride = take_b ? out_b.dim_stride : out_a.dim_stride;
          for (Eigen::Index c = 0; c < dim; ++c) {
            o[c * out.dim_stride] = lb == minus_inf && la == minus_inf ? T(0) : src[c * stride];
          }
          *l = take_b ? lb : la;
          continue;
        }
        const T m = std::isnan(la) || std::isnan(lb) ? la + lb : std::max(la, lb);
        const T wa = std::exp(la - m), wb = std::exp(lb - m);
        const T total = wa + wb;
        for (Eigen::Index c = 0; c < dim; ++c) {
          // Read both before writing: out may be out_a or out_b (merging in place).
          const T va = oa[c * out_a.dim_stride], vb = ob[c * out_b.dim_stride];
          o[c * out.dim_stride] = (wa * va + wb * vb) / total;
        }
        *l = m + std::log(total);
      }
    }
  }
}

}  // namespace

void merge_attention(HeadsView<const float> out_a, HeadsView<const float> lse_a, HeadsView<const float> out_b,
                     HeadsView<const float> lse_b, HeadsView<float> out, HeadsView<float> lse) {
  merge(out_a, lse_a, out_b, lse_b, out, lse);
}
void merge_attention(HeadsView<const double> out_a, HeadsView<const double> lse_a,
                     HeadsView<const double> out_b, HeadsView<const double> lse_b, HeadsView<double> out,
                     HeadsView<double> lse) {
  merge(out_a, lse_a, out_b, lse_b, out, lse);
}

}  // namespace EigenAttention
