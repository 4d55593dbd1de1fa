// SPDX-License-Identifier: MIT
// eigen-attention run: attention of Q, K, V read from .npy files, on attention_heads_into() /
// attention_heads_decomposed_into() (a 2-D input is a batch = heads = 1 view), in float, double,
// bfloat16 or half (--compute; by default the inputs' own type). A 16-bit --compute that rounds
// the inputs also computes in their own type, and in float on the rounded inputs, and reports
// the differences.
#include <EigenAttention/MultiHead.hpp>
#include <EigenAttention/Npy.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "../index.hpp"
#include "commands.hpp"
#include "distributed.hpp"
#include "plot.hpp"
#include "util.hpp"

namespace EigenAttention {
namespace cli {
namespace {

using npy::Array;
using npy::DType;

bool is_float(DType d) { return d == DType::Float32 || d == DType::Float64 || d == DType::Float16; }

// The type a run computes in (--compute) is the type of the library call: a ScalarType, named
// in messages by scalar_type_name().
using Compute = ScalarType;

// The compute type of files of dtype `d` (float16, float32 or float64).
Compute compute_of(DType d) {
  return d == DType::Float64 ? Compute::Float64 : d == DType::Float16 ? Compute::Float16 : Compute::Float32;
}

// An input file and the option that named it.
struct Input {
  std::string option, path;
  Array a;
  bool given() const { return !path.empty(); }
  const std::vector<std::int64_t>& shape() const { return a.shape; }
};

Input load(const std::string& option, const std::string& path) {
  Input in{option, path, {}};
  if (!path.empty()) in.a = npy::read(path);
  return in;
}

std::string dims(const std::vector<std::int64_t>& shape) {
  return shape_string(shape) + " (" + std::to_string(shape.size()) + "-D)";
}

// Everything the command line says, parsed and checked before any file is read.
struct Settings {
  Options opt;
  std::optional<Compute> compute;  // --compute; none: the inputs' own type
  Layout layout = Layout::BHTD;
  bool weights = false;  // SCORES needed: --scores or --heatmap
  std::int64_t batch = 0, head = 0;
  bool batch_given = false, head_given = false;
};

Settings parse_settings(const RunArgs& a) {
  Settings s;
  if (a.q.empty()) throw usage_error("--q", "missing: the queries (Q.npy) are required");
  if (a.k.empty()) throw usage_error("--k", "missing: the keys (K.npy) are required");
  if (a.v.empty()) throw usage_error("--v", "missing: the values (V.npy) are required");
  if (a.out.empty() && a.scores.empty() && a.lse.empty() && a.heatmap.empty()) {
    throw usage_error("--out",
                      "missing: no output requested; give at least one of --out ATTN.npy, "
                      "--scores SCORES.npy, --lse LSE.npy, --heatmap OUT.png");
  }
  s.opt.causal = a.causal;
  if (a.align == "top-left") {
    s.opt.alignment = CausalAlignment::TopLeft;
  } else if (a.align == "bottom-right") {
    s.opt.alignment = CausalAlignment::BottomRight;
  } else {
    throw usage_error("--align", "'" + a.align + "' is neither top-left nor bottom-right");
  }
  if (a.compute_given || !a.compute.empty()) {
    if (a.compute == "float") {
      s.compute = Compute::Float32;
    } else if (a.compute == "double") {
      s.compute = Compute::Float64;
    } else if (a.compute == "bf16") {
      s.compute = Compute::BFloat16;
    } else if (a.compute == "half") {
      s.compute = Compute::Float16;
    } else {
      throw usage_error("--compute", "'" + a.compute + "' is none of float, double, bf16, half");
    }
  }
  if (a.layout == "bhtd") {
    s.layout = Layout::BHTD;
  } else if (a.layout == "bthd") {
    s.layout = Layout::BTHD;
  } else {
    throw usage_error("--layout", "'" + a.layout + "' is neither bhtd nor bthd");
  }
  if (!a.scale.empty()) {
    const double scale = parse_double("--scale", a.scale);
    if (!(scale > 0) || !std::isfinite(scale))
      throw usage_error("--scale", "must be finite and > 0, got " + a.scale);
    s.opt.scale = scale;
  }
  if (!a.softcap.empty()) {
    const double cap = parse_double("--softcap", a.softcap);
    if (!(cap >= 0) || !std::isfinite(cap)) {
      throw usage_error("--softcap", "must be finite and > 0 (0: off), got " + a.softcap);
    }
    s.opt.softcap = cap;
  }
  if (!a.window.empty()) {
    const std::size_t comma = a.window.find(',');
    if (comma == std::string::npos || a.window.find(',', comma + 1) != std::string::npos) {
      throw usage_error("--window", "'" + a.window + "' is not LEFT,RIGHT (e.g. 256,0; -1 = unbounded)");
    }
    const long long left = parse_integer("--window", a.window.substr(0, comma));
    const long long right = parse_integer("--window", a.window.substr(comma + 1));
    if (left < -1 || right < -1) {
      throw usage_error("--window", "'" + a.window + "': each side must be >= 0, or -1 for unbounded");
    }
    s.opt.window_left = static_cast<index_t>(left);
    s.opt.window_right = static_cast<index_t>(right);
  }
  if (!a.chunk_size.empty()) {
    const long long chunk = parse_integer("--chunk-size", a.chunk_size);
    if (chunk < 0 || chunk > (1LL << 60)) {
      throw usage_error("--chunk-size", "must be between 0 (off) and 2^60, got " + a.chunk_size);
    }
    s.opt.chunk_size = static_cast<index_t>(chunk);
  }
  const long long threads = parse_integer("--threads", a.threads);
  if (threads < 0 || threads > 1 << 20) {
    throw usage_error("--threads", "must be >= 0 (0 = one per hardware thread), got " + a.threads);
  }
  s.opt.threads = static_cast<int>(threads);
  s.weights = !a.scores.empty() || !a.heatmap.empty();
  if (a.average_heads && !s.weights) {
    throw usage_error("--average-heads", "needs --scores or --heatmap (it averages the weights)");
  }
  if (a.heatmap.empty()) {
    for (const auto& [option, value] :
         {std::pair{"--batch", a.batch}, std::pair{"--head", a.head}, std::pair{"--tokens", a.tokens}}) {
      if (!value.empty()) throw usage_error(option, "only with --heatmap (it picks what the heatmap shows)");
    }
  }
  if (!a.batch.empty()) {
    s.batch = parse_integer("--batch", a.batch);
    s.batch_given = true;
    if (s.batch < 0) throw usage_error("--batch", "must be >= 0, got " + a.batch);
  }
  if (!a.head.empty()) {
    s.head = parse_integer("--head", a.head);
    s.head_given = true;
    if (s.head < 0) throw usage_error("--head", "must be >= 0, got " + a.head);
    if (a.average_heads)
      throw usage_error("--head", "not with --average-heads (the heatmap shows the mean over heads)");
  }
  return s;
}

// The sizes of a run, from Q, K and V, with their consistency checked (naming the files).
struct Geometry {
  int rank = 2;
  std::int64_t B = 1, H = 1, Hkv = 1, Tq = 0, Tk = 0, dk = 0, dv = 0;
};

// (batch, heads, tokens, dim) of a 2-D or 4-D input.
void sizes_of(const Input& in, Layout layout, std::int64_t& b, std::int64_t& h, std::int64_t& t,
              std::int64_t& d) {
  const auto& s = in.shape();
  if (s.size() == 2) {
    b = h = 1, t = s[0], d = s[1];
  } else if (layout == Layout::BHTD) {
    b = s[0], h = s[1], t = s[2], d = s[3];
  } else {
    b = s[0], t = s[1], h = s[2], d = s[3];
  }
}

Geometry check_inputs(const Input& q, const Input& k, const Input& v, Layout layout) {
  const char* axes = layout == Layout::BHTD ? "batch, heads, tokens, dim" : "batch, tokens, heads, dim";
  for (const Input* in : {&q, &k, &v}) {
    if (!is_float(in->a.dtype)) {
      throw Failure(in->path, std::string("dtype ") + dtype_name(in->a.dtype) +
                                  "; Q, K and V must be float16, float32 or float64");
    }
    if (in->shape().size() != 2 && in->shape().size() != 4) {
      throw Failure(in->path,
                    "shape " + dims(in->shape()) + "; expected 2-D (tokens, dim) or 4-D (" + axes + ")");
    }
  }
  for (const Input* in : {&k, &v}) {
    if (in->a.dtype != q.a.dtype) {
      throw Failure(in->path, std::string("dtype ") + dtype_name(in->a.dtype) + " but " + q.path + " is " +
                                  dtype_name(q.a.dtype) + "; Q, K and V must have the same dtype");
    }
    if (in->shape().size() != q.shape().size()) {
      throw Failure(in->path, "is " + std::to_string(in->shape().size()) + "-D but " + q.path + " is " +
                                  std::to_string(q.shape().size()) +
                                  "-D; Q, K and V must have the same rank");
    }
  }
  Geometry g;
  g.rank = static_cast<int>(q.shape().size());
  std::int64_t kb, kd, vb, vh, vt;
  sizes_of(q, layout, g.B, g.H, g.Tq, g.dk);
  sizes_of(k, layout, kb, g.Hkv, g.Tk, kd);
  sizes_of(v, layout, vb, vh, vt, g.dv);
  const std::string order = g.rank == 4 ? std::string(" (") + axes + ")" : std::string(" (tokens, dim)");
  if (kd != g.dk) {
    throw Failure(k.path, "shape " + shape_string(k.shape()) + order + " has d_k = " + std::to_string(kd) +
                              " but " + q.path + " " + shape_string(q.shape()) +
                              " has d_k = " + std::to_string(g.dk));
  }
  if (vt != g.Tk) {
    throw Failure(v.path, "shape " + shape_string(v.shape()) + order + " has " + counted(vt, "token") +
                              " but " + k.path + " " + shape_string(k.shape()) + " has " +
                              std::to_string(g.Tk));
  }
  if (g.rank == 4) {
    for (const auto& [in, b] : {std::pair{&k, kb}, std::pair{&v, vb}}) {
      if (b != g.B) {
        throw Failure(in->path, "batch " + std::to_string(b) + " but " + q.path + " has batch " +
                                    std::to_string(g.B) + "; shapes " + shape_string(in->shape()) + " and " +
                                    shape_string(q.shape()) + order);
      }
    }
    if (vh != g.Hkv) {
      throw Failure(v.path, counted(vh, "head") + " but " + k.path + " has " + std::to_string(g.Hkv) +
                                "; shapes " + shape_string(v.shape()) + " and " + shape_string(k.shape()) +
                                order);
    }
    if (g.Hkv == 0 ? g.H != 0 : g.H % g.Hkv != 0) {
      throw Failure(k.path, std::to_string(g.Hkv) + " heads, which do not divide the " +
                                counted(g.H, "query head") + " of " + q.path +
                                " (GQA needs a multiple); shapes " + shape_string(k.shape()) + " and " +
                                shape_string(q.shape()) + order);
    }
  }
  return g;
}

// A mask or bias: [T_q, T_k], or [B or 1, H or 1, T_q, T_k] in bhtd order.
void check_mask_shape(const Input& m, const Geometry& g) {
  const auto& s = m.shape();
  const std::string expected = shape_string({g.Tq, g.Tk}) + " or (" + std::to_string(g.B) + " or 1, " +
                               std::to_string(g.H) + " or 1, " + std::to_string(g.Tq) + ", " +
                               std::to_string(g.Tk) + ") (batch, heads, T_q, T_k)";
  const bool ok = (s.size() == 2 && s[0] == g.Tq && s[1] == g.Tk) ||
                  (s.size() == 4 && (s[0] == 1 || s[0] == g.B) && (s[1] == 1 || s[1] == g.H) &&
                   s[2] == g.Tq && s[3] == g.Tk);
  if (!ok) throw Failure(m.path, "shape " + shape_string(s) + " does not fit; expected " + expected);
}

template <typename E>
BroadcastView<E> broadcast_of(const E* data, const std::vector<std::int64_t>& s) {
  if (s.size() == 2) return BroadcastView<E>::matrix(data, s[0], s[1]);
  return {data, s[0], s[1], s[2], s[3], s[0] == 1 ? 0 : s[1] * s[2] * s[3], s[1] == 1 ? 0 : s[2] * s[3],
          s[3], 1};
}

// A vector input with one entry per batch entry or head: shape [n] (or a scalar when n is 1).
void check_vector_shape(const Input& in, std::int64_t n, const std::string& what) {
  const auto& s = in.shape();
  if (!((s.size() == 1 && s[0] == n) || (s.empty() && n == 1))) {
    throw Failure(in.path,
                  "shape " + shape_string(s) + "; expected " + shape_string({n}) + " (" + what + ")");
  }
}

// --key-lengths: one int32 or int64 per batch entry, each in [0, T_k], widened to int64.
std::vector<std::int64_t> key_lengths_of(const Input& lengths, const Geometry& g) {
  check_vector_shape(lengths, g.B, "one key length per batch entry");
  std::vector<std::int64_t> out;
  if (lengths.a.dtype == DType::Int64) {
    const std::int64_t* p = lengths.a.data<std::int64_t>();
    out.assign(p, p + lengths.a.size());
  } else if (lengths.a.dtype == DType::Int32) {
    const std::int32_t* p = lengths.a.data<std::int32_t>();
    out.assign(p, p + lengths.a.size());
  } else {
    throw Failure(lengths.path,
                  std::string("dtype ") + dtype_name(lengths.a.dtype) + "; key lengths are int32 or int64");
  }
  for (std::size_t b = 0; b < out.size(); ++b) {
    if (out[b] < 0 || out[b] > g.Tk) {
      throw Failure(lengths.path, "entry " + std::to_string(b) + " is " + std::to_string(out[b]) +
                                      ", outside [0, T_k = " + std::to_string(g.Tk) + "]");
    }
  }
  return out;
}

// --alibi: one float slope per query head.
void check_alibi(const Input& alibi, const Geometry& g) {
  check_vector_shape(alibi, g.H, "one slope per query head");
  if (!is_float(alibi.a.dtype)) {
    throw Failure(alibi.path, std::string("dtype ") + dtype_name(alibi.a.dtype) +
                                  "; ALiBi slopes are float16, float32 or float64");
  }
}

// --sinks: one float logit per query head.
void check_sinks(const Input& sinks, const Geometry& g) {
  check_vector_shape(sinks, g.H, "one sink logit per query head");
  if (!is_float(sinks.a.dtype)) {
    throw Failure(sinks.path, std::string("dtype ") + dtype_name(sinks.a.dtype) +
                                  "; attention sinks are float16, float32 or float64");
  }
}

// A pointer the library accepts for an empty array (its data pointer may be null).
template <typename T>
const T* data_of(const Array& a) {
  static const T dummy[1] = {};
  return a.size() == 0 ? dummy : a.data<T>();
}

// ---------------------------------------------------------------------------------------------
// The element types: float and double compute in themselves, Eigen::bfloat16 and Eigen::half
// are stored in 16 bits and computed in float.

template <typename T>
inline constexpr bool kIs16 = std::is_same_v<T, Eigen::bfloat16> || std::is_same_v<T, Eigen::half>;

// NumPy holds every type but bfloat16: its outputs are written as float32.
template <typename T>
inline constexpr bool kNumpyHolds = !std::is_same_v<T, Eigen::bfloat16>;

// The .npy dtype of T (NumPy holds T).
template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::Float32;
  if constexpr (std::is_same_v<T, double>) return DType::Float64;
  return DType::Float16;
}

// x as a double, exactly.
template <typename T>
double to_double(T x) {
  if constexpr (kIs16<T>) {
    return static_cast<double>(static_cast<float>(x));  // exact
  } else {
    return static_cast<double>(x);
  }
}

// x rounded once to the nearest V (ties to even), as NumPy's astype rounds it. For the 16-bit
// types x is first rounded to odd in float, then to nearest even: float's 24 bits are more
// than two beyond theirs, so that is one correct rounding of x, not two.
template <typename V>
V round_to(double x) {
  if constexpr (std::is_same_v<V, double>) {
    return x;
  } else if constexpr (std::is_same_v<V, float>) {
    return static_cast<float>(x);
  } else {
    if (std::isnan(x)) return V(static_cast<float>(x));
    if (std::fabs(x) > static_cast<double>(std::numeric_limits<float>::max())) {
      return V(std::copysign(std::numeric_limits<float>::infinity(), static_cast<float>(x)));
    }
    float f = static_cast<float>(x);
    if (static_cast<double>(f) != x) {
      if (std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);  // toward zero
      std::uint32_t bits = 0;
      std::memcpy(&bits, &f, sizeof bits);
      bits |= 1u;  // and odd: the sticky bit
      std::memcpy(&f, &bits, sizeof bits);
    }
    return V(f);
  }
}

// The elements of a float16, float32 or float64 array as T, each rounded once to V first
// (V = T, or T = float holding V = bfloat16 or half values exactly). The array's own bytes
// when they are already that (nothing copied), else converted into `store`. Never null.
template <typename T, typename V = T>
const T* values_of(const Array& a, std::vector<T>& store) {
  static const T dummy[1] = {};
  if constexpr (std::is_same_v<T, V> && kNumpyHolds<T>) {
    if (a.dtype == dtype_of<T>()) return data_of<T>(a);
  }
  store.resize(static_cast<std::size_t>(a.size()));
  const auto convert = [&](const auto* p) {
    for (std::size_t i = 0; i < store.size(); ++i) {
      const V rounded = round_to<V>(to_double(p[i]));
      if constexpr (std::is_same_v<T, V>) {
        store[i] = rounded;
      } else {
        store[i] = static_cast<T>(static_cast<float>(rounded));  // float holding V: exact
      }
    }
  };
  if (a.dtype == DType::Float16) {
    convert(data_of<Eigen::half>(a));
  } else if (a.dtype == DType::Float32) {
    convert(data_of<float>(a));
  } else {
    convert(data_of<double>(a));
  }
  return store.empty() ? dummy : store.data();
}

// One output of a computation: an npy::Array of T when NumPy holds T (the file itself, nothing
// copied), else (bfloat16) a vector, widened to float32 when written.
template <typename T>
class Buffer {
 public:
  void allocate(std::vector<std::int64_t> shape) {
    if constexpr (kNumpyHolds<T>) {
      array_ = npy::zeros<T>(std::move(shape));
    } else {
      array_.dtype = DType::Float32;  // what it is written as
      array_.shape = std::move(shape);
      values_.assign(static_cast<std::size_t>(array_.size()), T(0));
    }
    allocated_ = true;
  }
  bool allocated() const { return allocated_; }
  std::int64_t size() const { return allocated_ ? array_.size() : 0; }
  const std::vector<std::int64_t>& shape() const { return array_.shape; }
  // Never null (the library takes a non-null pointer for an empty view).
  T* data() {
    static T dummy[1] = {};
    if (size() == 0) return dummy;
    if constexpr (kNumpyHolds<T>) {
      return array_.data<T>();
    } else {
      return values_.data();
    }
  }
  const T* data() const { return const_cast<Buffer*>(this)->data(); }
  double at(std::int64_t i) const { return to_double(data()[i]); }
  // The dtype of the file it is written to.
  DType file_dtype() const { return kNumpyHolds<T> ? dtype_of<T>() : DType::Float32; }
  // The array to write (bfloat16 widened to float32: exact).
  const Array& file_array() {
    if constexpr (!kNumpyHolds<T>) {
      if (array_.bytes.empty() && !values_.empty()) {
        array_.bytes.resize(values_.size() * sizeof(float));
        float* p = reinterpret_cast<float*>(array_.bytes.data());
        for (std::size_t i = 0; i < values_.size(); ++i) p[i] = static_cast<float>(values_[i]);
      }
    }
    return array_;
  }

