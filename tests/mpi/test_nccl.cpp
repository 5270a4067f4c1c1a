// volt::dist's NCCL path: CUDA tensors through libnccl.so.2, checked against
// the same collectives on CPU tensors (MPI's path) and against the host-buffer
// path (VOLT_NCCL=0).  tests/mpi/run.sh runs these on the simulated GPU
// (tests/cudasim) with the simulated NCCL (tests/ncclsim) on LD_LIBRARY_PATH,
// whose call counters show whether NCCL was really used; elsewhere they say
// why they are skipped.
#include <doctest/doctest.h>

#include <volt/nn/parallel/dist.h>

#ifdef VOLT_WITH_CUDA
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

#include <volt/jit/cuda/step_graph.h>
#include <volt/jit/step/step.h>
#include <volt/nn/functional.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/nn/parallel/ddp.h>
#include <volt/tensor/cuda/graph.h>
#include <volt/tensor/random.h>

#include "tests/compare.h"
#include "tests/skip.h"

using namespace volt;

namespace {

const Device kGpu = Device::cuda(0);

// Sets an environment variable for a scope (on every rank: they run the same code).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// libnccl.so.2 as this process finds it (the handle volt holds, once loaded).
void* nccl_handle() { return dlopen("libnccl.so.2", RTLD_LAZY | RTLD_LOCAL); }

// The simulated NCCL's counters (tests/ncclsim), in its order.
enum Counter { kUniqueIds, kCommInits, kCommDestroys, kAllReduces, kBroadcasts, kAllGathers, kAverages, kCounters };
using Counts = std::array<long long, kCounters>;
using CountersFn = int (*)(long long*, int);

CountersFn sim_counters() {
  void* h = nccl_handle();
  return h ? reinterpret_cast<CountersFn>(dlsym(h, "volt_ncclsim_counters")) : nullptr;
}

Counts counts() {
  Counts c{};
  CountersFn f = sim_counters();
  const bool found = f != nullptr;
  REQUIRE(found);
  REQUIRE(f(c.data(), kCounters) == kCounters);
  return c;
}

Counts delta(const Counts& after, const Counts& before) {
  Counts d{};
  for (int i = 0; i < kCounters; ++i) d[i] = after[i] - before[i];
  return d;
}

// A GPU and the simulated NCCL are here (else the test says why it stops).
bool ready() {
  if (!cuda::is_available()) {
    ++volt::testing::skips()["no CUDA GPU or driver here"];
    MESSAGE("skipped: no CUDA GPU or driver here");
    return false;
  }
  if (!nccl_handle()) {
    ++volt::testing::skips()["no libnccl.so.2 here (tests/mpi/run.sh puts the simulated one on LD_LIBRARY_PATH)"];
    MESSAGE("skipped: no libnccl.so.2 here (tests/mpi/run.sh puts the simulated one on LD_LIBRARY_PATH)");
    return false;
  }
  if (!sim_counters()) {
    ++volt::testing::skips()["libnccl.so.2 is not the simulated NCCL, whose counters these tests read"];
    MESSAGE("skipped: libnccl.so.2 is not the simulated NCCL, whose counters these tests read");
    return false;
  }
  return true;
}

// Whether volt should take NCCL's path in this run (VOLT_NCCL=0 says no).
bool nccl_wanted() {
  const char* e = std::getenv("VOLT_NCCL");
  return !(e && std::string(e) == "0");
}

// Rank r's 7 values: fractional floats, and integers of both signs (whose
// average truncates toward zero, as C's division).
Tensor values(int r, DType dt) {
  std::vector<double> v;
  for (int i = 0; i < 7; ++i)
    v.push_back(is_floating(dt) ? (r + 1) * (i + 1) * 0.37 - 1.5 * i : static_cast<double>((r + 1) * (7 * i - 19)));
  return Tensor::from_vector(v, {7}).to(dt);
}

std::vector<double> host(const Tensor& t) { return t.to_vector<double>(); }

}  // namespace

TEST_CASE("nccl: backend_name says NCCL for CUDA tensors when libnccl.so.2 loads") {
  CHECK(dist::backend_name(kCPU) == "mpi");
  if (!ready()) return;
  REQUIRE(dist::nccl_loadable());
  CHECK(dist::backend_name(kGpu) == (nccl_wanted() ? "nccl" : "mpi"));
  {
    ScopedEnv off("VOLT_NCCL", "0");
    CHECK(dist::backend_name(kGpu) == "mpi");
    CHECK(dist::backend_name(kCPU) == "mpi");
  }
  const char* v = std::getenv("VOLT_NCCLSIM_VERSION");
  CHECK(dist::nccl_version() == (v ? std::atoi(v) : 21803));
}

