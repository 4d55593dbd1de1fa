// SPDX-License-Identifier: MIT
/// \file Programmable.hpp
/// Programmable attention: your own score modification and mask as C++ callables, called by the
/// compiled kernels tile by tile (FlexAttention's score_mod and mask_mod, without a compiler).
///
/// \code
/// // A relative-position bias from a table, and a prefix-LM mask (first 16 keys seen by all).
/// std::vector<float> table(2 * T - 1);
/// auto f = [&](auto s, auto /*b*/, auto /*h*/, auto q, auto k) { return s + table[q - k + T - 1]; };
/// auto g = [](auto /*b*/, auto /*h*/, auto q, auto k) { return k < 16 || k <= q; };
/// auto sm = EigenAttention::score_mod(f);
/// auto mm = EigenAttention::mask_mod(g);
/// EigenAttention::Masks<float> masks;
/// masks.score_mod = sm;  // sm and mm (and what f and g capture) must outlive the call
/// masks.mask_mod = mm;
/// EigenAttention::attention_heads_into(q, k, v, out, {}, opt, masks);
/// \endcode
///
/// The callables take (batch b, query head h, query position q, key position k), each a
/// std::ptrdiff_t: b is the sequence (of a batch, or of a packed varlen batch), h the query head,
/// and the positions are measured as the masks measure them. Key row j is at position
/// k = j + Options::chunk_origin (0 unless set: the distributed calls set it to the block's global
/// position); query row i is at the position of its diagonal key, q = i + offset + chunk_origin
/// with offset 0 (CausalAlignment::TopLeft), T_k - T_q (BottomRight, the sequence's key length
/// with key_lengths) or Options::diagonal_offset. So `k <= q` is the causal mask in either
/// alignment, and q - k the distance ALiBi takes. In decode, a query token's position is its
/// position in the cache.
///
/// The score modification f(s, b, h, q, k) returns the modified logit of s, the scaled and
/// soft-capped logit; the built-in ALiBi, bias and masks apply after it (docs/semantics.md). Write
/// it generic in s (`auto s`): the forward calls it with the compute scalar (float for bfloat16
/// and half), the backward with Dual<T> (Dual.hpp) for its derivative df/ds.
///
/// The mask g(b, h, q, k) returns whether query q may see key k; a hidden key has weight exactly
/// 0 whatever f returns for it. A BlockMask (BlockMask.hpp) tells the kernels which tiles no key
/// of g shows (never computed) and which g shows whole (g never called).
///
/// The library instantiates the loops that call them here, in your translation unit, with your
/// compiler flags: a callable the compiler can inline and vectorise (arithmetic, comparisons,
/// table lookups) costs little; docs/programmable.md says how to write a fast one.
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

#include <EigenAttention/Dual.hpp>

