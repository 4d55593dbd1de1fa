# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# Shared by scripts/demo and scripts/test (sourced, not run). Bash; the callers set -euo pipefail.
#
# After sourcing: the working directory is the repository root, and
#   EA_ROOT    the repository root
#   BUILD_DIR  the build directory: $BUILD_DIR from the environment (relative to the directory
#              the script was started from), or ./build in the repository root
#   EA_JOBS    parallel build jobs (nproc)
# and EA_PACKAGES, EA_TOOL_PACKAGES, EA_TEST_PACKAGES, EA_SLOW_RUNNER_EXCLUDED and the functions
# ea_require_packages, ea_install_missing, ea_configure, ea_build, ea_build_dir, ea_slow_cases_*
# and ea_each_parallel are defined.

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
# What the tool alone needs (scripts/demo): the library's packages, libpng and CLI11.
# shellcheck disable=SC2034  # used by the scripts that source this file
EA_TOOL_PACKAGES=(cmake g++ make libeigen3-dev libpng-dev libcli11-dev)
# What the whole test suite needs on top (scripts/test, scripts/memcheck, scripts/fuzz): clang and
# its libFuzzer runtime for the fuzzers (clang++ is also a compiler of the consumer matrix, whose
# clang cells are skipped without it), valgrind for memcheck, doxygen for the API reference
# (docs.reference), and for the Debian packages' test dpkg-dev (dpkg-shlibdeps) and file (CPack's
# ELF detection). Without them (EA_TEST_QUICK=1) those tests are skipped or not registered.
# shellcheck disable=SC2034  # used by the scripts that source this file
EA_TEST_PACKAGES=(clang libclang-rt-14-dev clang-format valgrind doxygen dpkg-dev file)

# The doctest cases the ASan step of scripts/test leaves out (the release step runs them): sweeps
# that execute no line and no branch outcome of the library (src/, include/, per object file)
# that the cases it runs leave unexecuted: `./scripts/coverage_selection asan` checks it with
# gcov. Under ASan they took 74 of the doctest cases' 211 s (summed). Patterns as doctest takes
# them.
# shellcheck disable=SC2034  # used by the scripts that source this file
EA_ASAN_EXCLUDED=(
  'accuracy:*' 'threads: every thread count*' 'multihead crosscheck: the long-double reference*'
  'random: one long problem*' 'size safety: the fused calls never form*' 'robustness: worst errors*'
  'backward accuracy*' 'backward finite differences*' 'multihead crosscheck: random configurations*'
  'random: odd shapes*')

# The doctest cases that the steps under a slow runner leave out (scripts/memcheck: valgrind;
# scripts/cross: qemu-user): those of EA_ASAN_EXCLUDED, and further sweeps that the ASan step
# keeps because each reaches a path no other case does: numerics over many shapes or
# configurations against the long-double reference, and long repeats. Every call family, option,
# kernel, storage type and page walk still runs in a case that stays (a few paths only the sweeps
# reach: docs/testing.md, "On ARM", names them, measured with gcov); scripts/memcheck says why
# each is here. The release step runs every case.
# shellcheck disable=SC2034  # used by the scripts that source this file
EA_SLOW_RUNNER_EXCLUDED=(
  "${EA_ASAN_EXCLUDED[@]}"
  'threads: a forked child*' 'fused vs decomposed*' 'multihead crosscheck: threads*'
  'backward crosscheck*' 'backward threads*' 'decode vs reference: options*'
  'low precision: SCORES, ATTN and LSE within*' 'low precision: the bound holds*')

# The tests that check the sources, not a build (formatting, grammar, licence lines, the version,
# the README's example, the docs, what must not compile, the packages), as a ctest regular
# expression: the release step runs them; the sanitizer and cross steps leave them out.
# shellcheck disable=SC2034  # used by the scripts that source this file
EA_SOURCE_CHECKS='^(format|grammar|spdx|version|readme_example|docs\.|compile_fail\.|package\.)'

