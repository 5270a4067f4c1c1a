// Data-parallel training: each rank trains on its shard, compared with one
// process training on the global batch (computed on every rank by itself).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <sstream>

#include <volt/jit/step/step.h>
#include <volt/nn/functional.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/nn/parallel/ddp.h>
#include <volt/data/distributed_sampler.h>
#include <volt/tensor/random.h>

#include "tests/compare.h"

using namespace volt;

namespace {

constexpr int64_t kIn = 20, kClasses = 5, kPerRank = 8;

std::shared_ptr<nn::MLP> make_net() {
  manual_seed(7);
  return std::make_shared<nn::MLP>(kIn, std::vector<int64_t>{32, 16, kClasses}, true, 0.0);
}

// The same data set on every rank: (n, kIn) f32 and (n,) i64.
struct Data {
  std::vector<float> x;
  std::vector<int64_t> y;
  int64_t n;
};
Data make_data(int64_t n) {
  manual_seed(99);
  return {Tensor::randn({n, kIn}).to_vector<float>(), Tensor::randint(0, kClasses, {n}).to_vector<int64_t>(), n};
}

std::pair<Tensor, Tensor> batch_of(const Data& d, const std::vector<int64_t>& idx) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i : idx) {
    x.insert(x.end(), d.x.begin() + i * kIn, d.x.begin() + (i + 1) * kIn);
    y.push_back(d.y[static_cast<size_t>(i)]);
  }
  const int64_t b = static_cast<int64_t>(idx.size());
  return {Tensor::from_vector(x, {b, kIn}), Tensor::from_vector(y, {b})};
}

// Rank r's indices of step k, and the global batch of step k (every rank's, in rank order).
std::vector<int64_t> shard_batch(const std::vector<int64_t>& shard, int k) {
  return {shard.begin() + k * kPerRank, shard.begin() + (k + 1) * kPerRank};
}

Tensor train_step(nn::MLP& net, nn::Optimizer& opt, const Tensor& x, const Tensor& y) {
  Tensor loss = nn::functional::cross_entropy(net(x), y);
  opt.zero_grad();
  loss.backward();
  opt.step();
  return loss;
}

double max_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = volt::testing::worse(worst, volt::testing::max_abs_diff(a[i], b[i]));
  return worst;
}

// Every parameter, flattened into one f32 vector.
std::vector<float> flat(const std::vector<Tensor>& ps) {
  std::vector<float> v;
  for (const Tensor& p : ps) {
    std::vector<float> x = p.to_vector<float>();
    v.insert(v.end(), x.begin(), x.end());
  }
  return v;
}

// Rank 0's flat parameters, as every rank sees them.
bool same_on_every_rank(const std::vector<Tensor>& ps) {
  std::vector<float> mine = flat(ps);
  Tensor g = dist::all_gather(Tensor::from_vector(mine, {static_cast<int64_t>(mine.size())}));
  std::vector<float> all = g.to_vector<float>();
  for (int r = 1; r < dist::world_size(); ++r)
    if (!std::equal(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(r * mine.size()))) return false;
  return std::equal(mine.begin(), mine.end(), all.begin());
}

}  // namespace

TEST_CASE("ddp: 20 steps on 2 ranks equal one process on the global batch") {
  const int n = dist::world_size(), me = dist::rank();
  const int steps = 20;
  const Data data = make_data(steps * kPerRank * n);
  // Rank 1 starts from other values: the broadcast must replace them.
  auto net = make_net();
  if (me != 0) {
    NoGradGuard g;
    for (Tensor& p : net->parameters()) p.add_(1.0);
  }
  dist::DistributedDataParallel ddp(*net, {.bucket_bytes = 2048});  // several buckets
  REQUIRE(ddp.buckets().size() > 2);
  nn::SGD opt(net->parameters(), {.lr = 0.1, .momentum = 0.9});
  dist::DistributedSampler sampler(data.n, me, n, /*seed=*/5);
  const std::vector<int64_t> mine = sampler.next_epoch();
  for (int k = 0; k < steps; ++k) {
    auto [x, y] = batch_of(data, shard_batch(mine, k));
    train_step(*net, opt, x, y);
  }
  CHECK(same_on_every_rank(net->parameters()));

  // One process, global batch n * kPerRank, the same samples in each step.
  auto ref = make_net();
  nn::SGD ref_opt(ref->parameters(), {.lr = 0.1, .momentum = 0.9});
  std::vector<std::vector<int64_t>> shards;
  for (int r = 0; r < n; ++r) shards.push_back(dist::DistributedSampler(data.n, r, n, 5).next_epoch());
  for (int k = 0; k < steps; ++k) {
    std::vector<int64_t> global;
    for (int r = 0; r < n; ++r) {
      std::vector<int64_t> b = shard_batch(shards[static_cast<size_t>(r)], k);
      global.insert(global.end(), b.begin(), b.end());
    }
    auto [x, y] = batch_of(data, global);
    train_step(*ref, ref_opt, x, y);
  }
  const double d = max_diff(net->parameters(), ref->parameters());
  MESSAGE("largest parameter difference from one process: " << d);
  CHECK(d <= 1e-6);
  // And the run moved the parameters far more than that.
  CHECK(max_diff(ref->parameters(), make_net()->parameters()) > 1e-2);
}

