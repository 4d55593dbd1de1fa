// libFuzzer target: every attention call of EigenAttention on configurations decoded from the
// fuzz input, checked against the documented contract.
//
// What an input decodes into (bytes read front to back; past the end every byte reads 0):
//   [0] scalar type (bit 0: double) and "big" mode (bits 1-3 all set: long sequences that cross
//       the kernels' tiles and may use several threads)
//   [1] the call: attention, attention_into (+lse), attention_decomposed, attention_decomposed_into
//       (+lse), attention_scores, attention_scores_into (+lse, through Compiled.hpp),
//       attention_heads, attention_heads_decomposed, attention_varlen,
//       attention_varlen_decomposed, merge_attention
//   [2..] Options (causal, alignment incl. an invalid value, scale, windows, softcap, threads,
//       kernel incl. invalid values), then the shapes, layouts (row/col-major, padded,
//       reversed, zero strides), masks, bias, key lengths, ALiBi slopes, packed offsets,
//       deliberate faults (wrong shapes, outputs over inputs, claimed sizes far beyond the
//       buffers for sizes that validation must reject), and the element values (a palette of
//       0, +-1, small and large normals, NaN, +-Inf, denormals, +-1e38, +-FLT_MAX; raw bits; or a
//       PRNG seeded from the input).
// make_seeds.py writes the seed corpus in this format. Run an input with EA_FUZZ_VERBOSE=1 set
// to print what it decodes into.
//
// The contract checked:
// - each call either throws std::invalid_argument (std::length_error and std::bad_alloc are
//   tolerated too) or returns; it throws exactly when the configuration breaks a documented
//   rule (the model below mirrors MultiHead.hpp / Attention.hpp / Options.hpp), and then writes
//   nothing;
// - no call writes outside its outputs' elements, nor into any input;
// - a row that sees no key has zero SCORES, zero ATTN and LSE = -inf; hidden keys weigh exactly 0;
//   every weight is in [0, 1] or NaN;
// - a row whose inputs (its Q row, the K/V rows and bias entries of the keys it sees, the scale,
//   the ALiBi slope) are finite with magnitude <= 1e3 has no NaN, weights summing to 1 (1e-3),
//   a finite LSE and an ATTN inside the range of the V rows it sees; when its logits are also
//   small (<= 50) it matches a long-double reference;
// - merge_attention's rows follow its formula; results with several threads are bitwise equal
//   to one thread's.
// A violation prints the decoded configuration and traps. Any other exception escapes (a crash).

#include <EigenAttention/EigenAttention.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "fuzz_common.hpp"

namespace ea = EigenAttention;
using Eigen::Index;
using ea_fuzz::format;
using ea_fuzz::note;
using ea_fuzz::Reader;
using ea_fuzz::Rng;

namespace {

bool g_verbose = false;
std::size_t g_printed = 0;  // how much of the description verbose mode has printed
constexpr Index kIndexMax = std::numeric_limits<Index>::max();
constexpr Index kIndexMin = std::numeric_limits<Index>::min();

template <class T>
const char* type_name() {
  return std::is_same_v<T, float> ? "float" : "double";
}

// ---------------------------------------------------------------------------------------------
// Memory: every tensor lives in a buffer of its own (or, to test overlap checks, inside another
// tensor's), allocated to the exact bytes its elements span so that AddressSanitizer sees any
// access beyond. Gaps and outputs start as 0xff bytes (NaN for float and double).

struct Buffer {
  std::size_t size = 0;
  std::unique_ptr<unsigned char[]> bytes;
  std::vector<unsigned char> before;  // snapshot taken just before the call
  std::vector<char> writable;         // per byte: an element of some output
};

class Arena {
 public:
  int add() {
    need_.push_back(0);
    return static_cast<int>(need_.size()) - 1;
  }
  void require(int id, std::size_t bytes) { need_[id] = std::max(need_[id], bytes); }
  void allocate() {
    for (std::size_t n : need_) {
      auto b = std::make_unique<Buffer>();
      b->size = n;
      b->bytes.reset(new unsigned char[n]);  // new[0] too: a unique pointer no access may use
      std::memset(b->bytes.get(), 0xff, n);
      b->writable.assign(n, 0);
      buffers_.push_back(std::move(b));
    }
  }
  Buffer& operator[](int id) { return *buffers_[id]; }
  void snapshot() {
    for (auto& b : buffers_) b->before.assign(b->bytes.get(), b->bytes.get() + b->size);
  }
  void restore() {
    for (auto& b : buffers_) std::copy(b->before.begin(), b->before.end(), b->bytes.get());
  }
  /// After a call that threw: nothing may have changed.
  void expect_unchanged(const char* call) const {
    for (std::size_t i = 0; i < buffers_.size(); ++i) {
      const Buffer& b = *buffers_[i];
      EA_EXPECT(b.size == 0 || std::memcmp(b.bytes.get(), b.before.data(), b.size) == 0,
                "%s threw, yet buffer %zu (%zu bytes) changed", call, i, b.size);
    }
  }
  /// After a call that returned: only the elements of outputs may have changed.
  void expect_only_outputs_changed(const char* call) const {
    for (std::size_t i = 0; i < buffers_.size(); ++i) {
      const Buffer& b = *buffers_[i];
      for (std::size_t k = 0; k < b.size; ++k) {
        EA_EXPECT(b.writable[k] || b.bytes[k] == b.before[k],
                  "%s wrote byte %zu of buffer %zu, which belongs to no output element (an input, a gap "
                  "between rows, or rows the call must leave alone)",
                  call, k, i);
      }
    }
  }

 private:
  std::vector<std::size_t> need_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

enum class Lay {
  BHTD,        // [batch, heads, tokens, dim], rows contiguous (row-major matrices)
  BTHD,        // [batch, tokens, heads, dim]
  Padded,      // BHTD with gaps after each row, head and batch
  ColMajor,    // each matrix column-major (with a gap after each column when padded)
  Reversed,    // BTHD with the token axis reversed (negative stride)
  DimStride2,  // every other element along dim
  ZeroRow,     // row stride 0: every row is the same memory (inputs only)
  ZeroCol,     // column stride 0 (inputs only)
  ZeroBatch,   // batch stride 0 (inputs only)
  Interleaved  // row stride 1 and column stride 1 (elements share memory)
};
const char* lay_name(Lay l) {
  static const char* names[] = {"BHTD", "BTHD", "padded", "col-major", "reversed-tokens", "dim-stride-2",
                                "zero-row-stride", "zero-col-stride", "zero-batch-stride", "interleaved"};
  return names[int(l)];
}

/// A strided 4-D tensor [batch, heads, tokens (rows), dim (cols)] of E in an Arena buffer.
template <class E>
struct Tensor {
  Index n[4] = {0, 0, 0, 0};
  Index s[4] = {0, 0, 0, 0};
  Index lo = 0, hi = -1;  // element offsets from data() of the first and last element
  Lay lay = Lay::BHTD;
  int buf = -1;
  std::size_t byte_offset = 0;
  Arena* arena = nullptr;

  bool has_elements() const { return n[0] > 0 && n[1] > 0 && n[2] > 0 && n[3] > 0; }
  Index count() const { return n[0] * n[1] * n[2] * n[3]; }
  E* data() const { return reinterpret_cast<E*>((*arena)[buf].bytes.get() + byte_offset); }
  Index offset(Index b, Index h, Index t, Index d) const { return b * s[0] + h * s[1] + t * s[2] + d * s[3]; }
  E& at(Index b, Index h, Index t, Index d) const { return data()[offset(b, h, t, d)]; }
  std::size_t bytes_needed() const {
    return has_elements() ? byte_offset + static_cast<std::size_t>(hi + 1) * sizeof(E) : byte_offset;
  }
  std::string describe() const {
    return format("[%td, %td, %td, %td] %s strides (%td, %td, %td, %td)", n[0], n[1], n[2], n[3], lay_name(lay),
                  s[0], s[1], s[2], s[3]);
  }
};

template <class E>
Tensor<E> make_tensor(Index B, Index H, Index T, Index D, Lay lay, Index pad) {
  Tensor<E> t;
  t.n[0] = B, t.n[1] = H, t.n[2] = T, t.n[3] = D;
  t.lay = lay;
  Index* s = t.s;
  switch (lay) {
    case Lay::BHTD:
      s[3] = 1, s[2] = D, s[1] = T * D, s[0] = H * T * D;
      break;
    case Lay::BTHD:
      s[3] = 1, s[1] = D, s[2] = H * D, s[0] = T * H * D;
      break;
    case Lay::Padded:
      s[3] = 1, s[2] = D + pad, s[1] = T * s[2] + pad, s[0] = H * s[1] + pad;
      break;
    case Lay::ColMajor:
      s[2] = 1, s[3] = T + pad, s[1] = D * s[3], s[0] = H * s[1];
      break;
    case Lay::Reversed:
      s[3] = 1, s[1] = D, s[2] = -(H * D), s[0] = T * H * D;
      break;
    case Lay::DimStride2:
      s[3] = 2, s[2] = 2 * D, s[1] = T * s[2], s[0] = H * s[1];
      break;
    case Lay::ZeroRow:
      s[3] = 1, s[2] = 0, s[1] = D, s[0] = H * D;
      break;
    case Lay::ZeroCol:
      s[3] = 0, s[2] = 1, s[1] = T, s[0] = H * T;
      break;
    case Lay::ZeroBatch:
      s[3] = 1, s[2] = D, s[1] = T * D, s[0] = 0;
      break;
    case Lay::Interleaved:
      s[3] = 1, s[2] = 1, s[1] = T + D, s[0] = H * s[1];
      break;
  }
  t.lo = 0, t.hi = 0;
  for (int a = 0; a < 4; ++a) {
    const Index reach = (t.n[a] - 1) * s[a];
    t.lo += std::min<Index>(reach, 0);
    t.hi += std::max<Index>(reach, 0);
  }
  if (!t.has_elements()) t.lo = 0, t.hi = -1;
  return t;
}

/// Gives t a buffer of its own.
template <class E>
void place(Tensor<E>& t, Arena& arena) {
  t.arena = &arena;
  t.buf = arena.add();
  t.byte_offset = static_cast<std::size_t>(-t.lo) * sizeof(E);
  arena.require(t.buf, t.bytes_needed());
}

/// Places t inside `host`'s buffer, its first element `shift` elements of E past host's first
/// byte (so that the two overlap), growing the buffer as needed.
template <class E, class H>
void place_inside(Tensor<E>& t, const Tensor<H>& host, Arena& arena, Index shift) {
  t.arena = &arena;
  t.buf = host.buf;
  std::size_t start = host.byte_offset + static_cast<std::size_t>(host.lo) * sizeof(H);
  start = (start + alignof(E) - 1) / alignof(E) * alignof(E) + static_cast<std::size_t>(shift) * sizeof(E);
  t.byte_offset = start + static_cast<std::size_t>(-t.lo) * sizeof(E);
  arena.require(t.buf, t.bytes_needed());
}

/// Marks the bytes of t's elements (rows [row_begin, row_end) of each matrix) as output.
template <class E>
void mark_written(const Tensor<E>& t, Index row_begin = 0, Index row_end = -1) {
  if (row_end < 0) row_end = t.n[2];
  Buffer& b = (*t.arena)[t.buf];
  for (Index i = 0; i < t.n[0]; ++i)
    for (Index h = 0; h < t.n[1]; ++h)
      for (Index r = row_begin; r < row_end; ++r)
        for (Index c = 0; c < t.n[3]; ++c) {
          const std::size_t at = t.byte_offset + static_cast<std::size_t>(t.offset(i, h, r, c) * Index(sizeof(E)));
          std::fill(b.writable.begin() + at, b.writable.begin() + at + sizeof(E), 1);
        }
}

/// Claimed sizes: a view handed to the library may say it is larger than its buffer, for a
/// size that validation compares with another one (so the call must throw before reading).
struct Claim {
  int axis = -1;  // -1: none
  Index value = 0;
};

template <class E>
ea::HeadsView<E> heads_view(const Tensor<E>& t, Claim c = {}) {
  Index n[4] = {t.n[0], t.n[1], t.n[2], t.n[3]};
  if (c.axis >= 0) n[c.axis] = c.value;
  return {t.data(), n[0], n[1], n[2], n[3], t.s[0], t.s[1], t.s[2], t.s[3]};
}

/// A read-only view of one matrix (b, h) of a tensor, for the checks.
template <class E>
struct Acc {
  const E* data = nullptr;
  Index rows = 0, cols = 0, rs = 0, cs = 0;
  E operator()(Index i, Index j) const { return data[i * rs + j * cs]; }
  bool present() const { return data != nullptr; }
};

template <class E>
Acc<E> matrix_of(const Tensor<E>& t, Index b, Index h, Index first_row = 0, Index rows = -1) {
  if (rows < 0) rows = t.n[2];
  return {t.data() + t.offset(b, h, first_row, 0), rows, t.n[3], t.s[2], t.s[3]};
}

// ---------------------------------------------------------------------------------------------
// Element values.

template <class T>
T palette(unsigned i) {
  using L = std::numeric_limits<T>;
  const T values[32] = {T(0),       T(-0.0),    T(1),           T(-1),           T(0.5),
                        T(-2),      T(3),       T(-0.25),       T(1e-3),         T(7.5),
                        T(100),     T(-1000),   T(1000),        L::quiet_NaN(),  L::infinity(),
                        -L::infinity(), L::denorm_min(), -L::denorm_min(), L::min() / 2, T(1e38),
                        T(-1e38),   T(3.4028234663852886e38), T(-3.4028234663852886e38), L::max(), T(1e-30),
                        T(3e4),     T(-1e5),    T(0.1),         T(-5),           T(11),
                        T(1e6),     T(-0.5)};
  return values[i % 32];
}

template <class T>
T raw_bits(Reader& r) {
  if constexpr (std::is_same_v<T, float>) {
    const std::uint32_t u = r.u32();
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  } else {
    const std::uint64_t u = r.u64();
    double d;
    std::memcpy(&d, &u, sizeof d);
    return d;
  }
}

/// Where the values of one tensor come from.
template <class T>
class Filler {
 public:
  Filler(Reader& r, bool big) : r_(r), rng_(0) {
    mode_ = r.u8() % 8;
    // Per-element bytes make no sense for long sequences: the input would run dry.
    if (big && (mode_ == 2 || mode_ == 6)) mode_ = 1;
    rng_ = Rng(r.u32());
    const std::uint8_t p = r.u8();
    constant_ = palette<T>(p);
    special_prob_ = (p % 64) / 256.0;
    static const double magnitudes[] = {1e-30, 1e-3, 1, 10, 1e3, 1e6, 1e30, 1e38};
    magnitude_ = magnitudes[r.u8() % 8];
  }
  T next() {
    switch (mode_) {
      case 0:
        return T(rng_.unit() * 4 - 2);
      case 1:
      case 7:
        if (rng_.unit() < special_prob_ * (mode_ == 7 ? 3 : 1)) return palette<T>(unsigned(rng_.next()));
        return T(rng_.unit() * 4 - 2);
      case 2: {
        const std::uint8_t b = r_.u8();
        return b >= 0xf0 ? raw_bits<T>(r_) : palette<T>(b);
      }
      case 3:
        return constant_;
      case 4:
        return T(double(rng_.below(7)) - 3);
      case 5:
        return T((rng_.unit() * 2 - 1) * magnitude_);
      default:  // 6
        return raw_bits<T>(r_);
    }
  }
  std::string describe() const {
    static const char* names[] = {"uniform[-2,2]", "uniform+specials", "palette bytes", "constant",
                                  "integers[-3,3]", "uniform*magnitude", "raw bits", "uniform+many specials"};
    std::string s = names[mode_];
    if (mode_ == 3) s += format(" %g", double(constant_));
    if (mode_ == 5) s += format(" %g", magnitude_);
    return s;
  }

