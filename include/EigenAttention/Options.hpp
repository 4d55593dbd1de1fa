// SPDX-License-Identifier: MIT
/// \file Options.hpp
/// How an attention call is computed: causal masking, its alignment, the scale, the kernel.
#pragma once

#include <cstddef>
#include <optional>

#include <EigenAttention/Kernels.hpp>

namespace EigenAttention {

/// Where the causal frontier sits when T_q != T_k.
///
/// With `offset = 0` for TopLeft and `offset = T_k - T_q` for BottomRight, query row i may
/// see key row j exactly when `j <= i + offset`. For T_q == T_k both are the same mask.
enum class CausalAlignment {
  TopLeft,     ///< query i sees keys j <= i (PyTorch's `is_causal=True`).
  BottomRight  ///< query i sees keys j <= i + (T_k - T_q): the last query sees every key,
               ///< as when the queries are the newest tokens appended to a KV cache.
};

/// Options of an attention call. An aggregate: set the fields you need.
///
/// \code
/// EigenAttention::Options opt;
/// opt.causal = true;
/// opt.alignment = EigenAttention::CausalAlignment::BottomRight;
/// opt.scale = 0.125;  // default: 1 / sqrt(d_k)
/// \endcode
struct Options {
  /// Mask every key that lies after the query (see CausalAlignment). Default: no mask.
  bool causal = false;
  /// Alignment of the causal frontier, the sliding window and ALiBi when T_q != T_k
  /// (offset = 0 for TopLeft, T_k - T_q for BottomRight); ignored when none of them is used.
  CausalAlignment alignment = CausalAlignment::TopLeft;
  /// When set, replaces the alignment's offset: query row i's diagonal key is row
  /// i + diagonal_offset (causal: it sees keys j <= i + diagonal_offset; the window and ALiBi
  /// measure from that key too), whatever T_q, T_k, `alignment` or key lengths are. Any sign;
  /// |diagonal_offset| must be at most 2^60. This is how a block of a longer sequence is computed
  /// with the masks of its global positions: for queries at global positions q0, q0 + 1, ... and
  /// keys at k0, k0 + 1, ... of a sequence aligned with offset o (0, or T_k - T_q of the whole
  /// sequence for BottomRight), diagonal_offset = o + q0 - k0 (the distributed calls do this).
  /// Applies to every sequence of a packed (varlen) batch; the decode calls take their positions
  /// from the cache and reject it. Default: empty (the alignment decides).
  std::optional<std::ptrdiff_t> diagonal_offset;
  /// Multiplies the logits Q K^T. Must be finite and > 0, also once converted to the scalar
  /// type (1e-50 is 0 as a float and is rejected). When empty: 1 / sqrt(d_k), which then
  /// requires d_k > 0.
  std::optional<double> scale;
  /// Implementation to use; see Kernel. Default: Auto. Asking for a kernel this CPU cannot
  /// run throws std::invalid_argument.
  Kernel kernel = Kernel::Auto;
  /// Threads for one call: 1 (the default) runs on the calling thread only; n > 1 splits the
  /// query tiles over up to n threads of a pool the library keeps; 0 means one per hardware
  /// thread. Small problems use fewer. Results are bitwise identical for every value.
  /// Negative values throw std::invalid_argument.
  int threads = 1;
  /// Sliding window, as FlashAttention's window_size: query i sees key j only when
  /// i + offset - window_left <= j <= i + offset + window_right (and, when causal,
  /// j <= i + offset). -1 leaves that side unbounded; other negative values throw.
  /// window_left counts the keys a query may see before its diagonal key i + offset.
  /// Default: -1 (unbounded).
  std::ptrdiff_t window_left = -1;
  /// Right side of the sliding window (see window_left): the keys a query may see after its
  /// diagonal key i + offset; 0 allows none. Default: -1 (unbounded). With `causal` no key after
  /// the diagonal is seen anyway, so any value >= 0 or -1 gives the same mask.
  std::ptrdiff_t window_right = -1;
  /// Chunked-local attention (Llama 4's attention_chunk): with n > 0, keys are cut into chunks of
  /// n positions and a query sees only the keys of the chunk that holds its diagonal key
  /// i + offset (the position the window and the causal frontier measure from): key j when
  /// floor((j + chunk_origin) / n) == floor((i + offset + chunk_origin) / n). Combines with
  /// `causal` (Llama 4's layers), the window and every mask; tiles outside a query's chunk are
  /// not computed. 0 (the default) turns it off; must be between 0 and 2^60.
  std::ptrdiff_t chunk_size = 0;
  /// Where the chunks start: key row 0 is at position chunk_origin of the chunk grid (default 0:
  /// chunks start at key 0). Like diagonal_offset, for a block of a longer sequence whose first
  /// key is at global position chunk_origin (the distributed calls set it; decoding takes its
  /// positions from the cache and rejects a nonzero value). |chunk_origin| at most 2^60.
  std::ptrdiff_t chunk_origin = 0;
  /// Logit soft-capping: each scaled logit s becomes softcap * tanh(s / softcap) before biases
  /// and masks. 0 (the default) turns it off; otherwise it must be finite and > 0, also once
  /// converted to the scalar type.
  double softcap = 0;
  /// bfloat16 and half inputs only: attention_decomposed() puts SCORES, in float, into
  /// DecomposedResult::scores_float instead of rounding them into `scores`. The `_into` calls
  /// (attention_decomposed_into, attention_scores_into) take a SCORES output of the input type
  /// or of float and need no flag. Ignored for float and double.
  bool float_scores = false;
};

// Options crosses into the compiled library by reference: its layout must be the library's.
// Flags such as -fpack-struct=N change it (and would make the library misread every field).
static_assert(alignof(Options) == alignof(double),
              "EigenAttention: Options is laid out differently here than in the library "
              "(a struct packing flag such as -fpack-struct?)");

}  // namespace EigenAttention
