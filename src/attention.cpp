// The compiled entry points (Compiled.hpp): validate once, pick the kernel, run it.
#include <EigenAttention/Compiled.hpp>

#include <initializer_list>
#include <utility>

#include "huge_pages.hpp"
#include "kernel.hpp"
#include "validate.hpp"

namespace EigenAttention {
namespace compiled {
namespace {

using internal::Index;
using internal::Problem;
using internal::Region;
using internal::region_of;

template <typename T>
StridedMap<T> view_of(RowMatrix<T>& m) {
  return StridedMap<T>(m.data(), m.rows(), m.cols(), Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(m.cols(), 1));
}

template <typename T>
StridedMap<T> view_of(Vector<T>& v) {
  return StridedMap<T>(v.data(), v.rows(), 1, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(1, 1));
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

// Runs one problem, writing the outputs that are not null.
template <typename T>
void run(Kernel kernel, const Problem<T>& p, StridedMap<T>* scores, StridedMap<T>* attn, StridedMap<T>* lse,
         int threads) {
  const internal::RawProblem<T> raw = internal::to_raw(p, scores, attn, lse);
  internal::run_problems<T>(kernel, 1, p.tq(), [&](internal::index_t) { return raw; }, threads);
}

}  // namespace

template <typename T>
void validate(const char* api, const ConstStridedMap<T>& q, const ConstStridedMap<T>& k,
              const ConstStridedMap<T>* v, const Options& opt) {
  internal::make_problem(api, q, k, v, opt);
  internal::resolve_kernel(api, opt.kernel);
}

template <typename T>
RowMatrix<T> attention(const ConstStridedMap<T>& q, const ConstStridedMap<T>& k,
                       const ConstStridedMap<T>& v, const Options& opt) {
  const char* api = "attention";
  const Problem<T> p = internal::make_problem(api, q, k, &v, opt);
  const Kernel kernel = internal::resolve_kernel(api, opt.kernel);
  internal::check_result_size<T>(api, "ATTN", "T_q x d_v", p.tq(), p.dv());
  RowMatrix<T> attn(p.tq(), p.dv());
  StridedMap<T> a = view_of(attn);
  run<T>(kernel, p, nullptr, &a, nullptr, opt.threads);
  return attn;
}

template <typename T>
void attention_into(const ConstStridedMap<T>& q, const ConstStridedMap<T>& k,
                    const ConstStridedMap<T>& v, const StridedMap<T>& out,
                    const StridedMap<T>* lse, const Options& opt) {
  const char* api = "attention_into";
  const Problem<T> p = internal::make_problem(api, q, k, &v, opt);
  const Kernel kernel = internal::resolve_kernel(api, opt.kernel);
  internal::check_output(api, "out", out, p.tq(), p.dv());
  if (lse != nullptr) internal::check_output(api, "lse", *lse, p.tq(), 1);
  const Region none{nullptr, 0, 0, 0, 0};
  check_all_disjoint(api, {{"out", region_of(out)}, {"lse", lse ? region_of(*lse) : none}},
                     {{"Q", region_of(q)}, {"K", region_of(k)}, {"V", region_of(v)}});
  StridedMap<T> a = out;
  StridedMap<T> l = lse != nullptr ? *lse : out;
  run<T>(kernel, p, nullptr, &a, lse != nullptr ? &l : nullptr, opt.threads);
}

template <typename T>
DecomposedResult<T> attention_decomposed(const ConstStridedMap<T>& q, const ConstStridedMap<T>& k,
                                         const ConstStridedMap<T>& v, const Options& opt) {
  const char* api = "attention_decomposed";
  const Problem<T> p = internal::make_problem(api, q, k, &v, opt);
  const Kernel kernel = internal::resolve_kernel(api, opt.kernel);
  internal::check_result_size<T>(api, "SCORES", "T_q x T_k", p.tq(), p.tk());
  internal::check_result_size<T>(api, "ATTN", "T_q x d_v", p.tq(), p.dv());
  internal::check_result_size<T>(api, "LSE", "T_q x 1", p.tq(), 1);
  DecomposedResult<T> r{RowMatrix<T>(p.tq(), p.tk()), RowMatrix<T>(p.tq(), p.dv()), Vector<T>(p.tq())};
  internal::prefer_huge_pages(r.scores.data(), r.scores.size() * sizeof(T));
  StridedMap<T> s = view_of(r.scores), a = view_of(r.attn), l = view_of(r.lse);
  run<T>(kernel, p, &s, &a, &l, opt.threads);
  return r;
}

template <typename T>
void attention_decomposed_into(const ConstStridedMap<T>& q, const ConstStridedMap<T>& k,
                               const ConstStridedMap<T>& v, const StridedMap<T>& scores,
                               const StridedMap<T>& attn, const StridedMap<T>* lse,
                               const Options& opt) {
  const char* api = "attention_decomposed_into";
  const Problem<T> p = internal::make_problem(api, q, k, &v, opt);
  const Kernel kernel = internal::resolve_kernel(api, opt.kernel);
  internal::check_output(api, "scores", scores, p.tq(), p.tk());
  internal::check_output(api, "attn", attn, p.tq(), p.dv());
  if (lse != nullptr) internal::check_output(api, "lse", *lse, p.tq(), 1);
  const Region none{nullptr, 0, 0, 0, 0};
  check_all_disjoint(api,
                     {{"scores", region_of(scores)}, {"attn", region_of(attn)},
                      {"lse", lse ? region_of(*lse) : none}},
                     {{"Q", region_of(q)}, {"K", region_of(k)}, {"V", region_of(v)}});
  StridedMap<T> s = scores, a = attn;
  StridedMap<T> l = lse != nullptr ? *lse : attn;
  run<T>(kernel, p, &s, &a, lse != nullptr ? &l : nullptr, opt.threads);
}

template <typename T>
RowMatrix<T> attention_scores(const ConstStridedMap<T>& q, const ConstStridedMap<T>& k,
                              const Options& opt) {
  const char* api = "attention_scores";
  const Problem<T> p = internal::make_problem<T>(api, q, k, nullptr, opt);
  const Kernel kernel = internal::resolve_kernel(api, opt.kernel);
  internal::check_result_size<T>(api, "SCORES", "T_q x T_k", p.tq(), p.tk());
  RowMatrix<T> scores(p.tq(), p.tk());
  internal::prefer_huge_pages(scores.data(), scores.size() * sizeof(T));
  StridedMap<T> s = view_of(scores);
  run<T>(kernel, p, &s, nullptr, nullptr, opt.threads);
  return scores;
}

template <typename T>
void attention_scores_into(const ConstStridedMap<T>& q, const ConstStridedMap<T>& k,
                           const StridedMap<T>& scores, const StridedMap<T>* lse,
                           const Options& opt) {
  const char* api = "attention_scores_into";
  const Problem<T> p = internal::make_problem<T>(api, q, k, nullptr, opt);
  const Kernel kernel = internal::resolve_kernel(api, opt.kernel);
  internal::check_output(api, "scores", scores, p.tq(), p.tk());
  if (lse != nullptr) internal::check_output(api, "lse", *lse, p.tq(), 1);
  const Region none{nullptr, 0, 0, 0, 0};
  check_all_disjoint(api, {{"scores", region_of(scores)}, {"lse", lse ? region_of(*lse) : none}},
                     {{"Q", region_of(q)}, {"K", region_of(k)}});
  StridedMap<T> s = scores;
  StridedMap<T> l = lse != nullptr ? *lse : scores;
  run<T>(kernel, p, &s, nullptr, lse != nullptr ? &l : nullptr, opt.threads);
}

#define EIGEN_ATTENTION_INSTANTIATE(T)                                                            \
  template void validate<T>(const char*, const ConstStridedMap<T>&, const ConstStridedMap<T>&,    \
                            const ConstStridedMap<T>*, const Options&);                           \
  template RowMatrix<T> attention<T>(const ConstStridedMap<T>&, const ConstStridedMap<T>&,        \
                                     const ConstStridedMap<T>&, const Options&);                  \
  template void attention_into<T>(const ConstStridedMap<T>&, const ConstStridedMap<T>&,           \
                                  const ConstStridedMap<T>&, const StridedMap<T>&,                \
                                  const StridedMap<T>*, const Options&);                          \
  template DecomposedResult<T> attention_decomposed<T>(                                           \
      const ConstStridedMap<T>&, const ConstStridedMap<T>&, const ConstStridedMap<T>&, const Options&); \
  template void attention_decomposed_into<T>(const ConstStridedMap<T>&, const ConstStridedMap<T>&, \
                                             const ConstStridedMap<T>&, const StridedMap<T>&,     \
                                             const StridedMap<T>&, const StridedMap<T>*,          \
                                             const Options&);                                     \
  template RowMatrix<T> attention_scores<T>(const ConstStridedMap<T>&, const ConstStridedMap<T>&, \
                                            const Options&);                                      \
  template void attention_scores_into<T>(const ConstStridedMap<T>&, const ConstStridedMap<T>&,    \
                                         const StridedMap<T>&, const StridedMap<T>*, const Options&);
EIGEN_ATTENTION_INSTANTIATE(float)
EIGEN_ATTENTION_INSTANTIATE(double)
#undef EIGEN_ATTENTION_INSTANTIATE

}  // namespace compiled
}  // namespace EigenAttention
