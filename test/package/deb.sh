#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Debian packages, as a user gets them: builds them with CPack from a built tree, checks
# their control data, unpacks them (dpkg -x, no root needed) into a staging root, and there
#   - builds the consumer with CMake (find_package, the shared and the static library) and with
#     pkg-config, and runs it;
#   - runs the packaged eigen-attention tool (it finds the packaged library through its RUNPATH);
#   - checks that no installed file names the build tree (relocatable packages);
#   - checks that every package holds the license and the changelog where Debian puts them
#     (/usr/share/doc/<package>/copyright, machine-readable, and changelog.gz).
#
#   deb.sh BUILD_DIR WORK_DIR SOURCE_DIR CXX
set -euo pipefail
build=$1 work=$2 source=$3 cxx=$4
for tool in cpack dpkg-deb dpkg dpkg-shlibdeps file pkg-config; do
  command -v "${tool}" >/dev/null 2>&1 || { echo "SKIPPED: ${tool} is not installed"; exit 77; }
done
version=$(sed -n 's/^CPACK_PACKAGE_VERSION "\(.*\)"$/\1/p; s/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' \
          "${build}/CPackConfig.cmake" | head -n1)
[[ -n "${version}" ]] || { echo "no CPACK_PACKAGE_VERSION in ${build}/CPackConfig.cmake"; exit 1; }
minor=${version%.*}
runtime=libeigenattention${minor}

rm -rf "${work}"
mkdir -p "${work}/debs" "${work}/root"
(cd "${build}" && cpack -G DEB -B "${work}/debs" --config CPackConfig.cmake >"${work}/cpack.log" 2>&1) ||
  { cat "${work}/cpack.log"; exit 1; }

fail=0
check() {  # check DESCRIPTION COMMAND...: runs COMMAND, records a failure
  local what=$1
  shift
  if "$@"; then
    echo "ok    ${what}"
  else
    echo "FAIL  ${what}"
    fail=1
  fi
}
field() { dpkg-deb -f "$1" "$2"; }

# The packages each one must depend on; the dev package and the tool also on exactly this
# version of the runtime package.
declare -A expect_depends=(
  [${runtime}]="libstdc++6 libc6"
  [libeigenattention-dev]="${runtime} libeigen3-dev"
  [eigen-attention]="${runtime} libpng16-16 libstdc++6")
for package in "${runtime}" libeigenattention-dev eigen-attention; do
  deb=$(ls "${work}/debs/${package}_${version}_"*.deb 2>/dev/null | head -n1 || true)
  check "${package}: built" test -f "${deb}"
  [[ -f "${deb}" ]] || continue
  depends=$(field "${deb}" Depends)
  echo "      $(field "${deb}" Package) $(field "${deb}" Version): Depends: ${depends}"
  check "${package}: Package and Version" test "$(field "${deb}" Package) $(field "${deb}" Version)" = \
    "${package} ${version}"
  for dep in ${expect_depends[${package}]}; do
    check "${package}: Depends names ${dep}" grep -q "\(^\|, \)${dep}\( \|,\|$\)" <<<"${depends}"
  done
  if [[ "${package}" != "${runtime}" ]]; then
    check "${package}: Depends on ${runtime} (= ${version})" grep -qF "${runtime} (= ${version})" <<<"${depends}"
  fi
  contents=$(dpkg-deb -c "${deb}")
  for doc in copyright changelog.gz; do
    check "${package}: /usr/share/doc/${package}/${doc}" \
      grep -qE " \./usr/share/doc/${package}/${doc}\$" <<<"${contents}"
  done
  dpkg -x "${deb}" "${work}/root"
  check "${package}: copyright in Debian's machine-readable format, License: MIT" bash -c \
    "head -n1 '${work}/root/usr/share/doc/${package}/copyright' | grep -qF 'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/' &&
     grep -qx 'License: MIT' '${work}/root/usr/share/doc/${package}/copyright'"
  check "${package}: changelog.gz is CHANGELOG.md" \
    bash -c "zcat '${work}/root/usr/share/doc/${package}/changelog.gz' | cmp -s - '${source}/CHANGELOG.md'"
done
usr="${work}/root/usr"
libdir=$(dirname "$(find "${usr}" -name eigen-attention.pc | head -n1)")/..
libdir=$(cd "${libdir}" && pwd)
check "runtime: the shared library" test -f "$(ls "${libdir}"/libEigenAttention.so.* | head -n1)"
check "dev: the static library, the .so link, headers" \
  test -f "${libdir}/libEigenAttention.a" -a -L "${libdir}/libEigenAttention.so" \
       -a -f "${usr}/include/EigenAttention/EigenAttention.hpp" -a -f "${usr}/include/EigenAttention/export.hpp"
check "no packaged file names the build tree" bash -c "! grep -rlF '${build}' '${usr}'"

# The tool, through its RUNPATH.
check "the packaged tool runs (RUNPATH finds the packaged library)" \
  bash -c "env -u LD_LIBRARY_PATH '${usr}/bin/eigen-attention' --version | grep -qF '${version}'"
check "the packaged tool loads the packaged library" \
  bash -c "ldd '${usr}/bin/eigen-attention' | grep -q 'libEigenAttention.so.* => ${usr}/bin/\.\./'"

# CMake: find_package against the unpacked root, both libraries.
for kind in shared static; do
  on=$([[ ${kind} == shared ]] && echo ON || echo OFF)
  dir="${work}/cmake-${kind}"
  if cmake -S "${source}/test/package/find_package" -B "${dir}" -DCMAKE_BUILD_TYPE=Release \
       "-DCMAKE_CXX_COMPILER=${cxx}" "-DCMAKE_PREFIX_PATH=${usr}" "-DEA_EXPECTED_PREFIX=${usr}" \
       "-DEigenAttention_SHARED_LIBS=${on}" "-DEA_CHECK_KIND=${kind}" >"${dir}.log" 2>&1 &&
     cmake --build "${dir}" --target eigen_attention_consumer >>"${dir}.log" 2>&1; then
    check "CMake consumer, ${kind} library" bash -c "'${dir}/eigen_attention_consumer' | tail -n1"
  else
    cat "${dir}.log"
    check "CMake consumer, ${kind} library: configured and built" false
  fi
done

# pkg-config.
export PKG_CONFIG_PATH="${libdir}/pkgconfig"
check "pkg-config: version ${version}" test "$(pkg-config --modversion eigen-attention)" = "${version}"
check "pkg-config: the .pc file validates (its License field included)" pkg-config --validate eigen-attention
read -r -a flags <<<"$(pkg-config --cflags --libs eigen-attention)"
echo "      pkg-config --cflags --libs eigen-attention: ${flags[*]}"
if "${cxx}" -std=c++17 -O2 "${source}/test/package/consumer.cpp" "${flags[@]}" -pthread \
     -o "${work}/pkgconfig_consumer" 2>"${work}/pkgconfig.log"; then
  check "pkg-config consumer (shared library)" \
    bash -c "LD_LIBRARY_PATH='${libdir}' '${work}/pkgconfig_consumer' | tail -n1"
else
  cat "${work}/pkgconfig.log"
  check "pkg-config consumer: built" false
fi

if ((fail)); then
  echo "FAILED"
  exit 1
fi
rm -rf "${work}/root" "${work}"/cmake-* "${work}/pkgconfig_consumer"
echo "all package checks passed"
