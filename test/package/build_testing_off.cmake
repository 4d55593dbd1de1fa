# SPDX-License-Identifier: MIT
# CMake's standard BUILD_TESTING=OFF turns off the test suite and the benchmarks, and is used
# (no "Manually-specified variables were not used" warning).
# cmake -DSOURCE_DIR=<repository> -DWORK=<scratch build dir> -DGENERATOR=<gen> -P build_testing_off.cmake
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE "${WORK}")
execute_process(
  COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK}" -G "${GENERATOR}" -DBUILD_TESTING=OFF
          -DCMAKE_BUILD_TYPE=Release
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring with -DBUILD_TESTING=OFF failed:\n${out}\n${err}")
endif()
if(err MATCHES "BUILD_TESTING")
  message(FATAL_ERROR "CMake did not use BUILD_TESTING:\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build "${WORK}" --target help
  RESULT_VARIABLE rc OUTPUT_VARIABLE targets ERROR_QUIET)
foreach(target eigen_attention_tests eigen_attention_no_alloc eigen_attention_bench eigen_attention_multihead_bench)
  if(targets MATCHES "${target}")
    message(FATAL_ERROR "BUILD_TESTING=OFF still defines ${target}")
  endif()
endforeach()
if(NOT targets MATCHES "EigenAttention_static")
  message(FATAL_ERROR "BUILD_TESTING=OFF lost the library itself:\n${targets}")
endif()
file(REMOVE_RECURSE "${WORK}")
message(STATUS "BUILD_TESTING=OFF: no test or benchmark target; the library is there")
