// The pass "cuBLASLt activation epilogue" (jit/cuda/lt_activation.cpp) under
// autocast: a 16-bit linear, its cast to f32, gelu(x, "tanh") in f32 and the
// cast back as one GELU_BIAS call (GELU_AUX_BIAS under grad); never the
// exact gelu, nor a chain whose values have other readers.  The numbers
// against the CPU's autocast program (which rounds the pre-activation to the
// 16-bit type before its GELU) and against f64; a training step's gradients
// through the fused forward against the CPU's autocast program.
#include <doctest/doctest.h>

#ifdef VOLT_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <volt/tensor/factories.h>

#include "cuda/cublaslt_tests.h"

using namespace volt;
using volt::testing::count_of;
using volt::testing::max_abs_diff;

namespace {

const Device kGPU = Device::cuda(0);

std::vector<Tensor> on(const std::vector<Tensor>& ts, Device d) {
  std::vector<Tensor> r;
  for (const Tensor& t : ts) r.push_back(t.to(d));
  return r;
}

std::vector<double> values(const Tensor& t) {
  return t.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
}

// The rounding of the 16-bit type, 2^-8 (bf16) or 2^-11 (f16) of a value.
double unit(DType t) { return t == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }

// The spacing of the 16-bit type at |v| (8 or 11 significant bits), at
// least 1e-6 (values near 0).
double ulp(double v, DType t) {
  int e = 0;
  (void)std::frexp(std::max(std::fabs(v), 1e-6), &e);  // |v| in [2^(e-1), 2^e)
  return std::ldexp(1.0, e - (t == DType::bf16 ? 8 : 11));
}

// The largest |got - want| in spacings of t at max(|want|, |pre|): the
// fused GELU rounds once, the unfused program rounds the pre-activation
// `pre` first (half a spacing of it, times GELU's slope, below 1.13) and
// its GELU after.  `slack`: an absolute error allowed beside them (f32 sums).
double ulps_apart(const Tensor& got, const Tensor& want, const Tensor& pre, DType t, double slack = 0) {
  const std::vector<double> g = values(got), w = values(want), p = values(pre);
  REQUIRE(g.size() == w.size());
  REQUIRE(p.size() == w.size());
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i)
    worst = std::max(worst, (std::fabs(g[i] - w[i]) - slack) / ulp(std::max(std::fabs(w[i]), std::fabs(p[i])), t));
  return worst;
}

// One hidden layer's output, cast to t as the next layer's input would be.
std::vector<Tensor> gelu_layer(const std::vector<Tensor>& in, const char* approximate, DType t) {
  return {gelu(linear(in[0], in[1], in[2]), approximate).to(t)};
}

jit::JitOptions autocast_to(DType t) {
  jit::JitOptions o;
  o.autocast = t;
  return o;
}

}  // namespace

