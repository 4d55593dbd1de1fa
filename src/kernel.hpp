// Forwarder: the kernels live in src/kernels/ now. Kept until the files that include
// "kernel.hpp" include "kernels/kernels.hpp" instead; then to be deleted.
#pragma once
#include "kernels/kernels.hpp"
