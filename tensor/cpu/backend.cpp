// The CPU backend: allocation (large blocks kept for reuse) and the dispatch of
// each prim to its family's kernel (tensor/cpu/kernels.h): elementwise.cpp,
// copy.cpp, random.cpp, reductions.cpp, cross_entropy.cpp, matmul.cpp (GEMMs),
// windows.cpp and convolution.cpp; the loops run on volt's pool (threads.h).
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <xmmintrin.h>
#include <pmmintrin.h>

#include <volt/tensor/backend.h>
#include <volt/tensor/cpu/half.h>
#include <volt/tensor/cpu/kernels.h>
#include <volt/tensor/op_table.h>

namespace volt {
namespace {

// Blocks from this size up are kept for reuse when their tensor dies.
constexpr size_t kLargeBlock = size_t(1) << 16;
// At most this many bytes wait in the cache; beyond it blocks go back to the system.
constexpr size_t kLargeCacheLimit = size_t(1) << 30;

// A training step frees and allocates the same large tensors every step (the
// gradients, the activations of a big batch).  Fresh memory from the system
// costs a page fault and a zeroed page per 4 KiB, so freed large blocks are kept
// by exact size and handed out again; small blocks go through malloc.
class LargeBlockCache {
 public:
  // n: a multiple of 64 and >= kLargeBlock; nbytes: what the caller asked for.
  void* allocate(size_t n, size_t nbytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (auto it = free_.find(n); it != free_.end()) {
        void* p = it->second;
        free_.erase(it);
        cached_bytes_ -= n;
        live_[p] = n;
        return p;
      }
    }
    void* p = std::aligned_alloc(64, n);
    if (!p) {  // give the cached blocks back and try once more
      trim();
      p = std::aligned_alloc(64, n);
    }
    VOLT_CHECK(p != nullptr, "allocate", "out of memory allocating " << nbytes << " bytes on the CPU");
    std::lock_guard<std::mutex> lock(mutex_);
    live_[p] = n;
    return p;
  }
  // Returns false when p is not a large block (the caller frees it).
  bool release(void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end()) return false;
    const size_t n = it->second;
    live_.erase(it);
    if (cached_bytes_ + n > kLargeCacheLimit) {
      std::free(p);
    } else {
      free_.emplace(n, p);
      cached_bytes_ += n;
    }
    return true;
  }
  void trim() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [n, p] : free_) std::free(p);
    free_.clear();
    cached_bytes_ = 0;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<void*, size_t> live_;      // handed out: block -> size
  std::unordered_multimap<size_t, void*> free_;  // kept: size -> block
  size_t cached_bytes_ = 0;
};

class CpuBackend final : public Backend {
 public:
  void* allocate(size_t nbytes, int) override {
    size_t n = (nbytes + 63) / 64 * 64;
    if (n == 0) n = 64;
    if (n >= kLargeBlock) return large_.allocate(n, nbytes);
    void* p = std::aligned_alloc(64, n);
    VOLT_CHECK(p != nullptr, "allocate", "out of memory allocating " << nbytes << " bytes on the CPU");
    return p;
  }
  void deallocate(void* p, int) override {
    if (!large_.release(p)) std::free(p);
  }

  void copy(const Tensor& dst, const Tensor& src) override { cpu::copy_kernel(dst, src); }

  bool fuses(OpId op) const override { return has_fused_kernel(op); }

  void run(const OpCall& call, std::vector<Tensor>& outs) override {
    const OpInfo& info = op_info(call.op);
    for (const Value& v : call.args)
      if (v.is_tensor && v.tensor.defined())
        VOLT_CHECK(v.tensor.has_data(), info.name, "got a tensor without data (" << v.tensor.meta_str() << ")");
    // bf16 and f16 compute through the f32 kernels (tensor/cpu/half.cpp);
    // conversions and copies handle them directly.
    const bool converts = info.kind == OpKind::Convert || info.kind == OpKind::Copy;
    if (info.kind == OpKind::Matmul && cpu::run_bf16_matmul(call, outs[0])) return;
    if (!converts && cpu::run_widened(call, outs, [this](const OpCall& c, std::vector<Tensor>& o) { run_f32(c, o); }))
      return;
    run_f32(call, outs);
  }

 private:
  // Runs a prim whose tensors are of the six dtypes other than bf16 and f16.
  void run_f32(const OpCall& call, std::vector<Tensor>& outs) {
    Tensor& out = outs[0];
    const OpInfo& info = op_info(call.op);
    switch (info.kind) {
      case OpKind::Unary:
      case OpKind::Binary:
      case OpKind::Compare: return cpu::elementwise_kernel(call, out);
      case OpKind::Ternary: return cpu::where_kernel(call, out);
      case OpKind::Convert:
      case OpKind::Copy: return cpu::convert_kernel(call.args[0].tensor, out);
      case OpKind::Random: return cpu::uniform_kernel(call, out);
      case OpKind::Factory: return cpu::factory_kernel(call, out);
      case OpKind::Pad: return cpu::pad_kernel(call, out);
      case OpKind::Reduce: return cpu::reduce_kernel(call, out);
      case OpKind::Matmul:
        if (call.op == OpId::matmul) cpu_matmul(call.args[0].tensor, call.args[1].tensor, out);
        else cpu_linear(call.args[0].tensor, call.args[1].tensor,
                        call.args.size() == 3 ? &call.args[2].tensor : nullptr, out);
        return;
      case OpKind::Window: return cpu_window(call, out);
      case OpKind::Composite:
        VOLT_CHECK(fuses(call.op), info.name, "is a composite op without a fused CPU kernel");
        return cpu::cross_entropy_kernel(call, out);
      default:
        VOLT_FAIL(info.name, "has no CPU kernel");
    }
  }

  // Never destroyed: tensors held by static objects may die after the backend.
  LargeBlockCache& large_ = *new LargeBlockCache;
};

// Subnormal floats make arithmetic on x86 several times slower, and Adam's
// moments drift into that range during training: flush them to zero (documented
// default; VOLT_KEEP_DENORMALS=1 keeps IEEE behaviour).
void set_flush_denormals() {
  if (const char* e = std::getenv("VOLT_KEEP_DENORMALS"); e && e[0] == '1') return;
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
  _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
}

struct Registrar {
  Registrar() {
    static CpuBackend backend;
    register_backend(DeviceType::CPU, &backend);
    set_flush_denormals();
    // volt's pool (tensor/cpu/threads.cpp) runs each task with its caller's MXCSR.
  }
} g_registrar;

}  // namespace
}  // namespace volt
