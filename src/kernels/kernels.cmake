# SPDX-License-Identifier: MIT
# The one table of the tiled kernels: the tiled kernel (tiled.hpp) compiled once per instruction
# set, chosen at run time. Included from the root CMakeLists.txt. Everything else follows from
# the table:
#   - the compile flags of each kernel, -m<feature> for each feature it needs, plus FLAGS;
#   - its translation unit, tiled_<name>.cpp, generated from tiled_isa.cpp.in: checks those
#     flags, renames Eigen (EigenAttention<Enumerator>Eigen) and defines <name>_kernel_set, the
#     kernel's entry points (KernelSet in abi.hpp: forward, backward, decode);
#   - kernel_list.hpp, generated: the X-macros from which abi.hpp declares <name>_kernel_set,
#     dispatch.cpp detects the CPU (__builtin_cpu_supports("<feature>") for each feature),
#     orders the kernels, dispatches (kernel_set, one switch) and names them (kernel_name), and
#     table.hpp checks each entry against the public enum Kernel (include/EigenAttention/Kernels.hpp);
#   - EIGEN_ATTENTION_ISA_OBJECTS_REGEX: which objects the isa_symbols test checks.
#
# eigen_attention_kernel(<Enumerator> <value> <name> [<feature>...] [BASE <base>] [CPU <predicate>]
#                        [AUTO <predicate>] [FLAGS <flag>...])
#   Enumerator, value  its Kernel enumerator and that enumerator's value (the public ABI: a
#                      mismatch with Kernels.hpp fails to compile, table.hpp)
#   name               lower case: kernel_name(), file and function names
#   feature...         CPU features as GCC and Clang spell them both in -m<feature> and in
#                      __builtin_cpu_supports; none: the baseline, compiled and run everywhere
#   BASE               a kernel that this one extends: it compiles only the entry points its
#                      features change (tiled_isa.cpp.in: the bf16 forward, the bf16 backward and
#                      a bf16 cache's prefill, on bf16 pairs: tiled.hpp kPairs) and takes the
#                      others from its base (kernel_set() in dispatch.cpp), bit for bit the base's
#                      code, at no extra compile time
#   CPU                a C++ predicate of dispatch.cpp (bool name()) that must hold besides
#                      __builtin_cpu_supports of the features: for features that the compilers'
#                      builtin cannot test (GCC 12 reports no AMX on an AMX host, Clang 14 rejects
#                      the name) or that the OS must enable (AMX's tile state); give those
#                      features' -m flags in FLAGS
#   AUTO               a C++ predicate of dispatch.cpp (bool name()): Kernel::Auto takes this
#                      kernel only where it is true (a unit that exists but is not faster there);
#                      without AUTO, wherever the CPU supports it
#   FLAGS              further compile flags of this kernel's translation unit
# Fastest first: Kernel::Auto takes the first that this CPU supports (and its AUTO allows). A new
# kernel (say AMX-FP16 for half) is one line here and its body, plus, as public API, its
# enumerator in Kernels.hpp (the next value, which kFastestKernel there then names; table.hpp
# checks both).
function(eigen_attention_kernel enumerator value name)
  cmake_parse_arguments(PARSE_ARGV 3 _ea "" "BASE;AUTO;CPU" "FLAGS")
  set_property(GLOBAL APPEND PROPERTY EIGEN_ATTENTION_KERNELS ${name})
  set_property(GLOBAL PROPERTY EIGEN_ATTENTION_KERNEL_${name}_ENUMERATOR ${enumerator})
  set_property(GLOBAL PROPERTY EIGEN_ATTENTION_KERNEL_${name}_VALUE ${value})
  set_property(GLOBAL PROPERTY EIGEN_ATTENTION_KERNEL_${name}_FEATURES ${_ea_UNPARSED_ARGUMENTS})
  set_property(GLOBAL PROPERTY EIGEN_ATTENTION_KERNEL_${name}_FLAGS ${_ea_FLAGS})
  set_property(GLOBAL PROPERTY EIGEN_ATTENTION_KERNEL_${name}_BASE ${_ea_BASE})
  set_property(GLOBAL PROPERTY EIGEN_ATTENTION_KERNEL_${name}_AUTO ${_ea_AUTO})
  set_property(GLOBAL PROPERTY EIGEN_ATTENTION_KERNEL_${name}_CPU ${_ea_CPU})
endfunction()

# GCC 12 warns falsely inside its own AVX-512 intrinsics as Eigen uses them.
set(_ea_avx512_flags -Wno-maybe-uninitialized -Wno-uninitialized)
eigen_attention_kernel(Amx 6 amx avx512f avx512dq avx512bw avx512vl avx2 fma avx512bf16
                       BASE avx512
                       # AMX's tiles (tdpbf16ps): CPUID and the OS's permission (dispatch.cpp).
                       CPU amx_bf16_usable
                       FLAGS -mamx-tile -mamx-bf16 ${_ea_avx512_flags})
