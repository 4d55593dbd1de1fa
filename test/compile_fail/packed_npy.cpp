// SPDX-License-Identifier: MIT
// Must not compile with a struct packing flag (-fpack-struct=1, given by the test): the array
// reference that Npy.hpp hands to the library would be laid out differently from the library's.
#include <EigenAttention/Npy.hpp>

int main() {}
