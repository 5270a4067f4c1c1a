// Printed traces are valid programs.  Two checks: the jit's own checker on the
// IR (jit/check.h, run on every trace the jit makes), and here, independently,
// a reader of the printed text that walks it as Python would.
#include <doctest/doctest.h>

#include <regex>
#include <set>
#include <sstream>

#include <volt/jit/check.h>
#include <volt/jit/jit.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

namespace {

// Walks the statements of a printed trace (comments skipped): names are bound
// by the signature, by assignments and by unpacking, and unbound by `del`;
// reading a name that is not bound (or no longer) is the problem returned.
// A name is a proxy if it is bound somewhere in the program or looks like t<N>.
std::string text_problem(const std::string& program) {
  static const std::regex ident(R"([A-Za-z_][A-Za-z_0-9]*)");
  static const std::regex proxy_like(R"(t_?[0-9]+|cotangent[0-9]*|C[0-9]+)");
  std::set<std::string> bound, ever;
  auto reads = [&](const std::string& expr, const std::string& line) -> std::string {
    // Keyword arguments' names and values (device=cpu) and called names are not reads.
    std::string e = std::regex_replace(expr, std::regex(R"(\w+=\w+)"), "");
    e = std::regex_replace(e, std::regex(R"([A-Za-z_.][A-Za-z_0-9.]*\()"), "(");
    e = std::regex_replace(e, std::regex(R"('[^']*')"), "");
    for (auto it = std::sregex_iterator(e.begin(), e.end(), ident); it != std::sregex_iterator(); ++it) {
      std::string n = it->str();
      if (n == "True" || n == "False") continue;
      if (!bound.count(n) && (ever.count(n) || std::regex_match(n, proxy_like)))
        return "reads " + n + " when it is not bound: " + line;
    }
    return "";
  };
  auto bind = [&](const std::string& lhs) {
    for (auto it = std::sregex_iterator(lhs.begin(), lhs.end(), ident); it != std::sregex_iterator(); ++it) {
      bound.insert(it->str());
      ever.insert(it->str());
    }
  };
  std::istringstream in(program);
  bool returned = false;
  for (std::string line; std::getline(in, line);) {
    size_t s = line.find_first_not_of(' ');
    if (s == std::string::npos || line[s] == '#') continue;
    std::string stmt = line.substr(s);
    if (size_t c = stmt.find("  #"); c != std::string::npos) stmt = stmt.substr(0, c);
    if (returned) return "a statement after the return: " + line;
    if (stmt.rfind("def ", 0) == 0) {
      bind(stmt.substr(stmt.find('(')));
    } else if (stmt.rfind("del [", 0) == 0) {
      for (auto it = std::sregex_iterator(stmt.begin() + 4, stmt.end(), ident); it != std::sregex_iterator(); ++it) {
        if (!bound.count(it->str())) return "del of " + it->str() + " when it is not bound: " + line;
        bound.erase(it->str());
      }
    } else if (stmt.rfind("return ", 0) == 0) {
      if (std::string p = reads(stmt.substr(7), line); !p.empty()) return p;
      returned = true;
    } else {
      size_t eq = stmt.find(" = ");
      if (eq == std::string::npos) return "not a statement: " + line;
      if (std::string p = reads(stmt.substr(eq + 3), line); !p.empty()) return p;
      bind(stmt.substr(0, eq));
    }
  }
  return returned ? "" : "no return";
}

void check_all(const std::vector<jit::Trace>& traces) {
  for (const jit::Trace& t : traces) {
    CAPTURE(t.str());
    CHECK(jit::trace_problem(t) == "");
    CHECK(text_problem(t.str()) == "");
  }
}

}  // namespace

TEST_CASE("trace checker: the text reader finds a read after del, an undefined name and a missing return") {
  CHECK(text_problem("def f(a):\n  t0 = prims.neg(a)\n  return t0\n") == "");
  CHECK(text_problem("def f(a):\n  t0 = prims.neg(a)\n  del [a]\n  t1 = prims.add(t0, a)\n  return t1\n") != "");
  CHECK(text_problem("def f(a):\n  t1 = prims.add(t0, a)\n  return t1\n") != "");
  CHECK(text_problem("def f(a):\n  t0 = prims.neg(a)\n  del [t0]\n  return t0\n") != "");
  CHECK(text_problem("def f(a):\n  t0 = prims.neg(a)\n") == "no return");
}

TEST_CASE("trace checker: the IR checker finds what a broken pass would leave") {
  auto fn = [](const std::vector<Tensor>& x) { return std::vector<Tensor>{add(mul(x[0], 2.0), exp(x[0]))}; };
  auto jf = jit::jit(fn, {"a"});
  jf(Tensor::from_vector<float>({1.0f, 2.0f}));
  jit::Trace good = jit::last_traces(jf).front();  // tracing: mul, exp, add
  REQUIRE(good.bsyms.size() == 3);
  CHECK(jit::trace_problem(good) == "");
  {
    jit::Trace t = good;  // the input deleted after the first line, read by the second
    t.bsyms[0].del_after = {t.inputs[0]};
    CHECK(jit::trace_problem(t).find("reads a after its del") != std::string::npos);
    CHECK_THROWS_WITH_AS(jit::check_trace(t), doctest::Contains("is not a valid program"), volt::Error);
  }
  {
    jit::Trace t = good;  // lines out of order: add before what it reads
    std::swap(t.bsyms[0], t.bsyms[2]);
    CHECK(jit::trace_problem(t).find("not defined before it") != std::string::npos);
  }
  {
    jit::Trace t = good;  // the result deleted before the return
    t.bsyms[2].del_after = {t.outputs[0]};
    CHECK(jit::trace_problem(t).find("the return names") != std::string::npos);
  }
  {
    jit::Trace t = good;  // a value defined twice
    t.bsyms[1].outputs = t.bsyms[0].outputs;
    CHECK(jit::trace_problem(t) != "");
  }
}

