// The tiled kernel compiled for avx512. Instruction-set flags: -mavx512f -mavx512dq -mavx512vl -mavx512bw -mavx2 -mfma.
#if !defined(__AVX512F__) || !defined(__AVX512DQ__)
#error "kernel_avx512.cpp must be compiled with -mavx512f -mavx512dq (CMake sets this for this file only)"
#endif
// A private copy of Eigen, compiled for AVX-512: see tiled_kernel.hpp.
#undef Eigen  // the library-wide private name (CMake), replaced here
#define Eigen EigenAttentionAvx512Eigen
#include "tiled_kernel.hpp"

namespace EigenAttention {
namespace internal {

void avx512_rows(const RawProblem<float>& p, index_t first_row, index_t rows) { tiled_rows(p, first_row, rows); }
void avx512_rows(const RawProblem<double>& p, index_t first_row, index_t rows) { tiled_rows(p, first_row, rows); }

}  // namespace internal
}  // namespace EigenAttention
