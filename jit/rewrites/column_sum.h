// A bf16 matrix summed over its rows in f32 without an f32 copy of it.
//
// Under bf16 autocast the gradient of a linear's bias is the batch's sum of
// the bf16 output gradient in f32 (autograd/vjp.cpp: sum(convert(g, f32),
// {0})).  After fusion that is a region of one prim, which writes the f32
// copy of g, then the sum, which reads it back:
//
//   (t265,) = cpuFusion17(t260)
//     t265 = prims.convert_element_type(t260, f32)   # f32[2048, 512]
//   t266 = volt.sum(t265, (0,), keepdim=False)         # f32[512]
//
// This pass makes the two one region, run by cpu::sum_bf16_columns
// (tensor/cpu/column_sums.h), which widens each element as it adds it:
//
//   (t266,) = cpuFusion17(t260)
//     t265 = prims.convert_element_type(t260, f32)
//     t266 = prims.sum(t265, (0,), keepdim=False)
//
// The same additions in the same order as the CPU's f32 column sum (f64
// chains, one per column, in row order, rounded to f32 once), so the same
// bits; the region has no generated kernel (its runner is the sum).
//
// The module jit and the lazy device sum the bias's bf16 gradient in bf16
// (sum(g, {0}), then a widening for the f32 parameter): a bf16 reduction runs
// through an f32 copy of g (tensor/cpu/half.cpp, run_widened).  The pass
// makes such a sum a region of its own too, whose runner rounds each f32 sum
// to bf16 once, as that path does:
//
//   (t391,) = cpuFusion52(t390)
//     t391 = prims.sum(t390, (0,), keepdim=False)       # bf16[32]
//
// Applies to a CPU region whose one prim widens a bf16 value to f32, read
// only by a sum over its leading dims (keepdim or not) on the CPU, and to a
// CPU sum of a bf16 value over its leading dims.  In the module jit, the
// compiled step and the lazy device; VOLT_JIT_WITHOUT="bf16 column sums" (or
// VOLT_JIT_REWRITES=0) leaves it out.
#pragma once
#include <volt/jit/trace.h>

namespace volt::jit {

Trace column_sum_pass(const Trace& t);

// A region made by the pass: a widening convert and the sum of it, or a bf16 sum.
bool is_bf16_column_sum(const BoundSymbol& b);

}  // namespace volt::jit
