// SPDX-License-Identifier: MIT
// NaN and Inf in an input reach only the output rows that depend on it: a query row's own
// outputs, and the rows of the queries that see the key (or value) row holding it. Every other
// row stays finite and correct.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common.hpp"
#include "inputs.hpp"
#include "random.hpp"

namespace test_nonfinite {

using namespace ea_test;

namespace {

enum class Reach {
  WholeRow,          // SCORES (visible entries), ATTN and LSE of an affected row are all non-finite
  VColumn,           // only ATTN(i, c) of an affected row is non-finite; SCORES and LSE untouched
  OnlyOthersChecked  // affected rows unspecified (e.g. Inf in K: +-inf logits); others exact
};

struct Poison {
  std::string what;
  Reach reach;
  bool nan;          // NaN (must stay NaN) or Inf (must be non-finite)
  Eigen::Index col;  // for VColumn: the poisoned column of V
  std::vector<bool> affected;
};

/// Counts the elements of one output that break the contract, and remembers the first.
struct Tally {
  long count = 0;
  Eigen::Index row = -1, col = -1;
  long double value = 0;
  void add(bool ok, Eigen::Index i, Eigen::Index c, long double x) {
    if (ok) return;
    if (count++ == 0) {
      row = i;
      col = c;
      value = x;
    }
  }
  std::string str() const {
    return std::to_string(count) + " element(s) wrong, first (" + std::to_string(row) + ", " +
           std::to_string(col) + ") = " + std::to_string(static_cast<double>(value));
  }
};

template <class T>
void check_propagation(const RowMatrix<T>& Q, const RowMatrix<T>& K, const RowMatrix<T>& V,
                       const MaskSpec& mask, const ReferenceResult& clean, const Poison& p) {
  CAPTURE(p.what);
  const Eigen::Index tq = Q.rows(), tk = K.rows(), dv = V.cols();
  // Unaffected rows against the clean problem's exact answer: the error model.
  const Budget b = budget_for<T>(clean, Q.cols());
  auto bad = [&](long double x) { return p.nan ? std::isnan(x) : !std::isfinite(x); };
  for (const auto kernel : kernels_under_test()) {
    const std::string kname = ea::kernel_name(kernel);
    CAPTURE(kname);
    const ea::Options opt = make_options(mask, std::nullopt, kernel);
    const auto r = ea::attention_decomposed(Q, K, V, opt);
    const auto fused = ea::attention(Q, K, V, opt);
    RowMatrix<T> into(tq, dv);
    ea::Vector<T> into_lse(tq);
    ea::attention_into(Q, K, V, into, into_lse, opt);
    struct Attn {
      const char* name;
      const RowMatrix<T>* m;
      Tally t;
    };
    struct Lse {
      const char* name;
      const ea::Vector<T>* v;
      Tally t;
    };
    std::vector<Attn> attns = {{"attention_decomposed ATTN", &r.attn, {}},
                               {"attention ATTN", &fused, {}},
                               {"attention_into ATTN", &into, {}}};
    std::vector<Lse> lses = {{"attention_decomposed LSE", &r.lse, {}}, {"attention_into LSE", &into_lse, {}}};
    Tally scores;

    for (Eigen::Index i = 0; i < tq; ++i) {
      const bool hit = p.affected[static_cast<size_t>(i)];
      if (hit && p.reach == Reach::WholeRow) {
        for (Eigen::Index j = 0; j < tk; ++j)
          if (key_visible(i, j, tq, tk, mask)) scores.add(bad(r.scores(i, j)), i, j, r.scores(i, j));
        for (auto& a : attns)
          for (Eigen::Index c = 0; c < dv; ++c) a.t.add(bad((*a.m)(i, c)), i, c, (*a.m)(i, c));
        for (auto& l : lses) l.t.add(bad((*l.v)(i)), i, 0, (*l.v)(i));
        continue;
      }
      if (hit && p.reach == Reach::OnlyOthersChecked) continue;
      // Unaffected, or affected only in one column of ATTN: the rest equals the clean reference.
      const bool column_hit = hit && p.reach == Reach::VColumn;
      for (Eigen::Index j = 0; j < tk; ++j)
        scores.add(near(r.scores(i, j), clean.scores(i, j), b.scores), i, j, r.scores(i, j));
      for (auto& l : lses) l.t.add(near((*l.v)(i), clean.lse(i), b.lse), i, 0, (*l.v)(i));
      for (auto& a : attns) {
        for (Eigen::Index c = 0; c < dv; ++c) {
          const long double x = (*a.m)(i, c);
          a.t.add(column_hit && c == p.col ? bad(x) : near(x, clean.attn(i, c), b.attn), i, c, x);
        }
      }
    }
    CHECK_MESSAGE(scores.count == 0, "attention_decomposed SCORES: " << scores.str());
    for (const auto& a : attns) CHECK_MESSAGE(a.t.count == 0, a.name << ": " << a.t.str());
    for (const auto& l : lses) CHECK_MESSAGE(l.t.count == 0, l.name << ": " << l.t.str());
  }
}

std::vector<bool> rows_seeing_key(Eigen::Index key, Eigen::Index tq, Eigen::Index tk, const MaskSpec& mask) {
  std::vector<bool> rows(static_cast<size_t>(tq));
  for (Eigen::Index i = 0; i < tq; ++i) rows[static_cast<size_t>(i)] = key_visible(i, key, tq, tk, mask);
  return rows;
}

struct Case {
  Eigen::Index tq, tk;
  MaskSpec mask;
};

// Square causal (frontier inside the first 64-key tile), bottom-right with T_q < T_k and with
// T_q > T_k, and no mask.
const std::vector<Case> kCases = {
    {70, 70, {true, false}}, {40, 70, {true, true}}, {70, 40, {true, true}}, {33, 45, {false, false}}};

/// For every case, a random problem (d_k = 8, d_v = 5) and its clean reference; for keys 0,
/// T_k / 2 - 3 and T_k - 1, `check_key(Q, K, V, mask, clean, j, affected)` poisons row j of an
/// input, `affected` being the rows that see key j.
template <class T, class F>
void for_each_key_row(Rng& rng, F&& check_key) {
  const Eigen::Index dk = 8, dv = 5;
  for (const Case& cs : kCases) {
    CAPTURE(cs.tq);
    CAPTURE(cs.tk);
    const std::string mname = mask_name(cs.mask);
    CAPTURE(mname);
    const auto [Q, K, V] = random_inputs<T>(rng, {cs.tq, cs.tk, dk, dv});
    const auto clean = reference_attention(Q, K, V, cs.mask);
    for (const Eigen::Index j : {Eigen::Index{0}, cs.tk / 2 - 3, cs.tk - 1}) {
      CAPTURE(j);
      const auto affected = rows_seeing_key(j, cs.tq, cs.tk, cs.mask);
      check_key(Q, K, V, cs.mask, clean, j, affected);
    }
  }
}

}  // namespace

TEST_CASE_TEMPLATE("nonfinite: NaN or Inf in a query row reaches only that row", T, float, double) {
  Rng rng(31);
  const Eigen::Index dk = 8, dv = 5;
  for (const Case& cs : kCases) {
    CAPTURE(cs.tq);
    CAPTURE(cs.tk);
    const std::string mname = mask_name(cs.mask);
    CAPTURE(mname);
    const auto Q0 = random_matrix<RowMatrix<T>>(rng, cs.tq, dk);
    auto K = random_matrix<RowMatrix<T>>(rng, cs.tk, dk);
    const auto V = random_matrix<RowMatrix<T>>(rng, cs.tk, dv);
    // Key 0 has K(0, 0) > 0 and key tk-1 has K(tk-1, 0) < 0, so a query with Q(r, 0) = +Inf
    // that sees both has logits +Inf and -Inf.
    K(0, 0) = std::abs(K(0, 0)) + T(0.5);
    const auto clean = reference_attention(Q0, K, V, cs.mask);
    // The poisoned row sees every key under each of the masks (it is the last one).
    const Eigen::Index r = cs.tq - 1;
    std::vector<bool> affected(static_cast<size_t>(cs.tq), false);
    affected[static_cast<size_t>(r)] = true;

    RowMatrix<T> Q = Q0;
    Q(r, 3) = std::numeric_limits<T>::quiet_NaN();
    check_propagation<T>(Q, K, V, cs.mask, clean, {"NaN in Q(r, 3)", Reach::WholeRow, true, 0, affected});

    Q = Q0;
    Q(r, 0) = std::numeric_limits<T>::infinity();
    RowMatrix<T> Kmixed = K;
    Kmixed(cs.tk - 1, 0) = -std::abs(Kmixed(cs.tk - 1, 0)) - T(0.5);
    const auto clean_mixed = reference_attention(Q0, Kmixed, V, cs.mask);
    check_propagation<T>(Q, Kmixed, V, cs.mask, clean_mixed,
                         {"+Inf in Q(r, 0)", Reach::WholeRow, false, 0, affected});

    // And a poisoned row in the middle, in the first tile of queries.
    Q = Q0;
    const Eigen::Index m = cs.tq / 2;
    Q(m, 1) = std::numeric_limits<T>::quiet_NaN();
    std::vector<bool> affected_m(static_cast<size_t>(cs.tq), false);
    affected_m[static_cast<size_t>(m)] = true;
    bool m_sees_a_key = false;
    for (Eigen::Index j = 0; j < cs.tk; ++j)
      m_sees_a_key = m_sees_a_key || key_visible(m, j, cs.tq, cs.tk, cs.mask);
    if (m_sees_a_key)
      check_propagation<T>(Q, K, V, cs.mask, clean, {"NaN in Q(m, 1)", Reach::WholeRow, true, 0, affected_m});
  }
}

TEST_CASE_TEMPLATE("nonfinite: NaN or Inf in a key row reaches only the queries that see it", T, float,
                   double) {
  Rng rng(32);
  for_each_key_row<T>(
      rng, [](const RowMatrix<T>& Q, const RowMatrix<T>& K0, const RowMatrix<T>& V, const MaskSpec& mask,
              const ReferenceResult& clean, Eigen::Index j, const std::vector<bool>& affected) {
        RowMatrix<T> K = K0;
        K(j, 2) = std::numeric_limits<T>::quiet_NaN();
        check_propagation<T>(Q, K, V, mask, clean, {"NaN in K(j, 2)", Reach::WholeRow, true, 0, affected});
        // +Inf in K gives logits +Inf or -Inf depending on the sign of Q(i, 2): the queries that
        // do not see key j are what the contract speaks of.
        K = K0;
        K(j, 2) = std::numeric_limits<T>::infinity();
        check_propagation<T>(Q, K, V, mask, clean,
                             {"+Inf in K(j, 2)", Reach::OnlyOthersChecked, false, 0, affected});
      });
}

TEST_CASE_TEMPLATE("nonfinite: NaN or Inf in a value row reaches only that column of the queries that see it",
                   T, float, double) {
  Rng rng(33);
  for_each_key_row<T>(
      rng, [](const RowMatrix<T>& Q, const RowMatrix<T>& K, const RowMatrix<T>& V0, const MaskSpec& mask,
              const ReferenceResult& clean, Eigen::Index j, const std::vector<bool>& affected) {
        RowMatrix<T> V = V0;
        V(j, 1) = std::numeric_limits<T>::quiet_NaN();
        check_propagation<T>(Q, K, V, mask, clean, {"NaN in V(j, 1)", Reach::VColumn, true, 1, affected});
        V = V0;
        V(j, 4) = -std::numeric_limits<T>::infinity();
        check_propagation<T>(Q, K, V, mask, clean, {"-Inf in V(j, 4)", Reach::VColumn, false, 4, affected});
      });
}

}  // namespace test_nonfinite
