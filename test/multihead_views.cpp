// SPDX-License-Identifier: MIT
// Other ways to describe the same tensors: views into one fused, padded QKV buffer (general
// strides), and Eigen tensors through HeadsView::from_tensor, row- and column-major.
#include <doctest/doctest.h>

#include <unsupported/Eigen/CXX11/Tensor>

#include "multihead_crosscheck.hpp"

namespace test_multihead_views {

using namespace ea_test;
using namespace ea_test::crosscheck;

TEST_CASE_TEMPLATE("multihead crosscheck: views into one fused, padded QKV buffer (general strides)", T,
                   float, double) {
  // A transformer's fused projection: per token [Q heads | K heads | V heads | 3 padding values],
  // so every view has token_stride = (H + 2 H_kv) D + 3 and a batch stride of T times that.
  Rng rng(21);
  Config c{"", 2, 6, 2, 11, 11, 8, 8};
  c.causal = c.alibi = true;
  c.window_left = 4;
  c.bias = "BxH";
  const Problem p = make_problem<T>(c, rng);
  const auto ref = reference_heads(p.Q, p.K, p.V, p.spec);
  const Eigen::Index D = c.dk, row = (c.H + 2 * c.Hkv) * D + 3, T_ = c.Tq;
  std::vector<T> fused(static_cast<size_t>(c.B * T_ * row), T(99));
  auto view_at = [&](Eigen::Index first_head, Eigen::Index heads) {
    return mh::HeadsView<T>{fused.data() + first_head * D, c.B, heads, T_, D, T_ * row, D, row, 1};
  };
  const auto Qv = view_at(0, c.H), Kv = view_at(c.H, c.Hkv), Vv = view_at(c.H + c.Hkv, c.Hkv);
  for (Eigen::Index b = 0; b < c.B; ++b)
    for (Eigen::Index t = 0; t < T_; ++t)
      for (Eigen::Index d = 0; d < D; ++d) {
        for (Eigen::Index h = 0; h < c.H; ++h) Qv.head(b, h)(t, d) = static_cast<T>(p.Q(b, h, t, d));
        for (Eigen::Index h = 0; h < c.Hkv; ++h) {
          Kv.head(b, h)(t, d) = static_cast<T>(p.K(b, h, t, d));
          Vv.head(b, h)(t, d) = static_cast<T>(p.V(b, h, t, d));
        }
      }
  const MasksBuffer<T> masks(p.spec);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    const mh::Options opt = options_for(p.spec, kernel, 2);
    // The output written into a padded buffer too: [B, T, H, D + 5].
    std::vector<T> out_buf(static_cast<size_t>(c.B * T_ * c.H * (D + 5)), kSentinel<T>);
    const mh::HeadsView<T> O{out_buf.data(), c.B, c.H, T_, D, T_ * c.H * (D + 5), D + 5, c.H * (D + 5), 1};
    HeadsBuffer<T> lse(mh::Layout::BHTD, c.B, c.H, T_, 1, kSentinel<T>);
    mh::attention_heads_into(Qv, Kv, Vv, O, lse.view(), opt, masks.masks);
    check_heads_near(O, ref.out, budget_fn<T>(ref, 1, &Budget::attn), "strided OUT vs reference");
    check_heads_near(lse.view(), ref.lse, budget_fn<T>(ref, 1, &Budget::lse), "strided LSE vs reference");
    const Run<T> contiguous = run_heads<T>(p, opt, mh::Layout::BTHD, false);
    check_heads_near(O, contiguous.out.to_array(), budget_fn<T>(ref, 2, &Budget::attn),
                     "strided vs contiguous");
    // the padding between the heads' rows is never written
    for (Eigen::Index e = 0; e < static_cast<Eigen::Index>(out_buf.size()); ++e)
      if (e % (D + 5) >= D) REQUIRE(out_buf[static_cast<size_t>(e)] == kSentinel<T>);
  }
}

