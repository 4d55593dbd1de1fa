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
set(unformatted "")
foreach(file IN LISTS files)
  execute_process(COMMAND ${CLANG_FORMAT} --style=file --dry-run --Werror ${file}
                  WORKING_DIRECTORY ${ROOT} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT rc EQUAL 0)
    list(APPEND unformatted ${file})
  endif()
endforeach()
if(unformatted)
  list(JOIN unformatted "\n  " shown)
  message(FATAL_ERROR "Not formatted as .clang-format says (clang-format-14 -i <file>):\n  ${shown}")
endif()
message(STATUS "${count} C++ files, all formatted")
