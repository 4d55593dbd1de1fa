# SPDX-License-Identifier: MIT
# Checks that the instruction-set kernels share no inline (weak) code with the rest of the
# library. The linker keeps one copy of each weak symbol; if an AVX-512 translation unit and a
# baseline one both instantiated the same inline function, the AVX-512 copy could be the one
# kept and crash a CPU without AVX-512. Each kernel file compiles a renamed copy of Eigen so that
# this cannot happen; this test keeps it so.
#
# cmake -DNM=<nm> -DOBJECTS=<a;b;...> -DISA_OBJECTS=<x;y> -P isa_symbols.cmake
cmake_minimum_required(VERSION 3.25)

function(weak_symbols out)
  set(all "")
  foreach(object IN LISTS ARGN)
    execute_process(COMMAND ${NM} --defined-only ${object} OUTPUT_VARIABLE text RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "nm failed on ${object}")
    endif()
    string(REGEX MATCHALL "[0-9a-f]+ [WVu] [^\n]+" lines "${text}")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[0-9a-f]+ [WVu] " "" symbol "${line}")
      # The C++ personality routine's reference, and the type descriptions (typeinfo and its name,
      # which UndefinedBehaviorSanitizer emits for function types) are data, the same bytes in
      # every object: no instruction of an instruction set is in them.
      if(NOT symbol MATCHES "^(DW\\.ref\\.|_ZTI|_ZTS)")
        list(APPEND all "${symbol}")
      endif()
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES all)
  set(${out} "${all}" PARENT_SCOPE)
endfunction()

weak_symbols(base ${OBJECTS})
set(failed FALSE)
foreach(isa_object IN LISTS ISA_OBJECTS)
  weak_symbols(isa ${isa_object})
  list(LENGTH isa count)
  foreach(symbol IN LISTS isa)
    if(symbol IN_LIST base)
      message(SEND_ERROR "${isa_object} shares the weak symbol ${symbol} with the baseline objects")
      set(failed TRUE)
    endif()
  endforeach()
  message(STATUS "${isa_object}: ${count} weak symbols, none shared with the baseline")
endforeach()
if(failed)
  message(FATAL_ERROR "instruction-set kernels share inline code with the baseline")
endif()
