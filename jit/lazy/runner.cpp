// The lazy device's step runner: one worker thread, a queue of compiled graphs.
#include <volt/jit/lazy/runner.h>

#include <chrono>
#include <unordered_map>

#include <volt/tensor/custom_op.h>
#include <volt/tensor/dispatch.h>
#include <volt/tensor/error.h>

#include <volt/jit/lazy/internal.h>  // Clock, us_since

namespace volt::lazy::detail {

namespace {
// Runs a job into `run` (outputs or error); the time it took.
int64_t execute(const Runner::Job& job, Run& run) {
  const auto t0 = Clock::now();
  try {
    run.outs = job();
  } catch (...) {
    run.error = std::current_exception();
  }
  return us_since(t0);
}
}  // namespace

std::string failing_op(const jit::Trace& lowered, const std::vector<Tensor>& inputs, const PhiloxState& rng) {
  std::unordered_map<int64_t, Tensor> value;  // proxy id -> tensor
  for (size_t i = 0; i < lowered.inputs.size() && i < inputs.size(); ++i) value[jit::id_of(lowered.inputs[i])] = inputs[i];
  NoGradGuard no_grad;
  for (const jit::BoundSymbol& b : lowered.bsyms) {
    OpCall c = b.call;
    for (Value& v : c.args)
      if (v.is_tensor && v.tensor.defined()) {
        auto it = value.find(jit::id_of(v.tensor));
        if (it == value.end()) return "";  // not a plain lowered trace
        v.tensor = it->second;
      }
    if (op_info(c.op).kind == OpKind::Random) {
      c.attrs.seed = rng.seed;
      c.attrs.offset += rng.offset;
    }
    std::vector<Tensor> outs;
    try {
      outs = run_eager(c);
    } catch (const std::exception&) {
      std::string where = op_name(c);
      for (size_t i = 0; i < b.outputs.size(); ++i) where += (i ? ", " : " -> ") + b.outputs[i].meta_str();
      return where;
    }
    for (size_t i = 0; i < b.outputs.size() && i < outs.size(); ++i) value[jit::id_of(b.outputs[i])] = outs[i];
  }
  return "";
}

Tensor resolve(const Input& in) {
  if (!in.run) return in.data;
  if (in.run->error) std::rethrow_exception(in.run->error);
  return in.run->outs.at(static_cast<size_t>(in.index));
}

Runner::~Runner() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [&] { return busy_ == 0; });
    stop_ = true;
  }
  work_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

std::shared_ptr<Run> Runner::submit(Job job) {
  auto run = std::make_shared<Run>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!worker_.joinable()) worker_ = std::thread([this] { loop(); });
    queue_.emplace_back(std::move(job), run);
    ++busy_;
  }
  work_cv_.notify_one();
  return run;
}

std::shared_ptr<Run> Runner::run_here(const Job& job) {
  auto run = std::make_shared<Run>();
  run->execute_us = execute(job, *run);
  run->done = true;  // never shared with the worker
  return run;
}

void Runner::loop() {
  for (;;) {
    std::pair<Job, std::shared_ptr<Run>> item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    const int64_t us = execute(item.first, *item.second);
    item.first = nullptr;  // drop the job's inputs before the run counts as done
    {
      std::lock_guard<std::mutex> lock(mutex_);
      item.second->execute_us = us;
      execute_us_ += us;
      if (item.second->error && !first_error_) first_error_ = item.second->error;
      item.second->done = true;
      --busy_;
    }
    done_cv_.notify_all();
  }
}

int64_t Runner::wait(const Run& run) {
  const auto t0 = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  if (run.done) return 0;
  done_cv_.wait(lock, [&] { return run.done; });
  return us_since(t0);
}

int64_t Runner::wait_all() {
  const auto t0 = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  if (busy_ == 0) return 0;
  done_cv_.wait(lock, [&] { return busy_ == 0; });
  return us_since(t0);
}

int64_t Runner::take_execute_us() {
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t us = execute_us_;
  execute_us_ = 0;
  return us;
}

std::exception_ptr Runner::take_error() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::exception_ptr e = first_error_;
  first_error_ = nullptr;
  return e;
}

}  // namespace volt::lazy::detail
