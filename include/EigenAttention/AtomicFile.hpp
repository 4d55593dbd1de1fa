// SPDX-License-Identifier: MIT
/// \file AtomicFile.hpp
/// A file written all or nothing: the one implementation behind npy::write and the
/// eigen-attention tool's outputs (its .npy files and PNG heatmaps). Included by Npy.hpp.
///
/// The constructor creates a fresh temporary file in the target's directory (same file system,
/// so the final rename is atomic); write() appends to it; commit() flushes it to disk (fsync),
/// closes it and renames it over the target. Until commit() succeeds the target is untouched,
/// and the destructor removes the temporary. Every failure throws npy::Error (declared in
/// Npy.hpp: the library's I/O error) whose message is "<target>: <problem>": it names the file
/// the caller asked for, never the temporary.
///
/// The class holds one pointer (its state lives in the library), so its layout does not depend
/// on the caller's compiler flags.
#pragma once

#include <cstddef>

#include <EigenAttention/export.hpp>

namespace EigenAttention {

/// A file written all or nothing: a temporary beside the target until commit() renames it over
/// the target; removed by the destructor otherwise. Failures throw npy::Error naming the target.
class EIGEN_ATTENTION_EXPORT AtomicFile {
 public:
  /// Creates the temporary file beside `path` (mode 0666 less the umask). \throws npy::Error
  /// "<path>: cannot create a file in '<directory>': <reason>", or for an empty path.
  explicit AtomicFile(const char* path);
  /// Removes the temporary file unless commit() succeeded.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// The target: the file the caller asked for.
  const char* path() const;
  /// The temporary file's name, for a caller that must remove it from a signal handler; no
  /// message names it.
  const char* temporary() const;

  /// Appends `size` bytes. \throws npy::Error "<path>: write error: <reason>".
  void write(const void* data, std::size_t size);
  /// Flushes what was written to disk (fsync, where the file system supports it) and closes the
  /// temporary file; commit() does this itself when not yet done. Lets a caller committing
  /// several files together flush them all before renaming any. \throws npy::Error
  /// "<path>: cannot flush to disk: ..." or "<path>: write error on close: ...".
  void finish();
  /// finish(), then renames the temporary file over the target. \throws npy::Error
  /// "<path>: cannot rename the temporary file over it: <reason>" (and the temporary is removed).
  void commit();

 private:
  struct State;
  State* state_;
};

}  // namespace EigenAttention