TEST_CASE("cuda: under autocast the jit takes linear, cast, tanh gelu, cast into GELU_BIAS, never the exact gelu") {
  SKIP_WITHOUT_GPU();
  if (!cuda::cublas_lt()) {
    VOLT_SKIP("cuBLASLt could not be opened (or VOLT_CUBLASLT=0)");
  }
  manual_seed(51);
  for (DType t : {DType::bf16, DType::f16})
    for (const char* approximate : {"tanh", "none"}) {
      INFO(std::string(dtype_name(t)) << " gelu approximate=" << std::string(approximate));
      const bool tanh_form = std::string(approximate) == "tanh";
      // f32 parameters and input: the autocast casts them.
      const std::vector<Tensor> p = {Tensor::randn({64, 33}), mul(Tensor::randn({48, 33}), 0.4),
                                     Tensor::randn({48})};
      auto fn = [approximate, t](const std::vector<Tensor>& in) { return gelu_layer(in, approximate, t); };
      auto gpu = jit::jit(fn, autocast_to(t));
      auto cpu = jit::jit(fn, autocast_to(t));
      Tensor got = gpu(on(p, kGPU))[0];
      Tensor want = cpu(p)[0];  // the CPU's autocast program: linear, cast, gelu in f32, cast
      const std::string trace = jit::last_traces(gpu).back().str();
      INFO(trace);
      CHECK(got.dtype() == t);
      // cuBLASLt's GELU is the tanh approximation: the exact one stays a linear, casts and its kernel.
      CHECK(count_of(trace, "= cublas_linear_gelu(") == (tanh_form ? 1u : 0u));
      CHECK(count_of(trace, "= cublas_linear(") == (tanh_form ? 0u : 1u));
      // The unfused program's cast of the pre-activation to f32 (the inputs' casts are to t).
      CHECK(count_of(trace, ", f32)") == (tanh_form ? 0u : 1u));
      const Tensor pre = linear(p[0].to(t), p[1].to(t), p[2].to(t));  // the CPU's 16-bit pre-activation
      const double from_cpu = ulps_apart(got, want, pre, t);
      MESSAGE(std::string(dtype_name(t)) << " " << std::string(approximate) << ": " << from_cpu
                                          << " spacings from the CPU's autocast program");
      if (!tanh_form) continue;
      // One rounding fewer than the CPU's program: within one unit of it.
      CHECK(from_cpu <= 1.0);
      // Against f64 of the 16-bit operands: one rounding of the result, and
      // 1e-4 for the f32 sums of 33 products (where the result is near 0,
      // the sums' error is many f16 spacings of it).
      const Tensor exact = gelu(linear(p[0].to(t).to(DType::f64), p[1].to(t).to(DType::f64),
                                       p[2].to(t).to(DType::f64)), "tanh");
      const double from_f64 = ulps_apart(got, exact, exact, t, 1e-4);
      MESSAGE(std::string(dtype_name(t)) << " tanh: " << from_f64 << " spacings from f64");
      CHECK(from_f64 <= 1.0);
    }
}

TEST_CASE("cuda: under autocast a pre-activation or f32 GELU with another reader keeps its lines apart") {
  SKIP_WITHOUT_GPU();
  if (!cuda::cublas_lt()) {
    VOLT_SKIP("cuBLASLt could not be opened (or VOLT_CUBLASLT=0)");
  }
  manual_seed(52);
  const DType t = DType::bf16;
  const std::vector<Tensor> p = {Tensor::randn({8, 33}), Tensor::randn({17, 33}), Tensor::randn({17})};
  const std::vector<std::function<std::vector<Tensor>(const std::vector<Tensor>&)>> fns = {
      // the bf16 pre-activation returned
      [t](const std::vector<Tensor>& in) {
        Tensor y = linear(in[0], in[1], in[2]);
        return std::vector<Tensor>{gelu(y, "tanh").to(t), y};
      },
      // the bf16 pre-activation read twice
      [t](const std::vector<Tensor>& in) {
        Tensor y = linear(in[0], in[1], in[2]);
        return std::vector<Tensor>{add(gelu(y, "tanh").to(t), y)};
      },
      // the f32 GELU returned beside its cast
      [t](const std::vector<Tensor>& in) {
        Tensor z = gelu(linear(in[0], in[1], in[2]), "tanh");
        return std::vector<Tensor>{z.to(t), z};
      },
      // the f32 GELU cast to another dtype than the linear's
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{gelu(linear(in[0], in[1], in[2]), "tanh").to(DType::f16)};
      }};
  for (size_t i = 0; i < fns.size(); ++i) {
    CAPTURE(i);
    auto gpu = jit::jit(fns[i], autocast_to(t));
    auto cpu = jit::jit(fns[i], autocast_to(t));
    std::vector<Tensor> got = gpu(on(p, kGPU)), want = cpu(p);
    const std::string trace = jit::last_traces(gpu).back().str();
    INFO(trace);
    CHECK(count_of(trace, "cublas_linear_gelu") == 0);
    CHECK(count_of(trace, "= cublas_linear(") == 1);
    // The same unfused program as the CPU's: the GEMMs' sums in another order.
    REQUIRE(got.size() == want.size());
    for (size_t k = 0; k < got.size(); ++k) {
      const Tensor w = want[k].to(DType::f32), g = got[k].to(Device::cpu()).to(DType::f32);
      CHECK(max_abs_diff(g, w) <= 2 * unit(DType::bf16) * max_abs_diff(w, zeros_like(w)));
    }
  }
}

