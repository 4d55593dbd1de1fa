// Argument validation: every check on user input lives here.
#include "validate.hpp"

#include <EigenAttention/Compiled.hpp>

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

namespace EigenAttention {
namespace internal {
namespace {

std::string shape(Index rows, Index cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

[[noreturn]] void fail(const char* api, const std::string& what) {
  throw std::invalid_argument(std::string("EigenAttention::") + api + ": " + what);
}

// Byte offsets of the first and last element a view touches, relative to its data pointer.
void extent(const Region& r, Index& lo, Index& hi) {
  lo = hi = 0;
  const Index dr = (r.rows - 1) * r.row_stride, dc = (r.cols - 1) * r.col_stride;
  lo += std::min<Index>(dr, 0) + std::min<Index>(dc, 0);
  hi += std::max<Index>(dr, 0) + std::max<Index>(dc, 0);
}

bool empty(const Region& r) { return r.rows == 0 || r.cols == 0; }

// Do two half-open intervals [a, a + n) and [b, b + m) intersect?
bool intersect(Index a, Index n, Index b, Index m) { return a < b + m && b < a + n; }

constexpr Index kIndexMax = std::numeric_limits<Index>::max();

// a * b into r, false when it overflows Index.
bool mul(Index a, Index b, Index& r) { return !__builtin_mul_overflow(a, b, &r); }

}  // namespace

void check_view_size(const char* api, const char* name, int axes, const Index* sizes, const Index* strides,
                     std::size_t element_bytes, bool zero_as_one) {
  // Nothing is allocated unless the check fails (the _into calls allocate nothing).
  const auto what = [&] {
    std::string list, stride_list;
    for (int a = 0; a < axes; ++a) {
      list += (a ? (axes == 2 ? "x" : ", ") : "") + std::to_string(sizes[a]);
      stride_list += (a ? "," : "") + std::to_string(strides[a]);
    }
    const std::string shown = axes == 2 ? " (" + list + ")" : axes == 4 ? " [" + list + "]" : " (" + list + " entries)";
    return std::string(name) + shown + " with strides (" + stride_list + ")";
  };
  // The element count: the product of the sizes.
  Index count = 1;
  for (int a = 0; a < axes; ++a) {
    const Index n = zero_as_one ? std::max<Index>(sizes[a], 1) : sizes[a];
    if (!mul(count, n, count)) {
      fail(api, what() + " has more elements than Eigen::Index can count (" + std::to_string(kIndexMax) +
                    (zero_as_one ? "; a size of 0 counts as 1 here)" : ")"));
    }
  }
  // The byte span: sum over axes of |stride| * max(size, 1) * element_bytes. An upper bound of
  // every offset the kernels and the overlap checks compute, in bytes.
  Index span = 0;
  const auto bytes = static_cast<Index>(element_bytes);
  for (int a = 0; a < axes; ++a) {
    Index reach = 0;
    const bool ok = strides[a] != std::numeric_limits<Index>::min() &&
                    mul(std::abs(strides[a]), std::max<Index>(sizes[a], 1), reach) && mul(reach, bytes, reach) &&
                    !__builtin_add_overflow(span, reach, &span);
    if (!ok) {
      fail(api, what() + " spans more bytes than Eigen::Index can count (" + std::to_string(kIndexMax) + ")");
    }
  }
}

void check_matrix_size(const char* api, const char* name, Index rows, Index cols, Index row_stride,
                       Index col_stride, std::size_t element_bytes) {
  if (rows < 0 || cols < 0) fail(api, std::string(name) + " has a negative size: " + shape(rows, cols));
  const Index sizes[2] = {rows, cols}, strides[2] = {row_stride, col_stride};
  check_view_size(api, name, 2, sizes, strides, element_bytes, false);
}

template <typename T>
void check_scratch(const char* api, Index dk, Index dv, Index tk) {
  for (const auto& [name, n] : {std::pair{"d_k", dk}, std::pair{"d_v", dv}, std::pair{"T_k", tk}}) {
    if (n > kMaxScratchRowLength<T>) {
      fail(api, std::string(name) + " = " + std::to_string(n) + " exceeds " + std::to_string(kMaxScratchRowLength<T>) +
                    ", the most the kernels' per-thread scratch (up to " + std::to_string(kScratchRows) + " rows of " +
                    name + " elements) can count in Eigen::Index");
    }
  }
}

template <typename T>
void check_window_and_softcap(const char* api, const Options& opt) {
  if (opt.window_left < -1 || opt.window_right < -1) {
    fail(api, "window sizes must be >= 0, or -1 for unbounded; got window_left = " +
                  std::to_string(opt.window_left) + ", window_right = " + std::to_string(opt.window_right));
  }
  const T cap = static_cast<T>(opt.softcap);
  if (!(opt.softcap >= 0) || !std::isfinite(opt.softcap) || !std::isfinite(cap) || (opt.softcap > 0 && !(cap > 0))) {
    std::ostringstream msg;
    msg.precision(17);
    msg << "softcap must be 0 (off) or finite and > 0 in the scalar type, got " << opt.softcap;
    fail(api, msg.str());
  }
}

template <typename T>
T resolve_scale(const char* api, const Options& opt, Index dk, const std::string& where) {
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
  if (dk == 0) {
    fail(api, "d_k is 0 (" + where + "), so the default scale 1/sqrt(d_k) is undefined; set Options::scale");
  }
  return static_cast<T>(1.0 / std::sqrt(static_cast<double>(dk)));
}

void check_threads(const char* api, const Options& opt) {
  if (opt.threads < 0) fail(api, "threads must be >= 0 (0 means all hardware threads), got " + std::to_string(opt.threads));
}

template <typename T>
Problem<T> make_problem(const char* api, const ConstStridedMap<T>& q, const ConstStridedMap<T>& k,
                        const ConstStridedMap<T>* v, const Options& opt) {
  if (q.cols() != k.cols()) {
    fail(api, "K has " + std::to_string(k.cols()) + " columns but Q has " + std::to_string(q.cols()) +
                  " (d_k must match); Q is " + shape(q.rows(), q.cols()) + ", K is " +
                  shape(k.rows(), k.cols()));
  }
  if (v != nullptr && v->rows() != k.rows()) {
    fail(api, "V has " + std::to_string(v->rows()) + " rows but K has " + std::to_string(k.rows()) +
                  " (T_k must match); K is " + shape(k.rows(), k.cols()) + ", V is " +
                  shape(v->rows(), v->cols()));
  }
  check_matrix_size(api, "Q", q);
  check_matrix_size(api, "K", k);
  if (v != nullptr) check_matrix_size(api, "V", *v);
  check_scratch<T>(api, q.cols(), v != nullptr ? v->cols() : 0, k.rows());
  const T scale = resolve_scale<T>(api, opt, q.cols(), "Q is " + shape(q.rows(), q.cols()));
  check_threads(api, opt);
  const ConstStridedMap<T> no_v(nullptr, 0, 0, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(0, 0));
  const Index offset =
      opt.alignment == CausalAlignment::BottomRight ? k.rows() - q.rows() : Index(0);
  check_window_and_softcap<T>(api, opt);
  return Problem<T>{q, k, v != nullptr ? *v : no_v, scale, opt.causal, offset,
                    static_cast<Index>(opt.window_left), static_cast<Index>(opt.window_right),
                    static_cast<T>(opt.softcap)};
}

template <typename T>
void check_output(const char* api, const char* name, const StridedMap<T>& out, Index rows,
                  Index cols) {
  if (out.rows() != rows || out.cols() != cols) {
    fail(api, std::string(name) + " is " + shape(out.rows(), out.cols()) + " but must be " +
                  shape(rows, cols));
  }
  check_matrix_size(api, name, out);
  if (rows == 0 || cols == 0) return;  // nothing is written
  // Two distinct elements must never share an address (a zero stride, or rows interleaved
  // into each other), or the results would overwrite each other.
  const Index rs = std::abs(out.outerStride()), cs = std::abs(out.innerStride());
  const bool rows_ok = rows <= 1 || (rs != 0 && (cols <= 1 || rs >= cols * cs || cs >= rows * rs));
  const bool cols_ok = cols <= 1 || cs != 0;
  if (!rows_ok || !cols_ok) {
    fail(api, std::string(name) + " (" + shape(rows, cols) + ") has strides " + std::to_string(rs) +
                  "," + std::to_string(cs) + " under which two of its elements share memory");
  }
}

void check_disjoint(const char* api, const char* out_name, const Region& out,
                    const char* other_name, const Region& other) {
  if (empty(out) || empty(other)) return;
  Index lo1, hi1, lo2, hi2;
  extent(out, lo1, hi1);
  extent(other, lo2, hi2);
  const char* a = out.data + lo1;
  const char* b = other.data + lo2;
  // Compare addresses as integers: the two views may lie in unrelated allocations.
  const auto ua = reinterpret_cast<std::uintptr_t>(a), ub = reinterpret_cast<std::uintptr_t>(b);
  const auto ea = ua + static_cast<std::uintptr_t>(hi1 - lo1), eb = ub + static_cast<std::uintptr_t>(hi2 - lo2);
  bool overlap = ua <= eb && ub <= ea;
  // Blocks of one parent matrix (equal, positive strides, one of them the element size) are
  // common, e.g. [Q | ATTN] side by side: decide those exactly, as rectangles in the parent.
  if (overlap && out.row_stride == other.row_stride && out.col_stride == other.col_stride &&
      out.row_stride > 0 && out.col_stride > 0) {
    const bool row_major = out.row_stride >= out.col_stride;
    const Index outer = row_major ? out.row_stride : out.col_stride;  // bytes between lines
    const Index inner = row_major ? out.col_stride : out.row_stride;  // bytes between elements
    const auto delta = static_cast<Index>(reinterpret_cast<std::uintptr_t>(other.data) -
                                          reinterpret_cast<std::uintptr_t>(out.data));
    const Index lines1 = row_major ? out.rows : out.cols, len1 = row_major ? out.cols : out.rows;
    const Index lines2 = row_major ? other.rows : other.cols, len2 = row_major ? other.cols : other.rows;
    if (len1 * inner <= outer && len2 * inner <= outer && outer % inner == 0 && delta % inner == 0) {
      // other starts at line dl, element de of out's coordinate system; with de in [0, outer),
      // or one line earlier with de - outer.
      Index dl = delta / outer, rem = delta % outer;
      if (rem < 0) { rem += outer; --dl; }
      const Index de = rem / inner, line_len = outer / inner;
      overlap = (intersect(0, lines1, dl, lines2) && intersect(0, len1, de, len2)) ||
                (intersect(0, lines1, dl + 1, lines2) && intersect(0, len1, de - line_len, len2));
    }
  }
  if (overlap) {
    fail(api, std::string("output ") + out_name + " (" + shape(out.rows, out.cols) +
                  ") overlaps " + other_name + " (" + shape(other.rows, other.cols) +
                  ") in memory; outputs must not alias inputs or each other");
  }
}

namespace {

template <class View>
std::string dims(const View& v) {
  return "[" + std::to_string(v.batch) + ", " + std::to_string(v.heads) + ", " + std::to_string(v.tokens) + ", " +
         std::to_string(v.dim) + "]";
}

// The element count and byte span of a 4-D view fit Eigen::Index (check_view_size; a size of
// 0 counts as 1, as the scheduler multiplies batch, heads and query tiles whatever dim is).
template <class View>
void check_extent(const char* api, const char* name, const View& v) {
  const Index sizes[4] = {v.batch, v.heads, v.tokens, v.dim};
  const Index strides[4] = {v.batch_stride, v.head_stride, v.token_stride, v.dim_stride};
  check_view_size(api, name, 4, sizes, strides, sizeof(*v.data), true);
}

template <class View>
void check_sizes(const char* api, const char* name, const View& v) {
  if (v.batch < 0 || v.heads < 0 || v.tokens < 0 || v.dim < 0) {
    fail(api, std::string(name) + " has a negative size: " + dims(v));
  }
  check_extent(api, name, v);
  if (v.data == nullptr && v.batch * v.heads * v.tokens * v.dim != 0) {
    fail(api, std::string(name) + " " + dims(v) + " has no data");
  }
}

template <class View>
void check_shape(const char* api, const char* name, const View& v, Index batch, Index heads, Index tokens,
                 Index dim, const char* what) {
  check_sizes(api, name, v);
  if (v.batch != batch || v.heads != heads || v.tokens != tokens || v.dim != dim) {
    fail(api, std::string(name) + " is " + dims(v) + " but must be [" + std::to_string(batch) + ", " +
                  std::to_string(heads) + ", " + std::to_string(tokens) + ", " + std::to_string(dim) + "] (" +
                  what + ")");
  }
}

template <class Element>
void check_broadcast(const char* api, const char* name, const BroadcastView<Element>& m, Index batch, Index heads,
                     Index tq, Index tk) {
  if (m.empty()) return;
  const bool batch_ok = m.batch == 1 || m.batch == batch, heads_ok = m.heads == 1 || m.heads == heads;
  if (!batch_ok || !heads_ok || m.rows != tq || m.cols != tk) {
    fail(api, std::string(name) + " is [" + std::to_string(m.batch) + ", " + std::to_string(m.heads) + ", " +
                  std::to_string(m.rows) + ", " + std::to_string(m.cols) + "] but must be [" +
                  std::to_string(batch) + " or 1, " + std::to_string(heads) + " or 1, " + std::to_string(tq) +
                  ", " + std::to_string(tk) + "]");
  }
  const HeadsView<const Element> as_view{m.data, m.batch, m.heads, m.rows, m.cols,
                                         m.batch_stride, m.head_stride, m.row_stride, m.col_stride};
  check_extent(api, name, as_view);
}

// The bytes a 4-D view may touch, for a conservative overlap test.
template <class View>
bool extent4(const View& v, std::uintptr_t& lo, std::uintptr_t& hi) {
  if (v.data == nullptr || v.batch * v.heads * v.tokens * v.dim == 0) return false;
  const Index size = static_cast<Index>(sizeof(*v.data));
  Index low = 0, high = 0;
  for (const auto& [n, stride] : {std::pair{v.batch, v.batch_stride}, std::pair{v.heads, v.head_stride},
                                 std::pair{v.tokens, v.token_stride}, std::pair{v.dim, v.dim_stride}}) {
    const Index reach = (n - 1) * stride * size;
    low += std::min<Index>(reach, 0);
    high += std::max<Index>(reach, 0);
  }
  lo = reinterpret_cast<std::uintptr_t>(v.data) + low;
  hi = reinterpret_cast<std::uintptr_t>(v.data) + high + size - 1;
  return true;
}

template <class A, class B>
void check_apart(const char* api, const char* a_name, const A& a, const char* b_name, const B& b) {
  // extent4's arithmetic must not overflow (a no-op for views already checked).
  check_extent(api, a_name, a);
  check_extent(api, b_name, b);
  std::uintptr_t a_lo, a_hi, b_lo, b_hi;
  if (!extent4(a, a_lo, a_hi) || !extent4(b, b_lo, b_hi)) return;
  if (a_lo <= b_hi && b_lo <= a_hi) {
    fail(api, std::string("output ") + a_name + " " + dims(a) + " overlaps " + b_name + " " + dims(b) +
                  " in memory; outputs must not alias inputs or each other");
  }
}

/// n contiguous elements as a 1 x 1 x 1 x n view, for check_apart.
template <typename Element>
HeadsView<Element> as_vector(Element* data, Index n) {
  return HeadsView<Element>{data, 1, 1, 1, n, 0, 0, 0, 1};
}

}  // namespace

template <typename T>
HeadsProblem<T> make_heads_problem(const char* api, HeadsView<const T> q, HeadsView<const T> k,
                                   HeadsView<const T> v, HeadsView<T> out, HeadsView<T> lse, HeadsView<T> scores,
                                   HeadsView<T> average, const Options& opt, const Masks<T>& masks,
                                   const std::int64_t* cu_q, const std::int64_t* cu_k, Index sequences) {
  check_sizes(api, "Q", q);
  check_sizes(api, "K", k);
  check_sizes(api, "V", v);
  const bool varlen = cu_q != nullptr || cu_k != nullptr;
  const Index B = varlen ? sequences : q.batch, H = q.heads;
  if (k.batch != q.batch || v.batch != q.batch) {
    fail(api, "batch sizes differ: Q is " + dims(q) + ", K is " + dims(k) + ", V is " + dims(v));
  }
  if (k.heads != v.heads) fail(api, "K and V have different head counts: K is " + dims(k) + ", V is " + dims(v));
  if (k.heads == 0 ? H != 0 : H % k.heads != 0) {
    fail(api, "query heads (" + std::to_string(H) + ") must be a multiple of key/value heads (" +
                  std::to_string(k.heads) + "); Q is " + dims(q) + ", K is " + dims(k));
  }
  if (k.tokens != v.tokens) {
    fail(api, "K and V have different token counts (T_k): K is " + dims(k) + ", V is " + dims(v));
  }
  if (q.dim != k.dim) {
    fail(api, "K has d_k = " + std::to_string(k.dim) + " but Q has " + std::to_string(q.dim) + "; Q is " + dims(q) +
                  ", K is " + dims(k));
  }
  check_scratch<T>(api, q.dim, v.dim, k.tokens);
  const T scale = resolve_scale<T>(api, opt, q.dim, "Q is " + dims(q));
  check_threads(api, opt);
  check_window_and_softcap<T>(api, opt);
  const Index tq = q.tokens, tk = k.tokens;
  if (!out.empty() || scores.empty()) check_shape(api, "out", out, q.batch, H, tq, v.dim, "[B, H, T_q, d_v]");
  if (!lse.empty()) check_shape(api, "lse", lse, q.batch, H, tq, 1, "[B, H, T_q, 1]");
  if (!scores.empty()) check_shape(api, "scores", scores, q.batch, H, tq, tk, "[B, H, T_q, T_k]");
  if (!average.empty()) {
    check_shape(api, "average_scores", average, q.batch, 1, tq, tk, "[B, 1, T_q, T_k]");
    if (scores.empty()) fail(api, "average_scores is the mean of the per-head scores, so scores must be given too");
  }
  if (varlen) {
    if (cu_q == nullptr || cu_k == nullptr) fail(api, "cu_seqlens_q and cu_seqlens_k must both be given");
    if (sequences < 0) fail(api, "the number of sequences is negative: " + std::to_string(sequences));
    if (sequences > kIndexMax / static_cast<Index>(sizeof(std::int64_t)) - 1) {
      fail(api, "the number of sequences, " + std::to_string(sequences) +
                    ", is too large: cu_seqlens of batch + 1 offsets would span more bytes than Eigen::Index can count");
    }
    if (q.batch != 1) fail(api, "a packed batch has batch size 1 in its views, but Q is " + dims(q));
    if (!masks.mask.empty() || !masks.bias.empty() || masks.key_lengths != nullptr) {
      fail(api, "a packed variable-length batch takes no mask, bias or key_lengths (ALiBi, causal and window apply)");
    }
    for (const auto& [name, cu, total] : {std::tuple{"cu_seqlens_q", cu_q, tq}, std::tuple{"cu_seqlens_k", cu_k, tk}}) {
      if (cu[0] != 0) fail(api, std::string(name) + "[0] is " + std::to_string(cu[0]) + " but must be 0");
      for (Index b = 0; b < sequences; ++b) {
        if (cu[b + 1] < cu[b]) {
          fail(api, std::string(name) + " decreases: [" + std::to_string(b) + "] = " + std::to_string(cu[b]) +
                        " > [" + std::to_string(b + 1) + "] = " + std::to_string(cu[b + 1]));
        }
      }
      if (cu[sequences] > total) {
        fail(api, std::string(name) + "[" + std::to_string(sequences) + "] = " + std::to_string(cu[sequences]) +
                      " exceeds the " + std::to_string(total) + " packed tokens");
      }
    }
  } else {
    check_broadcast(api, "mask", masks.mask, B, H, tq, tk);
    check_broadcast(api, "bias", masks.bias, B, H, tq, tk);
    if (masks.key_lengths != nullptr) {
      const Index sizes[1] = {B}, strides[1] = {1};
      check_view_size(api, "key_lengths", 1, sizes, strides, sizeof(std::int64_t), false);
      for (Index b = 0; b < B; ++b) {
        if (masks.key_lengths[b] < 0 || masks.key_lengths[b] > tk) {
          fail(api, "key_lengths[" + std::to_string(b) + "] = " + std::to_string(masks.key_lengths[b]) +
                        " is outside [0, T_k = " + std::to_string(tk) + "]");
        }
      }
    }
  }
  for (const auto& [name, view] : {std::pair{"out", out}, std::pair{"lse", lse}, std::pair{"scores", scores},
                                   std::pair{"average_scores", average}}) {
    check_apart(api, name, view, "Q", q);
    check_apart(api, name, view, "K", k);
    check_apart(api, name, view, "V", v);
  }
  // The masks are inputs too: an output must not write over them.
  const auto as_heads = [](const auto& m) {
    using Element = std::remove_pointer_t<decltype(m.data)>;
    return HeadsView<Element>{m.data, m.batch, m.heads, m.rows, m.cols,
                              m.batch_stride, m.head_stride, m.row_stride, m.col_stride};
  };
  for (const auto& [name, view] : {std::pair{"out", out}, std::pair{"lse", lse}, std::pair{"scores", scores},
                                   std::pair{"average_scores", average}}) {
    if (!masks.mask.empty()) check_apart(api, name, view, "mask", as_heads(masks.mask));
    if (!masks.bias.empty()) check_apart(api, name, view, "bias", as_heads(masks.bias));
    if (masks.alibi_slopes != nullptr) check_apart(api, name, view, "alibi_slopes", as_vector(masks.alibi_slopes, H));
    if (masks.key_lengths != nullptr) check_apart(api, name, view, "key_lengths", as_vector(masks.key_lengths, B));
    if (cu_q != nullptr) check_apart(api, name, view, "cu_seqlens_q", as_vector(cu_q, B + 1));
    if (cu_k != nullptr) check_apart(api, name, view, "cu_seqlens_k", as_vector(cu_k, B + 1));
  }
  check_apart(api, "out", out, "lse", lse);
  check_apart(api, "out", out, "scores", scores);
  check_apart(api, "lse", lse, "scores", scores);
  check_apart(api, "average_scores", average, "scores", scores);
  check_apart(api, "average_scores", average, "out", out);
  check_apart(api, "average_scores", average, "lse", lse);

  HeadsProblem<T> p;
  p.q = q;
  p.k = k;
  p.v = v;
  p.out = out;
  p.lse = lse;
  p.scores = scores;
  p.masks = masks;
  p.scale = scale;
  p.causal = opt.causal;
  p.bottom_right = opt.alignment == CausalAlignment::BottomRight;
  p.window_left = opt.window_left;
  p.window_right = opt.window_right;
  p.softcap = static_cast<T>(opt.softcap);
  p.cu_q = cu_q;
  p.cu_k = cu_k;
  p.sequences = B;
  return p;
}

template <typename T>
void check_merge(const char* api, HeadsView<const T> out_a, HeadsView<const T> lse_a, HeadsView<const T> out_b,
                 HeadsView<const T> lse_b, HeadsView<T> out, HeadsView<T> lse) {
  const auto same_shape = [&](const char* a_name, const auto& a, const char* b_name, const auto& b) {
    check_sizes(api, a_name, a);
    if (a.batch != b.batch || a.heads != b.heads || a.tokens != b.tokens || a.dim != b.dim) {
      fail(api, std::string(a_name) + " is " + dims(a) + " but " + b_name + " is " + dims(b));
    }
  };
  check_sizes(api, "out_a", out_a);
  same_shape("out_b", out_b, "out_a", out_a);
  same_shape("out", out, "out_a", out_a);
  check_shape(api, "lse_a", lse_a, out_a.batch, out_a.heads, out_a.tokens, 1, "[B, H, T, 1]");
  same_shape("lse_b", lse_b, "lse_a", lse_a);
  same_shape("lse", lse, "lse_a", lse_a);
  // An output may be exactly one of the inputs (merging in place) or apart from all of them: a
  // partial overlap would read values already overwritten.
  const auto alias_or_apart = [&](const char* out_name, const auto& o, const char* in_name, const auto& in) {
    const bool same = static_cast<const void*>(o.data) == static_cast<const void*>(in.data) &&
                      o.batch_stride == in.batch_stride && o.head_stride == in.head_stride &&
                      o.token_stride == in.token_stride && o.dim_stride == in.dim_stride && o.dim == in.dim;
    if (!same) check_apart(api, out_name, o, in_name, in);
  };
  for (const auto& [in_name, in] : {std::pair{"out_a", out_a}, std::pair{"lse_a", lse_a}, std::pair{"out_b", out_b},
                                    std::pair{"lse_b", lse_b}}) {
    alias_or_apart("out", out, in_name, in);
    alias_or_apart("lse", lse, in_name, in);
  }
  check_apart(api, "out", out, "lse", lse);
}

std::vector<Index> varlen_score_offsets(const char* api, const std::int64_t* cu_q, const std::int64_t* cu_k,
                                        Index batch, Index heads) {
  if (cu_q == nullptr || cu_k == nullptr) fail(api, "cu_seqlens_q and cu_seqlens_k must both be given");
  if (batch < 0) fail(api, "the number of sequences is negative: " + std::to_string(batch));
  if (heads < 0) fail(api, "the number of heads is negative: " + std::to_string(heads));
  if (batch > kIndexMax / static_cast<Index>(sizeof(std::int64_t)) - 1) {
    fail(api, "the number of sequences, " + std::to_string(batch) +
                  ", is too large: cu_seqlens of batch + 1 offsets would span more bytes than Eigen::Index can count");
  }
  std::vector<Index> offsets(static_cast<std::size_t>(batch) + 1, 0);
  for (const auto& [name, cu] : {std::pair{"cu_seqlens_q", cu_q}, std::pair{"cu_seqlens_k", cu_k}}) {
    if (cu[0] != 0) fail(api, std::string(name) + "[0] is " + std::to_string(cu[0]) + " but must be 0");
    for (Index b = 0; b < batch; ++b) {
      if (cu[b + 1] < cu[b]) {
        fail(api, std::string(name) + " decreases: [" + std::to_string(b) + "] = " + std::to_string(cu[b]) +
                      " > [" + std::to_string(b + 1) + "] = " + std::to_string(cu[b + 1]));
      }
    }
  }
  for (Index b = 0; b < batch; ++b) {
    const Index tq = cu_q[b + 1] - cu_q[b], tk = cu_k[b + 1] - cu_k[b];
    Index block = 0, next = 0;
    if (__builtin_mul_overflow(tq, tk, &block) || __builtin_mul_overflow(block, heads, &block) ||
        __builtin_add_overflow(offsets[b], block, &next)) {
      fail(api, "the packed weights of " + std::to_string(batch) + " sequences overflow Eigen::Index at sequence " +
                    std::to_string(b) + " (T_q = " + std::to_string(tq) + ", T_k = " + std::to_string(tk) +
                    ", heads = " + std::to_string(heads) + ")");
    }
    offsets[b + 1] = next;
  }
  return offsets;
}

template <typename T>
void check_packed_scores(const char* api, const T* scores, std::size_t size, std::size_t required,
                         const HeadsProblem<T>& p) {
  if (size != required) {
    fail(api, "scores holds " + std::to_string(size) + " elements but the packed weights need " +
                  std::to_string(required) + " (varlen_scores_size)");
  }
  if (required > 0 && scores == nullptr) fail(api, "scores is null");
  const HeadsView<const T> packed = as_vector(scores, static_cast<Index>(required));
  check_apart(api, "scores", packed, "Q", p.q);
  check_apart(api, "scores", packed, "K", p.k);
  check_apart(api, "scores", packed, "V", p.v);
  check_apart(api, "scores", packed, "out", HeadsView<const T>(p.out));
  check_apart(api, "scores", packed, "lse", HeadsView<const T>(p.lse));
  check_apart(api, "scores", packed, "cu_seqlens_q", as_vector(p.cu_q, p.sequences + 1));
  check_apart(api, "scores", packed, "cu_seqlens_k", as_vector(p.cu_k, p.sequences + 1));
  if (p.masks.alibi_slopes != nullptr) {
    check_apart(api, "scores", packed, "alibi_slopes", as_vector(p.masks.alibi_slopes, p.q.heads));
  }
}

#define EIGEN_ATTENTION_INSTANTIATE(T)                                                       \
  template Problem<T> make_problem<T>(const char*, const ConstStridedMap<T>&,                \
                                      const ConstStridedMap<T>&, const ConstStridedMap<T>*,  \
                                      const Options&);                                       \
  template void check_output<T>(const char*, const char*, const StridedMap<T>&, Index, Index); \
  template void check_scratch<T>(const char*, Index, Index, Index);                         \
  template void check_window_and_softcap<T>(const char*, const Options&);                   \
  template HeadsProblem<T> make_heads_problem<T>(                                              \
      const char*, HeadsView<const T>, HeadsView<const T>, HeadsView<const T>, HeadsView<T>, HeadsView<T>, \
      HeadsView<T>, HeadsView<T>, const Options&, const Masks<T>&, const std::int64_t*, const std::int64_t*, \
      Index);                                                                                   \
  template void check_packed_scores<T>(const char*, const T*, std::size_t, std::size_t, const HeadsProblem<T>&); \
  template void check_merge<T>(const char*, HeadsView<const T>, HeadsView<const T>, HeadsView<const T>,         \
                               HeadsView<const T>, HeadsView<T>, HeadsView<T>);
EIGEN_ATTENTION_INSTANTIATE(float)
EIGEN_ATTENTION_INSTANTIATE(double)
#undef EIGEN_ATTENTION_INSTANTIATE

}  // namespace internal

namespace compiled {

// Declared in Compiled.hpp: the size check of a by-value result, before the caller allocates it.
void check_result_size(const char* api, const char* name, const char* what, std::ptrdiff_t rows,
                       std::ptrdiff_t cols, std::size_t element_bytes, std::ptrdiff_t max_elements) {
  using internal::fail;
  using internal::kIndexMax;
  using internal::mul;
  using internal::shape;
  internal::Index bytes = 0, count = 0;
  if (rows < 0 || cols < 0)
    fail(api, std::string(name) + " (" + what + ") would have a negative size: " + shape(rows, cols));
  if (!mul(rows, cols, count) || !mul(count, static_cast<internal::Index>(element_bytes), bytes)) {
    fail(api, std::string(name) + " (" + what + ") would be " + shape(rows, cols) + " elements of " +
                  std::to_string(element_bytes) + " bytes, more than Eigen::Index can count (" +
                  std::to_string(kIndexMax) + " bytes)");
  }
  if (count > max_elements) {
    fail(api, std::string(name) + " (" + what + ") would be " + shape(rows, cols) + " elements, more than " +
                  "the caller's Eigen::Index can count (" + std::to_string(max_elements) + ")");
  }
}

}  // namespace compiled
}  // namespace EigenAttention