 private:
  Reader& r_;
  Rng rng_;
  int mode_;
  T constant_;
  double special_prob_, magnitude_ = 1;
};

template <class T>
void fill(const Tensor<T>& t, Filler<T>& f) {
  for (Index b = 0; b < t.n[0]; ++b)
    for (Index h = 0; h < t.n[1]; ++h)
      for (Index i = 0; i < t.n[2]; ++i)
        for (Index j = 0; j < t.n[3]; ++j) t.at(b, h, i, j) = f.next();
}

void fill_mask(const Tensor<bool>& t, Reader& r) {
  const int mode = r.u8() % 5;
  Rng rng(r.u32());
  const double density = mode == 4 ? 0.9 : r.u8() / 255.0;
  std::uint8_t bits = 0;
  int left = 0;
  for (Index b = 0; b < t.n[0]; ++b)
    for (Index h = 0; h < t.n[1]; ++h)
      for (Index i = 0; i < t.n[2]; ++i)
        for (Index j = 0; j < t.n[3]; ++j) {
          bool v;
          if (mode == 0) {
            v = true;
          } else if (mode == 1) {
            v = false;
          } else if (mode == 3) {
            if (left == 0) bits = r.u8(), left = 8;
            v = bits & 1;
            bits >>= 1, --left;
          } else {
            v = rng.unit() < density;
          }
          t.at(b, h, i, j) = v;
        }
  note(format("  mask fill mode %d density %.2f", mode, density));
}

// ---------------------------------------------------------------------------------------------
// Options.

ea::Options decode_options(Reader& r) {
  ea::Options o;
  const std::uint8_t flags = r.u8();
  o.causal = flags & 1;
  switch ((flags >> 1) & 3) {
    case 0:
    case 2:
      o.alignment = ea::CausalAlignment::TopLeft;
      break;
    case 1:
      o.alignment = ea::CausalAlignment::BottomRight;
      break;
    default:
      o.alignment = static_cast<ea::CausalAlignment>(2);  // not an enumerator
  }
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  {
    const std::uint8_t b = r.u8() % 24;
    static const double scales[] = {1.0, 0.125, 0.5, 1e3, 0.0, -1.0, nan, inf, -inf, 1e-45, 1e-50, 1e38, 1e300,
                                    3.4028234663852886e38, 1e39, 4.9e-324, 2.0, 1e-3};
    if (b < 5) {
      o.scale.reset();
    } else if (b - 5 < 18) {
      o.scale = scales[b - 5];
    } else {
      const std::uint64_t u = r.u64();
      double d;
      std::memcpy(&d, &u, sizeof d);
      o.scale = d;
    }
  }
  const auto window = [&r]() -> std::ptrdiff_t {
    const std::uint8_t b = r.u8() % 20;
    static const std::ptrdiff_t values[] = {-1, -1, -1, -1, -1, 0, 1, 2, 3, 5, 8, -2, -100,
                                            std::ptrdiff_t(1) << 40, kIndexMax, kIndexMin, kIndexMax - 5, 600};
    if (b < 18) return values[b];
    return static_cast<std::ptrdiff_t>(r.u8());
  };
  o.window_left = window();
  o.window_right = window();
  {
    const std::uint8_t b = r.u8() % 20;
    static const double caps[] = {0, 0, 0, 0, 0, 1, 5, 30, 0.5, nan, -1, inf, -inf, 1e-45, 1e-50, 1e38, 1e300, 50};
    if (b < 18) {
      o.softcap = caps[b];
    } else {
      const std::uint64_t u = r.u64();
      std::memcpy(&o.softcap, &u, sizeof o.softcap);
    }
  }
  {
    static const int threads[] = {1, 1, 1, 1, 2, 3, 0, -1, std::numeric_limits<int>::min(), 64};
    o.threads = threads[r.u8() % 10];
  }
  {
    const std::uint8_t b = r.u8() % 12;
    // Auto most often; 5..7 are not enumerators.
    static const int kernels[] = {0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, -1};
    o.kernel = static_cast<ea::Kernel>(kernels[b]);
  }
  note(format("options: causal=%d alignment=%d scale=%s window=(%td, %td) softcap=%.17g threads=%d kernel=%d",
              int(o.causal), int(o.alignment), o.scale ? format("%.17g", *o.scale).c_str() : "default",
              o.window_left, o.window_right, o.softcap, o.threads, int(o.kernel)));
  return o;
}

template <class T>
bool scale_ok(const ea::Options& o, Index dk) {
  if (o.scale) {
    const double s = *o.scale;
    const T t = static_cast<T>(s);
    return std::isfinite(s) && s > 0 && std::isfinite(t) && t > 0;
  }
  return dk > 0;
}

template <class T>
T resolved_scale(const ea::Options& o, Index dk) {
  return o.scale ? static_cast<T>(*o.scale) : static_cast<T>(1.0 / std::sqrt(static_cast<double>(dk)));
}

template <class T>
bool softcap_ok(const ea::Options& o) {
  const double c = o.softcap;
  const T t = static_cast<T>(c);
  return c >= 0 && std::isfinite(c) && std::isfinite(t) && !(c > 0 && !(t > 0));
}

bool kernel_ok(ea::Kernel k) {
  if (k == ea::Kernel::Auto) return true;
  const auto avail = ea::available_kernels();
  return std::find(avail.begin(), avail.end(), k) != avail.end();
}

/// The rules every call shares (for the scalar type T and d_k as the call sees it).
template <class T>
bool options_ok(const ea::Options& o, Index dk) {
  return scale_ok<T>(o, dk) && o.threads >= 0 && o.window_left >= -1 && o.window_right >= -1 && softcap_ok<T>(o) &&
         kernel_ok(o.kernel);
}

/// What a call's outcome must be.
struct Expect {
  bool invalid = false;    // a documented rule is broken: must throw
  bool uncertain = false;  // only a conservative check could say: either outcome
  std::string why;
  void fail(const std::string& reason) {
    if (!invalid) why = reason;
    invalid = true;
  }
  void check(bool ok, const char* reason) {
    if (!ok) fail(reason);
  }
};

// ---------------------------------------------------------------------------------------------
// The per-row checks, shared by every call: one Case per (sequence, query head).

template <class T>
struct Case {
  std::string name;
  Acc<T> q, k, v;    // v absent when the call takes no V; k.rows = the columns of SCORES
  Index keys = 0;    // keys [0, keys) exist (the key length)
  Index offset = 0;  // causal / window / ALiBi offset
  Acc<bool> mask;
  Acc<T> bias;
  bool alibi = false;
  T slope = 0;
  Acc<T> attn, scores, lse;
};

template <class T>
struct Rules {
  bool causal = false;
  Index wl = -1, wr = -1;
  T scale = 1, softcap = 0;
};

bool key_visible(bool causal, Index wl, Index wr, Index i, Index j, Index offset) {
  using W = __int128;
  const W pos = W(i) + W(offset);
  if (causal && W(j) > pos) return false;
  if (wl >= 0 && W(j) < pos - W(wl)) return false;
  if (wr >= 0 && W(j) > pos + W(wr)) return false;
  return true;
}

template <class T>
bool tame_value(T x, double bound) {
  return std::isfinite(x) && std::fabs(double(x)) <= bound;
}

template <class T>
void check_case(const Case<T>& c, const Rules<T>& rules) {
  constexpr bool is_float = std::is_same_v<T, float>;
  const double ref_rel = is_float ? 1e-3 : 1e-9, ref_abs = is_float ? 1e-6 : 1e-12;
  const Index tk = c.k.rows, dk = c.q.cols;
  // Below the normal range precision is absolute: each rounded product or exp may be off by a
  // denormal step.
  const long double tiny = (tk + 1) * (long double)std::numeric_limits<T>::denorm_min();
  const bool want_v = c.attn.present();
  const Index dv = want_v ? c.v.cols : 0;
  const bool scale_safe = rules.scale <= T(1e3);
  std::vector<char> vis(static_cast<std::size_t>(tk));
  std::vector<long double> logit(static_cast<std::size_t>(tk));
  for (Index i = 0; i < c.q.rows; ++i) {
    Index nvis = 0;
    bool safe = scale_safe && (!c.alibi || tame_value(c.slope, 1e3));
    for (Index d = 0; d < dk; ++d) safe = safe && tame_value(c.q(i, d), 1e3);
    bool tame = safe;
    long double max_logit = -INFINITY;
    for (Index j = 0; j < tk; ++j) {
      const bool v = j < c.keys && key_visible(rules.causal, rules.wl, rules.wr, i, j, c.offset) &&
                     (!c.mask.present() || c.mask(i, j));
      vis[j] = v;
      if (!v) continue;
      ++nvis;
      for (Index d = 0; d < dk; ++d) safe = safe && tame_value(c.k(j, d), 1e3);
      for (Index d = 0; d < dv; ++d) safe = safe && tame_value(c.v(j, d), 1e3);
      if (c.bias.present()) safe = safe && tame_value(c.bias(i, j), 1e3);
      if (!safe) {
        tame = false;
        continue;
      }
      // The reference logit, in long double.
      long double dot = 0, mag = 0;
      for (Index d = 0; d < dk; ++d) {
        dot += (long double)c.q(i, d) * c.k(j, d);
        mag += std::fabs((long double)c.q(i, d) * c.k(j, d));
      }
      long double l = (long double)rules.scale * dot;
      tame = tame && (long double)rules.scale * mag <= 50;
      if (rules.softcap > 0) l = (long double)rules.softcap * std::tanh(l / (long double)rules.softcap);
      if (c.alibi) {
        const long double dist = std::fabs((long double)(i + c.offset - j));
        tame = tame && std::fabs((long double)c.slope) * dist <= 50;
        l -= (long double)c.slope * dist;
      }
      if (c.bias.present()) {
        tame = tame && std::fabs((long double)c.bias(i, j)) <= 50;
        l += c.bias(i, j);
      }
      logit[j] = l;
      max_logit = std::max(max_logit, l);
    }
    long double ref_sum = 0;
    if (tame && nvis > 0) {
      for (Index j = 0; j < tk; ++j)
        if (vis[j]) ref_sum += std::exp(logit[j] - max_logit);
    }
    const auto ref_weight = [&](Index j) { return std::exp(logit[j] - max_logit) / ref_sum; };
    const std::string where = format("%s row %td (%td visible keys, safe=%d, tame=%d)", c.name.c_str(), i, nvis,
                                     int(safe), int(tame));

    if (c.scores.present()) {
      long double sum = 0;
      for (Index j = 0; j < tk; ++j) {
        const T s = c.scores(i, j);
        if (!vis[j]) {
          EA_EXPECT(s == 0, "%s: SCORES(%td, %td) = %.9g for a hidden key (must be exactly 0)", where.c_str(), i, j,
                    double(s));
          continue;
        }
        EA_EXPECT(std::isnan(s) || (s >= 0 && s <= 1), "%s: SCORES(%td, %td) = %.9g outside [0, 1]", where.c_str(), i,
                  j, double(s));
        EA_EXPECT(!safe || !std::isnan(s), "%s: SCORES(%td, %td) is NaN though every input it depends on is finite",
                  where.c_str(), i, j);
        sum += s;
        if (tame) {
          const long double ref = ref_weight(j);
          EA_EXPECT(std::fabs(s - ref) <= ref_rel * ref + ref_abs + tiny, "%s: SCORES(%td, %td) = %.9g, reference %.9Lg",
                    where.c_str(), i, j, double(s), ref);
        }
      }
      if (safe && nvis > 0) {
        EA_EXPECT(std::fabs(sum - 1) <= 1e-3, "%s: SCORES row sums to %.9Lg", where.c_str(), sum);
      }
    }
    if (c.attn.present()) {
      for (Index d = 0; d < dv; ++d) {
        const T a = c.attn(i, d);
        if (nvis == 0) {
          EA_EXPECT(a == 0, "%s: ATTN(%td, %td) = %.9g for a row that sees no key (must be 0)", where.c_str(), i, d,
                    double(a));
          continue;
        }
        if (!safe) continue;
        long double vmax = 0, ref = 0, ref_mag = 0, via_scores = 0, via_mag = 0;
        for (Index j = 0; j < tk; ++j) {
          if (!vis[j]) continue;
          vmax = std::max<long double>(vmax, std::fabs((long double)c.v(j, d)));
          if (tame) {
            ref += ref_weight(j) * c.v(j, d);
            ref_mag += ref_weight(j) * std::fabs((long double)c.v(j, d));
          }
          if (c.scores.present()) {
            via_scores += (long double)c.scores(i, j) * c.v(j, d);
            via_mag += std::fabs((long double)c.scores(i, j) * c.v(j, d));
          }
        }
        EA_EXPECT(std::isfinite(a), "%s: ATTN(%td, %td) = %.9g is not finite though its inputs are", where.c_str(), i,
                  d, double(a));
        EA_EXPECT(std::fabs((long double)a) <= vmax * (1 + 1e-3L) + tiny,
                  "%s: |ATTN(%td, %td)| = %.9g exceeds the largest visible |V| %.9Lg", where.c_str(), i, d, double(a),
                  vmax);
        if (tame) {
          EA_EXPECT(std::fabs(a - ref) <= ref_rel * ref_mag + ref_abs * vmax + tiny,
                    "%s: ATTN(%td, %td) = %.9g, reference %.9Lg", where.c_str(), i, d, double(a), ref);
        }
        if (c.scores.present()) {
          EA_EXPECT(std::fabs(a - via_scores) <= 1e-3L * via_mag + 1e-6L * vmax + tiny,
                    "%s: ATTN(%td, %td) = %.9g but SCORES * V gives %.9Lg", where.c_str(), i, d, double(a), via_scores);
        }
      }
    }
    if (c.lse.present()) {
      const T l = c.lse(i, 0);
      if (nvis == 0) {
        EA_EXPECT(l == -std::numeric_limits<T>::infinity(), "%s: LSE(%td) = %.9g for a row that sees no key (must be -inf)",
                  where.c_str(), i, double(l));
      } else if (safe) {
        EA_EXPECT(std::isfinite(l), "%s: LSE(%td) = %.9g is not finite though its inputs are", where.c_str(), i,
                  double(l));
        if (tame) {
          const long double ref = max_logit + std::log(ref_sum);
          EA_EXPECT(std::fabs(l - ref) <= ref_rel * (1 + std::fabs(ref)), "%s: LSE(%td) = %.9g, reference %.9Lg",
                    where.c_str(), i, double(l), ref);
        }
      }
    }
  }
}

/// Calls `invoke` and sorts the outcome: true when it returned. Only the documented exception
/// types are caught; anything else escapes and is a crash.
template <class F>
bool outcome(const char* call, const Expect& e, F&& invoke) {
  // A crash inside the call prints nothing of ours: show the configuration first.
  if (g_verbose) {
    std::fprintf(stderr, "%s", ea_fuzz::description().c_str() + g_printed);
    g_printed = ea_fuzz::description().size();
  }
  std::string what;
  try {
    invoke();
    if (g_verbose) note(format("result: %s returned", call));
    EA_EXPECT(e.uncertain || !e.invalid, "%s returned, but it must throw: %s", call, e.why.c_str());
    return true;
  } catch (const std::invalid_argument& ex) {
    what = std::string("std::invalid_argument: ") + ex.what();
  } catch (const std::length_error& ex) {
    what = std::string("std::length_error: ") + ex.what();
  } catch (const std::bad_alloc& ex) {
    what = std::string("std::bad_alloc: ") + ex.what();
  }
  if (g_verbose) note(format("result: %s threw %s", call, what.c_str()));
  EA_EXPECT(e.uncertain || e.invalid, "%s threw on a valid configuration: %s", call, what.c_str());
  return false;
}

/// Do two element sets (offsets in bytes from a common origin) share a byte?
bool elements_intersect(std::vector<std::pair<std::intptr_t, std::intptr_t>> a,
                        std::vector<std::pair<std::intptr_t, std::intptr_t>> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i].second <= b[j].first) {
      ++i;
    } else if (b[j].second <= a[i].first) {
      ++j;
    } else {
      return true;
    }
  }
  return false;
}

