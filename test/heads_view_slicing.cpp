// SPDX-License-Identifier: MIT
// HeadsView::batch_slice, head_slice and token_slice: the same elements and strides along one
// axis, any layout; a slice with no element takes no offset (a null view stays null).
#include <doctest/doctest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include <EigenAttention/EigenAttention.hpp>

namespace test_heads_view_slicing {

namespace ea = EigenAttention;

TEST_CASE_TEMPLATE("heads view slicing: batches, heads and tokens of either layout", T, float, double) {
  const std::ptrdiff_t B = 3, H = 4, Tn = 5, D = 2;
  std::vector<T> buffer(static_cast<size_t>(B * H * Tn * D));
  std::iota(buffer.begin(), buffer.end(), T(0));
  for (const ea::Layout layout : {ea::Layout::BHTD, ea::Layout::BTHD}) {
    const auto v = ea::HeadsView<T>::contiguous(buffer.data(), layout, B, H, Tn, D);
    const auto s = v.batch_slice(1, 2).head_slice(2, 2).token_slice(1, 3);
    CHECK(s.batch == 2);
    CHECK(s.heads == 2);
    CHECK(s.tokens == 3);
    CHECK(s.dim == D);
    CHECK(s.batch_stride == v.batch_stride);
    CHECK(s.head_stride == v.head_stride);
    CHECK(s.token_stride == v.token_stride);
    CHECK(s.dim_stride == v.dim_stride);
    for (std::ptrdiff_t b = 0; b < s.batch; ++b)
      for (std::ptrdiff_t h = 0; h < s.heads; ++h)
        CHECK(s.head(b, h).isApprox(v.head(b + 1, h + 2).middleRows(1, 3), T(0)));
    // Const views slice the same way.
    const ea::HeadsView<const T> c = v;
    CHECK(c.token_slice(4, 1).head(2, 3)(0, 1) == v.head(2, 3)(4, 1));
  }
}

TEST_CASE("heads view slicing: a slice with no element takes no offset") {
  const ea::HeadsView<float> none{nullptr, 2, 3, 0, 4, 100, 10, 4, 1};
  CHECK(none.batch_slice(1, 1).data == nullptr);  // no token: no element, no offset
  CHECK(none.head_slice(2, 1).data == nullptr);
  std::vector<float> buffer(24);
  const auto v = ea::HeadsView<float>::bhtd(buffer.data(), 2, 3, 1, 4);
  CHECK(v.token_slice(1, 0).data == buffer.data());  // count 0 past the end: no offset
  CHECK(v.token_slice(1, 0).tokens == 0);
  CHECK(v.head_slice(3, 0).data == buffer.data());
  CHECK(v.head_slice(1, 2).data == buffer.data() + 4);
  CHECK(v.batch_slice(1, 1).data == buffer.data() + 12);
}

TEST_CASE_TEMPLATE("LSE-only form: the log-sum-exps of attention_heads_into, without V (GQA too)", T, float,
                   double) {
  const std::ptrdiff_t B = 2, H = 4, Hkv = 2, Tq = 7, Tk = 9, D = 8;
  std::vector<T> q(static_cast<size_t>(B * H * Tq * D)), k(static_cast<size_t>(B * Hkv * Tk * D)),
      v(static_cast<size_t>(B * Hkv * Tk * D)), out(q.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = T(std::sin(0.37 * double(i)));
  for (size_t i = 0; i < k.size(); ++i) k[i] = T(std::cos(0.21 * double(i))), v[i] = T(0.5);
  std::vector<T> lse(static_cast<size_t>(B * H * Tq)), lse_only(lse.size(), T(-9));
  const auto Q = ea::HeadsView<const T>::bhtd(q.data(), B, H, Tq, D);
  const auto K = ea::HeadsView<const T>::bhtd(k.data(), B, Hkv, Tk, D);
  const auto V = ea::HeadsView<const T>::bhtd(v.data(), B, Hkv, Tk, D);
  ea::Options opt;
  opt.causal = true;
  opt.window_left = 3;
  ea::attention_heads_into(Q, K, V, ea::HeadsView<T>::bhtd(out.data(), B, H, Tq, D),
                           ea::HeadsView<T>::bhtd(lse.data(), B, H, Tq, 1), opt);
  ea::abi::attention_heads_lse_into(Q, K, ea::HeadsView<T>::bhtd(lse_only.data(), B, H, Tq, 1), opt, {});
  CHECK(lse_only == lse);
  // An LSE of the wrong shape is reported by the core's check.
  CHECK_THROWS_WITH_AS(ea::abi::attention_heads_lse_into(
                           Q, K, ea::HeadsView<T>::bhtd(lse_only.data(), B, H, Tq - 1, 1), opt, {}),
                       doctest::Contains("EigenAttention::attention_heads_lse_into: lse is"),
                       std::invalid_argument);
}

}  // namespace test_heads_view_slicing
