// SPDX-License-Identifier: MIT
// eigen-attention run --distributed ring|ulysses: the run under mpirun, on EigenAttention::MPI
// (compiled only when the tool is built with MPI). Every rank reads the headers of Q, K and V
// (run.cpp's plan_distributed checks them, and the command line, on every rank alike), then only
// its own rows' bytes, at their offsets; computes its rows of the attention with
// ring_attention_heads_into() or ulysses_attention_heads_into(); and writes them into one output file at
// their global positions (MPI-IO, collectively), after rank 0 has written the header. Each step ends with the
// ranks agreeing on its outcome: a failure on any rank is thrown on every rank (the first failing rank's
// error, which rank 0 alone reports), so that none waits forever.
#include <mpi.h>

#include <EigenAttention/Distributed.hpp>
#include <EigenAttention/Npy.hpp>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "../index.hpp"
#include "commands.hpp"
#include "distributed.hpp"
#include "util.hpp"

namespace EigenAttention {
namespace cli {

using npy::DType;
namespace dist = EigenAttention::distributed;

// ---------------------------------------------------------------------------------------------
// .npy headers: the library's reader, every check of npy::read but the data's values

NpyHeader read_npy_header(const std::string& path) {
  npy::Header h = npy::read_header(path);
  return {path, h.dtype, std::move(h.shape), h.data_offset};
}

namespace {

// ---------------------------------------------------------------------------------------------
// MPI

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<std::size_t>(length));
}

// MPI_Init_thread; finish_distributed() ends it.
void start_mpi() {
  int provided = 0;
  const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) throw Failure("--distributed", "MPI_Init_thread failed: " + mpi_error(rc));
}

// What a step threw, to be thrown again on every rank.
enum class Kind : int { None, Usage, Failure, Npy, Invalid, Memory, Other };

