// Argument validation: every check on user input lives here.
#include "validate.hpp"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

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

}  // namespace

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
  double scale = 0;
  if (opt.scale.has_value()) {
    scale = *opt.scale;
    const T as_t = static_cast<T>(scale);
    if (!std::isfinite(scale) || !(scale > 0) || !std::isfinite(as_t) || !(as_t > 0)) {
      std::ostringstream msg;
      msg.precision(17);
      msg << "scale must be finite and > 0 in the scalar type, got " << scale;
      fail(api, msg.str());
    }
  } else {
    if (q.cols() == 0) {
      fail(api, "d_k is 0 (Q is " + shape(q.rows(), q.cols()) +
                    "), so the default scale 1/sqrt(d_k) is undefined; set Options::scale");
    }
    scale = 1.0 / std::sqrt(static_cast<double>(q.cols()));
  }
  if (opt.threads < 0) fail(api, "threads must be >= 0 (0 means all hardware threads), got " + std::to_string(opt.threads));
  const ConstStridedMap<T> no_v(nullptr, 0, 0, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(0, 0));
  const Index offset =
      opt.alignment == CausalAlignment::BottomRight ? k.rows() - q.rows() : Index(0);
  return Problem<T>{q, k, v != nullptr ? *v : no_v, static_cast<T>(scale), opt.causal, offset};
}

template <typename T>
void check_output(const char* api, const char* name, const StridedMap<T>& out, Index rows,
                  Index cols) {
  if (out.rows() != rows || out.cols() != cols) {
    fail(api, std::string(name) + " is " + shape(out.rows(), out.cols()) + " but must be " +
                  shape(rows, cols));
  }
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

#define EIGEN_ATTENTION_INSTANTIATE(T)                                                       \
  template Problem<T> make_problem<T>(const char*, const ConstStridedMap<T>&,                \
                                      const ConstStridedMap<T>&, const ConstStridedMap<T>*,  \
                                      const Options&);                                       \
  template void check_output<T>(const char*, const char*, const StridedMap<T>&, Index, Index);
EIGEN_ATTENTION_INSTANTIATE(float)
EIGEN_ATTENTION_INSTANTIATE(double)
#undef EIGEN_ATTENTION_INSTANTIATE

}  // namespace internal
}  // namespace EigenAttention
