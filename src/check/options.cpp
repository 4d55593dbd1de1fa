// SPDX-License-Identifier: MIT
// Options and the limits every call shares (options.hpp).
#include "check/options.hpp"

#include <cmath>
#include <sstream>
#include <utility>

#include "kernels/kernels.hpp"

namespace EigenAttention {
namespace internal {
namespace {

template <typename C>
C resolve_scale(const char* api, const Options& opt, const Array& q) {
  if (opt.scale.has_value()) {
    const double scale = *opt.scale;
    const C as_c = static_cast<C>(scale);
    if (!std::isfinite(scale) || !(scale > 0) || !std::isfinite(as_c) || !(as_c > 0)) {
      std::ostringstream msg;
      msg.precision(17);
      msg << "scale must be finite and > 0 in the scalar type, got " << scale;
      fail(api, msg.str());
    }
    return as_c;
  }
  if (q.size[3] == 0) {
    fail(api, "d_k is 0 (Q is " + q.shape() +
                  "), so the default scale 1/sqrt(d_k) is undefined; set Options::scale");
  }
  return static_cast<C>(1.0 / std::sqrt(static_cast<double>(q.size[3])));
}

template <typename C>
C resolve_softcap(const char* api, double softcap) {
  const C cap = static_cast<C>(softcap);
  if (!(softcap >= 0) || !std::isfinite(softcap) || !std::isfinite(cap) || (softcap > 0 && !(cap > 0))) {
    std::ostringstream msg;
    msg.precision(17);
    msg << "softcap must be 0 (off) or finite and > 0 in the scalar type, got " << softcap;
    fail(api, msg.str());
  }
  return cap;
}

}  // namespace

void check_threads(const char* api, const Options& opt) {
  if (opt.threads < 0)
    fail(api, "threads must be >= 0 (0 means all hardware threads), got " + std::to_string(opt.threads));
}

template <typename C>
ResolvedOptions<C> check_options(const char* api, const Options& opt, const Array& q) {
  ResolvedOptions<C> r;
  r.scale = resolve_scale<C>(api, opt, q);
  check_threads(api, opt);
  if (opt.window_left < -1 || opt.window_right < -1) {
    fail(api, "window sizes must be >= 0, or -1 for unbounded; got window_left = " +
                  std::to_string(opt.window_left) + ", window_right = " + std::to_string(opt.window_right));
  }
  r.softcap = resolve_softcap<C>(api, opt.softcap);
  r.causal = opt.causal;
  r.bottom_right = opt.alignment == CausalAlignment::BottomRight;
  // The bound on positions: i + offset +- window and the chunks' floor divisions stay far from
  // overflow.
  constexpr index_t limit = index_t(1) << 60;
  if (opt.diagonal_offset.has_value()) {
    const index_t offset = *opt.diagonal_offset;
    if (offset > limit || offset < -limit) {
      fail(api, "diagonal_offset must be within +-2^60, got " + std::to_string(offset));
    }
    r.fixed_offset = true;
    r.offset = offset;
  }
  r.window_left = opt.window_left;
  r.window_right = opt.window_right;
  if (opt.chunk_size < 0 || opt.chunk_size > limit)
    fail(api, "chunk_size must be between 0 (off) and 2^60, got " + std::to_string(opt.chunk_size));
  if (opt.chunk_origin > limit || opt.chunk_origin < -limit)
    fail(api, "chunk_origin must be within +-2^60, got " + std::to_string(opt.chunk_origin));
  r.chunk = opt.chunk_size;
  r.chunk_origin = opt.chunk_origin;
  r.kernel = resolve_kernel(api, opt.kernel);
  return r;
}

template <typename C>
void check_scratch(const char* api, index_t dk, index_t dv, index_t tk) {
  for (const auto& [name, n] : {std::pair{"d_k", dk}, std::pair{"d_v", dv}, std::pair{"T_k", tk}}) {
    if (n > kMaxScratchRowLength<C>) {
      fail(api, std::string(name) + " = " + num(n) + " exceeds " + num(kMaxScratchRowLength<C>) +
                    ", the most the kernels' per-thread scratch (up to " + num(kScratchRows) + " rows of " +
                    name + " elements) can count in Eigen::Index");
    }
  }
}

void check_offsets(const char* api, const char* name, const std::int64_t* cu, index_t sequences,
                   index_t total) {
  if (cu[0] != 0) fail(api, std::string(name) + "[0] is " + std::to_string(cu[0]) + " but must be 0");
  for (index_t b = 0; b < sequences; ++b) {
    if (cu[b + 1] < cu[b]) {
      fail(api, std::string(name) + " decreases: [" + num(b) + "] = " + std::to_string(cu[b]) + " > [" +
                    num(b + 1) + "] = " + std::to_string(cu[b + 1]));
    }
  }
  if (total >= 0 && cu[sequences] > total) {
    fail(api, std::string(name) + "[" + num(sequences) + "] = " + std::to_string(cu[sequences]) +
                  " exceeds the " + counted(total, "packed token"));
  }
}

void check_sequence_count(const char* api, index_t sequences) {
  if (sequences < 0) fail(api, "the number of sequences is negative: " + num(sequences));
  if (sequences > kIndexMax / static_cast<index_t>(sizeof(std::int64_t)) - 1) {
    fail(api, "the number of sequences, " + num(sequences) +
                  ", is too large: cu_seqlens of batch + 1 offsets would span more bytes than Eigen::Index "
                  "can count");
  }
}

template ResolvedOptions<float> check_options<float>(const char*, const Options&, const Array&);
template ResolvedOptions<double> check_options<double>(const char*, const Options&, const Array&);
template void check_scratch<float>(const char*, index_t, index_t, index_t);
template void check_scratch<double>(const char*, index_t, index_t, index_t);

}  // namespace internal
}  // namespace EigenAttention
