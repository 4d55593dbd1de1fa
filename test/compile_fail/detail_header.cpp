// SPDX-License-Identifier: MIT
// Must not compile: a detail header included directly rather than through a public header.
// EA_DETAIL_HEADER, given by the test, names one of include/EigenAttention/detail/*.hpp.
#include EA_DETAIL_HEADER

int main() {}
