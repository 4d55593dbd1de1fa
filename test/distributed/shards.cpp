// SPDX-License-Identifier: MIT
// The shard helpers: contiguous_rows, zigzag_rows and shard_segments against the layouts the
// header states, shard() and unshard() as inverses (for every P locally, and over MPI with the
// ranks' own shards), and their errors.
#include <numeric>

#include "problem.hpp"

namespace ea_mpi {
namespace test_shards {
namespace {

/// Chunk c of the 2P ZigZag chunks of `tokens` tokens: its first token and its size.
std::pair<std::ptrdiff_t, std::ptrdiff_t> chunk(std::ptrdiff_t tokens, int P, int c) {
  const std::ptrdiff_t base = tokens / (2 * P), extra = tokens % (2 * P);
  const std::ptrdiff_t first = c * base + std::min<std::ptrdiff_t>(c, extra);
  return {first, base + (c < extra ? 1 : 0)};
}

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (...) {
    return "<not std::invalid_argument>";
  }
  return "<no exception>";
}

}  // namespace

EA_MPI_CASE(shards_layouts,
            "shards: contiguous_rows, zigzag_rows and shard_segments give the stated layouts") {
  for (int P = 1; P <= 5; ++P)
    for (std::ptrdiff_t T = 0; T <= 23; ++T) {
      Scope scope("P " + std::to_string(P) + ", T " + std::to_string(T));
      std::vector<int> owner_contiguous(static_cast<size_t>(T), -1), owner_zigzag(static_cast<size_t>(T), -1);
      std::ptrdiff_t next = 0;
      for (int r = 0; r < P; ++r) {
        const std::ptrdiff_t n = dist::contiguous_rows(T, P, r);
        EA_MPI_CHECK(n == T / P + (r < T % P ? 1 : 0), "contiguous_rows of rank " << r << ": " << n);
        const auto c = dist::shard_segments(dist::Sharding::Contiguous, T, P, r);
        EA_MPI_CHECK(c.size() == 1 && c[0].global_first == next && c[0].local_first == 0 && c[0].count == n,
                     "contiguous segments of rank " << r);
        next += n;
        const auto z = dist::shard_segments(dist::Sharding::ZigZag, T, P, r);
        const auto [first_a, count_a] = chunk(T, P, r);
        const auto [first_b, count_b] = chunk(T, P, 2 * P - 1 - r);
        EA_MPI_CHECK(z.size() == 2, "ZigZag gives rank " << r << " " << z.size() << " segments");
        if (z.size() == 2) {
          EA_MPI_CHECK(
              z[0].global_first == first_a && z[0].count == count_a && z[0].local_first == 0 &&
                  z[1].global_first == first_b && z[1].count == count_b && z[1].local_first == count_a,
              "ZigZag segments of rank " << r << ": {" << z[0].global_first << ", " << z[0].local_first
                                         << ", " << z[0].count << "} {" << z[1].global_first << ", "
                                         << z[1].local_first << ", " << z[1].count << "}");
        }
        EA_MPI_CHECK(dist::zigzag_rows(T, P, r) == count_a + count_b, "zigzag_rows of rank " << r);
        for (const auto& seg : c)
          for (std::ptrdiff_t t = seg.global_first; t < seg.global_first + seg.count; ++t)
            if (t >= 0 && t < T) owner_contiguous[static_cast<size_t>(t)] = r;
        for (const auto& seg : z)
          for (std::ptrdiff_t t = seg.global_first; t < seg.global_first + seg.count; ++t)
            if (t >= 0 && t < T) owner_zigzag[static_cast<size_t>(t)] = r;
      }
      EA_MPI_CHECK(next == T, "contiguous rows sum to " << next);
      const bool covered = std::count(owner_contiguous.begin(), owner_contiguous.end(), -1) == 0 &&
                           std::count(owner_zigzag.begin(), owner_zigzag.end(), -1) == 0;
      EA_MPI_CHECK(covered, "a token no rank holds");
    }
}

EA_MPI_CASE(shards_round_trip, "shards: unshard(shard) is the identity, locally and over MPI") {
  const World& w = world();
  ea_test::Rng rng(41);
  for (const dist::Sharding sharding : {dist::Sharding::Contiguous, dist::Sharding::ZigZag})
    for (int P = 1; P <= 5; ++P)
      for (const std::ptrdiff_t T : {0, 1, 3, 9, 10, 17}) {
        Scope scope(std::string(sharding == dist::Sharding::ZigZag ? "ZigZag" : "Contiguous") + ", P " +
                    std::to_string(P) + ", T " + std::to_string(T));
        // Column-major: shard() takes any expression and returns row-major rows.
        const Eigen::MatrixXd whole = ea_test::random_matrix<Eigen::MatrixXd>(rng, T, 3);
        std::vector<RowMatrix<double>> shards;
        for (int r = 0; r < P; ++r) {
          shards.push_back(dist::shard(whole, sharding, P, r));
          EA_MPI_CHECK(
              shards.back().rows() == (sharding == dist::Sharding::ZigZag ? dist::zigzag_rows(T, P, r)
                                                                          : dist::contiguous_rows(T, P, r)),
              "shard of rank " << r << " has " << shards.back().rows() << " rows");
        }
        const RowMatrix<double> back = dist::unshard(shards, sharding);
        EA_MPI_CHECK(back.rows() == T && back.cols() == 3 && back == whole, "unshard(shard) differs");
      }
  // Over MPI: every rank shards the same matrix, the shards are gathered and unsharded.
  for (const dist::Sharding sharding : {dist::Sharding::Contiguous, dist::Sharding::ZigZag}) {
    const std::ptrdiff_t T = 4 * w.size + 3;
    const RowMatrix<float> whole = ea_test::random_matrix<RowMatrix<float>>(rng, T, 5);
    const RowMatrix<float> mine = dist::shard(whole, sharding, w.size, w.rank);
    std::vector<int> counts(static_cast<size_t>(w.size)), displs(static_cast<size_t>(w.size));
    const int n = static_cast<int>(mine.size());
    MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, w.comm);
    std::partial_sum(counts.begin(), counts.end() - 1, displs.begin() + 1);
    std::vector<float> all(static_cast<size_t>(T * 5));
    MPI_Allgatherv(mine.data(), n, MPI_FLOAT, all.data(), counts.data(), displs.data(), MPI_FLOAT, w.comm);
    std::vector<RowMatrix<float>> shards;
    for (int r = 0; r < w.size; ++r)
      shards.push_back(Eigen::Map<const RowMatrix<float>>(all.data() + displs[static_cast<size_t>(r)],
                                                          counts[static_cast<size_t>(r)] / 5, 5));
    EA_MPI_CHECK(dist::unshard(shards, sharding) == whole, "the gathered shards do not unshard to the whole");
  }
}

