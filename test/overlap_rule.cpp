// SPDX-License-Identifier: MIT
// The one overlap rule, the same for every call: an output must share no element with an input or
// another output. It is decided exactly for blocks of one parent array (equal, nested strides:
// [Q | out] side by side in one buffer is accepted, by the single-head and the multi-head calls
// alike), and conservatively, by the bytes each view spans, otherwise. Checked against the
// address sets themselves, over random blocks of random parents.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <set>
#include <stdexcept>
#include <vector>

#include "common.hpp"
#include "random.hpp"

namespace test_overlap_rule {

using namespace ea_test;
using Eigen::Index;

namespace {

// A [B, H, T, d] block of a parent array with the given nested strides, at offset `at`.
struct Box {
  std::array<Index, 4> at, size;
};

template <typename T>
ea::HeadsView<T> view_of(T* parent, const std::array<Index, 4>& strides, const Box& box) {
  Index offset = 0;
  for (int a = 0; a < 4; ++a) offset += box.at[a] * strides[a];
  return {parent + offset, box.size[0], box.size[1], box.size[2], box.size[3],
          strides[0],      strides[1],  strides[2],  strides[3]};
}

template <typename T>
std::set<const T*> elements(const ea::HeadsView<T>& v) {
  std::set<const T*> s;
  for (Index b = 0; b < v.batch; ++b)
    for (Index h = 0; h < v.heads; ++h)
      for (Index t = 0; t < v.tokens; ++t)
        for (Index d = 0; d < v.dim; ++d)
          s.insert(v.data + b * v.batch_stride + h * v.head_stride + t * v.token_stride + d * v.dim_stride);
  return s;
}

template <typename T>
bool share_an_element(const ea::HeadsView<T>& a, const ea::HeadsView<T>& b) {
  const auto sa = elements(a), sb = elements(b);
  return std::any_of(sa.begin(), sa.end(), [&](const T* p) { return sb.count(p) != 0; });
}

template <class F>
bool throws_overlap(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    CHECK_MESSAGE(std::string(e.what()).find("overlaps") != std::string::npos, e.what());
    return true;
  }
  return false;
}

}  // namespace

TEST_CASE_TEMPLATE("overlap rule: blocks of one parent are judged exactly, single-head and multi-head alike",
                   T, float, double) {
  Rng rng(2024);
  int overlapping = 0, apart = 0;
  for (int trial = 0; trial < 400; ++trial) {
    CAPTURE(trial);
    // The problem: Q [B, H, T_q, d_k], K/V [B, H, T_k, d], out [B, H, T_q, d_v].
    const Index B = rng.integer(1, 2), H = rng.integer(1, 2), tq = rng.integer(1, 4), tk = rng.integer(1, 3);
    const Index dk = rng.integer(1, 3), dv = rng.integer(1, 3);
    // A parent holding Q and out somewhere in it: each axis at least as long as the larger box
    // plus room to move, strides nested in a random axis order (row padding included).
    std::array<Index, 4> parent_size = {B + rng.integer(0, 1), H + rng.integer(0, 1), tq + rng.integer(0, 2),
                                        std::max(dk, dv) + rng.integer(0, 3)};
    std::array<int, 4> order = {0, 1, 2, 3};
    std::shuffle(order.begin(), order.end(), rng.engine());
    std::array<Index, 4> strides{};
    Index step = 1;
    for (int i = 3; i >= 0; --i) {
      strides[order[i]] = step;
      step *= parent_size[order[i]] + rng.integer(0, 1);
    }
    std::vector<T> parent(static_cast<std::size_t>(step), T(0));
    const auto place = [&](Index dim) {
      Box box{{0, 0, 0, 0}, {B, H, tq, dim}};
      for (int a = 0; a < 4; ++a) box.at[a] = rng.integer(0, parent_size[a] - box.size[a]);
      return box;
    };
    const ea::HeadsView<T> out = view_of(parent.data(), strides, place(dv));
    const ea::HeadsView<const T> q = view_of<const T>(parent.data(), strides, place(dk));
    std::vector<T> kv(static_cast<std::size_t>(B * H * tk * std::max(dk, dv)), T(0.5));
    const auto K = ea::HeadsView<const T>::bhtd(kv.data(), B, H, tk, dk);
    const auto V = ea::HeadsView<const T>::bhtd(kv.data(), B, H, tk, dv);
    const bool shared = share_an_element(ea::HeadsView<const T>(out), q);
    CAPTURE(shared);
    const std::string layout = "B=" + std::to_string(B) + " H=" + std::to_string(H) +
                               " tq=" + std::to_string(tq) + " dk=" + std::to_string(dk) +
                               " dv=" + std::to_string(dv) + " strides=" + std::to_string(strides[0]) + "," +
                               std::to_string(strides[1]) + "," + std::to_string(strides[2]) + "," +
                               std::to_string(strides[3]) + " q@" + std::to_string(q.data - parent.data()) +
                               " out@" + std::to_string(out.data - parent.data());
    CAPTURE(layout);
    CHECK(throws_overlap([&] { ea::attention_heads_into(q, K, V, out); }) == shared);
    if (B == 1 && H == 1) {  // the same blocks as matrices, through the single-head calls
      using Strides = Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>;
      const Eigen::Map<const RowMatrix<T>, 0, Strides> Qm(q.data, tq, dk,
                                                          Strides(q.token_stride, q.dim_stride));
      Eigen::Map<RowMatrix<T>, 0, Strides> Om(out.data, tq, dv, Strides(out.token_stride, out.dim_stride));
      const Eigen::Map<const RowMatrix<T>> Km(K.data, tk, dk), Vm(V.data, tk, dv);
      CHECK(throws_overlap([&] { ea::attention_into(Qm, Km, Vm, Om); }) == shared);
    }
    (shared ? overlapping : apart) += 1;
  }
  // Both outcomes were exercised many times.
  CHECK(overlapping > 50);
  CHECK(apart > 50);
}

TEST_CASE_TEMPLATE("overlap rule: views with different strides are apart when their bytes are", T, float,
                   double) {
  Rng rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    CAPTURE(trial);
    const Index tq = rng.integer(1, 4), tk = rng.integer(1, 3), d = rng.integer(1, 3);
    std::vector<T> buffer(200, T(0));
    // Q row-major with a random row stride; out column-major (different strides) at a random
    // offset in the same buffer.
    const Index q_rows = rng.integer(d, d + 3), q_at = rng.integer(0, 40), o_at = rng.integer(0, 60);
    const ea::HeadsView<const T> q{buffer.data() + q_at, 1, 1, tq, d, 0, 0, q_rows, 1};
    const ea::HeadsView<T> out{buffer.data() + o_at, 1, 1, tq, d, 0, 0, 1, tq};
    std::vector<T> kv(static_cast<std::size_t>(tk * d), T(0.5));
    const auto K = ea::HeadsView<const T>::bhtd(kv.data(), 1, 1, tk, d);
    const Index q_last = q_at + (tq - 1) * q_rows + d - 1, o_last = o_at + tq * d - 1;
    const bool bytes_apart = q_last < o_at || o_last < q_at;
    const bool shared = share_an_element(ea::HeadsView<const T>(out), q);
    const bool threw = throws_overlap([&] { ea::attention_heads_into(q, K, K, out); });
    CAPTURE(bytes_apart);
    CAPTURE(shared);
    if (shared) CHECK(threw);             // never missed
    if (bytes_apart) CHECK_FALSE(threw);  // never rejected when apart
  }
}

}  // namespace test_overlap_rule
