// A thread that must not draw from the global random generator (tensor/random.h).
//
//   volt::GlobalRngBarrier no_draws("DataLoader worker", "transforms may not draw random numbers here");
//   volt::randn({2});   // throws volt::Error "DataLoader worker: transforms may not ..."
//
// While a barrier lives, drawing from the global generator on its thread
// (rng_reserve, manual_seed, set_rng_state, so every random op) throws a
// volt::Error "<who>: <why>".  A thread whose draws would interleave with
// another thread's in an order that depends on timing (a DataLoader worker)
// holds one, so that a run never silently stops reproducing.  Other threads
// are not affected.
#pragma once

namespace volt {

class GlobalRngBarrier {
 public:
  GlobalRngBarrier(const char* who, const char* why);  // both must outlive the barrier
  ~GlobalRngBarrier();
  GlobalRngBarrier(const GlobalRngBarrier&) = delete;
  GlobalRngBarrier& operator=(const GlobalRngBarrier&) = delete;

 private:
  const char* prev_who_;
  const char* prev_why_;
};

}  // namespace volt
