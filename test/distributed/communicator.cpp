// SPDX-License-Identifier: MIT
// The calls use the communicator they are given, nothing else: the world split in two groups,
// each with its ranks in reverse order, runs two different problems at the same time.
#include "problem.hpp"

namespace ea_mpi {
namespace test_communicator {

EA_MPI_CASE(communicator_split, "communicator: two groups in reverse rank order, two problems at once") {
  const World& w = world();
  const int color = w.rank % 2;
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(w.comm, color, w.size - w.rank, &sub);
  int P = 1;
  MPI_Comm_size(sub, &P);
  Shape s;
  s.H = 12;
  s.Hkv = 3;
  s.Tq = 15 + 4 * color;
  s.Tk = 18;
  ea::Options opt;
  opt.causal = true;
  opt.alignment = ea::CausalAlignment::BottomRight;
  const Problem<double> p = make_problem<double>(s, opt, {}, 1200 + static_cast<std::uint64_t>(color));
  const Whole<double> whole = whole_results(p, true);
  for (const Method method : {Method::Ring, Method::Ulysses}) {
    for (const Split& split : splits_for(s, P)) {
      Scope scope(std::string("group ") + std::to_string(color) + ", " + method_name(method) + ", " +
                  split.name);
      const Local<double> l = local_part(p, split, sub);
      Run<double> r;
      const bool ok = no_throw("the call", [&] { r = run_distributed(method, sub, p, l, true, opt); });
      if (ok) {
        check_forward(whole, l, r.out, r.lse);
        check_backward(whole, l, r.dq, r.dk, r.dv);
      }
      if (min_over_ranks(ok ? 1 : 0, sub) == 1) check_stats("stats", p, r.stats, sub);
    }
  }
  MPI_Comm_free(&sub);
}

}  // namespace test_communicator
}  // namespace ea_mpi
