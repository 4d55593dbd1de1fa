// SPDX-License-Identifier: MIT
// Programmable attention: two documents packed in one sequence, each with a prefix every one of
// its tokens sees (prefix-LM), as a mask_mod with a block mask; and a learned relative-position
// bias, a table indexed by q - k, as a score_mod. The table is trained for a few steps of
// gradient descent to match a teacher's attention output. Its gradient is the sum, along each
// diagonal q - k = r, of dL/d(modified logit), which the backward hands to a gradient callback
// (BackwardTerms::logit_grad) tile by tile, in an order the thread count does not change. Before
// training, one entry of the table's gradient is checked against a central finite difference of
// the loss, in double.
//
//   eigen_attention_programmable_example [--steps N]     (default 40)
#include <EigenAttention/EigenAttention.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace ea = EigenAttention;

namespace {

const Eigen::Index T = 48, H = 2, D = 8;
const Eigen::Index kDocEnd = 20;  // document 0 holds positions [0, 20), document 1 [20, 48)
const Eigen::Index kPrefix = 4;   // the first 4 tokens of each document are seen by all of its tokens

using Rows = ea::RowMatrix<double>;

/// The document that holds position p.
Eigen::Index document(Eigen::Index p) { return p < kDocEnd ? 0 : 1; }

/// Deterministic values in [-1, 1).
Rows fill(Eigen::Index rows, Eigen::Index cols, unsigned seed) {
  Rows m(rows, cols);
  unsigned s = seed;
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    s = s * 1664525u + 1013904223u;
    m.data()[i] = static_cast<double>(s >> 8) / 8388608.0 - 1;
  }
  return m;
}

/// The model: attention with the relative-position table `table` (2T - 1 entries, index
/// q - k + T - 1, shared by the heads); ATTN into `out`, its log-sum-exps into `lse`.
struct Model {
  Model(const Rows& q_, const Rows& k_, const Rows& v_) : q(q_), k(k_), v(v_) {}
  const Rows &q, &k, &v;
  std::vector<double> table = std::vector<double>(2 * T - 1, 0.0);
  ea::Options opt;

  /// run(masks) with the model's score_mod, mask_mod and block mask (which refer to the lambdas
  /// here: they live as long as the call).
  template <class Run>
  void with_masks(Run&& run) const {
    const auto f = [this](auto s, auto, auto, auto q, auto k) { return s + table[q - k + T - 1]; };
    const auto g = [](auto, auto, auto q, auto k) {
      const Eigen::Index dq = document(q), dk = document(k);
      const Eigen::Index start = dq == 0 ? 0 : kDocEnd;
      return (dq == dk) & ((k <= q) | (k < start + kPrefix));
    };
    const auto sm = ea::score_mod(f);
    const auto mm = ea::mask_mod(g);
    const ea::BlockMask bm = ea::block_mask(mm, 1, 1, T, T, 16, 16);
    ea::Masks<double> masks;
    masks.score_mod = sm;
    masks.mask_mod = mm;
    masks.block_mask = bm;
    run(masks);
  }

  /// ATTN [1, H, T, D] (heads side by side in T x (H D)) and LSE.
  void forward(Rows& out, Rows& lse) const {
    with_masks([&](ea::Masks<double>& masks) {
      ea::attention_heads_into(heads(q), heads(k), heads(v),
                               ea::HeadsView<double>::bthd(out.data(), 1, T, H, D),
                               ea::HeadsView<double>::bthd(lse.data(), 1, T, H, 1), opt, masks);
    });
  }

  /// dL/dtable for the loss 1/2 |ATTN - target|^2.
  std::vector<double> table_gradient(const Rows& out, const Rows& lse, const Rows& target) const {
    const Rows d_out = out - target;
    Rows dq(T, H * D), dk(T, H * D), dv(T, H * D);
    // f adds table[q - k + T - 1] to the logit: df/dtable is 1 there, so each g = dL/d(f's
    // logit) the callback receives adds to that entry (every head's, every visible pair's).
    std::vector<double> grad(table.size(), 0.0);
    const auto lg = ea::logit_grad([&](double g, auto, auto, auto q, auto k) { grad[q - k + T - 1] += g; });
    ea::BackwardTerms<double> terms;
    terms.logit_grad = lg;
    with_masks([&](ea::Masks<double>& masks) {
      ea::attention_heads_backward_into(heads(q), heads(k), heads(v), heads(out),
                                        ea::HeadsView<const double>::bthd(lse.data(), 1, T, H, 1),
                                        heads(d_out), ea::HeadsView<const double>{}, mut(dq), mut(dk),
                                        mut(dv), ea::HeadsView<double>{}, opt, masks, terms);
    });
    return grad;
  }

  static ea::HeadsView<const double> heads(const Rows& m) {
    return ea::HeadsView<const double>::bthd(m.data(), 1, T, H, D);
  }
  static ea::HeadsView<double> mut(Rows& m) { return ea::HeadsView<double>::bthd(m.data(), 1, T, H, D); }
};

double loss(const Rows& out, const Rows& target) { return 0.5 * (out - target).squaredNorm(); }

}  // namespace

int main(int argc, char** argv) {
  int steps = 40;
  if (argc == 3 && std::strcmp(argv[1], "--steps") == 0) steps = std::atoi(argv[2]);
  const Rows q = fill(T, H * D, 1), k = fill(T, H * D, 2), v = fill(T, H * D, 3);

  // The teacher: ALiBi-like slopes on the distance, which the student's table must learn.
  Model teacher(q, k, v);
  for (Eigen::Index r = -(T - 1); r < T; ++r)
    teacher.table[static_cast<std::size_t>(r + T - 1)] = -0.3 * std::fabs(static_cast<double>(r));
  Rows target(T, H * D), lse(T, H);
  teacher.forward(target, lse);

  Model student(q, k, v);
  Rows out(T, H * D);
  student.forward(out, lse);
  const double first = loss(out, target);

  // The gradient of one entry against a central difference of the loss.
  const std::vector<double> grad = student.table_gradient(out, lse, target);
  const std::size_t probe = static_cast<std::size_t>(T - 1 + 3);  // q - k = 3
  const double h = 1e-5;
  Model plus = student, minus = student;
  plus.table[probe] += h;
  minus.table[probe] -= h;
  Rows o(T, H * D), l(T, H);
  plus.forward(o, l);
  const double lp = loss(o, target);
  minus.forward(o, l);
  const double lm = loss(o, target);
  const double numeric = (lp - lm) / (2 * h);
  std::printf("dL/dtable[q - k = 3]: %.9f (backward), %.9f (central difference)\n", grad[probe], numeric);
  if (std::fabs(grad[probe] - numeric) > 1e-6 * (1 + std::fabs(numeric))) {
    std::printf("gradient check FAILED\n");
    return 1;
  }

  // Gradient descent on the table.
  const double kRate = 0.1;
  double last = first;
  for (int step = 0; step < steps; ++step) {
    student.forward(out, lse);
    last = loss(out, target);
    const std::vector<double> g = student.table_gradient(out, lse, target);
    for (std::size_t r = 0; r < g.size(); ++r) student.table[r] -= kRate * g[r];
    if (step % 10 == 0) std::printf("step %3d  loss %.6f\n", step, last);
  }
  student.forward(out, lse);
  last = loss(out, target);
  std::printf("loss %.6f -> %.6f after %d steps\n", first, last, steps);
  return last < 0.1 * first ? 0 : 1;
}
