// SPDX-License-Identifier: MIT
// Preloaded (LD_PRELOAD) into the programs that the AddressSanitizer build runs under mpirun, when
// Clang built it: dlclose does nothing, so Open MPI's plugins (mca_*.so) stay mapped until the
// process ends. LeakSanitizer checks at exit; with the plugins still mapped it names their module
// in a leak's stack, and test/distributed/lsan_openmpi.supp suppresses what Open MPI never frees
// with the fast (frame-pointer) unwinder. Without this, the plugins are gone by then, their frames
// are "<unknown module>", and only the slow unwinder (fast_unwind_on_malloc=0, on every
// allocation: the MPI tests took twice as long) reached Open MPI's own libraries.
// Not part of the library; compiled without sanitizers (it is loaded into mpirun and Python too).
extern "C" int dlclose(void* handle) {
  static_cast<void>(handle);
  return 0;
}