 private:
  Array array_;
  std::vector<T> values_;
  bool allocated_ = false;
};

// Everything a computation needs: the inputs as read and checked, and the settings.
struct Job {
  const RunArgs& a;
  const Settings& s;
  const Input &q, &k, &v, &mask, &lengths, &alibi, &sinks;
  const Geometry& g;
  Layout layout;                          // of Q, K, V and ATTN (bhtd for 2-D inputs)
  std::vector<std::int64_t> key_lengths;  // --key-lengths, widened to int64
};

// What a computation gives: ATTN in the inputs' layout, SCORES per head [B, H, T_q, T_k]
// (when the weights are wanted), their mean over heads (--average-heads) and LSE (--lse), the
// last in the compute type (float for bfloat16 and half).
template <typename T>
struct Result {
  Buffer<T> attn, scores, average;
  Buffer<ComputeScalar<T>> lse;
};

// The attention of the job's inputs in T, each input rounded once to Via first (Via = T, or
// T = float on the inputs rounded to Via = bfloat16 or half). `average`: also the mean over
// heads.
template <typename T, typename Via = T>
Result<T> compute(const Job& j, bool average) {
  using C = ComputeScalar<T>;
  const Geometry& g = j.g;
  std::vector<T> qs, ks, vs, bias, slopes, sink_logits;
  const auto view = [&](const Input& in, std::vector<T>& store, std::int64_t heads, std::int64_t tokens,
                        std::int64_t dim) {
    const T* p = values_of<T, Via>(in.a, store);
    if (g.rank == 2) return HeadsView<const T>::bhtd(p, 1, 1, tokens, dim);
    return HeadsView<const T>::contiguous(p, j.layout, g.B, heads, tokens, dim);
  };
  const auto Q = view(j.q, qs, g.H, g.Tq, g.dk);
  const auto K = view(j.k, ks, g.Hkv, g.Tk, g.dk);
  const auto V = view(j.v, vs, g.Hkv, g.Tk, g.dv);

  Masks<T> masks;
  if (j.mask.given()) {
    if (j.mask.a.dtype == DType::Bool) {
      masks.mask = broadcast_of<bool>(data_of<bool>(j.mask.a), j.mask.shape());
    } else {
      masks.bias = broadcast_of<T>(values_of<T, Via>(j.mask.a, bias), j.mask.shape());
    }
  }
  if (j.lengths.given()) masks.key_lengths = j.key_lengths.data();
  if (j.alibi.given()) masks.alibi_slopes = values_of<T, Via>(j.alibi.a, slopes);
  if (j.sinks.given()) masks.sinks = values_of<T, Via>(j.sinks.a, sink_logits);

  // Outputs, in the compute type and the inputs' rank; ATTN in their layout too, LSE and
  // SCORES always with the heads before the tokens ([B, H, T_q] and [B, H, T_q, T_k],
  // PyTorch's and FlashAttention's order for them), so that a 4-D SCORES file has one meaning.
  Result<T> r;
  r.attn.allocate(g.rank == 2                ? std::vector<std::int64_t>{g.Tq, g.dv}
                  : j.layout == Layout::BHTD ? std::vector<std::int64_t>{g.B, g.H, g.Tq, g.dv}
                                             : std::vector<std::int64_t>{g.B, g.Tq, g.H, g.dv});
  const auto O = HeadsView<T>::contiguous(r.attn.data(), j.layout, g.B, g.H, g.Tq, g.dv);
  HeadsView<C> L;
  if (!j.a.lse.empty()) {
    r.lse.allocate(g.rank == 2 ? std::vector<std::int64_t>{g.Tq} : std::vector<std::int64_t>{g.B, g.H, g.Tq});
    L = HeadsView<C>::bhtd(r.lse.data(), g.B, g.H, g.Tq, 1);
  }
  HeadsView<T> S, A;
  if (j.s.weights) {
    r.scores.allocate(g.rank == 2 ? std::vector<std::int64_t>{g.Tq, g.Tk}
                                  : std::vector<std::int64_t>{g.B, g.H, g.Tq, g.Tk});
    if (r.scores.size() > 0) S = HeadsView<T>::bhtd(r.scores.data(), g.B, g.H, g.Tq, g.Tk);
    if (average) {
      r.average.allocate(g.rank == 2 ? std::vector<std::int64_t>{g.Tq, g.Tk}
                                     : std::vector<std::int64_t>{g.B, g.Tq, g.Tk});
      if (r.average.size() > 0) A = HeadsView<T>::bhtd(r.average.data(), g.B, 1, g.Tq, g.Tk);
    }
  }
  if (!S.empty()) {
    attention_heads_decomposed_into(Q, K, V, S, O, L, A, j.s.opt, masks);
  } else {
    attention_heads_into(Q, K, V, O, L, j.s.opt, masks);
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// The report of a 16-bit --compute that rounds the inputs.

// max |x - y| over the elements (equal values, infinities included, differ by 0); NaN when an
// element of either is NaN where the other is not.
template <typename A, typename B>
double max_difference(const Buffer<A>& x, const Buffer<B>& y) {
  double worst = 0;
  for (std::int64_t i = 0; i < x.size(); ++i) {
    const double a = x.at(i), b = y.at(i);
    if (a == b || (std::isnan(a) && std::isnan(b))) continue;
    const double d = std::fabs(a - b);
    if (std::isnan(d)) return d;
    if (d > worst) worst = d;
  }
  return worst;
}

// The largest finite |x| (0 when there is none).
template <typename A>
double max_magnitude(const Buffer<A>& x) {
  double largest = 0;
  for (std::int64_t i = 0; i < x.size(); ++i) {
    const double a = std::fabs(x.at(i));
    if (std::isfinite(a) && a > largest) largest = a;
  }
  return largest;
}

// The largest |x - round(x)| over Q, K and V: what rounding them to V changed (NaN ignored).
template <typename V>
double rounding_of(const Job& j) {
  double worst = 0;
  for (const Input* in : {&j.q, &j.k, &j.v}) {
    std::vector<double> exact;
    const double* e = values_of<double>(in->a, exact);
    std::vector<float> store;
    const float* r = values_of<float, V>(in->a, store);
    for (std::int64_t i = 0; i < in->a.size(); ++i) {
      const double x = e[i], y = static_cast<double>(r[i]);
      if (x == y || std::isnan(x)) continue;  // NaN stays NaN
      const double d = std::fabs(x - y);      // inf when a finite value overflows
      if (d > worst) worst = d;
    }
  }
  return worst;
}

// One line of the report: "ATTN: max abs difference D1 against TYPE on the inputs as read, D2
// against float32 on the rounded inputs; max |ATTN| M".
struct Difference {
  std::string what;
  double inputs, rounded, largest;
};

template <typename T, typename R>
std::vector<Difference> differences(const Result<T>& got, const Result<R>& exact,
                                    const Result<float>& rounded) {
  std::vector<Difference> d;
  const auto add = [&](const char* what, const auto& x, const auto& e, const auto& r) {
    if (x.allocated()) d.push_back({what, max_difference(x, e), max_difference(x, r), max_magnitude(x)});
  };
  add("ATTN", got.attn, exact.attn, rounded.attn);
  add("SCORES", got.scores, exact.scores, rounded.scores);
  add("LSE", got.lse, exact.lse, rounded.lse);
  return d;
}

// ---------------------------------------------------------------------------------------------

struct Written {
  std::string what, path;
  DType dtype;
  std::vector<std::int64_t> shape;
};

template <typename T>
int run_typed(const Job& j, OutputFiles& files, const std::vector<AtomicFile*>& outs, Progress& progress) {
  const RunArgs& a = j.a;
  const Settings& s = j.s;
  const Geometry& g = j.g;
  const Compute type = s.compute ? *s.compute : compute_of(j.q.a.dtype);
  // A 16-bit type other than the files': the inputs are rounded to it.
  const bool rounds = kIs16<T> && type != compute_of(j.q.a.dtype);

  progress.phase("computing");
  Result<T> r = compute<T>(j, a.average_heads);
  std::vector<Difference> report;
  double rounding = 0;
  const char* reference = j.q.a.dtype == DType::Float64 ? "float64" : "float32";
  if constexpr (kIs16<T>) {
    if (rounds) {
      progress.phase("computing the comparisons");
      const Result<float> on_rounded = compute<float, T>(j, false);
      if (j.q.a.dtype == DType::Float64) {
        report = differences(r, compute<double>(j, false), on_rounded);
      } else {
        report = differences(r, compute<float>(j, false), on_rounded);
      }
      rounding = rounding_of<T>(j);
    }
  }

  progress.phase("writing");
  std::vector<Written> written;
  std::size_t next = 0;
  if (!a.out.empty()) {
    npy::write(*outs[next++], r.attn.file_array());
    written.push_back({"ATTN", a.out, r.attn.file_dtype(), r.attn.shape()});
  }
  if (!a.scores.empty()) {
    Buffer<T>& what = a.average_heads ? r.average : r.scores;
    npy::write(*outs[next++], what.file_array());
    written.push_back(
        {a.average_heads ? "SCORES (mean over heads)" : "SCORES", a.scores, what.file_dtype(), what.shape()});
  }
  if (!a.lse.empty()) {
    npy::write(*outs[next++], r.lse.file_array());
    written.push_back({"LSE", a.lse, r.lse.file_dtype(), r.lse.shape()});
  }
  if (!a.heatmap.empty()) {
    const std::vector<std::string> tokens =
        a.tokens.empty() ? std::vector<std::string>() : read_tokens(a.tokens);
    std::string title;
    if (a.average_heads) {
      title = g.rank == 4 ? "batch " + std::to_string(s.batch) + ", mean over heads"
                          : std::string("attention weights");
      draw_weights<T>(*outs[next++], r.average.data() + s.batch * g.Tq * g.Tk, g.Tq, g.Tk, g.Tk, tokens,
                      title);
    } else {
      title = g.rank == 4 ? "batch " + std::to_string(s.batch) + ", head " + std::to_string(s.head)
                          : std::string("attention weights");
      draw_weights<T>(*outs[next++], r.scores.data() + (s.batch * g.H + s.head) * g.Tq * g.Tk, g.Tq, g.Tk,
                      g.Tk, tokens, title);
    }
    written.push_back({"heatmap", a.heatmap, DType::Float32, {}});
  }
  files.commit();
  progress.stop();

  if (!a.quiet) {
    for (const Written& w : written) {
      if (w.what == "heatmap") {
        std::printf("%s: heatmap (PNG)\n", w.path.c_str());
      } else {
        std::printf("%s: %s, %s %s\n", w.path.c_str(), w.what.c_str(), dtype_name(w.dtype),
                    shape_string(w.shape).c_str());
      }
    }
    if (rounds) {
      const char* name = scalar_type_name(type);
      std::printf("compute %s: Q, K and V rounded to %s (max abs rounding %.3e), computed in float32%s\n",
                  name, name, rounding,
                  kNumpyHolds<T> ? "" : "; outputs written as float32 (NumPy has no bfloat16)");
      for (const Difference& d : report) {
        std::printf(
            "%s: max abs difference %.3e against %s on the inputs as read, %.3e against float32 on "
            "the rounded inputs; max |%s| %.3e\n",
            d.what.c_str(), d.inputs, reference, d.rounded, d.what.c_str(), d.largest);
      }
    }
  }
  return 0;
}

// The checks of the options in the compute type C, before any work: what the library would
// reject in its own words, said here in terms of the command line.
template <typename C>
void check_options(const RunArgs& a, const Settings& s, const Input& q, const Geometry& g, Compute compute) {
  // "float32 (the compute type)", "float32 (bfloat16 computes in float32)", ...
  const std::string type = std::string(std::is_same_v<C, double> ? "float64" : "float32") +
                           (compute == Compute::BFloat16 || compute == Compute::Float16
                                ? std::string(" (") + scalar_type_name(compute) + " computes in float32)"
                                : std::string(" (the compute type)"));
  if (s.opt.scale) {
    const C scale = static_cast<C>(*s.opt.scale);
    if (!(scale > 0) || !std::isfinite(scale)) {
      throw Failure("--scale", a.scale + " is " + (scale > 0 ? "infinite" : "0") + " in " + type +
                                   "; it must be finite and > 0");
    }
  } else if (g.dk == 0) {
    throw Failure(q.path, "d_k is 0, so the default scale 1/sqrt(d_k) is undefined; give --scale");
  }
  if (s.opt.softcap > 0) {
    const C cap = static_cast<C>(s.opt.softcap);
    if (!(cap > 0) || !std::isfinite(cap)) {
      throw Failure("--softcap", a.softcap + " is " + (cap > 0 ? "infinite" : "0") + " in " + type +
                                     "; it must be finite and > 0, or 0 for none");
    }
  }
}

}  // namespace

int run_command(const RunArgs& a) {
  if (a.distributed_given) return run_distributed(a);
  if (a.sharding_given) throw usage_error("--sharding", "only with --distributed ring|ulysses");
  const Settings s = parse_settings(a);
  Progress progress(a.quiet);

  // Reserve every output first: an unwritable one fails before any work.
  OutputFiles files;
  std::vector<AtomicFile*> outs;
  if (!a.out.empty()) outs.push_back(&files.add("--out", a.out));
  if (!a.scores.empty()) outs.push_back(&files.add("--scores", a.scores));
  if (!a.lse.empty()) outs.push_back(&files.add("--lse", a.lse));
  if (!a.heatmap.empty()) outs.push_back(&files.add("--heatmap", a.heatmap));

  progress.phase("reading");
  const Input q = load("--q", a.q), k = load("--k", a.k), v = load("--v", a.v);
  const Geometry g = check_inputs(q, k, v, s.layout);
  const Input mask = load("--mask", a.mask), lengths = load("--key-lengths", a.key_lengths),
              alibi = load("--alibi", a.alibi), sinks = load("--sinks", a.sinks);
  if (!a.tokens.empty()) read_tokens(a.tokens);  // a bad tokens file fails before the work

  progress.phase("preparing");
  const Compute compute = s.compute ? *s.compute : compute_of(q.a.dtype);
  if (compute == Compute::Float64) {
    check_options<double>(a, s, q, g, compute);
  } else {
    check_options<float>(a, s, q, g, compute);
  }
  Job j{a, s, q, k, v, mask, lengths, alibi, sinks, g, g.rank == 2 ? Layout::BHTD : s.layout, {}};
  if (mask.given()) {
    check_mask_shape(mask, g);
    if (mask.a.dtype != DType::Bool && !is_float(mask.a.dtype)) {
      throw Failure(mask.path, std::string("dtype ") + dtype_name(mask.a.dtype) +
                                   "; a mask is bool (true = may attend) or float (an additive bias)");
    }
  }
  if (lengths.given()) j.key_lengths = key_lengths_of(lengths, g);
  if (alibi.given()) check_alibi(alibi, g);
  if (sinks.given()) check_sinks(sinks, g);

  // The heatmap's choice, checked before the work.
  if (!a.heatmap.empty()) {
    if (s.batch >= g.B) {
      throw usage_error("--batch",
                        std::to_string(s.batch) + " is out of range: the batch has " + std::to_string(g.B) +
                            (g.B == 1 ? " entry (0)" : " entries (0.." + std::to_string(g.B - 1) + ")"));
    }
    if (s.head >= g.H) {
      throw usage_error("--head",
                        std::to_string(s.head) + " is out of range: there are " + std::to_string(g.H) +
                            (g.H == 1 ? " head (0)" : " heads (0.." + std::to_string(g.H - 1) + ")"));
    }
    if (g.Tq == 0 || g.Tk == 0) {
      throw Failure("--heatmap", "the weights are " + std::to_string(g.Tq) + " x " + std::to_string(g.Tk) +
                                     "; there is nothing to draw");
    }
  }

  switch (compute) {
    case Compute::Float32:
      return run_typed<float>(j, files, outs, progress);
    case Compute::Float64:
      return run_typed<double>(j, files, outs, progress);
    case Compute::BFloat16:
      return run_typed<Eigen::bfloat16>(j, files, outs, progress);
    case Compute::Float16:
    case Compute::Int8:  // KV-cache storage only: --compute never names them
    case Compute::Float8E4M3:
    case Compute::Float8E5M2:
      break;
  }
  return run_typed<Eigen::half>(j, files, outs, progress);
}

// ---------------------------------------------------------------------------------------------
// run --distributed: the checks of the command line and of the files' headers (the rest is in
// distributed.cpp, built only with MPI).

namespace {

// --distributed and --sharding, checked first (the same on every build).
void parse_distributed(const RunArgs& a, bool& ulysses, bool& zigzag) {
  if (a.distributed == "ring") {
    ulysses = false;
  } else if (a.distributed == "ulysses") {
    ulysses = true;
  } else {
    throw usage_error("--distributed", "'" + a.distributed + "' is neither ring nor ulysses");
  }
  if (!a.sharding_given || a.sharding == "contiguous") {
    zigzag = false;
  } else if (a.sharding == "zigzag") {
    zigzag = true;
  } else {
    throw usage_error("--sharding", "'" + a.sharding + "' is neither contiguous nor zigzag");
  }
}

}  // namespace

#ifdef EIGEN_ATTENTION_CLI_MPI

DistributedPlan plan_distributed(const RunArgs& a) {
  DistributedPlan p;
  parse_distributed(a, p.ulysses, p.zigzag);
  // What has no sharded form: the T_q x T_k weights, and a mask or bias over all the pairs.
  for (const auto& [option, value] : {std::pair{"--scores", a.scores}, std::pair{"--heatmap", a.heatmap}}) {
    if (!value.empty()) {
      throw usage_error(option,
                        "not with --distributed (the T_q x T_k weights are never gathered); "
                        "give --out and/or --lse");
    }
  }
  if (!a.mask.empty()) {
    throw usage_error(
        "--mask",
        "not with --distributed (a mask or bias over all the pairs has no sharded form); "
        "--causal, --window, --chunk-size, --key-lengths and --alibi are computed at global positions");
  }
  if (a.out.empty() && a.lse.empty()) {
    throw usage_error("--out", "missing: no output requested; give --out ATTN.npy and/or --lse LSE.npy");
  }
  const Settings s = parse_settings(a);
  if (s.compute == Compute::BFloat16) {
    throw usage_error("--compute",
                      "bf16 is not supported with --distributed (it computes in float or double)");
  }

  const auto header_input = [](const char* option, const std::string& path, NpyHeader& h) {
    h = read_npy_header(path);
    Input in{option, path, {}};
    in.a.dtype = h.dtype;
    in.a.shape = h.shape;  // no bytes: the checks read the dtype and the shape only
    return in;
  };
  const Input q = header_input("--q", a.q, p.q), k = header_input("--k", a.k, p.k),
              v = header_input("--v", a.v, p.v);
  const Geometry g = check_inputs(q, k, v, s.layout);
  const Compute compute = s.compute ? *s.compute : compute_of(q.a.dtype);
  if (compute == Compute::Float16 && q.a.dtype != DType::Float16) {
    throw usage_error("--compute",
                      "half of " + std::string(dtype_name(q.a.dtype)) +
                          " files is not supported with --distributed (it computes in float or double; "
                          "float16 files are computed in float32 and written as float16)");
  }
  if (compute == Compute::Float64) {
    check_options<double>(a, s, q, g, compute);
  } else {
    check_options<float>(a, s, q, g, compute);
  }
  p.opt = s.opt;
  p.layout = g.rank == 2 ? Layout::BHTD : s.layout;
  p.rank = g.rank;
  p.B = g.B, p.H = g.H, p.Hkv = g.Hkv, p.Tq = g.Tq, p.Tk = g.Tk, p.dk = g.dk, p.dv = g.dv;
  p.compute_double = compute == Compute::Float64;
  p.out_dtype = compute == Compute::Float64   ? DType::Float64
                : compute == Compute::Float16 ? DType::Float16
                                              : DType::Float32;
  p.lse_dtype = p.compute_double ? DType::Float64 : DType::Float32;

  // The small inputs are read whole, by every rank.
  const Input lengths = load("--key-lengths", a.key_lengths), alibi = load("--alibi", a.alibi),
              sinks = load("--sinks", a.sinks);
  if (lengths.given()) {
    p.has_key_lengths = true;
    p.key_lengths = key_lengths_of(lengths, g);
  }
  const auto exact = [](const Input& in) {  // a small input's values as exact doubles
    std::vector<double> store;
    const double* x = values_of<double>(in.a, store);
    return std::vector<double>(x, x + in.a.size());
  };
  if (alibi.given()) {
    check_alibi(alibi, g);
    p.has_alibi = true;
    p.alibi = exact(alibi);
  }
  if (sinks.given()) {
    check_sinks(sinks, g);
    p.has_sinks = true;
    p.sinks = exact(sinks);
  }
  p.out = a.out;
  p.lse = a.lse;
  p.quiet = a.quiet;
  return p;
}

#else

int run_distributed(const RunArgs& a) {
  bool ulysses = false, zigzag = false;
  parse_distributed(a, ulysses, zigzag);
  throw Failure("--distributed",
                "this eigen-attention was built without MPI (configure with an MPI implementation "
                "installed, e.g. libopenmpi-dev, and -DEIGEN_ATTENTION_MPI=ON)");
}

void finish_distributed() {}

#endif

}  // namespace cli
}  // namespace EigenAttention
