// SPDX-License-Identifier: MIT
/// \file Version.hpp
/// EigenAttention's version, and the check that the Eigen in use is new enough.
#pragma once

#include <Eigen/Core>

#include <EigenAttention/export.hpp>

// The single source of the version number: CMake reads these three lines, each of which must
// end with its number (no trailing comment).
/// Major version of these headers: the first number of major.minor.patch.
#define EIGEN_ATTENTION_VERSION_MAJOR 0
/// Minor version of these headers: the second number of major.minor.patch.
#define EIGEN_ATTENTION_VERSION_MINOR 3
/// Patch version of these headers: the third number of major.minor.patch.
#define EIGEN_ATTENTION_VERSION_PATCH 0

/// The version as one integer, e.g. 300 for 0.3.0 (major * 10000 + minor * 100 + patch).
#define EIGEN_ATTENTION_VERSION                                                  \
  (EIGEN_ATTENTION_VERSION_MAJOR * 10000 + EIGEN_ATTENTION_VERSION_MINOR * 100 + \
   EIGEN_ATTENTION_VERSION_PATCH)

// Eigen 3.4.0's CMake version file rejects version ranges, so the minimum is checked here.
#if !EIGEN_VERSION_AT_LEAST(3, 4, 0)
#error "EigenAttention needs Eigen 3.4.0 or newer"
#endif

namespace EigenAttention {

/// The library's version as "major.minor.patch", as compiled into the library.
/// Compare with the EIGEN_ATTENTION_VERSION_* macros to detect a header/library mismatch.
EIGEN_ATTENTION_EXPORT const char* version();

}  // namespace EigenAttention
