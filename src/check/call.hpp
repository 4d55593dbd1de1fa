// SPDX-License-Identifier: MIT
// A public call as the validator sees it, composed of parts, and the checks that turn it into
// the one validated Problem (problem.hpp). Every family's front door fills a Call and calls
// make_problem; nothing else checks user input. Internal to the library (src/check/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include <EigenAttention/BackwardTerms.hpp>
#include <EigenAttention/HeadsView.hpp>
#include <EigenAttention/Masks.hpp>
#include <EigenAttention/Options.hpp>

#include "problem.hpp"

namespace EigenAttention {
namespace internal {

/// Q, K and V as [B, H, T_q, d_k], [B, H_kv, T_k, d_k], [B, H_kv, T_k, d_v]; V absent for the
/// calls that compute weights alone (attention_scores*) or log-sum-exps alone (the LSE-only form).
template <typename T>
struct Inputs {
  HeadsView<const T> q, k;
  std::optional<HeadsView<const T>> v;
};

/// The forward's outputs; an absent one is not wanted. The log-sum-exps alone (lse present,
/// attn and scores absent) are the LSE-only form, whose call gives no V. A wanted output with no element is
/// still checked (its shape), and nothing is written. SCORES go to `scores` (the element type) or, for 16-bit
/// inputs that ask for float weights, to `compute_scores`; never both.
template <typename T>
struct Outputs {
  using Compute = ComputeScalar<T>;
  std::optional<HeadsView<T>> attn, scores, average_scores;
  std::optional<HeadsView<Compute>> lse, compute_scores;
};

/// The backward pass: the forward's attn and lse, d_attn = dL/dATTN and, optionally,
/// d_scores = dL/dSCORES and d_lse = dL/dLSE are inputs; dq, dk, dv and, optionally, d_bias
/// (dL/dbias, of the bias's broadcast shape) and d_sinks (dL/dsinks, H values) are its outputs. A gradient is
/// absent only while a front door has still to size it (Stage::BeforeSizing).
template <typename T>
struct Gradients {
  using Compute = ComputeScalar<T>;
  HeadsView<const T> attn, d_attn;
  HeadsView<const Compute> lse;
  std::optional<HeadsView<const T>> d_scores;
  std::optional<HeadsView<T>> dq, dk, dv, d_bias;
  BackwardTerms<T> terms;  // dL/dLSE in, dL/dsinks out, the gradient callback (each optional)
};

/// A packed variable-length batch (attention_varlen_into*): sequence b owns query rows
/// [cu_q[b], cu_q[b + 1]) and key rows [cu_k[b], cu_k[b + 1]) of the views' one batch entry.
struct PackedSequences {
  const std::int64_t* cu_q = nullptr;
  const std::int64_t* cu_k = nullptr;
  index_t sequences = 0;
};

/// When a call is checked: before a front door sizes its resizable outputs (those absent then are
/// the ones it will size: only the inputs, the options and the outputs given are checked), or
/// with every output in place.
enum class Stage { BeforeSizing, Complete };

/// A call's parts: the inputs (for a decode call, Q alone: its keys are `paged`), the outputs, the
/// backward's gradients, the offsets of a packed batch (of a decode call, cu_seqlens_q alone: its
/// cu_k is null), the masks, paged keys and values (decode), and the stage of the check.
template <typename T>
struct Call {
  const char* api = "";
  Form form = Form::Heads;  // how messages print shapes
  Inputs<T> in;
  Outputs<T> out;
  std::optional<Gradients<T>> backward;
  std::optional<PackedSequences> packed;
  Masks<T> masks;
  std::optional<PagedKeys<ComputeScalar<T>>> paged;
  Stage stage = Stage::Complete;
};

/// Checks everything about `call` and `opt`, in this order: the sizes of each input, the inputs
/// against each other, the backward's further inputs, the masks or the packed offsets, the
/// options (scale, window, soft-cap, threads, kernel), the outputs' shapes, and memory (no two
/// elements of an output share memory, no output overlaps an input or another output: the one
/// overlap rule of overlap.hpp). Returns the resolved problem.
/// \throws std::invalid_argument naming `call.api`, the argument and its shape; nothing has been
/// written then.
template <typename T>
Problem<T> make_problem(const Call<T>& call, const Options& opt);

/// Offsets of each sequence's packed weights (attention_varlen_decomposed_into), batch + 1 of them,
/// the last being the size `scores` must have. Checks the cu_seqlens offsets (non-decreasing
/// from 0) first. Throws std::invalid_argument.
std::vector<index_t> varlen_score_offsets(const char* api, const std::int64_t* cu_q, const std::int64_t* cu_k,
                                          index_t batch, index_t heads);

/// Throws std::invalid_argument unless the packed `scores` (size elements) has the required
/// size and lies apart from the problem's inputs and outputs.
template <typename T>
void check_packed_scores(const char* api, const T* scores, std::size_t size, std::size_t required,
                         const Problem<T>& p);

/// merge_attention_into's checks: equal shapes, LSE [B, H, T, 1], outputs that are either the
/// very views of an input (merging in place) or apart from every input and each other, and
/// Options::threads.
template <typename T>
void check_merge(const char* api, HeadsView<const T> attn_a, HeadsView<const ComputeScalar<T>> lse_a,
                 HeadsView<const T> attn_b, HeadsView<const ComputeScalar<T>> lse_b, HeadsView<T> attn,
                 HeadsView<ComputeScalar<T>> lse, const Options& opt);

}  // namespace internal
}  // namespace EigenAttention
