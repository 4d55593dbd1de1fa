// SPDX-License-Identifier: MIT
/// \file fuzz_attention_model.hpp
/// What every call family of fuzz_attention shares (fuzz_attention.cpp says what an input decodes
/// into and which contract is checked): the memory model (buffers in an arena, tensors of any
/// layout inside them, snapshots to see what a call wrote), the element values, the decoding of
/// Options and what the library must make of them, the per-row checks of the results (one Case
/// per sequence and query head, against a long-double reference), how a call's outcome is judged,
/// the pieces the multi-head families decode alike (shapes and packed offsets, masks, key lengths,
/// ALiBi slopes, and MultiHead.hpp's rules on them), the single-head calls' argument kinds, and the
/// calls (enum Call). The model of the library's overlap rule is in fuzz_overlap.hpp.
///
/// The call families, one file each, all decoding from the same Reader in the same order:
///   fuzz_attention_single.cpp    single<T>: attention, attention_into, attention_decomposed(_into),
///                                attention_scores(_into)
///   fuzz_attention_heads.cpp     heads<T>: attention_heads_into(_decomposed),
///   attention_varlen_into(_decomposed) fuzz_attention_merge.cpp     merge<T>: merge_attention_into
///   fuzz_attention_backward.cpp  backward<T>: attention_backward(_into), attention_heads_backward_into,
///                                attention_varlen_backward_into
#pragma once

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
using ea_fuzz::format;
using ea_fuzz::note;
using ea_fuzz::Reader;
using ea_fuzz::Rng;
using Eigen::Index;

