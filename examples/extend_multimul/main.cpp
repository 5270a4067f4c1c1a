// Extending the jit: teach volt a new operator, then let it run existing ops.
//
//   extend_multimul        # runs every step, prints its result and its trace
//
// The steps follow Thunder's "Extending Thunder" notebook, in C++:
//   1. multimul, written with plain loops, called on real tensors;
//   2. registered with an operator executor (a like-function gives it metadata
//      and a gradient) and called eagerly;
//   3. called inside a jitted function: the trace records it by name;
//   4. its gradient, which comes from the like-function;
//   5. `mul` implemented by multimul (a checker and an execution transform);
//   6. the gradient of that: the backward's muls become multimuls too;
//   7. a grad transform in the notebook's form (get_grad, put_grads, the
//      forward's result returned) that makes both gradients with one multimul;
//   8. an execution transform with a prologue (inputs made contiguous first).
// Every result is compared with eager volt ops; any difference makes the
// program exit with status 1, so it checks itself.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <regex>
#include <string>
#include <vector>

#include <volt/jit/jit.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;
using jit::OperatorExecutor;

namespace {

// ---------------------------------------------------------------- checking

int g_failures = 0;

// Compares in f64 and prints the worst element; exact agreement is expected
// (a float product is the same whichever loop computes it), 1e-6 allows for
// nothing more than rounding.
void check(const std::string& label, const Tensor& got, const Tensor& want) {
  if (got.sizes() != want.sizes()) {
    std::printf("  check %-28s FAILED: shape %s, expected %s\n", label.c_str(), shape_str(got.sizes()).c_str(),
                shape_str(want.sizes()).c_str());
    ++g_failures;
    return;
  }
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::fabs(g[i] - w[i]) / (1.0 + std::fabs(w[i])));
  const bool ok = worst <= 1e-6;
  std::printf("  check %-28s %s (max relative difference %.3g)\n", label.c_str(), ok ? "ok" : "FAILED", worst);
  if (!ok) ++g_failures;
}

void check_trace(const std::string& label, const std::string& trace, const std::string& needle, bool present = true) {
  const bool found = trace.find(needle) != std::string::npos;
  const bool ok = found == present;
  std::printf("  check %-28s %s (\"%s\" %s)\n", label.c_str(), ok ? "ok" : "FAILED", needle.c_str(),
              present ? "appears" : "does not appear");
  if (!ok) ++g_failures;
}

int count_of(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

void banner(const std::string& title) { std::cout << "\n==== " << title << "\n"; }

// ---------------------------------------------------------------- multimul

// One multiplication with loops: x * y where each is a CPU f32 tensor or a
// number; two tensors must have the same shape.  Any layout is accepted (the
// loops read a contiguous copy), so the implementation works on views too.
Tensor loop_mul(const Value& x, const Value& y) {
  VOLT_CHECK(!x.is_tensor || !y.is_tensor || x.tensor.sizes() == y.tensor.sizes(), "multimul",
             "tensors of one shape expected, got " << x.tensor.meta_str() << " and " << y.tensor.meta_str());
  for (const Value* v : {&x, &y})
    VOLT_CHECK(!v->is_tensor || (v->tensor.device().is_cpu() && v->tensor.dtype() == DType::f32), "multimul",
               "CPU f32 tensors expected, got " << v->tensor.meta_str());
  Shape shape = x.is_tensor ? x.tensor.sizes() : y.is_tensor ? y.tensor.sizes() : Shape{};
  Tensor out = Tensor::empty(shape, DType::f32, kCPU);
  Tensor xc = x.is_tensor ? x.tensor.contiguous() : Tensor(), yc = y.is_tensor ? y.tensor.contiguous() : Tensor();
  const float* px = x.is_tensor ? xc.data_ptr<float>() : nullptr;
  const float* py = y.is_tensor ? yc.data_ptr<float>() : nullptr;
  const float sx = static_cast<float>(x.scalar.value), sy = static_cast<float>(y.scalar.value);
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) o[i] = (px ? px[i] : sx) * (py ? py[i] : sy);
  return out;
}

// The implementation (the notebook uses NumPy): (a * b, c * d).
std::vector<Tensor> multimul_impl(const std::vector<Value>& v) {
  return {loop_mul(v[0], v[1]), loop_mul(v[2], v[3])};
}

