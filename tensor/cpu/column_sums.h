// A bf16 matrix summed over its rows into f32, without widening it first:
// the bits of sum(convert_element_type(x, f32), {0}) (a bias's gradient under
// autocast, autograd/vjp.cpp), whose f32 copy of x the jit's rewrite
// "bf16 column sums" leaves out (jit/rewrites/column_sum.h).
#pragma once
#include <cstdint>

#include <volt/tensor/half.h>

namespace volt::cpu {

// out[j] = sum over i < rows of in[i * cols + j]: each element widened to f32
// (exactly), each column summed in f64 in row order and rounded to f32 once,
// as the CPU's reduction sums an f32 matrix over its leading dim.
void sum_bf16_columns(const BF16* in, int64_t rows, int64_t cols, float* out);

}  // namespace volt::cpu
