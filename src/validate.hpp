// Argument validation: the one place where user input is checked. Internal to the library.
#pragma once

#include <EigenAttention/Options.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>
#include <EigenAttention/Types.hpp>

#include "heads_problem.hpp"
#include "problem.hpp"

namespace EigenAttention {
namespace internal {

/// Checks Q, K and (when given) V against each other and opt; returns the resolved problem.
/// `api` names the public call in error messages. Throws std::invalid_argument.
template <typename T>
Problem<T> make_problem(const char* api, const ConstStridedMap<T>& q, const ConstStridedMap<T>& k,
                        const ConstStridedMap<T>* v, const Options& opt);

/// Checks a batched multi-head call (attention_heads*, or attention_varlen when cu_q/cu_k are
/// given) and returns the resolved problem. Empty output views mean "not wanted" (but `out` is
/// required unless `scores` is given). Throws std::invalid_argument naming the sizes at fault.
template <typename T>
HeadsProblem<T> make_heads_problem(const char* api, HeadsView<const T> q, HeadsView<const T> k,
                                   HeadsView<const T> v, HeadsView<T> out, HeadsView<T> lse, HeadsView<T> scores,
                                   HeadsView<T> average, const Options& opt, const Masks<T>& masks,
                                   const std::int64_t* cu_q, const std::int64_t* cu_k, Index sequences);

/// Offsets of each sequence's packed weights (attention_varlen_decomposed), batch + 1 of them,
/// the last being the size `scores` must have. Checks the cu_seqlens offsets (non-decreasing
/// from 0) first. Throws std::invalid_argument.
std::vector<Index> varlen_score_offsets(const char* api, const std::int64_t* cu_q, const std::int64_t* cu_k,
                                        Index batch, Index heads);

/// Throws std::invalid_argument unless the packed `scores` (size elements of `bytes_each`) has
/// the required size and lies apart from the problem's inputs and outputs.
template <typename T>
void check_packed_scores(const char* api, const T* scores, std::size_t size, std::size_t required,
                         const HeadsProblem<T>& p);

/// merge_attention's checks: equal shapes, LSE [B, H, T, 1], and outputs that are either the
/// very views of an input (merging in place) or apart from every input and each other.
template <typename T>
void check_merge(const char* api, HeadsView<const T> out_a, HeadsView<const T> lse_a, HeadsView<const T> out_b,
                 HeadsView<const T> lse_b, HeadsView<T> out, HeadsView<T> lse);

/// Throws std::invalid_argument for a window size below -1 or a softcap that is negative,
/// not finite, or 0 once converted to T.
template <typename T>
void check_window_and_softcap(const char* api, const Options& opt);

/// Throws std::invalid_argument unless `out` is rows x cols, its element count and byte span are
/// representable (check_view_size), and no two of its elements share memory. `name` is the
/// output's name in messages ("out", "scores", ...).
template <typename T>
void check_output(const char* api, const char* name, const StridedMap<T>& out, Index rows,
                  Index cols);

/// Size limits. Every size check runs before anything is allocated or any input is read, and
/// throws std::invalid_argument naming the sizes (with __builtin_mul_overflow: nothing here may
/// overflow while checking). What is rejected:
/// - a view (input or output, 2-D or a HeadsView, mask, bias, vector) whose element count, or
///   whose byte span sum over axes of |stride| * size * sizeof(element) (a size of 0 counting
///   as 1), does not fit Eigen::Index: no pointer arithmetic on it could be valid;
/// - a by-value result (rows x cols elements of T, allocated by the caller's inline code) whose
///   bytes do not fit Eigen::Index, or whose elements do not fit the caller's Eigen::Index
///   (compiled::check_result_size); one that fits but cannot be had surfaces as Eigen's
///   std::bad_alloc;
/// - d_k, d_v or T_k above kMaxScratchRowLength<T>: the tiled kernels' per-thread scratch holds
///   fewer than kScratchRows rows of max(d_k, d_v) elements (and the decomposed call's, rows of
///   T_k), plus constants below kScratchRows^2, and that count must stay representable
///   (tiled_kernel.hpp: kRows + 2 kCols + ... is far below kScratchRows). T_k is checked for
///   every call alike.
// kScratchRows is in kernel_abi.hpp, where the kernels check their tiles against it.
template <typename T>
constexpr Index kMaxScratchRowLength =
    std::numeric_limits<Index>::max() / (kScratchRows * static_cast<Index>(sizeof(T))) - kScratchRows;

/// Throws std::invalid_argument unless a strided view of sizes[i] elements with strides[i]
/// (in elements of `element_bytes`) along `axes` axes is countable: the product of the sizes
/// (a 0 counting as 1 when `zero_as_one`, as the 4-D views' partial products are used by the
/// scheduler) and the byte span fit Eigen::Index. The message names the view (`name`), its
/// sizes and strides. Allocates nothing unless it throws.
void check_view_size(const char* api, const char* name, int axes, const Index* sizes, const Index* strides,
                     std::size_t element_bytes, bool zero_as_one);

/// check_view_size for a 2-D strided view (Q, K, V or a single-head output), named with its shape.
void check_matrix_size(const char* api, const char* name, Index rows, Index cols, Index row_stride,
                       Index col_stride, std::size_t element_bytes);
template <class Map>
void check_matrix_size(const char* api, const char* name, const Map& m) {
  check_matrix_size(api, name, m.rows(), m.cols(), m.outerStride(), m.innerStride(), sizeof(typename Map::Scalar));
}

/// Throws std::invalid_argument when d_k, d_v or T_k exceeds kMaxScratchRowLength<T>.
template <typename T>
void check_scratch(const char* api, Index dk, Index dv, Index tk);

/// The memory a strided view covers, for overlap checks.
struct Region {
  const char* data;  // first element, as bytes
  Index rows, cols;
  Index row_stride, col_stride;  // in bytes
};

template <class Map>
Region region_of(const Map& m) {
  using T = typename Map::Scalar;
  const auto bytes = static_cast<Index>(sizeof(T));
  return {reinterpret_cast<const char*>(m.data()), m.rows(), m.cols(), m.outerStride() * bytes,
          m.innerStride() * bytes};
}

/// Throws std::invalid_argument when output `out` may share memory with `other` (an input or
/// another output). Exact for views of one parent matrix (same strides); conservative otherwise.
void check_disjoint(const char* api, const char* out_name, const Region& out,
                    const char* other_name, const Region& other);

}  // namespace internal
}  // namespace EigenAttention
