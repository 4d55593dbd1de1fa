#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One cell of the consumer matrix: builds test/package/consumer.cpp the way a user builds their
# own code, against an installed EigenAttention (the staging prefix), and runs it linked to the
# static and to the shared library.
#
#   consumer_matrix.sh PREFIX WORKDIR CXX STD [FLAGS...]
#
# The compile flags come from pkg-config (PREFIX's eigen-attention.pc) plus FLAGS; the object is
# compiled once and linked twice: PREFIX/lib*/libEigenAttention.a, and -lEigenAttention (the
# .so, found at run time through -rpath). Exits 77 (ctest: skipped), saying why, when the
# compiler is missing or the host cannot run code built with an instruction-set flag in FLAGS.
set -euo pipefail
prefix=$1 work=$2 cxx=$3 std=$4
shift 4
flags=("$@")

skip() {
  echo "SKIPPED: $*"
  exit 77
}

command -v "${cxx}" >/dev/null 2>&1 || skip "${cxx} is not installed"
command -v pkg-config >/dev/null 2>&1 || skip "pkg-config is not installed"

# An instruction-set flag the host's CPU lacks would build code that cannot run here.
cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
for flag in "${flags[@]}"; do
  case "${flag}" in
    -mavx2) need=avx2 ;;
    -mfma) need=fma ;;
    -mavx512f) need=avx512f ;;
    *) need= ;;
  esac
  if [[ -n "${need}" && "${cpu_flags}" != *" ${need} "* ]]; then
    skip "this CPU has no ${need} (needed by ${flag})"
  fi
done

libdir=$(dirname "$(find "${prefix}" -name 'eigen-attention.pc' -path '*/pkgconfig/*' | head -n1)")/..
libdir=$(cd "${libdir}" && pwd)
export PKG_CONFIG_PATH="${libdir}/pkgconfig${PKG_CONFIG_PATH:+:${PKG_CONFIG_PATH}}"
read -r -a pc_cflags <<<"$(pkg-config --cflags eigen-attention)"
read -r -a pc_libs <<<"$(pkg-config --libs eigen-attention)"

source_file="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/consumer.cpp"
rm -rf "${work}"
mkdir -p "${work}"
cd "${work}"
echo "compiler: $("${cxx}" --version | head -n1)"
echo "flags:    -std=${std} ${flags[*]} ${pc_cflags[*]}"
"${cxx}" "-std=${std}" "${flags[@]}" "${pc_cflags[@]}" -c "${source_file}" -o consumer.o

# Linked with the same flags (e.g. -fsanitize=address needs its runtime at link time).
"${cxx}" "${flags[@]}" consumer.o "${libdir}/libEigenAttention.a" -pthread -o consumer_static
"${cxx}" "${flags[@]}" consumer.o "${pc_libs[@]}" "-Wl,-rpath,${libdir}" -pthread -o consumer_shared
loaded=$(ldd ./consumer_shared)
if [[ "${loaded}" != *"libEigenAttention.so"*" => ${libdir}/libEigenAttention.so"* ]]; then
  echo "consumer_shared does not load ${libdir}'s libEigenAttention.so:"
  echo "${loaded}"
  exit 1
fi

status=0
for kind in static shared; do
  echo "---- linked to the ${kind} library"
  if ! "./consumer_${kind}"; then
    echo "FAILED: consumer_${kind}"
    status=1
  fi
done
exit "${status}"
