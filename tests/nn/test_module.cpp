// Module: registration, names in PyTorch's order, modes, printing, moves.
#include <doctest/doctest.h>

#include <sstream>

#include <volt/nn/activation.h>
#include <volt/nn/linear.h>
#include <volt/nn/mlp.h>
#include <volt/nn/sequential.h>
#include <volt/tensor/backend.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/skip.h"

using namespace volt;

namespace {

// The seed program's model: torchvision.ops.MLP(784, [784, 784, 784, 28, 10], dropout=0.1).
std::shared_ptr<nn::MLP> seed_mlp() {
  return std::make_shared<nn::MLP>(784, std::vector<int64_t>{784, 784, 784, 28, 10}, true, 0.1);
}

class TwoLayer : public nn::Module {
 public:
  TwoLayer() : Module("TwoLayer") {
    fc1_ = register_module("fc1", std::make_shared<nn::Linear>(4, 8));
    act_ = register_module("act", std::make_shared<nn::ReLU>());
    fc2_ = register_module("fc2", std::make_shared<nn::Linear>(8, 2, false));
    scale_ = register_buffer("scale", Tensor::ones({2}));
  }
  Tensor forward(const Tensor& x) override { return (*fc2_)((*act_)((*fc1_)(x))) * scale_; }

  std::shared_ptr<nn::Linear> fc1_, fc2_;
  std::shared_ptr<nn::ReLU> act_;
  Tensor scale_;
};

}  // namespace

TEST_CASE("MLP has torchvision's layout, names and shapes") {
  manual_seed(0);
  auto net = seed_mlp();
  CHECK(net->size() == 14);
  auto named = net->named_parameters();
  std::vector<std::string> names;
  for (auto& [n, p] : named) names.push_back(n);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "3.weight", "3.bias", "6.weight",
                                          "6.bias", "9.weight", "9.bias", "12.weight", "12.bias"});
  CHECK(named[0].second.sizes() == Shape{784, 784});
  CHECK(named[1].second.sizes() == Shape{784});
  CHECK(named[6].second.sizes() == Shape{28, 784});
  CHECK(named[8].second.sizes() == Shape{10, 28});
  CHECK(named[9].second.sizes() == Shape{10});
  CHECK(net->num_parameters() == 1868590);
  for (auto& p : net->parameters()) {
    CHECK(p.requires_grad());
    CHECK(p.dtype() == DType::f32);
    CHECK(p.is_leaf());
  }
}

TEST_CASE("MLP prints as PyTorch prints it") {
  manual_seed(0);
  auto net = seed_mlp();
  std::ostringstream os;
  os << *net;
  CHECK(os.str() ==
        "MLP(\n"
        "  (0): Linear(in_features=784, out_features=784, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): Dropout(p=0.1, inplace=False)\n"
        "  (3): Linear(in_features=784, out_features=784, bias=True)\n"
        "  (4): ReLU()\n"
        "  (5): Dropout(p=0.1, inplace=False)\n"
        "  (6): Linear(in_features=784, out_features=784, bias=True)\n"
        "  (7): ReLU()\n"
        "  (8): Dropout(p=0.1, inplace=False)\n"
        "  (9): Linear(in_features=784, out_features=28, bias=True)\n"
        "  (10): ReLU()\n"
        "  (11): Dropout(p=0.1, inplace=False)\n"
        "  (12): Linear(in_features=28, out_features=10, bias=True)\n"
        "  (13): Dropout(p=0.1, inplace=False)\n"
        ")");
}

TEST_CASE("nested modules print with PyTorch's indentation") {
  auto inner = std::make_shared<nn::Sequential>();
  inner->push_back(std::make_shared<nn::Linear>(2, 3, false));
  nn::Sequential outer({inner, std::make_shared<nn::ReLU>()});
  CHECK(outer.repr() ==
        "Sequential(\n"
        "  (0): Sequential(\n"
        "    (0): Linear(in_features=2, out_features=3, bias=False)\n"
        "  )\n"
        "  (1): ReLU()\n"
        ")");
  CHECK(nn::MLP(3, {1}).repr() ==
        "MLP(\n  (0): Linear(in_features=3, out_features=1, bias=True)\n"
        "  (1): Dropout(p=0.0, inplace=False)\n)");
}

