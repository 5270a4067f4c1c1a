// DataLoader::workers: batches made ahead on worker threads are the batches
// made on the loop's thread, bit for bit; errors reach the loop at their
// batch; the loop's thread-local state (mode, autocast, grad mode) is its own;
// stopping early, a new epoch and destroying the loader end the workers.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <unistd.h>

#include <volt/data/datasets.h>
#include <volt/jit/jit.h>
#include <volt/jit/lazy/lazy.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/cpu/serial_guard.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/dispatch.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/error_of.h"
#include "tensor/reference.h"

using namespace volt;
using volt::testing::same_bits;
using volt::testing::error_of;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// n images of 2x3 u8 pixels, pixel j of image i = (7 i + 3 j) % 256; target i = i.
data::ImageDataset images(int64_t n, std::vector<data::Transform> transforms = {}) {
  std::vector<uint8_t> px;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 6; ++j) px.push_back(static_cast<uint8_t>((7 * i + 3 * j) % 256));
    y.push_back(i);
  }
  Tensor pixels = Tensor::from_vector<uint8_t>(px, {n, 2, 3});
  return data::ImageDataset(pixels, Tensor::from_vector(y), std::move(transforms));
}

// Every batch of `epochs` epochs, in order.
std::vector<data::Batch> all_batches(data::DataLoader& loader, int epochs) {
  std::vector<data::Batch> out;
  for (int e = 0; e < epochs; ++e)
    for (auto& b : loader) out.push_back(b);
  return out;
}

// A dataset of rows whose gather waits `delay` per batch, counts its calls and
// fails for sample `bad`.
class SlowRows : public data::Dataset {
 public:
  SlowRows(int64_t n, std::chrono::microseconds delay, int64_t bad = -1) : n_(n), delay_(delay), bad_(bad) {}
  int64_t size() const override { return n_; }
  Shape sample_shape() const override { return {2}; }
  void gather(std::span<const int64_t> indices, Tensor& data, Tensor& targets) const override {
    ++gathers;
    std::this_thread::sleep_for(delay_);
    float* x = data.data_ptr<float>();
    int64_t* y = targets.data_ptr<int64_t>();
    for (size_t r = 0; r < indices.size(); ++r) {
      VOLT_CHECK(indices[r] != bad_, "SlowRows", "sample " << bad_ << " is unreadable");
      x[2 * r] = float(indices[r]);
      x[2 * r + 1] = -float(indices[r]);
      y[r] = indices[r];
    }
  }
  mutable std::atomic<int64_t> gathers{0};

 private:
  int64_t n_;
  std::chrono::microseconds delay_;
  int64_t bad_;
};

// Forwards every op to eager execution and counts them: what a tracer sees.
struct CountingMode : DispatchMode {
  std::vector<Tensor> run(OpCall& call) override {
    ++calls;
    return run_eager(call);
  }
  double item(const Tensor& t) override { return t.item<double>(); }
  int64_t calls = 0;
};

}  // namespace

TEST_CASE("DataLoader workers(0), (1) and (3): the same batches bit for bit over 2 epochs, short last batch") {
  // 103 = 12 * 8 + 7: a short last batch; Normalize runs tensor ops on every batch.
  data::ImageDataset ds = images(103, {data::normalize(0.1307, 0.3081)});
  std::vector<std::vector<data::Batch>> runs;
  for (int64_t w : {0, 1, 3}) {
    data::DataLoader loader(ds, 8, data::RandomSampler(ds.size(), 11));
    CHECK(loader.workers(w).workers() == w);
    runs.push_back(all_batches(loader, 2));
  }
  // The reference: the sampler's permutations and pixel / 255 normalised, in f64.
  std::vector<int64_t> order = data::RandomSampler::permutation(103, 11, 0);
  const std::vector<int64_t> second = data::RandomSampler::permutation(103, 11, 1);
  order.insert(order.end(), second.begin(), second.end());
  REQUIRE(runs[0].size() == 26);
  size_t at = 0;
  for (const data::Batch& b : runs[0]) {
    const auto y = b.target.to_vector<int64_t>();
    const auto x = b.data.to_vector<float>();
    CHECK(b.data.sizes() == Shape{int64_t(y.size()), 2, 3});
    for (size_t r = 0; r < y.size(); ++r, ++at) {
      REQUIRE(y[r] == order[at]);
      for (int64_t j = 0; j < 6; ++j) {
        const double p = double((7 * y[r] + 3 * j) % 256) / 255.0;
        CHECK(std::abs(x[r * 6 + j] - (p - 0.1307) / 0.3081) < 1e-5);
      }
    }
  }
  CHECK(at == 206);
  CHECK(runs[0][12].target.numel() == 7);
  for (size_t w = 1; w < runs.size(); ++w) {
    CAPTURE(w);
    REQUIRE(runs[w].size() == runs[0].size());
    for (size_t k = 0; k < runs[0].size(); ++k) {
      CAPTURE(k);
      CHECK(same_bits(runs[w][k].data, runs[0][k].data));
      CHECK(same_bits(runs[w][k].target, runs[0][k].target));
    }
  }
}

