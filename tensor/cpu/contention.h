// The thread pool's policy on a busy machine (tensor/cpu/threads.cpp), in a
// header of its own so that tests can drive it with their own clock and load.
#pragma once
#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <utility>

namespace volt::cpu::detail {

// Graceful degradation on a busy machine.  A region's threads work in
// lockstep: when the cores are shared with other processes, one of them can be
// descheduled for a whole time slice (milliseconds) while the others wait for
// it, and two threads run slower than one.  So while other threads are
// runnable, a region uses at most as many threads as there are cores they
// leave free: the calling thread alone when there are none, and idle threads
// stop spinning.  Other runnable threads are the kernel's count (/proc/loadavg)
// less volt's awake threads, read at most every 20 ms and believed when two
// looks in a row agree (a short-lived process does not count).
//
// Contention the count cannot see (a virtual machine's host) shows as slow
// regions: a region whose caller waited more than 1 ms for a descheduled
// thread, and longer than its own work took, twice within 200 ms, runs the
// next ones on the calling thread alone for 20 ms, doubling while the next try
// is slow again (up to 1 s).  Which thread runs a task never changes a result.
class Contention {
 public:
  using Clock = std::chrono::steady_clock;
  // other_runnable(awake): runnable threads of other processes, -1 when
  // unknown (runnable_from_load_file reads them).
  Contention(int cores, std::function<int(int)> other_runnable)
      : cores_(cores < 1 ? 1 : cores), other_runnable_(std::move(other_runnable)) {}

  // True while the last look saw fewer spare cores than a region wants (the
  // pool's threads then stop spinning).
  bool busy() const { return busy_; }

  // Threads (1 to `threads`) the region starting now may use.  `awake`: volt's
  // threads running or spinning now, the caller included.
  int threads_for(int threads, int awake, Clock::time_point now) {
    if (now - checked_ >= std::chrono::milliseconds(kCheckMillis)) {
      checked_ = now;
      const int others = other_runnable_(awake);
      // With no other runnable thread, as many threads as were set; a thread
      // seen in one look only (a short task) does not count.
      const int spare = others <= 0 ? kAny : std::max(1, cores_ - others);
      spare_ = std::max(spare, last_spare_);
      last_spare_ = spare;
      busy_ = spare_ < threads;
    }
    if (serial_until_ != Clock::time_point{}) {
      if (now < serial_until_) return 1;
      serial_until_ = Clock::time_point{};
      probing_ = true;
    }
    return std::min(threads, spare_);
  }

  // start: the region began; caller_done: the caller ran out of tasks; end:
  // every thread finished.  The straggler wait is end - caller_done.
  void judge(Clock::time_point start, Clock::time_point caller_done, Clock::time_point end) {
    const auto wait = end - caller_done, work = caller_done - start;
    const bool slow = wait > std::chrono::microseconds(kStragglerMicros) && wait > work;
    if (slow && (probing_ || (strikes_ > 0 && end - first_strike_ < std::chrono::milliseconds(200)))) {
      period_ = probing_ ? std::min(period_ * 2, std::chrono::microseconds(kMaxMicros))
                         : std::chrono::microseconds(kFirstMicros);
      serial_until_ = end + period_;
      strikes_ = 0;
    } else if (slow) {
      strikes_ = 1;
      first_strike_ = end;
    }
    probing_ = false;
  }

 private:
  static constexpr int64_t kCheckMillis = 20, kStragglerMicros = 1000, kFirstMicros = 20000,
                           kMaxMicros = 1000000;
  static constexpr int kAny = 1 << 20;
  const int cores_;
  std::function<int(int)> other_runnable_;
  bool busy_ = false;
  int spare_ = kAny, last_spare_ = kAny;
  Clock::time_point checked_{};
  Clock::time_point first_strike_{};
  int strikes_ = 0;
  Clock::time_point serial_until_{};
  std::chrono::microseconds period_{kFirstMicros};
  bool probing_ = false;  // the region after a serial period
};

// Runnable threads of other processes: the kernel's count (the fourth field of
// a file in /proc/loadavg's format, "runnable/total") less `awake` of ours;
// -1 when the file cannot be read.
int runnable_from_load_file(const std::string& path, int awake);

}  // namespace volt::cpu::detail
