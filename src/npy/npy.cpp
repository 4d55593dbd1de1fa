// SPDX-License-Identifier: MIT
// EigenAttention::npy: reading and writing NumPy .npy files (see Npy.hpp).
//
// The reader treats every file as hostile: the header is parsed by a small recursive-descent
// parser for the Python literals NumPy writes (no regular expressions, nesting bounded), every
// count is computed with overflow checks, and the data must be exactly as long as the shape says.
#include <EigenAttention/Npy.hpp>

#include <EigenAttention/AtomicFile.hpp>
#include "../text.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>
#include "index.hpp"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "EigenAttention::npy supports little-endian hosts only (Array::bytes are little-endian)"
#endif

namespace EigenAttention {
namespace npy {
using internal::index_t;

namespace {

constexpr unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr std::size_t kMaxDims = 64;       // NumPy 2's limit (NumPy 1's is 32)
constexpr int kMaxNesting = 16;            // of tuples, lists and dicts in a header
constexpr std::size_t kAlign = 64;         // NumPy's ARRAY_ALIGN
constexpr std::size_t kGrowthDigits = 21;  // NumPy's GROWTH_AXIS_MAX_DIGITS

bool is_word_char(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

[[noreturn]] void fail(const std::string& name, const std::string& problem) {
  throw Error(name + ": " + problem);
}

using internal::counted;
using internal::shape_string;

/// Attacker-controlled text made safe to print: at most 40 characters.
std::string printable(const std::string& s) { return internal::printable(s, 40); }

bool valid_dtype(DType dtype) {
  switch (dtype) {
    case DType::Float32:
    case DType::Float64:
    case DType::Int32:
    case DType::Int64:
    case DType::Bool:
    case DType::Float16:
      return true;
  }
  return false;
}

std::string describe(DType dtype) {
  if (!valid_dtype(dtype)) return "an invalid DType (" + std::to_string(int(dtype)) + ")";
  return std::string(dtype_name(dtype)) + " ('" + dtype_descr(dtype) + "')";
}

/// The bytes of `shape` x `elem` elements; false for a negative dimension (at *bad) or overflow.
enum class CountError { None, Negative, Overflow };
CountError count_bytes(const std::vector<std::int64_t>& shape, std::size_t elem, std::int64_t* count,
                       std::size_t* bytes) {
  std::int64_t n = 1;
  bool zero = false;
  for (std::int64_t d : shape) {
    if (d < 0) return CountError::Negative;
    if (d == 0) zero = true;
  }
  if (zero) {
    n = 0;  // whatever the other dimensions, as NumPy's exact integers would say
  } else {
    for (std::int64_t d : shape) {
      if (__builtin_mul_overflow(n, d, &n)) return CountError::Overflow;
    }
  }
  std::size_t b = 0;
  if (__builtin_mul_overflow(static_cast<std::size_t>(n), elem, &b) ||
      b > static_cast<std::size_t>(std::numeric_limits<index_t>::max())) {
    return CountError::Overflow;
  }
  *count = n;
  *bytes = b;
  return CountError::None;
}

// ---------------------------------------------------------------------------------------------
// The header: a Python literal. Grammar (what NumPy writes, and what ast.literal_eval would take
// of it that we can use):
//   value := string | integer | True | False | None | tuple | list | dict | '(' value ')'
//   string := '...' or "..." without backslashes or newlines
//   integer := ['-'] digits ['L']          (Python 2 files wrote 3L)
//   tuple := '(' ')' | '(' value ',' [value (',' value)* [',']] ')'
//   list := '[' [value (',' value)* [',']] ']'
//   dict := '{' [value ':' value (',' value ':' value)* [',']] '}'
// with whitespace allowed between tokens.

struct Value {
  enum Kind { String, Integer, Bool, None, Tuple, List, Dict } kind = None;
  std::string text;          // String: the contents; Integer: the digits as written
  std::int64_t integer = 0;  // Integer, when it fits
  bool negative = false;     // Integer
  bool too_large = false;    // Integer beyond int64
  bool boolean = false;      // Bool
  std::vector<Value> items;  // Tuple, List; Dict: key, value, key, value, ...
  std::size_t offset = 0;    // where it starts, in the file

  const char* kind_name() const {
    switch (kind) {
      case String:
        return "a string";
      case Integer:
        return "an integer";
      case Bool:
        return "a boolean";
      case None:
        return "None";
      case Tuple:
        return "a tuple";
      case List:
        return "a list";
      case Dict:
        return "a dict";
    }
    return "?";
  }
};

class HeaderParser {
 public:
  HeaderParser(const unsigned char* text, std::size_t size, std::size_t file_offset, const std::string& name)
      : p_(text), n_(size), base_(file_offset), name_(name) {}

  Value parse() {
    skip_space();
    Value v = value(0);
    skip_space();
    if (i_ != n_) error("unexpected " + here() + " after the dict");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    fail(name_, "malformed header: " + what + " at byte " + std::to_string(base_ + i_));
  }
  std::string here() const {
    if (i_ >= n_) return "end of header";
    return "'" + printable(std::string(1, static_cast<char>(p_[i_]))) + "'";
  }
  void skip_space() {
    while (i_ < n_ && (p_[i_] == ' ' || p_[i_] == '\t' || p_[i_] == '\n' || p_[i_] == '\r' || p_[i_] == '\f'))
      ++i_;
  }
  bool peek(char c) const { return i_ < n_ && p_[i_] == static_cast<unsigned char>(c); }
  bool word(const char* w) {
    const std::size_t len = std::strlen(w);
    if (n_ - i_ < len || std::memcmp(p_ + i_, w, len) != 0) return false;
    if (i_ + len < n_ && is_word_char(p_[i_ + len])) return false;
    i_ += len;
    return true;
  }

  Value value(int depth) {
    if (depth > kMaxNesting) error("nesting deeper than " + std::to_string(kMaxNesting));
    Value v;
    v.offset = base_ + i_;
    if (i_ >= n_) error("unexpected end of header");
    const unsigned char c = p_[i_];
    if (c == '\'' || c == '"') {
      v.kind = Value::String;
      ++i_;
      while (true) {
        if (i_ >= n_ || p_[i_] == '\n') error("unterminated string");
        if (p_[i_] == '\\') error("escape sequence in a string (not supported)");
        if (p_[i_] == c) break;
        v.text += static_cast<char>(p_[i_++]);
      }
      ++i_;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Value::Integer;
      if (c == '-') {
        v.negative = true;
        ++i_;
        skip_space();
      }
      if (i_ >= n_ || p_[i_] < '0' || p_[i_] > '9') error("expected digits, found " + here());
      while (i_ < n_ && p_[i_] >= '0' && p_[i_] <= '9') {
        const int digit = p_[i_] - '0';
        v.text += static_cast<char>(p_[i_++]);
        // Accumulate negatively so that INT64_MIN fits; too_large sticks once set.
        if (!v.too_large && (__builtin_mul_overflow(v.integer, 10, &v.integer) ||
                             __builtin_sub_overflow(v.integer, digit, &v.integer))) {
          v.too_large = true;
        }
      }
      if (i_ < n_ && (p_[i_] == 'L' || p_[i_] == 'l')) ++i_;
      if (i_ < n_ && (is_word_char(p_[i_]) || p_[i_] == '.')) {
        error("not an integer: unexpected " + here());
      }
      if (!v.negative && !v.too_large) {
        if (v.integer == std::numeric_limits<std::int64_t>::min()) {
          v.too_large = true;
        } else {
          v.integer = -v.integer;
        }
      }
    } else if (word("True") || word("False")) {
      v.kind = Value::Bool;
      v.boolean = (c == 'T');
    } else if (word("None")) {
      v.kind = Value::None;
    } else if (c == '(') {
      ++i_;
      skip_space();
      if (peek(')')) {
        ++i_;
        v.kind = Value::Tuple;
        return v;
      }
      Value first = value(depth + 1);
      skip_space();
      if (peek(')')) {  // (x) is x, as in Python
        ++i_;
        return first;
      }
      if (!peek(',')) error("expected ',' or ')', found " + here());
      ++i_;
      v.kind = Value::Tuple;
      v.items.push_back(std::move(first));
      sequence(v, ')', depth);
    } else if (c == '[') {
      ++i_;
      v.kind = Value::List;
      sequence(v, ']', depth);
    } else if (c == '{') {
      ++i_;
      v.kind = Value::Dict;
      while (true) {
        skip_space();
        if (peek('}')) break;
        v.items.push_back(value(depth + 1));
        skip_space();
        if (!peek(':')) error("expected ':', found " + here());
        ++i_;
        skip_space();
        v.items.push_back(value(depth + 1));
        skip_space();
        if (peek('}')) break;
        if (!peek(',')) error("expected ',' or '}', found " + here());
        ++i_;
      }
      ++i_;
    } else {
      error("unexpected " + here());
    }
    return v;
  }

  /// The rest of a tuple or list, up to and including `close`.
  void sequence(Value& v, char close, int depth) {
    while (true) {
      skip_space();
      if (peek(close)) break;
      v.items.push_back(value(depth + 1));
      skip_space();
      if (peek(close)) break;
      if (!peek(',')) error(std::string("expected ',' or '") + close + "', found " + here());
      ++i_;
    }
    ++i_;
  }

  const unsigned char* p_;
  std::size_t n_;
  std::size_t i_ = 0;
  std::size_t base_;
  const std::string& name_;
};

/// The DType of a descr string; throws naming the problem for everything unsupported.
DType parse_descr(const std::string& d, const std::string& name) {
  const std::string shown = "'" + printable(d) + "'";
  const char order = d.empty() ? '\0' : d[0];
  const std::string body = (order == '<' || order == '>' || order == '=' || order == '|') ? d.substr(1) : d;
  const std::string supported = "; supported: '<f4', '<f8', '<f2', '<i4', '<i8', '|b1'";
  if (body == "b1" && order != '\0') return DType::Bool;  // one byte: any byte order will do
  if (order == '<' || order == '=') {  // '=' is native: little-endian on every host we build for
    if (body == "f4") return DType::Float32;
    if (body == "f8") return DType::Float64;
    if (body == "f2") return DType::Float16;
    if (body == "i4") return DType::Int32;
    if (body == "i8") return DType::Int64;
  }
  const char kind = body.empty() ? '\0' : body[0];
  std::string why;
  if (kind == 'O') {
    why = "object arrays (pickles) are not supported";
  } else if (kind == 'c') {
    why = "complex numbers are not supported";
  } else if (kind == 'S' || kind == 'U' || kind == 'a') {
    why = "strings are not supported";
  } else if (kind == 'V') {
    why = "raw or structured records are not supported";
  } else if (order == '>' && body.size() >= 2 && body[1] != '1') {
    why = "big-endian data is not supported (save with arr.astype(arr.dtype.newbyteorder('<')))";
  }
  fail(name, "unsupported dtype " + shown + (why.empty() ? "" : ": " + why) + supported);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

const char* dtype_descr(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return "<f4";
    case DType::Float64:
      return "<f8";
    case DType::Int32:
      return "<i4";
    case DType::Int64:
      return "<i8";
    case DType::Bool:
      return "|b1";
    case DType::Float16:
      return "<f2";
  }
  throw Error("npy: invalid DType value " + std::to_string(int(dtype)));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
    case DType::Bool:
      return "bool";
    case DType::Float16:
      return "float16";
  }
  return "invalid";
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return 4;
    case DType::Float64:
      return 8;
    case DType::Int32:
      return 4;
    case DType::Int64:
      return 8;
    case DType::Bool:
      return 1;
    case DType::Float16:
      return 2;
  }
  throw Error("npy: invalid DType value " + std::to_string(int(dtype)));
}

namespace detail {

std::int64_t element_count(const std::int64_t* shape_data, std::size_t ndim) {
  const std::vector<std::int64_t> shape(shape_data, shape_data + ndim);
  std::int64_t n = 0;
  std::size_t b = 0;
  switch (count_bytes(shape, 1, &n, &b)) {
    case CountError::None:
      return n;
    case CountError::Negative:
      fail("array", "negative dimension in shape " + shape_string(shape));
    case CountError::Overflow:
      break;
  }
  fail("array", "shape " + shape_string(shape) + " overflows the element count");
}

std::size_t byte_count(const std::vector<std::int64_t>& shape, DType dtype, const char* what) {
  const std::size_t elem = dtype_size(dtype);
  std::int64_t n = 0;
  std::size_t b = 0;
  switch (count_bytes(shape, elem, &n, &b)) {
    case CountError::None:
      return b;
    case CountError::Negative:
      fail(what, "negative dimension in shape " + shape_string(shape));
    case CountError::Overflow:
      break;
  }
  fail(what, "shape " + shape_string(shape) + " of " + describe(dtype) + " overflows the byte count");
}

std::size_t byte_count(const std::int64_t* shape, std::size_t ndim, DType dtype, const char* what) {
  return byte_count(std::vector<std::int64_t>(shape, shape + ndim), dtype, what);
}

void check_dtype(DType have, DType dtype, const char* what) {
  if (have != dtype) {
    fail(what, "holds " + describe(have) + " elements, not " + describe(dtype));
  }
}

void check_array(ArrayRef a, DType dtype, std::size_t ndim, const char* what, std::int64_t max_index) {
  const std::vector<std::int64_t> shape(a.shape, a.shape + a.ndim);
  if (a.dtype != dtype || shape.size() != ndim) {
    fail(what, "expected a " + std::to_string(ndim) + "-D " + describe(dtype) + " array, got a " +
                   std::to_string(shape.size()) + "-D " + describe(a.dtype) + " array of shape " +
                   shape_string(shape));
  }
  const std::size_t need = byte_count(shape, dtype, what);
  if (a.size != need) {
    fail(what, "holds " + counted(static_cast<long long>(a.size), "byte") + " but shape " +
                   shape_string(shape) + " needs " + std::to_string(need));
  }
  // The strides of a view are products of dimensions; with a zero dimension the others may be
  // anything, so check the product of the non-zero ones.
  std::int64_t product = 1;
  for (std::int64_t d : shape) {
    if (d != 0 && (__builtin_mul_overflow(product, d, &product) || product > max_index)) {
      fail(what, "shape " + shape_string(shape) + " is too large to view: its strides overflow index_t");
    }
  }
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------

namespace {

// A parsed file: its dtype and shape, and where its data lies in the bytes given (null when
// only the header was given) and in the file.
struct Parsed {
  DType dtype = DType::Float64;
  std::vector<std::int64_t> shape;
  const unsigned char* data = nullptr;
  std::size_t bytes = 0;
  std::size_t offset = 0;
};

// `size` bytes of a file of `file_size` bytes: the whole file, or (size < file_size) at least
// its prefix and header, whose checks are then the same (the data's size included) but for the
// values of booleans.
Parsed parse_npy(const unsigned char* data, std::size_t size, const std::string& name,
                 std::size_t file_size) {
  if (size >= 4 && std::memcmp(data, "PK\x03\x04", 4) == 0) {
    fail(name, "a .npz (zip) archive, not a .npy file (bad magic); extract its members first");
  }
  if (size > 0 && std::memcmp(data, kMagic, std::min(size, sizeof kMagic)) != 0) {
    fail(name, "not a .npy file (bad magic: it must start with \\x93NUMPY)");
  }
  if (size < 10)
    fail(name, "too short to be a .npy file (" + counted(static_cast<long long>(size), "byte") + ")");
  const unsigned major = data[6], minor = data[7];
  if (major < 1 || major > 3 || minor != 0) {
    fail(name, "unsupported format version " + std::to_string(major) + "." + std::to_string(minor) +
                   " (supported: 1.0, 2.0, 3.0)");
  }
  const std::size_t prefix = major == 1 ? 10 : 12;
  if (size < prefix)
    fail(name, "too short to be a .npy file (" + counted(static_cast<long long>(size), "byte") + ")");
  std::size_t header_len = std::size_t(data[8]) | std::size_t(data[9]) << 8;
  if (major > 1) header_len |= std::size_t(data[10]) << 16 | std::size_t(data[11]) << 24;
  if (header_len > file_size - prefix) {
    fail(name, "header length " + std::to_string(header_len) + " goes beyond the end of the file (" +
                   std::to_string(file_size) + " bytes)");
  }
  if (header_len > size - prefix) fail(name, "read error in the header");  // (read_header_file)

  const Value header = HeaderParser(data + prefix, header_len, prefix, name).parse();
  if (header.kind != Value::Dict) fail(name, std::string("header is not a dict but ") + header.kind_name());
  const Value* descr = nullptr;
  const Value* fortran = nullptr;
  const Value* shape = nullptr;
  for (std::size_t k = 0; k < header.items.size(); k += 2) {
    const Value& key = header.items[k];
    if (key.kind != Value::String)
      fail(name, std::string("header key is ") + key.kind_name() + ", not a string");
    const Value** slot = key.text == "descr"           ? &descr
                         : key.text == "fortran_order" ? &fortran
                         : key.text == "shape"         ? &shape
                                                       : nullptr;
    if (slot == nullptr)
      fail(name, "unexpected key '" + printable(key.text) + "' in the header (as NumPy, rejected)");
    if (*slot != nullptr) fail(name, "duplicate key '" + key.text + "' in the header");
    *slot = &header.items[k + 1];
  }
  if (descr == nullptr) fail(name, "header is missing the key 'descr'");
  if (fortran == nullptr) fail(name, "header is missing the key 'fortran_order'");
  if (shape == nullptr) fail(name, "header is missing the key 'shape'");

  Parsed a;
  if (descr->kind == Value::List) fail(name, "unsupported dtype: structured arrays are not supported");
  if (descr->kind != Value::String)
    fail(name, std::string("descr is ") + descr->kind_name() + ", not a dtype string");
  a.dtype = parse_descr(descr->text, name);

  if (shape->kind != Value::Tuple) {
    fail(name, std::string("shape is ") + shape->kind_name() + ", not a tuple of non-negative integers");
  }
  if (shape->items.size() > kMaxDims) {
    fail(name, "shape has " + std::to_string(shape->items.size()) + " dimensions (too many; at most " +
                   std::to_string(kMaxDims) + ")");
  }
  for (const Value& d : shape->items) {
    if (d.kind != Value::Integer) {
      fail(name,
           std::string("shape holds ") + d.kind_name() + ", not a non-negative integer (non-numeric shape)");
    }
    if (d.negative && d.text.find_first_not_of('0') != std::string::npos) {
      fail(name, "negative dimension -" + printable(d.text) + " in the shape");
    }
    if (d.too_large) fail(name, "dimension " + printable(d.text) + " in the shape overflows int64");
    a.shape.push_back(d.negative ? 0 : d.integer);  // the only negative left is -0
  }

  if (fortran->kind != Value::Bool) {
    fail(name, std::string("fortran_order is ") + fortran->kind_name() + ", not True or False");
  }
  // One dimension or none: Fortran and C order are the same bytes.
  if (fortran->boolean && a.shape.size() > 1) {
    fail(name, "Fortran order is not supported; save with np.ascontiguousarray");
  }

  std::int64_t count = 0;
  std::size_t need = 0;
  if (count_bytes(a.shape, dtype_size(a.dtype), &count, &need) != CountError::None) {
    fail(name, "shape " + shape_string(a.shape) + " of " + describe(a.dtype) + " overflows the byte count");
  }
  const std::size_t start = prefix + header_len;
  const std::size_t have = file_size - start;
  if (have < need) {
    fail(name, "truncated: the data has " + counted(static_cast<long long>(have), "byte") + " but shape " +
                   shape_string(a.shape) + " of " + describe(a.dtype) + " needs " + std::to_string(need));
  }
  if (have > need) {
    fail(name, "trailing garbage: " + counted(static_cast<long long>(have - need), "byte") +
                   " after the data that shape " + shape_string(a.shape) +
                   " needs (NumPy ignores them; this reader rejects them)");
  }
  a.offset = start;
  a.bytes = need;
  if (size < file_size) return a;  // the header only
  if (a.dtype == DType::Bool) {
    for (std::size_t i = 0; i < need; ++i) {
      if (data[start + i] > 1) {
        fail(name, "boolean element " + std::to_string(i) + " is the byte " +
                       std::to_string(data[start + i]) + " (only 0 and 1 are valid)");
      }
    }
  }
  a.data = data + start;
  return a;
}

void emit(const Parsed& p, detail::Sink sink) {
  sink.fill(sink.array, p.dtype, p.shape.data(), p.shape.size(), p.data, p.bytes);
}

}  // namespace

namespace detail {

void parse_bytes(const unsigned char* data, std::size_t size, const char* name, Sink sink) {
  emit(parse_npy(data, size, name, size), sink);
}

void read_file(const char* path_text, Sink sink) {
  const std::string path(path_text);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) fail(path, std::string("cannot open: ") + std::strerror(errno));
  std::vector<unsigned char> buf;
  struct stat st {};
  if (::fstat(::fileno(f), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    buf.reserve(static_cast<std::size_t>(st.st_size) + 1);
  }
  buf.resize(std::max<std::size_t>(buf.capacity(), 65536));
  std::size_t used = 0;
  while (true) {
    if (used == buf.size()) buf.resize(2 * buf.size());
    const std::size_t want = buf.size() - used;
    const std::size_t got = std::fread(buf.data() + used, 1, want, f);
    used += got;
    if (got < want) break;  // end of file or an error
  }
  const int err = errno;
  const bool bad = std::ferror(f) != 0;
  std::fclose(f);
  if (bad) fail(path, std::string("read error: ") + std::strerror(err));
  emit(parse_npy(buf.data(), used, path, used), sink);
}

void read_header_file(const char* path_text, HeaderSink sink) {
  const std::string path(path_text);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(::fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    std::fclose(f);
    fail(path, "not a regular file (its size is needed to check the data's)");
  }
  const auto file_size = static_cast<std::size_t>(st.st_size);
  // The prefix (12 bytes at most), then the header whose length it gives.
  std::vector<unsigned char> buf(std::min<std::size_t>(file_size, 12));
  std::size_t used = std::fread(buf.data(), 1, buf.size(), f);
  if (used == 12 || (used >= 10 && buf[6] == 1)) {
    std::size_t header_len = std::size_t(buf[8]) | std::size_t(buf[9]) << 8;
    const std::size_t prefix = buf[6] == 1 ? 10 : 12;
    if (prefix == 12) header_len |= std::size_t(buf[10]) << 16 | std::size_t(buf[11]) << 24;
    if (header_len <= file_size - prefix) {  // else parse_npy says so
      buf.resize(std::max(used, prefix + header_len));
      used += std::fread(buf.data() + used, 1, buf.size() - used, f);
    }
  }
  const bool bad = std::ferror(f) != 0;
  std::fclose(f);
  if (bad) fail(path, "read error in the header");
  const Parsed p = parse_npy(buf.data(), std::min(used, file_size), path, file_size);
  sink.fill(sink.header, p.dtype, p.shape.data(), p.shape.size(), p.offset);
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------

namespace {

// The array to write, its shape as a vector for the helpers above.
struct Writing {
  DType dtype;
  std::vector<std::int64_t> shape;
  const unsigned char* bytes;
  std::size_t size;
};

std::string header_text(const Writing& a) {
  // Exactly NumPy's (format.py, _write_array_header): sorted keys, repr values, a trailing ", ",
  // room to grow the first axis in place, then spaces and '\n' up to a multiple of 64.
  std::string h = std::string("{'descr': '") + dtype_descr(a.dtype) +
                  "', 'fortran_order': False, 'shape': " + shape_string(a.shape) + ", }";
  if (!a.shape.empty()) {
    const std::size_t digits = std::to_string(a.shape[0]).size();
    if (digits < kGrowthDigits) h.append(kGrowthDigits - digits, ' ');
  }
  return h;
}

/// The whole prefix: magic, version, header length, header, padding.
std::string wrap_header(const std::string& h) {
  for (unsigned major = 1; major <= 2; ++major) {
    const std::size_t len_bytes = major == 1 ? 2 : 4;
    const std::size_t hlen = h.size() + 1;
    const std::size_t pad = kAlign - (sizeof kMagic + 2 + len_bytes + hlen) % kAlign;
    const std::size_t total = hlen + pad;
    if (major == 1 && total > 0xffff) continue;
    std::string out(reinterpret_cast<const char*>(kMagic), sizeof kMagic);
    out += static_cast<char>(major);
    out += '\0';
    for (std::size_t k = 0; k < len_bytes; ++k) out += static_cast<char>((total >> (8 * k)) & 0xff);
    out += h;
    out.append(pad, ' ');
    out += '\n';
    return out;
  }
  return {};  // unreachable: at most 64 dimensions keep the header far below 4 GiB
}

/// The array's checks and its prefix (magic, version, header): what is written before its bytes.
/// Failures name `path`.
std::string checked_prefix(const std::string& path, const Writing& array) {
  if (!valid_dtype(array.dtype)) fail(path, "cannot write " + describe(array.dtype));
  if (array.shape.size() > kMaxDims) {
    fail(path, "cannot write " + std::to_string(array.shape.size()) + " dimensions (too many; at most " +
                   std::to_string(kMaxDims) + ")");
  }
  const std::size_t need = detail::byte_count(array.shape, array.dtype, path.c_str());
  if (array.size != need) {
    fail(path, "cannot write: the array holds " + counted(static_cast<long long>(array.size), "byte") +
                   " but shape " + shape_string(array.shape) + " of " + describe(array.dtype) + " needs " +
                   std::to_string(need));
  }
  if (array.dtype == DType::Bool) {
    for (std::size_t i = 0; i < need; ++i) {
      if (array.bytes[i] > 1) {
        fail(path, "cannot write: boolean element " + std::to_string(i) + " is the byte " +
                       std::to_string(array.bytes[i]) + " (only 0 and 1 are valid)");
      }
    }
  }
  return wrap_header(header_text(array));
}

Writing writing(detail::ArrayRef ref) {
  return {ref.dtype, std::vector<std::int64_t>(ref.shape, ref.shape + ref.ndim), ref.bytes, ref.size};
}

}  // namespace

namespace detail {

void write_file(const char* path_text, ArrayRef ref) {
  const std::string path(path_text);
  if (path.empty()) fail("npy::write", "empty path");
  const Writing array = writing(ref);
  // Everything is checked before the file is created.
  const std::string prefix = checked_prefix(path, array);
  AtomicFile file(path.c_str());
  file.write(prefix.data(), prefix.size());
  file.write(array.bytes, array.size);
  file.commit();
}

std::size_t prefix_bytes(DType dtype, const std::int64_t* shape, std::size_t ndim, char* out,
                         std::size_t capacity) {
  const std::vector<std::int64_t> dims(shape, shape + ndim);
  if (!valid_dtype(dtype)) fail("npy::prefix", "cannot write " + describe(dtype));
  if (ndim > kMaxDims) fail("npy::prefix", "too many dimensions: " + std::to_string(ndim));
  (void)detail::byte_count(dims, dtype, "npy::prefix");
  const std::string prefix = wrap_header(header_text(Writing{dtype, dims, nullptr, 0}));
  if (prefix.size() <= capacity) std::memcpy(out, prefix.data(), prefix.size());
  return prefix.size();
}

void write_to(AtomicFile& file, ArrayRef ref) {
  const Writing array = writing(ref);
  const std::string prefix = checked_prefix(file.path(), array);
  file.write(prefix.data(), prefix.size());
  file.write(array.bytes, array.size);
}

}  // namespace detail

}  // namespace npy
}  // namespace EigenAttention
