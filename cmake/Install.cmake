# SPDX-License-Identifier: MIT
# Install rules (included by the top-level CMakeLists.txt when EIGEN_ATTENTION_INSTALL is ON).
#
# Components, which are also the Debian packages (cmake/Package.cmake):
#   runtime  the shared library (libEigenAttention.so.<major>.<minor>)
#   dev      headers, the static library, the .so link, the CMake package, eigen-attention.pc
#   cli      the eigen-attention tool (installed by src/cli)
# Everything is relocatable: the CMake files and the .pc file find the prefix from where they lie.
include(CMakePackageConfigHelpers)
set(_ea_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/EigenAttention)

install(TARGETS EigenAttention_shared EXPORT EigenAttentionSharedTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
install(TARGETS EigenAttention_static EXPORT EigenAttentionStaticTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
# Distributed.hpp and detail/Distributed.hpp are the MPI component's headers: installed with it
# (src/distributed), not here (the pattern matches both).
install(DIRECTORY include/EigenAttention DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev
  PATTERN Distributed.hpp EXCLUDE)
install(FILES ${_ea_generated_include}/EigenAttention/export.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/EigenAttention COMPONENT dev)
foreach(_kind Shared Static)
  install(EXPORT EigenAttention${_kind}Targets
    NAMESPACE EigenAttention::
    DESTINATION ${_ea_cmake_dir}
    COMPONENT dev)
endforeach()
configure_package_config_file(cmake/EigenAttentionConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/EigenAttentionConfig.cmake
  INSTALL_DESTINATION ${_ea_cmake_dir})
# Minor versions may break compatibility while the major version is 0.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/EigenAttentionConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${CMAKE_CURRENT_BINARY_DIR}/EigenAttentionConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/EigenAttentionConfigVersion.cmake
  DESTINATION ${_ea_cmake_dir}
  COMPONENT dev)

# pkg-config: the prefix is found from where the .pc file lies (${pcfiledir}), when the install
# directories are relative to it (GNUInstallDirs' defaults); absolute ones are written as they are.
set(_ea_pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(EIGEN_ATTENTION_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(EIGEN_ATTENTION_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(EIGEN_ATTENTION_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH _ea_pc_to_prefix /${_ea_pc_dir} /)
  string(REGEX REPLACE "/$" "" _ea_pc_to_prefix "${_ea_pc_to_prefix}")
  set(EIGEN_ATTENTION_PC_PREFIX "\${pcfiledir}/${_ea_pc_to_prefix}")
  set(EIGEN_ATTENTION_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(EIGEN_ATTENTION_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(cmake/eigen-attention.pc.in ${CMAKE_CURRENT_BINARY_DIR}/eigen-attention.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/eigen-attention.pc DESTINATION ${_ea_pc_dir} COMPONENT dev)
