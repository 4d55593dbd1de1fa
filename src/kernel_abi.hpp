// Forwarder: the kernels live in src/kernels/ now. Kept until the files that include
// "kernel_abi.hpp" include "kernels/abi.hpp" instead; then to be deleted.
#pragma once
#include "kernels/abi.hpp"
