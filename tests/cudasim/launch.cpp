// cudasim: kernel libraries and launches.  A launch runs every thread of every
// block on the host; a kernel with __syncthreads runs its block's threads as
// fibers that all stop at each barrier.
#include "sim.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

// ------------------------------------------------------------- kernel globals
// What the kernels' shim reads as threadIdx, blockIdx, blockDim, gridDim.
struct volt_sim_dim3 {
  unsigned x, y, z;
};
extern "C" {
__attribute__((visibility("default"))) volt_sim_dim3 volt_sim_threadIdx{0, 0, 0}, volt_sim_blockIdx{0, 0, 0},
    volt_sim_blockDim{1, 1, 1}, volt_sim_gridDim{1, 1, 1};
}
SIM_EXPORT void volt_sim_syncthreads();

namespace cudasim {

// ------------------------------------------------------------- fibers
// A block's threads when the kernel has barriers: each runs on its own stack
// until it reaches __syncthreads or ends; the scheduler then resumes the next.
#if defined(__x86_64__)
// volt_sim_switch(save, next): saves the callee-saved registers and the stack
// pointer into *save, then continues where `next` was saved.
extern "C" void volt_sim_switch(void** save, void* next);
asm(R"(
  .text
  .globl volt_sim_switch
  .type volt_sim_switch, @function
volt_sim_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size volt_sim_switch, .-volt_sim_switch
)");
#endif

enum class FiberState { Ready, AtBarrier, Done };

struct Fiber {
  std::vector<char> stack;
  FiberState state = FiberState::Ready;
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
};

struct Block {
  std::vector<Fiber> fibers;
  size_t current = 0;
  void (*run)(void*) = nullptr;
  void* bound = nullptr;
#if defined(__x86_64__)
  void* scheduler_sp = nullptr;
#else
  ucontext_t scheduler;
#endif
};

Block* g_block = nullptr;  // the block whose fibers run now
constexpr size_t kFiberStack = 64 * 1024;

void to_scheduler() {
  Fiber& f = g_block->fibers[g_block->current];
#if defined(__x86_64__)
  volt_sim_switch(&f.sp, g_block->scheduler_sp);
#else
  swapcontext(&f.ctx, &g_block->scheduler);
#endif
}

void fiber_main() {
  g_block->run(g_block->bound);
  g_block->fibers[g_block->current].state = FiberState::Done;
  to_scheduler();
  std::abort();  // a finished fiber is never resumed
}

void start_fiber(Fiber& f) {
  f.state = FiberState::Ready;
  if (f.stack.empty()) f.stack.resize(kFiberStack);
#if defined(__x86_64__)
  // The stack as volt_sim_switch leaves it: six saved registers, then the
  // address `ret` jumps to, laid out so fiber_main starts with an ABI-aligned stack.
  auto top = reinterpret_cast<uintptr_t>(f.stack.data() + f.stack.size()) & ~uintptr_t(15);
  auto* sp = reinterpret_cast<void**>(top - 64);
  for (int i = 0; i < 6; ++i) sp[i] = nullptr;
  sp[6] = reinterpret_cast<void*>(&fiber_main);
  sp[7] = nullptr;
  f.sp = sp;
#else
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack.data();
  f.ctx.uc_stack.ss_size = f.stack.size();
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, fiber_main, 0);
#endif
}

void resume(Block& b, size_t i) {
  b.current = i;
  Fiber& f = b.fibers[i];
#if defined(__x86_64__)
  volt_sim_switch(&b.scheduler_sp, f.sp);
#else
  swapcontext(&b.scheduler, &f.ctx);
#endif
}

// ------------------------------------------------------------- kernels
// A kernel's entry in its library: copies the launch parameters p into
// *bound and says how to run one GPU thread on them and how to free them.
using KernelEntry = void (*)(void** p, void** bound, void (**run)(void*), void (**release)(void*));

}  // namespace cudasim

struct CUlib_st {
  void* handle = nullptr;
  bool barriers = false;
};

struct CUkern_st {
  uint64_t magic = 0x766f6c746b65726eull;
  std::string name;
  cudasim::KernelEntry entry = nullptr;
  bool barriers = false;
};

namespace cudasim {

// Runs one launch: every block, every thread.
void run_grid(const CUkern_st& k, dim3 grid, dim3 block, void (*run)(void*), void* bound) {
  volt_sim_gridDim = {grid.x, grid.y, grid.z};
  volt_sim_blockDim = {block.x, block.y, block.z};
  const size_t threads = size_t(block.x) * block.y * block.z;
  static Block fib;  // fibers and their stacks are reused launch to launch
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        volt_sim_blockIdx = {bx, by, bz};
        auto thread_index = [&](size_t t) {
          volt_sim_threadIdx = {static_cast<unsigned>(t % block.x), static_cast<unsigned>(t / block.x % block.y),
                                static_cast<unsigned>(t / (size_t(block.x) * block.y))};
        };
        if (!k.barriers) {
          for (size_t t = 0; t < threads; ++t) {
            thread_index(t);
            run(bound);
          }
          continue;
        }
        fib.fibers.resize(threads);
        fib.run = run;
        fib.bound = bound;
        for (Fiber& f : fib.fibers) start_fiber(f);
        g_block = &fib;
        for (;;) {
          for (size_t t = 0; t < threads; ++t)
            if (fib.fibers[t].state == FiberState::Ready) {
              thread_index(t);
              resume(fib, t);
            }
          size_t done = 0, waiting = 0;
          for (Fiber& f : fib.fibers) (f.state == FiberState::Done ? done : waiting) += 1;
          if (waiting == 0) break;
          if (done > 0) {
            std::fprintf(stderr,
                         "cudasim: in kernel %s, block (%u, %u, %u), %zu threads wait at __syncthreads that "
                         "%zu finished threads never reached (undefined behaviour on a GPU)\n",
                         k.name.c_str(), bx, by, bz, waiting, done);
            std::abort();
          }
          for (Fiber& f : fib.fibers) f.state = FiberState::Ready;
        }
        g_block = nullptr;
      }
}

}  // namespace cudasim

