#include <volt/nn/parallel/ddp.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include <volt/autograd/grad_mode.h>
#include <volt/autograd/hooks.h>
#include <volt/nn/parallel/all_reduce_op.h>

namespace volt::dist {

namespace {
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

// One bucket: its parameters' gradients side by side in one buffer.
struct DistributedDataParallel::Bucket {
  Tensor flat;                  // (sum of numels,), the parameters' dtype: on their GPU with NCCL, else on the CPU
  std::vector<int64_t> offset;  // element offset of each of its parameters
  size_t ready = 0;             // parameters whose gradient is in `flat` this backward
  Work work;
};

DistributedDataParallel::DistributedDataParallel(std::vector<Tensor> params, DDPOptions options)
    : params_(std::move(params)), options_(options) {
  VOLT_CHECK(is_initialized(), "DistributedDataParallel", "call volt::dist::init() first (and run under mpirun)");
  VOLT_CHECK(options_.bucket_bytes > 0 && options_.first_bucket_bytes > 0, "DistributedDataParallel",
             "bucket sizes must be positive, got bucket_bytes " << options_.bucket_bytes << " and first_bucket_bytes "
                                                                << options_.first_bucket_bytes);
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    VOLT_CHECK(p.defined() && p.has_data() && is_floating(p.dtype()), "DistributedDataParallel",
               "parameter " << i << " must be a floating-point tensor with data, got "
                            << (p.defined() ? p.meta_str() : std::string("an undefined tensor")));
    VOLT_CHECK(index_of_.emplace(p.impl(), i).second, "DistributedDataParallel",
               "parameter " << i << " is listed twice");
  }
  if (options_.broadcast_parameters) {
    NoGradGuard no_grad;
    for (Tensor& p : params_) broadcast(p, 0);
  }
  // Buckets: parameters last first, a new bucket when the next one would pass
  // the cap or has another dtype.
  bucket_of_.assign(params_.size(), 0);
  slot_of_.assign(params_.size(), 0);
  int64_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& p = params_[k];
    const int64_t b = p.numel() * static_cast<int64_t>(dtype_size(p.dtype()));
    const int64_t cap = bucket_params_.size() == 1 ? std::min(options_.bucket_bytes, options_.first_bucket_bytes)
                                                   : options_.bucket_bytes;
    const Tensor& head = bucket_params_.empty() ? p : params_[bucket_params_.back()[0]];
    if (bucket_params_.empty() || bytes + b > cap || head.dtype() != p.dtype() || head.device() != p.device()) {
      bucket_params_.emplace_back();
      bytes = 0;
    }
    bucket_of_[k] = bucket_params_.size() - 1;
    slot_of_[k] = bucket_params_.back().size();
    bucket_params_.back().push_back(k);
    bytes += b;
  }
  for (const auto& members : bucket_params_) {
    auto bucket = std::make_unique<Bucket>();
    int64_t n = 0;
    for (size_t k : members) {
      bucket->offset.push_back(n);
      n += params_[k].numel();
    }
    const Tensor& p = params_[members[0]];
    bucket->flat = Tensor::zeros({n}, p.dtype(), backend_name(p.device()) == "nccl" ? p.device() : kCPU);
    buckets_.push_back(std::move(bucket));
  }
  ready_.assign(params_.size(), 0);
  hooks_ = autograd::add_backward_hooks(
      {.grad_ready = [this](const std::shared_ptr<TensorImpl>& leaf) { on_grad_ready(leaf); },
       .finished = [this] { on_backward_end(); }});
}

DistributedDataParallel::~DistributedDataParallel() {
  autograd::remove_backward_hooks(hooks_);
  // A bucket left in flight (backward threw) is finished so MPI can free it.
  for (auto& b : buckets_)
    if (b->work.pending()) {
      try {
        b->work.wait();
      } catch (...) {
      }
    }
}

void DistributedDataParallel::reset_step() {
  std::fill(ready_.begin(), ready_.end(), 0);
  for (auto& b : buckets_) b->ready = 0;
  next_start_ = 0;
  active_ = traced_ = false;
}

