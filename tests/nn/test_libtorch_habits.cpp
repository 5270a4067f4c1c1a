// What a LibTorch program expects to find: free factories, stream operators for
// dtype/device/shape, module names from the class, forward's signature checked
// when the class is compiled.
#include <doctest/doctest.h>

#include <sstream>
#include <type_traits>

#include <volt/nn/linear.h>
#include <volt/nn/loss.h>
#include <volt/nn/lr_scheduler.h>
#include <volt/nn/module.h>
#include <volt/nn/optim.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include <volt/data/dataloader.h>

using namespace volt;

namespace user_code {
struct Net : nn::Module {
  std::shared_ptr<nn::Linear> fc;
  Net() { fc = register_module("fc", std::make_shared<nn::Linear>(3, 2)); }
  Tensor forward(const Tensor& x) override { return (*fc)(x); }
};
// The classic porting slip: by value instead of const&.  It hides Module::forward
// instead of overriding it, so the class stays abstract and cannot be made.
struct Slip : nn::Module {
  Tensor forward(Tensor x) { return x; }
};
}  // namespace user_code

TEST_CASE("a forward with another signature makes the module abstract (a compile error to create)") {
  CHECK(std::is_abstract_v<user_code::Slip>);
  CHECK_FALSE(std::is_abstract_v<user_code::Net>);
  CHECK(std::is_abstract_v<nn::Module>);
}

TEST_CASE("a user module prints under its class's name") {
  user_code::Net net;
  std::ostringstream os;
  os << net;
  CHECK(os.str() == "Net(\n  (fc): Linear(in_features=3, out_features=2, bias=True)\n)");
  CHECK(net.type_name() == "Net");
  CHECK(nn::Linear(2, 2).type_name() == "Linear");
}

TEST_CASE("a two-input loss called with one input says so") {
  nn::CrossEntropyLoss loss;
  nn::Module& as_module = loss;
  CHECK_THROWS_WITH_AS(as_module(zeros({2, 3})), doctest::Contains("takes two inputs"), volt::Error);
}

TEST_CASE("free factories equal the static ones") {
  manual_seed(3);
  Tensor a = randn({4, 5});
  manual_seed(3);
  Tensor b = Tensor::randn({4, 5});
  CHECK(a.sizes() == Shape{4, 5});
  CHECK(((a - b) * (a - b)).sum().item<float>() == 0.0f);
  CHECK(zeros({2, 3}, kF64).dtype() == DType::f64);
  CHECK(ones({3}).sum().item<float>() == 3.0f);
  CHECK(full({2}, 7.0).sum().item<float>() == 14.0f);
  CHECK(arange(5).dtype() == DType::i64);
  CHECK(arange(5).sum().item<int64_t>() == 10);
  Tensor t = tensor({1.5f, 2.5f});
  CHECK(t.dtype() == DType::f32);
  CHECK(t.sum().item<float>() == 4.0f);
  CHECK(tensor({1, 2, 3}).dtype() == DType::i64);
  CHECK(tensor({1.0, 2.0}).dtype() == DType::f64);
  Tensor r = randint(0, 10, {100});
  CHECK((-r).amax().item<int64_t>() <= 0);
  CHECK(r.amax().item<int64_t>() < 10);
  CHECK(zeros_like(r).sizes() == r.sizes());
  CHECK(ones_like(a).sum().item<float>() == 20.0f);
}

TEST_CASE("dtype, device and shape print as volt names them") {
  std::ostringstream os;
  os << DType::f32 << " " << kCPU << " " << Shape{8, 784};
  CHECK(os.str() == "f32 cpu [8, 784]");
}

TEST_CASE("printing shows requires_grad on leaves and grad_fn on results, as PyTorch") {
  Tensor w = tensor({1.f, 2.f}).requires_grad_();
  CHECK(to_string(w) == "tensor([1., 2.], requires_grad=True)");
  CHECK(to_string(w.sum()) == "tensor(3., grad_fn=<sum_backward>)");
  CHECK(to_string(w.detach()) == "tensor([1., 2.])");
}

TEST_CASE("make_data_loader with DataLoaderOptions, as LibTorch spells it") {
  const int64_t n = 10;
  data::TensorDataset ds(arange(n, DType::f32).reshape({n, 1}), arange(n));
  auto seq = data::make_data_loader<data::SequentialSampler>(ds, data::DataLoaderOptions().batch_size(4));
  std::vector<int64_t> seen;
  for (auto& batch : *seq) {
    for (int64_t i = 0; i < batch.target.size(0); ++i) seen.push_back(batch.target.select(0, i).item<int64_t>());
  }
  CHECK(seen == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(seq->size() == 3);  // 4 + 4 + 2

  auto rnd = data::make_data_loader<data::RandomSampler>(ds, data::DataLoaderOptions().batch_size(3).drop_last(true).seed(5));
  CHECK(rnd->size() == 3);
  std::vector<int64_t> order;
  for (auto& batch : *rnd) {
    for (int64_t i = 0; i < batch.target.size(0); ++i) order.push_back(batch.target.select(0, i).item<int64_t>());
  }
  // The same draw as a RandomSampler of that seed, cut to whole batches.
  data::RandomSampler ref(n, 5);
  std::vector<int64_t> want = ref.next_epoch();
  want.resize(9);
  CHECK(order == want);
  // No sampler named: LibTorch's default, a RandomSampler (seed 0 unless told).
  auto dflt = data::make_data_loader(ds, data::DataLoaderOptions().batch_size(10));
  data::RandomSampler ref0(n, 0);
  for (auto& batch : *dflt) CHECK(batch.target.to_vector<int64_t>() == ref0.next_epoch());
}

TEST_CASE("optimizers and schedulers are reachable as volt::optim, as torch::optim") {
  Tensor w = Tensor::ones({2}).requires_grad_();
  optim::SGD opt({w}, optim::SGDOptions(0.5));
  optim::StepLR sched(opt, /*step_size=*/1, /*gamma=*/0.1);
  (w * w).sum().backward();
  opt.step();  // w -= 0.5 * 2w
  CHECK(w.to_vector<float>() == std::vector<float>{0.0f, 0.0f});
  sched.step();
  CHECK(opt.lr() == doctest::Approx(0.05));
  CHECK(std::is_base_of_v<optim::Optimizer, optim::Adam>);
}