template <class E>
std::vector<std::pair<std::intptr_t, std::intptr_t>> byte_ranges(const Tensor<E>& t) {
  std::vector<std::pair<std::intptr_t, std::intptr_t>> out;
  for (Index b = 0; b < t.n[0]; ++b)
    for (Index h = 0; h < t.n[1]; ++h)
      for (Index i = 0; i < t.n[2]; ++i)
        for (Index j = 0; j < t.n[3]; ++j) {
          const auto p = reinterpret_cast<std::intptr_t>(&t.at(b, h, i, j));
          out.emplace_back(p, p + std::intptr_t(sizeof(E)));
        }
  return out;
}

/// Do two distinct elements of t share memory?
template <class E>
bool self_overlaps(const Tensor<E>& t) {
  auto r = byte_ranges(t);
  std::sort(r.begin(), r.end());
  for (std::size_t i = 1; i < r.size(); ++i)
    if (r[i].first < r[i - 1].second) return true;
  return false;
}

/// The byte range [lo, hi] of a view as MultiHead.hpp's overlap check sees it; false when empty.
template <class E>
bool view_extent(const ea::HeadsView<E>& v, std::uintptr_t& lo, std::uintptr_t& hi) {
  if (v.data == nullptr || v.batch == 0 || v.heads == 0 || v.tokens == 0 || v.dim == 0) return false;
  const Index size = static_cast<Index>(sizeof(*v.data));
  Index low = 0, high = 0;
  const Index n[4] = {v.batch, v.heads, v.tokens, v.dim}, s[4] = {v.batch_stride, v.head_stride, v.token_stride,
                                                                  v.dim_stride};
  for (int a = 0; a < 4; ++a) {
    const Index reach = (n[a] - 1) * s[a] * size;
    low += std::min<Index>(reach, 0);
    high += std::max<Index>(reach, 0);
  }
  lo = reinterpret_cast<std::uintptr_t>(v.data) + low;
  hi = reinterpret_cast<std::uintptr_t>(v.data) + high + size - 1;
  return true;
}

template <class A, class B>
bool views_apart(const ea::HeadsView<A>& a, const ea::HeadsView<B>& b) {
  std::uintptr_t alo, ahi, blo, bhi;
  if (!view_extent(a, alo, ahi) || !view_extent(b, blo, bhi)) return true;
  return !(alo <= bhi && blo <= ahi);
}

/// Bitwise copies of results, to compare a run with several threads against one thread.
struct Digest {
  std::vector<unsigned char> bytes;
  template <class E>
  void add(const Acc<E>& a) {
    for (Index i = 0; i < a.rows; ++i)
      for (Index j = 0; j < a.cols; ++j) {
        const E x = a(i, j);
        const auto* p = reinterpret_cast<const unsigned char*>(&x);
        bytes.insert(bytes.end(), p, p + sizeof(E));
      }
  }
};

const Index kHuge[] = {Index(1) << 40, Index(1) << 62, kIndexMax, -1, kIndexMin, Index(1) << 31};

// ---------------------------------------------------------------------------------------------
// Single head: attention, attention_into, attention_decomposed(_into), attention_scores(_into).

enum class Call {
  Attention,
  AttentionInto,
  AttentionIntoLse,
  Decomposed,
  DecomposedInto,
  DecomposedIntoLse,
  Scores,
  ScoresInto,
  ScoresIntoLse,
  Heads,
  HeadsDecomposed,
  Varlen,
  VarlenDecomposed,
  Merge,
  kCount
};
const char* call_name(Call c) {
  static const char* names[] = {"attention",
                                "attention_into",
                                "attention_into(+lse)",
                                "attention_decomposed",
                                "attention_decomposed_into",
                                "attention_decomposed_into(+lse)",
                                "attention_scores",
                                "attention_scores_into",
                                "compiled::attention_scores_into(+lse)",
                                "attention_heads",
                                "attention_heads_decomposed",
                                "attention_varlen",
                                "attention_varlen_decomposed",
                                "merge_attention"};
  return names[int(c)];
}