namespace ea_fuzz_attention {

inline bool g_verbose = false;
inline std::size_t g_printed = 0;  // how much of the description verbose mode has printed
inline constexpr Index kIndexMax = std::numeric_limits<Index>::max();
inline constexpr Index kIndexMin = std::numeric_limits<Index>::min();

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
  /// Allocates the buffers added since the last call (so that tensors decoded late, such as a
  /// call's sinks and BackwardTerms, can join the arena after the others are filled).
  void allocate() {
    for (std::size_t i = buffers_.size(); i < need_.size(); ++i) {
      const std::size_t n = need_[i];
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
inline const char* lay_name(Lay l) {
  static const char* names[] = {"BHTD",
                                "BTHD",
                                "padded",
                                "col-major",
                                "reversed-tokens",
                                "dim-stride-2",
                                "zero-row-stride",
                                "zero-col-stride",
                                "zero-batch-stride",
                                "interleaved"};
  return names[int(l)];
}

/// The layouts of multi-head inputs and outputs (attention_heads_into, attention_varlen_into, merge).
inline Lay heads_input_lay(std::uint8_t b) {
  static const Lay lays[] = {Lay::BHTD,     Lay::BTHD,     Lay::BHTD,       Lay::BTHD,      Lay::Padded,
                             Lay::ColMajor, Lay::Reversed, Lay::DimStride2, Lay::ZeroBatch, Lay::ZeroRow};
  return lays[b % 10];
}
inline Lay heads_output_lay(std::uint8_t b) {
  static const Lay lays[] = {Lay::BHTD,     Lay::BTHD,     Lay::BHTD,      Lay::Padded,
                             Lay::ColMajor, Lay::Reversed, Lay::DimStride2};
  return lays[b % 7];
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
    return format("[%td, %td, %td, %td] %s strides (%td, %td, %td, %td)", n[0], n[1], n[2], n[3],
                  lay_name(lay), s[0], s[1], s[2], s[3]);
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
          const std::size_t at =
              t.byte_offset + static_cast<std::size_t>(t.offset(i, h, r, c) * Index(sizeof(E)));
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
  const T values[32] = {T(0),
                        T(-0.0),
                        T(1),
                        T(-1),
                        T(0.5),
                        T(-2),
                        T(3),
                        T(-0.25),
                        T(1e-3),
                        T(7.5),
                        T(100),
                        T(-1000),
                        T(1000),
                        L::quiet_NaN(),
                        L::infinity(),
                        -L::infinity(),
                        L::denorm_min(),
                        -L::denorm_min(),
                        L::min() / 2,
                        T(1e38),
                        T(-1e38),
                        T(3.4028234663852886e38),
                        T(-3.4028234663852886e38),
                        L::max(),
                        T(1e-30),
                        T(3e4),
                        T(-1e5),
                        T(0.1),
                        T(-5),
                        T(11),
                        T(1e6),
                        T(-0.5)};
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
    static const char* names[] = {"uniform[-2,2]", "uniform+specials",     "palette bytes",
                                  "constant",      "integers[-3,3]",       "uniform*magnitude",
                                  "raw bits",      "uniform+many specials"};
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

inline void fill_mask(const Tensor<bool>& t, Reader& r) {
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

/// Options::diagonal_offset (when the input's first byte asks for one: fuzz_attention.cpp): small
/// offsets of either sign, offsets that put every key before or after every query, and the
/// limits: +-2^60 (the largest allowed), one past them and the extremes of the type (which must
/// throw), or a byte's worth around 0.
inline std::ptrdiff_t decode_diagonal_offset(Reader& r) {
  constexpr std::ptrdiff_t limit = std::ptrdiff_t(1) << 60;
  static const std::ptrdiff_t offsets[] = {
      0,          1,         -1,         2,         -3,        5,          -7,           12,
      -12,        40,        -40,        1000,      -1000,     limit,      -limit,       limit - 3,
      -limit + 2, limit + 1, -limit - 1, kIndexMax, kIndexMin, limit >> 1, -(limit >> 1)};
  constexpr unsigned n = sizeof offsets / sizeof offsets[0];
  const std::uint8_t b = r.u8() % 32;
  if (b < n) return offsets[b];
  return std::ptrdiff_t(r.u8()) - 128;
}

/// Whether Options::diagonal_offset, when set, is within the documented +-2^60.
inline bool diagonal_offset_ok(const ea::Options& o) {
  constexpr std::ptrdiff_t limit = std::ptrdiff_t(1) << 60;
  return !o.diagonal_offset || (*o.diagonal_offset >= -limit && *o.diagonal_offset <= limit);
}

/// The offset of query row i's diagonal key: Options::diagonal_offset when set, else the
/// alignment's (0, or keys - rows for BottomRight).
inline Index diagonal_of(const ea::Options& o, Index keys, Index rows) {
  if (o.diagonal_offset) return *o.diagonal_offset;
  return o.alignment == ea::CausalAlignment::BottomRight ? keys - rows : 0;
}

/// Reads the Options; with `diagonal`, Options::diagonal_offset after everything else.
inline ea::Options decode_options(Reader& r, bool diagonal = false) {
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
    static const double scales[] = {1.0,  0.125,    0.5,   1e3,   0.0,  -1.0,  nan,
                                    inf,  -inf,     1e-45, 1e-50, 1e38, 1e300, 3.4028234663852886e38,
                                    1e39, 4.9e-324, 2.0,   1e-3};
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
    static const std::ptrdiff_t values[] = {-1,
                                            -1,
                                            -1,
                                            -1,
                                            -1,
                                            0,
                                            1,
                                            2,
                                            3,
                                            5,
                                            8,
                                            -2,
                                            -100,
                                            std::ptrdiff_t(1) << 40,
                                            kIndexMax,
                                            kIndexMin,
                                            kIndexMax - 5,
                                            600};
    if (b < 18) return values[b];
    return static_cast<std::ptrdiff_t>(r.u8());
  };
  o.window_left = window();
  o.window_right = window();
  {
    const std::uint8_t b = r.u8() % 20;
    static const double caps[] = {0,   0,  0,   0,    0,     1,     5,    30,    0.5,
                                  nan, -1, inf, -inf, 1e-45, 1e-50, 1e38, 1e300, 50};
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
  {
    // Chunked-local attention: off most often; valid sizes, 2^60 (the largest), and bad values.
    const std::uint8_t b = r.u8() % 20;
    static const std::ptrdiff_t chunks[] = {0,
                                            0,
                                            0,
                                            0,
                                            0,
                                            0,
                                            0,
                                            1,
                                            2,
                                            3,
                                            5,
                                            8,
                                            64,
                                            -1,
                                            -7,
                                            std::ptrdiff_t(1) << 60,
                                            (std::ptrdiff_t(1) << 60) + 1,
                                            kIndexMax};
    o.chunk_size = b < 18 ? chunks[b] : static_cast<std::ptrdiff_t>(r.u8());
    const std::uint8_t c = r.u8() % 10;
    static const std::ptrdiff_t origins[] = {
        0, 0, 0, 0, 3, -5, 17, std::ptrdiff_t(1) << 60, -(std::ptrdiff_t(1) << 60) - 1, kIndexMin};
    o.chunk_origin = origins[c];
  }
  if (diagonal) o.diagonal_offset = decode_diagonal_offset(r);
  note(format(
      "options: causal=%d alignment=%d scale=%s window=(%td, %td) softcap=%.17g threads=%d kernel=%d "
      "chunk=(%td, %td)",
      int(o.causal), int(o.alignment), o.scale ? format("%.17g", *o.scale).c_str() : "default", o.window_left,
      o.window_right, o.softcap, o.threads, int(o.kernel), o.chunk_size, o.chunk_origin));
  if (o.diagonal_offset) note(format("  diagonal_offset=%td", *o.diagonal_offset));
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

inline bool kernel_ok(ea::Kernel k) {
  if (k == ea::Kernel::Auto) return true;
  const auto avail = ea::available_kernels();
  return std::find(avail.begin(), avail.end(), k) != avail.end();
}

/// The rules every call shares (for the scalar type T and d_k as the call sees it).
template <class T>
bool options_ok(const ea::Options& o, Index dk) {
  constexpr std::ptrdiff_t limit = std::ptrdiff_t(1) << 60;
  return scale_ok<T>(o, dk) && o.threads >= 0 && o.window_left >= -1 && o.window_right >= -1 &&
         softcap_ok<T>(o) && kernel_ok(o.kernel) && o.chunk_size >= 0 && o.chunk_size <= limit &&
         o.chunk_origin >= -limit && o.chunk_origin <= limit && diagonal_offset_ok(o);
}

/// What a call's outcome must be.
struct Expect {
  bool invalid = false;    // a documented rule is broken: must throw
  bool uncertain = false;  // only a conservative check could say: may throw (must, when invalid)
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

/// A programmable mask and score modification (Masks::score_mod, mask_mod) from a small grammar:
/// the mask a combination (and, or, not) of up to three comparisons of b, h, q and k; the score
/// modification up to three of the built-in operations (a scale, a soft-cap, a bias linear in the
/// distance, ALiBi's |q - k|, a per-sequence and per-head offset, a table of the distance mod 7).
/// The library instantiates it with float, double and Dual; the reference (check_case) evaluates
/// it in long double at the same positions.
struct Program {
  struct Atom {
    std::uint8_t kind = 0;
    Index c = 0, m = 1;
    bool negate = false;
  };
  struct Op {
    std::uint8_t kind = 0;
    double a = 0;
  };
  std::vector<Atom> atoms;
  std::vector<bool> ors;  // between atom i and i + 1: or (else and), evaluated left to right
  std::vector<Op> ops;
  bool has_mask() const { return !atoms.empty(); }
  bool has_score() const { return !ops.empty(); }

  static Index floor_div(Index x, Index m) { return x >= 0 ? x / m : -((-x - 1) / m) - 1; }
  bool atom(const Atom& a, Index b, Index h, Index q, Index k) const {
    bool v = true;
    switch (a.kind % 6) {
      case 0:
        v = k <= q + a.c;
        break;  // causal, shifted
      case 1:
        v = (q > k ? q - k : k - q) <= a.c;
        break;  // a band
      case 2:
        v = floor_div(q, a.m) == floor_div(k, a.m);
        break;  // chunks
      case 3:
        v = ((k % a.m) + a.m) % a.m != a.c % a.m;
        break;  // strided keys
      case 4:
        v = k < a.c;
        break;  // a prefix
      default:
        v = ((b + h) % 2 == 0) == (q % 2 == 0);
        break;  // by sequence and head
    }
    return v != a.negate;
  }
  bool keep(Index b, Index h, Index q, Index k) const {
    bool v = atom(atoms[0], b, h, q, k);
    for (std::size_t i = 1; i < atoms.size(); ++i) {
      const bool w = atom(atoms[i], b, h, q, k);
      v = ors[i - 1] ? (v || w) : (v && w);
    }
    return v;
  }
  static constexpr double kTable[7] = {0.25, -0.5, 0.125, 1.0, -0.75, 0.0, 0.375};
  /// f(s, b, h, q, k) in S (float, double or Dual), or in long double (the reference).
  template <class S, class V>
  S apply_as(S s, Index b, Index h, Index q, Index k) const {
    using std::tanh;
    const auto c = [](double x) { return S(static_cast<V>(x)); };
    const Index d = q - k;
    for (const Op& o : ops) {
      switch (o.kind % 6) {
        case 0:
          s = s * c(o.a);
          break;
        case 1:
          s = c(o.a) * tanh(s / c(o.a));
          break;
        case 2:
          s = s + c(o.a * double(d));
          break;
        case 3:
          s = s - c(o.a * double(d < 0 ? -d : d));
          break;
        case 4:
          s = s + c(o.a * double(h + 1) - o.a * double(b));
          break;
        default:
          s = s + c(kTable[((d % 7) + 7) % 7]);
          break;
      }
    }
    return s;
  }
  template <class S>
  S apply(S s, Index b, Index h, Index q, Index k) const {
    if constexpr (std::is_floating_point_v<S>) {
      return apply_as<S, S>(s, b, h, q, k);
    } else {
      return apply_as<S, decltype(s.value)>(s, b, h, q, k);
    }
  }
  long double score(long double s, Index b, Index h, Index q, Index k) const {
    return apply_as<long double, long double>(s, b, h, q, k);
  }
  std::string describe() const {
    std::string t;
    for (std::size_t i = 0; i < atoms.size(); ++i)
      t += format("%s%satom%d(c=%td, m=%td)", i == 0 ? "" : (ors[i - 1] ? " or " : " and "),
                  atoms[i].negate ? "not " : "", atoms[i].kind % 6, atoms[i].c, atoms[i].m);
    t += atoms.empty() ? "no mask_mod;" : ";";
    for (const Op& o : ops) t += format(" op%d(%g)", o.kind % 6, o.a);
    return t;
  }
};

/// The callables handed to the library, reading a Program.
struct ProgramScore {
  const Program* p;
  template <class S>
  S operator()(S s, Index b, Index h, Index q, Index k) const {
    return p->apply(s, b, h, q, k);
  }
};
struct ProgramMask {
  const Program* p;
  bool operator()(Index b, Index h, Index q, Index k) const { return p->keep(b, h, q, k); }
};

/// Reads a Program (no byte left: none). Its constants keep the logits within a few units of the
/// scaled ones, so that the reference's tolerances hold.
inline Program decode_program(Reader& r) {
  Program p;
  const std::uint8_t head = r.u8();
  const int atoms = head % 4, ops = (head >> 2) % 4;
  for (int i = 0; i < atoms; ++i) {
    const std::uint8_t a = r.u8(), b = r.u8();
    Program::Atom atom;
    atom.kind = (a & 7) % 6;
    atom.negate = (a >> 3) % 4 == 3;
    atom.c = Index(b % 16) - (atom.kind == 0 ? 4 : 0);
    atom.m = 1 + (b >> 4) % 9;
    p.atoms.push_back(atom);
    if (i > 0) p.ors.push_back((a >> 5) % 2 == 1);
  }
  static const double scales[] = {0.5, 0.75, 1.25, 2.0}, caps[] = {1.0, 2.5, 5.0, 0.5},
                      slopes[] = {0.01, -0.1, 0.05, 0.2};
  for (int i = 0; i < ops; ++i) {
    const std::uint8_t a = r.u8();
    Program::Op op;
    op.kind = (a & 7) % 6;
    const int v = (a >> 3) % 4;
    op.a = op.kind == 0 ? scales[v] : op.kind == 1 ? caps[v] : slopes[v];
    p.ops.push_back(op);
  }
  if (p.has_mask() || p.has_score()) note("  program: " + p.describe());
  return p;
}

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
  bool has_sink = false;  // Masks::sinks given: `sink` is this head's
  T sink = 0;
  const Program* program = nullptr;  // Masks::score_mod and mask_mod, when given
  Index batch = 0, head = 0;         // the b and h they see
  Acc<T> attn, scores, lse;
};

template <class T>
struct Rules {
  bool causal = false;
  Index wl = -1, wr = -1;
  Index chunk = 0, chunk_origin = 0;  // Options::chunk_size and chunk_origin
  T scale = 1, softcap = 0;
};

inline bool key_visible(bool causal, Index wl, Index wr, Index i, Index j, Index offset, Index chunk = 0,
                        Index chunk_origin = 0) {
  using W = __int128;
  const W pos = W(i) + W(offset);
  if (causal && W(j) > pos) return false;
  if (wl >= 0 && W(j) < pos - W(wl)) return false;
  if (wr >= 0 && W(j) > pos + W(wr)) return false;
  if (chunk > 0) {
    const auto chunk_of = [&](W x) {
      const W y = x + W(chunk_origin);
      return y >= 0 ? y / W(chunk) : -((-y - 1) / W(chunk)) - 1;
    };
    if (chunk_of(W(j)) != chunk_of(pos)) return false;
  }
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
  // The sink (Masks::sinks), its own model: one more logit of every row's softmax, with no value.
  // -inf is no sink. A NaN sink makes every LSE of its head NaN, and the ATTN and visible SCORES of
  // its rows that see a key (whose inputs are finite) NaN; +inf, raw bits beyond the finite range,
  // leave those rows unchecked. A finite sink keeps a row safe; it keeps it tame (the reference's
  // tolerances hold) when |sink| <= 50, as the logits.
  const T minus_inf = -std::numeric_limits<T>::infinity();
  const bool sink_on = c.has_sink && !(c.sink == minus_inf);
  const bool sink_nan = sink_on && std::isnan(c.sink), sink_finite = sink_on && std::isfinite(c.sink);
  std::vector<char> vis(static_cast<std::size_t>(tk));
  std::vector<long double> logit(static_cast<std::size_t>(tk));
  for (Index i = 0; i < c.q.rows; ++i) {
    Index nvis = 0;
    bool safe = scale_safe && (!c.alibi || tame_value(c.slope, 1e3));
    for (Index d = 0; d < dk; ++d) safe = safe && tame_value(c.q(i, d), 1e3);
    bool tame = safe && (!sink_finite || std::fabs(double(c.sink)) <= 50);
    long double max_logit = -INFINITY;
    for (Index j = 0; j < tk; ++j) {
      // The positions the programmable parts see: the query's diagonal key and the key's own.
      const Index qpos = i + c.offset + rules.chunk_origin, kpos = j + rules.chunk_origin;
      const bool v =
          j < c.keys &&
          key_visible(rules.causal, rules.wl, rules.wr, i, j, c.offset, rules.chunk, rules.chunk_origin) &&
          (!c.mask.present() || c.mask(i, j)) &&
          (c.program == nullptr || !c.program->has_mask() || c.program->keep(c.batch, c.head, qpos, kpos));
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
      if (c.program != nullptr && c.program->has_score()) {
        l = c.program->score(l, c.batch, c.head, qpos, kpos);
        tame = tame && std::fabs(l) <= 50;
      }
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
    // Inputs finite and small (safe_inputs) yet a NaN sink: the row must be NaN. Beyond the
    // finite range, the sink leaves the row unchecked.
    const bool safe_inputs = safe;
    if (sink_on && !sink_finite) safe = tame = false;
    long double ref_sum = 0, ref_sink = 0;  // ref_sink: the sink's weight
    if (tame && nvis > 0) {
      if (sink_finite) max_logit = std::max(max_logit, (long double)c.sink);
      for (Index j = 0; j < tk; ++j)
        if (vis[j]) ref_sum += std::exp(logit[j] - max_logit);
      if (sink_finite) {
        ref_sink = std::exp((long double)c.sink - max_logit);
        ref_sum += ref_sink;
        ref_sink /= ref_sum;
      }
    }
    const auto ref_weight = [&](Index j) { return std::exp(logit[j] - max_logit) / ref_sum; };
    const std::string where =
        format("%s row %td (%td visible keys, safe=%d, tame=%d%s)", c.name.c_str(), i, nvis, int(safe),
               int(tame), sink_on ? format(", sink %.9g", double(c.sink)).c_str() : "");

    if (c.scores.present()) {
      long double sum = 0;
      for (Index j = 0; j < tk; ++j) {
        const T s = c.scores(i, j);
        if (!vis[j]) {
          EA_EXPECT(s == 0, "%s: SCORES(%td, %td) = %.9g for a hidden key (must be exactly 0)", where.c_str(),
                    i, j, double(s));
          continue;
        }
        EA_EXPECT(std::isnan(s) || (s >= 0 && s <= 1), "%s: SCORES(%td, %td) = %.9g outside [0, 1]",
                  where.c_str(), i, j, double(s));
        EA_EXPECT(!safe || !std::isnan(s),
                  "%s: SCORES(%td, %td) is NaN though every input it depends on is finite", where.c_str(), i,
                  j);
        EA_EXPECT(!(sink_nan && safe_inputs) || std::isnan(s),
                  "%s: SCORES(%td, %td) = %.9g, but the row's sink is NaN (must be NaN)", where.c_str(), i, j,
                  double(s));
        sum += s;
        if (tame) {
          const long double ref = ref_weight(j);
          EA_EXPECT(std::fabs(s - ref) <= ref_rel * ref + ref_abs + tiny,
                    "%s: SCORES(%td, %td) = %.9g, reference %.9Lg", where.c_str(), i, j, double(s), ref);
        }
      }
      if (safe && nvis > 0 && !sink_finite) {
        EA_EXPECT(std::fabs(sum - 1) <= 1e-3, "%s: SCORES row sums to %.9Lg", where.c_str(), sum);
      }
      // With a sink, the weights leave it its share: they sum to 1 - P_sink.
      if (safe && nvis > 0 && sink_finite) {
        EA_EXPECT(sum <= 1 + 1e-3, "%s: SCORES row sums to %.9Lg (> 1)", where.c_str(), sum);
        if (tame)
          EA_EXPECT(std::fabs(sum - (1 - ref_sink)) <= 1e-3,
                    "%s: SCORES row sums to %.9Lg, the reference leaves the sink %.9Lg (sum %.9Lg)",
                    where.c_str(), sum, ref_sink, 1 - ref_sink);
      }
    }
    if (c.attn.present()) {
      for (Index d = 0; d < dv; ++d) {
        const T a = c.attn(i, d);
        if (nvis == 0) {
          EA_EXPECT(a == 0, "%s: ATTN(%td, %td) = %.9g for a row that sees no key (must be 0)", where.c_str(),
                    i, d, double(a));
          continue;
        }
        EA_EXPECT(!(sink_nan && safe_inputs) || std::isnan(a),
                  "%s: ATTN(%td, %td) = %.9g, but the row's sink is NaN (must be NaN)", where.c_str(), i, d,
                  double(a));
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
        EA_EXPECT(std::isfinite(a), "%s: ATTN(%td, %td) = %.9g is not finite though its inputs are",
                  where.c_str(), i, d, double(a));
        EA_EXPECT(std::fabs((long double)a) <= vmax * (1 + 1e-3L) + tiny,
                  "%s: |ATTN(%td, %td)| = %.9g exceeds the largest visible |V| %.9Lg", where.c_str(), i, d,
                  double(a), vmax);
        if (tame) {
          EA_EXPECT(std::fabs(a - ref) <= ref_rel * ref_mag + ref_abs * vmax + tiny,
                    "%s: ATTN(%td, %td) = %.9g, reference %.9Lg", where.c_str(), i, d, double(a), ref);
        }
        if (c.scores.present()) {
          EA_EXPECT(std::fabs(a - via_scores) <= 1e-3L * via_mag + 1e-6L * vmax + tiny,
                    "%s: ATTN(%td, %td) = %.9g but SCORES * V gives %.9Lg", where.c_str(), i, d, double(a),
                    via_scores);
        }
      }
    }
    if (c.lse.present()) {
      const T l = c.lse(i, 0);
      if (sink_nan) {
        EA_EXPECT(std::isnan(l), "%s: LSE(%td) = %.9g, but the row's sink is NaN (must be NaN)",
                  where.c_str(), i, double(l));
      } else if (nvis == 0 && sink_on) {
        EA_EXPECT(l == c.sink, "%s: LSE(%td) = %.9g for a row that sees no key (must be its sink, %.9g)",
                  where.c_str(), i, double(l), double(c.sink));
      } else if (nvis == 0) {
        EA_EXPECT(l == -std::numeric_limits<T>::infinity(),
                  "%s: LSE(%td) = %.9g for a row that sees no key (must be -inf)", where.c_str(), i,
                  double(l));
      } else if (safe) {
        EA_EXPECT(std::isfinite(l), "%s: LSE(%td) = %.9g is not finite though its inputs are", where.c_str(),
                  i, double(l));
        if (tame) {
          const long double ref = max_logit + std::log(ref_sum);
          EA_EXPECT(std::fabs(l - ref) <= ref_rel * (1 + std::fabs(ref)),
                    "%s: LSE(%td) = %.9g, reference %.9Lg", where.c_str(), i, double(l), ref);
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
    // A rule known to be broken must throw, whatever else only a conservative check could say.
    EA_EXPECT(!e.invalid, "%s returned, but it must throw: %s", call, e.why.c_str());
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

// ---------------------------------------------------------------------------------------------
// What the multi-head families (heads<T>, backward<T>) decode alike, in this order: the shapes and
// packed offsets (decode_heads_shape), the masks' presence and broadcast shapes
// (decode_mask_choice), and, among the values, the key lengths (fill_key_lengths) and ALiBi
// slopes (fill_alibi); expect_mask_rules holds MultiHead.hpp's rules on them.

/// The sizes of a multi-head call and, for a packed batch, its sequences.
struct HeadsShape {
  Index B = 0, Hkv = 0, group = 0, H = 0, tq = 0, tk = 0, dk = 0, dv = 0;
  Index S = 0;  // packed sequences (varlen)
  std::vector<std::int64_t> cu_q = std::vector<std::int64_t>(1, 0), cu_k = std::vector<std::int64_t>(1, 0);
  Index seq_claim = 0;  // -1: the number of sequences is passed as -1
};

/// Reads the sizes (long sequences when big) and, for a packed batch, the sequences' lengths,
/// the packed rows after them and an offset fault.
inline HeadsShape decode_heads_shape(Reader& r, bool big, bool varlen) {
  HeadsShape s;
  if (big) {
    s.B = 1 + r.u8() % 2, s.Hkv = 1, s.group = 1 + r.u8() % 2, s.tq = r.u16() % 260, s.tk = r.u16() % 1100;
    s.dk = 1 + r.u8() % 4, s.dv = r.u8() % 5;
  } else {
    s.B = r.u8() % 4, s.Hkv = r.u8() % 4, s.group = 1 + r.u8() % 3, s.tq = r.u8() % 13, s.tk = r.u8() % 13;
    s.dk = r.u8() % 13, s.dv = r.u8() % 13;
  }
  s.H = s.Hkv * s.group;
  // Packed sequences (varlen): their lengths, then the offsets.
  if (varlen) {
    std::vector<std::int64_t>&cu_q = s.cu_q, &cu_k = s.cu_k;
    const Index S = s.S = r.u8() % 5;
    for (Index q = 0; q < S; ++q) {
      const Index lq = big ? r.u8() % 140 : r.u8() % 7, lk = big ? r.u16() % 600 : r.u8() % 7;
      cu_q.push_back(cu_q.back() + lq);
      cu_k.push_back(cu_k.back() + lk);
    }
    s.B = 1;
    s.tq = cu_q.back() + r.u8() % 3;  // packed rows after the last sequence belong to none
    s.tk = cu_k.back() + r.u8() % 3;
    const std::uint8_t f = r.u8() % 24;
    if (f == 16) cu_q[0] = 1;
    if (f == 17 && S >= 1) std::swap(cu_q[0], cu_q[S]);
    if (f == 18) cu_q[S] = s.tq + 1;
    if (f == 19) cu_k[0] = -1;
    if (f == 20 && S >= 2) std::swap(cu_k[1], cu_k[2]);
    if (f == 21) cu_k[S] = s.tk + 1;
    if (f == 22) s.seq_claim = -1;
    if (f == 23) s.B = 2;  // a packed batch must have batch 1
  }
  return s;
}

/// Which masks a multi-head call is given, and the batch and head sizes of the mask and bias
/// (1 or B, 1 or H). A packed batch takes ALiBi only (a mask is tried, rarely: it must throw).
struct MaskChoice {
  bool mask = false, bias = false, lengths = false, alibi = false;
  Index mb = 1, mh = 1, bb = 1, bh = 1;
};

inline MaskChoice decode_mask_choice(Reader& r, bool varlen, Index B, Index H) {
  MaskChoice m;
  const std::uint8_t mpres = r.u8();
  m.mask = !varlen ? (mpres & 3) == 1 : (mpres & 0x3f) == 0x3f;
  m.bias = !varlen ? ((mpres >> 2) & 3) == 1 : false;
  m.lengths = !varlen ? ((mpres >> 4) & 3) == 1 : false;
  m.alibi = (mpres >> 6) == 1;
  m.mb = (r.u8() & 1) ? B : 1;
  m.mh = (r.u8() & 1) ? H : 1;
  m.bb = (r.u8() & 1) ? B : 1;
  m.bh = (r.u8() & 1) ? H : 1;
  return m;
}

/// B key lengths, mostly within [0, T_k], sometimes outside it.
inline void fill_key_lengths(Reader& r, const Tensor<std::int64_t>& lengths, Index B, Index tk) {
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

/// H ALiBi slopes.
template <class T>
void fill_alibi(Reader& r, const Tensor<T>& slopes, Index H, bool big) {
  Filler<T> f(r, big);
  fill(slopes, f);
  std::string s = "  alibi slopes (" + f.describe() + "):";
  for (Index h = 0; h < H; ++h) s += format(" %g", double(slopes.at(0, 0, 0, h)));
  note(s);
}

/// H attention sinks (Masks::sinks), or none: false. Decoded after everything else a call reads,
/// so that inputs written before sinks existed decode as they did (a 0 byte, as the input's end
/// reads, is none). Per head or one for all: small finite values, -inf (no sink), NaN, +-40 or
/// -60 (dominant, or nothing), 1e4 (beyond the reference's range), or raw bits.
template <class T>
bool fill_sinks(Reader& r, const Tensor<T>& sinks, Index H) {
  const std::uint8_t mode = r.u8() % 4;  // 0: none; 1: a byte per head; 2: one byte for all; 3: raw bits
  if (mode == 0) return false;
  const auto value = [](std::uint8_t x) -> T {
    switch (x % 16) {
      case 10:
        return -std::numeric_limits<T>::infinity();
      case 11:
        return std::numeric_limits<T>::quiet_NaN();
      case 12:
        return T(40);
      case 13:
        return T(-60);
      case 14:
        return T(1e4);
      case 15:
        return T(-40);
      default:
        return T(1.5) * T(int(x >> 4) - 8);  // [-12, 10.5]
    }
  };
  const std::uint8_t all = mode == 2 ? r.u8() : 0;
  std::string s = "  sinks:";
  for (Index h = 0; h < H; ++h) {
    const T x = mode == 1 ? value(r.u8()) : mode == 2 ? value(all) : raw_bits<T>(r);
    sinks.at(0, 0, 0, h) = x;
    s += format(" %g", double(x));
  }
  note(s);
  return true;
}

/// A mask or bias tensor as the BroadcastView handed to the library (its sizes claimed by `c`).
template <class E>
ea::BroadcastView<E> broadcast_of(const Tensor<E>& t, Claim c = {}) {
  const auto hv = heads_view<E>(t, c);
  ea::BroadcastView<E> v;
  v.data = hv.data;
  v.batch = hv.batch, v.heads = hv.heads, v.rows = hv.tokens, v.cols = hv.dim;
  v.batch_stride = hv.batch_stride, v.head_stride = hv.head_stride;
  v.row_stride = hv.token_stride, v.col_stride = hv.dim_stride;
  return v;
}

/// MultiHead.hpp's rules on the masks (for the views q and k) or, for a packed batch, on the
/// number of sequences and the offsets cu_q, cu_k (S + 1 entries each) of `sequences` sequences.
template <class T>
void expect_mask_rules(Expect& e, bool varlen, Index sequences, Index S,
                       const std::vector<std::int64_t>& cu_q, const std::vector<std::int64_t>& cu_k,
                       const ea::HeadsView<const T>& q, const ea::HeadsView<const T>& k,
                       const ea::Masks<T>& masks) {
  const bool has_mask = !masks.mask.empty(), has_bias = !masks.bias.empty();
  const bool has_lengths = masks.key_lengths != nullptr;
  if (varlen) {
    e.check(sequences >= 0, "negative number of sequences");
    e.check(q.batch == 1, "a packed batch has batch 1");
    e.check(!has_mask && !has_bias && !has_lengths, "varlen takes no mask, bias or key_lengths");
    if (sequences >= 0) {
      e.check(cu_q[0] == 0 && cu_k[0] == 0, "cu_seqlens must start at 0");
      for (Index s = 0; s < S; ++s)
        e.check(cu_q[s + 1] >= cu_q[s] && cu_k[s + 1] >= cu_k[s], "cu_seqlens decrease");
      e.check(cu_q[S] <= q.tokens && cu_k[S] <= k.tokens, "cu_seqlens exceed the packed tokens");
    }
  } else {
    const auto bc_ok = [&](const auto& m) {
      return m.empty() || ((m.batch == 1 || m.batch == q.batch) && (m.heads == 1 || m.heads == q.heads) &&
                           m.rows == q.tokens && m.cols == k.tokens);
    };
    e.check(bc_ok(masks.mask), "the mask does not broadcast");
    e.check(bc_ok(masks.bias), "the bias does not broadcast");
    if (has_lengths && !e.invalid) {
      for (Index b = 0; b < q.batch; ++b) {
        const auto len = masks.key_lengths[b];
        e.check(len >= 0 && len <= k.tokens, "a key length is outside [0, T_k]");
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The single-head calls' arguments (single<T>, backward<T>).

/// An input as the front doors see it: a strided Map (kind 0), a column-major Eigen::Matrix
/// copy (kind 1), or an expression without direct access (kind 2, evaluated by the library).
/// Only a Map claims sizes beyond its buffer.
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
      : m(ea::ConstStridedMap<T>(t.data(), t.n[2], t.n[3],
                                 Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(t.s[2], t.s[3]))) {}
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
/// column-major (2) Eigen matrix, initially r0 x c0 and all -7.
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

/// The layouts of single-head inputs (and of outputs given as Maps).
inline Lay input_lay(std::uint8_t b) {
  static const Lay lays[] = {Lay::BHTD,     Lay::BHTD,    Lay::ColMajor, Lay::Padded,
                             Lay::ColMajor, Lay::ZeroRow, Lay::ZeroCol,  Lay::Interleaved};
  return lays[b % 8];
}

inline const Index kHuge[] = {Index(1) << 40, Index(1) << 62, kIndexMax, -1, kIndexMin, Index(1) << 31};

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
  Backward,
  HeadsBackward,
  VarlenBackward,
  kCount
};
inline const char* call_name(Call c) {
  static const char* names[] = {"attention",
                                "attention_into",
                                "attention_into(+lse)",
                                "attention_decomposed",
                                "attention_decomposed_into",
                                "attention_decomposed_into(+lse)",
                                "attention_scores",
                                "attention_scores_into",
                                "attention_scores_into(+lse)",
                                "attention_heads_into",
                                "attention_heads_decomposed_into",
                                "attention_varlen_into",
                                "attention_varlen_decomposed_into",
                                "merge_attention_into",
                                "attention_backward",
                                "attention_heads_backward_into",
                                "attention_varlen_backward_into"};
  return names[int(c)];
}

// The call families (explicitly instantiated for float and double in their files).
template <class T>
void single(Call call, const ea::Options& opt, Reader& r, bool big);
template <class T>
void heads(Call call, const ea::Options& opt, Reader& r, bool big);
template <class T>
void merge(Reader& r);
template <class T>
void backward(Call call, const ea::Options& opt, Reader& r, bool big);
/// The 16-bit calls (T16 = Eigen::bfloat16 or Eigen::half) against the float calls on the widened
/// inputs (fuzz_attention_lowp.cpp).
template <class T16>
void lowp(Call call, const ea::Options& opt, Reader& r, bool big);

}  // namespace ea_fuzz_attention
