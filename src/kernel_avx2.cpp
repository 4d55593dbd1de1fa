// The tiled kernel compiled for avx2. Instruction-set flags: -mavx2 -mfma.
#if !defined(__AVX2__) || !defined(__FMA__)
#error "kernel_avx2.cpp must be compiled with -mavx2 -mfma (CMake sets this for this file only)"
#endif
// A private copy of Eigen, compiled for AVX2: see tiled_kernel.hpp.
#undef Eigen  // the library-wide private name (CMake), replaced here
#define Eigen EigenAttentionAvx2Eigen
#include "tiled_kernel.hpp"

namespace EigenAttention {
namespace internal {

void avx2_rows(const RawProblem<float>& p, index_t first_row, index_t rows) { tiled_rows(p, first_row, rows); }
void avx2_rows(const RawProblem<double>& p, index_t first_row, index_t rows) { tiled_rows(p, first_row, rows); }

}  // namespace internal
}  // namespace EigenAttention
