# SPDX-License-Identifier: MIT
# A compile-failure test: SOURCE must not compile, and the first line of the compiler's output
# that reports an error must match EXPECT, with at most MAX_LINES_BEFORE lines of context
# ("In file included from", "In instantiation of") before it: the library's own message comes
# first, not after pages of template errors.
#
# cmake -DCXX=<compiler> -DSOURCE=<file> -DINCLUDES=<dir;dir> -DEXPECT=<regex>
#       [-DFLAGS=<flag;flag>] [-DMAX_LINES_BEFORE=<n>] -P expect_error.cmake
cmake_minimum_required(VERSION 3.25)
set(_args -std=c++17 -fsyntax-only)
foreach(_dir IN LISTS INCLUDES)
  list(APPEND _args -I${_dir})
endforeach()
list(APPEND _args ${FLAGS})
execute_process(COMMAND ${CXX} ${_args} ${SOURCE}
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
if(_rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but must not")
endif()
string(REPLACE "\n" ";" _lines "${_out}")
set(_n 0)
foreach(_line IN LISTS _lines)
  if(_line MATCHES "error")
    if(NOT _line MATCHES "${EXPECT}")
      message(FATAL_ERROR "The first error is not the expected one (${EXPECT}):\n${_line}\n\nWhole output:\n${_out}")
    endif()
    if(DEFINED MAX_LINES_BEFORE AND _n GREATER MAX_LINES_BEFORE)
      message(FATAL_ERROR "${_n} lines precede the expected error (at most ${MAX_LINES_BEFORE}):\n${_out}")
    endif()
    message(STATUS "${SOURCE}: does not compile; after ${_n} lines of context the first error is\n${_line}")
    return()
  endif()
  math(EXPR _n "${_n} + 1")
endforeach()
message(FATAL_ERROR "No error line in the compiler's output:\n${_out}")
