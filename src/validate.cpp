// SPDX-License-Identifier: MIT
// Argument validation: every check on user input lives here, for every public call (see
// make_problem in validate.hpp for the order).
#include "validate.hpp"

#include <EigenAttention/Compiled.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "decode_problem.hpp"
#include "kernels/kernels.hpp"
#include "text.hpp"

namespace EigenAttention {
namespace internal {
namespace {

constexpr index_t kIndexMax = std::numeric_limits<index_t>::max();

[[noreturn]] void fail(const char* api, const std::string& what) {
  throw std::invalid_argument(std::string("EigenAttention::") + api + ": " + what);
}

// a * b into r, false when it overflows; a + b likewise.
bool mul(index_t a, index_t b, index_t& r) { return !__builtin_mul_overflow(a, b, &r); }
bool add(index_t a, index_t b, index_t& r) { return !__builtin_add_overflow(a, b, &r); }

std::string num(index_t n) { return std::to_string(n); }
using internal::counted;
// A size that may also be 1 (broadcast): "4 or 1", or "1" when it is 1.
std::string either_or_1(index_t n) { return n == 1 ? num(n) : num(n) + " or 1"; }

// ---------------------------------------------------------------------------------------------
// Arrays as the validator sees them: up to four axes, sizes and byte strides, printed the way
// the caller wrote them.

enum class Print { Matrix, Heads, Vector };

struct Array {
  const char* name;
  std::uintptr_t data;  // element 0, as an address
  index_t bytes;        // per element
  index_t size[4];
  index_t stride[4];  // in elements
  Print print;

