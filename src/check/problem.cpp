// SPDX-License-Identifier: MIT
// make_problem (call.hpp): a table of small checks, run in the order call.hpp documents, each
// adding the arrays it checked to the lists the memory checks read last.
#include <algorithm>

#include "check/array.hpp"
#include "check/call.hpp"
#include "check/masks.hpp"
#include "check/options.hpp"
#include "check/overlap.hpp"
#include "check/paged.hpp"
#include "check/program.hpp"

namespace EigenAttention {
namespace internal {
namespace {

/// The shape an argument must have, in the caller's terms: "T_q x d_v" or "[B, H, T_q, d_v]".
struct Shape {
  const char* matrix;
  const char* heads;
};
constexpr Shape kAttnShape{"T_q x d_v", "[B, H, T_q, d_v]"}, kLseShape{"T_q x 1", "[B, H, T_q, 1]"},
    kScoresShape{"T_q x T_k", "[B, H, T_q, T_k]"}, kDqShape{"T_q x d_k", "[B, H, T_q, d_k]"},
    kDkShape{"T_k x d_k", "[B, H_kv, T_k, d_k]"}, kDvShape{"T_k x d_v", "[B, H_kv, T_k, d_v]"};

/// Checks that `view` is [batch, heads, tokens, cols] (after its sizes), naming `what` otherwise.
template <class View>
Array check_shape(const char* api, Form form, const char* name, const View& view, index_t batch,
                  index_t heads, index_t tokens, index_t cols, const char* what) {
  const Array a = array_of(name, view, form);
  check_sizes(api, a);
  if (view.batch != batch || view.heads != heads || view.tokens != tokens || view.dim != cols) {
    Array must = a;
    must.size[0] = batch, must.size[1] = heads, must.size[2] = tokens, must.size[3] = cols;
    fail(api, std::string(name) + " is " + a.shape() + " but must be " + must.shape() + " (" + what + ")");
  }
  return a;
}
template <class View>
Array check_shape(const char* api, Form form, const char* name, const View& view, index_t batch,
                  index_t heads, index_t tokens, index_t cols, Shape what) {
  return check_shape(api, form, name, view, batch, heads, tokens, cols,
                     form == Form::Matrix ? what.matrix : what.heads);
}

/// The LSE-only form: the log-sum-exps alone, without V (abi::attention_heads_lse_into).
template <typename T>
bool lse_only(const Call<T>& c) {
  return !c.backward && !c.in.v && c.out.lse && !c.out.attn && !c.out.scores && !c.out.compute_scores;
}

template <typename T>
void check_wanted(const Call<T>& c) {
  const bool scores = c.out.scores || c.out.compute_scores;
  if (!c.backward && c.stage == Stage::Complete && !c.out.attn && !scores && !lse_only(c)) {
    fail(c.api,
         c.form == Form::Matrix ? "neither SCORES nor ATTN is asked for" : "neither out nor scores is given");
  }
  if (c.out.attn && !c.in.v) fail(c.api, "ATTN is asked for without V");
  if (c.paged && (c.backward || scores)) fail(c.api, "decode computes ATTN and LSE only");
  if (c.out.scores && c.out.compute_scores)
    fail(c.api, "SCORES are asked for twice (scores and float_scores)");
}

/// Q, K and V, each on its own, then against each other. (Messages in the caller's terms:
/// columns and rows of matrices, d_k and T_k of views.)
template <typename T>
void check_inputs(const Call<T>& c, InputList& inputs) {
  const char* api = c.api;
  const HeadsView<const T>&q = c.in.q, &k = c.in.k;
  const Array qa = array_of("Q", q, c.form), ka = array_of("K", k, c.form);
  const Array va = c.in.v ? array_of("V", *c.in.v, c.form) : Array{};
  check_sizes(api, qa);
  check_sizes(api, ka);
  if (c.in.v) check_sizes(api, va);
  const bool matrix = c.form == Form::Matrix;
  if (q.dim != k.dim) {
    fail(api, (matrix ? "K has " + counted(k.dim, "column") + " but Q has " + num(q.dim) + " (d_k must match)"
                      : "K has d_k = " + num(k.dim) + " but Q has " + num(q.dim)) +
                  "; Q is " + qa.shape() + ", K is " + ka.shape());
  }
  if (c.in.v) {
    const HeadsView<const T>& v = *c.in.v;
    if (k.batch != q.batch || v.batch != q.batch)
      fail(api, "batch sizes differ: Q is " + qa.shape() + ", K is " + ka.shape() + ", V is " + va.shape());
    if (k.heads != v.heads)
      fail(api, "K and V have different head counts: K is " + ka.shape() + ", V is " + va.shape());
    if (v.tokens != k.tokens) {
      fail(api,
           (matrix ? "V has " + counted(v.tokens, "row") + " but K has " + num(k.tokens) + " (T_k must match)"
                   : std::string("K and V have different token counts (T_k)")) +
               "; K is " + ka.shape() + ", V is " + va.shape());
    }
  } else if (k.batch != q.batch || (k.heads != q.heads && !lse_only(c))) {  // LSE-only: GQA as with V
    fail(api, "batch sizes or head counts differ: Q is " + qa.shape() + ", K is " + ka.shape());
  }
  if (k.heads == 0 ? q.heads != 0 : q.heads % k.heads != 0) {
    fail(api, "query heads (" + num(q.heads) + ") must be a multiple of key/value heads (" + num(k.heads) +
                  "); Q is " + qa.shape() + ", K is " + ka.shape());
  }
  check_scratch<ComputeScalar<T>>(api, q.dim, c.in.v ? c.in.v->dim : 0, k.tokens);
  inputs.push_back(qa);
  inputs.push_back(ka);
  if (c.in.v) inputs.push_back(va);
}

/// The backward pass's further inputs, each of a shape the forward's sizes fix.
template <typename T>
void check_gradient_inputs(const Call<T>& c, InputList& inputs) {
  if (!c.backward) return;
  const Gradients<T>& g = *c.backward;
  const index_t B = c.in.q.batch, H = c.in.q.heads, tq = c.in.q.tokens, tk = c.in.k.tokens;
  const index_t dv = c.in.v ? c.in.v->dim : 0;
  inputs.push_back(check_shape(c.api, c.form, "attn", g.attn, B, H, tq, dv, kAttnShape));
  inputs.push_back(check_shape(c.api, c.form, "lse", g.lse, B, H, tq, 1, kLseShape));
  inputs.push_back(check_shape(c.api, c.form, "d_attn", g.d_attn, B, H, tq, dv, kAttnShape));
  if (g.d_scores)
    inputs.push_back(check_shape(c.api, c.form, "d_scores", *g.d_scores, B, H, tq, tk, kScoresShape));
  if (g.terms.d_lse.data != nullptr)
    inputs.push_back(check_shape(c.api, c.form, "d_lse", g.terms.d_lse, B, H, tq, 1, kLseShape));
}

/// The forward's outputs that are wanted: shapes.
template <typename T>
void check_outputs(const Call<T>& c, OutputList& outputs) {
  const index_t B = c.in.q.batch, H = c.in.q.heads, tq = c.in.q.tokens, tk = c.in.k.tokens;
  const index_t dv = c.in.v ? c.in.v->dim : 0;
  const auto output = [&](const auto& view, const char* name, index_t heads, index_t cols, auto what) {
    if (view) outputs.push_back(check_shape(c.api, c.form, name, *view, B, heads, tq, cols, what));
  };
  output(c.out.attn, "attn", H, dv, kAttnShape);
  output(c.out.lse, "lse", H, 1, kLseShape);
  output(c.out.scores, "scores", H, tk, kScoresShape);
  output(c.out.compute_scores, "scores", H, tk, kScoresShape);
  if (c.out.average_scores) {
    if (!c.out.scores && !c.out.compute_scores)
      fail(c.api, "average_scores is the mean of the per-head scores, so scores must be given too");
    output(c.out.average_scores, "average_scores", 1, tk, "[B, 1, T_q, T_k]");
    // Named first by the memory checks, as it is the mean of the others.
    std::rotate(outputs.begin(), outputs.end() - 1, outputs.end());
  }
}

/// The backward's outputs: dq, dk, dv (those given) and d_bias.
template <typename T>
void check_gradient_outputs(const Call<T>& c, OutputList& outputs) {
  if (!c.backward) return;
  const Gradients<T>& g = *c.backward;
  const index_t B = c.in.q.batch, H = c.in.q.heads, Hkv = c.in.k.heads, tq = c.in.q.tokens,
                tk = c.in.k.tokens, dk = c.in.q.dim, dv = c.in.v ? c.in.v->dim : 0;
  const auto gradient = [&](const auto& view, const char* name, index_t heads, index_t tokens, index_t cols,
                            Shape what) {
    if (view) outputs.push_back(check_shape(c.api, c.form, name, *view, B, heads, tokens, cols, what));
  };
  gradient(g.dq, "dq", H, tq, dk, kDqShape);
  gradient(g.dk, "dk", Hkv, tk, dk, kDkShape);
  gradient(g.dv, "dv", Hkv, tk, dv, kDvShape);
  if (g.d_bias) {
    const BroadcastView<T>& bias = c.masks.bias;
    if (bias.empty()) fail(c.api, "d_bias is given but masks.bias is not (dL/dbias needs a bias)");
    outputs.push_back(check_shape(c.api, c.form, "d_bias", *g.d_bias, bias.batch, bias.heads, tq, tk,
                                  "the bias's shape [b, h, T_q, T_k]"));
  }
  if (g.terms.d_sinks != nullptr) {
    if (c.masks.sinks == nullptr)
      fail(c.api, "d_sinks is given but masks.sinks is not (dL/dsinks needs sinks)");
    outputs.push_back(vector_of("d_sinks", g.terms.d_sinks, H));
  }
}

/// The validated call as the kernels run it.
template <typename T>
Problem<T> assemble(const Call<T>& c, const ResolvedOptions<ComputeScalar<T>>& o) {
  Problem<T> p;
  p.scale = o.scale, p.softcap = o.softcap, p.causal = o.causal, p.bottom_right = o.bottom_right;
  p.fixed_offset = o.fixed_offset, p.offset = o.offset, p.kernel = o.kernel;
  p.window_left = o.window_left, p.window_right = o.window_right;
  p.chunk = o.chunk, p.chunk_origin = o.chunk_origin;
  p.q = c.in.q, p.k = c.in.k, p.v = c.in.v.value_or(HeadsView<const T>{});
  p.masks = c.masks;
  p.sequences = c.packed ? c.packed->sequences : c.in.q.batch;
  if (c.packed) p.cu_q = c.packed->cu_q, p.cu_k = c.packed->cu_k;
  p.paged = c.paged;
  p.want_out = c.out.attn.has_value(), p.out = c.out.attn.value_or(HeadsView<T>{});
  p.want_lse = c.out.lse.has_value(), p.lse = c.out.lse.value_or(HeadsView<ComputeScalar<T>>{});
  p.want_scores = c.out.scores || c.out.compute_scores;
  p.scores = c.out.scores.value_or(HeadsView<T>{});
  p.scores_compute = c.out.compute_scores.has_value();
  p.compute_scores = c.out.compute_scores.value_or(HeadsView<ComputeScalar<T>>{});
  if (c.backward) {
    const Gradients<T>& g = *c.backward;
    p.backward = true;
    p.fwd_out = g.attn, p.fwd_lse = g.lse, p.d_out = g.d_attn;
    p.d_scores = g.d_scores.value_or(HeadsView<const T>{});
    p.dq = g.dq.value_or(HeadsView<T>{}), p.dk = g.dk.value_or(HeadsView<T>{});
    p.dv = g.dv.value_or(HeadsView<T>{}), p.d_bias = g.d_bias.value_or(HeadsView<T>{});
    p.d_lse = g.terms.d_lse, p.d_sinks = g.terms.d_sinks, p.logit_grad = g.terms.logit_grad;
  }
  return p;
}

}  // namespace

template <typename T>
Problem<T> make_problem(const Call<T>& c, const Options& opt) {
  check_wanted(c);
  InputList inputs;
  if (c.paged) {  // a decode call: K and V in pages, each sequence's offsets into Q, ALiBi
    check_paged_inputs(c, inputs);
  } else {
    check_inputs(c, inputs);
    check_gradient_inputs(c, inputs);
    check_masks(c, inputs);
  }
  const auto resolved = c.paged ? check_paged_options(c, opt)
                                : check_options<ComputeScalar<T>>(c.api, opt, array_of("Q", c.in.q, c.form));
  check_program(c, resolved);
  OutputList outputs;
  check_outputs(c, outputs);
  check_gradient_outputs(c, outputs);
  check_memory(c.api, outputs, inputs);
  return assemble(c, resolved);
}

template Problem<float> make_problem<float>(const Call<float>&, const Options&);
template Problem<double> make_problem<double>(const Call<double>&, const Options&);
template Problem<BFloat16Bits> make_problem<BFloat16Bits>(const Call<BFloat16Bits>&, const Options&);
template Problem<HalfBits> make_problem<HalfBits>(const Call<HalfBits>&, const Options&);

}  // namespace internal
}  // namespace EigenAttention