void DistributedDataParallel::on_grad_ready(const std::shared_ptr<TensorImpl>& leaf) {
  auto it = index_of_.find(leaf.get());
  if (it == index_of_.end()) return;
  if (!active_) {
    reset_step();
    stats_ = {};
    active_ = true;
  }
  const size_t k = it->second;
  if (ready_[k]) return;
  // compile_step traces with the parameters' data set aside (jit/step/step_trace.h).
  traced_ = !params_[k].has_data();
  mark_ready(k);
}

// Copies parameter k's gradient (zeros if it has none) into its bucket; starts
// every bucket that is now complete and whose predecessors have started.
void DistributedDataParallel::mark_ready(size_t k) {
  ready_[k] = 1;
  Bucket& b = *buckets_[bucket_of_[k]];
  if (!traced_ && !b.flat.device().is_cpu()) {
    // On the GPU: copies queued on the device's stream, before the all-reduce.
    NoGradGuard no_grad;
    const Tensor g = params_[k].grad();
    Tensor dst = b.flat.narrow(0, b.offset[slot_of_[k]], params_[k].numel());
    if (g.defined()) dst.copy_(g.reshape({-1}));
    else dst.zero_();
  } else if (!traced_) {
    const Tensor g = params_[k].grad();
    const size_t item = dtype_size(params_[k].dtype());
    char* dst = static_cast<char*>(b.flat.raw_data()) + b.offset[slot_of_[k]] * static_cast<int64_t>(item);
    const size_t n = static_cast<size_t>(params_[k].numel()) * item;
    if (g.defined()) {
      Tensor h = g.to(kCPU).to(params_[k].dtype()).contiguous();
      std::memcpy(dst, h.raw_data(), n);
    } else {
      std::memset(dst, 0, n);
    }
  }
  ++b.ready;
  start_ready_buckets();
  // Open MPI progresses a non-blocking collective only inside MPI calls (NCCL's
  // progress on the GPU by themselves).
  for (auto& other : buckets_)
    if (other->work.pending() && other->flat.device().is_cpu()) other->work.test();
}

void DistributedDataParallel::start_ready_buckets() {
  while (next_start_ < buckets_.size() && buckets_[next_start_]->ready == bucket_params_[next_start_].size()) {
    start(next_start_);
    ++next_start_;
  }
}

void DistributedDataParallel::start(size_t i) {
  Bucket& b = *buckets_[i];
  stats_.started.push_back(i);
  if (traced_) {
    // Recorded into the trace: one op per bucket, whose outputs become the gradients.
    std::vector<Tensor> grads;
    for (size_t k : bucket_params_[i]) {
      Tensor g = params_[k].grad();
      grads.push_back(g.defined() ? g : Tensor::zeros(params_[k].sizes(), params_[k].dtype(), params_[k].device()));
    }
    std::vector<Tensor> avg = all_reduce_mean(grads);
    for (size_t j = 0; j < avg.size(); ++j) params_[bucket_params_[i][j]].set_grad(avg[j]);
    ++stats_.traced_ops;
    return;
  }
  b.work = all_reduce_async(b.flat, ReduceOp::Sum);
}

void DistributedDataParallel::on_backward_end() {
  if (!active_) return;
  const double t0 = now_ms();
  stats_.early = stats_.started;
  for (size_t k = 0; k < params_.size(); ++k)
    if (!ready_[k]) mark_ready(k);  // unused in this step: zeros
  if (!traced_) {
    const double scale = 1.0 / world_size();
    for (size_t i = 0; i < buckets_.size(); ++i) {
      Bucket& b = *buckets_[i];
      const double w = now_ms();
      b.work.wait();
      stats_.wait_ms += now_ms() - w;
      b.flat.mul_(scale);
      for (size_t j = 0; j < bucket_params_[i].size(); ++j) {
        Tensor& p = params_[bucket_params_[i][j]];
        Tensor avg = b.flat.narrow(0, b.offset[j], p.numel()).view(p.sizes());
        Tensor g = p.grad();
        if (g.defined() && g.is_contiguous() && g.sizes() == p.sizes() && g.dtype() == p.dtype()) {
          g.copy_(avg);
        } else {
          p.set_grad(avg.to(p.device()).clone());
        }
      }
    }
  }
  stats_.backward_end_ms = now_ms() - t0;
  active_ = false;
}

}  // namespace volt::dist
