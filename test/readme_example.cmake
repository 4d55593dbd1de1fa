# SPDX-License-Identifier: MIT
# The README's C++ example is examples/quickstart.cpp, which the tests compile and run
# (example.quickstart): this checks that the two are the same text, so the README never shows
# code that was not compiled. The example's first line, its SPDX license tag, is not shown there.
#
# cmake -DREADME=<README.md> -DEXAMPLE=<examples/quickstart.cpp> -P readme_example.cmake
cmake_minimum_required(VERSION 3.25)

file(READ "${README}" readme)
file(READ "${EXAMPLE}" example)
string(REGEX REPLACE "^// SPDX-License-Identifier: [^\n]*\n" "" example "${example}")
string(FIND "${readme}" "```cpp\n" start)
if(start EQUAL -1)
  message(FATAL_ERROR "${README} has no ```cpp block")
endif()
math(EXPR start "${start} + 7")
string(SUBSTRING "${readme}" ${start} -1 rest)
string(FIND "${rest}" "```" end)
string(SUBSTRING "${rest}" 0 ${end} block)
if(NOT block STREQUAL example)
  file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/readme_example.cpp" "${block}")
  message(FATAL_ERROR "The README's ```cpp block differs from ${EXAMPLE}; compare with "
                      "diff ${EXAMPLE} ${CMAKE_CURRENT_BINARY_DIR}/readme_example.cpp")
endif()
message(STATUS "The README's example is ${EXAMPLE}")