/// An input as the front doors see it: a strided Map (kind 0), a column-major Eigen::Matrix
/// copy (kind 1), or an expression without direct access (kind 2, evaluated by the library).
template <class T, int Kind>
struct In {
  ea::ConstStridedMap<T> m;
  In(const Tensor<T>& t, Claim c)
      : m(t.data(), c.axis == 2 ? c.value : t.n[2], c.axis == 3 ? c.value : t.n[3],
          Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(t.s[2], t.s[3])) {}
  const ea::ConstStridedMap<T>& get() const { return m; }
};
template <class T>
struct In<T, 1> {
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> m;
  In(const Tensor<T>& t, Claim)
      : m(ea::ConstStridedMap<T>(t.data(), t.n[2], t.n[3], Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(t.s[2], t.s[3]))) {}
  const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>& get() const { return m; }
};
template <class T>
struct In<T, 2> {
  ea::ConstStridedMap<T> m;
  In(const Tensor<T>& t, Claim)
      : m(t.data(), t.n[2], t.n[3], Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(t.s[2], t.s[3])) {}
  auto get() const { return m * T(1); }
};

/// An output: a strided Map over an Arena tensor (kind 0), or a resizable row-major (1) or
/// column-major (2) Eigen matrix.
template <class T, int Kind>
struct Out {
  ea::StridedMap<T> m;
  Out(const Tensor<T>& t, Claim c, Index, Index)
      : m(t.data(), c.axis == 2 ? c.value : t.n[2], c.axis == 3 ? c.value : t.n[3],
          Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(t.s[2], t.s[3])) {}
};
template <class T>
struct Out<T, 1> {
  ea::RowMatrix<T> m;
  Out(const Tensor<T>&, Claim, Index r0, Index c0) : m(r0, c0) { m.setConstant(T(-7)); }
};
template <class T>
struct Out<T, 2> {
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> m;
  Out(const Tensor<T>&, Claim, Index r0, Index c0) : m(r0, c0) { m.setConstant(T(-7)); }
};

template <class M>
Acc<typename M::Scalar> acc_of(const M& m) {
  return {m.data(), m.rows(), m.cols(), m.rowStride(), m.colStride()};
}

struct SingleSpec {
  Index tq = 0, tk = 0, dk = 0, dv = 0;
  Index kcols = 0, vrows = 0;  // K's columns and V's rows (faults make them differ)
  int share = 0;               // 1: K is Q; 2: V is K; 3: both
  int in_kind = 0, out_kind = 0;
  Lay lay[3] = {};             // Q, K, V
  Lay out_lay[3] = {};         // the outputs, in call order
  bool out_wrong[3] = {};      // output shape off by one row or column
  Index out_pad[3] = {};
  Index r0[3] = {}, c0[3] = {};  // initial sizes of resizable outputs
  int claim_target = -1;       // 0 Q.cols, 1 V.rows, 2 out0.rows, 3 out0.cols, 4 out1.cols, 5 out2.rows
  Index claim_value = 0;
  int alias_out = -1;          // which output lies over another tensor
  int alias_host = 0;          // 0 Q, 1 K, 2 V, 3 the previous output
  Index alias_shift = 0;
};

Lay input_lay(std::uint8_t b) {
  static const Lay lays[] = {Lay::BHTD, Lay::BHTD, Lay::ColMajor, Lay::Padded, Lay::ColMajor,
                             Lay::ZeroRow, Lay::ZeroCol, Lay::Interleaved};
  return lays[b % 8];
}

template <class T, int IK, int OK>
void run_single(Call call, const ea::Options& opt, SingleSpec& sp, Reader& r, bool big) {
  // The LSE form of attention_scores_into exists in Compiled.hpp only, which takes Maps.
  if (call == Call::ScoresIntoLse && !(IK == 0 && OK == 0)) call = Call::ScoresInto;
  Arena arena;
  const bool with_v = call != Call::Scores && call != Call::ScoresInto && call != Call::ScoresIntoLse;
  int outputs = 0;
  const char* out_names[3] = {"", "", ""};
  switch (call) {
    case Call::AttentionInto: outputs = 1, out_names[0] = "out"; break;
    case Call::AttentionIntoLse: outputs = 2, out_names[0] = "out", out_names[1] = "lse"; break;
    case Call::DecomposedInto: outputs = 2, out_names[0] = "scores", out_names[1] = "attn"; break;
    case Call::DecomposedIntoLse:
      outputs = 3, out_names[0] = "scores", out_names[1] = "attn", out_names[2] = "lse";
      break;
    case Call::ScoresInto: outputs = 1, out_names[0] = "scores"; break;
    case Call::ScoresIntoLse: outputs = 2, out_names[0] = "scores", out_names[1] = "lse"; break;
    default: break;
  }
  // The right shape of each output.
  Index want_r[3] = {sp.tq, sp.tq, sp.tq}, want_c[3] = {0, 0, 0};
  for (int o = 0; o < outputs; ++o) {
    const std::string n = out_names[o];
    want_c[o] = n == "lse" ? 1 : n == "scores" ? sp.tk : sp.dv;
  }

  // Inputs.
  Tensor<T> q = make_tensor<T>(1, 1, sp.tq, sp.dk, sp.lay[0], 1);
  Tensor<T> k = make_tensor<T>(1, 1, sp.tk, sp.kcols, sp.lay[1], 2);
  Tensor<T> v = make_tensor<T>(1, 1, sp.vrows, sp.dv, sp.lay[2], 1);
  Tensor<T> outs[3];
  for (int o = 0; o < outputs; ++o) {
    outs[o] = make_tensor<T>(1, 1, want_r[o] + (sp.out_wrong[o] && o % 2 == 0), want_c[o] + (sp.out_wrong[o] && o % 2),
                             sp.out_lay[o], sp.out_pad[o]);
  }
  place(q, arena);
  if (sp.share & 1) {
    k = q;
  } else {
    place(k, arena);
  }
  if (sp.share & 2) {
    v = k;
  } else {
    place(v, arena);
  }
  const Tensor<T>* hosts[3] = {&q, &k, &v};
  for (int o = 0; o < outputs; ++o) {
    if (o == sp.alias_out && OK == 0) {
      const Tensor<T>& host = sp.alias_host == 3 && o > 0 ? outs[o - 1] : *hosts[sp.alias_host % 3];
      place_inside(outs[o], host, arena, sp.alias_shift);
    } else {
      place(outs[o], arena);
    }
  }
  arena.allocate();
  {
    Filler<T> fq(r, big);
    fill(q, fq);
    note("  Q " + q.describe() + " values " + fq.describe());
    if (!(sp.share & 1)) {
      Filler<T> fk(r, big);
      fill(k, fk);
      note("  K " + k.describe() + " values " + fk.describe());
    } else {
      note("  K is Q");
    }
    if (!(sp.share & 2)) {
      Filler<T> fv(r, big);
      fill(v, fv);
      note("  V " + v.describe() + " values " + fv.describe());
    } else {
      note("  V is K");
    }
  }
  for (int o = 0; o < outputs; ++o) {
    if (OK == 0) {
      note(format("  output %s %s%s", out_names[o], outs[o].describe().c_str(),
                  o == sp.alias_out ? format(" placed over %s + %td elements", sp.alias_host == 3 ? "the previous output"
                                                                                   : sp.alias_host % 3 == 0 ? "Q"
                                                                                   : sp.alias_host % 3 == 1 ? "K"
                                                                                                            : "V",
                                             sp.alias_shift)
                                          .c_str()
                                    : ""));
    } else {
      note(format("  output %s: resizable %s matrix, initially %tdx%td", out_names[o], OK == 1 ? "row-major" : "col-major",
                  sp.r0[o], sp.c0[o]));
    }
  }

  // What must happen.
  Expect e;
  const Index q_cols = sp.claim_target == 0 ? sp.claim_value : sp.dk;
  const Index v_rows = sp.claim_target == 1 ? sp.claim_value : sp.vrows;
  e.check(options_ok<T>(opt, q_cols), "an option is invalid");
  e.check(q_cols == sp.kcols, "d_k differs between Q and K");
  if (with_v) e.check(v_rows == sp.tk, "T_k differs between K and V");
  Claim out_claim[3];
  if (sp.claim_target >= 2) {
    const int o = sp.claim_target == 2 || sp.claim_target == 3 ? 0 : sp.claim_target == 4 ? 1 : 2;
    if (o < outputs && OK == 0) out_claim[o] = {sp.claim_target == 2 || sp.claim_target == 5 ? 2 : 3, sp.claim_value};
  }
  if (OK == 0) {
    for (int o = 0; o < outputs; ++o) {
      const Index rows = out_claim[o].axis == 2 ? out_claim[o].value : outs[o].n[2];
      const Index cols = out_claim[o].axis == 3 ? out_claim[o].value : outs[o].n[3];
      e.check(rows == want_r[o] && cols == want_c[o], "an output has the wrong shape");
      if (rows == want_r[o] && cols == want_c[o]) e.check(!self_overlaps(outs[o]), "an output's elements share memory");
    }
    if (sp.alias_out >= 0 && sp.alias_out < outputs) {
      const Tensor<T>& o = outs[sp.alias_out];
      const Tensor<T>& host = sp.alias_host == 3 && sp.alias_out > 0 ? outs[sp.alias_out - 1] : *hosts[sp.alias_host % 3];
      const bool host_is_input = !(sp.alias_host == 3 && sp.alias_out > 0);
      const bool host_used = !host_is_input || sp.alias_host % 3 != 2 || with_v;
      if (host_used && elements_intersect(byte_ranges(o), byte_ranges(host))) {
        e.fail("an output overlaps another input or output");
      } else if (host_used) {
        e.uncertain = true;  // the overlap check is conservative (byte ranges)
      }
    }
  }
  note(format("expect: %s%s", e.invalid ? ("throw: " + e.why).c_str() : "success",
              e.uncertain ? " (or either, the check being conservative)" : ""));

  In<T, IK> qi(q, sp.claim_target == 0 ? Claim{3, sp.claim_value} : Claim{});
  In<T, IK> ki(k, Claim{});
  In<T, IK> vi(v, sp.claim_target == 1 ? Claim{2, sp.claim_value} : Claim{});
  std::optional<Out<T, OK>> o0, o1, o2;
  if (outputs > 0) o0.emplace(outs[0], out_claim[0], sp.r0[0], sp.c0[0]);
  if (outputs > 1) o1.emplace(outs[1], out_claim[1], sp.r0[1], sp.c0[1]);
  if (outputs > 2) o2.emplace(outs[2], out_claim[2], sp.r0[2], sp.c0[2]);
  ea::RowMatrix<T> ret_attn, ret_scores;
  ea::Vector<T> ret_lse;
  const auto invoke = [&](const ea::Options& o) {
    const auto& Q = qi.get();
    const auto& K = ki.get();
    const auto& V = vi.get();
    switch (call) {
      case Call::Attention: ret_attn = ea::attention(Q, K, V, o); break;
      case Call::AttentionInto: ea::attention_into(Q, K, V, o0->m, o); break;
      case Call::AttentionIntoLse: ea::attention_into(Q, K, V, o0->m, o1->m, o); break;
      case Call::Decomposed: {
        auto res = ea::attention_decomposed(Q, K, V, o);
        ret_scores = std::move(res.scores), ret_attn = std::move(res.attn), ret_lse = std::move(res.lse);
        break;
      }
      case Call::DecomposedInto: ea::attention_decomposed_into(Q, K, V, o0->m, o1->m, o); break;
      case Call::DecomposedIntoLse: ea::attention_decomposed_into(Q, K, V, o0->m, o1->m, o2->m, o); break;
      case Call::Scores: ret_scores = ea::attention_scores(Q, K, o); break;
      case Call::ScoresInto: ea::attention_scores_into(Q, K, o0->m, o); break;
      case Call::ScoresIntoLse:
        if constexpr (IK == 0 && OK == 0) {
          ea::compiled::attention_scores_into<T>(Q, K, o0->m, &o1->m, o);
        } else {
          ea::attention_scores_into(Q, K, o0->m, o);  // the front door takes no LSE
        }
        break;
      default: break;
    }
  };
  arena.snapshot();
  const bool returned = outcome(call_name(call), e, [&] { invoke(opt); });
  if (!returned) {
    if (OK == 0) arena.expect_unchanged(call_name(call));
    return;
  }
  if (sp.claim_target >= 0) return;  // accepted a claimed size (e.g. V's rows where no V is read)

  // The results.
  Case<T> c;
  c.name = call_name(call);
  c.q = matrix_of(q, 0, 0);
  c.k = matrix_of(k, 0, 0);
  if (with_v) c.v = matrix_of(v, 0, 0);
  c.keys = sp.tk;
  c.offset = opt.alignment == ea::CausalAlignment::BottomRight ? sp.tk - sp.tq : 0;
  const auto result = [&](int o) -> Acc<T> {
    Acc<T> a;
    if (OK == 0) {
      a = matrix_of(outs[o], 0, 0);
    } else {
      const auto& m = o == 0 ? o0->m : o == 1 ? o1->m : o2->m;
      a = {m.data(), m.rows(), m.cols(), m.rowStride(), m.colStride()};
    }
    EA_EXPECT(a.rows == want_r[o] && a.cols == want_c[o], "%s: output %s is %tdx%td, not %tdx%td", call_name(call),
              out_names[o], a.rows, a.cols, want_r[o], want_c[o]);
    return a;
  };
  for (int o = 0; o < outputs; ++o) {
    const std::string n = out_names[o];
    if (n == "lse" && call == Call::ScoresIntoLse && !(IK == 0 && OK == 0)) continue;
    Acc<T> a = result(o);
    if (OK == 0) mark_written(outs[o]);
    (n == "lse" ? c.lse : n == "scores" ? c.scores : c.attn) = a;
  }
  const auto returned_acc = [&](const auto& m, Index rows, Index cols, const char* what) {
    EA_EXPECT(m.rows() == rows && m.cols() == cols, "%s returned %s of %tdx%td, not %tdx%td", call_name(call), what,
              Index(m.rows()), Index(m.cols()), rows, cols);
    return Acc<T>{m.data(), Index(m.rows()), Index(m.cols()), Index(m.rowStride()), Index(m.colStride())};
  };
  if (call == Call::Attention || call == Call::Decomposed) c.attn = returned_acc(ret_attn, sp.tq, sp.dv, "ATTN");
  if (call == Call::Decomposed || call == Call::Scores) c.scores = returned_acc(ret_scores, sp.tq, sp.tk, "SCORES");
  if (call == Call::Decomposed) c.lse = returned_acc(ret_lse, sp.tq, 1, "LSE");
  if (OK == 0) arena.expect_only_outputs_changed(call_name(call));

  Rules<T> rules;
  rules.causal = opt.causal;
  rules.wl = opt.window_left, rules.wr = opt.window_right;
  rules.scale = resolved_scale<T>(opt, sp.dk);
  rules.softcap = static_cast<T>(opt.softcap);
  check_case(c, rules);

  // Several threads must give the bits of one.
  if (big && opt.threads != 1) {
    Digest first;
    for (const Acc<T>* a : {&c.attn, &c.scores, &c.lse})
      if (a->present()) first.add(*a);
    if (OK == 0) arena.restore();
    ea::Options one = opt;
    one.threads = 1;
    invoke(one);
    Digest again;
    // Returned matrices may have moved: take them anew.
    if (call == Call::Attention || call == Call::Decomposed) c.attn = acc_of(ret_attn);
    if (call == Call::Decomposed || call == Call::Scores) c.scores = acc_of(ret_scores);
    if (call == Call::Decomposed) c.lse = {ret_lse.data(), ret_lse.rows(), 1, 1, 1};
    for (int o = 0; o < outputs && OK != 0; ++o) {
      const std::string n = out_names[o];
      if (n == "lse" && call == Call::ScoresIntoLse) continue;
      (n == "lse" ? c.lse : n == "scores" ? c.scores : c.attn) = result(o);
    }
    for (const Acc<T>* a : {&c.attn, &c.scores, &c.lse})
      if (a->present()) again.add(*a);
    EA_EXPECT(first.bytes == again.bytes, "%s: threads = %d and threads = 1 give different bits", call_name(call),
              opt.threads);
  }
}

