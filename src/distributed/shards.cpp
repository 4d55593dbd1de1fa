// SPDX-License-Identifier: MIT
// Where the tokens of a sequence lie over the ranks: the balanced contiguous split and the
// zig-zag layout (Distributed.hpp).
#include <EigenAttention/Distributed.hpp>

#include <stdexcept>
#include <string>

namespace EigenAttention {
namespace distributed {
namespace {

void check(const char* api, std::ptrdiff_t tokens, int ranks, int rank) {
  if (ranks < 1 || rank < 0 || rank >= ranks || tokens < 0) {
    throw std::invalid_argument(std::string(api) +
                                ": needs ranks >= 1, 0 <= rank < ranks and tokens >= 0; got " +
                                "ranks = " + std::to_string(ranks) + ", rank = " + std::to_string(rank) +
                                ", tokens = " + std::to_string(tokens));
  }
}

/// Chunk c of `parts` balanced chunks of `tokens`: its first token and size.
Segment chunk(std::ptrdiff_t tokens, std::ptrdiff_t parts, std::ptrdiff_t c) {
  const std::ptrdiff_t base = tokens / parts, extra = tokens % parts;
  return {c * base + std::min(c, extra), 0, base + (c < extra ? 1 : 0)};
}

}  // namespace

std::ptrdiff_t contiguous_rows(std::ptrdiff_t tokens, int ranks, int rank) {
  check("contiguous_rows", tokens, ranks, rank);
  return chunk(tokens, ranks, rank).count;
}

std::ptrdiff_t zigzag_rows(std::ptrdiff_t tokens, int ranks, int rank) {
  check("zigzag_rows", tokens, ranks, rank);
  const std::ptrdiff_t parts = 2 * std::ptrdiff_t(ranks);
  return chunk(tokens, parts, rank).count + chunk(tokens, parts, parts - 1 - rank).count;
}

std::vector<Segment> shard_segments(Sharding sharding, std::ptrdiff_t tokens, int ranks, int rank) {
  check("shard_segments", tokens, ranks, rank);
  if (sharding == Sharding::Contiguous) return {chunk(tokens, ranks, rank)};
  const std::ptrdiff_t parts = 2 * std::ptrdiff_t(ranks);
  Segment first = chunk(tokens, parts, rank), second = chunk(tokens, parts, parts - 1 - rank);
  second.local_first = first.count;
  return {first, second};
}

}  // namespace distributed
}  // namespace EigenAttention
