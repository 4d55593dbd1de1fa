// SPDX-License-Identifier: MIT
// Must not compile with a struct packing flag (-fpack-struct=1, given by the test): Options
// would be laid out differently from the library's.
#include <EigenAttention/Options.hpp>

int main() {}