EA_MPI_CASE(shards_errors, "shards: the helpers reject bad ranks and counts with std::invalid_argument") {
  auto rejects = [](const char* what, auto f) {
    const std::string m = message_of(f);
    EA_MPI_CHECK(!m.empty() && m.front() != '<', what << ": " << m);
  };
  rejects("contiguous_rows, 0 ranks", [] { dist::contiguous_rows(10, 0, 0); });
  rejects("contiguous_rows, rank 2 of 2", [] { dist::contiguous_rows(10, 2, 2); });
  rejects("contiguous_rows, rank -1", [] { dist::contiguous_rows(10, 2, -1); });
  rejects("contiguous_rows, -1 tokens", [] { dist::contiguous_rows(-1, 2, 0); });
  rejects("zigzag_rows, 0 ranks", [] { dist::zigzag_rows(10, 0, 0); });
  rejects("zigzag_rows, rank 3 of 3", [] { dist::zigzag_rows(10, 3, 3); });
  rejects("zigzag_rows, -1 tokens", [] { dist::zigzag_rows(-1, 2, 0); });
  rejects("shard_segments, rank 4 of 4", [] { dist::shard_segments(dist::Sharding::ZigZag, 10, 4, 4); });
  rejects("shard_segments, -1 ranks", [] { dist::shard_segments(dist::Sharding::Contiguous, 10, -1, 0); });
  // 10 tokens on 2 ranks under ZigZag: 5 rows each, not 6 and 4.
  rejects("unshard, ZigZag rows", [] {
    dist::unshard(
        std::vector<RowMatrix<double>>{RowMatrix<double>::Zero(6, 2), RowMatrix<double>::Zero(4, 2)},
        dist::Sharding::ZigZag);
  });
  // A count of one in the singular: 4 tokens on 2 ranks under ZigZag are 2 rows each.
  const std::string one_row = message_of([] {
    dist::unshard(
        std::vector<RowMatrix<double>>{RowMatrix<double>::Zero(1, 2), RowMatrix<double>::Zero(3, 2)},
        dist::Sharding::ZigZag);
  });
  EA_MPI_CHECK(one_row == "unshard: shard 0 has 1 row but ZigZag gives rank 0 of 2 2 of 4 tokens", one_row);
  rejects("unshard, columns", [] {
    dist::unshard(
        std::vector<RowMatrix<double>>{RowMatrix<double>::Zero(5, 2), RowMatrix<double>::Zero(5, 3)},
        dist::Sharding::Contiguous);
  });
}

}  // namespace test_shards
}  // namespace ea_mpi
