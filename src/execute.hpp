// SPDX-License-Identifier: MIT
// Running a validated problem: every (sequence, query head) on the kernel it resolved to, split
// over threads (run_problems in kernels/kernels.hpp, on the one scheduler of scheduler.hpp). The
// one way every public call computes. Internal.
#pragma once

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/backward.hpp"
#include "kernels/kernels.hpp"
#include "problem.hpp"
#include "widen.hpp"

namespace EigenAttention {
namespace internal {

/// Runs a validated decode problem (Problem::paged; decode.cpp): each sequence's query rows in
/// blocks of a GQA group, their keys in split-K chunks over the threads, merged in key order.
template <typename T>
void execute_decode(const Problem<T>& p, int threads);

/// The reference decode (kernels/reference_decode.cpp): each sequence's keys and values of each
/// KV head gathered into plain matrices, and the forward's reference kernel on every query head.
template <typename T>
void reference_decode(const Problem<T>& p);

template <typename T>
void execute(const Problem<T>& p, int threads) {
  run_problems<T>(
      p.kernel, p.problems(), [&](index_t which) { return p.problem(which); }, threads);
  // Padded keys (beyond key_lengths) were cut from each head's problem: their weights are 0.
  if (p.want_scores && p.masks.key_lengths != nullptr) {
    const auto zero_padded = [&](const auto& scores) {
      using E = std::remove_const_t<std::remove_pointer_t<decltype(scores.data)>>;
      const index_t rows = scores.batch * scores.heads * scores.tokens;
      const double bytes = static_cast<double>(scores.dim) * sizeof(E);  // at most
      for_row_blocks(rows, threads, bytes, [&](index_t first, index_t count) {
        for (index_t r = first; r < first + count; ++r) {
          const index_t bh = r / scores.tokens, i = r % scores.tokens;
          const index_t b = bh / scores.heads, h = bh % scores.heads;
          for (index_t j = p.masks.key_lengths[b]; j < scores.dim; ++j)
            scores.data[b * scores.batch_stride + h * scores.head_stride + i * scores.token_stride +
                        j * scores.dim_stride] = E{};
        }
      });
    };
    if (p.scores_compute) {
      zero_padded(p.compute_scores);
    } else {
      zero_padded(p.scores);
    }
  }
}

/// Zeroes rows [first, first + count) of head (b, h) of a view.
template <typename T>
void zero_head_rows(const HeadsView<T>& v, index_t b, index_t h, index_t first, index_t count) {
  if (v.data == nullptr) return;
  zero_rows(raw_matrix<T>(v.data + b * v.batch_stride + h * v.head_stride + first * v.token_stride, count,
                          v.dim, v.token_stride, v.dim_stride));
}

/// The backward pass of a validated problem (run_backward in kernels/backward.hpp): units of
/// the problems that add into the same dK/dV (a GQA group) or dbias (the heads or sequences
/// sharing a broadcast bias), each in (sequence, head) order, accumulating into p.grad_*.
template <typename T>
void accumulate_gradients(const Problem<T>& p, int threads) {
  const index_t B = p.sequences, H = p.heads();
  const HeadsView<ComputeScalar<T>>& d_bias = p.grad_d_bias;
  if (B == 0 || H == 0) {  // no problem adds into dbias: it is the empty sum, 0
    for (index_t b = 0; b < d_bias.batch; ++b)
      for (index_t h = 0; h < d_bias.heads; ++h) zero_head_rows(d_bias, b, h, 0, d_bias.tokens);
    return;
  }
  const bool bias_over_batch = d_bias.data != nullptr && d_bias.batch == 1;
  const bool bias_over_heads = d_bias.data != nullptr && d_bias.heads == 1;
  const index_t group = H / p.k.heads;
  const index_t batches = bias_over_batch ? B : 1, heads = bias_over_heads ? H : group;
  const index_t head_units = H / heads, units = (B / batches) * head_units;
  const auto where = [&](index_t u, index_t t, index_t& b, index_t& h) {
    b = u / head_units * batches + t / heads;
    h = u % head_units * heads + t % heads;
  };
  const auto problem = [&](index_t u, index_t t) {
    index_t b, h;
    where(u, t, b, h);
    return p.problem(b * H + h);
  };
  // Zero what unit u adds into: dK and dV of its K/V heads (every key row, padded ones too) and
  // its slices of dbias.
  const auto prepare = [&](index_t u) {
    for (index_t t = 0; t < batches * heads; ++t) {
      index_t b, h;
      where(u, t, b, h);
      const index_t kv = h / group;
      const index_t batch = p.varlen() ? 0 : b;
      const index_t first = p.varlen() ? p.cu_k[b] : 0;
      const index_t count = p.varlen() ? p.cu_k[b + 1] - p.cu_k[b] : p.k.tokens;
      if (h % group == 0) {
        zero_head_rows(p.grad_dk, batch, kv, first, count);
        zero_head_rows(p.grad_dv, batch, kv, first, count);
      }
      zero_head_rows(d_bias, d_bias.batch == 1 ? 0 : b, d_bias.heads == 1 ? 0 : h, 0, d_bias.tokens);
    }
  };
  run_backward<T>(p.kernel, units, batches * heads, problem, prepare, threads);
}

/// dL/dsinks (BackwardTerms::d_sinks) from each row's share (the kernels' row terms wrote them
/// into p.grad_d_sink_rows, zero elsewhere): per query head, the sum over the sequences and their
/// rows, in that order.
template <typename T>
void sum_sink_rows(const Problem<T>& p) {
  const HeadsView<ComputeScalar<T>>& rows = p.grad_d_sink_rows;
  for (index_t h = 0; h < p.heads(); ++h) {
    ComputeScalar<T> sum = 0;
    for (index_t b = 0; b < rows.batch; ++b)
      for (index_t i = 0; i < rows.tokens; ++i)
        sum += rows.data[b * rows.batch_stride + h * rows.head_stride + i];
    p.d_sinks[h] = sum;
  }
}

/// The backward pass of a validated problem: for float and double into its gradients; for
/// bfloat16 and half (whose tiles the kernels widen as they load them) into float gradients in
/// the calling thread's workspace, grown once and kept, then rounded once into the 16-bit
/// gradients. Of a packed batch, only the sequences' rows are written. dL/dsinks, when wanted,
/// is summed from each row's share, held in another workspace of the calling thread.
template <typename T>
void execute_backward(const Problem<T>& given, int threads) {
  Problem<T> p = given;
  const bool sinks = p.d_sinks != nullptr && p.masks.sinks != nullptr;
  if (sinks) {
    thread_local std::vector<ComputeScalar<T>> sink_rows;
    const index_t B = p.q.batch, H = p.heads(), tq = p.q.tokens, n = B * H * tq;
    if (static_cast<index_t>(sink_rows.size()) < n) sink_rows.resize(static_cast<std::size_t>(n));
    std::fill_n(sink_rows.data(), n, ComputeScalar<T>(0));
    p.grad_d_sink_rows = {n == 0 ? nullptr : sink_rows.data(), B, H, tq, 1, H * tq, tq, 1, 1};
  }
  if constexpr (kIsLowPrecision<T>) {
    thread_local std::vector<float> workspace;
    const auto size = [](const HeadsView<T>& v) { return v.batch * v.heads * v.tokens * v.dim; };
    const index_t n = size(p.dq) + size(p.dk) + size(p.dv) + (p.d_bias.data != nullptr ? size(p.d_bias) : 0);
    if (static_cast<index_t>(workspace.size()) < n) workspace.resize(static_cast<std::size_t>(n));
    float* next = workspace.data();
    const auto wide = [&](const HeadsView<T>& v) {  // a contiguous float view of v's sizes
      const HeadsView<float> w{v.data == nullptr ? nullptr : next, v.batch,          v.heads, v.tokens, v.dim,
                               v.heads * v.tokens * v.dim,         v.tokens * v.dim, v.dim,   1};
      if (v.data != nullptr) next += size(v);
      return w;
    };
    p.grad_dq = wide(p.dq), p.grad_dk = wide(p.dk), p.grad_dv = wide(p.dv), p.grad_d_bias = wide(p.d_bias);
    accumulate_gradients(p, threads);
    const index_t q_rows = p.varlen() ? p.cu_q[p.sequences] : p.dq.tokens;
    const index_t k_rows = p.varlen() ? p.cu_k[p.sequences] : p.dk.tokens;
    narrow_into(p.grad_dq, p.dq, 0, q_rows, threads);
    narrow_into(p.grad_dk, p.dk, 0, k_rows, threads);
    narrow_into(p.grad_dv, p.dv, 0, k_rows, threads);
    if (p.d_bias.data != nullptr) narrow_into(p.grad_d_bias, p.d_bias, 0, p.d_bias.tokens, threads);
  } else {
    p.grad_dq = p.dq, p.grad_dk = p.dk, p.grad_dv = p.dv, p.grad_d_bias = p.d_bias;
    accumulate_gradients(p, threads);
  }
  if (sinks) sum_sink_rows(p);
}

}  // namespace internal
}  // namespace EigenAttention