# ea_doctest_filter PATTERN...: the doctest case patterns as one doctest filter (comma-separated,
# commas in a name escaped).
ea_doctest_filter() {
  local joined="" pattern
  for pattern in "$@"; do
    joined+="${joined:+,}${pattern//,/\\,}"
  done
  echo "${joined}"
}

# ea_ctest_regex PATTERN...: the doctest case patterns as one ctest -E regular expression
# (doctest_discover_tests names a test after its case).
ea_ctest_regex() {
  local joined="" pattern
  for pattern in "$@"; do
    pattern="$(sed -e 's/[][\\.^$+?(){}|]/\\&/g' -e 's/[*]/.*/g' <<<"${pattern}")"
    joined+="${joined:+|}^${pattern}"
  done
  echo "${joined}"
}
ea_slow_cases_doctest_filter() { ea_doctest_filter "${EA_SLOW_RUNNER_EXCLUDED[@]}"; }
ea_slow_cases_ctest_regex() { ea_ctest_regex "${EA_SLOW_RUNNER_EXCLUDED[@]}"; }

# ea_each_parallel RUN REPORT ITEM...: runs `RUN ITEM` for every item in the background, EA_JOBS
# at a time (valgrind and libFuzzer each use one core), and calls `REPORT ITEM STATUS` as each
# ends. Fails when any RUN failed.
ea_each_parallel() {
  local run=$1 report=$2 item failed=0
  local -A running=()  # pid -> item (ea_reap_one reads and updates these)
  shift 2
  for item in "$@"; do
    while ((${#running[@]} >= EA_JOBS)); do ea_reap_one; done
    "${run}" "${item}" &
    running[$!]="${item}"
  done
  while ((${#running[@]} > 0)); do ea_reap_one; done
  return "${failed}"
}

# Waits for one job of the calling ea_each_parallel (its locals: running, report, failed) and
# reports it.
ea_reap_one() {
  local pid rc=0
  wait -n -p pid || rc=$?
  ((rc == 0)) || failed=1
  "${report}" "${running[${pid}]}" "${rc}"
  unset "running[${pid}]"
}

# Installs the packages of EA_PACKAGES, and of any package names given as arguments, that are
# missing (as root), or says how to (otherwise).
ea_require_packages() {
  ea_install_missing "${EA_PACKAGES[@]}" "$@"
}

# Installs the packages named as arguments that are missing (as root), or says how to (otherwise).
ea_install_missing() {
  local wanted=("$@")
  if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "note: not a Debian system; assuming ${wanted[*]} (or their equivalents) are installed" >&2
    return 0
  fi
  local missing=() package native installed
  native="$(dpkg --print-architecture)"
  for package in "${wanted[@]}"; do
    # A name without an architecture means the machine's own (or "all"): once another
    # architecture is added (scripts/cross), dpkg-query answers for each one it knows.
    if [[ "${package}" == *:* ]]; then
      installed="$(dpkg-query -W -f='${Status}\n' "${package}" 2>/dev/null || true)"
    else
      installed="$(dpkg-query -W -f='${Architecture} ${Status}\n' "${package}" 2>/dev/null |
                   sed -n "s/^\(${native}\|all\) //p" || true)"
    fi
    if [[ "${installed}" != "install ok installed" ]]; then
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
  ea_build_dir "${BUILD_DIR}" "$@"
}

# Builds the build directory $1 with EA_JOBS jobs; further arguments go to cmake --build. The
# seconds it took are added to the file $EA_BUILD_SECONDS_FILE when that is set (scripts/test
# splits each step's time into building and running with it).
ea_build_dir() {
  local dir=$1 start=${SECONDS} status=0
  shift
  cmake --build "${dir}" --parallel "${EA_JOBS}" "$@" || status=$?
  if [[ -n "${EA_BUILD_SECONDS_FILE:-}" ]]; then
    echo $((SECONDS - start)) >>"${EA_BUILD_SECONDS_FILE}"
  fi
  return "${status}"
}