TEST_CASE("custom modules: registration order, buffers, children") {
  TwoLayer m;
  std::vector<std::string> names;
  for (auto& [n, p] : m.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight"});
  CHECK(m.parameters(false).empty());
  auto buffers = m.named_buffers();
  REQUIRE(buffers.size() == 1);
  CHECK(buffers[0].first == "scale");
  CHECK(!buffers[0].second.requires_grad());
  CHECK(m.children().size() == 3);
  CHECK(m.named_children()[1].first == "act");
  CHECK(m.repr() ==
        "TwoLayer(\n"
        "  (fc1): Linear(in_features=4, out_features=8, bias=True)\n"
        "  (act): ReLU()\n"
        "  (fc2): Linear(in_features=8, out_features=2, bias=False)\n"
        ")");
  CHECK(m(Tensor::ones({5, 4})).sizes() == Shape{5, 2});
}

// A container with no computation of its own (forward is pure in Module).
struct Holder : nn::Module {
  Holder() : Module("M") {}
  Tensor forward(const Tensor&) override { throw volt::Error("M: a holder has no single-input forward()"); }
};

TEST_CASE("duplicate names are rejected") {
  Holder m;
  m.register_parameter("w", Tensor::ones({2}));
  CHECK_THROWS_WITH_AS(m.register_parameter("w", Tensor::ones({2})),
                       doctest::Contains("already has a member named 'w'"), volt::Error);
  CHECK_THROWS_WITH_AS(m.register_buffer("w", Tensor::ones({2})),
                       doctest::Contains("already has a member named 'w'"), volt::Error);
  CHECK_THROWS_WITH_AS(m.register_parameter("a.b", Tensor::ones({2})), doctest::Contains("'.'"),
                       volt::Error);
  m.register_module("c", std::make_shared<nn::ReLU>());
  CHECK_THROWS_WITH_AS(m.register_module("c", std::make_shared<nn::ReLU>()),
                       doctest::Contains("M already has a member named 'c'"), volt::Error);
  CHECK_THROWS_WITH_AS(m.register_parameter("c", Tensor::ones({2})),
                       doctest::Contains("already has a member named 'c'"), volt::Error);
  CHECK_THROWS_WITH_AS(m(Tensor::ones({1})), doctest::Contains("no single-input forward"),
                       volt::Error);
}

TEST_CASE("train/eval and requires_grad_ reach every submodule") {
  auto net = seed_mlp();
  CHECK(net->is_training());
  net->eval().requires_grad_(false);
  for (auto& c : net->children()) CHECK(!c->is_training());
  for (auto& p : net->parameters()) CHECK(!p.requires_grad());
  net->train().requires_grad_(true);
  for (auto& c : net->children()) CHECK(c->is_training());
  for (auto& p : net->parameters()) CHECK(p.requires_grad());
}

TEST_CASE("zero_grad leaves gradients undefined") {
  nn::Linear fc(3, 2);
  for (auto p : fc.parameters()) p.set_grad(Tensor::ones(p.sizes()));
  CHECK(fc.weight().grad().defined());
  fc.zero_grad();
  for (auto& p : fc.parameters()) CHECK(!p.grad().defined());
}

TEST_CASE("parameters are shared handles") {
  nn::Linear fc(3, 2);
  Tensor held = fc.parameters()[0];
  CHECK(held.is_same(fc.weight()));
  fc.to(kCPU);  // no move: same storage
  CHECK(held.is_same(fc.weight()));
}

TEST_CASE("to(device) moves parameters in place") {
  if (!backend_for(DeviceType::CUDA)) {
    VOLT_SKIP("this build has no CUDA backend");
  }
  manual_seed(0);
  nn::Linear fc(3, 2);
  Tensor held = fc.weight();  // what an optimizer or a jitted module would hold
  auto before = held.to_vector<float>();
  fc.to(Device::cuda());
  CHECK(held.device() == Device::cuda());
  CHECK(held.is_same(fc.weight()));
  CHECK(held.to_vector<float>() == before);
  fc.to(kCPU);
  CHECK(held.device().is_cpu());
  CHECK(held.to_vector<float>() == before);
}
