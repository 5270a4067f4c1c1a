// The CPU backend: allocation (large blocks kept for reuse) and the dispatch of
// each prim to its family's kernel (tensor/cpu/kernels.h): elementwise.cpp,
// copy.cpp, random.cpp, reductions.cpp, cross_entropy.cpp, matmul.cpp (GEMMs),
// windows.cpp and convolution.cpp; the loops run on volt's pool (threads.h).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <list>
#include <mutex>
#include <sys/mman.h>
#include <unordered_map>
#include <xmmintrin.h>
#include <pmmintrin.h>

#include <volt/tensor/backend.h>
#include <volt/tensor/cpu/half.h>
#include <volt/tensor/cpu/kernels.h>
#include <volt/tensor/memory_stats.h>
#include <volt/tensor/op_table.h>

namespace volt {
namespace {

// Blocks from this size up are kept for reuse when their tensor dies.
constexpr size_t kLargeBlock = size_t(1) << 16;
// At most this many bytes wait in the cache; beyond it the oldest go back to the system.
constexpr size_t kLargeCacheLimit = size_t(1) << 30;

// A training step frees and allocates the same large tensors every step (the
// gradients, the activations of a big batch).  Fresh memory from the system
// costs a page fault and a zeroed page per 4 KiB, so freed large blocks are kept
// by exact size and handed out again; small blocks go through malloc.
//
// A request the cache cannot serve first gives back cached blocks nobody asks
// for any more, the longest-waiting first, at least as many bytes as it asks
// for: memory held by the process (in use plus cached) does not grow while the
// cache holds such blocks.  Without that, a loop whose shapes change every
// iteration (a model generating a token at a time, its context one longer each
// time) would keep one block of every size it ever used.  "Nobody asks for
// it": its size was last requested more than twice the longest gap between two
// requests of that size ago, counted in requests (a size requested once:
// right after).  A training step asks for the same sizes every step, so its
// blocks stay until the next step takes them; giving back the longest-waiting
// blocks of any size instead made every miss of a step (more blocks of a size
// live at once than cached) evict a block a later request of the step needed,
// which then missed in turn: a GPT step mapped and faulted in 100 to 180
// blocks again every step.  Blocks are mapped from the system directly, so a
// block given back leaves the process's memory at once.
class LargeBlockCache {
 public:
  // n: a multiple of 64 and >= kLargeBlock; nbytes: what the caller asked for.
  void* allocate(size_t n, size_t nbytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++requests_;
    SizeUse& use = uses_[n];
    if (use.last > 0) use.longest_gap = std::max(use.longest_gap, requests_ - use.last);
    use.last = requests_;
    if (auto it = by_size_.find(n); it != by_size_.end()) {
      void* p = it->second->p;
      oldest_.erase(it->second);
      by_size_.erase(it);
      cached_bytes_ -= n;
      live_[p] = n;
      return p;
    }
    evict_unused(n);
    void* p = map(n);
    if (!p) {  // give every cached block back and try once more
      evict_until(SIZE_MAX);
      p = map(n);
    }
    VOLT_CHECK(p != nullptr, "allocate", "out of memory allocating " << nbytes << " bytes on the CPU");
    live_[p] = n;
    return p;
  }
  size_t cached_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cached_bytes_;
  }
  // Returns false when p is not a large block (the caller frees it).
  bool release(void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end()) return false;
    const size_t n = it->second;
    live_.erase(it);
    if (cached_bytes_ + n > kLargeCacheLimit) evict_until(cached_bytes_ + n - kLargeCacheLimit);
    oldest_.push_back({n, p});
    by_size_.emplace(n, std::prev(oldest_.end()));
    cached_bytes_ += n;
    return true;
  }

 private:
  struct Block {
    size_t n;
    void* p;
  };
  static size_t mapped_size(size_t n) { return (n + 4095) / 4096 * 4096; }
  static void* map(size_t n) {
    void* p = ::mmap(nullptr, mapped_size(n), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
  }
  // Unmaps cached block `at`; returns its size.
  size_t give_back(std::list<Block>::iterator at) {
    const Block b = *at;
    auto range = by_size_.equal_range(b.n);
    for (auto it = range.first; it != range.second; ++it)
      if (it->second == at) {
        by_size_.erase(it);
        break;
      }
    oldest_.erase(at);
    ::munmap(b.p, mapped_size(b.n));
    cached_bytes_ -= b.n;
    return b.n;
  }
  // Gives back the longest-waiting cached blocks until `bytes` were freed or none is left.
  void evict_until(size_t bytes) {
    size_t freed = 0;
    while (freed < bytes && !oldest_.empty()) freed += give_back(oldest_.begin());
  }
  // The same, of the blocks whose size nobody asks for any more (see above).
  void evict_unused(size_t bytes) {
    size_t freed = 0;
    for (auto it = oldest_.begin(); freed < bytes && it != oldest_.end();) {
      const SizeUse& use = uses_.at(it->n);
      if (requests_ - use.last <= 2 * use.longest_gap) {
        ++it;
        continue;
      }
      auto next = std::next(it);
      freed += give_back(it);
      it = next;
    }
  }

  std::mutex mutex_;
  std::unordered_map<void*, size_t> live_;  // handed out: block -> size
  std::list<Block> oldest_;                 // kept, the longest-waiting first
  std::unordered_multimap<size_t, std::list<Block>::iterator> by_size_;  // kept: size -> its place in oldest_
  size_t cached_bytes_ = 0;
  // When each size was last requested and the longest gap between two of its
  // requests, both counted in requests of large blocks.
  struct SizeUse {
    uint64_t last = 0, longest_gap = 0;
  };
  std::unordered_map<size_t, SizeUse> uses_;
  uint64_t requests_ = 0;
};

// Never destroyed: tensors held by static objects may die after the backend.
LargeBlockCache& large_blocks() {
  static LargeBlockCache* cache = new LargeBlockCache;
  return *cache;
}

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

  LargeBlockCache& large_ = large_blocks();
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

uint64_t cpu_cached_bytes() { return large_blocks().cached_bytes(); }

}  // namespace volt