template <class T>
void single(Call call, const ea::Options& opt, Reader& r, bool big) {
  SingleSpec sp;
  if (big) {
    sp.tq = r.u16() % 300, sp.tk = r.u16() % 1100, sp.dk = 1 + r.u8() % 4, sp.dv = r.u8() % 5;
  } else {
    sp.tq = r.u8() % 13, sp.tk = r.u8() % 13, sp.dk = r.u8() % 13, sp.dv = r.u8() % 13;
  }
  sp.share = r.u8() % 8;
  if (sp.share > 3) sp.share = 0;
  if (sp.share & 1) sp.tk = sp.tq;
  if (sp.share & 2) sp.dv = sp.dk;
  sp.kcols = sp.dk, sp.vrows = sp.tk;
  const std::uint8_t fault = r.u8() % 16;
  if (fault == 12 && !(sp.share & 1)) sp.kcols = sp.dk + 1;
  if (fault == 13 && !(sp.share & 2)) sp.vrows = sp.tk + 1;
  if (fault == 14 && !(sp.share & 2) && sp.tk > 0) sp.vrows = sp.tk - 1;
  static const int kinds[] = {0, 0, 0, 1, 2};
  sp.in_kind = kinds[r.u8() % 5];
  sp.out_kind = kinds[r.u8() % 5] % 3;
  for (Lay& l : sp.lay) l = input_lay(r.u8());
  for (int o = 0; o < 3; ++o) {
    const std::uint8_t b = r.u8();
    static const Lay lays[] = {Lay::BHTD, Lay::BHTD, Lay::ColMajor, Lay::Padded, Lay::ColMajor, Lay::ZeroRow,
                               Lay::ZeroCol, Lay::Interleaved};
    sp.out_lay[o] = lays[b % 8];
    sp.out_wrong[o] = (b >> 3) % 8 == 7;
    sp.out_pad[o] = (b >> 6) % 3;
    sp.r0[o] = (b >> 3) % 2 ? sp.tq : (b >> 4) % 4;
    sp.c0[o] = (b >> 5) % 4;
  }
  {
    const std::uint8_t b = r.u8();
    if (b % 8 == 7 && sp.in_kind == 0 && sp.share == 0) {
      sp.claim_target = (b >> 3) % 6;
      const Index values[] = {Index(1) << 40, Index(1) << 31, (Index(1) << 32) + 1, 13};
      sp.claim_value = values[(b >> 6) % 4];
      if (sp.claim_value == 13) sp.claim_value += sp.tq + sp.tk + sp.dk + sp.dv;
      if (sp.claim_target >= 2 && sp.out_kind != 0) sp.claim_target = -1;
    }
  }
  {
    const std::uint8_t b = r.u8();
    if (b % 8 == 7 && sp.in_kind == 0 && sp.out_kind == 0 && !big) {
      sp.alias_out = (b >> 3) % 3;
      sp.alias_host = (b >> 5) % 4;
      sp.alias_shift = r.u8() % 8;
    }
  }
  note(format("single head: %s<%s> T_q=%td T_k=%td d_k=%td d_v=%td (K cols %td, V rows %td) share=%d input kind %d "
              "output kind %d claim %d=%td",
              call_name(call), type_name<T>(), sp.tq, sp.tk, sp.dk, sp.dv, sp.kcols, sp.vrows, sp.share, sp.in_kind,
              sp.out_kind, sp.claim_target, sp.claim_value));
  const int variant = sp.in_kind * 3 + sp.out_kind;
  switch (variant) {
    case 0: run_single<T, 0, 0>(call, opt, sp, r, big); break;
    case 1: run_single<T, 0, 1>(call, opt, sp, r, big); break;
    case 2: run_single<T, 0, 2>(call, opt, sp, r, big); break;
    case 3: run_single<T, 1, 0>(call, opt, sp, r, big); break;
    case 4: run_single<T, 1, 1>(call, opt, sp, r, big); break;
    case 5: run_single<T, 1, 2>(call, opt, sp, r, big); break;
    case 6: run_single<T, 2, 0>(call, opt, sp, r, big); break;
    case 7: run_single<T, 2, 1>(call, opt, sp, r, big); break;
    default: run_single<T, 2, 2>(call, opt, sp, r, big); break;
  }
}

// ---------------------------------------------------------------------------------------------
// Multi-head: attention_heads, attention_heads_decomposed, attention_varlen(_decomposed).

Lay heads_input_lay(std::uint8_t b) {
  static const Lay lays[] = {Lay::BHTD, Lay::BTHD, Lay::BHTD, Lay::BTHD, Lay::Padded, Lay::ColMajor,
                             Lay::Reversed, Lay::DimStride2, Lay::ZeroBatch, Lay::ZeroRow};
  return lays[b % 10];
}
Lay heads_output_lay(std::uint8_t b) {
  static const Lay lays[] = {Lay::BHTD, Lay::BTHD, Lay::BHTD, Lay::Padded, Lay::ColMajor, Lay::Reversed,
                             Lay::DimStride2};
  return lays[b % 7];
}

/// Which tensor a fault or an overlap concerns.
enum Slot { kQ, kK, kV, kOut, kLse, kScores, kAverage, kMask, kBias, kSlots };
const char* slot_name(int s) {
  static const char* names[] = {"Q", "K", "V", "out", "lse", "scores", "average_scores", "mask", "bias"};
  return names[s];
}