TEST_CASE("DataLoader workers: LibTorch's DataLoaderOptions().workers(2), bad counts") {
  data::ImageDataset ds = images(20);
  auto loader = data::make_data_loader<data::SequentialSampler>(ds, data::DataLoaderOptions().batch_size(6).workers(2));
  CHECK(loader->workers() == 2);
  std::vector<int64_t> seen;
  for (auto& batch : *loader)
    for (int64_t i : batch.target.to_vector<int64_t>()) seen.push_back(i);
  CHECK(seen.size() == 20);
  for (size_t i = 0; i < seen.size(); ++i) CHECK(seen[i] == int64_t(i));
  auto owned = data::make_data_loader<data::samplers::SequentialSampler>(
      data::datasets::MapDataset(images(9)), data::DataLoaderOptions().batch_size(4).workers(1));
  CHECK(owned->workers() == 1);
  int64_t batches = 0;
  for (auto& batch : *owned) batches += batch.data.size(0) > 0;
  CHECK(batches == 3);
  data::DataLoader plain(ds, 4);
  CHECK(contains(error_of([&] { plain.workers(-1); }), "DataLoader::workers: expects 0 or more"));
}

TEST_CASE("DataLoader workers: an error making batch k is thrown by the loop at batch k") {
  for (int64_t w : {0, 1, 3}) {
    CAPTURE(w);
    SlowRows ds(40, std::chrono::microseconds(0), /*bad=*/21);  // in batch 5 (samples 20..23)
    data::DataLoader loader(ds, 4);
    loader.workers(w);
    int64_t reached = 0;
    std::string error;
    try {
      for (auto& b : loader) {
        CHECK(b.target.to_vector<int64_t>()[0] == 4 * reached);
        ++reached;
      }
    } catch (const Error& e) {
      error = e.what();
    }
    CHECK(reached == 5);
    CHECK(contains(error, "SlowRows: sample 21 is unreadable"));
    // The loader is still usable: a fresh epoch fails at the same batch again.
    auto it = loader.begin();
    for (int k = 0; k < 4; ++k) ++it;
    CHECK(contains(error_of([&] { ++it; }), "sample 21"));
  }
}

TEST_CASE("DataLoader workers: leaving early, begin() mid-epoch and destroying the loader end the workers") {
  SlowRows ds(64, std::chrono::microseconds(2000));
  {  // leaving the loop early: the workers stop and nothing more is gathered
    data::DataLoader loader(ds, 2);
    loader.workers(3);
    int64_t k = 0;
    for (auto& b : loader) {
      CHECK(b.target.to_vector<int64_t>()[0] == 2 * k);
      if (++k == 3) break;
    }
    const int64_t after = ds.gathers.load();
    CHECK(after <= 3 + 6);  // 3 taken, at most 2 x 3 made ahead
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(ds.gathers.load() == after);
  }
  {  // a new begin() mid-epoch: the old iterator goes on (batches made here), the new one too
    data::DataLoader loader(ds, 4);
    loader.workers(2);
    auto old = loader.begin();
    ++old;
    auto fresh = loader.begin();
    for (int k = 1; k < 16; ++k, ++old) CHECK(old->target.to_vector<int64_t>()[0] == 4 * k);
    CHECK(old == loader.end());
    int64_t k = 0;
    for (; fresh != loader.end(); ++fresh, ++k) CHECK(fresh->target.to_vector<int64_t>()[0] == 4 * k);
    CHECK(k == 16);
  }
  {  // the loader destroyed while its workers run and an iterator is still held
    std::optional<data::DataLoader::Iterator> held;
    {
      data::DataLoader loader(ds, 1);
      loader.workers(2);
      held.emplace(loader.begin());
      CHECK((*held)->target.to_vector<int64_t>()[0] == 0);
    }
    const int64_t after = ds.gathers.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(ds.gathers.load() == after);
    held.reset();
  }
}

