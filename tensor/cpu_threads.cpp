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
// While the machine is busy (see Backoff) threads do not spin at all: a
// spinning thread takes the core from the one doing the work.
std::atomic<bool> g_busy{false};

int64_t spin_micros() {
  static const int64_t us = [] {
    const char* v = std::getenv("VOLT_CPU_SPIN_US");
    return v && *v ? std::max<int64_t>(0, std::atoll(v)) : int64_t(kDefaultSpinMicros);
  }();
  return g_busy.load(std::memory_order_relaxed) ? 0 : us;
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

using Clock = std::chrono::steady_clock;

// Graceful degradation on a busy machine.  When the cores are shared with
// other processes, a thread of a region can be descheduled for a whole time
// slice (milliseconds), and the caller then waits for it at the region's end
// longer than the region's work took: two threads run slower than one.  Such
// regions mark the machine busy for 2 s (renewed by every slow region): regions
// then run on volt's own workers, which do not spin while it is busy (OpenMP's
// idle threads spin for milliseconds, and a thread spinning on one of two
// shared cores starves the one doing the work).  A slow region while busy
// also runs the next ones on the calling thread alone for a while (20 ms,
// doubling while the next try is slow again, up to 1 s).  Which thread runs a
// task never changes a result.
class Backoff {
 public:
  bool busy(Clock::time_point now) {
    if (busy_until_ == Clock::time_point{}) return false;
    if (now < busy_until_) return true;
    busy_until_ = Clock::time_point{};
    g_busy.store(false, std::memory_order_relaxed);
    return false;
  }
  bool serial_now() {
    if (serial_until_ == Clock::time_point{}) return false;
    if (Clock::now() < serial_until_) return true;
    serial_until_ = Clock::time_point{};
    probing_ = true;
    return false;
  }
  // start: the region began; caller_done: the caller ran out of tasks; end: every
  // thread finished.  The straggler wait is end - caller_done.
  void judge(Clock::time_point start, Clock::time_point caller_done, Clock::time_point end) {
    const auto wait = end - caller_done, work = caller_done - start;
    const bool slow = wait > std::chrono::microseconds(kStragglerMicros) && wait > work;
    if (slow && busy_until_ == Clock::time_point{}) {
      // Three slow regions within 200 ms (not one preemption) mark the machine
      // busy: stop spinning, stay parallel.
      if (strikes_ == 0 || end - first_strike_ > std::chrono::milliseconds(200)) {
        strikes_ = 0;
        first_strike_ = end;
      }
      if (++strikes_ >= 3) {
        strikes_ = 0;
        busy_until_ = end + std::chrono::microseconds(kBusyMicros);
        g_busy.store(true, std::memory_order_relaxed);
      }
    } else if (slow) {
      busy_until_ = end + std::chrono::microseconds(kBusyMicros);
      period_ = probing_ ? std::min(period_ * 2, std::chrono::microseconds(kMaxMicros))
                         : std::chrono::microseconds(kFirstMicros);
      serial_until_ = end + period_;
    }
    probing_ = false;
  }

 private:
  static constexpr int64_t kStragglerMicros = 1000, kFirstMicros = 20000, kMaxMicros = 1000000;
  static constexpr int64_t kBusyMicros = 2000000;
  Clock::time_point busy_until_{}, first_strike_{};
  int strikes_ = 0;
  Clock::time_point serial_until_{};
  std::chrono::microseconds period_{kFirstMicros};
  bool probing_ = false;  // the region after a serial period
};

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
    if (tasks <= 1 || threads <= 1 || in_region || !lock.owns_lock() || tasks > kMaxTasks ||
        backoff_.serial_now()) {
      for (int64_t t = 0; t < tasks; ++t) fn(ctx, t);
      return;
    }
    const auto start = Clock::now();
    const bool busy = backoff_.busy(start);
    Clock::time_point caller_done;
#ifdef _OPENMP
    if (use_openmp_ && !busy) {
      run_openmp(threads, tasks, fn, ctx, caller_done);
      backoff_.judge(start, caller_done, Clock::now());
      return;
    }
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
    caller_done = Clock::now();
    // Wait for the tasks other threads claimed.
    if (!spin_until([&] { return remaining_.load(std::memory_order_acquire) == 0; }))
        for (int32_t r; (r = remaining_.load(std::memory_order_acquire)) != 0;) remaining_.wait(r);
    backoff_.judge(start, caller_done, Clock::now());
  }

 private:
#ifdef _OPENMP
  // The same claiming of tasks on OpenMP's threads (the default; VOLT_CPU_POOL=volt
  // for volt's own threads): one
  // set of threads for volt's loops and for code that uses OpenMP directly.
  void run_openmp(int threads, int64_t tasks, void (*fn)(const void*, int64_t), const void* ctx,
                  Clock::time_point& caller_done) {
    std::atomic<int64_t> next{0};
#pragma omp parallel num_threads(int(std::min<int64_t>(threads, tasks)))
    {
      in_region = true;
      for (int64_t t; (t = next.fetch_add(1, std::memory_order_relaxed)) < tasks;) fn(ctx, t);
      in_region = false;
      if (omp_get_thread_num() == 0) caller_done = Clock::now();
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
  Backoff backoff_;  // guarded by run_mutex_
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
