// SPDX-License-Identifier: MIT
#include <EigenAttention/Version.hpp>

#define EIGEN_ATTENTION_STR2(x) #x
#define EIGEN_ATTENTION_STR(x) EIGEN_ATTENTION_STR2(x)

namespace EigenAttention {

const char* version() {
  return EIGEN_ATTENTION_STR(EIGEN_ATTENTION_VERSION_MAJOR) "." EIGEN_ATTENTION_STR(
      EIGEN_ATTENTION_VERSION_MINOR) "." EIGEN_ATTENTION_STR(EIGEN_ATTENTION_VERSION_PATCH);
}

}  // namespace EigenAttention
