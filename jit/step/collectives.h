// Placing collective ops (an all-reduce across processes, registered as a
// custom op with `collective` set: tensor/custom_op.h) in a trace.
//
// A data-parallel step's trace holds one all-reduce per bucket of gradients
// (nn/parallel/ddp.h).  This pass moves each one up to right after the bound
// symbol that makes the last of its inputs, whatever the passes before it
// (fusion) did with the order: its communication then starts as soon as its
// bucket is complete.  Two placed at the same point keep their order.  Every
// process runs the same trace, so every process runs its collectives in the
// same order.
#pragma once
#include <volt/jit/trace.h>

namespace volt::jit {

bool is_collective(const BoundSymbol& b);
Trace place_collectives_pass(const Trace& t);

}  // namespace volt::jit
