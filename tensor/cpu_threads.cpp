// The thread pool of tensor/cpu_threads.h.
#include <volt/tensor/cpu_threads.h>

#include <sched.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define VOLT_POOL_MXCSR 1
#endif

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <volt/tensor/error.h>

namespace volt::cpu {

namespace {

constexpr int64_t kDefaultSpinMicros = 50;

// How long an idle thread polls before it sleeps (VOLT_CPU_SPIN_US overrides).
// Long enough to bridge the gap between two GEMMs of a training step (waking a
// sleeping virtual CPU can take longer than a small GEMM), short enough that a
// waiting thread costs a busy machine little.
int64_t spin_micros() {
  static const int64_t us = [] {
    const char* v = std::getenv("VOLT_CPU_SPIN_US");
    return v && *v ? std::max<int64_t>(0, std::atoll(v)) : int64_t(kDefaultSpinMicros);
  }();
  return us;
}
// A region holds at most this many tasks (more run serially; parallel_for
// makes a few per thread).
constexpr int64_t kMaxTasks = 0xffff;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Polls `ready` for up to spin_micros(); true if it became true.
template <class Ready>
bool spin_until(const Ready& ready) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    if (ready()) return true;
    cpu_relax();
    if ((i & 63) == 63 &&
        std::chrono::steady_clock::now() - start > std::chrono::microseconds(spin_micros()))
      return false;
  }
}