// Runs `step` on this rank, then the ranks agree: when it threw on any rank, every rank throws
// the error of the lowest such rank (naming that rank when it failed on some ranks only and
// `name_rank`: not for a step that rank 0 alone does). The
// collective calls inside `step` must be reached by every rank, failed or not: a step either
// has none, or fails only before or after all of them.
template <class Step>
void together(MPI_Comm comm, Step&& step, bool name_rank = true) {
  Kind kind = Kind::None;
  std::string message;
  try {
    step();
  } catch (const Failure& e) {
    kind = e.usage() ? Kind::Usage : Kind::Failure;
    message = e.what();
  } catch (const npy::Error& e) {
    kind = Kind::Npy;
    message = e.what();
  } catch (const std::invalid_argument& e) {
    kind = Kind::Invalid;
    message = e.what();
  } catch (const std::bad_alloc&) {
    kind = Kind::Memory;
  } catch (const std::exception& e) {
    kind = Kind::Other;
    message = e.what();
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int failed[2] = {kind == Kind::None ? 0 : 1, kind == Kind::None ? size : rank};  // count, first
  int sums = 0, first = size;
  MPI_Allreduce(&failed[0], &sums, 1, MPI_INT, MPI_SUM, comm);
  if (sums == 0) return;
  MPI_Allreduce(&failed[1], &first, 1, MPI_INT, MPI_MIN, comm);
  int header[2] = {static_cast<int>(kind), static_cast<int>(message.size())};
  MPI_Bcast(header, 2, MPI_INT, first, comm);
  message.resize(static_cast<std::size_t>(header[1]));
  MPI_Bcast(&message[0], header[1], MPI_CHAR, first, comm);
  kind = static_cast<Kind>(header[0]);
  if (sums < size && name_rank) {
    message += " (on rank " + std::to_string(first) + " of " + std::to_string(size) +
               (sums == 1 ? "" : " and " + std::to_string(sums - 1) + " more") + ")";
  }
  switch (kind) {
    case Kind::Usage: {
      const std::size_t colon = message.find(": ");
      if (colon != std::string::npos)
        throw Failure(message.substr(0, colon), message.substr(colon + 2), true);
      throw Failure(message);
    }
    case Kind::Failure:
      throw Failure(message);
    case Kind::Npy:
      throw npy::Error(message);
    case Kind::Invalid:
      throw std::invalid_argument(message);
    case Kind::Memory:
      throw std::bad_alloc();
    default:
      throw std::runtime_error(message);
  }
}

void broadcast(MPI_Comm comm, std::string& s) {
  int length = static_cast<int>(s.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, comm);
  s.resize(static_cast<std::size_t>(length));
  MPI_Bcast(&s[0], length, MPI_CHAR, 0, comm);
}

// ---------------------------------------------------------------------------------------------
// Rows

// An array whose tokens are sharded, as `outer` blocks of `tokens` rows of `row` elements each
// (C order): 2-D [T, d] is 1 x T x d; bhtd [B, H, T, d] is B*H x T x d; bthd [B, T, H, d] is
// B x T x H*d; LSE [B, H, T] is B*H x T x 1.
struct Rows {
  index_t outer = 1, tokens = 0, row = 0;
};

Rows rows_of(const DistributedPlan& p, index_t heads, index_t tokens, index_t dim) {
  if (p.rank == 2) return {1, tokens, dim};
  if (p.layout == Layout::BHTD) return {p.B * heads, tokens, dim};
  return {p.B, tokens, heads * dim};
}

// This rank's tokens of a sequence of `tokens`: its runs of consecutive tokens and their count.
struct Shard {
  std::vector<dist::Segment> segments;
  index_t rows = 0;
};

Shard shard_of(const DistributedPlan& p, index_t tokens, int ranks, int rank) {
  Shard s;
  s.segments = dist::shard_segments(p.zigzag ? dist::Sharding::ZigZag : dist::Sharding::Contiguous,
                                    static_cast<std::ptrdiff_t>(tokens), ranks, rank);
  for (const dist::Segment& g : s.segments) s.rows += static_cast<index_t>(g.count);
  return s;
}

// A run of bytes: at `file` bytes from the start of the data in the file, `bytes` long; in
// memory the runs follow one another (the rank's rows, outer block by outer block, in local row
// order: the file's order too).
struct Run {
  index_t file = 0, bytes = 0;
};

std::vector<Run> runs_of(const Rows& r, const Shard& s, std::size_t element) {
  std::vector<Run> runs;
  const index_t row_bytes = r.row * static_cast<index_t>(element);
  for (index_t o = 0; o < r.outer; ++o) {
    for (const dist::Segment& g : s.segments) {
      if (g.count == 0 || row_bytes == 0) continue;
      runs.push_back({(o * r.tokens + static_cast<index_t>(g.global_first)) * row_bytes,
                      static_cast<index_t>(g.count) * row_bytes});
    }
  }
  return runs;
}

// ---------------------------------------------------------------------------------------------
// Reading

// `n` elements of raw little-endian data of `dtype` (float16, float32, float64) as T.
template <typename T>
void convert(const unsigned char* raw, DType dtype, std::size_t n, T* out) {
  for (std::size_t i = 0; i < n; ++i) {
    if (dtype == DType::Float16) {
      Eigen::half h;
      std::memcpy(&h, raw + 2 * i, 2);
      out[i] = static_cast<T>(static_cast<float>(h));
    } else if (dtype == DType::Float32) {
      float f;
      std::memcpy(&f, raw + 4 * i, 4);
      out[i] = static_cast<T>(f);
    } else {
      double d;
      std::memcpy(&d, raw + 8 * i, 8);
      out[i] = static_cast<T>(d);
    }
  }
}

// This rank's rows of `h` (the whole file is never read), converted to T. Never empty (the
// library takes a non-null pointer for an empty view).
template <typename T>
std::vector<T> read_rows(const NpyHeader& h, const Rows& r, const Shard& s) {
  const std::size_t element = npy::dtype_size(h.dtype);
  const std::vector<Run> runs = runs_of(r, s, element);
  index_t total = 0;
  for (const Run& run : runs) total += run.bytes;
  const std::size_t n = static_cast<std::size_t>(total) / element;
  std::vector<T> values(std::max<std::size_t>(n, 1));
  // The file's own type is read in place; another one through `raw`, then converted.
  const bool same = (std::is_same_v<T, float> && h.dtype == DType::Float32) ||
                    (std::is_same_v<T, double> && h.dtype == DType::Float64);
  std::vector<unsigned char> raw(same ? 0 : static_cast<std::size_t>(total));
  unsigned char* into = same ? reinterpret_cast<unsigned char*>(values.data()) : raw.data();
  std::ifstream in(h.path, std::ios::binary);
  if (!in) {
    const int e = errno;
    throw Failure(h.path, std::string("cannot open: ") + std::strerror(e));
  }
  index_t next = 0;
  for (const Run& run : runs) {
    in.seekg(static_cast<std::streamoff>(h.data_offset + static_cast<std::uint64_t>(run.file)));
    in.read(reinterpret_cast<char*>(into + next), static_cast<std::streamsize>(run.bytes));
    if (!in || in.gcount() != run.bytes) {
      throw Failure(h.path, "read error at byte " + std::to_string(h.data_offset + run.file));
    }
    next += run.bytes;
  }
  if (!same) convert(raw.data(), h.dtype, n, values.data());
  return values;
}

// ---------------------------------------------------------------------------------------------
// Writing

// One output: rank 0 creates its temporary file beside the target (an AtomicFile of
// OutputFiles, committed or removed with the others) and writes the header; then every rank
// opens it with MPI-IO and writes its rows at their global offsets.
struct SharedOutput {
  std::string what, option, path;
  DType dtype = DType::Float32;
  std::vector<index_t> shape;
  Rows rows;
  const Shard* shard = nullptr;
  std::string prefix;  // the header: magic, version, dict, padding
  AtomicFile* file = nullptr;
  std::string temporary;
  MPI_File handle = MPI_FILE_NULL;

  SharedOutput() = default;
  SharedOutput(const SharedOutput&) = delete;
  SharedOutput& operator=(const SharedOutput&) = delete;
  ~SharedOutput() {
    if (handle != MPI_FILE_NULL) MPI_File_close(&handle);  // collective: every rank unwinds alike
  }

  // Collective (on the file): this rank's rows, `data` in the file's dtype, at their places.
  void write(const unsigned char* data) {
    const std::size_t element = npy::dtype_size(dtype);
    const std::vector<Run> runs = runs_of(rows, *shard, element);
    std::vector<int> lengths;
    std::vector<MPI_Aint> offsets;
    index_t total = 0;
    for (const Run& run : runs) {
      const index_t n = run.bytes / static_cast<index_t>(element);
      if (n > INT_MAX)
        throw Failure(path, "a run of " + std::to_string(n) + " elements is too long for MPI-IO");
      lengths.push_back(static_cast<int>(n));
      offsets.push_back(static_cast<MPI_Aint>(run.file));
      total += n;
    }
    if (total > INT_MAX) {
      throw Failure(path, "this rank's " + std::to_string(total) +
                              " elements are too many for one MPI-IO write; use more ranks");
    }
    MPI_Datatype etype = MPI_DATATYPE_NULL, ftype = MPI_DATATYPE_NULL;
    MPI_Type_contiguous(static_cast<int>(element), MPI_BYTE, &etype);
    MPI_Type_commit(&etype);
    MPI_Type_create_hindexed(static_cast<int>(lengths.size()), lengths.data(), offsets.data(), etype, &ftype);
    MPI_Type_commit(&ftype);
    int rc = MPI_File_set_view(handle, static_cast<MPI_Offset>(prefix.size()), etype, ftype, "native",
                               MPI_INFO_NULL);
    MPI_Status status;
    if (rc == MPI_SUCCESS) rc = MPI_File_write_all(handle, data, static_cast<int>(total), etype, &status);
    MPI_Type_free(&ftype);
    MPI_Type_free(&etype);
    if (rc != MPI_SUCCESS) throw Failure(path, "write error: " + mpi_error(rc));
    rc = MPI_File_sync(handle);
    const int closed = MPI_File_close(&handle);
    if (rc == MPI_SUCCESS) rc = closed;
    if (rc != MPI_SUCCESS) throw Failure(path, "write error: " + mpi_error(rc));
  }
};

// The bytes of `values` (T, this rank's rows) in the file's dtype.
template <typename T>
std::vector<unsigned char> bytes_of(const std::vector<T>& values, std::size_t n, DType dtype) {
  std::vector<unsigned char> out(std::max<std::size_t>(n * npy::dtype_size(dtype), 1));
  if (dtype == DType::Float16) {
    for (std::size_t i = 0; i < n; ++i) {
      const Eigen::half h(static_cast<float>(values[i]));
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  } else if (dtype == DType::Float32) {
    for (std::size_t i = 0; i < n; ++i) {
      const float f = static_cast<float>(values[i]);
      std::memcpy(out.data() + 4 * i, &f, 4);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(values[i]);
      std::memcpy(out.data() + 8 * i, &d, 8);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------

// "512 B", "3.2 KiB", "12.0 MiB", "1.5 GiB".
std::string bytes_text(index_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (value >= 1024.0 && unit < 3) value /= 1024.0, ++unit;
  char text[64];
  std::snprintf(text, sizeof text, "%.1f %s", value, units[unit]);
  return text;
}

template <typename T>
int run_typed(MPI_Comm comm, const DistributedPlan& p, double start) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const Shard sq = shard_of(p, p.Tq, size, rank), sk = shard_of(p, p.Tk, size, rank);

  // The outputs, created before any work (an unwritable directory fails first).
  std::vector<std::unique_ptr<SharedOutput>> outputs;
  const auto add = [&](const char* what, const char* option, const std::string& path, DType dtype,
                       std::vector<index_t> shape, Rows rows) {
    auto o = std::make_unique<SharedOutput>();
    o->what = what, o->option = option, o->path = path, o->dtype = dtype, o->shape = std::move(shape);
    o->rows = rows, o->shard = &sq, o->prefix = npy::prefix(dtype, o->shape);
    outputs.push_back(std::move(o));
  };
  if (!p.out.empty()) {
    add("ATTN", "--out", p.out, p.out_dtype,
        p.rank == 2                ? std::vector<index_t>{p.Tq, p.dv}
        : p.layout == Layout::BHTD ? std::vector<index_t>{p.B, p.H, p.Tq, p.dv}
                                   : std::vector<index_t>{p.B, p.Tq, p.H, p.dv},
        rows_of(p, p.H, p.Tq, p.dv));
  }
  if (!p.lse.empty()) {
    add("LSE", "--lse", p.lse, p.lse_dtype,
        p.rank == 2 ? std::vector<index_t>{p.Tq} : std::vector<index_t>{p.B, p.H, p.Tq},
        Rows{p.B * p.H, p.Tq, 1});
  }
  std::unique_ptr<OutputFiles> files;  // rank 0's; declared after the outputs: destroyed first
  together(
      comm,
      [&] {
        if (rank != 0) return;
        files = std::make_unique<OutputFiles>();
        for (auto& o : outputs) {
          o->file = &files->add(o->option, o->path);
          o->file->write(o->prefix.data(), o->prefix.size());
          o->file->finish();
          o->temporary = o->file->temporary();
        }
      },
      false);
  for (auto& o : outputs) {
    broadcast(comm, o->temporary);
    together(comm, [&] {
      const int rc = MPI_File_open(comm, o->temporary.c_str(), MPI_MODE_WRONLY, MPI_INFO_NULL, &o->handle);
      if (rc != MPI_SUCCESS) {
        o->handle = MPI_FILE_NULL;
        throw Failure(o->path, "cannot open for MPI-IO: " + mpi_error(rc));
      }
    });
  }

  // This rank's rows of Q, K and V.
  std::vector<T> q, k, v;
  together(comm, [&] {
    q = read_rows<T>(p.q, rows_of(p, p.H, p.Tq, p.dk), sq);
    k = read_rows<T>(p.k, rows_of(p, p.Hkv, p.Tk, p.dk), sk);
    v = read_rows<T>(p.v, rows_of(p, p.Hkv, p.Tk, p.dv), sk);
  });

  const auto view = [&](auto* data, index_t heads, index_t tokens, index_t dim) {
    using V = HeadsView<std::remove_pointer_t<decltype(data)>>;
    if (p.rank == 2) return V::bhtd(data, 1, 1, tokens, dim);
    return V::contiguous(data, p.layout, p.B, heads, tokens, dim);
  };
  std::vector<T> out(static_cast<std::size_t>(std::max<index_t>(p.B * p.H * sq.rows * p.dv, 1)));
  std::vector<T> lse(p.lse.empty() ? 0 : static_cast<std::size_t>(std::max<index_t>(p.B * p.H * sq.rows, 1)));
  // The slopes and sinks of the plain run: in the computation's type (float16 for float16 files).
  const auto in_type = [&](const std::vector<double>& x) {
    std::vector<T> values(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      values[i] = p.out_dtype == DType::Float16 ? static_cast<T>(static_cast<float>(Eigen::half(x[i])))
                                                : static_cast<T>(x[i]);
    }
    return values;
  };
  const std::vector<T> slopes = in_type(p.alibi), sinks = in_type(p.sinks);
  Masks<T> masks;
  if (p.has_key_lengths) masks.key_lengths = p.key_lengths.data();
  if (p.has_alibi) masks.alibi_slopes = slopes.data();
  if (p.has_sinks) masks.sinks = sinks.data();
  dist::Stats stats;
  dist::Config config;
  config.sharding = p.zigzag ? dist::Sharding::ZigZag : dist::Sharding::Contiguous;
  config.stats = &stats;
  together(comm, [&] {
    const HeadsView<const T> Q = view(static_cast<const T*>(q.data()), p.H, sq.rows, p.dk);
    const HeadsView<const T> K = view(static_cast<const T*>(k.data()), p.Hkv, sk.rows, p.dk);
    const HeadsView<const T> V = view(static_cast<const T*>(v.data()), p.Hkv, sk.rows, p.dv);
    const HeadsView<T> O = view(out.data(), p.H, sq.rows, p.dv);
    HeadsView<T> L;
    if (!p.lse.empty()) L = HeadsView<T>::bhtd(lse.data(), p.B, p.H, sq.rows, 1);
    if (p.ulysses) {
      dist::ulysses_attention_heads_into(comm, Q, K, V, O, L, p.opt, masks, config);
    } else {
      dist::ring_attention_heads_into(comm, Q, K, V, O, L, p.opt, masks, config);
    }
  });
  q = {}, k = {}, v = {};

  // Every rank its rows, then rank 0 renames the files into place.
  for (auto& o : outputs) {
    const std::vector<T>& values = o->what == std::string("ATTN") ? out : lse;
    const std::size_t n = static_cast<std::size_t>(o->rows.outer * sq.rows * o->rows.row);
    together(comm, [&] { o->write(bytes_of(values, n, o->dtype).data()); });
  }
  together(
      comm,
      [&] {
        if (rank == 0) files->commit();
      },
      false);
  const double seconds = MPI_Wtime() - start;

  // The summary: the slowest rank's times, the bytes summed and per rank.
  double times[4] = {seconds, stats.seconds, stats.compute_seconds, stats.wait_seconds}, slowest[4] = {};
  double wait_sum = 0;
  index_t counts[3] = {stats.bytes_sent, stats.messages, stats.visible_pairs}, sums[3] = {};
  index_t sent_max = 0, pairs_min = 0, pairs_max = 0;
  MPI_Reduce(times, slowest, 4, MPI_DOUBLE, MPI_MAX, 0, comm);
  MPI_Reduce(&stats.wait_seconds, &wait_sum, 1, MPI_DOUBLE, MPI_SUM, 0, comm);
  MPI_Reduce(counts, sums, 3, MPI_INT64_T, MPI_SUM, 0, comm);
  MPI_Reduce(&stats.bytes_sent, &sent_max, 1, MPI_INT64_T, MPI_MAX, 0, comm);
  MPI_Reduce(&stats.visible_pairs, &pairs_min, 1, MPI_INT64_T, MPI_MIN, 0, comm);
  MPI_Reduce(&stats.visible_pairs, &pairs_max, 1, MPI_INT64_T, MPI_MAX, 0, comm);
  if (rank != 0 || p.quiet) return 0;
  for (const auto& o : outputs) {
    std::printf("%s: %s, %s %s\n", o->path.c_str(), o->what.c_str(), dtype_name(o->dtype),
                shape_string(o->shape).c_str());
  }
  std::printf(
      "%s attention on %d rank%s, %s sharding: T_q = %lld, T_k = %lld, %lld sequence%s x %lld head%s, %s\n",
      p.ulysses ? "ulysses" : "ring", size, size == 1 ? "" : "s", p.zigzag ? "zigzag" : "contiguous",
      static_cast<long long>(p.Tq), static_cast<long long>(p.Tk), static_cast<long long>(p.B),
      p.B == 1 ? "" : "s", static_cast<long long>(p.H), p.H == 1 ? "" : "s",
      p.compute_double ? "float64" : "float32");
  std::printf(
      "time: %.3f s in all (read, compute, write; slowest rank); the call %.3f s, %.3f s computing, "
      "%.3f s waiting for messages (slowest rank; %.3f s summed over ranks)\n",
      slowest[0], slowest[1], slowest[2], slowest[3], wait_sum);
  std::printf("sent: %s in %lld messages over all ranks, at most %s by one rank\n",
              bytes_text(sums[0]).c_str(), static_cast<long long>(sums[1]), bytes_text(sent_max).c_str());
  const double mean = static_cast<double>(sums[2]) / size;
  std::printf("visible pairs per rank: min %lld, max %lld (max/mean %.2f)\n",
              static_cast<long long>(pairs_min), static_cast<long long>(pairs_max),
              mean > 0 ? static_cast<double>(pairs_max) / mean : 1.0);
  return 0;
}

}  // namespace

void finish_distributed() {
  int started = 0, finished = 0;
  MPI_Initialized(&started);
  MPI_Finalized(&finished);
  if (!started || finished) return;
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
}

int run_distributed(const RunArgs& a) {
  start_mpi();
  MPI_Comm comm = MPI_COMM_WORLD;
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  set_error_reporting(rank == 0);  // the ranks agree on one error: rank 0 reports it
  const double start = MPI_Wtime();
  DistributedPlan plan;
  together(comm, [&] { plan = plan_distributed(a); });
  return plan.compute_double ? run_typed<double>(comm, plan, start) : run_typed<float>(comm, plan, start);
}

}  // namespace cli
}  // namespace EigenAttention
