// Chapter 8, writing an executor (docs/tutorial/08_executor.md): a new
// operator with its own implementation, then an existing op (mul) taken over.
#include <iostream>

#include <volt/jit/jit.h>
#include <volt/tensor/ops.h>

using namespace volt;

namespace {

// x * y + z with one loop (CPU f32, one shape): the executor's implementation.
std::vector<Tensor> fma_impl(const std::vector<Value>& v) {
  Tensor x = v[0].tensor.contiguous(), y = v[1].tensor.contiguous(), z = v[2].tensor.contiguous();
  Tensor out = Tensor::empty(x.sizes());
  const float *px = x.data_ptr<float>(), *py = y.data_ptr<float>(), *pz = z.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) o[i] = px[i] * py[i] + pz[i];
  return {out};
}

// The same with volt ops: metadata, the printed decomposition and the gradient come from it.
std::vector<Tensor> fma_like(const std::vector<Value>& v) { return {v[0].tensor * v[1].tensor + v[2].tensor}; }

}  // namespace

int main() {
  jit::OperatorExecutor myex("myex", "0.1");
  jit::Symbol fma = myex.register_operator("fma", {.like = fma_like, .fn = fma_impl});

  auto f = jit::jit([&](const std::vector<Tensor>& in) { return fma(in[0], in[1], in[2]); },
                    {.executors = {myex}}, {"a", "b", "c"});
  Tensor a = Tensor::from_vector<float>({1, 2}), b = Tensor::from_vector<float>({3, 4}),
         c = Tensor::from_vector<float>({5, 6});
  std::cout << "fma(a, b, c) = " << f({a, b, c})[0] << "\n\n" << jit::last_traces(f).back().str();

  // Its gradient needs no rule: the grad pass differentiates fma_like.
  auto df = jit::grad(f);
  std::vector<Tensor> g = df({a, b, c});
  std::cout << "\ngrad: d/da = " << g[0] << ", d/db = " << g[1] << ", d/dc = " << g[2] << "\n";

  // Taking over an op it did not define: mul, run as fma(x, y, 0) on the CPU.
  myex.register_implementation(OpId::mul, {.checker = [](const std::vector<Value>& v) {
                                             return v[0].is_tensor && v[1].is_tensor &&
                                                    v[0].tensor.sizes() == v[1].tensor.sizes();
                                           },
                                           .execution_transform = [&](const std::vector<Value>& v) {
                                             return fma(v[0], v[1], full(v[0].tensor.sizes(), 0.0, DType::f32, kCPU));
                                           }});
  auto h = jit::jit([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * in[1] + 1.0}; },
                    {.executors = {myex}}, {"a", "b"});
  std::cout << "\nh(a, b) = a * b + 1 = " << h({a, b})[0] << "\n\n" << jit::last_traces(h).back().str();
  return 0;
}
