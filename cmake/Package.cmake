# SPDX-License-Identifier: MIT
# Debian packages with CPack: `cmake --build build --target package` (or `cpack -G DEB` in the
# build tree) makes one .deb per install component (cmake/Install.cmake):
#   libeigenattention<major>.<minor>  runtime: the shared library
#   libeigenattention-dev             dev: headers, static library, CMake package, pkg-config file
#   eigen-attention                   cli: the command-line tool
# Depends come from dpkg-shlibdeps (libstdc++6, libc6, libpng16-16, ...) plus the packages'
# dependencies on each other and the dev package's on libeigen3-dev.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME eigen-attention)
set(CPACK_PACKAGE_VENDOR "EigenAttention")
set(CPACK_PACKAGE_CONTACT "EigenAttention developers <eigen-attention@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev cli)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The tool links the shared library of this build: dpkg-shlibdeps finds it here (its dependency
# is the package's own, below).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_BINARY_DIR})
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)

set(_ea_runtime_package libeigenattention${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME ${_ea_runtime_package})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION "Exact scaled dot-product attention on Eigen matrices (shared library)")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libeigenattention-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_DEV_DEPENDS runtime)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libeigen3-dev (>= 3.4)")
# The MPI component (libEigenAttentionMPI.a, find_package(EigenAttention COMPONENTS MPI)) needs an
# MPI to link; the rest of the package does not.
if(TARGET EigenAttention_mpi)
  set(CPACK_DEBIAN_DEV_PACKAGE_SUGGESTS "libopenmpi-dev")
endif()
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "Exact scaled dot-product attention on Eigen matrices (headers, static library, CMake and pkg-config files)")

set(CPACK_DEBIAN_CLI_PACKAGE_NAME eigen-attention)
set(CPACK_DEBIAN_CLI_PACKAGE_SECTION science)
set(CPACK_COMPONENT_CLI_DEPENDS runtime)
set(CPACK_COMPONENT_CLI_DESCRIPTION "eigen-attention: attention on .npy files, SCORES heatmaps, benchmarks")

# Every package installs the license and the changelog where Debian puts them:
# /usr/share/doc/<package>/copyright (Debian's machine-readable format, cmake/debian/copyright:
# MIT, and the licenses of what the binaries contain besides our code) and changelog.gz
# (CHANGELOG.md, compressed as Debian's policy asks, without a time stamp: gzip -n).
set(_ea_changelog_gz ${CMAKE_CURRENT_BINARY_DIR}/changelog.gz)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/CHANGELOG.md)
find_program(EIGEN_ATTENTION_GZIP gzip)
if(EIGEN_ATTENTION_GZIP)
  execute_process(COMMAND ${EIGEN_ATTENTION_GZIP} -9 -n -c ${PROJECT_SOURCE_DIR}/CHANGELOG.md
                  OUTPUT_FILE ${_ea_changelog_gz} RESULT_VARIABLE _ea_gzip_rc)
  if(NOT _ea_gzip_rc EQUAL 0)
    message(FATAL_ERROR "gzip CHANGELOG.md failed: ${_ea_gzip_rc}")
  endif()
else()
  file(ARCHIVE_CREATE OUTPUT ${_ea_changelog_gz} PATHS ${PROJECT_SOURCE_DIR}/CHANGELOG.md
       FORMAT raw COMPRESSION GZip)
endif()
set(_ea_doc_packages runtime ${_ea_runtime_package} dev libeigenattention-dev)
if(TARGET eigen-attention)
  list(APPEND _ea_doc_packages cli eigen-attention)
endif()
while(_ea_doc_packages)
  list(POP_FRONT _ea_doc_packages _ea_component _ea_package)
  install(FILES ${PROJECT_SOURCE_DIR}/cmake/debian/copyright ${_ea_changelog_gz}
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${_ea_package} COMPONENT ${_ea_component})
endwhile()

include(CPack)