  index_t count_or_zero() const {  // 0 when any size is 0 (sizes checked before)
    for (const index_t n : size)
      if (n == 0) return 0;
    return 1;
  }
  std::string shape() const {
    switch (print) {
      case Print::Matrix:
        return num(size[2]) + "x" + num(size[3]);
      case Print::Vector:
        return counted(size[3], "entry", "entries");
      case Print::Heads:
        break;
    }
    return "[" + num(size[0]) + ", " + num(size[1]) + ", " + num(size[2]) + ", " + num(size[3]) + "]";
  }
  // The strides of the axes shape() prints: "(7,1)", "(0,0,7,1)", "(1)".
  std::string strides() const {
    std::string list;
    for (int axis = print == Print::Heads ? 0 : print == Print::Matrix ? 2 : 3; axis < 4; ++axis)
      list += (list.empty() ? "" : ",") + num(stride[axis]);
    return "(" + list + ")";
  }
  // "Q (3x7)", "Q [1, 2, 3, 7]", "key_lengths (2 entries)".
  std::string named() const {
    return std::string(name) + (print == Print::Heads ? " " + shape() : " (" + shape() + ")");
  }
};

template <class View>
Array array_of(const char* name, const View& v, Form form) {
  return {name,
          reinterpret_cast<std::uintptr_t>(v.data),
          static_cast<index_t>(sizeof(*v.data)),
          {v.batch, v.heads, v.tokens, v.dim},
          {v.batch_stride, v.head_stride, v.token_stride, v.dim_stride},
          form == Form::Matrix ? Print::Matrix : Print::Heads};
}
template <class Element>
Array array_of(const char* name, const BroadcastView<Element>& m, Form form) {
  return {name,
          reinterpret_cast<std::uintptr_t>(m.data),
          static_cast<index_t>(sizeof(*m.data)),
          {m.batch, m.heads, m.rows, m.cols},
          {m.batch_stride, m.head_stride, m.row_stride, m.col_stride},
          form == Form::Matrix ? Print::Matrix : Print::Heads};
}
template <class Element>
Array vector_of(const char* name, const Element* data, index_t n) {
  return {name,
          reinterpret_cast<std::uintptr_t>(data),
          static_cast<index_t>(sizeof(Element)),
          {1, 1, 1, n},
          {0, 0, 0, 1},
          Print::Vector};
}

// The element count and the byte span (sum over axes of |stride| * size * bytes, a size of 0
// counting as 1) must fit index_t: every offset the kernels and the overlap rule compute is
// bounded by them. A matrix counts its two axes; a 4-D view counts a size of 0 as 1 in the
// element count too, as the scheduler multiplies batch, heads and tiles whatever dim is.
void check_countable(const char* api, const Array& a) {
  const auto what = [&] { return a.named() + " with strides " + a.strides(); };
  const bool zero_as_one = a.print == Print::Heads;
  index_t count = 1, span = 0;
  for (int axis = 0; axis < 4; ++axis) {
    const index_t n = zero_as_one ? std::max<index_t>(a.size[axis], 1) : a.size[axis];
    if (!mul(count, n, count)) {
      fail(api, what() + " has more elements than Eigen::Index can count (" + num(kIndexMax) +
                    (zero_as_one ? "; a size of 0 counts as 1 here)" : ")"));
    }
  }
  for (int axis = 0; axis < 4; ++axis) {
    index_t reach = 0;
    const bool ok = a.stride[axis] != std::numeric_limits<index_t>::min() &&
                    mul(std::abs(a.stride[axis]), std::max<index_t>(a.size[axis], 1), reach) &&
                    mul(reach, a.bytes, reach) && add(span, reach, span);
    if (!ok) fail(api, what() + " spans more bytes than Eigen::Index can count (" + num(kIndexMax) + ")");
  }
}

// A few Arrays, without allocating (the _into calls allocate nothing).
template <std::size_t N>
struct ArrayList {
  Array items[N];
  std::size_t size = 0;
  void push_back(const Array& a) { items[size++] = a; }
  Array* begin() { return items; }
  Array* end() { return items + size; }
};

// Sizes not negative, countable, and data behind every element.
void check_sizes(const char* api, const Array& a) {
  for (const index_t n : a.size) {
    if (n < 0) fail(api, std::string(a.name) + " has a negative size: " + a.shape());
  }
  check_countable(api, a);
  if (a.data == 0 && a.count_or_zero() != 0) fail(api, a.named() + " has no data");
}

// ---------------------------------------------------------------------------------------------
// The one overlap rule. Two arrays overlap when an element of one shares a byte with an element
// of the other. Decided exactly for blocks of one parent array (equal strides on the axes that
// have more than one element, strides nested like a parent's: [Q | ATTN] side by side is fine),
// and conservatively (by the byte ranges they span) for anything else.

// The sorted axes of a and b as one lattice, when they form one (blocks of one parent, at any
// offset); false otherwise.
struct Lattice {
  int axes = 0;
  index_t stride[4], na[4], nb[4];  // sorted by stride, in bytes, all > 0
  index_t delta = 0;                // b's first element minus a's, in bytes
};

bool as_lattice(const Array& a, const Array& b, Lattice& l) {
  if (a.bytes != b.bytes) return false;
  std::uintptr_t a0 = a.data, b0 = b.data;
  for (int axis = 0; axis < 4; ++axis) {
    const index_t na = a.size[axis], nb = b.size[axis];
    if (na == 1 && nb == 1) continue;
    if (na > 1 && nb > 1 && a.stride[axis] != b.stride[axis]) return false;
    index_t s = (na > 1 ? a.stride[axis] : b.stride[axis]) * a.bytes;
    if (s == 0) return false;
    if (s < 0) {  // walk the axis backwards from its last element
      a0 += static_cast<std::uintptr_t>((na - 1) * s);
      b0 += static_cast<std::uintptr_t>((nb - 1) * s);
      s = -s;
    }
    l.stride[l.axes] = s;
    l.na[l.axes] = na;
    l.nb[l.axes] = nb;
    ++l.axes;
  }
  for (int i = 1; i < l.axes; ++i) {  // insertion sort by stride
    for (int j = i; j > 0 && l.stride[j] < l.stride[j - 1]; --j) {
      std::swap(l.stride[j], l.stride[j - 1]);
      std::swap(l.na[j], l.na[j - 1]);
      std::swap(l.nb[j], l.nb[j - 1]);
    }
  }
  l.delta = static_cast<index_t>(b0 - a0);
  for (int i = 0; i + 1 < l.axes; ++i) {
    if (l.stride[i + 1] % l.stride[i] != 0 || std::max(l.na[i], l.nb[i]) * l.stride[i] > l.stride[i + 1]) {
      return false;
    }
  }
  return true;
}

// Is there an index difference e (e_k in [-(nb_k - 1), na_k - 1]) with sum e_k stride_k equal to
// `units` times the smallest stride? Write `units` in the mixed radix of the strides; each e_k
// is its digit plus the carry from below less a carry to the axis above, and as |e_k| stays below
// the radix there are two carries per axis to try.
bool reachable(const Lattice& l, index_t units) {
  index_t digit[4], radix[4];
  for (int i = 0; i < l.axes; ++i) {
    if (i + 1 < l.axes) {
      radix[i] = l.stride[i + 1] / l.stride[i];
      digit[i] = ((units % radix[i]) + radix[i]) % radix[i];
      units = (units - digit[i]) / radix[i];
    } else {
      digit[i] = units;
    }
  }
  for (unsigned carries = 0; carries < (1u << (l.axes - 1)); ++carries) {
    bool all = true;
    for (int i = 0; i < l.axes && all; ++i) {
      const index_t in = i > 0 ? (carries >> (i - 1)) & 1 : 0;
      const index_t out = i + 1 < l.axes ? (carries >> i) & 1 : 0;
      const index_t e = digit[i] + in - (out ? radix[i] : 0);
      all = e >= -(l.nb[i] - 1) && e <= l.na[i] - 1;
    }
    if (all) return true;
  }
  return false;
}

// Do two elements (of `bytes` each) share a byte? Their addresses differ by delta - sum e_k
// stride_k = r + m stride_0 (r = delta mod stride_0): try each such difference below `bytes` in
// magnitude.
bool lattice_overlaps(const Lattice& l, index_t bytes) {
  if (l.axes == 0) return l.delta > -bytes && l.delta < bytes;
  const index_t s0 = l.stride[0], r = ((l.delta % s0) + s0) % s0;
  for (index_t m = -(bytes / s0) - 1; m <= bytes / s0; ++m) {
    const index_t diff = r + m * s0;
    if (diff > -bytes && diff < bytes && reachable(l, (l.delta - diff) / s0)) return true;
  }
  return false;
}

// The byte range [lo, hi] an array's elements cover (sizes checked, spans countable).
void byte_range(const Array& a, std::uintptr_t& lo, std::uintptr_t& hi) {
  index_t low = 0, high = 0;
  for (int axis = 0; axis < 4; ++axis) {
    const index_t reach = (a.size[axis] - 1) * a.stride[axis] * a.bytes;
    low += std::min<index_t>(reach, 0);
    high += std::max<index_t>(reach, 0);
  }
  lo = a.data + static_cast<std::uintptr_t>(low);
  hi = a.data + static_cast<std::uintptr_t>(high + a.bytes - 1);
}

bool may_overlap(const Array& a, const Array& b) {
  if (a.count_or_zero() == 0 || b.count_or_zero() == 0) return false;
  std::uintptr_t a_lo, a_hi, b_lo, b_hi;
  byte_range(a, a_lo, a_hi);
  byte_range(b, b_lo, b_hi);
  if (a_hi < b_lo || b_hi < a_lo) return false;
  Lattice l;
  return as_lattice(a, b, l) ? lattice_overlaps(l, a.bytes) : true;
}

void check_apart(const char* api, const Array& out, const Array& other) {
  if (may_overlap(out, other)) {
    fail(api, "output " + out.named() + " overlaps " + other.named() +
                  " in memory; outputs must not alias inputs or each other");
  }
}

// No two elements of an output share memory: its axes with more than one element, sorted by
// |stride|, are nested (each stride at least the size times the stride below it, the smallest
// at least one element).
void check_distinct_elements(const char* api, const Array& a) {
  if (a.count_or_zero() == 0) return;
  index_t stride[4], size[4];
  int axes = 0;
  for (int axis = 0; axis < 4; ++axis) {
    if (a.size[axis] <= 1) continue;
    stride[axes] = std::abs(a.stride[axis]);
    size[axes++] = a.size[axis];
  }
  for (int i = 1; i < axes; ++i) {
    for (int j = i; j > 0 && stride[j] < stride[j - 1]; --j) {
      std::swap(stride[j], stride[j - 1]);
      std::swap(size[j], size[j - 1]);
    }
  }
  bool ok = axes == 0 || stride[0] >= 1;
  for (int i = 0; ok && i + 1 < axes; ++i) ok = stride[i + 1] >= size[i] * stride[i];
  if (!ok) {
    fail(api, a.named() + " has strides " + a.strides() + " under which two of its elements share memory");
  }
}

// ---------------------------------------------------------------------------------------------
// Options: checked here and nowhere else.

template <typename T>
T resolve_scale(const char* api, const Options& opt, const Array& q) {
  if (opt.scale.has_value()) {
    const double scale = *opt.scale;
    const T as_t = static_cast<T>(scale);
    if (!std::isfinite(scale) || !(scale > 0) || !std::isfinite(as_t) || !(as_t > 0)) {
      std::ostringstream msg;
      msg.precision(17);
      msg << "scale must be finite and > 0 in the scalar type, got " << scale;
      fail(api, msg.str());
    }
    return as_t;
  }
  if (q.size[3] == 0) {
    fail(api, "d_k is 0 (Q is " + q.shape() +
                  "), so the default scale 1/sqrt(d_k) is undefined; set Options::scale");
  }
  return static_cast<T>(1.0 / std::sqrt(static_cast<double>(q.size[3])));
}

template <typename T>
void check_options(const char* api, const Options& opt, Problem<T>& p, const Array& q) {
  using C = ComputeScalar<T>;
  p.scale = resolve_scale<C>(api, opt, q);
  if (opt.threads < 0)
    fail(api, "threads must be >= 0 (0 means all hardware threads), got " + std::to_string(opt.threads));
  if (opt.window_left < -1 || opt.window_right < -1) {
    fail(api, "window sizes must be >= 0, or -1 for unbounded; got window_left = " +
                  std::to_string(opt.window_left) + ", window_right = " + std::to_string(opt.window_right));
  }
  const C cap = static_cast<C>(opt.softcap);
  if (!(opt.softcap >= 0) || !std::isfinite(opt.softcap) || !std::isfinite(cap) ||
      (opt.softcap > 0 && !(cap > 0))) {
    std::ostringstream msg;
    msg.precision(17);
    msg << "softcap must be 0 (off) or finite and > 0 in the scalar type, got " << opt.softcap;
    fail(api, msg.str());
  }
  p.causal = opt.causal;
  p.bottom_right = opt.alignment == CausalAlignment::BottomRight;
  if (opt.diagonal_offset.has_value()) {
    constexpr index_t limit = index_t(1) << 60;  // i + offset +- window stays far from overflow
    const index_t offset = *opt.diagonal_offset;
    if (offset > limit || offset < -limit) {
      fail(api, "diagonal_offset must be within +-2^60, got " + std::to_string(offset));
    }
    p.fixed_offset = true;
    p.offset = offset;
  }
  p.window_left = opt.window_left;
  p.window_right = opt.window_right;
  p.softcap = cap;
  p.kernel = resolve_kernel(api, opt.kernel);
}

template <typename T>
void check_scratch(const char* api, index_t dk, index_t dv, index_t tk) {
  for (const auto& [name, n] : {std::pair{"d_k", dk}, std::pair{"d_v", dv}, std::pair{"T_k", tk}}) {
    if (n > kMaxScratchRowLength<T>) {
      fail(api, std::string(name) + " = " + num(n) + " exceeds " + num(kMaxScratchRowLength<T>) +
                    ", the most the kernels' per-thread scratch (up to " + num(kScratchRows) + " rows of " +
                    name + " elements) can count in Eigen::Index");
    }
  }
}

// Offsets cu[0..sequences] start at 0, never decrease and end within `total` (when >= 0).
void check_offsets(const char* api, const char* name, const std::int64_t* cu, index_t sequences,
                   index_t total) {
  if (cu[0] != 0) fail(api, std::string(name) + "[0] is " + std::to_string(cu[0]) + " but must be 0");
  for (index_t b = 0; b < sequences; ++b) {
    if (cu[b + 1] < cu[b]) {
      fail(api, std::string(name) + " decreases: [" + num(b) + "] = " + std::to_string(cu[b]) + " > [" +
                    num(b + 1) + "] = " + std::to_string(cu[b + 1]));
    }
  }
  if (total >= 0 && cu[sequences] > total) {
    fail(api, std::string(name) + "[" + num(sequences) + "] = " + std::to_string(cu[sequences]) +
                  " exceeds the " + counted(total, "packed token"));
  }
}

void check_sequence_count(const char* api, index_t sequences) {
  if (sequences < 0) fail(api, "the number of sequences is negative: " + num(sequences));
  if (sequences > kIndexMax / static_cast<index_t>(sizeof(std::int64_t)) - 1) {
    fail(api, "the number of sequences, " + num(sequences) +
                  ", is too large: cu_seqlens of batch + 1 offsets would span more bytes than Eigen::Index "
                  "can count");
  }
}

}  // namespace

// The masks (mask and bias of [B or 1, H or 1, T_q, T_k], key lengths in [0, T_k], ALiBi slopes)
// or a packed batch's offsets, checked and added to `inputs` (for the overlap checks): inputs
// too, checked before any output.
template <typename T, std::size_t N>
void check_masks(const Call<T>& c, index_t H, index_t tq, index_t tk, ArrayList<N>& inputs) {
  const char* api = c.api;
  const index_t B = c.q.batch;
  if (c.cu_q != nullptr || c.cu_k != nullptr) {
    if (c.cu_q == nullptr || c.cu_k == nullptr) fail(api, "cu_seqlens_q and cu_seqlens_k must both be given");
    check_sequence_count(api, c.sequences);
    if (c.q.batch != 1) {
      fail(api,
           "a packed batch has batch size 1 in its views, but Q is " + array_of("Q", c.q, c.form).shape());
    }
    if (!c.masks.mask.empty() || !c.masks.bias.empty() || c.masks.key_lengths != nullptr) {
      fail(api,
           "a packed variable-length batch takes no mask, bias or key_lengths (ALiBi, causal and window "
           "apply)");
    }
    check_offsets(api, "cu_seqlens_q", c.cu_q, c.sequences, tq);
    check_offsets(api, "cu_seqlens_k", c.cu_k, c.sequences, tk);
    inputs.push_back(vector_of("cu_seqlens_q", c.cu_q, c.sequences + 1));
    inputs.push_back(vector_of("cu_seqlens_k", c.cu_k, c.sequences + 1));
  } else {
    const auto broadcast = [&](const char* name, const auto& m) {
      if (m.empty()) return;
      const Array a = array_of(name, m, c.form);
      const bool batch_ok = m.batch == 1 || m.batch == B, heads_ok = m.heads == 1 || m.heads == H;
      if (!batch_ok || !heads_ok || m.rows != tq || m.cols != tk) {
        fail(api, std::string(name) + " is " + a.shape() + " but must be " +
                      (c.form == Form::Matrix ? num(tq) + "x" + num(tk) + " (T_q x T_k)"
                                              : "[" + either_or_1(B) + ", " + either_or_1(H) + ", " +
                                                    num(tq) + ", " + num(tk) + "]"));
      }
      check_countable(api, a);
      inputs.push_back(a);
    };
    broadcast("mask", c.masks.mask);
    broadcast("bias", c.masks.bias);
    if (c.masks.key_lengths != nullptr) {
      const Array lengths = vector_of("key_lengths", c.masks.key_lengths, B);
      check_countable(api, lengths);
      for (index_t b = 0; b < B; ++b) {
        if (c.masks.key_lengths[b] < 0 || c.masks.key_lengths[b] > tk) {
          fail(api, "key_lengths[" + num(b) + "] = " + std::to_string(c.masks.key_lengths[b]) +
                        " is outside [0, T_k = " + num(tk) + "]");
        }
      }
      inputs.push_back(lengths);
    }
  }
  if (c.masks.alibi_slopes != nullptr) inputs.push_back(vector_of("alibi_slopes", c.masks.alibi_slopes, H));
}

template <typename T>
Problem<T> make_problem(const Call<T>& c, const Options& opt) {
  const char* api = c.api;
  if (!c.backward && !c.inputs_only && !c.want_out && !c.want_scores) {
    fail(api,
         c.form == Form::Matrix ? "neither SCORES nor ATTN is asked for" : "neither out nor scores is given");
  }
  if (c.want_out && !c.has_v) fail(api, "ATTN is asked for without V");

  // The inputs, each on its own, then against each other.
  const Array q = array_of("Q", c.q, c.form), k = array_of("K", c.k, c.form), v = array_of("V", c.v, c.form);
  check_sizes(api, q);
  check_sizes(api, k);
  if (c.has_v) check_sizes(api, v);
  const bool varlen = c.cu_q != nullptr || c.cu_k != nullptr;
  const index_t H = c.q.heads, tq = c.q.tokens, tk = c.k.tokens;
  // (Messages in the caller's terms: columns and rows of matrices, d_k and T_k of views.)
  const bool matrix = c.form == Form::Matrix;
  if (c.q.dim != c.k.dim) {
    fail(api,
         (matrix ? "K has " + counted(c.k.dim, "column") + " but Q has " + num(c.q.dim) + " (d_k must match)"
                 : "K has d_k = " + num(c.k.dim) + " but Q has " + num(c.q.dim)) +
             "; Q is " + q.shape() + ", K is " + k.shape());
  }
  if (c.has_v) {
    if (c.k.batch != c.q.batch || c.v.batch != c.q.batch) {
      fail(api, "batch sizes differ: Q is " + q.shape() + ", K is " + k.shape() + ", V is " + v.shape());
    }
    if (c.k.heads != c.v.heads)
      fail(api, "K and V have different head counts: K is " + k.shape() + ", V is " + v.shape());
    if (c.v.tokens != tk) {
      fail(api,
           (matrix ? "V has " + counted(c.v.tokens, "row") + " but K has " + num(tk) + " (T_k must match)"
                   : std::string("K and V have different token counts (T_k)")) +
               "; K is " + k.shape() + ", V is " + v.shape());
    }
  } else if (c.k.batch != c.q.batch || c.k.heads != c.q.heads) {
    fail(api, "batch sizes or head counts differ: Q is " + q.shape() + ", K is " + k.shape());
  }
  if (c.k.heads == 0 ? H != 0 : H % c.k.heads != 0) {
    fail(api, "query heads (" + num(H) + ") must be a multiple of key/value heads (" + num(c.k.heads) +
                  "); Q is " + q.shape() + ", K is " + k.shape());
  }
  const index_t dv = c.has_v ? c.v.dim : 0;
  check_scratch<ComputeScalar<T>>(api, c.q.dim, dv, tk);
  // The backward pass's further inputs, each of a shape the forward's sizes fix.
  const index_t B = c.q.batch;
  const auto shaped = [&](const char* name, const auto& view, index_t batch, index_t heads, index_t tokens,
                          index_t cols, const char* what) {
    const Array a = array_of(name, view, c.form);
    check_sizes(api, a);
    if (view.batch != batch || view.heads != heads || view.tokens != tokens || view.dim != cols) {
      Array must = a;
      must.size[0] = batch, must.size[1] = heads, must.size[2] = tokens, must.size[3] = cols;
      fail(api, std::string(name) + " is " + a.shape() + " but must be " + must.shape() + " (" + what + ")");
    }
    return a;
  };
  ArrayList<4> grad_inputs;  // out, lse, d_out, d_scores
  if (c.backward) {
    grad_inputs.push_back(shaped("attn", c.fwd_out, B, H, tq, dv, matrix ? "T_q x d_v" : "[B, H, T_q, d_v]"));
    grad_inputs.push_back(shaped("lse", c.fwd_lse, B, H, tq, 1, matrix ? "T_q x 1" : "[B, H, T_q, 1]"));
    grad_inputs.push_back(shaped("d_attn", c.d_out, B, H, tq, dv, matrix ? "T_q x d_v" : "[B, H, T_q, d_v]"));
    if (c.want_d_scores) {
      grad_inputs.push_back(
          shaped("d_scores", c.d_scores, B, H, tq, tk, matrix ? "T_q x T_k" : "[B, H, T_q, T_k]"));
    }
  }

  ArrayList<13> inputs;  // Q, K, V, attn, lse, d_attn, d_scores, mask, bias, key_lengths or the two
                         // offsets, ALiBi slopes
  inputs.push_back(q);
  inputs.push_back(k);
  if (c.has_v) inputs.push_back(v);
  for (const Array& a : grad_inputs) inputs.push_back(a);
  check_masks(c, H, tq, tk, inputs);

  Problem<T> p;
  check_options(api, opt, p, q);
  p.q = c.q;
  p.k = c.k;
  p.v = c.has_v ? c.v : HeadsView<const T>{};
  p.masks = c.masks;
  p.cu_q = c.cu_q;
  p.cu_k = c.cu_k;
  p.sequences = varlen ? c.sequences : c.q.batch;

  // The outputs: shapes, then distinct elements.
  ArrayList<4> outputs;  // out, lse, scores, average_scores; or dq, dk, dv, d_bias
  const auto output = [&](bool wanted, const char* name, const auto& view, index_t heads, index_t cols,
                          const char* what) {
    if (wanted) outputs.push_back(shaped(name, view, B, heads, tq, cols, what));
  };
  output(c.want_out, "attn", c.out, H, dv, matrix ? "T_q x d_v" : "[B, H, T_q, d_v]");
  output(c.want_lse, "lse", c.lse, H, 1, matrix ? "T_q x 1" : "[B, H, T_q, 1]");
  if (c.scores_compute) {
    output(c.want_scores, "scores", c.compute_scores, H, tk, matrix ? "T_q x T_k" : "[B, H, T_q, T_k]");
  } else {
    output(c.want_scores, "scores", c.scores, H, tk, matrix ? "T_q x T_k" : "[B, H, T_q, T_k]");
  }
  if (c.want_average) {
    if (!c.want_scores)
      fail(api, "average_scores is the mean of the per-head scores, so scores must be given too");
    output(true, "average_scores", c.average, 1, tk, "[B, 1, T_q, T_k]");
  }
  if (c.backward) {
    const index_t Hkv = c.k.heads;
    // With inputs_only (before a front door resizes), a gradient that is absent (an empty view)
    // is one the front door sizes afterwards.
    const auto gradient = [&](const char* name, const HeadsView<T>& view, index_t heads, index_t tokens,
                              index_t cols, const char* what) {
      const bool absent = view.data == nullptr && view.batch == 0 && view.heads == 0 && view.tokens == 0;
      if (!(c.inputs_only && absent)) outputs.push_back(shaped(name, view, B, heads, tokens, cols, what));
    };
    gradient("dq", c.dq, H, tq, c.q.dim, matrix ? "T_q x d_k" : "[B, H, T_q, d_k]");
    gradient("dk", c.dk, Hkv, tk, c.q.dim, matrix ? "T_k x d_k" : "[B, H_kv, T_k, d_k]");
    gradient("dv", c.dv, Hkv, tk, dv, matrix ? "T_k x d_v" : "[B, H_kv, T_k, d_v]");
    if (c.d_bias.data != nullptr) {
      const BroadcastView<T>& bias = c.masks.bias;
      if (bias.empty()) fail(api, "d_bias is given but masks.bias is not (dL/dbias needs a bias)");
      outputs.push_back(
          shaped("d_bias", c.d_bias, bias.batch, bias.heads, tq, tk, "the bias's shape [b, h, T_q, T_k]"));
    }
    p.backward = true;
    p.fwd_out = c.fwd_out;
    p.fwd_lse = c.fwd_lse;
    p.d_out = c.d_out;
    p.d_scores = c.d_scores;
    p.dq = c.dq;
    p.dk = c.dk;
    p.dv = c.dv;
    p.d_bias = c.d_bias;
  }
  p.out = c.out;
  p.lse = c.lse;
  p.scores = c.scores;
  p.compute_scores = c.compute_scores;
  p.scores_compute = c.scores_compute;
  p.want_out = c.want_out;
  p.want_lse = c.want_lse;
  p.want_scores = c.want_scores;

  // Memory, last: no two elements of an output share memory, no output overlaps an input, and no
  // two outputs overlap (average_scores, checked last above, named first).
  for (const Array& out : outputs) check_distinct_elements(api, out);
  for (const Array& out : outputs) {
    for (const Array& in : inputs) check_apart(api, out, in);
  }
  if (c.want_average) std::rotate(outputs.begin(), outputs.end() - 1, outputs.end());
  for (std::size_t i = 0; i < outputs.size; ++i) {
    for (std::size_t j = i + 1; j < outputs.size; ++j) check_apart(api, outputs.items[i], outputs.items[j]);
  }
  return p;
}

template <typename T>
void check_merge(const char* api, HeadsView<const T> attn_a, HeadsView<const ComputeScalar<T>> lse_a,
                 HeadsView<const T> attn_b, HeadsView<const ComputeScalar<T>> lse_b, HeadsView<T> attn,
                 HeadsView<ComputeScalar<T>> lse) {
  const Form f = Form::Heads;
  const Array oa = array_of("attn_a", attn_a, f), la = array_of("lse_a", lse_a, f),
              ob = array_of("attn_b", attn_b, f), lb = array_of("lse_b", lse_b, f),
              o = array_of("attn", attn, f), l = array_of("lse", lse, f);
  const auto same_shape = [&](const Array& a, const Array& b) {
    check_sizes(api, a);
    if (!std::equal(a.size, a.size + 4, b.size)) {
      fail(api, std::string(a.name) + " is " + a.shape() + " but " + b.name + " is " + b.shape());
    }
  };
  check_sizes(api, oa);
  same_shape(ob, oa);
  same_shape(o, oa);
  check_sizes(api, la);
  Array must = la;
  must.size[0] = attn_a.batch, must.size[1] = attn_a.heads, must.size[2] = attn_a.tokens, must.size[3] = 1;
  if (!std::equal(la.size, la.size + 4, must.size)) {
    fail(api, "lse_a is " + la.shape() + " but must be " + must.shape() + " ([B, H, T, 1])");
  }
  same_shape(lb, la);
  same_shape(l, la);
  check_distinct_elements(api, o);
  check_distinct_elements(api, l);
  // An output may be exactly one of the inputs (merging in place) or apart from all of them: a
  // partial overlap would read values already overwritten.
  const auto alias_or_apart = [&](const Array& out_array, const Array& in) {
    const bool same = out_array.data == in.data && std::equal(out_array.size, out_array.size + 4, in.size) &&
                      std::equal(out_array.stride, out_array.stride + 4, in.stride);
    if (!same) check_apart(api, out_array, in);
  };
  for (const Array* in : {&oa, &la, &ob, &lb}) {
    alias_or_apart(o, *in);
    alias_or_apart(l, *in);
  }
  check_apart(api, o, l);
}

std::vector<index_t> varlen_score_offsets(const char* api, const std::int64_t* cu_q, const std::int64_t* cu_k,
                                          index_t batch, index_t heads) {
  if (cu_q == nullptr || cu_k == nullptr) fail(api, "cu_seqlens_q and cu_seqlens_k must both be given");
  check_sequence_count(api, batch);
  if (heads < 0) fail(api, "the number of heads is negative: " + num(heads));
  check_offsets(api, "cu_seqlens_q", cu_q, batch, -1);
  check_offsets(api, "cu_seqlens_k", cu_k, batch, -1);
  std::vector<index_t> offsets(static_cast<std::size_t>(batch) + 1, 0);
  for (index_t b = 0; b < batch; ++b) {
    const index_t tq = cu_q[b + 1] - cu_q[b], tk = cu_k[b + 1] - cu_k[b];
    index_t block = 0, next = 0;
    if (!mul(tq, tk, block) || !mul(block, heads, block) || !add(offsets[b], block, next)) {
      fail(api, "the packed weights of " + counted(batch, "sequence") +
                    " overflow Eigen::Index at sequence " + num(b) + " (T_q = " + num(tq) +
                    ", T_k = " + num(tk) + ", heads = " + num(heads) + ")");
    }
    offsets[b + 1] = next;
  }
  return offsets;
}

template <typename T>
void check_packed_scores(const char* api, const T* scores, std::size_t size, std::size_t required,
                         const Problem<T>& p) {
  if (size != required) {
    fail(api, "scores holds " + counted(static_cast<long long>(size), "element") +
                  " but the packed weights need " + std::to_string(required) + " (varlen_scores_size)");
  }
  if (required > 0 && scores == nullptr) fail(api, "scores is null");
  const Form f = Form::Heads;
  const Array packed = vector_of("scores", scores, static_cast<index_t>(required));
  std::vector<Array> others = {array_of("Q", p.q, f), array_of("K", p.k, f), array_of("V", p.v, f),
                               vector_of("cu_seqlens_q", p.cu_q, p.sequences + 1),
                               vector_of("cu_seqlens_k", p.cu_k, p.sequences + 1)};
  if (p.want_out) others.push_back(array_of("attn", p.out, f));
  if (p.want_lse) others.push_back(array_of("lse", p.lse, f));
  if (p.masks.alibi_slopes != nullptr)
    others.push_back(vector_of("alibi_slopes", p.masks.alibi_slopes, p.q.heads));
  for (const Array& other : others) check_apart(api, packed, other);
}

// ---------------------------------------------------------------------------------------------
// Decode attention over paged keys (KVCache.hpp).

namespace {

// The pages of keys or values as a [num_pages, page_size, kv_heads, d] array.
Array pages_of(const char* name, const void* data, index_t bytes, const compiled::RawPagedKV& kv, index_t dim,
               index_t page_stride, index_t token_stride, index_t head_stride) {
  return {name,
          reinterpret_cast<std::uintptr_t>(data),
          bytes,
          {kv.num_pages, kv.page_size, kv.kv_heads, dim},
          {page_stride, token_stride, head_stride, 1},
          Print::Heads};
}

}  // namespace

void paged_view_sequences(const char* api, const compiled::RawPagedKV& kv,
                          std::vector<PagedSequence>& sequences) {
  check_sequence_count(api, kv.batch);
  if (kv.page_size < 1) fail(api, "page_size must be >= 1, got " + num(kv.page_size));
  if (kv.block_table_stride < 0) fail(api, "block_table_stride is negative: " + num(kv.block_table_stride));
  if (kv.batch > 0 && kv.lengths == nullptr) fail(api, "lengths is null");
  sequences.resize(static_cast<std::size_t>(kv.batch));
  for (index_t b = 0; b < kv.batch; ++b) {
    const std::int64_t n = kv.lengths[b];
    index_t room = 0;
    if (n < 0) fail(api, "lengths[" + num(b) + "] = " + std::to_string(n) + " is negative");
    if (!mul(kv.block_table_stride, kv.page_size, room) || n > room) {
      fail(api, "lengths[" + num(b) + "] = " + std::to_string(n) + " exceeds the " + counted(room, "token") +
                    " that block_table_stride = " + counted(kv.block_table_stride, "page") + " of " +
                    counted(kv.page_size, "token") + " hold");
    }
    if (n > 0 && kv.block_tables == nullptr)
      fail(api, "block_tables is null but lengths[" + num(b) + "] > 0");
    sequences[b] = {n > 0 ? kv.block_tables + b * kv.block_table_stride : nullptr, static_cast<index_t>(n)};
  }
}

template <typename T>
DecodeProblem<T> make_decode_problem(const char* api, const compiled::RawPagedKV& kv,
                                     const PagedSequence* sequences, index_t batch,
                                     const compiled::DecodeArgs<T>& a, const Options& opt) {
  DecodeProblem<T> d;
  d.kv = kv;
  d.sequences = sequences;
  d.batch = batch;
  // The keys: sizes, then the pages of each sequence.
  const index_t bytes = kv_storage_bytes(kv.storage);
  if (bytes == 0) fail(api, "unknown KV storage type " + std::to_string(static_cast<int>(kv.storage)));
  if ((kv.storage == KVStorage::Float64) != std::is_same_v<T, double>) {
    fail(api, "queries of this scalar type do not go with keys of this storage type");
  }
  if (kv.kv_heads < 1 || kv.page_size < 1 || kv.d_k < 1 || kv.d_v < 0 || kv.num_pages < 0) {
    fail(api,
         "the pages must have kv_heads >= 1, page_size >= 1, d_k >= 1, d_v >= 0 and num_pages >= 0; got "
         "kv_heads = " +
             num(kv.kv_heads) + ", page_size = " + num(kv.page_size) + ", d_k = " + num(kv.d_k) +
             ", d_v = " + num(kv.d_v) + ", num_pages = " + num(kv.num_pages));
  }
  const Array k_pages =
      pages_of("K pages", kv.k, bytes, kv, kv.d_k, kv.k_page_stride, kv.k_token_stride, kv.k_head_stride);
  const Array v_pages =
      pages_of("V pages", kv.v, bytes, kv, kv.d_v, kv.v_page_stride, kv.v_token_stride, kv.v_head_stride);
  check_sizes(api, k_pages);
  check_sizes(api, v_pages);
  check_scratch<T>(api, kv.d_k, kv.d_v, 0);
  for (index_t b = 0; b < batch; ++b) {
    const PagedSequence& s = sequences[b];
    const index_t pages = (s.length + kv.page_size - 1) / kv.page_size;
    for (index_t n = 0; n < pages; ++n) {
      if (s.pages[n] < 0 || s.pages[n] >= kv.num_pages) {
        fail(api, "page " + num(n) + " of sequence " + num(b) + " is " + std::to_string(s.pages[n]) +
                      ", outside the pool's " + counted(kv.num_pages, "page"));
      }
    }
  }

  // The queries and their offsets.
  const Array q = {"Q",
                   reinterpret_cast<std::uintptr_t>(a.q.data),
                   static_cast<index_t>(sizeof(T)),
                   {1, 1, a.q.rows, a.q.cols},
                   {0, 0, a.q.row_stride, a.q.col_stride},
                   Print::Matrix};
  check_sizes(api, q);
  if (a.q.cols % kv.d_k != 0 || a.q.cols == 0) {
    fail(api, "Q is " + q.shape() + " but must be T_q x (H d_k) with H >= 1 query heads of d_k = " +
                  num(kv.d_k) + " side by side");
  }
  d.heads = a.q.cols / kv.d_k;
  if (d.heads % kv.kv_heads != 0) {
    fail(api, "query heads (" + num(d.heads) + ", Q is " + q.shape() + ") must be a multiple of KV heads (" +
                  num(kv.kv_heads) + ")");
  }
  d.group = d.heads / kv.kv_heads;
  check_sequence_count(api, batch);
  if (batch > 0 && a.cu_seqlens_q == nullptr) {
    fail(api, batch > 1
                  ? "cu_seqlens_q is null: packed sequences need batch + 1 = " + num(batch + 1) +
                        " offsets (sequence b's queries are rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] "
                        "of Q; null is for one sequence only)"
                  : std::string("cu_seqlens_q is null"));
  }
  if (a.cu_seqlens_q != nullptr) {
    check_offsets(api, "cu_seqlens_q", a.cu_seqlens_q, batch, a.q.rows);
    if (a.cu_seqlens_q[batch] != a.q.rows) {
      fail(api, "cu_seqlens_q[" + num(batch) + "] = " + std::to_string(a.cu_seqlens_q[batch]) +
                    " but Q has " + counted(a.q.rows, "row") + " (every row belongs to a sequence)");
    }
  } else if (a.q.rows != 0) {
    fail(api, "Q has " + counted(a.q.rows, "row") + " but there is no sequence");
  }
  d.q = a.q;
  d.cu_q = a.cu_seqlens_q;
  d.alibi_slopes = a.alibi_slopes;

  // The options.
  Problem<T> options;
  const Array q_head = {"Q", 0, 0, {1, 1, a.q.rows, kv.d_k}, {0, 0, 0, 0}, Print::Matrix};
  check_options(api, opt, options, q_head);
  if (opt.diagonal_offset.has_value()) {
    fail(api,
         "Options::diagonal_offset is not used by decoding (the queries' positions come from the "
         "cache); leave it empty");
  }
  d.scale = options.scale;
  d.softcap = options.softcap;
  d.causal = options.causal;
  d.window_left = options.window_left;
  d.window_right = options.window_right;
  d.kernel = options.kernel;
  d.threads = opt.threads;

  // The outputs' shapes (with inputs_only, of those given: the front door resizes the others
  // after this check), then memory.
  const Array out = {"out",
                     reinterpret_cast<std::uintptr_t>(a.out.data),
                     static_cast<index_t>(sizeof(T)),
                     {1, 1, a.out.rows, a.out.cols},
                     {0, 0, a.out.row_stride, a.out.col_stride},
                     Print::Matrix};
  if (!a.inputs_only || a.out.data != nullptr) {
    check_sizes(api, out);
    if (a.out.rows != a.q.rows || a.out.cols != d.heads * kv.d_v) {
      fail(api, "out is " + out.shape() + " but must be " + num(a.q.rows) + "x" + num(d.heads * kv.d_v) +
                    " (T_q x H d_v)");
    }
  }
  const Array lse = {"lse",
                     reinterpret_cast<std::uintptr_t>(a.lse.data),
                     static_cast<index_t>(sizeof(T)),
                     {1, 1, a.lse.rows, a.lse.cols},
                     {0, 0, a.lse.row_stride, a.lse.col_stride},
                     Print::Matrix};
  if (a.want_lse) {
    check_sizes(api, lse);
    if (a.lse.rows != a.q.rows || a.lse.cols != d.heads) {
      fail(api,
           "lse is " + lse.shape() + " but must be " + num(a.q.rows) + "x" + num(d.heads) + " (T_q x H)");
    }
  }
  if (a.inputs_only) return d;
  ArrayList<2> outputs;
  outputs.push_back(out);
  if (a.want_lse) {
    outputs.push_back(lse);
    d.lse = a.lse;
    d.want_lse = true;
  }
  d.out = a.out;
  ArrayList<6> inputs;
  inputs.push_back(q);
  inputs.push_back(k_pages);
  inputs.push_back(v_pages);
  if (a.alibi_slopes != nullptr) inputs.push_back(vector_of("alibi_slopes", a.alibi_slopes, d.heads));
  if (a.cu_seqlens_q != nullptr) inputs.push_back(vector_of("cu_seqlens_q", a.cu_seqlens_q, batch + 1));
  for (const Array& o : outputs) check_distinct_elements(api, o);
  for (const Array& o : outputs) {
    for (const Array& in : inputs) check_apart(api, o, in);
  }
  if (outputs.size == 2) check_apart(api, outputs.items[0], outputs.items[1]);
  return d;
}

#define EIGEN_ATTENTION_INSTANTIATE(T)                                                                      \
  template Problem<T> make_problem<T>(const Call<T>&, const Options&);                                      \
  template void check_packed_scores<T>(const char*, const T*, std::size_t, std::size_t, const Problem<T>&); \
  template void check_merge<T>(const char*, HeadsView<const T>, HeadsView<const ComputeScalar<T>>,          \
                               HeadsView<const T>, HeadsView<const ComputeScalar<T>>, HeadsView<T>,         \
                               HeadsView<ComputeScalar<T>>);                                                \
  template DecodeProblem<T> make_decode_problem<T>(const char*, const compiled::RawPagedKV&,                \
                                                   const PagedSequence*, index_t,                           \
                                                   const compiled::DecodeArgs<T>&, const Options&);
EIGEN_ATTENTION_INSTANTIATE(float)
EIGEN_ATTENTION_INSTANTIATE(double)
#undef EIGEN_ATTENTION_INSTANTIATE
template Problem<BFloat16Bits> make_problem<BFloat16Bits>(const Call<BFloat16Bits>&, const Options&);
template Problem<HalfBits> make_problem<HalfBits>(const Call<HalfBits>&, const Options&);
template void check_packed_scores<BFloat16Bits>(const char*, const BFloat16Bits*, std::size_t, std::size_t,
                                                const Problem<BFloat16Bits>&);
template void check_packed_scores<HalfBits>(const char*, const HalfBits*, std::size_t, std::size_t,
                                            const Problem<HalfBits>&);
template void check_merge<BFloat16Bits>(const char*, HeadsView<const BFloat16Bits>, HeadsView<const float>,
                                        HeadsView<const BFloat16Bits>, HeadsView<const float>,
                                        HeadsView<BFloat16Bits>, HeadsView<float>);
template void check_merge<HalfBits>(const char*, HeadsView<const HalfBits>, HeadsView<const float>,
                                    HeadsView<const HalfBits>, HeadsView<const float>, HeadsView<HalfBits>,
                                    HeadsView<float>);

}  // namespace internal

namespace compiled {

// Declared in Compiled.hpp: the size check of a by-value result, before the caller allocates it.
void check_result_size(const char* api, const char* name, const char* what, std::ptrdiff_t rows,
                       std::ptrdiff_t cols, std::size_t element_bytes, std::ptrdiff_t max_elements) {
  using internal::fail;
  using internal::num;
  const std::string shown = num(rows) + "x" + num(cols);
  internal::index_t bytes = 0, count = 0;
  if (rows < 0 || cols < 0)
    fail(api, std::string(name) + " (" + what + ") would have a negative size: " + shown);
  if (!internal::mul(rows, cols, count) ||
      !internal::mul(count, static_cast<internal::index_t>(element_bytes), bytes)) {
    fail(api, std::string(name) + " (" + what + ") would be " + shown + " elements of " +
                  std::to_string(element_bytes) + " bytes, more than Eigen::Index can count (" +
                  num(internal::kIndexMax) + " bytes)");
  }
  if (count > max_elements) {
    fail(api, std::string(name) + " (" + what + ") would be " + shown + " elements, more than " +
                  "the caller's Eigen::Index can count (" + num(max_elements) + ")");
  }
}

}  // namespace compiled
}  // namespace EigenAttention
