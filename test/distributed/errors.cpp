// SPDX-License-Identifier: MIT
// Bad calls: a mismatch between the ranks (dims, head counts, options, masks, sharding, an output
// view) or a bad argument on one rank or all must throw the same std::invalid_argument on every
// rank, write nothing, and leave the communicator usable: no rank may hang or go on alone.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "problem.hpp"

namespace ea_mpi {
namespace test_errors {
namespace {

/// Everything one rank passes to a distributed call; a scenario changes it on the bad rank(s).
template <class T>
struct Args {
  Method method = Method::Ring;
  bool backward = false;
  Heads<T> q, k, v, out, lse, d_out, dq, dk, dv;
  ea::Options opt;
  ea::Masks<T> masks;
  dist::Config config;
  std::vector<std::int64_t> key_lengths;
  std::vector<T> slopes, sinks, d_sinks;
  ea::BackwardTerms<T> terms;
  std::vector<char> mask_storage;  // bools, as char: std::vector<bool> has no data()
  std::vector<T> bias_storage;
  bool lse_given = true;
};

constexpr double kSentinel = -777.25;

/// A mask_mod (causal, at the positions the calls give it).
const auto kCausalMod = ea::mask_mod([](auto, auto, auto q, auto k) { return k <= q; });

/// The valid call: B = 1, H = 2P query heads reading H_kv = 1, T_q = 6P and T_k = 8P tokens
/// (both divisible by 2P, so that Contiguous and ZigZag give each rank the same row counts),
/// d_k = 8, d_v = 4, balanced contiguous shards.
template <class T>
Args<T> valid_args(Method method, bool backward) {
  const World& w = world();
  Shape s;
  s.B = 1;
  s.H = 2 * w.size;
  s.Hkv = 1;
  s.Tq = 6 * w.size;
  s.Tk = 8 * w.size;
  s.dk = 8;
  s.dv = 4;
  const Problem<T> p = make_problem<T>(s, {}, {}, 11);
  Split split;
  const Local<T> l = local_part(p, split, w.comm);
  Args<T> a;
  a.method = method;
  a.backward = backward;
  a.q = l.q;
  a.k = l.k;
  a.v = l.v;
  a.d_out = l.d_out;
  const T sentinel = static_cast<T>(kSentinel);
  a.out = Heads<T>(s.B, s.H, l.q.T, s.dv, ea::Layout::BHTD, sentinel);
  a.lse = Heads<T>(s.B, s.H, l.q.T, 1, ea::Layout::BHTD, sentinel);
  if (backward) {  // the single-process forward's rows as the forward's results
    const Whole<T> whole = whole_results(p, false);
    a.out = take_rows(whole.out, l.q_segments, ea::Layout::BHTD);
    a.lse = take_rows(whole.lse, l.q_segments, ea::Layout::BHTD);
    a.dq = Heads<T>(s.B, s.H, l.q.T, s.dk, ea::Layout::BHTD, sentinel);
    a.dk = Heads<T>(s.B, s.Hkv, l.k.T, s.dk, ea::Layout::BHTD, sentinel);
    a.dv = Heads<T>(s.B, s.Hkv, l.k.T, s.dv, ea::Layout::BHTD, sentinel);
  }
  a.config = l.config;
  return a;
}

template <class T>
void call(Args<T>& a) {
  const MPI_Comm comm = world().comm;
  const ea::HeadsView<T> lse = a.lse_given ? a.lse.view() : ea::HeadsView<T>{};
  if (!a.backward) {
    if (a.method == Method::Ring)
      dist::ring_attention_heads_into(comm, a.q.cview(), a.k.cview(), a.v.cview(), a.out.view(), lse, a.opt,
                                      a.masks, a.config);
    else
      dist::ulysses_attention_heads_into(comm, a.q.cview(), a.k.cview(), a.v.cview(), a.out.view(), lse,
                                         a.opt, a.masks, a.config);
    return;
  }
  if (a.method == Method::Ring)
    dist::ring_attention_heads_backward_into(comm, a.q.cview(), a.k.cview(), a.v.cview(), a.out.cview(), lse,
                                             a.d_out.cview(), a.dq.view(), a.dk.view(), a.dv.view(), a.opt,
                                             a.masks, a.config, a.terms);
  else
    dist::ulysses_attention_heads_backward_into(comm, a.q.cview(), a.k.cview(), a.v.cview(), a.out.cview(),
                                                lse, a.d_out.cview(), a.dq.view(), a.dk.view(), a.dv.view(),
                                                a.opt, a.masks, a.config, a.terms);
}

/// A bad call: `mutate(args, bad)` runs on every rank, `bad` true on rank `bad` (kAll: on every
/// rank), so that a scenario may set something on every rank and change it on one.
constexpr int kAll = -1;
template <class T>
using Mutation = std::function<void(Args<T>&, bool)>;
template <class T>
struct Scenario {
  Scenario(std::string n, int b, Mutation<T> m, std::string v = "", bool f = true, bool bw = true,
           bool r = true, bool u = true)
      : name(std::move(n)),
        bad(b),
        mutate(std::move(m)),
        value(std::move(v)),
        forward(f),
        backward(bw),
        ring(r),
        ulysses(u) {}
  std::string name;
  int bad = kAll;
  Mutation<T> mutate;
  std::string value;  ///< a number the message must hold (the value at fault), when not empty
  bool forward = true, backward = true, ring = true, ulysses = true;  ///< the calls it applies to
};

/// A mutation of the bad rank(s) only.
template <class T, class F>
Mutation<T> on_bad(F f) {
  return [f](Args<T>& a, bool bad) {
    if (bad) f(a);
  };
}

template <class T>
Heads<T> resized(const Heads<T>& h, std::ptrdiff_t B, std::ptrdiff_t H, std::ptrdiff_t Tn, std::ptrdiff_t D) {
  return Heads<T>(B, H, Tn, D, h.layout, static_cast<T>(kSentinel));
}

template <class T>
std::vector<Scenario<T>> scenarios() {
  const int P = world().size, last = P - 1;
  std::vector<Scenario<T>> s;
  // Mismatches between ranks: only where there are two ranks to disagree.
  if (P > 1) {
    s.push_back({"d_k 9 on one rank", last, on_bad<T>([](Args<T>& a) {
                   a.q = resized(a.q, a.q.B, a.q.H, a.q.T, 9);
                   a.k = resized(a.k, a.k.B, a.k.H, a.k.T, 9);
                   if (a.backward) {
                     a.dq = resized(a.dq, a.dq.B, a.dq.H, a.dq.T, 9);
                     a.dk = resized(a.dk, a.dk.B, a.dk.H, a.dk.T, 9);
                   }
                 }),
                 "9"});
    s.push_back({"d_v 5 on one rank", last, on_bad<T>([](Args<T>& a) {
                   a.v = resized(a.v, a.v.B, a.v.H, a.v.T, 5);
                   a.out = resized(a.out, a.out.B, a.out.H, a.out.T, 5);
                   if (a.backward) {
                     a.d_out = resized(a.d_out, a.d_out.B, a.d_out.H, a.d_out.T, 5);
                     a.dv = resized(a.dv, a.dv.B, a.dv.H, a.dv.T, 5);
                   }
                 }),
                 "5"});
    s.push_back({"2 sequences on one rank", last, on_bad<T>([](Args<T>& a) {
                   for (Heads<T>* h : {&a.q, &a.k, &a.v, &a.out, &a.lse, &a.d_out, &a.dq, &a.dk, &a.dv})
                     if (h->B > 0) *h = resized(*h, 2, h->H, h->T, h->D);
                 })});
    s.push_back({"H halved on one rank", last, on_bad<T>([P](Args<T>& a) {
                   for (Heads<T>* h : {&a.q, &a.out, &a.lse, &a.d_out, &a.dq})
                     if (h->B > 0) *h = resized(*h, h->B, P, h->T, h->D);
                 })});
    s.push_back({"H_kv 2 on one rank", last, on_bad<T>([](Args<T>& a) {
                   for (Heads<T>* h : {&a.k, &a.v, &a.dk, &a.dv})
                     if (h->B > 0) *h = resized(*h, h->B, 2, h->T, h->D);
                 })});
    s.push_back({"causal on one rank only", last, on_bad<T>([](Args<T>& a) { a.opt.causal = true; })});
    // Causal on every rank with T_q != T_k: the alignment changes the mask.
    s.push_back({"bottom-right alignment on one rank only", last, [](Args<T>& a, bool bad) {
                   a.opt.causal = true;
                   if (bad) a.opt.alignment = ea::CausalAlignment::BottomRight;
                 }});
    s.push_back({"another key length on one rank", last,
                 [](Args<T>& a, bool bad) {
                   a.key_lengths = {bad ? 7 : 5};
                   a.masks.key_lengths = a.key_lengths.data();
                 },
                 "7"});
    s.push_back({"another ALiBi slope on one rank", last, [](Args<T>& a, bool bad) {
                   a.slopes.assign(static_cast<size_t>(a.q.H), T(0.25));
                   if (bad) a.slopes.back() = T(0.5);
                   a.masks.alibi_slopes = a.slopes.data();
                 }});
    s.push_back({"scale 0.5 on one rank only", last, on_bad<T>([](Args<T>& a) { a.opt.scale = 0.5; })});
    s.push_back(
        {"window_left 2 on one rank only", last, on_bad<T>([](Args<T>& a) { a.opt.window_left = 2; })});
    s.push_back({"softcap 3 on one rank only", last, on_bad<T>([](Args<T>& a) { a.opt.softcap = 3; })});
    s.push_back(
        {"chunk_size 4 on one rank only", last, on_bad<T>([](Args<T>& a) { a.opt.chunk_size = 4; }), "4"});
    s.push_back({"key lengths on one rank only", last, on_bad<T>([](Args<T>& a) {
                   a.key_lengths = {a.k.T};
                   a.masks.key_lengths = a.key_lengths.data();
                 })});
    s.push_back({"ALiBi slopes on one rank only", last, on_bad<T>([](Args<T>& a) {
                   a.slopes.assign(static_cast<size_t>(a.q.H), T(0.25));
                   a.masks.alibi_slopes = a.slopes.data();
                 })});
    s.push_back({"sinks on one rank only", last, on_bad<T>([](Args<T>& a) {
                   a.sinks.assign(static_cast<size_t>(a.q.H), T(0.5));
                   a.masks.sinks = a.sinks.data();
                 }),
                 "presence of Masks::sinks"});
    s.push_back({"another sink on one rank", last,
                 [](Args<T>& a, bool bad) {
                   a.sinks.assign(static_cast<size_t>(a.q.H), T(0.5));
                   if (bad) a.sinks.back() = T(1.25);
                   a.masks.sinks = a.sinks.data();
                 },
                 "1.25"});
    s.push_back({"d_sinks on one rank only", last,
                 [](Args<T>& a, bool bad) {
                   a.sinks.assign(static_cast<size_t>(a.q.H), T(0.5));
                   a.masks.sinks = a.sinks.data();
                   a.d_sinks.assign(static_cast<size_t>(a.q.H), T(0));
                   if (bad) a.terms.d_sinks = a.d_sinks.data();
                 },
                 "presence of BackwardTerms::d_sinks", false});
    // A block mask describes the whole sequence (T_q = 6P x T_k = 8P), not a rank's shard of it.
    s.push_back({"a block mask of a shard's size", kAll, on_bad<T>([](Args<T>& a) {
                   static const ea::BlockMask shard = ea::block_mask(kCausalMod, 1, 1, a.q.T, a.k.T, 4, 4);
                   a.masks.mask_mod = kCausalMod;
                   a.masks.block_mask = shard;
                 }),
                 "not a shard's"});
    s.push_back({"mask_mod on one rank only", last,
                 on_bad<T>([](Args<T>& a) { a.masks.mask_mod = kCausalMod; }),
                 "presence of Masks::mask_mod"});
    s.push_back({"ZigZag on one rank only", last,
                 on_bad<T>([](Args<T>& a) { a.config.sharding = dist::Sharding::ZigZag; })});
    s.push_back({"a boolean mask on one rank only", last, on_bad<T>([](Args<T>& a) {
                   a.mask_storage.assign(static_cast<size_t>(a.q.T * 64), 1);
                   a.masks.mask = ea::BroadcastView<bool>::matrix(
                       reinterpret_cast<const bool*>(a.mask_storage.data()), a.q.T, 64);
                 })});
    s.push_back({"out with one row too many on one rank", last, on_bad<T>([](Args<T>& a) {
                   a.out = resized(a.out, a.out.B, a.out.H, a.out.T + 1, a.out.D);
                 }),
                 "", true, false});
    s.push_back({"out with one column too many on one rank", last, on_bad<T>([](Args<T>& a) {
                   a.out = resized(a.out, a.out.B, a.out.H, a.out.T, a.out.D + 1);
                 }),
                 "", true, false});
    s.push_back({"lse with 2 columns on one rank", last,
                 on_bad<T>([](Args<T>& a) { a.lse = resized(a.lse, a.lse.B, a.lse.H, a.lse.T, 2); })});
    s.push_back({"ZigZag shard with one row too many on one rank", last, on_bad<T>([](Args<T>& a) {
                   // T_q = 6P + 1 puts the extra token in chunk 0, on rank 0, not on the last rank.
                   a.config.sharding = dist::Sharding::ZigZag;
                   a.q = resized(a.q, a.q.B, a.q.H, a.q.T + 1, a.q.D);
                   a.out = resized(a.out, a.out.B, a.out.H, a.out.T + 1, a.out.D);
                   a.lse = resized(a.lse, a.lse.B, a.lse.H, a.lse.T + 1, 1);
                   if (a.backward) {
                     a.d_out = resized(a.d_out, a.d_out.B, a.d_out.H, a.d_out.T + 1, a.d_out.D);
                     a.dq = resized(a.dq, a.dq.B, a.dq.H, a.dq.T + 1, a.dq.D);
                   }
                 })});
    s.push_back({"ZigZag key shard with one row too few on one rank", last, on_bad<T>([](Args<T>& a) {
                   a.config.sharding = dist::Sharding::ZigZag;
                   a.k = resized(a.k, a.k.B, a.k.H, a.k.T - 1, a.k.D);
                   a.v = resized(a.v, a.v.B, a.v.H, a.v.T - 1, a.v.D);
                   if (a.backward) {
                     a.dk = resized(a.dk, a.dk.B, a.dk.H, a.dk.T - 1, a.dk.D);
                     a.dv = resized(a.dv, a.dv.B, a.dv.H, a.dv.T - 1, a.dv.D);
                   }
                 })});
    s.push_back({"d_out with a wrong dim on one rank", last, on_bad<T>([](Args<T>& a) {
                   a.d_out = resized(a.d_out, a.d_out.B, a.d_out.H, a.d_out.T, a.d_out.D + 1);
                 }),
                 "", false, true});
    s.push_back({"dk with one row too many on one rank", last,
                 on_bad<T>([](Args<T>& a) { a.dk = resized(a.dk, a.dk.B, a.dk.H, a.dk.T + 1, a.dk.D); }), "",
                 false, true});
    s.push_back(
        {"no lse on one rank", last, on_bad<T>([](Args<T>& a) { a.lse_given = false; }), "", false, true});
    // H = 2P + 1 is divisible by no P > 1.
    s.push_back({"H not divisible by P (Ulysses)", kAll, on_bad<T>([P](Args<T>& a) {
                   for (Heads<T>* h : {&a.q, &a.out, &a.lse, &a.d_out, &a.dq})
                     if (h->B > 0) *h = resized(*h, h->B, 2 * P + 1, h->T, h->D);
                 }),
                 std::to_string(2 * P + 1), true, true, false, true});
  }
  s.push_back({"a boolean mask", kAll, on_bad<T>([](Args<T>& a) {
                 a.mask_storage.assign(static_cast<size_t>(a.q.T * 64), 1);
                 a.masks.mask = ea::BroadcastView<bool>::matrix(
                     reinterpret_cast<const bool*>(a.mask_storage.data()), a.q.T, 64);
               })});
  s.push_back({"a bias", kAll, on_bad<T>([](Args<T>& a) {
                 a.bias_storage.assign(static_cast<size_t>(a.q.T * 64), T(0));
                 a.masks.bias = ea::BroadcastView<T>::matrix(a.bias_storage.data(), a.q.T, 64);
               })});
  s.push_back({"key length above T_k", kAll, on_bad<T>([P](Args<T>& a) {
                 a.key_lengths = {8 * P + 1};
                 a.masks.key_lengths = a.key_lengths.data();
               }),
               std::to_string(8 * P + 1)});
  s.push_back({"window_left -2", kAll, on_bad<T>([](Args<T>& a) { a.opt.window_left = -2; }), "-2"});
  s.push_back({"chunk_size -3", kAll, on_bad<T>([](Args<T>& a) { a.opt.chunk_size = -3; }), "-3"});
  s.push_back({"a chunk_origin of one's own", kAll, on_bad<T>([](Args<T>& a) { a.opt.chunk_origin = 8; }),
               "chunk_origin"});
  s.push_back({"scale -1", kAll, on_bad<T>([](Args<T>& a) { a.opt.scale = -1.0; })});
  s.push_back({"d_sinks without sinks", kAll, on_bad<T>([](Args<T>& a) {
                 a.d_sinks.assign(static_cast<size_t>(a.q.H), T(0));
                 a.terms.d_sinks = a.d_sinks.data();
               }),
               "masks.sinks", false});
  s.push_back({"d_lse of the wrong shape", kAll, on_bad<T>([](Args<T>& a) {
                 a.terms.d_lse = a.lse.cview();  // [B, H, T_q,r, 2]
                 a.terms.d_lse.dim = 2;
               }),
               "d_lse", false});
  return s;
}

/// The outputs a bad call must leave alone.
template <class T>
bool untouched(const Args<T>& a) {
  const T sentinel = static_cast<T>(kSentinel);
  if (a.backward)
    return a.dq.all_equal_to(sentinel) && a.dk.all_equal_to(sentinel) && a.dv.all_equal_to(sentinel);
  return a.out.all_equal_to(sentinel) && a.lse.all_equal_to(sentinel);
}

template <class T>
std::string message_of(Args<T>& a) {
  try {
    call(a);
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not std::invalid_argument: ") + e.what() + ">";
  }
  return "<no exception>";
}

template <class T>
void check_errors(Method method, bool backward) {
  const World& w = world();
  Scope scope(std::string(type_name<T>()) + ", " + method_name(method) +
              (backward ? " backward" : " forward"));
  // A valid call first, and again after each bad one: the same bits, so no message of a bad call
  // is left in flight to be mistaken for one of the next call.
  Args<T> good = valid_args<T>(method, backward);
  call(good);
  for (const Scenario<T>& sc : scenarios<T>()) {
    if ((backward ? !sc.backward : !sc.forward) || (method == Method::Ring ? !sc.ring : !sc.ulysses))
      continue;
    Scope inner(sc.name);
    Args<T> a = valid_args<T>(method, backward);
    sc.mutate(a, sc.bad == kAll || sc.bad == w.rank);
    const std::string message = message_of(a);
    EA_MPI_CHECK(untouched(a), "an output was written");
    const auto all = gather_strings(message, w.comm);
    if (w.rank == 0) {
      bool same = true;
      for (const auto& m : all) same = same && m == all.front();
      std::string listing;
      for (size_t r = 0; r < all.size(); ++r) listing += "\n    rank " + std::to_string(r) + ": " + all[r];
      EA_MPI_CHECK(same, "the ranks' messages differ:" << listing);
      const std::string& m = all.front();
      EA_MPI_CHECK(!m.empty() && m.front() != '<', "rank 0: " << m);
      if (!sc.value.empty())
        EA_MPI_CHECK(m.find(sc.value) != std::string::npos,
                     "the message does not name " << sc.value << ": " << m);
      if (sc.bad != kAll)
        EA_MPI_CHECK(m.find("rank " + std::to_string(sc.bad)) != std::string::npos,
                     "the message does not name rank " << sc.bad << ": " << m);
    }
    Args<T> again = valid_args<T>(method, backward);
    const bool ok = no_throw("the valid call after it", [&] { call(again); });
    const bool same = backward ? again.dq.bitwise_equal(good.dq) && again.dk.bitwise_equal(good.dk) &&
                                     again.dv.bitwise_equal(good.dv)
                               : again.out.bitwise_equal(good.out) && again.lse.bitwise_equal(good.lse);
    EA_MPI_CHECK(!ok || same, "the valid call after it differs from the one before");
  }
}

}  // namespace

EA_MPI_CASE(errors_ring_float, "errors: ring, the same std::invalid_argument on every rank (float)") {
  check_errors<float>(Method::Ring, false);
  check_errors<float>(Method::Ring, true);
}
EA_MPI_CASE(errors_ring_double, "errors: ring, the same std::invalid_argument on every rank (double)") {
  check_errors<double>(Method::Ring, false);
  check_errors<double>(Method::Ring, true);
}
EA_MPI_CASE(errors_ulysses_float, "errors: ulysses, the same std::invalid_argument on every rank (float)") {
  check_errors<float>(Method::Ulysses, false);
  check_errors<float>(Method::Ulysses, true);
}
EA_MPI_CASE(errors_ulysses_double, "errors: ulysses, the same std::invalid_argument on every rank (double)") {
  check_errors<double>(Method::Ulysses, false);
  check_errors<double>(Method::Ulysses, true);
}

}  // namespace test_errors
}  // namespace ea_mpi
