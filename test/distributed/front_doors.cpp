// SPDX-License-Identifier: MIT
// The single-head Eigen front doors (ring_attention, ring_attention_into, ring_attention_backward,
// and ulysses_attention, ulysses_attention_into, ulysses_attention_backward on one rank)
// on any dense expression of a rank's rows: blocks of a column-major matrix (strided) for uneven
// contiguous shards, shard()'s row-major copies otherwise; results against attention_heads_into and
// attention_heads_backward_into on the whole sequence as one head.
#include "problem.hpp"

namespace ea_mpi {
namespace test_front_doors {
namespace {

template <class T, class Derived>
Heads<T> from_matrix(const Eigen::MatrixBase<Derived>& m) {
  Heads<T> h(1, 1, m.rows(), m.cols());
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j) h.at(0, 0, i, j) = m(i, j);
  return h;
}

template <class T>
void check_front_doors() {
  using ColMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  const World& w = world();
  std::vector<Case> cases;
  auto add = [&](const char* name, std::ptrdiff_t tq, std::ptrdiff_t tk, ea::Options opt) {
    Case c;
    c.name = name;
    c.s = Shape{1, 1, 1, tq, tk, 8, 5};
    c.opt = opt;
    cases.push_back(c);
  };
  add("no mask, T_q > T_k", 21, 13, {});
  ea::Options o;
  o.causal = true;
  o.alignment = ea::CausalAlignment::BottomRight;
  add("causal bottom-right, T_q < T_k", 13, 21, o);
  o.alignment = ea::CausalAlignment::TopLeft;
  o.window_left = 3;
  add("causal window top-left", 19, 19, o);
  std::uint64_t seed = 1100;
  for (const Case& c : cases) {
    Scope scope(std::string(type_name<T>()) + ", " + c.name);
    const Problem<T> p = make_problem<T>(c.s, c.opt, {}, seed++);
    const Whole<T> whole = whole_results(p, true);
    const ColMatrix Q = p.q.cview().head(0, 0), K = p.k.cview().head(0, 0), V = p.v.cview().head(0, 0);
    const ColMatrix dO = p.d_out.cview().head(0, 0);
    for (const Split& split : splits_for(c.s, w.size)) {
      Scope inner(split.name);
      const Local<T> l = local_part(p, split, w.comm);
      auto run = [&](const auto& Qr, const auto& Kr, const auto& Vr, const auto& dOr) {
        const RowMatrix<T> out = dist::ring_attention(w.comm, Qr, Kr, Vr, c.opt, {}, l.config);
        ColMatrix out_into(1, 1);
        Vector lse(1);
        dist::ring_attention_into(w.comm, Qr, Kr, Vr, out_into, lse, c.opt, {}, l.config);
        const auto g =
            dist::ring_attention_backward(w.comm, Qr, Kr, Vr, out_into, lse, dOr, c.opt, {}, l.config);
        const Heads<T> lse_heads = from_matrix<T>(lse);
        {
          Scope s("ring_attention");
          check_forward(whole, l, from_matrix<T>(out), lse_heads);
        }
        {
          Scope s("ring_attention_into");
          check_forward(whole, l, from_matrix<T>(out_into), lse_heads);
        }
        {
          // Into a Map of the right shape, without the log-sum-exps.
          std::vector<T> buffer(static_cast<std::size_t>(Qr.rows() * Vr.cols()));
          Eigen::Map<RowMatrix<T>> mapped(buffer.data(), Qr.rows(), Vr.cols());
          dist::ring_attention_into(w.comm, Qr, Kr, Vr, mapped, c.opt, {}, l.config);
          Scope s("ring_attention_into (a Map, no lse)");
          check_forward(whole, l, from_matrix<T>(mapped), lse_heads);
        }
        {
          Scope s("ring_attention_backward");
          check_backward(whole, l, from_matrix<T>(g.dq), from_matrix<T>(g.dk), from_matrix<T>(g.dv));
        }
        {
          // A bad LSE that keeps its storage throws (on every rank: each checks its own) before
          // attn is resized.
          RowMatrix<T> unsized;
          std::vector<T> buffer(static_cast<std::size_t>(Qr.rows() + 1));
          Eigen::Map<Vector> bad_lse(buffer.data(), Qr.rows() + 1);
          bool threw = false;
          try {
            dist::ring_attention_into(w.comm, Qr, Kr, Vr, unsized, bad_lse, c.opt, {}, l.config);
          } catch (const std::invalid_argument&) {
            threw = true;
          }
          EA_MPI_CHECK(threw && unsized.size() == 0, "ring_attention_into resized attn or did not throw");
        }
        // Ulysses for one head: its one head needs one rank.
        if (w.size == 1) {
          const RowMatrix<T> u = dist::ulysses_attention(w.comm, Qr, Kr, Vr, c.opt, {}, l.config);
          RowMatrix<T> u_into;
          Vector u_lse;
          dist::ulysses_attention_into(w.comm, Qr, Kr, Vr, u_into, u_lse, c.opt, {}, l.config);
          const auto ug =
              dist::ulysses_attention_backward(w.comm, Qr, Kr, Vr, u_into, u_lse, dOr, c.opt, {}, l.config);
          Scope s("ulysses_attention, _into, _backward");
          check_forward(whole, l, from_matrix<T>(u), from_matrix<T>(u_lse));
          check_forward(whole, l, from_matrix<T>(u_into), from_matrix<T>(u_lse));
          check_backward(whole, l, from_matrix<T>(ug.dq), from_matrix<T>(ug.dk), from_matrix<T>(ug.dv));
        } else {
          bool threw = false;
          try {
            (void)dist::ulysses_attention(w.comm, Qr, Kr, Vr, c.opt, {}, l.config);
          } catch (const std::invalid_argument&) {
            threw = true;
          }
          EA_MPI_CHECK(threw, "ulysses_attention of one head on several ranks did not throw");
        }
      };
      if (split.q_counts.empty()) {
        const auto shard = [&](const ColMatrix& m) { return dist::shard(m, split.sharding, w.size, w.rank); };
        no_throw("the calls", [&] { run(shard(Q), shard(K), shard(V), shard(dO)); });
      } else {
        const auto& qs = l.q_segments.front();
        const auto& ks = l.k_segments.front();
        no_throw("the calls", [&] {
          run(Q.middleRows(qs.global_first, qs.count), K.middleRows(ks.global_first, ks.count),
              V.middleRows(ks.global_first, ks.count), dO.middleRows(qs.global_first, qs.count));
        });
      }
    }
  }
}

}  // namespace

EA_MPI_CASE(front_doors, "front doors: ring_attention, ring_attention_into, ring_attention_backward") {
  check_front_doors<float>();
  check_front_doors<double>();
}

}  // namespace test_front_doors
}  // namespace ea_mpi