TEST_CASE("ddp: the buckets cover every gradient exactly once and start in order") {
  auto net = make_net();
  const auto params = net->parameters();
  for (int64_t cap : {int64_t{1}, int64_t{600}, int64_t{2048}, int64_t{25} << 20}) {
    CAPTURE(cap);
    dist::DistributedDataParallel ddp(params, {.bucket_bytes = cap, .first_bucket_bytes = 1024});
    std::multiset<size_t> seen;
    for (const auto& b : ddp.buckets()) {
      const int64_t limit = &b == &ddp.buckets().front() ? std::min<int64_t>(cap, 1024) : cap;
      REQUIRE_FALSE(b.empty());
      int64_t bytes = 0;
      for (size_t k : b) {
        seen.insert(k);
        bytes += params[k].numel() * 4;
      }
      CHECK((b.size() == 1 || bytes <= limit));  // only a lone parameter may pass the cap
    }
    CHECK(seen.size() == params.size());
    for (size_t k = 0; k < params.size(); ++k) CHECK(seen.count(k) == 1);
    if (cap == 1) CHECK(ddp.buckets().size() == params.size());
    // The last three parameters (404 bytes) fit the 1024-byte first bucket,
    // the next (2048 bytes) does not; with a 25 MiB cap the rest is one more.
    if (cap == (int64_t{25} << 20)) CHECK(ddp.buckets().size() == 2);

    manual_seed(3 + static_cast<uint64_t>(dist::rank()));
    Tensor x = Tensor::randn({4, kIn});
    Tensor y = Tensor::randint(0, kClasses, {4});
    for (Tensor& p : net->parameters()) p.set_grad(Tensor());
    nn::functional::cross_entropy((*net)(x), y).backward();
    const auto& s = ddp.last_stats();
    REQUIRE(s.started.size() == ddp.buckets().size());
    for (size_t i = 0; i < s.started.size(); ++i) CHECK(s.started[i] == i);
    // With more than one bucket, the first starts while backward still runs.
    if (ddp.buckets().size() > 1) CHECK(!s.early.empty());
    for (const Tensor& p : params) CHECK(p.grad().defined());
    CHECK(same_on_every_rank([&] {
      std::vector<Tensor> g;
      for (const Tensor& p : params) g.push_back(p.grad());
      return g;
    }()));
  }
  CHECK(dist::DDPOptions{}.bucket_bytes == 25 * 1024 * 1024);
  CHECK(dist::DDPOptions{}.first_bucket_bytes == 1024 * 1024);
}

TEST_CASE("ddp: a parameter unused on a rank gets the average with a zero gradient there") {
  const int me = dist::rank(), n = dist::world_size();
  Tensor w = Tensor::zeros({3}).requires_grad_();
  Tensor v = Tensor::zeros({2}).requires_grad_();
  Tensor never = Tensor::ones({4}).requires_grad_();  // used by no rank
  dist::DistributedDataParallel ddp({w, v, never}, {.bucket_bytes = 8});
  // Rank 0's loss reads w only, every other rank's reads v only.
  Tensor c = Tensor::from_vector(std::vector<float>{1, 2, 3}) * (me + 1.0);
  Tensor loss = me == 0 ? (w * c).sum() : (v * 4.0).sum();
  loss.backward();
  // d/dw on rank 0 is c = [1, 2, 3], zero elsewhere; d/dv is 4 on every rank but 0.
  std::vector<float> gw = w.grad().to_vector<float>(), gv = v.grad().to_vector<float>();
  CHECK(gw == std::vector<float>{1.0f / n, 2.0f / n, 3.0f / n});
  CHECK(gv == std::vector<float>(2, 4.0f * (n - 1) / n));
  REQUIRE(never.grad().defined());
  CHECK(never.grad().to_vector<float>() == std::vector<float>(4, 0.0f));
}

