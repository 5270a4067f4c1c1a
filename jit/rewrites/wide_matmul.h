// A bf16 product whose only use is its conversion to f32 keeps its f32 sums.
//
// Under autocast an f32 weight is cast to bf16 for its GEMM; the gradient of
// that cast is a cast back, so the backward computes the weight's gradient as
// a bf16 matmul (f32 sums rounded to bf16) and then widens it again for the
// f32 master weight.  Mixed-precision frameworks take the GEMM's f32 result as
// it is: fewer rounding steps, and neither the bf16 result nor the conversion
// pass.  On the CPU:
//
//   t7 = prims.matmul(t5, t6)             # t7: "cpu bf16[784, 784]"
//   t8 = prims.convert_element_type(t7, f32)
//       ->   t8 = prims.matmul(t5, t6, out_dtype=f32)   # t8: "cpu f32[784, 784]"
//
// when nothing else reads t7 (it is not returned either).  Eager autograd
// does the same where a bf16 product's gradient flows into such a cast
// (autograd/engine.cpp).
#pragma once
#include <vector>

#include <volt/jit/trace.h>

namespace volt::jit {

// Appends the rewritten form of traces.back() to `traces`, where there is a
// pair to fold (else leaves the list as it is).
void wide_matmul_pass(std::vector<Trace>& traces);

}  // namespace volt::jit
