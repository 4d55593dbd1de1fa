// SPDX-License-Identifier: MIT
// Argument validation: the one place where user input is checked, for every public call.
// Internal to the library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include <EigenAttention/HeadsView.hpp>
#include <EigenAttention/Masks.hpp>
#include <EigenAttention/Options.hpp>

#include "problem.hpp"

namespace EigenAttention {
namespace internal {

/// A public call as the validator sees it. The single-head calls pass their matrices as
/// [1, 1, T, d] views with form = Form::Matrix; the multi-head calls pass their views as they
/// are. An output is checked and written only when its want_* flag is set (an output with no
/// element may still be wanted: it is then checked, and nothing is written).
template <typename T>
struct Call {
  const char* api = "";
  Form form = Form::Heads;
  HeadsView<const T> q, k, v;
  bool has_v = true;         // attention_scores* take no V
  bool inputs_only = false;  // compiled::validate: the inputs and options, before outputs exist
  HeadsView<T> out, scores, average;
  HeadsView<ComputeScalar<T>> lse;             // the log-sum-exps are of the compute type
  HeadsView<ComputeScalar<T>> compute_scores;  // SCORES in the compute type, when scores_compute
  bool want_out = false, want_lse = false, want_scores = false, want_average = false;
  bool scores_compute = false;  // 16-bit inputs: SCORES go to compute_scores (float)
  Masks<T> masks;
  // attention_varlen_into*: both offsets given, `sequences` of them (the views' batch is 1).
  const std::int64_t* cu_q = nullptr;
  const std::int64_t* cu_k = nullptr;
  index_t sequences = 0;
  // The backward pass: the forward's out and lse, d_out = dL/dATTN and, when given (data not
  // null), d_scores = dL/dSCORES are inputs; dq, dk, dv and, when given, d_bias are the outputs
  // (the forward's outputs above are then unused).
  bool backward = false;
  bool want_d_scores = false;  // validated when wanted, even when empty (an empty Eigen matrix)
  HeadsView<const T> fwd_out, d_out, d_scores;
  HeadsView<const ComputeScalar<T>> fwd_lse;
  HeadsView<T> dq, dk, dv, d_bias;
};

/// Checks everything about `call` and `opt`, in this order: the sizes of each input, the inputs
/// against each other, the options (scale, window, soft-cap, threads, kernel), the outputs'
/// shapes and that no two of an output's elements share memory, the masks or the varlen
/// offsets, and that no output overlaps an input or another output (the one overlap rule:
/// may_overlap() in validate.cpp). Returns the resolved problem.
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

/// merge_attention_into's checks: equal shapes, LSE [B, H, T, 1], and outputs that are either the
/// very views of an input (merging in place) or apart from every input and each other.
template <typename T>
void check_merge(const char* api, HeadsView<const T> attn_a, HeadsView<const ComputeScalar<T>> lse_a,
                 HeadsView<const T> attn_b, HeadsView<const ComputeScalar<T>> lse_b, HeadsView<T> attn,
                 HeadsView<ComputeScalar<T>> lse);

/// The longest row (d_k, d_v or T_k) the tiled kernels' per-thread scratch can count: fewer
/// than kScratchRows rows of it (plus constants below kScratchRows^2) must stay representable
/// in bytes (kScratchRows is in kernels/abi.hpp, where the kernels check their tiles against
/// it). make_problem rejects larger sizes for every call alike.
template <typename T>
constexpr index_t kMaxScratchRowLength =
    std::numeric_limits<index_t>::max() / (kScratchRows * static_cast<index_t>(sizeof(T))) - kScratchRows;

}  // namespace internal
}  // namespace EigenAttention
