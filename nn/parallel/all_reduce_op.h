// The all-reduce as an op of volt's custom-op table (tensor/custom_op.h), so
// that a traced training step records it like any other op and the jit, which
// knows nothing of nn/, runs and places it.
//
//   std::vector<Tensor> avg = volt::dist::all_reduce_mean({g0, g1});  // printed as dist.all_reduce_mean
//
// One call reduces a list of tensors of one dtype (a bucket of gradients):
// packed into one host buffer, one blocking MPI_Allreduce, divided by the
// number of ranks, unpacked into new tensors on the inputs' devices.  The op
// is a prim with a meta function and a kernel, marked `collective` (the jit
// keeps it right after its last input is made); it has no gradient.
#pragma once
#include <cstdint>
#include <vector>

#include <volt/tensor/tensor.h>

namespace volt::dist {

int64_t all_reduce_mean_op();  // its id in the custom-op table (registered on first use)
std::vector<Tensor> all_reduce_mean(const std::vector<Tensor>& tensors);

}  // namespace volt::dist
