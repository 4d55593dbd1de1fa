// SPDX-License-Identifier: MIT
// Each rank's shard is checked by the library's own validator (src/check/shard.hpp): the exact
// overlap rule (an output interleaved with an input, elements apart though their byte ranges
// overlap, is accepted; a true overlap is rejected with the core's message, naming the rank) and
// overflow-checked extents (a view whose span Eigen::Index cannot count is rejected, never read).
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "problem.hpp"

namespace ea_mpi {
namespace test_shard_checks {
namespace {

/// H = P query heads (Ulysses needs H divisible by P) reading one K/V head, T_q = T_k = 3P
/// tokens (3 rows a rank), d_k = d_v = 4.
struct Interleaved {
  Problem<float> p;
  Local<float> l;
  Interleaved() {
    Shape s;
    s.B = 1, s.H = world().size, s.Hkv = 1, s.Tq = 3 * world().size, s.Tk = s.Tq, s.dk = 4, s.dv = 4;
    ea::Options opt;
    opt.causal = true;
    p = make_problem<float>(s, opt, {}, 23);
    l = local_part(p, Split{}, world().comm);
  }
};

void forward(Method method, ea::HeadsView<const float> q, const Local<float>& l, ea::HeadsView<float> out,
             const ea::Options& opt) {
  if (method == Method::Ring) {
    dist::ring_attention_heads_into(world().comm, q, l.k.cview(), l.v.cview(), out, {}, opt, {}, l.config);
  } else {
    dist::ulysses_attention_heads_into(world().comm, q, l.k.cview(), l.v.cview(), out, {}, opt, {}, l.config);
  }
}

std::string message_of(Method method, ea::HeadsView<const float> q, const Local<float>& l,
                       ea::HeadsView<float> out, const ea::Options& opt) {
  try {
    forward(method, q, l, out, opt);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "<no exception>";
}

/// The same message on every rank, holding each of `parts`.
void check_message(const std::string& m, const std::vector<std::string>& parts) {
  const auto all = gather_strings(m, world().comm);
  if (world().rank != 0) return;
  for (const auto& other : all) EA_MPI_CHECK(other == all.front(), "the ranks' messages differ: " << other);
  for (const auto& part : parts)
    EA_MPI_CHECK(all.front().find(part) != std::string::npos, "no \"" << part << "\" in: " << all.front());
}

void interleaved(Method method) {
  Scope scope(method_name(method));
  const Interleaved c;
  const Local<float>& l = c.l;
  const std::ptrdiff_t H = l.q.H, T = l.q.T, D = l.q.D;
  // Q and attn as the even and odd columns of one [1, H, T, 2D] buffer.
  std::vector<float> buffer(static_cast<size_t>(H * T * 2 * D), -7.5f);
  const auto column = [&](std::ptrdiff_t first) {
    return ea::HeadsView<float>{buffer.data() + first, 1, H, T, D, 0, T * 2 * D, 2 * D, 2};
  };
  const ea::HeadsView<float> q = column(0), out = column(1);
  for (std::ptrdiff_t h = 0; h < H; ++h)
    for (std::ptrdiff_t t = 0; t < T; ++t)
      for (std::ptrdiff_t d = 0; d < D; ++d)
        q.data[h * q.head_stride + t * q.token_stride + d * q.dim_stride] = l.q.at(0, h, t, d);
  Heads<float> apart(1, H, T, D);
  forward(method, l.q.cview(), l, apart.view(), c.p.opt);
  const bool ok = no_throw("attn interleaved with Q", [&] { forward(method, q, l, out, c.p.opt); });
  long wrong = 0;
  for (std::ptrdiff_t h = 0; h < H; ++h)
    for (std::ptrdiff_t t = 0; t < T; ++t)
      for (std::ptrdiff_t d = 0; d < D; ++d) {
        wrong += q.data[h * q.head_stride + t * q.token_stride + d * q.dim_stride] != l.q.at(0, h, t, d);
        wrong +=
            out.data[h * out.head_stride + t * out.token_stride + d * out.dim_stride] != apart.at(0, h, t, d);
      }
  EA_MPI_CHECK(!ok || wrong == 0,
               wrong << " elements differ from the call on separate buffers, or Q changed");

  // attn over Q itself on the last rank: the core's message, naming that rank; nothing written.
  const int last = world().size - 1;
  std::vector<float> same(l.q.data);
  const ea::HeadsView<float> q_too = ea::HeadsView<float>::bhtd(same.data(), 1, H, T, D);
  Heads<float> elsewhere(1, H, T, D, ea::Layout::BHTD, -7.5f);
  const ea::HeadsView<float> target = world().rank == last ? q_too : elsewhere.view();
  check_message(message_of(method, q_too, l, target, c.p.opt),
                {"EigenAttention::", "attention_heads_into: rank " + std::to_string(last) + ": ",
                 "output attn [1, " + std::to_string(H) + ", 3, 4] overlaps Q"});
  EA_MPI_CHECK(same == l.q.data && elsewhere.all_equal_to(-7.5f), "an output was written");
}

void overflowing(Method method) {
  Scope scope(method_name(method));
  const Interleaved c;
  const Local<float>& l = c.l;
  const int last = world().size - 1;
  // Q whose token stride makes its span overflow Eigen::Index on the last rank: never read.
  ea::HeadsView<const float> q = l.q.cview();
  if (world().rank == last) q.token_stride = std::numeric_limits<std::ptrdiff_t>::max() / 2;
  Heads<float> out(1, l.q.H, l.q.T, l.q.D, ea::Layout::BHTD, -7.5f);
  check_message(message_of(method, q, l, out.view(), c.p.opt),
                {"rank " + std::to_string(last) + ": ", "than Eigen::Index can count"});
  EA_MPI_CHECK(out.all_equal_to(-7.5f), "an output was written");
}

}  // namespace

EA_MPI_CASE(shard_checks_overlap, "shard checks: the core's exact overlap rule on every rank's shard") {
  interleaved(Method::Ring);
  interleaved(Method::Ulysses);
}
EA_MPI_CASE(shard_checks_overflow, "shard checks: a view whose span overflows Eigen::Index is rejected") {
  overflowing(Method::Ring);
  overflowing(Method::Ulysses);
}

}  // namespace test_shard_checks
}  // namespace ea_mpi
