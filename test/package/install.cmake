# SPDX-License-Identifier: MIT
# Installs a build tree into a fresh staging prefix and checks that the package files are there.
# cmake -DBUILD_DIR=<build tree> -DPREFIX=<staging prefix> [-DCONFIG=<config>] -P install.cmake
foreach(_var BUILD_DIR PREFIX)
  if(NOT ${_var})
    message(FATAL_ERROR "install.cmake: set -D${_var}=...")
  endif()
endforeach()

file(REMOVE_RECURSE "${PREFIX}")  # nothing left over from an earlier install
set(_config)
if(CONFIG)
  set(_config --config "${CONFIG}")
endif()
execute_process(
  COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}" ${_config}
  RESULT_VARIABLE _result)
if(NOT _result EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BUILD_DIR} failed: ${_result}")
endif()

include(GNUInstallDirs)  # the same layout as the project's install rules
set(_cmake_dir "${PREFIX}/${CMAKE_INSTALL_LIBDIR}/cmake/EigenAttention")
foreach(_file
    "${_cmake_dir}/EigenAttentionConfig.cmake"
    "${_cmake_dir}/EigenAttentionConfigVersion.cmake"
    "${_cmake_dir}/EigenAttentionSharedTargets.cmake"
    "${_cmake_dir}/EigenAttentionStaticTargets.cmake"
    "${PREFIX}/${CMAKE_INSTALL_INCLUDEDIR}/EigenAttention/export.hpp"
    "${PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig/eigen-attention.pc"
    "${PREFIX}/${CMAKE_INSTALL_LIBDIR}/libEigenAttention.a"
    "${PREFIX}/${CMAKE_INSTALL_LIBDIR}/libEigenAttention.so"
    "${PREFIX}/${CMAKE_INSTALL_INCLUDEDIR}/EigenAttention/EigenAttention.hpp"
    "${PREFIX}/${CMAKE_INSTALL_DATAROOTDIR}/doc/libeigenattention-dev/copyright"
    "${PREFIX}/${CMAKE_INSTALL_DATAROOTDIR}/doc/libeigenattention-dev/changelog.gz")
  if(NOT EXISTS "${_file}")
    message(FATAL_ERROR "The install lacks ${_file}")
  endif()
endforeach()
file(GLOB _libraries "${PREFIX}/${CMAKE_INSTALL_LIBDIR}/*EigenAttention*")
if(NOT _libraries)
  message(FATAL_ERROR "The install has no EigenAttention library in ${PREFIX}/${CMAKE_INSTALL_LIBDIR}")
endif()
# Relocatable: no installed CMake or pkg-config file names the prefix it was installed to.
file(GLOB_RECURSE _package_files "${PREFIX}/${CMAKE_INSTALL_LIBDIR}/cmake/*" "${PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig/*")
get_filename_component(_real_prefix "${PREFIX}" REALPATH)
foreach(_file IN LISTS _package_files)
  file(READ "${_file}" _text)
  foreach(_path "${PREFIX}" "${_real_prefix}")
    string(FIND "${_text}" "${_path}" _at)
    if(NOT _at EQUAL -1)
      message(FATAL_ERROR "${_file} names the install prefix ${_path}: the package is not relocatable")
    endif()
  endforeach()
endforeach()
message(STATUS "Installed EigenAttention into ${PREFIX}")
