// SPDX-License-Identifier: MIT
// The doctest runner of eigen_attention_tests; the cases live in one file per feature.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