using namespace cudasim;

SIM_EXPORT void volt_sim_syncthreads() {
  if (!g_block) return;  // a block run without fibers never reaches here
  g_block->fibers[g_block->current].state = FiberState::AtBarrier;
  to_scheduler();
}

// ============================================================= cudart
// Libraries and kernels live as long as the process, as with the driver (the
// API has no call that frees a kernel); kept here, they are not leaks.
static void* owned(std::shared_ptr<void> p) {
  static std::vector<std::shared_ptr<void>> all;
  all.push_back(p);
  return p.get();
}

extern "C" {

cudaError_t cudaLibraryLoadData(cudaLibrary_t* library, const void* code, enum cudaJitOption*, void**, unsigned int,
                                enum cudaLibraryOption*, void**, unsigned int) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  // The "CUBIN": a line "cudasim <bytes> <barriers>", then the shared library's
  // bytes in hex.  The API passes no length, and the image may be a damaged
  // cache file: hex text ends at the NUL the caller's string ends with, so its
  // real length is known without reading past it, and must match the header.
  const char* c = static_cast<const char*>(code);
  if (!c) return fail(cudaErrorInvalidKernelImage);
  unsigned long long bytes = 0;
  int barriers = 0, header = 0;
  if (std::sscanf(c, "cudasim %llu %d\n%n", &bytes, &barriers, &header) != 2 || header == 0)
    return fail(cudaErrorInvalidKernelImage);
  const char* hex = c + header;
  const size_t digits = std::strlen(hex);
  if (bytes < 4 || bytes > (1ull << 32) || digits != 2 * bytes) return fail(cudaErrorInvalidKernelImage);
  std::string image(bytes, '\0');
  auto nibble = [](char h) { return h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : -1; };
  for (size_t i = 0; i < bytes; ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return fail(cudaErrorInvalidKernelImage);
    image[i] = static_cast<char>(hi << 4 | lo);
  }
  if (std::memcmp(image.data(), "\x7f" "ELF", 4) != 0) return fail(cudaErrorInvalidKernelImage);
  char path[] = "/tmp/volt_cudasim_XXXXXX";
  int fd = ::mkstemp(path);
  if (fd < 0) return fail(cudaErrorInvalidKernelImage);
  bool ok = ::write(fd, image.data(), image.size()) == static_cast<ssize_t>(image.size());
  ::close(fd);
  void* h = ok ? ::dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
  ::unlink(path);
  if (!h) return fail(cudaErrorInvalidKernelImage);
  auto* lib = static_cast<CUlib_st*>(owned(std::make_shared<CUlib_st>()));
  lib->handle = h;
  lib->barriers = barriers != 0;
  *library = lib;
  return cudaSuccess;
}

cudaError_t cudaLibraryGetKernel(cudaKernel_t* kernel, cudaLibrary_t library, const char* name) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!library || !library->handle) return fail(cudaErrorInvalidResourceHandle);
  auto entry = reinterpret_cast<KernelEntry>(::dlsym(library->handle, (std::string("volt_sim_entry_") + name).c_str()));
  if (!entry) return fail(cudaErrorSymbolNotFound);
  auto* k = static_cast<CUkern_st*>(owned(std::make_shared<CUkern_st>()));
  k->name = name;
  k->barriers = library->barriers;
  k->entry = entry;
  *kernel = k;
  return cudaSuccess;
}

cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shared, cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  auto* k = static_cast<const CUkern_st*>(func);
  if (!k || k->magic != 0x766f6c746b65726eull) return fail(cudaErrorInvalidDeviceFunction);
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  if (threads == 0 || threads > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 ||
      grid.z > 65535 || shared != 0)
    return fail(cudaErrorInvalidConfiguration);
  void* bound = nullptr;  // the parameters' values, copied now
  void (*run)(void*) = nullptr;
  void (*release)(void*) = nullptr;
  k->entry(args, &bound, &run, &release);
  const std::string what = "kernel " + k->name + " <<<(" + std::to_string(grid.x) + "," + std::to_string(grid.y) +
                           "," + std::to_string(grid.z) + "), " + std::to_string(threads) + ">>>";
  // The bound values live as long as the work (a graph node runs them again).
  std::shared_ptr<void> values(bound, release);
  enqueue(s, what, [k, grid, block, run, values] { run_grid(*k, grid, block, run, values.get()); });
  return cudaSuccess;
}

}  // extern "C"
