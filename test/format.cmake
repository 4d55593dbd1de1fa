# SPDX-License-Identifier: MIT
# Every C++ file of the repository is formatted as .clang-format says (clang-format 14, Debian
# 12's, which scripts/test installs: other versions format some constructs differently).
# To format: clang-format-14 -i $(git ls-files '*.cpp' '*.hpp')
#
# cmake -DCLANG_FORMAT=<clang-format> -DROOT=<repository root> -P format.cmake
cmake_minimum_required(VERSION 3.25)

if(NOT CLANG_FORMAT)
  message(FATAL_ERROR "clang-format not found: install Debian's clang-format (scripts/test does)")
endif()
execute_process(COMMAND ${CLANG_FORMAT} --version OUTPUT_VARIABLE version)
if(NOT version MATCHES "version 14\\.")
  message(FATAL_ERROR "${CLANG_FORMAT} is not clang-format 14: ${version}")
endif()
file(GLOB_RECURSE files RELATIVE ${ROOT}
     ${ROOT}/include/*.hpp ${ROOT}/src/*.cpp ${ROOT}/src/*.hpp ${ROOT}/test/*.cpp ${ROOT}/test/*.hpp
     ${ROOT}/bench/*.cpp ${ROOT}/bench/*.hpp ${ROOT}/examples/*.cpp ${ROOT}/examples/*.hpp)
list(SORT files)
list(LENGTH files count)
# One clang-format for all the files (one per file took 27 s, nearly all of it starting the
# program): it checks every file and names each unformatted one in its diagnostics.
execute_process(COMMAND ${CLANG_FORMAT} --style=file --dry-run --Werror ${files}
                WORKING_DIRECTORY ${ROOT} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE diagnostics)
set(unformatted "")
if(NOT rc EQUAL 0)
  string(REGEX MATCHALL "[^\n]+:[0-9]+:[0-9]+: error: code should be clang-formatted" hits "${diagnostics}")
  foreach(hit IN LISTS hits)
    string(REGEX REPLACE ":[0-9]+:[0-9]+: error: .*" "" file "${hit}")
    list(APPEND unformatted ${file})
  endforeach()
  list(REMOVE_DUPLICATES unformatted)
  if(NOT unformatted)
    message(FATAL_ERROR "${CLANG_FORMAT} failed (exit status ${rc}):\n${diagnostics}")
  endif()
endif()
if(unformatted)
  list(JOIN unformatted "\n  " shown)
  message(FATAL_ERROR "Not formatted as .clang-format says (clang-format-14 -i <file>):\n  ${shown}")
endif()
message(STATUS "${count} C++ files, all formatted")
