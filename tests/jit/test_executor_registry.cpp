// Executor management (jit/executor_registry.h): look-up by name, the lists,
// default executors, and an operator whose executor the jit does not have.
#include <doctest/doctest.h>

#include <algorithm>

#include <volt/jit/jit.h>
#include <volt/tensor/ops.h>

using namespace volt;
using jit::Executor;
using jit::OperatorExecutor;

namespace {

bool contains(const std::vector<Executor*>& list, const Executor* e) {
  return std::find(list.begin(), list.end(), e) != list.end();
}

std::vector<Tensor> mul_fn(const std::vector<Tensor>& x) { return {mul(x[0], x[1])}; }

// An executor that runs mul as its own operator `name`, counting its runs.
struct CountingMul {
  OperatorExecutor ex;
  jit::Symbol op;
  int runs = 0;
  CountingMul(const std::string& ex_name, const std::string& op_name) : ex(ex_name, "1") {
    op = ex.register_operator(op_name, {.like = [](const std::vector<Value>& v) {
                                          return std::vector<Tensor>{mul(v[0].tensor, v[1])};
                                        },
                                        .fn = [this](const std::vector<Value>& v) {
                                          ++runs;
                                          NoGradGuard no_grad;
                                          return std::vector<Tensor>{mul(v[0].tensor, v[1])};
                                        }});
    ex.register_implementation(OpId::mul, {.execution_transform = [this](const std::vector<Value>& v) {
                                             return op(v[0], v[1]);
                                           }});
  }
};

}  // namespace

TEST_CASE("executor registry: get_executor finds registered executors by name, built-in ones too") {
  CHECK(jit::get_executor("eager") == &jit::eager_executor());
  CHECK(jit::get_executor("cpu-fusion") == &jit::cpu_fusion_executor());
  CHECK(jit::get_executor("no_such_executor") == nullptr);
  {
    OperatorExecutor mine("reg_lookup", "0.3");
    CHECK(jit::get_executor("reg_lookup") == nullptr);  // not registered yet
    jit::register_executor(mine);
    CHECK(jit::get_executor("reg_lookup") == &mine);
    CHECK(jit::get_executor("reg_lookup")->version() == "0.3");
    CHECK(contains(jit::get_all_executors(), &mine));
  }
  // Destroyed: gone from every list.
  CHECK(jit::get_executor("reg_lookup") == nullptr);
}

TEST_CASE("executor registry: the defaults, eager last, and what a new jit takes from them") {
  std::vector<Executor*> defaults = jit::get_default_executors();
  REQUIRE_FALSE(defaults.empty());
  CHECK(defaults.back() == &jit::eager_executor());
  CHECK(contains(defaults, &jit::cpu_fusion_executor()));
  for (Executor* e : defaults) CHECK(contains(jit::get_all_executors(), e));

  CountingMul m("reg_default", "reg_default_mul");
  Tensor a = Tensor::full({3}, 2.0), b = Tensor::full({3}, 5.0);
  auto before = jit::jit(mul_fn);  // made before the executor is a default
  jit::add_default_executor(m.ex);
  CHECK(jit::get_default_executors().front() == &m.ex);
  CHECK(jit::get_default_executors().size() == defaults.size() + 1);
  CHECK(jit::get_executor("reg_default") == &m.ex);
  jit::add_default_executor(m.ex);  // once only
  CHECK(jit::get_default_executors().size() == defaults.size() + 1);

  auto after = jit::jit(mul_fn);  // no executors named: the defaults claim mul
  CHECK(after({a, b})[0].to_vector<float>() == std::vector<float>{10, 10, 10});
  CHECK(m.runs == 1);
  CHECK(jit::last_traces(after).back().str().find("reg_default_mul(t_0, t_1)") != std::string::npos);
  before({a, b});  // its list was fixed when it was made
  CHECK(m.runs == 1);

  jit::remove_default_executor(m.ex);
  CHECK(jit::get_default_executors() == defaults);
  auto removed = jit::jit(mul_fn);
  CHECK(removed({a, b})[0].to_vector<float>() == std::vector<float>{10, 10, 10});
  CHECK(m.runs == 1);
  after({a, b});  // made while it was a default: keeps it
  CHECK(m.runs == 2);

  CHECK_THROWS_WITH_AS(jit::remove_default_executor(jit::eager_executor()),
                       doctest::Contains("remove_default_executor: eager runs every op"), volt::Error);
  CHECK(jit::get_default_executors() == defaults);
}

TEST_CASE("executor registry: a default executor that is destroyed leaves the defaults") {
  const size_t n = jit::get_default_executors().size();
  {
    CountingMul m("reg_scoped", "reg_scoped_mul");
    jit::add_default_executor(m.ex);
    CHECK(jit::get_default_executors().size() == n + 1);
  }
  CHECK(jit::get_default_executors().size() == n);
  CHECK(jit::get_executor("reg_scoped") == nullptr);
}

TEST_CASE("executor registry: an operator runs only under a jit that has its executor") {
  CountingMul m("reg_owner", "reg_owner_mul");
  Tensor a = Tensor::full({2}, 3.0), b = Tensor::full({2}, 4.0);
  auto calls_op = [&](const std::vector<Tensor>& x) { return m.op(x[0], x[1]); };
  // Eagerly, outside any jit, the symbol runs its implementation.
  CHECK(m.op(a, b)[0].to_vector<float>() == std::vector<float>{12, 12});
  CHECK(m.runs == 1);

  auto without = jit::jit(calls_op);
  CHECK_THROWS_WITH_AS(without({a, b}),
                       doctest::Contains("reg_owner_mul: is an operator of executor \"reg_owner\", which this jit "
                                         "does not use"),
                       volt::Error);
  CHECK_THROWS_WITH_AS(without({a, b}), doctest::Contains("add it: jit(f, {.executors = {reg_owner}})"),
                       volt::Error);
  CHECK(m.runs == 1);  // nothing ran the operator another way (its decomposition, say)

  auto with = jit::jit(calls_op, {.executors = {m.ex}});
  CHECK(with({a, b})[0].to_vector<float>() == std::vector<float>{12, 12});
  CHECK(m.runs == 2);

  jit::add_default_executor(m.ex);
  auto by_default = jit::jit(calls_op);
  CHECK(by_default({a, b})[0].to_vector<float>() == std::vector<float>{12, 12});
  CHECK(m.runs == 3);
  jit::remove_default_executor(m.ex);
}
