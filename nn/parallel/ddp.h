// Data-parallel training across processes, as PyTorch's DistributedDataParallel.
//
//   volt::dist::init();                                   // mpirun -np 2 ./train
//   auto net = std::make_shared<volt::nn::MLP>(784, std::vector<int64_t>{128, 10});
//   volt::dist::DistributedDataParallel ddp(*net);        // rank 0's parameters everywhere
//   volt::nn::Adam opt(net->parameters(), {.lr = 1e-3});
//   for (auto& [x, y] : loader) {                         // each rank its own shard
//     opt.zero_grad();
//     volt::nn::cross_entropy((*net)(x), y).backward();   // gradients averaged over ranks
//     opt.step();                                         // the same update on every rank
//   }
//
// The gradients are averaged in buckets: the parameters, last first (the
// order backward usually finishes them in), are grouped into buckets of at
// most `bucket_bytes` (25 MiB by default, PyTorch's bucket_cap_mb; the first
// bucket at most `first_bucket_bytes`, 1 MiB; one larger parameter makes a
// bucket of its own).  During backward, once every gradient
// of a bucket is final (autograd/hooks.h) its values are copied into the
// bucket's flat buffer and a non-blocking all-reduce starts, so communication
// overlaps the rest of backward: MPI_Iallreduce on a host buffer, or, for
// CUDA parameters when NCCL is used (backend_name), ncclAllReduce on a buffer
// on the GPU, queued on the device's stream.  A bucket holds parameters of
// one dtype and one device.  When backward ends, every
// bucket still to start is started (a parameter that got no gradient in this
// step contributes zeros, and gets the average of the others), all are waited
// for, and each parameter's .grad is the average over ranks: the optimizer
// runs afterwards as in one process.  Buckets start in the same order on every
// rank (bucket k only after bucket k-1), as MPI's collectives require.
//
// One backward per optimizer step (gradient accumulation over several
// backwards would average the running sum each time).
//
// Traced by volt::jit::compile_step, the same hooks record one op per bucket,
// `dist.all_reduce_mean(g...)` (nn/parallel/all_reduce_op.h), whose outputs the
// optimizer reads; the jit places it right after the last gradient of its
// bucket (jit/step/collectives.h).
#pragma once
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include <volt/nn/parallel/dist.h>

namespace volt::dist {

struct DDPOptions {
  int64_t bucket_bytes = 25 * 1024 * 1024;
  // The first bucket (the last parameters) is smaller, so that communication
  // starts early in backward (PyTorch's default first bucket is 1 MiB too).
  int64_t first_bucket_bytes = 1024 * 1024;
  bool broadcast_parameters = true;  // rank 0's values to every rank at construction
};

class DistributedDataParallel {
 public:
  explicit DistributedDataParallel(std::vector<Tensor> params, DDPOptions options = {});
  template <class M>
    requires requires(M& m) { m.parameters(); }
  explicit DistributedDataParallel(M& module, DDPOptions options = {})
      : DistributedDataParallel(module.parameters(), options) {}
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // Parameter indices (into the constructor's list) of each bucket, in the order they start.
  const std::vector<std::vector<size_t>>& buckets() const { return bucket_params_; }

  // What the last backward did, for tests and the benchmark.
  struct Stats {
    std::vector<size_t> started;      // bucket indices in the order their all-reduce started
    std::vector<size_t> early;        // those started during backward (not at its end)
    double wait_ms = 0;               // time waiting for the all-reduces after backward
    double backward_end_ms = 0;       // time of the end-of-backward work (start, wait, copy back)
    int64_t traced_ops = 0;           // all-reduce ops recorded into a trace
  };
  const Stats& last_stats() const { return stats_; }

 private:
  struct Bucket;
  void on_grad_ready(const std::shared_ptr<TensorImpl>& leaf);
  void on_backward_end();
  void mark_ready(size_t param);
  void start_ready_buckets();
  void start(size_t bucket);
  void reset_step();

  std::vector<Tensor> params_;
  DDPOptions options_;
  std::unordered_map<const TensorImpl*, size_t> index_of_;
  std::vector<std::vector<size_t>> bucket_params_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<size_t> bucket_of_, slot_of_;  // per parameter
  std::vector<char> ready_;                  // per parameter, this backward
  size_t next_start_ = 0;
  bool active_ = false;   // a gradient of ours arrived in this backward
  bool traced_ = false;   // ... and it was a traced value (compile_step)
  int64_t hooks_ = -1;
  Stats stats_;
};

}  // namespace volt::dist
