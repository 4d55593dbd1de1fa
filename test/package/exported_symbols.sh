#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The shared library exports the EigenAttention API and nothing of Eigen; the static library
# defines nothing in Eigen's own namespace (so none of its Eigen code can merge with a caller's).
#
#   exported_symbols.sh LIBDIR [NM [CXX]]
#
# With CXX: a caller's own shared library (a plugin) linking the static library exports none of
# EigenAttention's symbols either (the static library's objects hide them all).
#
# A symbol "of Eigen" is one whose name (the demangled text before its parameter list, without
# "typeinfo for " and the like) is in namespace Eigen or in one of the library's renamed private
# copies (EigenAttention*Eigen::); API functions whose parameters name Eigen types would be fine.
set -euo pipefail
libdir=$1
nm=${2:-nm}
cxx=${3:-}
so=$(find "${libdir}" -maxdepth 1 -name 'libEigenAttention.so.*.*.*' | head -n1)
archive=${libdir}/libEigenAttention.a
[[ -f "${so}" && -f "${archive}" ]] || { echo "no libEigenAttention.so.x.y.z and .a in ${libdir}"; exit 1; }

# name_of: the demangled symbol's own name: the text before its parameter list, without a
# template function's return type (the last word outside <...>) or "typeinfo for " and the like.
name_of() {
  sed -E 's/^(typeinfo name for|typeinfo for|vtable for|VTT for|guard variable for|construction vtable for) //' |
    awk '{ depth = 0; start = 1; out = ""
           for (i = 1; i <= length($0); ++i) { c = substr($0, i, 1)
             if (c == "<") ++depth; if (c == ">") --depth
             if (c == "(" && depth == 0) break
             if (c == " " && depth == 0) start = i + 1 }
           print substr($0, start, i - start) }'
}
# fail_with MESSAGE LIST: reports a failure and the first lines of LIST.
fail_with() {
  echo "FAIL: $1"
  printf '%s\n' "$2" | head -n 20 | sed 's/^/  /'
  status=1
}

of_eigen='(^|[^A-Za-z0-9_])(Eigen|EigenAttention[A-Za-z0-9_]*Eigen)::'

# Version nodes are absolute symbols (A) of their own; every exported symbol must carry one
# (name@@EIGEN_ATTENTION_x.y), so that two ABI-incompatible versions in one process do not mix.
nodes=$("${nm}" -D --defined-only "${so}" | awk '$2 == "A" { print $3 }')
exported=$("${nm}" -D -C --defined-only "${so}" | awk '$2 != "A"' | cut -d' ' -f3-)
unversioned=$(printf '%s\n' "${exported}" | grep -v '@@EIGEN_ATTENTION_[0-9]*\.[0-9]*$' || true)
exported=$(printf '%s\n' "${exported}" | sed -E 's/@@?[A-Za-z0-9_.]+$//')
count=$(printf '%s\n' "${exported}" | grep -c . || true)
eigen=$(printf '%s\n' "${exported}" | name_of | grep -E "${of_eigen}" || true)
not_api=$(printf '%s\n' "${exported}" | name_of | grep -vE '^EigenAttention::' || true)
echo "${so}: ${count} exported symbols, version node(s): ${nodes:-none}"
printf '%s\n' "${exported}" | sed 's/^/  /'
status=0
[[ -z "${eigen}" ]] || fail_with "symbols of Eigen exported ($(printf '%s\n' "${eigen}" | grep -c .)):" "${eigen}"
[[ -n "${nodes}" && -z "${unversioned}" ]] ||
  fail_with "exported symbols without the version node EIGEN_ATTENTION_<major>.<minor>:" "${unversioned}"
[[ -z "${not_api}" ]] || fail_with "exported symbols outside namespace EigenAttention:" "${not_api}"

# In the archive: any defined symbol whose name is in Eigen's own namespace would be merged with
# the caller's (weak, vague linkage) at static link time.
in_eigen=$("${nm}" -C --defined-only "${archive}" 2>/dev/null | awk 'NF >= 3' | cut -d' ' -f3- | name_of |
           grep -E '(^|[^A-Za-z0-9_])Eigen::' | sort -u || true)
if [[ -n "${in_eigen}" ]]; then
  fail_with "${archive} defines symbols in namespace Eigen ($(printf '%s\n' "${in_eigen}" | grep -c .)), e.g.:" "${in_eigen}"
else
  echo "${archive}: no symbol defined in namespace Eigen"
fi
# Nor a weak (inline) function of the public API: compiled with the library's flags, it would be
# merged with the caller's copy of the same inline function, compiled with other flags.
public_weak=$("${nm}" -C --defined-only "${archive}" 2>/dev/null | awk '$2 ~ /^[WVu]$/' | cut -d' ' -f3- | name_of |
              grep -E '^EigenAttention::' | grep -vE '^EigenAttention::(internal::|npy::Error(::|$))' | sort -u || true)
if [[ -n "${public_weak}" ]]; then
  fail_with "${archive} defines inline functions of the public API:" "${public_weak}"
else
  echo "${archive}: no inline function of the public API"
fi
if [[ -n "${cxx}" ]]; then
  work=$(mktemp -d)
  trap 'rm -rf "${work}"' EXIT
  cat >"${work}/plugin.cpp" <<'PLUGIN'
#include <EigenAttention/EigenAttention.hpp>
extern "C" double plugin_entry() {
  const Eigen::MatrixXf Q = Eigen::MatrixXf::Random(8, 4);
  return EigenAttention::attention(Q, Q, Q).sum();
}
PLUGIN
  read -r -a cflags <<<"$(PKG_CONFIG_PATH="${libdir}/pkgconfig" pkg-config --cflags eigen-attention)"
  "${cxx}" -std=c++17 -O1 -fPIC -shared -DEIGEN_ATTENTION_STATIC_DEFINE "${cflags[@]}" "${work}/plugin.cpp" \
    "${archive}" -pthread -o "${work}/libplugin.so"
  # Strong symbols only: the weak ones are the plugin's own instances of inline header code.
  leaked=$("${nm}" -D -C --defined-only "${work}/libplugin.so" | awk '$2 ~ /^[TDBR]$/' | grep 'EigenAttention' || true)
  if [[ -n "${leaked}" ]]; then
    fail_with "a shared library linking ${archive} exports EigenAttention's symbols:" "${leaked}"
  else
    echo "a plugin linking ${archive} exports none of its symbols"
  fi
fi
[[ ${status} == 0 ]] && echo "0 symbols of Eigen exported"
exit "${status}"