eigen_attention_kernel(Avx512Bf16 5 avx512bf16 avx512f avx512dq avx512bw avx512vl avx2 fma avx512bf16
                       BASE avx512
                       # Auto only where vdpbf16ps is faster than widening (dispatch.cpp's table).
                       AUTO bf16_dot_product_is_faster
                       FLAGS ${_ea_avx512_flags})

eigen_attention_kernel(Avx512   4 avx512   avx512f avx512dq avx512bw avx512vl avx2 fma
                       FLAGS ${_ea_avx512_flags})
eigen_attention_kernel(Avx2     3 avx2     avx2 fma
                       # F16C (half <-> float 8 at a time) as a flag, not a checked feature: Clang's
                       # __builtin_cpu_supports does not know "f16c", and every AVX2 CPU has it
                       # (Intel since Ivy Bridge, AMD since Piledriver, both before AVX2).
                       FLAGS -mf16c)
eigen_attention_kernel(Portable 2 portable)

# ---- What follows from the table -------------------------------------------------------------

# Kernels that need CPU features are built for x86-64 with GCC or Clang (-m<feature>,
# __builtin_cpu_supports), unless turned off; the baseline kernels always.
option(EIGEN_ATTENTION_ISA_KERNELS "Build the kernels for wider instruction sets (x86-64)" ON)
set(EIGEN_ATTENTION_HAS_ISA_KERNELS OFF)
if(EIGEN_ATTENTION_ISA_KERNELS AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$"
   AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  set(EIGEN_ATTENTION_HAS_ISA_KERNELS ON)
endif()

# A build whose tests run only on the machine that builds it (the sanitizer steps of
# scripts/test) can leave out the kernels this CPU cannot run: they would be compiled, slowly under
# a sanitizer, and never run. Read from /proc/cpuinfo (Linux): its flags spell the features as -m
# does, but for underscores (below).
option(EIGEN_ATTENTION_HOST_KERNELS_ONLY "Build only the kernels this machine's CPU can run" OFF)
set(_ea_host_flags)
if(EIGEN_ATTENTION_HOST_KERNELS_ONLY AND EIGEN_ATTENTION_HAS_ISA_KERNELS)
  if(NOT EXISTS /proc/cpuinfo)
    message(FATAL_ERROR "EIGEN_ATTENTION_HOST_KERNELS_ONLY reads /proc/cpuinfo, which this system lacks")
  endif()
  file(STRINGS /proc/cpuinfo _ea_host_flags REGEX "^flags[ \t]*:" LIMIT_COUNT 1)
  string(REGEX REPLACE "^flags[ \t]*:" "" _ea_host_flags "${_ea_host_flags}")
  separate_arguments(_ea_host_flags UNIX_COMMAND "${_ea_host_flags}")
  # /proc/cpuinfo spells some features with an underscore that -m and __builtin_cpu_supports
  # leave out ("avx512_bf16" for avx512bf16): compare without underscores.
  list(TRANSFORM _ea_host_flags REPLACE "_" "")
endif()

# Under Clang's UndefinedBehaviorSanitizer, its object-size check keeps small inline functions out
# of line (std::bad_alloc's constructor, thrown by Eigen's allocator and ours): emitted as weak
# symbols in a kernel and in the baseline alike, which the isa_kernels test rejects (one copy is
# kept, perhaps the kernel's). The kernels leave that one check out; AddressSanitizer, on in the
# same build, checks each of their accesses against its allocation's bounds.
set(_ea_sanitizer_flags)
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang" AND EIGEN_ATTENTION_SANITIZE MATCHES "undefined")
  set(_ea_sanitizer_flags -fno-sanitize=object-size)
endif()

set(_ea_kernels_dir ${CMAKE_CURRENT_BINARY_DIR}/src/kernels)
set(EIGEN_ATTENTION_BASELINE_KERNEL_SOURCES)  # compiled with the baseline objects
set(EIGEN_ATTENTION_ISA_KERNEL_SOURCES)       # compiled last, each with its own flags
set(_ea_isa_names)
set(_ea_all_list)
set(_ea_built_list)
set(_ea_based_list)
set(_ea_built_names)
get_property(_ea_kernels GLOBAL PROPERTY EIGEN_ATTENTION_KERNELS)
foreach(_ea_name IN LISTS _ea_kernels)
  get_property(EA_ENUMERATOR GLOBAL PROPERTY EIGEN_ATTENTION_KERNEL_${_ea_name}_ENUMERATOR)
  get_property(_ea_value GLOBAL PROPERTY EIGEN_ATTENTION_KERNEL_${_ea_name}_VALUE)
  get_property(_ea_features GLOBAL PROPERTY EIGEN_ATTENTION_KERNEL_${_ea_name}_FEATURES)
  get_property(_ea_extra_flags GLOBAL PROPERTY EIGEN_ATTENTION_KERNEL_${_ea_name}_FLAGS)
  get_property(_ea_base GLOBAL PROPERTY EIGEN_ATTENTION_KERNEL_${_ea_name}_BASE)
  get_property(_ea_auto GLOBAL PROPERTY EIGEN_ATTENTION_KERNEL_${_ea_name}_AUTO)
  get_property(_ea_cpu GLOBAL PROPERTY EIGEN_ATTENTION_KERNEL_${_ea_name}_CPU)
  set(EA_NAME ${_ea_name})
  string(APPEND _ea_all_list " \\\n  X(${EA_ENUMERATOR}, ${_ea_name}, ${_ea_value})")
  if(_ea_features AND NOT EIGEN_ATTENTION_HAS_ISA_KERNELS)
    continue()
  endif()
  if(_ea_features AND EIGEN_ATTENTION_HOST_KERNELS_ONLY)
    set(_ea_missing)
    foreach(_ea_feature IN LISTS _ea_features)
      if(NOT _ea_feature IN_LIST _ea_host_flags)
        list(APPEND _ea_missing ${_ea_feature})
      endif()
    endforeach()
    if(_ea_missing)
      message(STATUS "EigenAttention: kernel ${_ea_name} left out (this CPU lacks ${_ea_missing})")
      continue()
    endif()
  endif()

  # Flags, the checks that they were given, and the CPU test.
  set(_ea_flags)
  set(_ea_defined)
  set(_ea_supports)
  foreach(_ea_feature IN LISTS _ea_features)
    string(TOUPPER ${_ea_feature} _ea_macro)
    list(APPEND _ea_flags -m${_ea_feature})
    list(APPEND _ea_defined "!defined(__${_ea_macro}__)")
    list(APPEND _ea_supports "__builtin_cpu_supports(\"${_ea_feature}\")")
  endforeach()
  if(_ea_features)
    list(JOIN _ea_flags " " _ea_flags_text)
    list(JOIN _ea_defined " || " _ea_defined)
    list(JOIN _ea_supports " && " _ea_supports)
    set(EA_PREAMBLE "// Instruction-set flags: ${_ea_flags_text}.
#if ${_ea_defined}
#error \"tiled_${_ea_name}.cpp must be compiled with ${_ea_flags_text} (kernels.cmake sets them for this file only)\"
#endif
// A private copy of Eigen, compiled for these instructions: see tiled.hpp.
#undef Eigen  // the library-wide private name (CMake), replaced here
#define Eigen EigenAttention${EA_ENUMERATOR}Eigen")
    if(_ea_cpu)
      string(APPEND _ea_supports " && ${_ea_cpu}()")
    endif()
    set(_ea_supports "(__builtin_cpu_init(), ${_ea_supports})")
  else()
    set(EA_PREAMBLE "// Instruction-set flags: none: the baseline of the target (and the library-wide Eigen).")
    set(_ea_supports "true")
  endif()
  list(APPEND _ea_built_names ${_ea_name})
  if(NOT _ea_auto)
    set(_ea_auto "true")
  else()
    set(_ea_auto "${_ea_auto}()")
  endif()
  string(APPEND _ea_built_list " \\\n  X(${EA_ENUMERATOR}, ${_ea_name}, ${_ea_supports}, ${_ea_auto})")
  set(EA_BASED 0)
  if(_ea_base)
    set(EA_BASED 1)
    string(APPEND _ea_based_list " \\\n  X(${EA_ENUMERATOR}, ${_ea_name}, ${_ea_base})")
  endif()

  set(_ea_source ${_ea_kernels_dir}/tiled_${_ea_name}.cpp)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/tiled_isa.cpp.in ${_ea_source} @ONLY)
  if(_ea_features)
    set_source_files_properties(${_ea_source} PROPERTIES
      COMPILE_OPTIONS "${_ea_flags};${_ea_extra_flags};${_ea_sanitizer_flags}")
    list(APPEND EIGEN_ATTENTION_ISA_KERNEL_SOURCES ${_ea_source})
    list(APPEND _ea_isa_names ${_ea_name})
  else()
    list(APPEND EIGEN_ATTENTION_BASELINE_KERNEL_SOURCES ${_ea_source})
  endif()
endforeach()
foreach(_ea_name IN LISTS _ea_built_names)
  get_property(_ea_base GLOBAL PROPERTY EIGEN_ATTENTION_KERNEL_${_ea_name}_BASE)
  if(_ea_base AND NOT _ea_base IN_LIST _ea_built_names)
    message(FATAL_ERROR "EigenAttention: kernel ${_ea_name} is built but its base ${_ea_base} is not")
  endif()
endforeach()
list(JOIN _ea_isa_names "|" _ea_isa_names)
set(EIGEN_ATTENTION_ISA_OBJECTS_REGEX "/tiled_(${_ea_isa_names})[.]cpp")

set(EA_ALL_KERNELS "${_ea_all_list}")
set(EA_BUILT_KERNELS "${_ea_built_list}")
set(EA_BASED_KERNELS "${_ea_based_list}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/kernel_list.hpp.in ${_ea_kernels_dir}/kernel_list.hpp @ONLY)
