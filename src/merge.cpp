// merge_attention (MultiHead.hpp): combine two partial results over disjoint key sets.
#include <EigenAttention/MultiHead.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <limits>
#include <stdexcept>
#include <string>

namespace EigenAttention {
namespace {

template <class View>
std::string dims(const View& v) {
  return "[" + std::to_string(v.batch) + ", " + std::to_string(v.heads) + ", " + std::to_string(v.tokens) + ", " +
         std::to_string(v.dim) + "]";
}

template <class A, class B>
void same_shape(const char* a_name, const A& a, const char* b_name, const B& b) {
  if (a.batch != b.batch || a.heads != b.heads || a.tokens != b.tokens || a.dim != b.dim) {
    throw std::invalid_argument(std::string("EigenAttention::merge_attention: ") + a_name + " is " + dims(a) +
                                " but " + b_name + " is " + dims(b));
  }
}

// The bytes a view may touch.
template <class View>
bool extent(const View& v, std::uintptr_t& lo, std::uintptr_t& hi) {
  if (v.data == nullptr || v.batch * v.heads * v.tokens * v.dim == 0) return false;
  const Eigen::Index size = static_cast<Eigen::Index>(sizeof(*v.data));
  Eigen::Index low = 0, high = 0;
  for (const auto [n, stride] : {std::pair{v.batch, v.batch_stride}, std::pair{v.heads, v.head_stride},
                                 std::pair{v.tokens, v.token_stride}, std::pair{v.dim, v.dim_stride}}) {
    const Eigen::Index reach = (n - 1) * stride * size;
    low += std::min<Eigen::Index>(reach, 0);
    high += std::max<Eigen::Index>(reach, 0);
  }
  lo = reinterpret_cast<std::uintptr_t>(v.data) + low;
  hi = reinterpret_cast<std::uintptr_t>(v.data) + high + size - 1;
  return true;
}

// An output may be exactly an input (merging in place) or apart from it; a partial overlap
// would read values already overwritten.
template <class Out, class In>
void check_alias(const char* out_name, const Out& out, const char* in_name, const In& in) {
  const bool same = static_cast<const void*>(out.data) == static_cast<const void*>(in.data) &&
                    out.batch_stride == in.batch_stride && out.head_stride == in.head_stride &&
                    out.token_stride == in.token_stride && out.dim_stride == in.dim_stride &&
                    out.dim == in.dim;
  std::uintptr_t a_lo, a_hi, b_lo, b_hi;
  if (same || !extent(out, a_lo, a_hi) || !extent(in, b_lo, b_hi)) return;
  if (a_lo <= b_hi && b_lo <= a_hi) {
    throw std::invalid_argument(std::string("EigenAttention::merge_attention: ") + out_name + " " + dims(out) +
                                " overlaps " + in_name + " " + dims(in) +
                                " without being the same view; merge in place by passing the same view");
  }
}

template <typename T>
void merge(HeadsView<const T> out_a, HeadsView<const T> lse_a, HeadsView<const T> out_b, HeadsView<const T> lse_b,
           HeadsView<T> out, HeadsView<T> lse) {
  same_shape("out_b", out_b, "out_a", out_a);
  same_shape("out", out, "out_a", out_a);
  same_shape("lse_b", lse_b, "lse_a", lse_a);
  same_shape("lse", lse, "lse_a", lse_a);
  if (lse_a.dim != 1 || lse_a.batch != out_a.batch || lse_a.heads != out_a.heads || lse_a.tokens != out_a.tokens) {
    throw std::invalid_argument("EigenAttention::merge_attention: lse_a is " + dims(lse_a) + " but must be [" +
                                std::to_string(out_a.batch) + ", " + std::to_string(out_a.heads) + ", " +
                                std::to_string(out_a.tokens) + ", 1]");
  }
  check_alias("out", out, "out_a", out_a);
  check_alias("out", out, "out_b", out_b);
  check_alias("lse", lse, "lse_a", lse_a);
  check_alias("lse", lse, "lse_b", lse_b);
  check_alias("out", out, "lse_a", lse_a);
  check_alias("out", out, "lse_b", lse_b);
  check_alias("lse", lse, "out_a", out_a);
  check_alias("lse", lse, "out_b", out_b);
  check_alias("out", out, "lse", HeadsView<const T>(lse));
  const T minus_inf = -std::numeric_limits<T>::infinity();
  const auto row = [](const auto& v, Eigen::Index b, Eigen::Index h, Eigen::Index i) {
    return v.data + b * v.batch_stride + h * v.head_stride + i * v.token_stride;
  };
  for (Eigen::Index b = 0; b < out_a.batch; ++b) {
    for (Eigen::Index h = 0; h < out_a.heads; ++h) {
      for (Eigen::Index i = 0; i < out_a.tokens; ++i) {
        const T la = *row(lse_a, b, h, i), lb = *row(lse_b, b, h, i);
        const T* oa = row(out_a, b, h, i);
        const T* ob = row(out_b, b, h, i);
        T* o = row(out, b, h, i);
        if (la == minus_inf && lb == minus_inf) {  // neither part saw a key
          for (Eigen::Index c = 0; c < out_a.dim; ++c) o[c * out.dim_stride] = T(0);
          *row(lse, b, h, i) = minus_inf;
          continue;
        }
        const T m = std::isnan(la) || std::isnan(lb) ? la + lb : std::max(la, lb);
        const T wa = std::exp(la - m), wb = std::exp(lb - m);  // exp(-inf) = 0: a side that saw nothing
        const T total = wa + wb;
        for (Eigen::Index c = 0; c < out_a.dim; ++c) {
          // Read both before writing: out may be out_a or out_b (merging in place).
          const T va = oa[c * out_a.dim_stride], vb = ob[c * out_b.dim_stride];
          o[c * out.dim_stride] = (wa * va + wb * vb) / total;
        }
        *row(lse, b, h, i) = m + std::log(total);
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
