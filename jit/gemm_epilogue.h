// The weight gradient's GEMM with the optimizer's update in its store.
//
// In a compiled training step the gradient of a weight is a matmul whose one
// reader is the optimizer's fused update (Adam: the new moments and the new
// weight, element by element).  This pass moves that part of the update
// region into a region of its own that begins with the matmul:
//
//   (t140, t144, t150) = cpuFusion27(t123, x, s10, s11, t137, t136, _0_weight)
//     t124 = volt.matmul(t123, x)
//     t139 = prims.sub(t124, s10)
//     ...
//
// Its kernel is the update's kernel (the code generator's, the gradient an
// input like any other); the region runs as one cpu::gemm_f32 whose epilogue
// applies that kernel to each finished block of the gradient while the block
// is still in cache, so the gradient is never read back from memory.  The
// update is the same code on the same values: the same bits as before.
//
// Applies to CPU fusion regions only, to a 2-D f32 matmul whose product has
// the region's shape and is read by nothing else; the rest of a region (the
// updates of parameters with no such GEMM) stays a region of its own.
#pragma once
#include <vector>

#include <volt/jit/codegen.h>
#include <volt/jit/trace.h>

namespace volt::jit {

Trace gemm_epilogue_pass(const Trace& t);

// A fusion region that begins with the matmul its kernel is applied to.
bool is_gemm_epilogue(const BoundSymbol& b);

// Runs such a region: C = a b into `product` (contiguous, the matmul's shape),
// each finished block then updated by the region's kernel.  `args` are the
// kernel's pointers: the product first, then the region's other inputs, then
// its outputs.
void run_gemm_epilogue(const BoundSymbol& region, const Tensor& a, const Tensor& b, float* product,
                       void* const* args, unsigned long long rng_seed, unsigned long long rng_offset);

}  // namespace volt::jit
