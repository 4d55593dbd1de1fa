// SPDX-License-Identifier: MIT
// The outputs of the single-head calls as they cross the boundary (abi::Output of
// detail/AbiSingleHead.hpp): those of fixed shape are checked with the inputs; the caller's
// resizable matrices are sized, through the caller's translation unit, only once everything else
// has passed. Internal to the library.
#pragma once

#include <cstddef>
#include <optional>

#include <EigenAttention/HeadsView.hpp>
#include <EigenAttention/detail/AbiSingleHead.hpp>

#include "check/call.hpp"

namespace EigenAttention {
namespace internal {

/// Throws std::invalid_argument (naming `api`, the result `name` and its shape `what`, e.g.
/// "T_q x T_k") unless a rows x cols result of `element_bytes`-byte elements can be counted: its
/// byte count fits std::ptrdiff_t and its element count is at most `max_elements` (the largest
/// size the caller's Eigen::Index holds).
void check_result_size(const char* api, const char* name, const char* what, index_t rows, index_t cols,
                       std::size_t element_bytes, index_t max_elements);

/// Asks the OS to back [data, data + bytes) with huge pages when it is large (a T_q x T_k SCORES
/// result: thousands of page faults fewer). Only a hint; never fails.
void prefer_huge_pages(void* data, std::size_t bytes);

/// One output of a single-head call and the shape it must have: `out` null when not asked for.
template <typename S>
struct Slot {
  abi::Output<S>* out;
  const char* name;  // as a by-value result names it: "SCORES", "ATTN", "LSE", "dQ", ...
  const char* what;  // its shape: "T_q x T_k", ...
  index_t rows, cols;
  bool huge_pages = false;  // a T_q x T_k result: prefer_huge_pages once sized

  /// Will the caller's matrix be resized to rows x cols? (Not when its fixed sizes cannot take
  /// them: it is then checked as it is, and rejected by its shape.)
  bool will_resize() const {
    if (out == nullptr || out->resize == nullptr) return false;
    const bool fits = (out->compile_rows < 0 || out->compile_rows == rows) &&
                      (out->compile_cols < 0 || out->compile_cols == cols);
    return fits && (out->view.rows != rows || out->view.cols != cols);
  }
  /// The output as the validator sees it at `stage`: absent when not asked for, or before sizing
  /// when it will be resized.
  std::optional<HeadsView<S>> view(Stage stage) const {
    if (out == nullptr || (stage == Stage::BeforeSizing && will_resize())) return std::nullopt;
    return one_head(out->view);
  }
  /// Checks that the result can be counted (first, for every slot), then sizes it.
  void check_size(const char* api) const {
    if (will_resize()) check_result_size(api, name, what, rows, cols, sizeof(S), out->max_elements);
  }
  void size() const {
    if (!will_resize()) return;
    out->view = out->resize(out->matrix, rows, cols);
    if (huge_pages) prefer_huge_pages(out->view.data, static_cast<std::size_t>(rows * cols) * sizeof(S));
  }
};

/// Validates the call `call(stage)` makes (before sizing, when a slot will be resized), sizes the
/// slots that will be, and returns the problem of the call with every output in place.
template <typename T, class MakeCall, class... Slots>
Problem<T> with_outputs_sized(const Options& opt, MakeCall&& call, const Slots&... slots) {
  if ((slots.will_resize() || ...)) {
    const Call<T> before = call(Stage::BeforeSizing);
    make_problem(before, opt);
    (slots.check_size(before.api), ...);
    (slots.size(), ...);
  }
  return make_problem(call(Stage::Complete), opt);
}

}  // namespace internal
}  // namespace EigenAttention
