// Run-time compilation of CUDA C++ source with NVRTC, cached in memory and on
// disk, and loading of the result through the CUDA runtime's library API
// (cudaLibraryLoadData, no libcuda link).
//
//   std::string src = volt::cuda::prelude() + "extern \"C\" __global__ void k(float* x) { x[0] = 1; }";
//   std::string ptx = volt::cuda::compile_ptx(src, "compute_90");   // no GPU needed
//   cudaKernel_t k = volt::cuda::get_kernel(src, "k", 0);            // SASS for cuda:0, cached
//
// The disk cache lives in $VOLT_KERNEL_CACHE or ~/.cache/volt/kernels; an entry
// is keyed by the source's hash, the architecture, the NVRTC version and the
// volt version, and written under a temporary name then renamed, so another
// process never reads half a file.  VOLT_LOG=cuda prints each NVRTC
// compile with its time; VOLT_LOG=cuda-source prints the source too.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace volt::cuda {

// The CUDA definitions every eager kernel starts with: the index helper, the
// shared Philox function (tensor/philox.inc) and the bf16/f16 conversions
// (tensor/half.inc).  The jit's fused kernels
// have their own prelude, beside their generator (jit/codegen.h).
const std::string& prelude();

// The most pointers a generated kernel takes in its argument table.
constexpr int kMaxKernelArgs = 64;
// A fused kernel's argument table (volt_args in the jit's CUDA prelude,
// jit/codegen.cpp), passed by value: kernel parameters live in constant
// memory, so no device allocation is needed per launch. Its last slot is the
// Philox word of graph.h's rng_state_word, or null.
struct KernelArgs {
  void* p[kMaxKernelArgs];
};
static_assert(sizeof(KernelArgs) == 512, "the jit's volt_args has the same size");

// Compiles to PTX for a virtual architecture ("compute_80"); throws a
// volt::Error with NVRTC's log and the source with line numbers on failure.
// `fast_compile` (-Ofc=max) skips most optimisation: for checking that
// sources compile, about 20x quicker; kernels that run are fully optimised.
std::string compile_ptx(const std::string& source, const std::string& arch, bool fast_compile = false);
// "NVRTC 13.0"
std::string nvrtc_version();

// The kernel `name` of `source` for `device`: from memory, else from the disk
// cache, else compiled (SASS for the device's architecture where NVRTC knows
// it, PTX otherwise) and stored in both.
cudaKernel_t get_kernel(const std::string& source, const std::string& name, int device);

// Where a kernel lives in the disk cache: the key (source, architecture,
// NVRTC and volt versions) and the file name; SASS where NVRTC knows the
// architecture, else PTX.
struct CacheEntry {
  std::string key, arch, file;
  bool sass = false;
};
CacheEntry cache_entry(const std::string& source, int cc);
// Compiles `source` for compute capability `cc` into the cache folder `dir`
// as get_kernel would, with no GPU (tests/gpu/precompile_kernels.cpp).
void precompile(const std::string& source, int cc, const std::filesystem::path& dir);
// Whether a cache file's bytes can go to the loader, which takes no length:
// an ELF image must hold the tables its header points to; text is ended by
// the string's NUL.
bool loadable_image(const std::string& image);

struct CompileCounters {
  int64_t compiled = 0;      // NVRTC invocations
  int64_t disk_hits = 0;     // loaded from the disk cache
  int64_t memory_hits = 0;   // found in this process's cache
  double compile_ms = 0;     // time spent in NVRTC
};
CompileCounters compile_counters();

// Launches a kernel over n elements on the device's stream (grid-stride loops:
// the grid is capped to a few waves of the GPU).
void launch(cudaKernel_t k, int device, long long n, void** args, unsigned block = 256);
void launch(cudaKernel_t k, int device, dim3 grid, dim3 block, void** args, size_t shared_bytes = 0);

// Prefixes every line with its number, for error messages.
std::string numbered(const std::string& source);

}  // namespace volt::cuda
