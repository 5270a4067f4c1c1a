// The lazy device's step runner (private to jit/lazy): mark_step() hands a
// compiled graph to one worker thread and returns, so the program records the
// next step while this one runs.
//
// A Run is one submitted graph: its outputs once it finished, or the error it
// stopped with.  Runs execute one at a time in submission order, so a run's
// inputs that come from an earlier run are ready when it starts.  Only the
// recording thread submits and waits; the worker touches nothing but the Run
// objects and the tensors a job holds (its inputs, which it keeps alive until
// it is done, and the outputs it makes).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <volt/jit/trace.h>
#include <volt/tensor/random.h>
#include <volt/tensor/tensor.h>

namespace volt::lazy::detail {

struct Run {
  std::vector<Tensor> outs;  // written by the worker before `done`
  std::exception_ptr error;  // or this, when the graph failed
  bool done = false;         // guarded by the runner's mutex
  int64_t execute_us = 0;
};

// A graph input: data already there, or output `index` of an earlier run.
struct Input {
  Tensor data;
  std::shared_ptr<Run> run;
  int index = 0;
};

// The tensor an input stands for.  The run it comes from must be done (the
// worker's order guarantees it; the recording thread waits first); a failed
// run's error is thrown again.
Tensor resolve(const Input& in);

// After a compiled graph failed on these inputs: replays its lowered trace
// (one prim per line) on the eager executor and names the first prim that
// fails, as "mul -> f32[1048576, 1048576]"; empty if the replay runs through.
std::string failing_op(const jit::Trace& lowered, const std::vector<Tensor>& inputs, const PhiloxState& rng);

// Runs jobs on one worker thread, in order.
class Runner {
 public:
  using Job = std::function<std::vector<Tensor>()>;
  ~Runner();  // waits for the queue, then stops the worker

  // Queues a job; its results (or error) land in the returned Run.
  std::shared_ptr<Run> submit(Job job);
  // Runs a job on this thread now, with the same error handling.
  static std::shared_ptr<Run> run_here(const Job& job);
  // Blocks until `run` is done; the microseconds spent waiting.
  int64_t wait(const Run& run);
  // Blocks until every queued job is done; the microseconds spent waiting.
  int64_t wait_all();
  // Microseconds the worker spent executing since the last call (then reset).
  int64_t take_execute_us();
  // The first failure since the last call, not yet reported by wait_device_ops.
  std::exception_ptr take_error();

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::pair<Job, std::shared_ptr<Run>>> queue_;
  size_t busy_ = 0;  // queued or running
  bool stop_ = false;
  int64_t execute_us_ = 0;
  std::exception_ptr first_error_;
  std::thread worker_;  // started by the first submit
};

}  // namespace volt::lazy::detail