TEST_CASE("trace checker: every trace of the seed MLP (train forward and backward, eval) is valid, as printed") {
  manual_seed(0);
  auto model = std::make_shared<nn::MLP>(24, std::vector<int64_t>{16, 16, 4}, true, 0.1);
  Tensor x = Tensor::rand({8, 24});
  Tensor y = Tensor::from_vector<int64_t>({1, 2, 3, 0, 1, 2, 3, 0});
  auto train = jit::jit(model);
  cross_entropy(train(x), y).backward();
  check_all(jit::last_traces(train));
  check_all(jit::last_backward_traces(train));
  // The augmented forward returns its inputs (flat_args): none of them is deleted.
  CHECK(jit::last_traces(train).back().str().find("del [_0_weight") == std::string::npos);
  model->eval();
  auto eval = jit::jit(model);
  eval(x);
  check_all(jit::last_traces(eval));
}

TEST_CASE("trace checker: grad transforms, guards and one-element tuples print as valid programs") {
  auto fn = [](const std::vector<Tensor>& in) {
    if (gt(sum(in[0]), 0.0)) return std::vector<Tensor>{mul(tanh(in[0]), in[0])};
    return std::vector<Tensor>{neg(in[0])};
  };
  auto jf = jit::jit(fn, {"x"});
  jf(Tensor::from_vector<float>({1.0f, 2.0f}));
  check_all(jit::last_traces(jf));
  std::string s = jit::last_traces(jf).back().str();
  // The guard names the lines that compute the value it reads.
  CHECK(s.find("# guard: t1.item() == 1.0 (other values trace again), where") != std::string::npos);
  CHECK(s.find("#   t1 = prims.gt(t0, 0.0)") != std::string::npos);
  CHECK(s.find("(t3,) = cpuFusion0(x)") != std::string::npos);
  auto g = jit::value_and_grad(jit::jit([](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{sum(mul(sigmoid(in[0]), in[1]))};
  }, {"a", "b"}));
  g({Tensor::from_vector<float>({0.5f, -1.0f}), Tensor::from_vector<float>({2.0f, 3.0f})});
  check_all(jit::last_traces(g));
}

TEST_CASE("trace checker: the scalars a backward reads from its forward travel in C1, by name") {
  manual_seed(0);
  const double p = 0.5;  // each dropout's backward multiplies by 1 / (1 - p) = 2
  auto model = std::make_shared<nn::MLP>(24, std::vector<int64_t>{16, 16, 4}, true, p);
  Tensor x = Tensor::rand({8, 24});
  Tensor y = Tensor::from_vector<int64_t>({1, 2, 3, 0, 1, 2, 3, 0});
  auto train = jit::jit(model);
  cross_entropy(train(x), y).backward();
  size_t dropouts = 0;
  for (const jit::BoundSymbol& b : jit::last_traces(train).front().bsyms) dropouts += b.call.op == OpId::dropout;
  REQUIRE(dropouts >= 2);
  const jit::Trace& fwd = jit::last_traces(train).back();
  const jit::Trace& bwd = jit::last_backward_traces(train).back();
  REQUIRE(fwd.scalars.size() == dropouts);
  REQUIRE(bwd.scalars.size() == dropouts);
  std::string c1 = "(", unpack = " ";
  for (size_t i = 0; i < dropouts; ++i) {
    CHECK(fwd.scalars[i].value.value == 1.0 / (1.0 - p));
    CHECK(bwd.scalars[i].name == "f" + std::to_string(i));
    c1 += (i ? ", " : "") + python_float_repr(1.0 / (1.0 - p));
    unpack += " f" + std::to_string(i) + ",";
  }
  const std::string fs = fwd.str(), bs = bwd.str();
  CHECK(fs.find(", " + c1 + "))\n") != std::string::npos);
  CHECK(bs.find("  C0, C1, = saved_for_backward\n") != std::string::npos);
  CHECK(bs.find(unpack + " = C1\n") != std::string::npos);
  for (size_t i = 0; i < dropouts; ++i)  // each read where the scale was a literal
    CHECK(bs.find(", f" + std::to_string(i) + ")") != std::string::npos);
  CHECK(bs.find(python_float_repr(1.0 / (1.0 - p)) + ")") == std::string::npos);
  check_all(jit::last_backward_traces(train));
  {
    jit::Trace t = bwd;  // the names read, but nothing unpacked
    t.scalars.clear();
    CHECK(jit::trace_problem(t).find("which C1 never unpacks") != std::string::npos);
  }
  {
    jit::Trace t = bwd;  // C1 holds another value than the lines compute with
    t.scalars[0].value = Scalar(3.0);
    CHECK(jit::trace_problem(t).find("but C1 holds 3.0") != std::string::npos);
  }
}

TEST_CASE("trace checker: a backward spliced into one program (value_and_grad) reads its scalars as literals") {
  auto g = jit::value_and_grad(jit::jit([](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{sum(mul(in[0], 3.0))};
  }, {"a"}));
  auto r = g({Tensor::from_vector<float>({0.5f, -1.0f})});
  check_all(jit::last_traces(g));
  const jit::Trace& t = jit::last_traces(g).back();
  CHECK(t.scalars.empty());
  CHECK(t.str().find("f0") == std::string::npos);
}
