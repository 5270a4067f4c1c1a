// The code generator: one fused region of the IR -> one kernel, for the CPU
// (the host C++ compiler) and for CUDA (NVRTC).  Both devices compile the same
// kernel function; only the two macros it is written with differ:
//
//   VOLT_KERNEL(volt_fused_1f2e...) {          // a host function / a __global__ one
//     const float* in_v0 = (const float*)args[0];
//     float* out_v3 = (float*)args[1];
//     VOLT_LOOP(i, n) {                        // a range of a host loop / a grid-stride loop
//       const float v0 = in_v0[i];
//       const bool v1 = (bool)(((float)v0) > ((float)0.0));
//       ...
//
// A region's key is that function written with canonical names (v0, v1, ...
// in the order the region defines them) and its Philox draws counted from its
// first one: it holds the op sequence, every dtype, each input's broadcast
// class and the random draws, and nothing the trace merely names.  Regions
// with equal keys share one compiled kernel (the three 784-wide layers of the
// MNIST model: one kernel forward, one backward); the first draw's counter is
// added to the offset at launch.
//
// Each region also has a readable rendering, the same function with the
// trace's names (`const float t2 = ...`), so a printed trace and its kernel
// read side by side: kernel_source() returns it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <volt/jit/trace.h>

namespace volt::jit {

// A host kernel computes elements [begin, end) of its region; run_host_kernel
// splits a region over volt's CPU threads (tensor/cpu/threads.h), the same
// threads the GEMMs run on.  Element i draws Philox counter i whichever
// thread computes it, so the split never changes a result.
using KernelFn = void (*)(long long begin, long long end, void* const* args, unsigned long long rng_seed,
                          unsigned long long rng_offset);

// The most pointers (inputs and outputs) one kernel takes; the CUDA argument
// table (volt_args) has this many slots.
constexpr int kMaxKernelArgs = 64;

struct FusedKernel {
  std::string name;        // the region's name in its trace: cpuFusion0
  std::string key;         // the canonical kernel (see above); equal keys compute the same thing
  std::string symbol;      // the compiled function's name: volt_fused_<hash of key>
  std::string body;        // the compiled function: `key` under the name `symbol`
  std::string source;      // the readable rendering, with the trace's names
  unsigned long long rng_base = 0;  // the region's first Philox counter, added at launch
  long long args = 0;      // inputs + outputs
  long long extent = 0;    // what a launch covers: elements, or the rows of a row kernel
  long long row_len = 0;   // a row kernel's row length (jit/codegen_rows.cpp); 0 for an elementwise one
  KernelFn fn = nullptr;   // CPU: the loaded function
  void* device_fn = nullptr;  // CUDA: the loaded kernel (cudaKernel_t)
};

// Runs a loaded host kernel over its n elements (the rows of a row kernel).
void run_host_kernel(const FusedKernel& kernel, long long n, void* const* args, unsigned long long rng_seed,
                     unsigned long long rng_offset);

// A row region: prims over one shape S whose innermost dim is the row, with
// reductions (sum, amax, amin) over that dim and the elementwise prims
// before and after them.  Its kernel walks each row in passes, one per
// dependent reduction (jit/codegen_rows.cpp); a CUDA block takes a row.
bool is_row_reduction(const BoundSymbol& prim);
bool is_row_region(const BoundSymbol& region);
// The threads per block a CUDA row kernel is launched with, for its row length.
unsigned row_kernel_threads(long long row_len);

// Generates the kernel of a fusion region (fusion_inputs, subsymbols, outputs).
// sums_first: the region's first input is a bf16/f16 value that the kernel
// reads as the f32 sums it was rounded from, and rounds on load as the op
// making it would have stored it (a GEMM's product in the GEMM's store,
// jit/rewrites/gemm_epilogue.h); its pointer is `const float*`.  A row
// kernel rounds it in each pass over a row that reads it (the same value).
std::shared_ptr<FusedKernel> generate_kernel(const BoundSymbol& region, const ProxyNames& names,
                                             bool sums_first = false);

// A whole translation unit: the host prelude (VOLT_KERNEL, VOLT_LOOP for a
// host loop), the Philox source, and each kernel's body.  The kernel cache
// defines VOLT_KEY in front of it.
std::string host_source(const std::vector<const FusedKernel*>& kernels);

// The CUDA definitions a fused kernel is compiled with (VOLT_KERNEL as a
// __global__ function taking its pointers in a by-value table, VOLT_LOOP as a
// grid-stride loop, the Philox source), and the full NVRTC source of one kernel.
const std::string& cuda_prelude();
std::string cuda_source(const FusedKernel& kernel);

// The readable kernel of a fusion region of a trace ("" for any other bound symbol).
std::string kernel_source(const BoundSymbol& region);

}  // namespace volt::jit