TEST_CASE("DataLoader workers: plain eager ops whatever mode, autocast and grad mode the loop's thread is in") {
  struct Seen {
    std::mutex mutex;
    int64_t calls = 0, moded = 0, autocast = 0, grad = 0;
  } seen;
  data::Transform observe = [&seen](Tensor x) {
    std::lock_guard<std::mutex> lock(seen.mutex);
    ++seen.calls;
    seen.moded += current_mode() != nullptr;
    seen.autocast += autocast_dtype().has_value();
    seen.grad += grad_enabled();
    return x * 2.0;
  };
  data::ImageDataset ds = images(30, {observe});
  data::DataLoader reference(ds, 4, data::RandomSampler(30, 5));
  const std::vector<data::Batch> want = all_batches(reference, 1);
  seen.calls = seen.moded = seen.autocast = seen.grad = 0;
  for (int64_t w : {1, 3}) {
    CAPTURE(w);
    data::DataLoader loader(ds, 4, data::RandomSampler(30, 5));
    loader.workers(w);
    CountingMode mode;
    std::vector<data::Batch> got;
    {
      ModeGuard recording(&mode);                 // as a jit trace installs itself
      AutocastGuard autocast(DType::bf16);
      for (auto& b : loader) got.push_back(b);
    }
    CHECK(mode.calls == 0);  // no op of a worker reached the loop's mode
    REQUIRE(got.size() == want.size());
    for (size_t k = 0; k < got.size(); ++k) CHECK(same_bits(got[k].data, want[k].data));
    CHECK(current_mode() == nullptr);
    CHECK(!autocast_dtype());
    CHECK(grad_enabled());  // the workers' no-grad is theirs
  }
  CHECK(seen.calls == 16);  // 8 batches x 2 loaders (the constructor's check came before)
  CHECK(seen.moded == 0);
  CHECK(seen.autocast == 0);
  CHECK(seen.grad == 0);
}

TEST_CASE("DataLoader workers: a jit-traced function and the lazy device fed by workers give workers(0)'s results") {
  data::ImageDataset ds = images(40, {data::normalize(0.5, 0.25)});
  // Its first call traces while the workers run ops (and the short last batch traces again).
  jit::JitFunction f = jit::jit([](const std::vector<Tensor>& in) { return std::vector<Tensor>{(in[0] * 3.0 + 1.0).sum()}; });
  auto run = [&](int64_t w) {
    data::DataLoader loader(ds, 3, data::RandomSampler(40, 2));
    loader.workers(w);
    std::vector<double> out;
    for (auto& b : loader) {
      out.push_back(f({b.data})[0].item<double>());
      Tensor lazy = (b.data.to(kLazy) - 1.0).abs().sum();
      out.push_back(lazy.item<double>());
    }
    lazy::mark_step();
    return out;
  };
  const std::vector<double> want = run(0);
  CHECK(want.size() == 28);
  CHECK(run(2) == want);
}

TEST_CASE("DataLoader workers: a transform drawing random numbers fails on a worker, not silently") {
  data::Transform noisy = [](Tensor x) { return x + Tensor::rand(x.sizes()) * 0.0; };
  data::ImageDataset ds = images(12, {noisy});
  data::DataLoader loader(ds, 4);
  int64_t batches = 0;
  for (auto& b : loader) batches += b.data.size(0) == 4;  // workers(0): allowed
  CHECK(batches == 3);
  loader.workers(2);
  const std::string error = error_of([&] {
    for (auto& b : loader) (void)b;
  });
  CHECK(contains(error, "DataLoader worker: a transform drew from the global random generator"));
  // The barrier is the worker's own: this thread still draws.
  CHECK(Tensor::rand({2}).numel() == 2);
}

TEST_CASE("cpu::SerialGuard: parallel regions started under it run on the calling thread") {
  // Two threads and an idle machine as the pool sees it, so that without the
  // guard its worker would take some of these (slow) tasks.
  const int threads = cpu::num_threads();
  const std::string load = "/tmp/volt-test-serial-loadavg-" + std::to_string(::getpid());
  std::ofstream(load) << "0.00 0.00 0.00 1/100 1\n";
  cpu::set_load_file(load);
  cpu::set_num_threads(2);
  std::mutex m;
  std::set<std::thread::id> ids;
  auto record = [&](int64_t) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    std::lock_guard<std::mutex> lock(m);
    ids.insert(std::this_thread::get_id());
  };
  // The control: without the guard the pool's worker takes part, once the
  // pool's own judgement of the machine (tensor/cpu/contention.h) lets it.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (ids.size() < 2 && std::chrono::steady_clock::now() < until) cpu::parallel_tasks(32, record);
  const bool contrasted = ids.size() == 2;
  if (!contrasted) MESSAGE("the pool ran every region serially for 3 s (a busy machine): nothing to contrast with");
  ids.clear();
  {
    cpu::SerialGuard serial;
    for (int r = 0; r < 20; ++r) cpu::parallel_tasks(32, record);
  }
  CHECK(ids == std::set<std::thread::id>{std::this_thread::get_id()});
  // Two threads in the pool at once: each region still runs all its tasks.
  std::atomic<int64_t> done{0};
  auto region = [&] {
    for (int r = 0; r < 50; ++r) cpu::parallel_tasks(32, [&](int64_t) { ++done; });
  };
  std::thread other(region);
  region();
  other.join();
  CHECK(done.load() == 2 * 50 * 32);
  cpu::set_num_threads(threads);
  cpu::set_load_file("");
  std::remove(load.c_str());
}