TEST_CASE("nccl: all_reduce, broadcast, all_gather and all_reduce_async on CUDA tensors equal them on CPU tensors") {
  if (!ready()) return;
  const int n = dist::world_size(), me = dist::rank();
  const bool want = nccl_wanted();
  const bool native_avg = dist::nccl_version() >= 21000;
  const Counts before = counts();
  Counts expected{};
  for (DType dt : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    CAPTURE(dtype_name(dt));
    for (dist::ReduceOp op : {dist::ReduceOp::Sum, dist::ReduceOp::Average}) {
      const bool avg = op == dist::ReduceOp::Average;
      CAPTURE(avg);
      Tensor c = values(me, dt), g = c.to(kGpu);
      dist::all_reduce(c, op);
      dist::all_reduce(g, op);
      CHECK(g.device() == kGpu);
      CHECK(host(g) == host(c));
      // Non-blocking: the CUDA tensor's work and the CPU tensor's, both in flight.
      Tensor ca = values(me, dt), ga = ca.to(kGpu);
      dist::Work wg = dist::all_reduce_async(ga, op);
      dist::Work wc = dist::all_reduce_async(ca, op);
      CHECK(wg.pending());
      wg.wait();
      wc.wait();
      CHECK_FALSE(wg.pending());
      CHECK(host(ga) == host(ca));
      CHECK(host(ga) == host(c));
      expected[kAllReduces] += 2;
      if (avg && native_avg && is_floating(dt)) expected[kAverages] += 2;
    }
    for (int root = 0; root < n; ++root) {
      Tensor c = values(me, dt), g = c.to(kGpu);
      dist::broadcast(c, root);
      dist::broadcast(g, root);
      CHECK(host(g) == host(values(root, dt)));
      CHECK(host(g) == host(c));
      ++expected[kBroadcasts];
    }
    Tensor c = values(me, dt);
    Tensor gathered = dist::all_gather(c.to(kGpu));
    CHECK(gathered.device() == kGpu);
    CHECK(gathered.sizes() == Shape{n, 7});
    CHECK(host(gathered) == host(dist::all_gather(c)));
    ++expected[kAllGathers];
  }
  // A strided CUDA tensor: reduced through a contiguous copy, written back.
  Tensor base = Tensor::full({3, 4}, 1.0 + me, DType::f32, kGpu);
  Tensor col = base.transpose(0, 1);
  dist::all_reduce(col);
  for (float v : base.to_vector<float>()) CHECK(v == n * (n + 1) / 2.0f);
  ++expected[kAllReduces];

  // The simulated NCCL saw exactly these calls, or none on the host-buffer path.
  const Counts after = counts(), d = delta(after, before);
  for (int i : {kAllReduces, kBroadcasts, kAllGathers, kAverages}) {
    CAPTURE(i);
    CHECK(d[i] == (want ? expected[i] : 0));
  }
  // One communicator for the whole process, from rank 0's one unique id.
  CHECK(after[kCommInits] == (want ? 1 : 0));
  CHECK(after[kUniqueIds] == (want && me == 0 ? 1 : 0));
  CHECK(after[kCommDestroys] == 0);
}

TEST_CASE("nccl: Work::test() on CUDA tensors becomes true, then wait() gives the CPU tensors' result") {
  if (!ready()) return;
  const int me = dist::rank();
  const bool sim_gpu = cuda::simulated_counters().has_value();
  for (DType dt : {DType::f32, DType::i64}) {
    CAPTURE(dtype_name(dt));
    for (dist::ReduceOp op : {dist::ReduceOp::Sum, dist::ReduceOp::Average}) {
      CAPTURE(op == dist::ReduceOp::Average);
      Tensor c = values(me, dt), g = c.to(kGpu);
      dist::all_reduce(c, op);
      dist::Work w = dist::all_reduce_async(g, op);
      int not_done = 0;
      while (!w.test() && not_done < 1000000) ++not_done;
      CHECK(w.test());  // and stays so
      CHECK(w.pending());
      // Through NCCL, test() asks the GPU's event: on the simulated GPU the
      // copy of the result is still queued at the first question.
      if (sim_gpu && nccl_wanted()) CHECK(not_done == 1);
      w.wait();
      CHECK_FALSE(w.pending());
      CHECK(w.test());
      CHECK(host(g) == host(c));
      CHECK(g.device() == kGpu);
    }
  }
  // No stale "not ready" is left for the next CUDA call to find.
  Tensor t = Tensor::ones({3}, DType::f32, kGpu) * 2.0;
  CHECK(t.to_vector<float>() == std::vector<float>(3, 2.0f));
}

