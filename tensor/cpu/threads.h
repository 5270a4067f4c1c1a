// volt's CPU thread pool: the hot loops of the CPU backend (GEMMs, large
// elementwise ops and reductions) split their work over it.
//
// A parallel region is a list of tasks claimed one at a time by the calling
// thread and the pool's workers, so a worker the OS has descheduled (a busy
// machine) delays the region by at most the task it holds; the caller never
// waits for a worker that has not started.  Idle workers spin for a short
// while (50 µs, VOLT_CPU_SPIN_US) and then sleep on a futex, so they do not take cores
// from other processes between regions.  On a busy machine a region uses only
// the cores other processes leave free (the kernel's count of runnable
// threads), the calling thread alone when there are none, and idle threads do
// not spin, so 2 threads are not slower than 1 (tensor/cpu/threads.cpp,
// Contention).  Results never depend on which thread ran a task: the callers'
// tasks write disjoint outputs.
//
// Every parallel loop of volt's CPU backend and optimizers runs here; volt's
// library starts no OpenMP threads of its own.
//
// The thread count is VOLT_NUM_THREADS, else OMP_NUM_THREADS, else the cores
// this process may run on; set_num_threads changes it (and OpenMP's, for
// extensions that use OpenMP).  A region started inside another, or while
// another thread runs one, runs its tasks serially on the calling thread.
#pragma once
#include <string>

#include <algorithm>
#include <cstdint>

namespace volt::cpu {

int num_threads();
void set_num_threads(int n);  // n >= 1
// The file the pool reads the runnable threads from, in /proc/loadavg's format
// ("" restores /proc/loadavg): tests set the machine's load this way.
void set_load_file(const std::string& path);

// Runs task(i) for i in [0, tasks), split over up to num_threads() threads.
void parallel_tasks(int64_t tasks, void (*fn)(const void* ctx, int64_t task), const void* ctx);

template <class F>
void parallel_tasks(int64_t tasks, const F& f) {
  parallel_tasks(tasks, [](const void* c, int64_t t) { (*static_cast<const F*>(c))(t); }, &f);
}

// f(begin, end) over [0, n) in chunks of at least `grain` elements (one chunk,
// on the calling thread, when n < 2 grain or one thread is set).
template <class F>
void parallel_for(int64_t n, int64_t grain, const F& f) {
  const int threads = num_threads();
  if (threads <= 1 || n < 2 * grain) {
    if (n > 0) f(int64_t(0), n);
    return;
  }
  // A few chunks per thread, so a thread that starts late takes fewer of them.
  int64_t chunks = std::min<int64_t>(n / grain, int64_t(threads) * 4);
  const int64_t size = (n + chunks - 1) / chunks;
  chunks = (n + size - 1) / size;
  parallel_tasks(chunks, [&](int64_t c) { f(c * size, std::min(n, (c + 1) * size)); });
}

}  // namespace volt::cpu
