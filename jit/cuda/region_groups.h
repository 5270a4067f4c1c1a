// Adjacent independent elementwise nvrtc regions launched as one kernel
// (the "nvrtc region groups" pass, jit/cuda/region_groups.cpp).
#pragma once
#include <string>
#include <vector>

#include <volt/jit/codegen.h>
#include <volt/jit/trace.h>

namespace volt::jit::cuda {

// Whether a fusion region is such a group: its prims are those of several
// regions, each over its own extent, so its outputs have different shapes.
bool is_region_group(const BoundSymbol& region);

// One part of a group: an elementwise region's kernel, and per argument of it
// (its inputs, then its outputs) the argument of the group's table it takes.
struct GroupPart {
  const FusedKernel* kernel;
  std::vector<int> slots;
};
// The group's kernel (key, symbol volt_group_<hash>, body, readable source,
// extent: the largest part's): the parts' bodies as device functions, and a
// __global__ function calling each over its own extent.  Not compiled.
FusedKernel group_kernel(const std::vector<GroupPart>& parts, const std::string& name);

}  // namespace volt::jit::cuda
