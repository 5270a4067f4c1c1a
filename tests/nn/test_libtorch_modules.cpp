// LibTorch's module spellings: layers made empty from nullptr and assigned what
// register_module returns, named_parameters() items with key()/value(),
// param_groups() with a settable learning rate, option builders, and whole
// saves of a module handle and an optimizer.
#include <doctest/doctest.h>

#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <unistd.h>

#include <volt/nn/activation.h>
#include <volt/nn/adamw.h>
#include <volt/nn/batch_norm.h>
#include <volt/nn/conv.h>
#include <volt/nn/linear.h>
#include <volt/nn/module.h>
#include <volt/nn/optim.h>
#include <volt/nn/save_load.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#include "error_of.h"

using namespace volt;

namespace libtorch_style {
struct Net : nn::Module {
  Net() {
    fc1 = register_module("fc1", nn::Linear(4, 3));
    conv = register_module("conv", nn::Conv2d(1, 2, 3));
    drop = register_module("drop", nn::Dropout(0.5));
    // The init-list style: a layer made in place, then registered by name.
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(drop->forward(fc1->forward(x))); }
  nn::Linear fc1{nullptr};
  nn::Conv2d conv{nullptr};
  nn::Dropout drop{nullptr};
  nn::Linear fc2{3, 2};
};
}  // namespace libtorch_style

TEST_CASE("layers assigned from register_module stand for the registered modules") {
  manual_seed(0);
  libtorch_style::Net net;
  CHECK(net.named_children().size() == 4);
  CHECK(net.parameters().size() == 6);
  // The handle reaches the very module the parent owns: the same parameter tensors.
  CHECK(net.fc1->weight().is_same(net.named_parameters()[0].value()));
  CHECK(net.fc2->weight().is_same(net.named_parameters()[4].value()));
  CHECK(net.fc1->weight().sizes() == Shape{3, 4});
  // train/eval set on the parent reach the layer seen through the handle.
  net.eval();
  CHECK_FALSE(net.drop->is_training());
  Tensor x = randn({5, 4});
  Tensor want = matmul(matmul(x, net.fc1->weight().t()) + net.fc1->bias(), net.fc2->weight().t()) + net.fc2->bias();
  CHECK(net.forward(x).allclose(want, 1e-5, 1e-6));
  CHECK((*net.fc1)(x).sizes() == Shape{5, 3});
  std::ostringstream os;
  os << net;
  CHECK(os.str().find("(fc1): Linear(in_features=4, out_features=3, bias=True)") != std::string::npos);
}

TEST_CASE("an empty layer says so when used; a registered module cannot be moved again") {
  nn::Linear empty{nullptr};
  CHECK(empty.is_empty());
  CHECK(testing::error_of([&] { empty->forward(zeros({1, 2})); }).find("made from nullptr") != std::string::npos);
  libtorch_style::Net parent;
  auto fc = std::make_shared<nn::Linear>(2, 2);
  parent.register_module("extra", fc);
  CHECK(testing::error_of([&] { parent.register_module("again", std::move(*fc)); }).find("registered already") !=
        std::string::npos);
  CHECK(fc->weight().defined());  // left as it was
}

TEST_CASE("named_parameters() items have key() and value(), and bind as pairs") {
  nn::Linear fc(3, 2);
  std::vector<std::string> keys;
  for (const auto& item : fc.named_parameters()) {
    keys.push_back(item.key());
    CHECK(item.value().defined());
  }
  CHECK(keys == std::vector<std::string>{"weight", "bias"});
  for (auto& [name, p] : fc.named_parameters()) CHECK(p.sizes() == (name == "weight" ? Shape{2, 3} : Shape{2}));
}

TEST_CASE("param_groups() reads and sets the learning rate the optimizer uses") {
  Tensor w = Tensor::ones({2}).requires_grad_();
  optim::SGD sgd({w}, optim::SGDOptions(0.5).momentum(0.0));
  auto groups = sgd.param_groups();
  REQUIRE(groups.size() == 1);
  CHECK(groups[0].params().size() == 1);
  CHECK(groups[0].options().lr() == 0.5);
  for (auto& group : sgd.param_groups()) group.options().lr(group.options().lr() * 0.1);
  CHECK(sgd.lr() == doctest::Approx(0.05));
  (w * w).sum().backward();  // grad 2
  sgd.step();
  CHECK(w.to_vector<float>() == std::vector<float>{0.9f, 0.9f});
  CHECK(testing::error_of([&] { sgd.param_groups()[0].options().set_lr(-1); }).find("lr") != std::string::npos);
  // AdamW's groups are listed one by one.
  Tensor a = Tensor::ones({2, 2}).requires_grad_(), b = Tensor::ones({2}).requires_grad_();
  nn::AdamW adamw(nn::weight_decay_groups({a, b}, 0.1), {.lr = 1e-3});
  auto ag = adamw.param_groups();
  REQUIRE(ag.size() == 2);
  ag[1].options().lr(5e-4);
  CHECK(adamw.group_lr(1) == 5e-4);
  CHECK(adamw.group_lr(0) == 1e-3);
}

TEST_CASE("option builders give the plain options structs") {
  const nn::SGDOptions s = optim::SGDOptions(0.01).momentum(0.5).weight_decay(1e-4);
  CHECK(s.lr == 0.01);
  CHECK(s.momentum == 0.5);
  CHECK(s.weight_decay == 1e-4);
  const nn::AdamOptions a = optim::AdamOptions(1e-3).betas({0.8, 0.9}).eps(1e-6).weight_decay(0.1);
  CHECK(a.lr == 1e-3);
  CHECK(a.beta1 == 0.8);
  CHECK(a.beta2 == 0.9);
  CHECK(a.eps == 1e-6);
  CHECK(a.weight_decay == 0.1);
  CHECK(optim::AdamOptions(2e-3).lr() == 2e-3);
  // The designated initialisers stay.
  Tensor w = Tensor::ones({2}).requires_grad_();
  nn::Adam adam({w}, {.lr = 1e-2});
  CHECK(adam.lr() == 1e-2);
}

TEST_CASE("volt::save and volt::load of a module handle and an optimizer") {
  const auto dir = std::filesystem::temp_directory_path() / ("volt_port_save_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  manual_seed(1);
  auto net = std::make_shared<nn::Linear>(3, 2);
  optim::Adam opt(net->parameters(), optim::AdamOptions(0.1));
  (*net)(randn({4, 3})).sum().backward();
  opt.step();
  volt::save(net, (dir / "net.safetensors").string());
  volt::save(opt, (dir / "opt.safetensors").string());
  manual_seed(2);
  auto other = std::make_shared<nn::Linear>(3, 2);
  optim::Adam other_opt(other->parameters(), optim::AdamOptions(0.5));
  CHECK_FALSE(other->weight().equal(net->weight()));
  volt::load(other, (dir / "net.safetensors").string());
  volt::load(other_opt, (dir / "opt.safetensors").string());
  CHECK(other->weight().equal(net->weight()));
  CHECK(other->bias().equal(net->bias()));
  CHECK(other_opt.lr() == 0.1);
  CHECK(other_opt.exp_avg(0).equal(opt.exp_avg(0)));
  CHECK(other_opt.step_count(0) == 1);
  std::shared_ptr<nn::Linear> none;
  CHECK(testing::error_of([&] { volt::save(none, (dir / "x").string()); }).find("empty") != std::string::npos);
  std::filesystem::remove_all(dir);
}