namespace {

// relu(x W1^T + b1) -> gelu_tanh(h W2^T + b2) -> h W3^T + b3.
std::vector<Tensor> three_layers(const std::vector<Tensor>& p) {
  Tensor h = relu(linear(p[0], p[1], p[2]));
  h = gelu(linear(h, p[3], p[4]), "tanh");
  return {linear(h, p[5], p[6])};
}

// x, W1, b1, W2, b2, W3, b3 (f32, CPU).
std::vector<Tensor> three_layer_params() {
  return {Tensor::randn({2, 4, 33}), mul(Tensor::randn({40, 33}), 0.2), Tensor::randn({40}),
          mul(Tensor::randn({24, 40}), 0.2), Tensor::randn({24}), mul(Tensor::randn({5, 24}), 0.2),
          Tensor::randn({5})};
}

// sum(f(x) * r) through the autocast jit on `device`: the output, the
// gradients of x and the parameters (f32, on the CPU), and the forward trace.
struct Step {
  Tensor out;
  std::vector<Tensor> grads;
  std::string trace;
};

Step autocast_step(const std::vector<Tensor>& p, const Tensor& r, DType t, Device device) {
  std::vector<Tensor> in;
  for (const Tensor& v : p) in.push_back(v.detach().to(device).requires_grad_(true));
  auto f = jit::jit(three_layers, autocast_to(t));
  Tensor out = f(in)[0];
  sum(mul(out.to(DType::f32), r.to(device))).backward();
  Step s{out.detach().to(Device::cpu()).to(DType::f32), {}, jit::last_traces(f).back().str()};
  for (const Tensor& v : in) s.grads.push_back(v.grad().to(Device::cpu()).to(DType::f32));
  return s;
}

}  // namespace

// The backward reads the AUX output (the 16-bit pre-activation) in f32 and
// rounds the gradient once to the 16-bit type, as autograd's rules for the
// unfused casts and f32 gelu do.
TEST_CASE("cuda: an autocast training step's gradients through the fused ReLU and GELU follow the CPU's autocast") {
  SKIP_WITHOUT_GPU();
  if (!cuda::cublas_lt()) {
    VOLT_SKIP("cuBLASLt could not be opened (or VOLT_CUBLASLT=0)");
  }
  manual_seed(46);
  for (DType t : {DType::bf16, DType::f16}) {
    INFO(std::string(dtype_name(t)));
    const std::vector<Tensor> p = three_layer_params();
    const Tensor r = Tensor::randn({2, 4, 5});
    const Step gpu = autocast_step(p, r, t, kGPU), cpu = autocast_step(p, r, t, Device::cpu());
    INFO(gpu.trace);
    CHECK(count_of(gpu.trace, "= cublas_linear_relu(") == 1);
    // With a gradient the GELU keeps its pre-activation (GELU_AUX_BIAS) for the backward.
    CHECK(count_of(gpu.trace, "= cublas_linear_gelu_aux(") == 1);
    CHECK(count_of(gpu.trace, "= cublas_linear(") == 1);
    CHECK(count_of(cpu.trace, "cublas_linear") == 0);
    // Each value and gradient against the CPU's autocast program, at the
    // scale of the whole tensor: the fused GELU one unit from the unfused one,
    // carried through two 16-bit layers and their gradients' GEMMs (each
    // rounding once), so two units of the largest magnitude.
    auto scale = [](const Tensor& v) { return max_abs_diff(v, zeros_like(v)); };
    const double bound = 2 * unit(t);
    const double out_units = max_abs_diff(gpu.out, cpu.out) / (unit(t) * scale(cpu.out));
    CHECK(out_units <= 2.0);
    double worst = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      CAPTURE(i);
      CHECK(max_abs_diff(gpu.grads[i], cpu.grads[i]) <= bound * scale(cpu.grads[i]));
      worst = std::max(worst, max_abs_diff(gpu.grads[i], cpu.grads[i]) / (unit(t) * scale(cpu.grads[i])));
    }
    MESSAGE(std::string(dtype_name(t)) << ": output " << out_units << ", gradients up to " << worst
                          << " units of their scale from the CPU's autocast program");
  }
}
#endif  // VOLT_WITH_CUDA