namespace EigenAttention {

/// A tile of logits that the kernels hand to a score modification: rows of query positions
/// query, query + 1, ... and columns of key positions key, key + 1, ...; element (r, c) at
/// logits[r * ld + c]. In the backward, `derivative` (same layout) receives df/ds.
template <typename T>
struct ScoreTile {
  T* logits;          ///< (r, c) at logits[r * ld + c]
  T* derivative;      ///< null in the forward
  std::ptrdiff_t ld;  ///< the row stride of both
  ///@{
  /// The sequence and query head, the first query position and the rows, the first key
  /// position and the columns.
  std::ptrdiff_t batch, head, query, rows, key, cols;
  ///@}
};

/// A tile of positions that the kernels ask a mask about: visible[r * ld + c] receives 1 when
/// query position query + r may see key position key + c, else 0 (bytes rather than bool, so
/// that the loops that read and write them vectorise).
struct MaskTile {
  unsigned char* visible;  ///< (r, c) at visible[r * ld + c]
  std::ptrdiff_t ld;       ///< the row stride of `visible`
  ///@{
  /// The sequence and query head, the first query position and the rows, the first key
  /// position and the columns.
  std::ptrdiff_t batch, head, query, rows, key, cols;
  ///@}
};

/// A tile of dL/d(modified logit) that the backward hands to a gradient callback (logit_grad()):
/// grad[r * ld + c] is the gradient of the loss in the logit f returned for query position
/// query + r and key position key + c (0 where a mask hides the key).
template <typename T>
struct LogitGradTile {
  const T* grad;      ///< (r, c) at grad[r * ld + c]
  std::ptrdiff_t ld;  ///< its row stride
  ///@{
  /// The sequence and query head, the first query position and the rows, the first key
  /// position and the columns.
  std::ptrdiff_t batch, head, query, rows, key, cols;
  ///@}
};

/// A score modification (score_mod()): the callable, held by value, or by reference when
/// score_mod() was given an lvalue (F then a reference type).
template <class F>
struct ScoreMod {
  F f;  ///< f(s, b, h, q, k)
};

/// A mask (mask_mod()): the callable, held as ScoreMod holds its own.
template <class G>
struct MaskMod {
  G g;  ///< g(b, h, q, k)
};

/// A gradient callback (logit_grad()): the callable, held as ScoreMod holds its own.
template <class H>
struct LogitGrad {
  H h;  ///< h(g, b, h, q, k)
};

/// Wraps f(s, b, h, q, k) as a score modification. An lvalue is held by reference (it must
/// outlive every call that uses it), a temporary by value.
template <class F>
ScoreMod<F> score_mod(F&& f) {
  return {std::forward<F>(f)};
}

/// Wraps g(b, h, q, k) -> bool as a mask (held as score_mod() holds f).
template <class G>
MaskMod<G> mask_mod(G&& g) {
  return {std::forward<G>(g)};
}

/// Wraps h(g, b, h, q, k) as a gradient callback for BackwardTerms::logit_grad (held as
/// score_mod() holds f): the backward calls it with g = dL/d(the logit f returned) for each
/// position (b, h, q, k) whose g is not 0, so never for a key a mask hides (its g is exactly 0).
/// It is called from one thread at a time, tile after tile in an order that the thread count does
/// not change, so that sums it accumulates (the gradient of a table or slopes f reads) have the
/// same bits for every Options::threads. It is called as a const callable: it accumulates through
/// what it captures by reference (`[&]`), as f reads through them.
template <class H>
LogitGrad<H> logit_grad(H&& h) {
  return {std::forward<H>(h)};
}

namespace detail {

/// The loop over a tile of logits, in the caller's translation unit (its flags, its inlining).
template <typename T, class F>
void score_tile(const void* callable, const ScoreTile<T>& t) {
  const auto& f = static_cast<const ScoreMod<F>*>(callable)->f;
  const std::ptrdiff_t b = t.batch, h = t.head, key = t.key, cols = t.cols;
  for (std::ptrdiff_t r = 0; r < t.rows; ++r) {
    T* const s = t.logits + r * t.ld;
    const std::ptrdiff_t q = t.query + r;
    for (std::ptrdiff_t c = 0; c < cols; ++c) s[c] = static_cast<T>(f(s[c], b, h, q, key + c));
  }
}

/// The tile's logits and their derivatives, through Dual<T>{s, 1}.
template <typename T, class F>
void score_tile_with_derivative(const void* callable, const ScoreTile<T>& t) {
  const auto& f = static_cast<const ScoreMod<F>*>(callable)->f;
  for (std::ptrdiff_t r = 0; r < t.rows; ++r) {
    T* const s = t.logits + r * t.ld;
    T* const d = t.derivative + r * t.ld;
    const std::ptrdiff_t q = t.query + r;
    for (std::ptrdiff_t c = 0; c < t.cols; ++c) {
      const auto y = f(Dual<T>(s[c], T(1)), t.batch, t.head, q, t.key + c);
      if constexpr (std::is_arithmetic_v<std::decay_t<decltype(y)>>) {  // a constant of s
        s[c] = static_cast<T>(y);
        d[c] = T(0);
      } else {
        static_assert(std::is_same_v<std::decay_t<decltype(y)>, Dual<T>>,
                      "EigenAttention::score_mod: f(s, b, h, q, k) must return the type of s (write it "
                      "with `auto s`, and call exp, tanh, ... unqualified: see Dual.hpp)");
        s[c] = y.value;
        d[c] = y.derivative;
      }
    }
  }
}

/// The loop over a tile of positions, in the caller's translation unit. g's answers go to a bool
/// buffer first: a store of bool, unlike one of unsigned char, cannot change what g reads, so
/// the compiler may keep g's data in registers and vectorise the loop.
template <class G>
void mask_tile(const void* callable, const MaskTile& t) {
  const auto& g = static_cast<const MaskMod<G>*>(callable)->g;
  const std::ptrdiff_t b = t.batch, h = t.head, key = t.key, cols = t.cols;
  constexpr std::ptrdiff_t kChunk = 64;
  for (std::ptrdiff_t r = 0; r < t.rows; ++r) {
    unsigned char* const v = t.visible + r * t.ld;
    const std::ptrdiff_t q = t.query + r;
    for (std::ptrdiff_t c0 = 0; c0 < cols; c0 += kChunk) {
      const std::ptrdiff_t n = cols - c0 < kChunk ? cols - c0 : kChunk;
      bool seen[kChunk];
      for (std::ptrdiff_t c = 0; c < n; ++c) seen[c] = static_cast<bool>(g(b, h, q, key + c0 + c));
      for (std::ptrdiff_t c = 0; c < n; ++c) v[c0 + c] = seen[c];
    }
  }
}

/// The loop over a tile of gradients, in the caller's translation unit: h for each nonzero g, row
/// after row, key after key.
template <typename T, class H>
void logit_grad_tile(const void* callable, const LogitGradTile<T>& t) {
  const auto& h = static_cast<const LogitGrad<H>*>(callable)->h;
  const std::ptrdiff_t b = t.batch, head = t.head, key = t.key, cols = t.cols;
  for (std::ptrdiff_t r = 0; r < t.rows; ++r) {
    const T* const g = t.grad + r * t.ld;
    const std::ptrdiff_t q = t.query + r;
    for (std::ptrdiff_t c = 0; c < cols; ++c) {
      if (g[c] != T(0)) h(g[c], b, head, q, key + c);
    }
  }
}

}  // namespace detail

/// What a call holds of a score modification (Masks::score_mod): the address of the ScoreMod and
/// its tile loops for the compute scalar T, instantiated where it was assigned. Plain pointers
/// only, so that it crosses into the compiled library whatever the flags on either side.
template <typename T>
struct ScoreModRef {
  const void* callable = nullptr;  ///< the ScoreMod
  /// Its loop over a tile of logits (the forward).
  void (*apply)(const void* callable, const ScoreTile<T>& tile) = nullptr;
  /// Its loop over a tile of logits and their derivatives, through Dual<T> (the backward).
  void (*apply_with_derivative)(const void* callable, const ScoreTile<T>& tile) = nullptr;

