// The portable kernel: tiled attention in plain Eigen code, for any CPU.
//
// Fused call (ATTN only): for each tile of kRows query rows, stream over tiles of kCols keys,
// keeping a running row maximum m, a running sum l of exp(logit - m) and an accumulator
// acc = sum exp(logit - m) V, rescaled whenever m grows (the "online softmax"). Nothing of size
// T_q x T_k exists; the working set is O((kRows + kCols) * d) per thread.
//
// Decomposed call (SCORES too): for each tile of query rows, its whole row of logits
// (kRows x T_k) is formed in per-thread scratch, normalised in place, copied once into SCORES,
// and multiplied by V tile by tile.
//
// Causal masking: key tiles past the last key a row tile sees are never computed; tiles that
// cross the frontier are masked row by row, and their products with V only read the keys
// each row sees.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernel.hpp"
#include "workspace.hpp"

namespace EigenAttention {
namespace internal {
namespace {

constexpr Index kRows = 64;  // query rows per tile
constexpr Index kCols = 64;  // keys per tile

// Copies `rows` rows of a strided input, from row `first`, into contiguous row-major scratch.
template <typename T>
Eigen::Map<const RowMatrix<T>> pack(const ConstStridedMap<T>& src, Index first, Index rows, T* dst) {
  Eigen::Map<RowMatrix<T>> packed(dst, rows, src.cols());
  packed = src.middleRows(first, rows);
  return Eigen::Map<const RowMatrix<T>>(dst, rows, src.cols());
}

// Sets the logits of keys a row does not see to -inf. `s` holds keys [j0, j0 + s.cols()) for
// query rows [i0, i0 + s.rows()).
template <typename T, class Block>
void mask_tile(const Problem<T>& p, Index i0, Index j0, Block&& s) {
  const T minus_inf = -std::numeric_limits<T>::infinity();
  for (Index r = 0; r < s.rows(); ++r) {
    const Index seen = std::clamp<Index>(p.visible(i0 + r) - j0, 0, s.cols());
    s.row(r).tail(s.cols() - seen).setConstant(minus_inf);
  }
}

// row = exp(row - shift), with exp(-inf) exactly 0 (Eigen's vectorised exp returns a tiny
// subnormal there on SSE, and masked weights must be exact zeros).
template <class Row, typename T>
void exp_shifted(Row&& row, T shift) {
  const T minus_inf = -std::numeric_limits<T>::infinity();
  row = (row.array() == minus_inf).select(T(0), (row.array() - shift).exp()).matrix();
}

// acc += P V over a key tile, where row r of P may only use the keys it sees.
template <typename T, class PBlock, class VBlock, class AccBlock>
void accumulate(const Problem<T>& p, Index i0, Index j0, bool crosses_frontier, const PBlock& P,
                const VBlock& V, AccBlock&& acc) {
  if (!crosses_frontier) {
    acc.noalias() += P * V;
    return;
  }
  for (Index r = 0; r < P.rows(); ++r) {
    const Index seen = std::clamp<Index>(p.visible(i0 + r) - j0, 0, P.cols());
    if (seen > 0) acc.row(r).noalias() += P.row(r).head(seen) * V.topRows(seen);
  }
}

template <typename T>
void fused(const Problem<T>& p, StridedMap<T>& attn, StridedMap<T>* lse) {
  const T minus_inf = -std::numeric_limits<T>::infinity();
  const Index tq = p.tq(), dk = p.dk(), dv = p.dv();
  const auto round_up = [](Index n) { return (n + 15) / 16 * 16; };  // keep tiles 64-byte aligned
  const Index q_size = round_up(kRows * dk), k_size = round_up(kCols * dk),
              v_size = round_up(kCols * dv), s_size = round_up(kRows * kCols),
              acc_size = round_up(kRows * dv);
  T* scratch = ThreadWorkspace<T>::take(
      static_cast<std::size_t>(q_size + k_size + v_size + s_size + acc_size + 2 * kRows));
  T* const q_buf = scratch;
  T* const k_buf = q_buf + q_size;
  T* const v_buf = k_buf + k_size;
  T* const s_buf = v_buf + v_size;
  T* const acc_buf = s_buf + s_size;
  Eigen::Map<Vector<T>> m(acc_buf + acc_size, kRows), l(acc_buf + acc_size + kRows, kRows);

  for (Index i0 = 0; i0 < tq; i0 += kRows) {
    const Index rows = std::min(kRows, tq - i0);
    const Index keys_any = p.visible(i0 + rows - 1);  // keys some row of the tile sees
    const Index keys_all = p.visible(i0);             // keys every row of the tile sees
    const auto Q = pack(p.q, i0, rows, q_buf);
    Eigen::Map<RowMatrix<T>> acc(acc_buf, rows, dv);
    acc.setZero();
    m.head(rows).setConstant(minus_inf);
    l.head(rows).setZero();

    for (Index j0 = 0; j0 < keys_any; j0 += kCols) {
      const Index cols = std::min(kCols, keys_any - j0);
      const bool crosses_frontier = j0 + cols > keys_all;
      const auto K = pack(p.k, j0, cols, k_buf);
      const auto V = pack(p.v, j0, cols, v_buf);
      Eigen::Map<RowMatrix<T>> S(s_buf, rows, cols);
      S.noalias() = p.scale * (Q * K.transpose());
      if (crosses_frontier) mask_tile(p, i0, j0, S);

      for (Index r = 0; r < rows; ++r) {
        // A NaN logit must make the row NaN, never pass for "no visible key": propagate it.
        const T tile_max = S.row(r).template maxCoeff<Eigen::PropagateNaN>();
        const T new_max = std::isnan(tile_max) || tile_max > m(r) ? tile_max : m(r);
        if (new_max == minus_inf) {  // nothing visible to this row yet
          S.row(r).setZero();
          continue;
        }
        const T rescale = std::exp(m(r) - new_max);  // 0 on the first visible tile
        exp_shifted(S.row(r), new_max);
        l(r) = rescale * l(r) + S.row(r).sum();
        if (rescale != T(1)) acc.row(r) *= rescale;
        m(r) = new_max;
      }
      accumulate(p, i0, j0, crosses_frontier, S, V, acc);
    }

    for (Index r = 0; r < rows; ++r) {
      if (m(r) == minus_inf) {  // the row sees no key
        attn.row(i0 + r).setZero();
        if (lse != nullptr) (*lse)(i0 + r, 0) = minus_inf;
      } else {
        attn.row(i0 + r) = acc.row(r) / l(r);
        if (lse != nullptr) (*lse)(i0 + r, 0) = m(r) + std::log(l(r));
      }
    }
  }
}

template <typename T>
void decomposed(const Problem<T>& p, StridedMap<T>& scores, StridedMap<T>* attn, StridedMap<T>* lse) {
  const T minus_inf = -std::numeric_limits<T>::infinity();
  const Index tq = p.tq(), tk = p.tk(), dk = p.dk(), dv = attn != nullptr ? p.dv() : 0;
  const auto round_up = [](Index n) { return (n + 15) / 16 * 16; };
  const Index q_size = round_up(kRows * dk), k_size = round_up(kCols * dk),
              v_size = round_up(kCols * dv), s_size = round_up(kRows * tk),
              acc_size = round_up(kRows * dv);
  T* scratch = ThreadWorkspace<T>::take(
      static_cast<std::size_t>(q_size + k_size + v_size + s_size + acc_size));
  T* const q_buf = scratch;
  T* const k_buf = q_buf + q_size;
  T* const v_buf = k_buf + k_size;
  T* const s_buf = v_buf + v_size;
  T* const acc_buf = s_buf + s_size;

  for (Index i0 = 0; i0 < tq; i0 += kRows) {
    const Index rows = std::min(kRows, tq - i0);
    const Index keys_any = p.visible(i0 + rows - 1);
    const Index keys_all = p.visible(i0);
    const auto Q = pack(p.q, i0, rows, q_buf);
    Eigen::Map<RowMatrix<T>> S(s_buf, rows, keys_any);  // this tile's logits, then weights

    // Logits, scaled and masked, tile by tile.
    for (Index j0 = 0; j0 < keys_any; j0 += kCols) {
      const Index cols = std::min(kCols, keys_any - j0);
      const auto K = pack(p.k, j0, cols, k_buf);
      S.middleCols(j0, cols).noalias() = p.scale * (Q * K.transpose());
      if (j0 + cols > keys_all) mask_tile(p, i0, j0, S.middleCols(j0, cols));
    }
    // Row softmax in place, subtracting the row maximum.
    for (Index r = 0; r < rows; ++r) {
      const T row_max = keys_any > 0 ? S.row(r).template maxCoeff<Eigen::PropagateNaN>() : minus_inf;
      if (row_max == minus_inf) {
        S.row(r).setZero();
        if (lse != nullptr) (*lse)(i0 + r, 0) = minus_inf;
        continue;
      }
      exp_shifted(S.row(r), row_max);
      const T sum = S.row(r).sum();
      S.row(r) /= sum;
      if (lse != nullptr) (*lse)(i0 + r, 0) = row_max + std::log(sum);
    }
    scores.middleRows(i0, rows).leftCols(keys_any) = S;
    scores.middleRows(i0, rows).rightCols(tk - keys_any).setZero();

    if (attn == nullptr) continue;
    Eigen::Map<RowMatrix<T>> acc(acc_buf, rows, dv);
    acc.setZero();
    for (Index j0 = 0; j0 < keys_any; j0 += kCols) {
      const Index cols = std::min(kCols, keys_any - j0);
      const auto V = pack(p.v, j0, cols, v_buf);
      accumulate(p, i0, j0, j0 + cols > keys_all, S.middleCols(j0, cols), V, acc);
    }
    attn->middleRows(i0, rows) = acc;
  }
}

}  // namespace

template <typename T>
void portable_kernel(const Problem<T>& p, const Outputs<T>& out) {
  if (out.scores == nullptr) {
    fused(p, *out.attn, out.lse);
  } else {
    decomposed(p, *out.scores, out.attn, out.lse);
  }
}

template void portable_kernel<float>(const Problem<float>&, const Outputs<float>&);
template void portable_kernel<double>(const Problem<double>&, const Outputs<double>&);

}  // namespace internal
}  // namespace EigenAttention