// The like-function says the same with volt ops.  Run on proxies it tells the
// jit the outputs' shapes, dtypes and devices; its ops become the decomposition
// printed under every multimul call, and the grad pass differentiates them.
std::vector<Tensor> multimul_like(const std::vector<Value>& v) {
  auto mul_of = [](const Value& x, const Value& y) {
    if (x.is_tensor) return mul(x.tensor, y);
    if (y.is_tensor) return mul(y.tensor, x);
    return Tensor::full({}, x.scalar.value * y.scalar.value, DType::f32, kCPU);  // two numbers
  };
  return {mul_of(v[0], v[1]), mul_of(v[2], v[3])};
}

// The loops only read CPU memory: the executor may take an op only when every
// tensor argument is on the CPU (numbers are always fine).
bool all_cpu(const std::vector<Value>& args) {
  for (const Value& v : args)
    if (v.is_tensor && !v.tensor.device().is_cpu()) return false;
  return true;
}

}  // namespace

int main() {
  try {
    manual_seed(0);
    Tensor a = Tensor::randn({2, 2}), b = Tensor::randn({2, 2});
    std::cout << "a = " << a << "\nb = " << b << "\n";

    // ---- 1. the implementation alone: a plain function on real tensors
    banner("1. multimul_impl(a, b, a, b), plain loops on CPU tensors");
    std::vector<Tensor> r = multimul_impl({a, b, a, b});
    std::cout << r[0] << "\n" << r[1] << "\n";
    check("impl: a * b", r[0], mul(a, b));
    check("impl: a * b (second)", r[1], mul(a, b));

    // ---- 2. an executor that owns multimul
    // register_operator returns a Symbol: callable like any volt op.  Outside a
    // trace it runs the implementation (or, when an input needs a gradient, the
    // like-function, which eager autograd can differentiate).
    OperatorExecutor myex("myex", "0.1");
    jit::register_executor(myex);
    jit::Symbol multimul = myex.register_operator("multimul", {.like = multimul_like, .fn = multimul_impl});
    banner("2. multimul(a, b, a, b) called eagerly");
    r = multimul(a, b, a, b);
    std::cout << r[0] << "\n";
    check("eager symbol: a * b", r[0], mul(a, b));
    check("eager symbol: a * b (second)", r[1], mul(a, b));

    // ---- 3. inside a jitted function
    // The trace records one bound symbol named multimul with its two outputs;
    // the like-function's muls are printed beneath it as comments: they say
    // what it computes, but multimul_impl is what runs.
    auto foo = [&](const std::vector<Tensor>& x) { return multimul(x[0], x[1], x[2], x[3]); };
    auto cfoo = jit::jit(foo, {.executors = {myex}});
    banner("3. foo(a, b, c, d) = multimul(a, b, c, d), jitted");
    r = cfoo({a, b, a, b});
    std::cout << r[0] << "\n" << jit::last_traces(cfoo).back().str();
    check("jit: a * b", r[0], mul(a, b));
    check("jit: a * b (second)", r[1], mul(a, b));
    check_trace("trace names multimul", jit::last_traces(cfoo).back().str(), "(t0, t1) = multimul(t_0, t_1, t_2, t_3)");

    // ---- 4. its gradient
    // grad(f) returns d(sum of f's outputs)/d(each input).  Nobody wrote a VJP
    // for multimul: the grad pass differentiates its like-function, so the
    // gradient of a in a * b is b (times the all-ones cotangent), and so on.
    auto cfoo_grad = jit::grad(cfoo);
    banner("4. grad(foo)(a, b, a, b): the gradient comes from the like-function");
    std::vector<Tensor> g = cfoo_grad({a, b, a, b});
    std::cout << g[0] << "\n" << jit::last_traces(cfoo_grad).back().str();
    check("grad: d/da = b", g[0], b);
    check("grad: d/db = a", g[1], a);
    check("grad: d/dc = b", g[2], b);
    check("grad: d/dd = a", g[3], a);

    // ---- 5. mul run by multimul
    // An implementation lets the executor take an op it did not define.  The
    // checker says where it may (CPU only); the execution transform says what
    // to run instead: multimul, ignoring its second product (0 * 0).
    auto mul_to_multimul = [&](const std::vector<Value>& v) { return std::vector<Tensor>{multimul(v[0], v[1], 0, 0)[0]}; };
    myex.register_implementation(OpId::mul, {.checker = all_cpu, .execution_transform = mul_to_multimul});
    auto bar = [](const std::vector<Tensor>& x) { return std::vector<Tensor>{mul(x[0], x[1])}; };
    auto cbar = jit::jit(bar, {.executors = {myex}});
    banner("5. bar(a, b) = a * b, with mul implemented by multimul");
    r = cbar({a, b});
    std::cout << r[0] << "\n" << jit::last_traces(cbar).back().str();
    check("mul via multimul", r[0], mul(a, b));
    check_trace("trace calls multimul", jit::last_traces(cbar).back().str(), "multimul(t_0, t_1, 0, 0)");

    // ---- 6. the gradient of that
    // Execution transforms run after the grad pass: the backward computes
    // b * 1 and a * 1 with two muls, and each becomes a multimul of its own.
    auto cbar_grad = jit::grad(cbar);
    banner("6. grad(bar)(a, b): two muls in backward, so two multimuls");
    g = cbar_grad({a, b});
    std::string trace = jit::last_traces(cbar_grad).back().str();
    std::cout << g[0] << "\n" << trace;
    check("grad: d/da = b", g[0], b);
    check("grad: d/db = a", g[1], a);
    std::printf("  multimul calls in the trace: %d\n", count_of(trace, "= multimul("));
    if (count_of(trace, "= multimul(") != 2) ++g_failures;

    // ---- 7. a grad transform: one multimul for both gradients
    // As in the notebook, it restates mul's forward, asks for the gradient of
    // the result, makes both input gradients with one multimul and hands them
    // back, then returns the forward's result.  The grad pass puts its forward
    // part where mul was and its backward part into the backward.
    // Registering mul again replaces the implementation of step 5.
    auto mymul_grad = [&](const std::vector<Value>& v) {
      Tensor a = v[0].tensor, b = v[1].tensor;
      Tensor fwd = mul(a, b);

      Tensor g = jit::get_grad(fwd);
      std::vector<Tensor> ab = multimul(b, g, a, g);
      Tensor a_grad = ab[0], b_grad = ab[1];
      jit::put_grads({a, b}, {a_grad, b_grad});

      return std::vector<Tensor>{fwd};
    };
    myex.register_implementation(
        OpId::mul, {.checker = all_cpu, .execution_transform = mul_to_multimul, .grad_transform = mymul_grad});
    auto cbar_grad1 = jit::grad(jit::jit(bar, {.executors = {myex}}));
    banner("7. grad(bar)(a, b) with a grad transform: one multimul");
    g = cbar_grad1({a, b});
    trace = jit::last_traces(cbar_grad1).back().str();
    std::cout << g[0] << "\n" << trace;
    check("grad: d/da = b", g[0], b);
    check("grad: d/db = a", g[1], a);
    std::printf("  multimul calls in the trace: %d\n", count_of(trace, "= multimul("));
    if (count_of(trace, "= multimul(") != 1) ++g_failures;
    // The notebook's line: (t2, t3) = multimul(t_1, t4, t_0, t4), the ones of grad() as g.
    const bool notebook_line = std::regex_search(trace, std::regex(R"(\(t\d+, t\d+\) = multimul\(t_1, (t\d+), t_0, \1\))"));
    std::printf("  check %-28s %s\n", "(b, g, a, g) in one multimul", notebook_line ? "ok" : "FAILED");
    if (!notebook_line) ++g_failures;

    // ---- 8. a prologue: make the inputs contiguous, then multimul
    // An execution transform may emit ops of its own; those the executor does
    // not claim (here the copies) go to the built-in executors.  A traced value
    // has no layout yet, so both inputs get a copy; `a` is passed transposed,
    // so that its copy has work to do.
    myex.register_implementation(OpId::mul, {.checker = all_cpu, .execution_transform = [&](const std::vector<Value>& v) {
                                               Tensor x = v[0].tensor.contiguous(), y = v[1].tensor.contiguous();
                                               return std::vector<Tensor>{multimul(x, y, 0, 0)[0]};
                                             }});
    auto ccaz = jit::jit(bar, {.executors = {myex}});
    banner("8. caz(a^T, b) = a^T * b, inputs made contiguous before multimul");
    Tensor at = a.t();
    r = ccaz({at, b});
    trace = jit::last_traces(ccaz).back().str();
    std::cout << r[0] << "\n" << trace;
    check("contiguous prologue", r[0], mul(at, b));
    check_trace("trace copies t_0", trace, "prims.contiguous(t_0)");
    check_trace("trace calls multimul", trace, "= multimul(");
  } catch (const std::exception& e) {
    std::cerr << "extend_multimul: " << e.what() << "\n";
    return 1;
  }
  if (g_failures) {
    std::cerr << "extend_multimul: " << g_failures << " check(s) FAILED\n";
    return 1;
  }
  std::cout << "\nall checks passed\n";
  return 0;
}
