// eigen-attention run: attention of Q, K, V read from .npy files, on attention_heads() /
// attention_heads_decomposed() (a 2-D input is a batch = heads = 1 view).
#include <EigenAttention/MultiHead.hpp>
#include <EigenAttention/Npy.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "commands.hpp"
#include "plot.hpp"
#include "util.hpp"

namespace EigenAttention {
namespace cli {
namespace {

using npy::Array;
using npy::DType;
using I64 = std::int64_t;

bool is_float(DType d) { return d == DType::Float32 || d == DType::Float64; }

// An input file and the option that named it.
struct Input {
  std::string option, path;
  Array a;
  bool given() const { return !path.empty(); }
  const std::vector<I64>& shape() const { return a.shape; }
};

Input load(const std::string& option, const std::string& path) {
  Input in{option, path, {}};
  if (!path.empty()) in.a = npy::read(path);
  return in;
}

std::string dims(const std::vector<I64>& shape) {
  return shape_string(shape) + " (" + std::to_string(shape.size()) + "-D)";
}

// Everything the command line says, parsed and checked before any file is read.
struct Settings {
  Options opt;
  Layout layout = Layout::BHTD;
  bool weights = false;  // SCORES needed: --scores or --heatmap
  I64 batch = 0, head = 0;
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
    s.opt.window_left = static_cast<std::ptrdiff_t>(left);
    s.opt.window_right = static_cast<std::ptrdiff_t>(right);
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
  I64 B = 1, H = 1, Hkv = 1, Tq = 0, Tk = 0, dk = 0, dv = 0;
};

// (batch, heads, tokens, dim) of a 2-D or 4-D input.
void sizes_of(const Input& in, Layout layout, I64& b, I64& h, I64& t, I64& d) {
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
                                  "; Q, K and V must be float32 or float64");
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
  I64 kb, kd, vb, vh, vt;
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
    throw Failure(v.path, "shape " + shape_string(v.shape()) + order + " has " + std::to_string(vt) +
                              " tokens but " + k.path + " " + shape_string(k.shape()) + " has " +
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
      throw Failure(v.path, std::to_string(vh) + " heads but " + k.path + " has " + std::to_string(g.Hkv) +
                                "; shapes " + shape_string(v.shape()) + " and " + shape_string(k.shape()) +
                                order);
    }
    if (g.Hkv == 0 ? g.H != 0 : g.H % g.Hkv != 0) {
      throw Failure(k.path, std::to_string(g.Hkv) + " heads, which do not divide the " + std::to_string(g.H) +
                                " query heads of " + q.path + " (GQA needs a multiple); shapes " +
                                shape_string(k.shape()) + " and " + shape_string(q.shape()) + order);
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
BroadcastView<E> broadcast_of(const E* data, const std::vector<I64>& s) {
  if (s.size() == 2) return BroadcastView<E>::matrix(data, s[0], s[1]);
  return {data, s[0], s[1], s[2], s[3], s[0] == 1 ? 0 : s[1] * s[2] * s[3], s[1] == 1 ? 0 : s[2] * s[3],
          s[3], 1};
}

// The values of a float array (float32 or float64) as T.
template <typename T>
std::vector<T> as_scalars(const Array& a) {
  std::vector<T> out(static_cast<std::size_t>(a.size()));
  if (a.dtype == DType::Float32) {
    const float* p = a.data<float>();
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(p[i]);
  } else {
    const double* p = a.data<double>();
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(p[i]);
  }
  return out;
}

// A vector input with one entry per batch entry or head: shape [n] (or a scalar when n is 1).
void check_vector_shape(const Input& in, I64 n, const std::string& what) {
  const auto& s = in.shape();
  if (!((s.size() == 1 && s[0] == n) || (s.empty() && n == 1))) {
    throw Failure(in.path,
                  "shape " + shape_string(s) + "; expected " + shape_string({n}) + " (" + what + ")");
  }
}

// A pointer the library accepts for an empty array (its data pointer may be null).
template <typename T>
T* data_of(Array& a) {
  static T dummy[1] = {};
  return a.size() == 0 ? dummy : a.data<T>();
}
template <typename T>
const T* data_of(const Array& a) {
  static const T dummy[1] = {};
  return a.size() == 0 ? dummy : a.data<T>();
}

template <typename T>
HeadsView<const T> input_view(const Input& in, const Geometry& g, Layout layout, I64 heads, I64 tokens,
                              I64 dim) {
  const T* p = data_of<T>(in.a);
  if (g.rank == 2) return HeadsView<const T>::bhtd(p, 1, 1, tokens, dim);
  return HeadsView<const T>::contiguous(p, layout, g.B, heads, tokens, dim);
}

struct Written {
  std::string what, path;
  DType dtype;
  std::vector<I64> shape;
};

template <typename T>
int run_typed(const RunArgs& a, const Settings& s, const Input& q, const Input& k, const Input& v,
              const Input& mask, const Input& lengths, const Input& alibi, const Geometry& g,
              OutputFiles& files, const std::vector<AtomicFile*>& outs, Progress& progress) {
  progress.phase("preparing");
  // What the library would reject in its own words, said here in terms of the command line.
  const char* type = std::is_same_v<T, float> ? "float32" : "float64";
  if (s.opt.scale) {
    const T scale = static_cast<T>(*s.opt.scale);
    if (!(scale > 0) || !std::isfinite(scale)) {
      throw Failure("--scale", a.scale + " is " + (scale > 0 ? "infinite" : "0") + " in " + type +
                                   " (the inputs' dtype); it must be finite and > 0");
    }
  } else if (g.dk == 0) {
    throw Failure(q.path, "d_k is 0, so the default scale 1/sqrt(d_k) is undefined; give --scale");
  }
  if (s.opt.softcap > 0) {
    const T cap = static_cast<T>(s.opt.softcap);
    if (!(cap > 0) || !std::isfinite(cap)) {
      throw Failure("--softcap", a.softcap + " is " + (cap > 0 ? "infinite" : "0") + " in " + type +
                                     " (the inputs' dtype); it must be finite and > 0, or 0 for none");
    }
  }
  const Layout layout = g.rank == 2 ? Layout::BHTD : s.layout;
  const auto Q = input_view<T>(q, g, layout, g.H, g.Tq, g.dk);
  const auto K = input_view<T>(k, g, layout, g.Hkv, g.Tk, g.dk);
  const auto V = input_view<T>(v, g, layout, g.Hkv, g.Tk, g.dv);

  // Masks, converted to what the library takes.
  Masks<T> masks;
  std::vector<T> bias, slopes;
  std::vector<I64> key_lengths;
  if (mask.given()) {
    check_mask_shape(mask, g);
    if (mask.a.dtype == DType::Bool) {
      masks.mask = broadcast_of<bool>(data_of<bool>(mask.a), mask.shape());
    } else if (is_float(mask.a.dtype)) {
      bias = as_scalars<T>(mask.a);
      masks.bias = broadcast_of<T>(bias.empty() ? nullptr : bias.data(), mask.shape());
      if (bias.empty()) masks.bias.data = data_of<T>(q.a);  // any non-null pointer: nothing is read
    } else {
      throw Failure(mask.path, std::string("dtype ") + dtype_name(mask.a.dtype) +
                                   "; a mask is bool (true = may attend) or float (an additive bias)");
    }
  }
  if (lengths.given()) {
    check_vector_shape(lengths, g.B, "one key length per batch entry");
    if (lengths.a.dtype == DType::Int64) {
      const I64* p = lengths.a.data<I64>();
      key_lengths.assign(p, p + lengths.a.size());
    } else if (lengths.a.dtype == DType::Int32) {
      const std::int32_t* p = lengths.a.data<std::int32_t>();
      key_lengths.assign(p, p + lengths.a.size());
    } else {
      throw Failure(lengths.path,
                    std::string("dtype ") + dtype_name(lengths.a.dtype) + "; key lengths are int32 or int64");
    }
    for (std::size_t b = 0; b < key_lengths.size(); ++b) {
      if (key_lengths[b] < 0 || key_lengths[b] > g.Tk) {
        throw Failure(lengths.path, "entry " + std::to_string(b) + " is " + std::to_string(key_lengths[b]) +
                                        ", outside [0, T_k = " + std::to_string(g.Tk) + "]");
      }
    }
    masks.key_lengths = key_lengths.data();
  }
  if (alibi.given()) {
    check_vector_shape(alibi, g.H, "one slope per query head");
    if (!is_float(alibi.a.dtype)) {
      throw Failure(alibi.path, std::string("dtype ") + dtype_name(alibi.a.dtype) +
                                    "; ALiBi slopes are float32 or float64");
    }
    slopes = as_scalars<T>(alibi.a);
    masks.alibi_slopes = slopes.data();
  }

  // Outputs, in the inputs' dtype and rank; ATTN in their layout too, LSE and SCORES always
  // with the heads before the tokens ([B, H, T_q] and [B, H, T_q, T_k], PyTorch's and
  // FlashAttention's order for them), so that a 4-D SCORES file has one meaning.
  const DType dtype = q.a.dtype;
  const auto per_layout = [&](I64 tokens, I64 dim) -> std::vector<I64> {
    if (g.rank == 2) return {tokens, dim};
    return layout == Layout::BHTD ? std::vector<I64>{g.B, g.H, tokens, dim}
                                  : std::vector<I64>{g.B, tokens, g.H, dim};
  };
  Array attn = npy::zeros<T>(per_layout(g.Tq, g.dv));
  const auto O = HeadsView<T>::contiguous(data_of<T>(attn), layout, g.B, g.H, g.Tq, g.dv);

  Array lse;
  HeadsView<T> L;
  if (!a.lse.empty()) {
    lse = npy::zeros<T>(g.rank == 2 ? std::vector<I64>{g.Tq} : std::vector<I64>{g.B, g.H, g.Tq});
    L = HeadsView<T>::bhtd(data_of<T>(lse), g.B, g.H, g.Tq, 1);
  }

  // SCORES: per head, [B, H, T_q, T_k] (written to --scores unless averaged), and the mean.
  Array scores, average;
  std::vector<T> scratch;  // per-head weights nobody writes to a file
  HeadsView<T> S, A;
  const T* heads_data = nullptr;  // the per-head weights, [B, H, T_q, T_k]
  if (s.weights) {
    if (!a.scores.empty() && !a.average_heads) {
      scores =
          npy::zeros<T>(g.rank == 2 ? std::vector<I64>{g.Tq, g.Tk} : std::vector<I64>{g.B, g.H, g.Tq, g.Tk});
      heads_data = data_of<T>(scores);
    } else {
      scratch.assign(static_cast<std::size_t>(g.B * g.H * g.Tq * g.Tk), T(0));
      heads_data = scratch.data();
    }
    S = HeadsView<T>::bhtd(const_cast<T*>(heads_data), g.B, g.H, g.Tq, g.Tk);
    if (g.B * g.H * g.Tq * g.Tk == 0) S = {};  // nothing to write
    if (a.average_heads) {
      average = npy::zeros<T>(g.rank == 2 ? std::vector<I64>{g.Tq, g.Tk} : std::vector<I64>{g.B, g.Tq, g.Tk});
      if (average.size() > 0) A = HeadsView<T>::bhtd(average.data<T>(), g.B, 1, g.Tq, g.Tk);
    }
  }

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

  progress.phase("computing");
  if (s.weights && !S.empty()) {
    attention_heads_decomposed(Q, K, V, S, O, s.opt, masks, L, A);
  } else {
    attention_heads(Q, K, V, O, s.opt, masks, L);
  }

  progress.phase("writing");
  std::vector<Written> written;
  std::size_t next = 0;
  if (!a.out.empty()) {
    npy::write(*outs[next++], attn);
    written.push_back({"ATTN", a.out, dtype, attn.shape});
  }
  if (!a.scores.empty()) {
    const Array& what = a.average_heads ? average : scores;
    npy::write(*outs[next++], what);
    written.push_back({a.average_heads ? "SCORES (mean over heads)" : "SCORES", a.scores, dtype, what.shape});
  }
  if (!a.lse.empty()) {
    npy::write(*outs[next++], lse);
    written.push_back({"LSE", a.lse, dtype, lse.shape});
  }
  if (!a.heatmap.empty()) {
    const std::vector<std::string> tokens =
        a.tokens.empty() ? std::vector<std::string>() : read_tokens(a.tokens);
    std::string title;
    if (a.average_heads) {
      title = g.rank == 4 ? "batch " + std::to_string(s.batch) + ", mean over heads"
                          : std::string("attention weights");
      draw_weights<T>(*outs[next++], average.data<T>() + s.batch * g.Tq * g.Tk, g.Tq, g.Tk, g.Tk, tokens,
                      title);
    } else {
      title = g.rank == 4 ? "batch " + std::to_string(s.batch) + ", head " + std::to_string(s.head)
                          : std::string("attention weights");
      draw_weights<T>(*outs[next++], heads_data + (s.batch * g.H + s.head) * g.Tq * g.Tk, g.Tq, g.Tk, g.Tk,
                      tokens, title);
    }
    written.push_back({"heatmap", a.heatmap, dtype, {}});
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
  }
  return 0;
}

}  // namespace

int run_command(const RunArgs& a) {
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
              alibi = load("--alibi", a.alibi);
  if (!a.tokens.empty()) read_tokens(a.tokens);  // a bad tokens file fails before the work

  if (q.a.dtype == DType::Float32) {
    return run_typed<float>(a, s, q, k, v, mask, lengths, alibi, g, files, outs, progress);
  }
  return run_typed<double>(a, s, q, k, v, mask, lengths, alibi, g, files, outs, progress);
}

}  // namespace cli
}  // namespace EigenAttention
