// Argument validation: the one place where user input is checked. Internal to the library.
#pragma once

#include <EigenAttention/Options.hpp>

#include <cstddef>
#include <cstdint>
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

/// Throws std::invalid_argument unless `out` is rows x cols and no two of its elements share
/// memory. `name` is the output's name in messages ("out", "scores", ...).
template <typename T>
void check_output(const char* api, const char* name, const StridedMap<T>& out, Index rows,
                  Index cols);

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
