// The compiled single-head entry points (Compiled.hpp): validate once, pick the kernel, run it.
// (compiled::check_result_size is in validate.cpp with the other checks, and
// compiled::prefer_huge_pages in huge_pages.cpp.)
// What arrives is plain views (MatrixView); the by-value results are allocated by the inline
// functions of Compiled.hpp, in the caller's translation unit.
#include <EigenAttention/Compiled.hpp>

#include <initializer_list>
#include <utility>

#include "kernel.hpp"
#include "validate.hpp"

namespace EigenAttention {
namespace compiled {
namespace {

using internal::Index;
using internal::Problem;
using internal::Region;
using internal::region_of;

using Strides = Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>;

// A view as the library's Eigen map, once its sizes and strides are known to be countable (a
// negative size or an overflowing span throws, naming `name`, before any Map is formed).
template <typename T>
ConstStridedMap<T> input_map(const char* api, const char* name, MatrixView<const T> m) {
  internal::check_matrix_size(api, name, m.rows, m.cols, m.row_stride, m.col_stride, sizeof(T));
  return ConstStridedMap<T>(m.data, m.rows, m.cols, Strides(m.row_stride, m.col_stride));
}

template <typename T>
StridedMap<T> output_map(const char* api, const char* name, MatrixView<T> m) {
  internal::check_matrix_size(api, name, m.rows, m.cols, m.row_stride, m.col_stride, sizeof(T));
  return StridedMap<T>(m.data, m.rows, m.cols, Strides(m.row_stride, m.col_stride));
}

using Named = std::pair<const char*, Region>;

// Every output must be disjoint from every input and every other output.
void check_all_disjoint(const char* api, std::initializer_list<Named> outputs,
                        std::initializer_list<Named> inputs) {
  for (auto out = outputs.begin(); out != outputs.end(); ++out) {
    for (const Named& in : inputs) internal::check_disjoint(api, out->first, out->second, in.first, in.second);
    for (auto other = out + 1; other != outputs.end(); ++other) {
      internal::check_disjoint(api, out->first, out->second, other->first, other->second);
    }
  }
}

// The checked problem of Q, K and, when given, V (its maps are the library's views of them), and
// the kernel it runs on. Everything validate() promises is checked here.
template <typename T>
std::pair<Problem<T>, Kernel> checked_problem(const char* api, MatrixView<const T> q, MatrixView<const T> k,
                                              const MatrixView<const T>* v, const Options& opt) {
  const ConstStridedMap<T> qm = input_map(api, "Q", q), km = input_map(api, "K", k);
  const ConstStridedMap<T> vm =
      v != nullptr ? input_map(api, "V", *v) : ConstStridedMap<T>(nullptr, 0, 0, Strides(0, 0));
  Problem<T> p = internal::make_problem(api, qm, km, v != nullptr ? &vm : nullptr, opt);
  return {p, internal::resolve_kernel(api, opt.kernel)};
}

// Validates everything (inputs, options, output shapes, overlaps), then runs the one problem,
// writing the outputs that are not null.
template <typename T>
void run_views(const char* api, MatrixView<const T> q, MatrixView<const T> k, const MatrixView<const T>* v,
               const MatrixView<T>* scores, const MatrixView<T>* attn, const MatrixView<T>* lse, const Options& opt) {
  if (scores == nullptr && attn == nullptr) {
    throw std::invalid_argument(std::string("EigenAttention::") + api + ": neither SCORES nor ATTN is asked for");
  }
  if (attn != nullptr && v == nullptr) {
    throw std::invalid_argument(std::string("EigenAttention::") + api + ": ATTN is asked for without V");
  }
  const auto [p, kernel] = checked_problem(api, q, k, v, opt);
  const char* attn_name = scores != nullptr ? "attn" : "out";
  // Maps are bound once (assigning one Map to another would copy elements).
  const auto bind = [&](const MatrixView<T>* m, const char* name) {
    return m != nullptr ? output_map(api, name, *m) : StridedMap<T>(nullptr, 0, 0, Strides(0, 0));
  };
  StridedMap<T> s = bind(scores, "scores"), a = bind(attn, attn_name), l = bind(lse, "lse");
  const Region none{nullptr, 0, 0, 0, 0};
  if (scores != nullptr) internal::check_output(api, "scores", s, p.tq(), p.tk());
  if (attn != nullptr) internal::check_output(api, attn_name, a, p.tq(), p.dv());
  if (lse != nullptr) internal::check_output(api, "lse", l, p.tq(), 1);
  const Region sr = scores != nullptr ? region_of(s) : none, ar = attn != nullptr ? region_of(a) : none,
               lr = lse != nullptr ? region_of(l) : none;
  check_all_disjoint(api, {{"scores", sr}, {attn_name, ar}, {"lse", lr}},
                     {{"Q", region_of(p.q)}, {"K", region_of(p.k)}, {"V", region_of(p.v)}});
  const internal::RawProblem<T> raw = internal::to_raw(p, scores != nullptr ? &s : nullptr,
                                                       attn != nullptr ? &a : nullptr, lse != nullptr ? &l : nullptr);
  internal::run_problems<T>(kernel, 1, p.tq(), [&](internal::index_t) { return raw; }, opt.threads);
}

}  // namespace

void validate(const char* api, MatrixView<const float> q, MatrixView<const float> k, const MatrixView<const float>* v,
              const Options& opt) {
  checked_problem(api, q, k, v, opt);
}
void validate(const char* api, MatrixView<const double> q, MatrixView<const double> k,
              const MatrixView<const double>* v, const Options& opt) {
  checked_problem(api, q, k, v, opt);
}

void run(const char* api, MatrixView<const float> q, MatrixView<const float> k, const MatrixView<const float>* v,
         const MatrixView<float>* scores, const MatrixView<float>* attn, const MatrixView<float>* lse,
         const Options& opt) {
  run_views(api, q, k, v, scores, attn, lse, opt);
}
void run(const char* api, MatrixView<const double> q, MatrixView<const double> k, const MatrixView<const double>* v,
         const MatrixView<double>* scores, const MatrixView<double>* attn, const MatrixView<double>* lse,
         const Options& opt) {
  run_views(api, q, k, v, scores, attn, lse, opt);
}

}  // namespace compiled
}  // namespace EigenAttention