int default_threads() {
  for (const char* name : {"VOLT_NUM_THREADS", "OMP_NUM_THREADS"})
    if (const char* v = std::getenv(name)) {
      const int n = std::atoi(v);  // OMP_NUM_THREADS may be a list: its first number
      if (n >= 1) return n;
    }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

thread_local bool in_region = false;

class Pool {
 public:
  static Pool& get() {
    static Pool* pool = new Pool();  // never destroyed: workers may outlive static destructors
    return *pool;
  }

  int threads() const { return threads_.load(std::memory_order_relaxed); }

  void set_threads(int n) {
    std::lock_guard<std::mutex> lock(run_mutex_);
    threads_.store(n, std::memory_order_relaxed);
  }

  void run(int64_t tasks, void (*fn)(const void*, int64_t), const void* ctx) {
    std::unique_lock<std::mutex> lock(run_mutex_, std::try_to_lock);
    const int threads = threads_.load(std::memory_order_relaxed);
    if (tasks <= 1 || threads <= 1 || in_region || !lock.owns_lock() || tasks > kMaxTasks) {
      for (int64_t t = 0; t < tasks; ++t) fn(ctx, t);
      return;
    }
#ifdef _OPENMP
    if (use_openmp_) return run_openmp(threads, tasks, fn, ctx);
#endif
    ensure_workers(threads - 1);
    active_.store(threads - 1, std::memory_order_relaxed);
    fn_.store(fn, std::memory_order_relaxed);
    ctx_.store(ctx, std::memory_order_relaxed);
    remaining_.store(int32_t(tasks), std::memory_order_relaxed);
#ifdef VOLT_POOL_MXCSR
    csr_.store(_mm_getcsr(), std::memory_order_relaxed);  // flush-to-zero and rounding, as the caller has them
#endif
    const uint32_t epoch = ++epoch_count_;
    claim_.store(uint64_t(epoch) << 32 | uint64_t(tasks) << 16, std::memory_order_release);
    wake_.store(epoch, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) wake_.notify_all();

    in_region = true;
    work(epoch);
    in_region = false;
    // Wait for the tasks other threads claimed.
    if (!spin_until([&] { return remaining_.load(std::memory_order_acquire) == 0; }))
        for (int32_t r; (r = remaining_.load(std::memory_order_acquire)) != 0;) remaining_.wait(r);
  }

 private:
#ifdef _OPENMP
  // The same claiming of tasks on OpenMP's threads (the default; VOLT_CPU_POOL=volt
  // for volt's own threads): one
  // set of threads for volt's loops and for code that uses OpenMP directly.
  void run_openmp(int threads, int64_t tasks, void (*fn)(const void*, int64_t), const void* ctx) {
    std::atomic<int64_t> next{0};
#pragma omp parallel num_threads(int(std::min<int64_t>(threads, tasks)))
    {
      in_region = true;
      for (int64_t t; (t = next.fetch_add(1, std::memory_order_relaxed)) < tasks;) fn(ctx, t);
      in_region = false;
    }
  }
#endif

  // Claims and runs tasks of region `epoch` until none are left.  The claim word
  // holds the region's epoch, its task count and the next task, so a claim
  // succeeds only while that region has a task left.  fn_ and ctx_ are read
  // before the claim, after the region's epoch was seen (they were written
  // before it was published); a successful claim proves the region was still
  // open then, so they were not yet replaced by the next region's.
  void work(uint32_t epoch) {
    for (;;) {
      auto fn = fn_.load(std::memory_order_acquire);
      auto ctx = ctx_.load(std::memory_order_acquire);
      uint64_t c = claim_.load(std::memory_order_acquire);
      int64_t t;
      do {
        if (uint32_t(c >> 32) != epoch) return;
        t = int64_t(c & 0xffffu);
        if (t >= int64_t((c >> 16) & 0xffffu)) return;
      } while (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel));
#ifdef VOLT_POOL_MXCSR
      if (const unsigned csr = csr_.load(std::memory_order_relaxed); csr != _mm_getcsr()) _mm_setcsr(csr);
#endif
      fn(ctx, t);
      if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) remaining_.notify_all();
    }
  }

  void worker(int index) {
    in_region = true;  // a region started from inside a task runs serially
    uint32_t seen = wake_.load(std::memory_order_acquire);
    for (;;) {
      if (!spin_until([&] { return wake_.load(std::memory_order_acquire) != seen; })) {
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        while (wake_.load(std::memory_order_seq_cst) == seen) wake_.wait(seen);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      seen = wake_.load(std::memory_order_acquire);
      // Only the first threads()-1 workers take part (set_num_threads may lower it).
      if (index < active_.load(std::memory_order_relaxed)) work(seen);
    }
  }

  void ensure_workers(int n) {
    while (int(workers_.size()) < n) {
      const int index = int(workers_.size());
      workers_.emplace_back([this, index] { worker(index); });
      workers_.back().detach();
    }
  }

  Pool() : threads_(default_threads()) {
    // OpenMP's threads by default: Adam and the jit's kernels use OpenMP too, and
    // two sets of threads on 2 cores made the jit's step slower (bench/README.md).
    const char* pool = std::getenv("VOLT_CPU_POOL");
    use_openmp_ = !(pool && std::string(pool) == "volt");
  }

  std::atomic<int> threads_;
  bool use_openmp_ = false;
  std::atomic<int> active_{0};
  std::mutex run_mutex_;
  std::vector<std::thread> workers_;
  uint32_t epoch_count_ = 0;
  std::atomic<void (*)(const void*, int64_t)> fn_{nullptr};
  std::atomic<const void*> ctx_{nullptr};
  std::atomic<uint64_t> claim_{0};      // epoch << 32 | tasks << 16 | next task
  std::atomic<int32_t> remaining_{0};   // tasks not yet finished
  std::atomic<uint32_t> wake_{0};       // the current region's epoch; workers wait on it
  std::atomic<int> sleepers_{0};
  std::atomic<unsigned> csr_{0};
};

}  // namespace

int num_threads() { return Pool::get().threads(); }

void set_num_threads(int n) {
  VOLT_CHECK(n >= 1, "set_num_threads", "expects at least 1 thread, got " + std::to_string(n));
  Pool::get().set_threads(n);
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
}

void parallel_tasks(int64_t tasks, void (*fn)(const void*, int64_t), const void* ctx) {
  Pool::get().run(tasks, fn, ctx);
}

}  // namespace volt::cpu
