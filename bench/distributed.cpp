// volt_bench --distributed, under `mpirun -np 2 volt_bench --distributed`:
//
//   steps/s   2 ranks x 1 thread (DistributedDataParallel, per-rank batch B/2)
//             against 1 process x 2 threads (batch B), for global batch B in
//             --batch (default 64,256): the seed model, cross-entropy, Adam.
//   all-reduce bandwidth: volt::dist::all_reduce (f32, average) against a
//             plain MPI_Allreduce loop on the same number of floats, for the
//             sizes of the data-parallel step's gradient buckets and the
//             whole gradient.
//   hidden    the fraction of the step's communication that overlaps
//             backward: 1 - (time waiting for the all-reduces after backward)
//             / (the same buckets' all-reduces, run blocking one after another).
//
// Options: --batch LIST, --steps N (timed steps per cell; default until the
// median is stable), --smoke (few steps, small sizes).  Rank 0 prints.
#include "distributed.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/nn/parallel/ddp.h>
#include <volt/utils/cli.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/random.h>

#ifdef VOLT_WITH_MPI
#include <mpi.h>
#endif

namespace bench_dist {

using namespace volt;

bool wanted(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--distributed") == 0) return true;
  return false;
}

#ifndef VOLT_WITH_MPI

int run(int, char**) {
  std::fprintf(stderr, "volt_bench --distributed: volt was built without MPI (install libopenmpi-dev)\n");
  return 1;
}

#else

namespace {

struct Options {
  std::vector<int64_t> batches{64, 256};
  int64_t steps = 0;
  bool smoke = false;
};

// The same command-line conventions as volt_bench's other cells (volt/utils/cli.h):
// type names in the usage, "did you mean", exit status 2 for a usage error.
Options parse(int argc, char** argv) {
  namespace cli = volt::utils::cli;
  Options o;
  CLI::App app{"volt_bench --distributed: data-parallel training steps of the seed MLP on 2 MPI ranks",
               "volt_bench --distributed"};
  cli::setup(app);
  bool distributed = false;
  std::string batches;
  app.add_flag("--distributed", distributed, "data-parallel cells (run under mpirun -np 2)");
  app.add_option("--batch", batches, "global batch sizes, even (default 64,256)")
      ->type_name("N,...")
      ->check(cli::each(cli::count(2)));
  app.add_option("--steps", o.steps, "timed steps per cell (default: until the median is stable)")
      ->check(cli::count(1));
  app.add_flag("--smoke", o.smoke, "few steps per cell (for ./test.sh)");
  cli::parse(app, argc, argv);
  if (app.count("--batch")) {
    o.batches.clear();
    for (const std::string& b : cli::split_list(batches)) o.batches.push_back(std::stoll(b));
  }
  for (int64_t b : o.batches)
    if (b % 2 != 0) cli::usage_error(app, "--batch: expected even sizes (one half per rank), got " + std::to_string(b));
  return o;
}

std::shared_ptr<nn::MLP> make_model() {
  manual_seed(0);
  return std::make_shared<nn::MLP>(bench::kFeatures, std::vector<int64_t>{784, 784, 784, 28, bench::kClasses},
                                   true, 0.1);
}

struct Batch {
  Tensor x, y;
};
// Synthetic batch k of `batch` rows, rows [first, first + batch) of the
// global batch (bench/common.h's numbers, the same in every binary).
std::vector<Batch> batches_for(int64_t global, int64_t first, int64_t batch) {
  std::vector<Batch> r;
  for (int k = 0; k < bench::kBatchesHeld; ++k) {
    bench::RawBatch raw = bench::synthetic_batch(global, k);
    std::vector<float> x(raw.x.begin() + first * bench::kFeatures, raw.x.begin() + (first + batch) * bench::kFeatures);
    std::vector<int64_t> y(raw.y.begin() + first, raw.y.begin() + first + batch);
    r.push_back({Tensor::from_vector(x, {batch, bench::kFeatures}), Tensor::from_vector(y, {batch})});
  }
  return r;
}

struct Trainer {
  std::shared_ptr<nn::MLP> net = make_model();
  nn::Adam opt{net->parameters(), {.lr = 1e-3}};
  nn::CrossEntropyLoss loss_fn;
  void step(const Batch& b) {
    Tensor loss = loss_fn((*net)(b.x), b.y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
};

// Rank 1 idles (no busy MPI wait) while rank 0 works alone, then both go on.
// Both sides use the non-blocking all-reduce: MPI never matches a blocking
// collective with a non-blocking one.
void rank0_alone(const std::function<void()>& work) {
  Tensor flag = Tensor::zeros({1});
  if (dist::rank() == 0) {
    work();
    dist::all_reduce_async(flag).wait();
  } else {
    dist::Work w = dist::all_reduce_async(flag);
    while (!w.test()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    w.wait();
  }
}

// Median microseconds of `reps` blocking all-reduces of `floats` f32, by volt and by MPI.
std::pair<double, double> allreduce_us(int64_t floats, int reps) {
  Tensor t = Tensor::ones({floats});
  std::vector<double> volt_us, mpi_us;
  std::vector<float> raw(static_cast<size_t>(floats), 1.0f);
  for (int r = 0; r < reps + 2; ++r) {
    dist::barrier();
    auto t0 = bench::Clock::now();
    dist::all_reduce(t, dist::ReduceOp::Average);
    if (r >= 2) volt_us.push_back(bench::us_since(t0));
    dist::barrier();
    t0 = bench::Clock::now();
    MPI_Allreduce(MPI_IN_PLACE, raw.data(), static_cast<int>(floats), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (r >= 2) mpi_us.push_back(bench::us_since(t0));
  }
  return {bench::summarize(volt_us).median_us, bench::summarize(mpi_us).median_us};
}

}  // namespace

int run(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    dist::init();
    const int rank = dist::rank(), ranks = dist::world_size();
    VOLT_CHECK(ranks == 2, "volt_bench --distributed", "run it under mpirun -np 2 (this world has " << ranks << ")");
    const int64_t steps = o.smoke ? 2 : o.steps;
    const int64_t warmup = o.smoke ? 1 : -1;
    if (rank == 0) {
      // The path of each device's collectives (dist::backend_name); these cells use CPU tensors.
      // NCCL's version code: X*1000 + Y*100 + Z up to 2.8, X*10000 + Y*100 + Z since 2.9.
      const int v = dist::nccl_version();
      char nccl[64] = "libnccl.so.2 absent";
      if (dist::nccl_loadable())
        std::snprintf(nccl, sizeof nccl, "NCCL %d.%d.%d", v >= 10000 ? v / 10000 : v / 1000,
                      v >= 10000 ? v / 100 % 100 : v / 100 % 10, v % 100);
      std::printf("volt_bench --distributed: the seed MLP (1,868,590 parameters), Adam, eager steps; %d ranks; "
                  "collectives on CPU tensors: %s, on CUDA tensors: %s (%s)\n\n",
                  ranks, dist::backend_name(kCPU).c_str(), dist::backend_name(Device::cuda(0)).c_str(), nccl);
    }

    std::vector<int64_t> bucket_floats;
    for (int64_t global : o.batches) {
      // 1 process x 2 threads, batch `global` (rank 1 idles meanwhile).
      double one_sps = 0;
      rank0_alone([&] {
        cpu::set_num_threads(2);
        Trainer t;
        auto data = batches_for(global, 0, global);
        size_t k = 0;
        bench::Timing tm = bench::time_steps([&] { t.step(data[k++ % data.size()]); }, steps, warmup);
        one_sps = 1e6 / tm.median_us;
      });
      // 2 ranks x 1 thread, batch global / 2 each: DDP's default buckets, then 1 MiB ones.
      for (int64_t cap : {dist::DDPOptions{}.bucket_bytes, int64_t{1} << 20}) {
        cpu::set_num_threads(1);
        Trainer t;
        dist::DistributedDataParallel ddp(*t.net, {.bucket_bytes = cap});
        std::vector<int64_t> floats;
        for (const auto& b : ddp.buckets()) {
          int64_t n = 0;
          for (size_t k : b) n += t.net->parameters()[k].numel();
          floats.push_back(n);
        }
        if (bucket_floats.empty()) bucket_floats = floats;
        const int64_t per_rank = global / ranks;
        auto data = batches_for(global, rank * per_rank, per_rank);
        size_t k = 0;
        double wait_ms = 0;
        // Both ranks run the same number of steps (time_steps's stopping rule
        // could differ between them).
        std::vector<double> us;
        const int64_t n_steps = steps > 0 ? steps : 60;
        for (int64_t i = 0; i < (warmup < 0 ? 5 : warmup); ++i) t.step(data[k++ % data.size()]);
        dist::barrier();
        for (int64_t i = 0; i < n_steps; ++i) {
          const auto s0 = bench::Clock::now();
          t.step(data[k++ % data.size()]);
          us.push_back(bench::us_since(s0));
          wait_ms += ddp.last_stats().wait_ms;
        }
        const double two_sps = 1e6 / bench::summarize(us).median_us;
        // What the same buckets cost blocking, one after another.
        double blocking_ms = 0;
        for (int64_t n : floats) blocking_ms += allreduce_us(n, o.smoke ? 1 : 10).first / 1e3;
        const double exposed_ms = wait_ms / static_cast<double>(n_steps);
        const double hidden = std::clamp(1.0 - exposed_ms / blocking_ms, 0.0, 1.0);
        if (rank == 0)
          std::printf("global batch %4lld: 1 process x 2 threads %6.1f steps/s | 2 ranks x 1 thread (batch %lld each, "
                      "%zu buckets <= %lld MiB) %6.1f steps/s (%.2fx) | all-reduce %.2f ms/step blocking, %.2f ms "
                      "waited after backward: %.0f %% hidden\n",
                      (long long)global, one_sps, (long long)per_rank, floats.size(), (long long)(cap >> 20), two_sps,
                      two_sps / one_sps, blocking_ms, exposed_ms, 100 * hidden);
      }
    }

    // Bandwidth: the buckets' sizes and the whole gradient.
    std::vector<int64_t> sizes = bucket_floats;
    int64_t total = 0;
    for (int64_t n : bucket_floats) total += n;
    if (bucket_floats.size() > 1) sizes.push_back(total);
    if (o.smoke) sizes = {1024};
    if (rank == 0) std::printf("\nall-reduce (f32, 2 ranks), median of %d:\n", o.smoke ? 1 : 20);
    for (int64_t n : sizes) {
      auto [volt_us, mpi_us] = allreduce_us(n, o.smoke ? 1 : 20);
      const double mb = static_cast<double>(n) * 4 / 1e6;
      if (rank == 0)
        std::printf("  %8.2f MB: volt::dist::all_reduce %8.1f us (%5.2f GB/s) | MPI_Allreduce %8.1f us (%5.2f GB/s)\n", mb,
                    volt_us, mb / 1e3 / (volt_us * 1e-6), mpi_us, mb / 1e3 / (mpi_us * 1e-6));
    }
    return 0;
  } catch (const Error& e) {
    dist::abort(std::string("volt_bench --distributed: ") + e.what());
  }
}

#endif

}  // namespace bench_dist
