// A GEMM with the elementwise work that follows it in its store: the weight
// gradient's with the optimizer's update, a layer's linear with its bias,
// ReLU and dropout mask.
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
// input like any other).  At a small batch (the GEMM's depth k up to 64) the
// region runs in chunks of 48 rows over volt's threads: each chunk of the
// gradient is made by cpu::gemm_f32 into a buffer of the thread's own (one
// chunk long, used again for the next chunk) and at once updated by the
// kernel while it is still in the thread's cache, so the gradient is never
// written to memory nor read back.  (Applying the kernel in the GEMM's own tile epilogue measured
// slower here: its blocks are 8 to 96 rows of 16 to 128 columns, too short a
// run for a kernel streaming seven arrays.)  A deeper product is made whole,
// then updated.
//
// A layer's forward is such a pair too: `linear` (its bias added in the
// GEMM's store) read only by the ReLU-and-dropout region, which becomes
//
//   (t1, t5, t7) = cpuFusion0(x, _0_weight, _0_bias)
//     t0 = volt.linear(x, _0_weight, _0_bias)
//     t1 = prims.gt(t0, 0.0)
//     ...
//     t3 = prims.uniform((8, 200), 0.0, 1.0, ..., rng_offset=0)
//
// in the module jit's training and eval traces and in the compiled step.  A
// small product is made whole, then masked; a larger one is masked block by
// block in the GEMM's own store (the kernel run on each row of each finished
// block, its Philox counters those of the element's place in the whole
// product).  The region still gives what the backward saves (the ReLU's mask,
// the dropout's output).
//
// Either way the kernel is the same code on the same values, and each element
// of the product the same sum in the same order: the same bits as the unfused
// trace.
//
// Under bf16 autocast a weight's gradient is a bf16 matmul keeping its f32
// sums (out_dtype=f32, wide_matmul.h); it heads the update region too, but is
// made whole and then updated (in chunks of rows it measured slower on the
// AMX path, whose every call configures the tiles and packs A again).
//
// A bf16 linear (autocast's forward) heads the region reading its bf16 output
// too (its ReLU and dropout, the GELU's widening cast, a residual add):
//
//   (t5, t9) = cpuFusion0(input_bf16, _0_weight_bf16, _0_bias_bf16)
//     t4 = volt.linear(input_bf16, _0_weight_bf16, _0_bias_bf16)   # bf16
//     t5 = prims.gt(t4, 0.0)
//     ...
//
// whose kernel takes the GEMM's f32 sums (the bias added in f32, as the op
// adds it: tensor/cpu/matmul_bf16.h) and rounds each to bf16 as it loads it
// (`const float* in_t4 = (const float*)args[0];  // f32 sums, rounded to bf16
// on load`), where the unfused linear stores it rounded and the next region
// loads it back: the same value, without the bf16 tensor, its pass and the
// region's launch.  The product is made whole, then the kernel runs (the
// bf16 GEMM has no store to run it in).
//
// A block's residual add after a bf16 projection, x + proj(h), sits in the
// next LayerNorm's row region (jit/codegen_rows.cpp), which a bf16 linear
// heads in the same way: the row kernel reads the f32 sums of proj(h) and
// rounds each on load, adds x, writes the sum once as the new residual and
// normalises it in the same pass over the row.  (An f32 linear heads no row
// region: its product is an f32 array either way, there is nothing to save.)
//
// Applies to CPU fusion regions only, to a 2-D f32 matmul, an f32 or bf16
// linear (its input of 2 or more dims: the rows of a (B, T, C) are one
// matrix), or a 2-D bf16 matmul with f32 sums, whose
// product has the region's shape and is read by nothing else, and whose
// operands the rest of the region does not read; the rest of a region (the
// updates of parameters with no such GEMM) stays a region of its own.  The
// input gradient's GEMM followed by the ReLU's and dropout's backward is such
// a pair too.
#pragma once
#include <vector>

#include <volt/jit/codegen.h>
#include <volt/jit/trace.h>

namespace volt::jit {

Trace gemm_epilogue_pass(const Trace& t);

// A fusion region that begins with the matmul or linear its kernel is applied to.
bool is_gemm_epilogue(const BoundSymbol& b);
// How many of its inputs are that product's operands (they come first): a
// matmul's two, a linear's two or three (x, the weight, the bias).
size_t gemm_operands(const BoundSymbol& region);

// Runs such a region: the product of `operands` (a b, or x W^T + bias) into
// `product` (contiguous f32 of the product's shape; a bf16 product's sums), then the region's kernel over
// it, chunk by chunk or block by block in the GEMM's store where that pays.
// `args` are the kernel's pointers: the product first, then the region's
// inputs after the operands, then its outputs.
void run_gemm_epilogue(const BoundSymbol& region, const Tensor* operands, float* product, void* const* args,
                       unsigned long long rng_seed, unsigned long long rng_offset);

}  // namespace volt::jit
