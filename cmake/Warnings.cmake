# SPDX-License-Identifier: MIT
# The warnings every target of this project is compiled with: the library's objects, the tool,
# the tests, the benchmarks, the examples and the fuzz targets. Included from the root
# CMakeLists.txt, before any target is made.
function(eigen_attention_warnings target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic)
  endif()
endfunction()