TEST_CASE("nccl: with VOLT_NCCL=0 CUDA tensors go through host buffers and NCCL is not called") {
  if (!ready()) return;
  const int n = dist::world_size(), me = dist::rank();
  ScopedEnv off("VOLT_NCCL", "0");
  const Counts before = counts();
  Tensor g = values(me, DType::f32).to(kGpu);
  dist::all_reduce(g, dist::ReduceOp::Average);
  Tensor c = values(me, DType::f32);
  dist::all_reduce(c, dist::ReduceOp::Average);
  CHECK(host(g) == host(c));
  Tensor a = values(me, DType::f64).to(kGpu);
  dist::all_reduce_async(a).wait();
  Tensor b = values(me, DType::f64).to(kGpu);
  dist::broadcast(b, n - 1);
  CHECK(host(b) == host(values(n - 1, DType::f64)));
  CHECK(dist::all_gather(b).device() == kGpu);
  const Counts d = delta(counts(), before);
  for (int i = 0; i < kCounters; ++i) {
    CAPTURE(i);
    CHECK(d[i] == 0);
  }
}

namespace {

constexpr int64_t kIn = 12, kClasses = 4, kPerRank = 6;

// 20 steps of DDP + SGD on the GPU, each rank its own slice of the global batch.
std::vector<Tensor> train_on_gpu(int steps, size_t* buckets) {
  const int n = dist::world_size(), me = dist::rank();
  manual_seed(3);
  auto net = std::make_shared<nn::MLP>(kIn, std::vector<int64_t>{16, 8, kClasses}, true, 0.0);
  net->to(kGpu);
  dist::DistributedDataParallel ddp(*net, {.bucket_bytes = 512});  // several buckets
  *buckets = ddp.buckets().size();
  nn::SGD opt(net->parameters(), {.lr = 0.2, .momentum = 0.9});
  manual_seed(11);
  const Tensor xs = Tensor::randn({steps * n * kPerRank, kIn});
  const Tensor ys = Tensor::randint(0, kClasses, {steps * n * kPerRank});
  for (int k = 0; k < steps; ++k) {
    const int64_t at = (static_cast<int64_t>(k) * n + me) * kPerRank;
    Tensor x = xs.narrow(0, at, kPerRank).to(kGpu), y = ys.narrow(0, at, kPerRank).to(kGpu);
    opt.zero_grad();
    nn::functional::cross_entropy((*net)(x), y).backward();
    opt.step();
  }
  std::vector<Tensor> out;
  for (const Tensor& p : net->parameters()) out.push_back(p.to(kCPU));
  return out;
}

std::vector<float> flat(const std::vector<Tensor>& ps) {
  std::vector<float> v;
  for (const Tensor& p : ps) {
    std::vector<float> x = p.to_vector<float>();
    v.insert(v.end(), x.begin(), x.end());
  }
  return v;
}

}  // namespace

TEST_CASE("nccl: DDP on CUDA through NCCL gives every rank the same parameters, those of the host-buffer path") {
  if (!ready()) return;
  const int n = dist::world_size();
  const int steps = 20;
  size_t buckets = 0;
  Counts before = counts();
  const std::vector<Tensor> params = train_on_gpu(steps, &buckets);
  const std::vector<float> with_nccl = flat(params);
  const Counts d_nccl = delta(counts(), before);
  REQUIRE(buckets > 2);
  size_t host_buckets = 0;
  before = counts();
  std::vector<float> with_host;
  {
    ScopedEnv off("VOLT_NCCL", "0");
    with_host = flat(train_on_gpu(steps, &host_buckets));
  }
  const Counts d_host = delta(counts(), before);
  CHECK(host_buckets == buckets);

  // Identical on every rank.
  const int64_t len = static_cast<int64_t>(with_nccl.size());
  std::vector<float> all = dist::all_gather(Tensor::from_vector(with_nccl, {len})).to_vector<float>();
  for (int r = 0; r < n; ++r)
    CHECK(std::equal(with_nccl.begin(), with_nccl.end(), all.begin() + r * len));
  // The host-buffer path's result, within 1e-6; and training moved the parameters.
  manual_seed(3);
  const std::vector<float> start =
      flat(nn::MLP(kIn, std::vector<int64_t>{16, 8, kClasses}, true, 0.0).parameters());
  const double worst = volt::testing::max_abs_diff(with_nccl, with_host);
  const double moved = volt::testing::max_abs_diff(with_host, start);
  MESSAGE("largest difference between NCCL's and the host-buffer path's parameters: " << worst);
  CHECK(worst <= 1e-6);
  CHECK(moved > 1e-2);

  // Each bucket of each step was one ncclAllReduce (the parameters' broadcast
  // at construction, one ncclBroadcast each); none on the host-buffer path.
  if (nccl_wanted()) {
    CHECK(d_nccl[kAllReduces] == static_cast<long long>(buckets) * steps);
    CHECK(d_nccl[kBroadcasts] == static_cast<long long>(params.size()));
  } else {
    CHECK(d_nccl[kAllReduces] == 0);
  }
  CHECK(d_host[kAllReduces] == 0);
  CHECK(d_host[kBroadcasts] == 0);
}