template <class T>
void heads(Call call, const ea::Options& opt, Reader& r, bool big) {
  const bool varlen = call == Call::Varlen || call == Call::VarlenDecomposed;
  const bool decomposed = call == Call::HeadsDecomposed;
  Index B, Hkv, group, tq, tk, dk, dv;
  if (big) {
    B = 1 + r.u8() % 2, Hkv = 1, group = 1 + r.u8() % 2, tq = r.u16() % 260, tk = r.u16() % 1100;
    dk = 1 + r.u8() % 4, dv = r.u8() % 5;
  } else {
    B = r.u8() % 4, Hkv = r.u8() % 4, group = 1 + r.u8() % 3, tq = r.u8() % 13, tk = r.u8() % 13;
    dk = r.u8() % 13, dv = r.u8() % 13;
  }
  Index H = Hkv * group;
  // Packed sequences (varlen): their lengths, then the offsets.
  Index S = 0;
  std::vector<std::int64_t> cu_q(1, 0), cu_k(1, 0);
  Index seq_claim = 0;
  if (varlen) {
    S = r.u8() % 5;
    for (Index s = 0; s < S; ++s) {
      const Index lq = big ? r.u8() % 140 : r.u8() % 7, lk = big ? r.u16() % 600 : r.u8() % 7;
      cu_q.push_back(cu_q.back() + lq);
      cu_k.push_back(cu_k.back() + lk);
    }
    B = 1;
    tq = cu_q.back() + r.u8() % 3;  // packed rows after the last sequence belong to none
    tk = cu_k.back() + r.u8() % 3;
    const std::uint8_t f = r.u8() % 24;
    if (f == 16) cu_q[0] = 1;
    if (f == 17 && S >= 1) std::swap(cu_q[0], cu_q[S]);
    if (f == 18) cu_q[S] = tq + 1;
    if (f == 19) cu_k[0] = -1;
    if (f == 20 && S >= 2) std::swap(cu_k[1], cu_k[2]);
    if (f == 21) cu_k[S] = tk + 1;
    if (f == 22) seq_claim = -1;
    if (f == 23) B = 2;  // a packed batch must have batch 1
  }
  // Real shape faults (the buffers follow them) and claimed sizes (they do not).
  Index n[kSlots][4];
  const auto set = [&](int s, Index b, Index h, Index t, Index d) {
    n[s][0] = b, n[s][1] = h, n[s][2] = t, n[s][3] = d;
  };
  set(kQ, B, H, tq, dk);
  set(kK, B, Hkv, tk, dk);
  set(kV, B, Hkv, tk, dv);
  set(kOut, B, H, tq, dv);
  set(kLse, B, H, tq, 1);
  set(kScores, B, H, tq, tk);
  set(kAverage, B, 1, tq, tk);
  // The presence of the optional pieces.
  const std::uint8_t pres = r.u8();
  const bool has_lse = pres & 1;
  const bool has_out = !decomposed || (pres & 2);
  const bool has_scores = decomposed && (pres & 0x1c) != 0x1c;
  const bool has_average = decomposed && (pres & 0x20);
  const std::uint8_t mpres = r.u8();
  const bool has_mask = !varlen ? (mpres & 3) == 1 : (mpres & 0x3f) == 0x3f;
  const bool has_bias = !varlen ? ((mpres >> 2) & 3) == 1 : false;
  const bool has_lengths = !varlen ? ((mpres >> 4) & 3) == 1 : false;
  const bool has_alibi = (mpres >> 6) == 1;
  Index mb = (r.u8() & 1) ? B : 1, mh = (r.u8() & 1) ? H : 1;
  Index bb = (r.u8() & 1) ? B : 1, bh = (r.u8() & 1) ? H : 1;
  set(kMask, mb, mh, tq, tk);
  set(kBias, bb, bh, tq, tk);
  {
    const std::uint8_t f = r.u8();
    if (f % 4 == 3) {
      const int slot = (f >> 2) % kSlots;
      const int axis = (f >> 6) % 4;
      n[slot][axis] += 1;
      note(format("fault: %s size %d is %td", slot_name(slot), axis, n[slot][axis]));
    }
    if (r.u8() % 8 == 7) {
      H = Hkv * group + 1;  // not a multiple of the key/value heads
      for (int s : {kQ, kOut, kLse, kScores}) n[s][1] = H;
      note(format("fault: H = %td with %td key/value heads", H, Hkv));
    }
  }
  Claim claim;
  int claim_slot = -1;
  {
    const std::uint8_t b = r.u8();
    if (b % 8 == 7) {
      claim_slot = (b >> 3) % kSlots;
      claim.axis = (b >> 6) % 4;
      claim.value = kHuge[r.u8() % 6];
      // Only where validation compares the size with another one.
      const bool present = claim_slot <= kV || (claim_slot == kOut && has_out) || (claim_slot == kLse && has_lse) ||
                           (claim_slot == kScores && has_scores) || (claim_slot == kAverage && has_average) ||
                           (claim_slot == kMask && has_mask) || (claim_slot == kBias && has_bias);
      const bool v_dim_unchecked = claim_slot == kV && claim.axis == 3 && !has_out && has_scores;
      if (!present || v_dim_unchecked) {
        claim_slot = -1, claim.axis = -1;
      }
    }
  }
  // Layouts and overlap.
  Lay lays[kSlots];
  Index pads[kSlots];
  for (int s = 0; s < kSlots; ++s) {
    const std::uint8_t b = r.u8();
    lays[s] = s <= kV ? heads_input_lay(b) : s >= kMask ? (b % 3 == 2 ? Lay::ColMajor : b % 3 == 1 ? Lay::Padded : Lay::BHTD)
                                                        : heads_output_lay(b);
    pads[s] = 1 + (b >> 4) % 3;
  }
  int alias_out = -1, alias_host = 0;
  Index alias_shift = 0;
  {
    const std::uint8_t b = r.u8();
    if (b % 8 == 7 && !big) {
      static const int outs[] = {kOut, kLse, kScores, kAverage};
      alias_out = outs[(b >> 3) % 4];
      alias_host = (b >> 5) % 7;  // Q K V out lse scores / mask bias via 6
      alias_shift = r.u8() % 6;
    }
  }

  Arena arena;
  Tensor<T> t[kSlots - 2];
  Tensor<bool> mask;
  for (int s = 0; s < kMask; ++s) t[s] = make_tensor<T>(n[s][0], n[s][1], n[s][2], n[s][3], lays[s], pads[s]);
  Tensor<T> bias = make_tensor<T>(n[kBias][0], n[kBias][1], n[kBias][2], n[kBias][3], lays[kBias], pads[kBias]);
  mask = make_tensor<bool>(n[kMask][0], n[kMask][1], n[kMask][2], n[kMask][3], lays[kMask], pads[kMask]);
  const bool present[kSlots] = {true,        true,       true,     has_out, has_lse,
                                has_scores,  has_average, has_mask, has_bias};
  for (int s = 0; s <= kV; ++s) place(t[s], arena);
  place(mask, arena);
  place(bias, arena);
  Tensor<std::int64_t> lengths = make_tensor<std::int64_t>(1, 1, 1, B, Lay::BHTD, 0);
  Tensor<T> slopes = make_tensor<T>(1, 1, 1, H, Lay::BHTD, 0);
  Tensor<std::int64_t> cuq = make_tensor<std::int64_t>(1, 1, 1, Index(cu_q.size()), Lay::BHTD, 0);
  Tensor<std::int64_t> cuk = make_tensor<std::int64_t>(1, 1, 1, Index(cu_k.size()), Lay::BHTD, 0);
  place(lengths, arena);
  place(slopes, arena);
  place(cuq, arena);
  place(cuk, arena);
  // varlen_decomposed: the packed weights.
  Index packed_size = 0;
  Tensor<T> packed;
  std::size_t packed_claim = 0;
  if (call == Call::VarlenDecomposed) {
    for (Index s = 0; s < S; ++s) {
      const Index lq = std::max<Index>(cu_q[s + 1] - cu_q[s], 0), lk = std::max<Index>(cu_k[s + 1] - cu_k[s], 0);
      packed_size += H * lq * lk;
    }
    const std::uint8_t b = r.u8() % 16;
    packed_claim = static_cast<std::size_t>(packed_size) + (b == 15 ? 1 : 0) - (b == 14 && packed_size > 0 ? 1 : 0);
    packed = make_tensor<T>(1, 1, 1, Index(packed_claim), Lay::BHTD, 0);
  }
  Tensor<T>* hosts_t[] = {&t[kQ], &t[kK], &t[kV], &t[kOut], &t[kLse], &t[kScores]};
  for (int s = kOut; s <= kAverage; ++s) {
    if (!present[s]) continue;
    if (s == alias_out && alias_host < 6 && (alias_host <= kV || (alias_host < s && present[alias_host]))) {
      place_inside(t[s], *hosts_t[alias_host], arena, alias_shift);
      note(format("  %s placed over %s + %td elements", slot_name(s), slot_name(alias_host), alias_shift));
    } else if (s == alias_out && alias_host == 6) {
      if (has_bias) {
        place_inside(t[s], bias, arena, alias_shift);
        note(format("  %s placed over bias + %td elements", slot_name(s), alias_shift));
      } else {
        if (varlen) {
          place_inside(t[s], cuq, arena, alias_shift);
        } else {
          place_inside(t[s], slopes, arena, alias_shift);
        }
        note(format("  %s placed over %s + %td elements", slot_name(s), varlen ? "cu_seqlens_q" : "alibi_slopes",
                    alias_shift));
      }
    } else {
      place(t[s], arena);
    }
  }
  if (call == Call::VarlenDecomposed) {
    const std::uint8_t b = r.u8();
    if (b % 8 == 7 && !big) {
      const int which = (b >> 3) % 4;
      if (which == 0) place_inside(packed, cuk, arena, 0);
      if (which == 1) place_inside(packed, slopes, arena, 0);
      if (which == 2) place_inside(packed, t[kOut], arena, (b >> 5) % 4);
      if (which == 3) place_inside(packed, t[kQ], arena, (b >> 5) % 4);
      note(format("  packed scores placed over %s", which == 0 ? "cu_seqlens_k" : which == 1 ? "alibi_slopes"
                                                   : which == 2 ? "out" : "Q"));
    } else {
      place(packed, arena);
    }
  }
  arena.allocate();

  // Values.
  for (int s = 0; s <= kV; ++s) {
    Filler<T> f(r, big);
    fill(t[s], f);
    note(format("  %s %s values %s", slot_name(s), t[s].describe().c_str(), f.describe().c_str()));
  }
  for (int s = kOut; s <= kAverage; ++s)
    if (present[s]) note(format("  %s %s", slot_name(s), t[s].describe().c_str()));
  if (has_mask) {
    note("  mask " + mask.describe());
    fill_mask(mask, r);
  }
  if (has_bias) {
    Filler<T> f(r, big);
    fill(bias, f);
    note("  bias " + bias.describe() + " values " + f.describe());
  }
  if (has_lengths) {
    std::string s = "  key_lengths:";
    for (Index b = 0; b < B; ++b) {
      const std::uint8_t x = r.u8() % 16;
      std::int64_t len;
      if (x < 10) {
        len = static_cast<std::int64_t>(r.u8() % (tk + 1));
      } else {
        const std::int64_t special[] = {tk, 0, -1, tk + 1, INT64_MAX, INT64_MIN};
        len = special[x - 10];
      }
      lengths.at(0, 0, 0, b) = len;
      s += format(" %lld", (long long)len);
    }
    note(s);
  }
  if (has_alibi) {
    Filler<T> f(r, big);
    fill(slopes, f);
    std::string s = "  alibi slopes (" + f.describe() + "):";
    for (Index h = 0; h < H; ++h) s += format(" %g", double(slopes.at(0, 0, 0, h)));
    note(s);
  }
  for (std::size_t i = 0; i < cu_q.size(); ++i) cuq.at(0, 0, 0, Index(i)) = cu_q[i];
  for (std::size_t i = 0; i < cu_k.size(); ++i) cuk.at(0, 0, 0, Index(i)) = cu_k[i];
  if (varlen) {
    std::string s = format("  %td sequences%s: cu_seqlens_q", S, seq_claim < 0 ? " (passed as -1)" : "");
    for (auto x : cu_q) s += format(" %lld", (long long)x);
    s += "; cu_seqlens_k";
    for (auto x : cu_k) s += format(" %lld", (long long)x);
    if (call == Call::VarlenDecomposed) s += format("; scores %zu elements (need %td)", packed_claim, packed_size);
    note(s);
  }
  if (claim_slot >= 0)
    note(format("claim: %s size %d = %td (its buffer holds %td)", slot_name(claim_slot), claim.axis, claim.value,
                n[claim_slot][claim.axis]));

  // The views handed to the library.
  const auto in_view = [&](int s) -> ea::HeadsView<const T> {
    return heads_view<T>(t[s], claim_slot == s ? claim : Claim{});
  };
  const auto out_view = [&](int s) -> ea::HeadsView<T> {
    if (!present[s]) return {};
    return heads_view<T>(t[s], claim_slot == s ? claim : Claim{});
  };
  const auto broadcast = [&](const auto& tensor, int s) {
    using E = std::remove_reference_t<decltype(*tensor.data())>;
    ea::BroadcastView<E> v;
    if (!present[s]) return v;
    const auto hv = heads_view<E>(tensor, claim_slot == s ? claim : Claim{});
    v.data = hv.data;
    v.batch = hv.batch, v.heads = hv.heads, v.rows = hv.tokens, v.cols = hv.dim;
    v.batch_stride = hv.batch_stride, v.head_stride = hv.head_stride;
    v.row_stride = hv.token_stride, v.col_stride = hv.dim_stride;
    return v;
  };
  const auto Qv = in_view(kQ), Kv = in_view(kK), Vv = in_view(kV);
  const auto Ov = out_view(kOut), Lv = out_view(kLse), Sv = out_view(kScores), Av = out_view(kAverage);
  ea::Masks<T> masks;
  masks.mask = broadcast(mask, kMask);
  masks.bias = broadcast(bias, kBias);
  masks.key_lengths = has_lengths ? lengths.data() : nullptr;
  masks.alibi_slopes = has_alibi ? slopes.data() : nullptr;
  const Index sequences = seq_claim < 0 ? seq_claim : S;

  // What must happen (MultiHead.hpp's rules).
  Expect e;
  {
    const auto dims = [](const auto& v) { return std::array<Index, 4>{v.batch, v.heads, v.tokens, v.dim}; };
    const auto nonneg = [&](const auto& v) {
      for (Index x : dims(v))
        if (x < 0) return false;
      return true;
    };
    const auto shape_is = [&](const auto& v, Index b, Index h, Index tt, Index d) {
      return nonneg(v) && dims(v) == std::array<Index, 4>{b, h, tt, d};
    };
    if (call == Call::VarlenDecomposed) {
      e.check(sequences >= 0, "negative number of sequences");
      e.check(Qv.heads >= 0, "negative heads");
      if (sequences >= 0) {
        e.check(cu_q[0] == 0 && cu_k[0] == 0, "cu_seqlens must start at 0");
        for (Index s = 0; s < S; ++s)
          e.check(cu_q[s + 1] >= cu_q[s] && cu_k[s + 1] >= cu_k[s], "cu_seqlens decrease");
      }
    }
    e.check(nonneg(Qv) && nonneg(Kv) && nonneg(Vv), "a negative size");
    e.check(Kv.batch == Qv.batch && Vv.batch == Qv.batch, "batch sizes differ");
    e.check(Kv.heads == Vv.heads, "K and V head counts differ");
    e.check(Kv.heads == 0 ? Qv.heads == 0 : (Kv.heads > 0 && Qv.heads % Kv.heads == 0),
            "H is not a multiple of H_kv");
    e.check(Kv.tokens == Vv.tokens, "T_k differs between K and V");
    e.check(Qv.dim == Kv.dim, "d_k differs between Q and K");
    e.check(options_ok<T>(opt, Qv.dim), "an option is invalid");
    if (!Ov.empty() || Sv.empty()) e.check(shape_is(Ov, Qv.batch, Qv.heads, Qv.tokens, Vv.dim), "out has the wrong shape");
    if (!Lv.empty()) e.check(shape_is(Lv, Qv.batch, Qv.heads, Qv.tokens, 1), "lse has the wrong shape");
    if (!Sv.empty()) e.check(shape_is(Sv, Qv.batch, Qv.heads, Qv.tokens, Kv.tokens), "scores has the wrong shape");
    if (!Av.empty()) e.check(shape_is(Av, Qv.batch, 1, Qv.tokens, Kv.tokens), "average_scores has the wrong shape");
    const Index Bseq = varlen ? sequences : Qv.batch;
    if (varlen) {
      e.check(sequences >= 0, "negative number of sequences");
      e.check(Qv.batch == 1, "a packed batch has batch 1");
      e.check(!has_mask && !has_bias && !has_lengths, "varlen takes no mask, bias or key_lengths");
      if (sequences >= 0) {
        e.check(cu_q[0] == 0 && cu_k[0] == 0, "cu_seqlens must start at 0");
        for (Index s = 0; s < S; ++s)
          e.check(cu_q[s + 1] >= cu_q[s] && cu_k[s + 1] >= cu_k[s], "cu_seqlens decrease");
        e.check(cu_q[S] <= Qv.tokens && cu_k[S] <= Kv.tokens, "cu_seqlens exceed the packed tokens");
      }
    } else {
      const auto bc_ok = [&](const auto& m) {
        return m.empty() || ((m.batch == 1 || m.batch == Bseq) && (m.heads == 1 || m.heads == Qv.heads) &&
                             m.rows == Qv.tokens && m.cols == Kv.tokens);
      };
      e.check(bc_ok(masks.mask), "the mask does not broadcast");
      e.check(bc_ok(masks.bias), "the bias does not broadcast");
      if (has_lengths && !e.invalid) {
        for (Index b = 0; b < Bseq; ++b) {
          const auto len = lengths.at(0, 0, 0, b);
          e.check(len >= 0 && len <= Kv.tokens, "a key length is outside [0, T_k]");
        }
      }
    }
    if (!e.invalid) {
      const ea::HeadsView<const T> outs[] = {Ov, Lv, Sv, Av};
      const auto as_heads = [](const auto& m) {
        using E = std::remove_const_t<std::remove_pointer_t<decltype(m.data)>>;
        return ea::HeadsView<const E>{m.data, m.batch, m.heads, m.rows, m.cols,
                                      m.batch_stride, m.head_stride, m.row_stride, m.col_stride};
      };
      const auto vec = [](const auto* p, Index count) {
        using E = std::remove_const_t<std::remove_pointer_t<decltype(p)>>;
        return ea::HeadsView<const E>{p, 1, 1, 1, count, 0, 0, 0, 1};
      };
      for (const auto& o : outs) {
        e.check(views_apart(o, Qv) && views_apart(o, Kv) && views_apart(o, Vv), "an output overlaps Q, K or V");
        if (has_mask) e.check(views_apart(o, as_heads(masks.mask)), "an output overlaps the mask");
        if (has_bias) e.check(views_apart(o, as_heads(masks.bias)), "an output overlaps the bias");
        if (has_alibi) e.check(views_apart(o, vec(masks.alibi_slopes, Qv.heads)), "an output overlaps the slopes");
        if (has_lengths) e.check(views_apart(o, vec(masks.key_lengths, Bseq)), "an output overlaps key_lengths");
        if (varlen) {
          e.check(views_apart(o, vec(cuq.data(), Bseq + 1)) && views_apart(o, vec(cuk.data(), Bseq + 1)),
                  "an output overlaps cu_seqlens");
        }
      }
      // Outputs must not overlap each other: MultiHead.hpp says so of every pair.
      for (int a = 0; a < 4; ++a)
        for (int b = a + 1; b < 4; ++b) e.check(views_apart(outs[a], outs[b]), "two outputs overlap");
    }
    if (call == Call::VarlenDecomposed && !e.invalid) {
      e.check(packed_claim == static_cast<std::size_t>(packed_size), "packed scores of the wrong size");
      const ea::HeadsView<const T> pv{packed.data(), 1, 1, 1, Index(packed_claim), 0, 0, 0, 1};
      e.check(views_apart(pv, Qv) && views_apart(pv, Kv) && views_apart(pv, Vv) && views_apart(pv, Ov) &&
                  views_apart(pv, Lv),
              "packed scores overlap an input or output");
      const auto vec = [](const auto* p, Index count) {
        using E = std::remove_const_t<std::remove_pointer_t<decltype(p)>>;
        return ea::HeadsView<const E>{p, 1, 1, 1, count, 0, 0, 0, 1};
      };
      e.check(views_apart(pv, vec(cuq.data(), S + 1)) && views_apart(pv, vec(cuk.data(), S + 1)),
              "packed scores overlap cu_seqlens");
      if (has_alibi) e.check(views_apart(pv, vec(slopes.data(), H)), "packed scores overlap the ALiBi slopes");
    }
    if (claim_slot >= 0) e.fail("a claimed size exceeds its buffer and must be rejected");
    // Weights wanted with no SCORES view: MultiHead.hpp neither allows nor forbids it.
    if (decomposed && !has_scores && !e.invalid) e.uncertain = true;
  }
  note(format("expect: %s%s", e.invalid ? ("throw: " + e.why).c_str() : "success", e.uncertain ? " (or a throw)" : ""));

  const auto invoke = [&](const ea::Options& o) {
    switch (call) {
      case Call::Heads: ea::attention_heads(Qv, Kv, Vv, Ov, o, masks, Lv); break;
      case Call::HeadsDecomposed: ea::attention_heads_decomposed(Qv, Kv, Vv, Sv, Ov, o, masks, Lv, Av); break;
      case Call::Varlen: ea::attention_varlen(Qv, Kv, Vv, Ov, cuq.data(), cuk.data(), sequences, o, masks, Lv); break;
      default:
        ea::attention_varlen_decomposed(Qv, Kv, Vv, packed.data(), packed_claim, Ov, cuq.data(), cuk.data(),
                                        sequences, o, masks, Lv);
    }
  };
  arena.snapshot();
  if (!outcome(call_name(call), e, [&] { invoke(opt); })) {
    arena.expect_unchanged(call_name(call));
    return;
  }

  // The results, one Case per (sequence, query head).
  Rules<T> rules;
  rules.causal = opt.causal;
  rules.wl = opt.window_left, rules.wr = opt.window_right;
  rules.scale = resolved_scale<T>(opt, dk);
  rules.softcap = static_cast<T>(opt.softcap);
  const bool bottom_right = opt.alignment == ea::CausalAlignment::BottomRight;
  const Index group_size = Hkv > 0 ? H / Hkv : 1;
  for (Index b = 0; b < (varlen ? S : B); ++b) {
    const Index q0 = varlen ? cu_q[b] : 0, lq = varlen ? cu_q[b + 1] - cu_q[b] : tq;
    const Index k0 = varlen ? cu_k[b] : 0, lk = varlen ? cu_k[b + 1] - cu_k[b] : tk;
    const Index bi = varlen ? 0 : b;
    const Index keys = has_lengths ? Index(lengths.at(0, 0, 0, b)) : lk;
    for (Index h = 0; h < H; ++h) {
      Case<T> c;
      c.name = format("%s b=%td h=%td", call_name(call), b, h);
      c.q = matrix_of(t[kQ], bi, h, q0, lq);
      c.k = matrix_of(t[kK], bi, h / group_size, k0, lk);
      c.v = matrix_of(t[kV], bi, h / group_size, k0, lk);
      c.keys = keys;
      c.offset = bottom_right ? keys - lq : 0;
      if (has_mask) c.mask = matrix_of(mask, mask.n[0] == 1 ? 0 : b, mask.n[1] == 1 ? 0 : h);
      if (has_bias) c.bias = matrix_of(bias, bias.n[0] == 1 ? 0 : b, bias.n[1] == 1 ? 0 : h);
      c.alibi = has_alibi;
      if (has_alibi) c.slope = slopes.at(0, 0, 0, h);
      if (has_out) c.attn = matrix_of(t[kOut], bi, h, q0, lq);
      if (has_lse) c.lse = matrix_of(t[kLse], bi, h, q0, lq);
      if (has_scores) c.scores = matrix_of(t[kScores], bi, h);
      if (call == Call::VarlenDecomposed) {
        Index off = 0;
        for (Index s = 0; s < b; ++s) off += H * (cu_q[s + 1] - cu_q[s]) * (cu_k[s + 1] - cu_k[s]);
        c.scores = {packed.data() + off + h * lq * lk, lq, lk, lk, 1};
      }
      check_case(c, rules);
    }
  }
  // The mean over heads, summed in head order.
  if (has_average && has_scores) {
    for (Index b = 0; b < B; ++b)
      for (Index i = 0; i < tq; ++i)
        for (Index j = 0; j < tk; ++j) {
          T sum = 0;
          for (Index h = 0; h < H; ++h) sum += t[kScores].at(b, h, i, j);
          const T mean = H > 0 ? sum / static_cast<T>(H) : T(0);
          const T got = t[kAverage].at(b, 0, i, j);
          EA_EXPECT((std::isnan(mean) && std::isnan(got)) || got == mean,
                    "average_scores(%td, %td, %td) = %.9g, the mean over heads is %.9g", b, i, j, double(got),
                    double(mean));
        }
  }
  // Nothing else was written: rows of no sequence are untouched.
  for (int s = kOut; s <= kAverage; ++s) {
    if (!present[s]) continue;
    if (varlen) {
      mark_written(t[s], 0, cu_q[S]);
    } else {
      mark_written(t[s]);
    }
  }
  if (call == Call::VarlenDecomposed) mark_written(packed);
  arena.expect_only_outputs_changed(call_name(call));

  if (big && opt.threads != 1) {
    Digest first;
    for (int s = kOut; s <= kAverage; ++s)
      if (present[s]) first.bytes.insert(first.bytes.end(), (*t[s].arena)[t[s].buf].bytes.get(),
                                         (*t[s].arena)[t[s].buf].bytes.get() + (*t[s].arena)[t[s].buf].size);
    if (call == Call::VarlenDecomposed) first.add(Acc<T>{packed.data(), 1, packed.n[3], 0, 1});
    arena.restore();
    ea::Options one = opt;
    one.threads = 1;
    invoke(one);
    Digest again;
    for (int s = kOut; s <= kAverage; ++s)
      if (present[s]) again.bytes.insert(again.bytes.end(), (*t[s].arena)[t[s].buf].bytes.get(),
                                         (*t[s].arena)[t[s].buf].bytes.get() + (*t[s].arena)[t[s].buf].size);
    if (call == Call::VarlenDecomposed) again.add(Acc<T>{packed.data(), 1, packed.n[3], 0, 1});
    EA_EXPECT(first.bytes == again.bytes, "%s: threads = %d and threads = 1 give different bits", call_name(call),
              opt.threads);
  }
}

