# SPDX-License-Identifier: MIT
# Cross-building for 64-bit ARM Linux (aarch64) with Debian's g++-aarch64-linux-gnu, the tests and
# the tool run under qemu-aarch64 (Debian's qemu-user): scripts/cross aarch64.
#
# The header-only dependencies (Eigen, doctest, CLI11) are the build machine's (their headers and
# CMake files do not depend on the architecture); libraries come from the cross sysroot
# (/usr/aarch64-linux-gnu) or from Debian's arm64 packages (multiarch: /usr/lib/aarch64-linux-gnu).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Programs are linked statically: under qemu-aarch64 7.2 (Debian 12) a dynamically linked program
# spins inside glibc's pthread_create (libc.so.6 + 0x823c8, a lock it takes again and again) and
# never starts its thread, while the same program linked statically runs.
set(CMAKE_EXE_LINKER_FLAGS_INIT -static)
set(EIGEN_ATTENTION_STATIC_PROGRAMS ON)  # the tests and the tool link the static library (and
# scripts/cross gives the static libpng and zlib)
# ctest runs every test program through qemu, with the cross sysroot's loader and libraries.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