TEST_CASE("nccl: the compiled step on CUDA runs launch by launch, reduces its buckets through NCCL and equals the eager step") {
  if (!ready()) return;
  const int n = dist::world_size(), me = dist::rank();
  const int steps = 4;
  manual_seed(11);
  const Tensor xs = Tensor::randn({steps * n * kPerRank, kIn});
  const Tensor ys = Tensor::randint(0, kClasses, {steps * n * kPerRank});
  auto batch = [&](int k) {
    const int64_t at = (static_cast<int64_t>(k) * n + me) * kPerRank;
    return std::pair{xs.narrow(0, at, kPerRank).to(kGpu), ys.narrow(0, at, kPerRank).to(kGpu)};
  };
  auto make = [] {
    manual_seed(3);
    auto net = std::make_shared<nn::MLP>(kIn, std::vector<int64_t>{16, 8, kClasses}, true, 0.0);
    net->to(kGpu);
    return net;
  };
  auto train_step = [](nn::MLP& net, nn::Optimizer& opt, const Tensor& x, const Tensor& y) {
    Tensor loss = nn::functional::cross_entropy(net(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  auto eager_net = make();
  dist::DistributedDataParallel eager_ddp(*eager_net, {.bucket_bytes = 512});
  nn::SGD eager_opt(eager_net->parameters(), {.lr = 0.2});
  for (int k = 0; k < steps; ++k) {
    auto [x, y] = batch(k);
    train_step(*eager_net, eager_opt, x, y);
  }

  auto net = make();
  dist::DistributedDataParallel ddp(*net, {.bucket_bytes = 512});
  nn::SGD opt(net->parameters(), {.lr = 0.2});
  // The default options: a CUDA step is captured into a graph from its second
  // call, except one holding a collective, which runs launch by launch.
  auto step = jit::compile_step([&](const Tensor& x, const Tensor& y) { return train_step(*net, opt, x, y); },
                                {.state = {*net, opt}});
  const Counts before = counts();
  const int64_t graphs_before = cuda::graph_launches();
  for (int k = 0; k < steps; ++k) {
    auto [x, y] = batch(k);
    step(x, y);
    CHECK_FALSE(step.ran_as_graph());
  }
  const Counts d = delta(counts(), before);
  CHECK(step.compiles() == 1);
  CHECK(cuda::graph_launches() == graphs_before);
  CHECK(step.graph_kernel_nodes() == 0);
  const std::string why = jit::cuda::StepGraph::refusal(step.last_traces().back());
  CHECK(why.find("dist.all_reduce_mean") != std::string::npos);
  CHECK(why.find("pending a real multi-GPU test") != std::string::npos);
  CHECK(ddp.last_stats().traced_ops == static_cast<int64_t>(ddp.buckets().size()));
  std::vector<Tensor> got, want;
  for (const Tensor& p : net->parameters()) got.push_back(p.to(kCPU));
  for (const Tensor& p : eager_net->parameters()) want.push_back(p.to(kCPU));
  const std::vector<float> a = flat(got), b = flat(want);
  const double worst = volt::testing::max_abs_diff(a, b);
  MESSAGE("compiled vs eager data-parallel step on CUDA, largest parameter difference: " << worst);
  CHECK(worst <= 1e-6);
  // Each bucket of each step: one all-reduce op, one ncclAllReduce (an average).
  const long long want_calls = nccl_wanted() ? static_cast<long long>(ddp.buckets().size()) * steps : 0;
  CHECK(d[kAllReduces] == want_calls);
  CHECK(d[kAverages] == (dist::nccl_version() >= 21000 ? want_calls : 0));
}

TEST_CASE("nccl: a failing NCCL call is an error naming the call, the rank and NCCL's message") {
  if (!ready() || !nccl_wanted()) return;
  Tensor t = Tensor::ones({4}, DType::f32, kGpu);
  ScopedEnv fail("VOLT_NCCLSIM_FAIL", "ncclBroadcast");
  const std::string want = "ncclBroadcast: failed on rank " + std::to_string(dist::rank()) +
                           ": invalid usage: ncclsim: ncclBroadcast fails on request";
  CHECK_THROWS_WITH_AS(dist::broadcast(t, 0), doctest::Contains(want.c_str()), Error);
  // Both ranks failed the same call; the next collectives still match.
  dist::all_reduce(t);
  CHECK(t.to_vector<float>() == std::vector<float>(4, static_cast<float>(dist::world_size())));
}

#else
TEST_CASE("nccl: NCCL's path needs a CUDA build") { VOLT_SKIP("volt built without CUDA"); }
#endif
