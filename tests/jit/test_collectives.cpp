// The jit's placement of collective ops (jit/step/collectives.h), with a stand-in
// collective (one process: the identity) so that it runs without MPI.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>

#include <volt/jit/step/collectives.h>
#include <volt/jit/step/step.h>
#include <volt/nn/functional.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/custom_op.h>
#include <volt/tensor/random.h>

using namespace volt;

namespace {

int64_t fake_all_reduce() {
  static const int64_t id = [] {
    CustomOpDef def;
    def.name = "test.fake_all_reduce";
    def.collective = true;
    def.meta = [](const std::vector<Value>& a) {
      return std::vector<TensorMeta>{{a[0].tensor.sizes(), a[0].tensor.dtype(), a[0].tensor.device()}};
    };
    def.kernel = [](const std::vector<Value>& a) { return std::vector<Tensor>{a[0].tensor.clone()}; };
    return register_custom_op(std::move(def));
  }();
  return id;
}

// Every gradient through the stand-in after backward, as a data-parallel step
// would reduce them (here all at the end, so that the pass has to move them).
Tensor step_body(nn::MLP& net, nn::SGD& opt, const Tensor& x, const Tensor& y) {
  Tensor loss = nn::functional::cross_entropy(net(x), y);
  opt.zero_grad();
  loss.backward();
  for (Tensor& p : net.parameters()) p.set_grad(dispatch1(custom_call(fake_all_reduce(), {p.grad()})));
  opt.step();
  return loss;
}

bool is_fake(const jit::BoundSymbol& b) {
  return !b.is_fusion() && b.call.op == OpId::custom && b.call.attrs.custom == fake_all_reduce();
}

// For each collective of `t`: whether only collectives stand between it and
// the op that makes its input.
std::vector<bool> right_after_maker(const jit::Trace& t) {
  std::vector<bool> r;
  for (size_t i = 0; i < t.bsyms.size(); ++i) {
    if (!is_fake(t.bsyms[i])) continue;
    const int64_t in = jit::id_of(jit::tensor_args(t.bsyms[i]).at(0));
    bool ok = false;
    for (size_t j = i; j-- > 0;) {
      bool makes = false;
      for (const Tensor& o : t.bsyms[j].outputs) makes = makes || jit::id_of(o) == in;
      if (makes) {
        ok = true;
        break;
      }
      if (!is_fake(t.bsyms[j])) break;
    }
    r.push_back(ok);
  }
  return r;
}

}  // namespace

TEST_CASE("collectives: the placement pass puts each one right after its input's maker, results unchanged") {
  auto make = [] {
    manual_seed(3);
    return std::make_shared<nn::MLP>(12, std::vector<int64_t>{16, 8, 4});
  };
  auto eager_net = make(), net = make();
  nn::SGD eager_opt(eager_net->parameters(), {.lr = 0.1, .momentum = 0.9});
  nn::SGD opt(net->parameters(), {.lr = 0.1, .momentum = 0.9});
  auto step = jit::compile_step([&](const Tensor& x, const Tensor& y) { return step_body(*net, opt, x, y); },
                                {.state = {*net, opt}});
  manual_seed(5);
  for (int i = 0; i < 4; ++i) {
    Tensor x = Tensor::randn({6, 12});
    Tensor y = Tensor::randint(0, 4, {6});
    const double le = step_body(*eager_net, eager_opt, x, y).item_double();
    CHECK(std::fabs(step(x, y).item_double() - le) <= 1e-6);
  }
  for (size_t k = 0; k < net->parameters().size(); ++k) {
    std::vector<float> a = net->parameters()[k].to_vector<float>(), b = eager_net->parameters()[k].to_vector<float>();
    for (size_t j = 0; j < a.size(); ++j) CHECK(std::fabs(a[j] - b[j]) <= 1e-6);
  }
  const auto& traces = step.last_traces();
  size_t placed = traces.size();
  for (size_t i = 0; i < traces.size(); ++i)
    if (traces[i].provenance == "Place collectives") placed = i;
  REQUIRE(placed > 0);
  REQUIRE(placed < traces.size());
  // Before the pass, recorded after the whole backward, most were far from their makers.
  std::vector<bool> before = right_after_maker(traces[placed - 1]);
  REQUIRE(before.size() == net->parameters().size());
  CHECK(std::count(before.begin(), before.end(), false) > 0);
  // After it (and in the trace that runs), every one follows its maker.
  for (size_t i : {placed, traces.size() - 1}) {
    std::vector<bool> after = right_after_maker(traces[i]);
    CHECK(after.size() == net->parameters().size());
    CHECK(std::count(after.begin(), after.end(), false) == 0);
  }
  CHECK(step.last_trace_str().find("test.fake_all_reduce") != std::string::npos);
}
