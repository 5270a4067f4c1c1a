// The thread pool of tensor/cpu/threads.h.
#include <volt/tensor/cpu/threads.h>

#include <volt/tensor/cpu/contention.h>
#include <volt/tensor/cpu/serial_guard.h>

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define VOLT_POOL_MXCSR 1
#endif

#include <atomic>
#include <chrono>
#include <cstring>
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

// Where the count of runnable threads is read (set_load_file, for tests).
std::mutex g_load_file_mutex;
std::string g_load_file = "/proc/loadavg";

constexpr int64_t kDefaultSpinMicros = 50;

// How long an idle thread polls before it sleeps (VOLT_CPU_SPIN_US overrides).
// Long enough to bridge the gap between two GEMMs of a training step (waking a
// sleeping virtual CPU can take longer than a small GEMM), short enough that a
// waiting thread costs a busy machine little.
// While the machine is busy (see Contention) threads do not spin at all: a
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
    int threads = threads_.load(std::memory_order_relaxed);
    if (tasks <= 1 || in_region || !lock.owns_lock() || tasks > kMaxTasks) threads = 1;
    const auto start = threads > 1 ? Clock::now() : Clock::time_point{};
    if (threads > 1) {
      threads = contention_.threads_for(threads, 1 + awake_.load(std::memory_order_relaxed), start);
      g_busy.store(contention_.busy(), std::memory_order_relaxed);
    }
    if (threads <= 1) {
      for (int64_t t = 0; t < tasks; ++t) fn(ctx, t);
      return;
    }
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
    const auto caller_done = Clock::now();
    // Wait for the tasks other threads claimed.
    if (!spin_until([&] { return remaining_.load(std::memory_order_acquire) == 0; }))
      for (int32_t r; (r = remaining_.load(std::memory_order_acquire)) != 0;) remaining_.wait(r);
    contention_.judge(start, caller_done, Clock::now());
  }

 private:
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
    awake_.fetch_add(1, std::memory_order_relaxed);
    for (;;) {
      if (!spin_until([&] { return wake_.load(std::memory_order_acquire) != seen; })) {
        awake_.fetch_sub(1, std::memory_order_relaxed);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        while (wake_.load(std::memory_order_seq_cst) == seen) wake_.wait(seen);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
        awake_.fetch_add(1, std::memory_order_relaxed);
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

  Pool() : threads_(default_threads()) {}

  std::atomic<int> threads_;
  // Guarded by run_mutex_.
  detail::Contention contention_{int(sysconf(_SC_NPROCESSORS_ONLN)), [](int awake) {
                                   std::string path;
                                   {
                                     std::lock_guard<std::mutex> lock(g_load_file_mutex);
                                     path = g_load_file;
                                   }
                                   return detail::runnable_from_load_file(path, awake);
                                 }};
  std::atomic<int> awake_{0};  // workers running or spinning (not asleep)
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

SerialGuard::SerialGuard() : prev_(in_region) { in_region = true; }
SerialGuard::~SerialGuard() { in_region = prev_; }

void parallel_tasks(int64_t tasks, void (*fn)(const void*, int64_t), const void* ctx) {
  Pool::get().run(tasks, fn, ctx);
}

namespace detail {

int runnable_from_load_file(const std::string& path, int awake) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  const char* field = buf;
  for (int i = 0; i < 3 && field; ++i)
    if ((field = std::strchr(field, ' '))) ++field;
  if (!field) return -1;
  return std::max(0, std::atoi(field) - awake);
}

}  // namespace detail

void set_load_file(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_load_file_mutex);
  g_load_file = path.empty() ? "/proc/loadavg" : path;
}

}  // namespace volt::cpu
