// Keeping one thread off the CPU thread pool (tensor/cpu/threads.h).
//
//   { volt::cpu::SerialGuard serial; y = x * 2; }   // x * 2 runs on this thread alone
//
// While a SerialGuard lives, the parallel regions its thread starts run
// serially on that thread.  A thread that works beside the training thread
// (a DataLoader worker) holds one, so that the pool's workers stay free for
// the training thread's GEMMs.  Without it two threads may still enter the
// pool at once, safely: the one that finds the pool busy runs its region
// serially.  Results never depend on it (a region's tasks write disjoint
// outputs, whichever thread runs them).
#pragma once

namespace volt::cpu {

class SerialGuard {
 public:
  SerialGuard();
  ~SerialGuard();
  SerialGuard(const SerialGuard&) = delete;
  SerialGuard& operator=(const SerialGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace volt::cpu