// ---------------------------------------------------------------------------------------------
// merge_attention.

template <class T>
void merge(Reader& r) {
  const Index B = r.u8() % 4, H = r.u8() % 4, Tn = r.u8() % 13, D = r.u8() % 13;
  enum { kOa, kLa, kOb, kLb, kO, kL, kN };
  static const char* names[] = {"out_a", "lse_a", "out_b", "lse_b", "out", "lse"};
  Index n[kN][4];
  for (int s = 0; s < kN; ++s) {
    n[s][0] = B, n[s][1] = H, n[s][2] = Tn, n[s][3] = s % 2 ? 1 : D;
  }
  {
    const std::uint8_t f = r.u8();
    if (f % 4 == 3) {
      const int slot = (f >> 2) % kN, axis = (f >> 5) % 4;
      n[slot][axis] += 1;
      note(format("fault: %s size %d is %td", names[slot], axis, n[slot][axis]));
    }
  }
  Claim claim;
  int claim_slot = -1;
  {
    const std::uint8_t b = r.u8();
    if (b % 8 == 7) {
      claim_slot = (b >> 3) % kN;
      claim.axis = (b >> 6) % 4;
      claim.value = kHuge[r.u8() % 6];
    }
  }
  Arena arena;
  Tensor<T> t[kN];
  for (int s = 0; s < kN; ++s) t[s] = make_tensor<T>(n[s][0], n[s][1], n[s][2], n[s][3], heads_output_lay(r.u8()), 1);
  for (int s = 0; s < kO; ++s) place(t[s], arena);
  // Where the outputs go: apart, in place over an input, or partly over one.
  const std::uint8_t where_out = r.u8() % 8, where_lse = r.u8() % 8;
  const Index shift = r.u8() % 4;
  bool out_same = false, lse_same = false;
  if (where_out == 1 || where_out == 2) {
    t[kO] = t[where_out == 1 ? kOa : kOb];
    out_same = true;
  } else if (where_out == 3) {
    place_inside(t[kO], t[kOa], arena, shift);
  } else if (where_out == 4) {
    place_inside(t[kO], t[kLb], arena, shift);
  } else {
    place(t[kO], arena);
  }
  if (where_lse == 1 || where_lse == 2) {
    t[kL] = t[where_lse == 1 ? kLa : kLb];
    lse_same = true;
  } else if (where_lse == 3) {
    place_inside(t[kL], t[kLa], arena, shift);
  } else if (where_lse == 4 && !out_same) {
    place_inside(t[kL], t[kO], arena, shift);
  } else {
    place(t[kL], arena);
  }
  arena.allocate();
  for (int s = 0; s < kO; ++s) {
    if (s % 2 == 0) {
      Filler<T> f(r, false);
      fill(t[s], f);
      note(format("  %s %s values %s", names[s], t[s].describe().c_str(), f.describe().c_str()));
    } else {
      // Log-sum-exps: -inf (a side that saw no key) often.
      Rng rng(r.u32());
      const int mode = r.u8() % 4;
      for (Index b = 0; b < t[s].n[0]; ++b)
        for (Index h = 0; h < t[s].n[1]; ++h)
          for (Index i = 0; i < t[s].n[2]; ++i)
            for (Index d = 0; d < t[s].n[3]; ++d) {
              T x;
              const double u = rng.unit();
              if (mode == 3) {
                x = palette<T>(unsigned(rng.next()));
              } else if (u < 0.3) {
                x = -std::numeric_limits<T>::infinity();
              } else {
                x = T((rng.unit() * 2 - 1) * (mode == 0 ? 5 : mode == 1 ? 1e3 : 1e30));
              }
              t[s].at(b, h, i, d) = x;
            }
      note(format("  %s %s values mode %d", names[s], t[s].describe().c_str(), mode));
    }
  }
  note(format("  out %s%s; lse %s%s", t[kO].describe().c_str(),
              out_same ? " (in place)" : where_out == 3 ? " (over out_a)" : where_out == 4 ? " (over lse_b)" : "",
              t[kL].describe().c_str(), lse_same ? " (in place)" : where_lse == 3 ? " (over lse_a)" : where_lse == 4 && !out_same ? " (over out)" : ""));
  if (claim_slot >= 0)
    note(format("claim: %s size %d = %td (its buffer holds %td)", names[claim_slot], claim.axis, claim.value,
                n[claim_slot][claim.axis]));

  ea::HeadsView<T> v[kN];
  for (int s = 0; s < kN; ++s) v[s] = heads_view<T>(t[s], claim_slot == s ? claim : Claim{});
  // The values before the call (it may merge in place).
  std::vector<T> before[kO];
  for (int s = 0; s < kO; ++s) {
    for (Index b = 0; b < t[s].n[0]; ++b)
      for (Index h = 0; h < t[s].n[1]; ++h)
        for (Index i = 0; i < t[s].n[2]; ++i)
          for (Index d = 0; d < t[s].n[3]; ++d) before[s].push_back(t[s].at(b, h, i, d));
  }

  Expect e;
  {
    const auto dims = [](const auto& x) { return std::array<Index, 4>{x.batch, x.heads, x.tokens, x.dim}; };
    const auto nonneg = [&](const auto& x) {
      for (Index y : dims(x))
        if (y < 0) return false;
      return true;
    };
    e.check(nonneg(v[kOa]), "a negative size");
    e.check(nonneg(v[kOb]) && dims(v[kOb]) == dims(v[kOa]), "out_b differs from out_a");
    e.check(nonneg(v[kO]) && dims(v[kO]) == dims(v[kOa]), "out differs from out_a");
    e.check(nonneg(v[kLa]) && dims(v[kLa]) == (std::array<Index, 4>{v[kOa].batch, v[kOa].heads, v[kOa].tokens, 1}),
            "lse_a is not [B, H, T, 1]");
    e.check(nonneg(v[kLb]) && dims(v[kLb]) == dims(v[kLa]), "lse_b differs from lse_a");
    e.check(nonneg(v[kL]) && dims(v[kL]) == dims(v[kLa]), "lse differs from lse_a");
    if (!e.invalid) {
      const auto same = [](const ea::HeadsView<T>& o, const ea::HeadsView<T>& in) {
        return o.data == in.data && o.batch_stride == in.batch_stride && o.head_stride == in.head_stride &&
               o.token_stride == in.token_stride && o.dim_stride == in.dim_stride && o.dim == in.dim;
      };
      for (int in = 0; in < kO; ++in) {
        for (int o : {kO, kL}) {
          if (!same(v[o], v[in])) {
            e.check(views_apart(ea::HeadsView<const T>(v[o]), ea::HeadsView<const T>(v[in])),
                    "an output partly overlaps an input");
          }
        }
      }
      e.check(views_apart(ea::HeadsView<const T>(v[kO]), ea::HeadsView<const T>(v[kL])), "out overlaps lse");
    }
    if (claim_slot >= 0) e.fail("a claimed size exceeds its buffer and must be rejected");
  }
  note(format("expect: %s", e.invalid ? ("throw: " + e.why).c_str() : "success"));
  arena.snapshot();
  if (!outcome("merge_attention", e, [&] {
        ea::merge_attention(ea::HeadsView<const T>(v[kOa]), ea::HeadsView<const T>(v[kLa]),
                            ea::HeadsView<const T>(v[kOb]), ea::HeadsView<const T>(v[kLb]), v[kO], v[kL]);
      })) {
    arena.expect_unchanged("merge_attention");
    return;
  }
  mark_written(t[kO]);
  mark_written(t[kL]);
  arena.expect_only_outputs_changed("merge_attention");
  constexpr bool is_float = std::is_same_v<T, float>;
  const long double rel = is_float ? 1e-5 : 1e-13;
  const T minus_inf = -std::numeric_limits<T>::infinity();
  Index row = 0;
  for (Index b = 0; b < B; ++b)
    for (Index h = 0; h < H; ++h)
      for (Index i = 0; i < Tn; ++i, ++row) {
        const T la = before[kLa][row], lb = before[kLb][row];
        const T lse = t[kL].at(b, h, i, 0);
        const std::string where = format("merge row (%td, %td, %td), lse_a %.9g lse_b %.9g", b, h, i, double(la),
                                         double(lb));
        if (la == minus_inf && lb == minus_inf) {
          EA_EXPECT(lse == minus_inf, "%s: merged lse %.9g (must be -inf)", where.c_str(), double(lse));
          for (Index d = 0; d < D; ++d)
            EA_EXPECT(t[kO].at(b, h, i, d) == 0, "%s: out(%td) = %.9g (must be 0)", where.c_str(), d,
                      double(t[kO].at(b, h, i, d)));
          continue;
        }
        // A side is usable when its lse is -inf (it saw no key: MultiHead.hpp says the other side
        // is taken, whatever its out row holds), or finite and tame with a tame out row.
        const auto side_ok = [&](T l, int out_slot) {
          if (l == minus_inf) return true;
          bool ok = tame_value(l, 1e3);
          for (Index d = 0; d < D; ++d) ok = ok && tame_value(before[out_slot][row * D + d], 1e3);
          return ok;
        };
        if (!side_ok(la, kOa) || !side_ok(lb, kOb)) continue;
        const long double m = std::max<long double>(la, lb);
        const long double wa = std::exp((long double)la - m), wb = std::exp((long double)lb - m);
        const long double ref_lse = m + std::log(wa + wb);
        if (lb == minus_inf || la == minus_inf) {
          EA_EXPECT(lse == (la == minus_inf ? lb : la), "%s: merged lse %.9g, one side being empty", where.c_str(),
                    double(lse));
        } else {
          EA_EXPECT(std::fabs(lse - ref_lse) <= rel * (1 + std::fabs(ref_lse)), "%s: merged lse %.9g, reference %.9Lg",
                    where.c_str(), double(lse), ref_lse);
        }
        for (Index d = 0; d < D; ++d) {
          const long double va = before[kOa][row * D + d], vb = before[kOb][row * D + d];
          const long double ref = (wa * va + wb * vb) / (wa + wb);
          const T got = t[kO].at(b, h, i, d);
          if (lb == minus_inf || la == minus_inf) {
            EA_EXPECT(got == (la == minus_inf ? vb : va),
                      "%s: out(%td) = %.9g, but the side with lse -inf saw no key and the other side's value is %.9g "
                      "(out_a %.9g, out_b %.9g)",
                      where.c_str(), d, double(got), double(la == minus_inf ? vb : va), double(va), double(vb));
          } else {
            EA_EXPECT(std::fabs(got - ref) <= rel * (std::fabs(va) + std::fabs(vb)) + 4 * (long double)std::numeric_limits<T>::denorm_min(),
                      "%s: out(%td) = %.9g, reference %.9Lg", where.c_str(), d, double(got), ref);
          }
        }
      }
}

template <class T>
void run(Call call, Reader& r, bool big) {
  if (call == Call::Merge) {
    note(format("merge_attention<%s>", type_name<T>()));
    merge<T>(r);
    return;
  }
  const ea::Options opt = decode_options(r);
  if (int(call) <= int(Call::ScoresIntoLse)) {
    single<T>(call, opt, r, big);
  } else {
    note(format("multi-head: %s<%s>%s", call_name(call), type_name<T>(), big ? " (big)" : ""));
    heads<T>(call, opt, r, big);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_verbose = std::getenv("EA_FUZZ_VERBOSE") != nullptr;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ea_fuzz::description().clear();
  g_printed = 0;
  Reader r(data, size);
  const std::uint8_t head = r.u8();
  const bool is_double = head & 1, big = (head & 0x0e) == 0x0e;
  const Call call = static_cast<Call>(r.u8() % int(Call::kCount));
  if (is_double) {
    run<double>(call, r, big);
  } else {
    run<float>(call, r, big);
  }
  if (g_verbose) {
    std::fprintf(stderr, "%s(%zu of %zu input bytes used)\n", ea_fuzz::description().c_str() + g_printed,
                 r.consumed(), size);
  }
  return 0;
}