namespace {

/// A rank-4 tensor of `Options_` storage holding `a` (BHTD order) in `layout`'s axis order.
template <class T, int Options_>
Eigen::Tensor<T, 4, Options_> to_tensor(const Array4& a, mh::Layout layout) {
  const bool bthd = layout == mh::Layout::BTHD;
  Eigen::Tensor<T, 4, Options_> t(a.n[0], bthd ? a.n[2] : a.n[1], bthd ? a.n[1] : a.n[2], a.n[3]);
  for (Eigen::Index b = 0; b < a.n[0]; ++b)
    for (Eigen::Index h = 0; h < a.n[1]; ++h)
      for (Eigen::Index i = 0; i < a.n[2]; ++i)
        for (Eigen::Index d = 0; d < a.n[3]; ++d)
          (bthd ? t(b, i, h, d) : t(b, h, i, d)) = static_cast<T>(a(b, h, i, d));
  return t;
}

template <class T, int Options_>
void tensor_roundtrip(const Problem& p, const MultiHeadReference& ref, mh::Layout layout, mh::Kernel kernel) {
  using Tensor = Eigen::Tensor<T, 4, Options_>;
  const Tensor q = to_tensor<T, Options_>(p.Q, layout), k = to_tensor<T, Options_>(p.K, layout),
               v = to_tensor<T, Options_>(p.V, layout);
  // Inputs through TensorMaps of const data, outputs into TensorMaps over plain buffers.
  Eigen::TensorMap<const Tensor> qm(q.data(), q.dimensions()), km(k.data(), k.dimensions()),
      vm(v.data(), v.dimensions());
  const Eigen::Index B = p.Q.n[0], H = p.Q.n[1], tq = p.Q.n[2], dv = p.V.n[3];
  const bool bthd = layout == mh::Layout::BTHD;
  std::vector<T> out_buf(static_cast<size_t>(B * H * tq * dv), kSentinel<T>),
      lse_buf(static_cast<size_t>(B * H * tq), kSentinel<T>);
  Eigen::TensorMap<Tensor> om(out_buf.data(), B, bthd ? tq : H, bthd ? H : tq, dv);
  Eigen::TensorMap<Tensor> lm(lse_buf.data(), B, bthd ? tq : H, bthd ? H : tq, 1);
  const MasksBuffer<T> masks(p.spec);
  const auto Q = mh::HeadsView<const T>::from_tensor(qm, layout);
  CHECK(Q.batch == B);
  CHECK(Q.heads == H);
  CHECK(Q.tokens == tq);
  CHECK(Q.dim == p.Q.n[3]);
  mh::attention_heads_into(
      Q, mh::HeadsView<const T>::from_tensor(km, layout), mh::HeadsView<const T>::from_tensor(vm, layout),
      mh::HeadsView<T>::from_tensor(om, layout), mh::HeadsView<T>::from_tensor(lm, layout),
      options_for(p.spec, kernel), masks.masks);
  // Read the results back through the tensors' own indexing.
  Array4 out(B, H, tq, dv), lse(B, H, tq, 1);
  for (Eigen::Index b = 0; b < B; ++b)
    for (Eigen::Index h = 0; h < H; ++h)
      for (Eigen::Index i = 0; i < tq; ++i) {
        for (Eigen::Index d = 0; d < dv; ++d) out(b, h, i, d) = bthd ? om(b, i, h, d) : om(b, h, i, d);
        lse(b, h, i, 0) = bthd ? lm(b, i, h, 0) : lm(b, h, i, 0);
      }
  check_heads_near(array_view(out), ref.out, budget_fn<T>(ref, 1, &Budget::attn), "tensor OUT");
  check_heads_near(array_view(lse), ref.lse, budget_fn<T>(ref, 1, &Budget::lse), "tensor LSE");
}

}  // namespace

TEST_CASE_TEMPLATE(
    "multihead crosscheck: Eigen tensors through HeadsView::from_tensor, row- and column-major", T, float,
    double) {
  Rng rng(19);
  Config c{"", 2, 6, 2, 5, 9, 7, 3};
  c.causal = c.bottom_right = c.alibi = true;
  c.mask = "BxH";
  const Problem p = make_problem<T>(c, rng);
  const auto ref = reference_heads(p.Q, p.K, p.V, p.spec);
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    for (const mh::Layout layout : {mh::Layout::BHTD, mh::Layout::BTHD}) {
      const std::string lname = layout_name(layout);
      CAPTURE(lname);
      {
        INFO("RowMajor");
        tensor_roundtrip<T, Eigen::RowMajor>(p, ref, layout, kernel);
      }
      {
        INFO("ColMajor");
        tensor_roundtrip<T, Eigen::ColMajor>(p, ref, layout, kernel);
      }
    }
  }
}

}  // namespace test_multihead_views