  ScoreModRef() = default;
  /// Refers to `m`, which must outlive the calls that use it.
  template <class F>
  ScoreModRef(const ScoreMod<F>& m)  // NOLINT: implicit, `masks.score_mod = sm;`
      : callable(&m),
        apply(&detail::score_tile<T, F>),
        apply_with_derivative(&detail::score_tile_with_derivative<T, F>) {}
  /// A temporary would be gone before the call: keep the score_mod() in a variable.
  template <class F>
  ScoreModRef(const ScoreMod<F>&&) = delete;
  /// Is no score modification given?
  bool empty() const { return apply == nullptr; }
};

/// What a call holds of a mask (Masks::mask_mod): the address of the MaskMod and its tile loop.
struct MaskModRef {
  const void* callable = nullptr;                                       ///< the MaskMod
  void (*apply)(const void* callable, const MaskTile& tile) = nullptr;  ///< its loop over a tile

  MaskModRef() = default;
  /// Refers to `m`, which must outlive the calls that use it.
  template <class G>
  MaskModRef(const MaskMod<G>& m)  // NOLINT: implicit, `masks.mask_mod = mm;`
      : callable(&m), apply(&detail::mask_tile<G>) {}
  /// A temporary would be gone before the call: keep the mask_mod() in a variable.
  template <class G>
  MaskModRef(const MaskMod<G>&&) = delete;
  /// Is no mask given?
  bool empty() const { return apply == nullptr; }
};

/// What a backward call holds of a gradient callback (BackwardTerms::logit_grad): the address of
/// the LogitGrad and its tile loop for the compute scalar T.
template <typename T>
struct LogitGradRef {
  const void* callable = nullptr;  ///< the LogitGrad
  /// Its loop over a tile of gradients.
  void (*apply)(const void* callable, const LogitGradTile<T>& tile) = nullptr;

  LogitGradRef() = default;
  /// Refers to `m`, which must outlive the calls that use it.
  template <class H>
  LogitGradRef(const LogitGrad<H>& m)  // NOLINT: implicit, `terms.logit_grad = lg;`
      : callable(&m), apply(&detail::logit_grad_tile<T, H>) {}
  /// A temporary would be gone before the call: keep the logit_grad() in a variable.
  template <class H>
  LogitGradRef(const LogitGrad<H>&&) = delete;
  /// Is no callback given?
  bool empty() const { return apply == nullptr; }
};

}  // namespace EigenAttention
