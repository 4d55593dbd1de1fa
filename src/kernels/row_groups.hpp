// SPDX-License-Identifier: MIT
// Independent groups of query rows. Where no row of a problem sees a key that a row before it
// sees (packed documents, chunked-local attention: a block mask's row ranges or the built-in
// chunks), the rows from there on form a problem of their own, with only their own keys: its
// tiles then start at its first row and its first key, as a varlen call's sequences do, rather
// than on the whole problem's grid, whose tiles would straddle two documents. Found from the key
// ranges alone (key_range.hpp), so the same for every thread count. Internal to the library.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/abi.hpp"

namespace EigenAttention {
namespace internal {

/// Rows [row, row + rows) of a problem, which see keys of [key, key + keys) only, a key that no
/// row outside them sees.
struct RowGroup {
  index_t row, rows, key, keys;
};

/// The row groups of p into `groups`, in row order, each of at least `min_rows` rows (but the
/// last): a group ends before row i when i sees some key and its first key is past every key
/// of the group's rows. A row that sees no key joins the group it falls in. One group, the whole
/// problem, when a block mask's tiles are given (they are laid on the whole problem's grid).
template <typename T>
void row_groups(const RawProblem<T>& p, index_t min_rows, std::vector<RowGroup>& groups) {
  groups.clear();
  const index_t tq = p.q.rows, tk = p.k.rows;
  if (p.blocks != nullptr || tq == 0) {
    groups.push_back({0, tq, 0, tk});
    return;
  }
  const KeyRange range = p.key_range();
  index_t start = 0, lo = tk, hi = 0;  // the group so far: rows [start, i), keys [lo, hi)
  for (index_t i = 0; i < tq; ++i) {
    const index_t a = range.first_key(i), b = range.end_key(i);
    if (a >= b) continue;
    if (lo < hi && a >= hi && i - start >= min_rows) {
      groups.push_back({start, i - start, lo, hi - lo});
      start = i, lo = tk, hi = 0;
    }
    lo = std::min(lo, a), hi = std::max(hi, b);
  }
  if (lo >= hi) lo = hi = 0;
  groups.push_back({start, tq - start, lo, hi - lo});
}

/// The part of m from row r and column c, rows x cols (m itself when it holds no data).
template <typename T>
RawMatrix<T> part(const RawMatrix<T>& m, index_t r, index_t rows, index_t c, index_t cols) {
  if (m.data == nullptr) return m;
  return raw_matrix(m.data + r * m.row_stride + c * m.col_stride, rows, cols, m.row_stride, m.col_stride);
}

/// Group g of p as a problem of its own: its rows, keys and values, and the parts of every
/// matrix indexed by them. Each row's keys are stated as its own range (RawProblem::row_keys,
/// written to `ranges`, 2 g.rows elements), in place of the causal frontier, window and chunk
/// they come from; the positions the logit options and callables see are p's (query_position,
/// key_position, ALiBi's distance).
template <typename T>
RawProblem<T> group_problem(const RawProblem<T>& p, const RowGroup& g, std::int64_t* ranges) {
  const KeyRange range = p.key_range();
  for (index_t r = 0; r < g.rows; ++r) {  // p's ranges moved to the group's keys (still non-decreasing)
    ranges[2 * r] = clamp_index(range.first_key(g.row + r) - g.key, 0, g.keys);
    ranges[2 * r + 1] = clamp_index(range.end_key(g.row + r) - g.key, 0, g.keys);
  }
  RawProblem<T> s = p;
  s.q = part(p.q, g.row, g.rows, 0, p.q.cols);
  s.k = part(p.k, g.key, g.keys, 0, p.k.cols);
  s.v = part(p.v, g.key, g.keys, 0, p.v.cols);
  s.causal = false;
  s.window_left = s.window_right = -1;
  s.chunk = 0;
  s.offset = p.offset + g.row - g.key;
  s.chunk_origin = p.chunk_origin + g.key;
  s.row_keys = ranges;
  s.bias = part(p.bias, g.row, g.rows, g.key, g.keys);
  s.mask = part(p.mask, g.row, g.rows, g.key, g.keys);
  s.scores = part(p.scores, g.row, g.rows, g.key, g.keys);
  s.compute_scores = part(p.compute_scores, g.row, g.rows, g.key, g.keys);
  s.attn = part(p.attn, g.row, g.rows, 0, p.attn.cols);
  s.lse = part(p.lse, g.row, g.rows, 0, p.lse.cols);
  RawGradient<T>& d = s.grad;
  d.out = part(p.grad.out, g.row, g.rows, 0, p.grad.out.cols);
  d.lse = part(p.grad.lse, g.row, g.rows, 0, p.grad.lse.cols);
  d.d_out = part(p.grad.d_out, g.row, g.rows, 0, p.grad.d_out.cols);
  d.d_scores = part(p.grad.d_scores, g.row, g.rows, g.key, g.keys);
  d.dq = part(p.grad.dq, g.row, g.rows, 0, p.grad.dq.cols);
  d.dk = part(p.grad.dk, g.key, g.keys, 0, p.grad.dk.cols);
  d.dv = part(p.grad.dv, g.key, g.keys, 0, p.grad.dv.cols);
  d.d_bias = part(p.grad.d_bias, g.row, g.rows, g.key, g.keys);
  d.d_lse = part(p.grad.d_lse, g.row, g.rows, 0, p.grad.d_lse.cols);
  d.d_sink_rows = part(p.grad.d_sink_rows, g.row, g.rows, 0, p.grad.d_sink_rows.cols);
  return s;
}

}  // namespace internal
}  // namespace EigenAttention
