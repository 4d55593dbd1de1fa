// SPDX-License-Identifier: MIT
// Results are bitwise identical from call to call (whatever the timing of the messages) and for
// every Options::threads, forward and backward, for both methods and every split.
#include "problem.hpp"

namespace ea_mpi {
namespace test_determinism {
namespace {

template <class T>
bool same_bits(const Run<T>& a, const Run<T>& b) {
  return a.out.bitwise_equal(b.out) && a.lse.bitwise_equal(b.lse) && a.dq.bitwise_equal(b.dq) &&
         a.dk.bitwise_equal(b.dk) && a.dv.bitwise_equal(b.dv);
}

template <class T>
void check_determinism(Method method) {
  const World& w = world();
  Scope scope(std::string(type_name<T>()) + ", " + method_name(method));
  Shape s;
  s.H = w.size == 3 ? 6 : 4;
  s.Hkv = 2;
  s.Tq = 26;
  s.Tk = 30;
  ea::Options opt;
  opt.causal = true;
  opt.alignment = ea::CausalAlignment::BottomRight;
  opt.window_left = 9;
  opt.softcap = 5;
  const Problem<T> p = make_problem<T>(s, opt, {{30, 21}, true}, 17, 2.0);
  for (const Split& split : splits_for(s, w.size)) {
    Scope inner(split.name);
    const Local<T> l = local_part(p, split, w.comm);
    const Run<T> first = run_distributed(method, w.comm, p, l, true, opt);
    for (const int threads : {1, 2, 0}) {
      ea::Options o = opt;
      o.threads = threads;
      const Run<T> again = run_distributed(method, w.comm, p, l, true, o);
      EA_MPI_CHECK(same_bits(again, first), "threads = " << threads << " differs from the first call");
    }
  }
}

}  // namespace

EA_MPI_CASE(determinism_ring, "determinism: ring, bitwise from call to call and for every thread count") {
  check_determinism<float>(Method::Ring);
  check_determinism<double>(Method::Ring);
}

EA_MPI_CASE(determinism_ulysses,
            "determinism: ulysses, bitwise from call to call and for every thread count") {
  check_determinism<float>(Method::Ulysses);
  check_determinism<double>(Method::Ulysses);
}

}  // namespace test_determinism
}  // namespace ea_mpi
