// The tiled kernel compiled for portable. Instruction-set flags: none: the baseline of the target.

#include "tiled_kernel.hpp"

namespace EigenAttention {
namespace internal {

void portable_rows(const RawProblem<float>& p, index_t first_row, index_t rows) { tiled_rows(p, first_row, rows); }
void portable_rows(const RawProblem<double>& p, index_t first_row, index_t rows) { tiled_rows(p, first_row, rows); }

}  // namespace internal
}  // namespace EigenAttention
