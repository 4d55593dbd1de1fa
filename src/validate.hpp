// Argument validation: the one place where user input is checked. Internal to the library.
#pragma once

#include <EigenAttention/Options.hpp>
#include <EigenAttention/Types.hpp>

#include "problem.hpp"

namespace EigenAttention {
namespace internal {

/// Checks Q, K and (when given) V against each other and opt; returns the resolved problem.
/// `api` names the public call in error messages. Throws std::invalid_argument.
template <typename T>
Problem<T> make_problem(const char* api, const ConstStridedMap<T>& q, const ConstStridedMap<T>& k,
                        const ConstStridedMap<T>* v, const Options& opt);

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
