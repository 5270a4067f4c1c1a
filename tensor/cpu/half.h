// bf16 and f16 on the CPU backend (tensor/cpu/half.cpp): conversions, and
// running a prim on them through its f32 kernel.
#pragma once
#include <functional>
#include <vector>

#include <volt/tensor/dispatch.h>
#include <volt/tensor/tensor.h>

namespace volt::cpu {

// out <- src, any strides in src, out contiguous; src or out bf16 or f16.
// Into a half type: round to nearest even from f32; same dtype: the bits.
void convert_half(const Tensor& src, Tensor& out);

// When the call reads or writes bf16/f16 (or makes them: full, uniform), runs
// `run` on f32 copies of those tensors and rounds the f32 results into `outs`
// once; returns false (and runs nothing) otherwise.
using WidenedRun = std::function<void(const OpCall& call, std::vector<Tensor>& outs)>;
bool run_widened(const OpCall& call, std::vector<Tensor>& outs, const WidenedRun& run);

// matmul or linear with bf16 operands on the bf16 GEMM, either of its paths
// (matmul_bf16.cpp), into a bf16 out, or an f32 one for a matmul with its
// flag (out_dtype=f32); false (nothing run) otherwise.
bool run_bf16_matmul(const OpCall& call, Tensor& out);

}  // namespace volt::cpu