TEST_CASE("ddp: the compiled step with the all-reduce op equals the eager step") {
  const int n = dist::world_size(), me = dist::rank();
  const int steps = 6;
  const Data data = make_data(steps * kPerRank * n);
  const std::vector<int64_t> mine = dist::DistributedSampler(data.n, me, n, 11).next_epoch();

  auto eager_net = make_net();
  dist::DistributedDataParallel eager_ddp(*eager_net, {.bucket_bytes = 2048});
  nn::Adam eager_opt(eager_net->parameters(), {.lr = 1e-2});
  std::vector<double> eager_losses;
  for (int k = 0; k < steps; ++k) {
    auto [x, y] = batch_of(data, shard_batch(mine, k));
    eager_losses.push_back(train_step(*eager_net, eager_opt, x, y).item_double());
  }

  auto net = make_net();
  dist::DistributedDataParallel ddp(*net, {.bucket_bytes = 2048});
  nn::Adam opt(net->parameters(), {.lr = 1e-2});
  auto step = jit::compile_step([&](const Tensor& x, const Tensor& y) { return train_step(*net, opt, x, y); },
                                {.state = {*net, opt}});
  double loss_diff = 0;
  for (int k = 0; k < steps; ++k) {
    auto [x, y] = batch_of(data, shard_batch(mine, k));
    loss_diff = std::max(loss_diff, std::fabs(step(x, y).item_double() - eager_losses[static_cast<size_t>(k)]));
  }
  CHECK(step.compiles() == 1);
  CHECK(ddp.last_stats().traced_ops == static_cast<int64_t>(ddp.buckets().size()));
  CHECK(loss_diff <= 1e-6);
  const double d = max_diff(net->parameters(), eager_net->parameters());
  MESSAGE("compiled vs eager data-parallel step, largest parameter difference: " << d);
  CHECK(d <= 1e-6);
  CHECK(same_on_every_rank(net->parameters()));

  // The printed trace shows one all-reduce per bucket, in the backward section.
  const std::string printed = step.last_trace_str();
  size_t count = 0;
  for (size_t at = printed.find("dist.all_reduce_mean"); at != std::string::npos;
       at = printed.find("dist.all_reduce_mean", at + 1))
    ++count;
  CHECK(count >= ddp.buckets().size());
  if (me == 0) MESSAGE("the compiled data-parallel step:\n" << printed);
  // Each one runs right after the op that makes the last of its inputs (only
  // other all-reduces in between).
  const jit::Trace& t = step.last_traces().back();
  size_t found = 0;
  for (size_t i = 0; i < t.bsyms.size(); ++i) {
    const jit::BoundSymbol& b = t.bsyms[i];
    if (b.call.op != OpId::custom || std::string(op_name(b.call)) != "dist.all_reduce_mean") continue;
    ++found;
    std::set<int64_t> args;
    for (const Tensor& a : jit::tensor_args(b)) args.insert(jit::id_of(a));
    size_t j = i;
    bool maker_found = false;
    while (j-- > 0) {
      const jit::BoundSymbol& p = t.bsyms[j];
      bool makes = false;
      for (const Tensor& o : p.outputs) makes = makes || args.count(jit::id_of(o)) > 0;
      if (makes) {
        maker_found = true;
        break;
      }
      const bool collective = p.call.op == OpId::custom && !p.is_fusion() &&
                              std::string(op_name(p.call)) == "dist.all_reduce_mean";
      CHECK_MESSAGE(collective, "an op that is not an all-reduce sits between all-reduce " << found
                                                                                           << " and its last input");
      if (!collective) break;
    }
    CHECK(maker_found);
  }
  CHECK(found == ddp.buckets().size());
}
