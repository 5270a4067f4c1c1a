// The autocast transform: a pass over a trace that makes it a mixed-precision
// program (the rule is tensor/autocast.h's, the one eager AutocastGuard uses).
//
//   auto f = volt::jit::autocast(volt::jit::jit(model), volt::kBF16);
//   Tensor logits = f(x);                 // bf16: the last linear ran in bf16
//   for (auto& t : volt::jit::last_traces(f)) std::cout << t.str();
//
// The pass replays the traced program op by op with the rule switched on:
// each matmul, linear, convolution or attention gets convert_element_type
// lines in front of it for its f32 operands and runs in the low type;
// softmax, log_softmax, layer_norm, the losses and the reductions get their
// 16-bit operands converted to f32; every other op is recorded again on
// whatever types now reach it.  The trace it appends is "Autocast transform
// (bf16)".  It runs before the grad pass, so the backward trace differentiates
// the casts (the gradient of a cast is a cast back): the f32 parameters, the
// master weights, get f32 gradients, and their bf16 copies are made once per
// call (a parameter read twice is cast once: the following CSE pass).
#pragma once
#include <volt/jit/jit.h>

namespace volt::jit {

// The trace `t` recorded again under the autocast rule to `low` (bf16, f16).
Trace autocast_pass(const Trace& t, ProxyNames& names, DType low);

// `f` with the autocast transform in its pipeline (a fresh cache).
JitFunction autocast(const JitFunction& f, DType low);

}  // namespace volt::jit
