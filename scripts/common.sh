# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# Shared by scripts/demo and scripts/test (sourced, not run). Bash; the callers set -euo pipefail.
#
# After sourcing: the working directory is the repository root, and
#   EA_ROOT    the repository root
#   BUILD_DIR  the build directory: $BUILD_DIR from the environment (relative to the directory
#              the script was started from), or ./build in the repository root
#   EA_JOBS    parallel build jobs (nproc)
# and EA_PACKAGES, EA_TEST_PACKAGES and the functions ea_require_packages, ea_configure and
# ea_build are defined.

EA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -n "${BUILD_DIR:-}" && "${BUILD_DIR}" != /* ]]; then
  BUILD_DIR="${PWD}/${BUILD_DIR}"
fi
BUILD_DIR="${BUILD_DIR:-${EA_ROOT}/build}"
EA_JOBS="$(nproc 2>/dev/null || echo 2)"
cd "${EA_ROOT}" || exit 1

# What building and testing needs, as Debian 12 packages: the library (cmake g++ make
# libeigen3-dev), its tests (doctest-dev), the eigen-attention tool (libpng-dev libcli11-dev), the
# tool's end-to-end tests (python3-numpy), pkg-config for the package tests' consumers
# (pkgconf), and MPI for the EigenAttention::MPI component, its tests under mpirun and the tool's
# --distributed mode (libopenmpi-dev openmpi-bin).
EA_PACKAGES=(cmake g++ make libeigen3-dev doctest-dev libpng-dev libcli11-dev python3-numpy pkgconf
             libopenmpi-dev openmpi-bin)
# What the whole test suite needs on top (scripts/test, scripts/memcheck, scripts/fuzz): clang and
# its libFuzzer runtime for the fuzzers (clang++ is also a compiler of the consumer matrix, whose
# clang cells are skipped without it), valgrind for memcheck, doxygen for the API reference
# (docs.reference), and for the Debian packages' test dpkg-dev (dpkg-shlibdeps) and file (CPack's
# ELF detection). Without them (EA_TEST_QUICK=1) those tests are skipped or not registered.
# shellcheck disable=SC2034  # used by the scripts that source this file
EA_TEST_PACKAGES=(clang libclang-rt-14-dev clang-format valgrind doxygen dpkg-dev file)

# Installs the packages of EA_PACKAGES, and of any package names given as arguments, that are
# missing (as root), or says how to (otherwise).
ea_require_packages() {
  local wanted=("${EA_PACKAGES[@]}" "$@")
  if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "note: not a Debian system; assuming ${wanted[*]} (or their equivalents) are installed" >&2
    return 0
  fi
  local missing=() package
  for package in "${wanted[@]}"; do
    if [[ "$(dpkg-query -W -f='${Status}' "${package}" 2>/dev/null || true)" != "install ok installed" ]]; then
      missing+=("${package}")
    fi
  done
  if ((${#missing[@]} == 0)); then
    return 0
  fi
  if [[ "$(id -u)" -ne 0 ]]; then
    echo "Missing packages: ${missing[*]}. Install them as root, then run this again:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
  echo "Installing missing packages: ${missing[*]}"
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}

# Configures BUILD_DIR as a Release build; extra arguments go to cmake.
ea_configure() {
  cmake -S "${EA_ROOT}" -B "${BUILD_DIR}" -DCMAKE_BUILD_TYPE=Release "$@"
}

# Builds BUILD_DIR with EA_JOBS jobs; extra arguments go to cmake --build (e.g. --target X).
ea_build() {
  cmake --build "${BUILD_DIR}" --parallel "${EA_JOBS}" "$@"
}
