// The CUDA backend against the CPU, which is the reference: every op on
// random inputs (contiguous, transposed, broadcast, with scalars), bit-equal
// random numbers, the allocator's steady state, the fused optimizers, the
// jit's nvrtc/cublas executors and the kernel cache across processes.
// Each case is skipped with a message where no GPU answers.
#include <doctest/doctest.h>

#ifdef VOLT_WITH_CUDA
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <set>
#include <sstream>

#include <volt/jit/codegen.h>
#include <volt/jit/cuda/executors.h>
#include <volt/jit/jit.h>
#include <volt/jit/kernel_cache.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/cuda/allocator.h>
#include <volt/tensor/cuda/nvrtc.h>
#include <volt/tensor/cuda/runtime.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

#include "cuda/skip_without_gpu.h"
#include "tests/compare.h"

using namespace volt;

namespace {

const Device kGPU = Device::cuda(0);

// got (any device) against want (CPU): same shape and dtype, every element
// within atol + rtol * |want| (NaN matches NaN); reports the worst element.
void check_close(const std::string& label, const Tensor& got, const Tensor& want, double rtol = 1e-5,
                 double atol = 1e-6) {
  INFO(label);
  REQUIRE(got.sizes() == want.sizes());
  REQUIRE(got.dtype() == want.dtype());
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]) && std::isnan(g[i])) continue;
    if (std::isinf(w[i]) && g[i] == w[i]) continue;
    double err = std::fabs(g[i] - w[i]) / (atol + rtol * std::fabs(w[i]));
    if (!(err <= worst)) {
      worst = err;
      at = i;
    }
  }
  CHECK_MESSAGE(worst <= 1.0, label << ": worst element " << at << " got " << g[at] << " want " << w[at]);
}

Tensor random_of(DType dt, const Shape& shape) {
  if (is_floating(dt)) return add(mul(Tensor::rand(shape, DType::f64), 1.5), 0.5).to(dt);  // [0.5, 2)
  if (dt == DType::b8) return lt(Tensor::rand(shape), 0.5);
  return Tensor::randint(1, dt == DType::u8 ? 4 : 6, shape, dt);  // u8: pow stays in range
}

constexpr DType kAll[] = {DType::b8, DType::u8, DType::i32, DType::i64, DType::f32, DType::f64};

double rtol_for(DType dt) { return dt == DType::f64 ? 1e-12 : dt == DType::f32 ? 2e-6 : 0.0; }

// The same view on the GPU: its whole storage is copied, then the same sizes,
// strides and offset are taken, so transposed and broadcast inputs stay so.
Tensor to_gpu_same_layout(const Tensor& t) {
  if (t.is_contiguous()) return t.to(kGPU);
  const int64_t elems = static_cast<int64_t>(t.impl()->storage->nbytes / dtype_size(t.dtype()));
  Tensor flat = make_tensor(t.impl()->storage, {elems}, {1}, 0, t.dtype(), kCPU).to(kGPU);
  return make_tensor(flat.impl()->storage, t.sizes(), t.strides(), t.storage_offset(), t.dtype(), kGPU);
}

// Runs the prim `call` on the CPU and (with its tensors moved) on the GPU;
// false, comparing nothing, when the op refuses these inputs (checked on
// both devices).
bool compare_prim(const std::string& label, const OpCall& cpu_call) {
  std::vector<TensorMeta> m;
  try {
    m = infer_meta(cpu_call);
  } catch (const Error&) {
    return false;
  }
  OpCall gpu_call = cpu_call;
  for (Value& v : gpu_call.args)
    if (v.is_tensor && v.tensor.dim() > 0) {
      v.tensor = to_gpu_same_layout(v.tensor);
      CHECK(v.tensor.strides() == cpu_call.args[&v - gpu_call.args.data()].tensor.strides());
    }
  Tensor want = run_prim(cpu_call)[0];
  Tensor got = run_prim(gpu_call)[0];
  CHECK(got.device() == kGPU);
  check_close(label, got, want, rtol_for(want.dtype()), want.dtype() == DType::f32 ? 1e-6 : 1e-12);
  return true;
}

}  // namespace

TEST_CASE("cuda: every elementwise op matches the CPU (contiguous, transposed, broadcast, scalars)") {
  SKIP_WITHOUT_GPU();
  manual_seed(3);
  int checked = 0, compared = 0;
  for (int i = 0; i < static_cast<int>(OpId::kCount); ++i) {
    const OpId op = static_cast<OpId>(i);
    const OpKind kind = op_info(op).kind;
    for (DType dt : kAll) {
      std::string base = std::string(op_name(op)) + " " + dtype_name(dt);
      const int before = compared;
      Tensor a = random_of(dt, {6, 5}), b = random_of(dt, {6, 5});
      Tensor at = random_of(dt, {5, 6}).t();  // non-contiguous [6, 5]
      Tensor row = random_of(dt, {5});          // broadcast along dim 0
      Tensor col = random_of(dt, {6, 1}).expand({6, 5});  // a stride-0 view
      Tensor cond = random_of(DType::b8, {6, 5});
      switch (kind) {
        case OpKind::Unary:
          compared += compare_prim(base, OpCall{op, {a}, {}});
          compared += compare_prim(base + " transposed", OpCall{op, {at}, {}});
          break;
        case OpKind::Binary:
        case OpKind::Compare:
          compared += compare_prim(base, OpCall{op, {a, b}, {}});
          compared += compare_prim(base + " transposed", OpCall{op, {at, b}, {}});
          compared += compare_prim(base + " broadcast", OpCall{op, {a, row}, {}});
          compared += compare_prim(base + " expanded view", OpCall{op, {col, at}, {}});
          compared += compare_prim(base + " scalar", OpCall{op, {a, Value(2)}, {}});
          compared += compare_prim(base + " float scalar", OpCall{op, {Value(1.5), at}, {}});
          compared += compare_prim(base + " mixed f32", OpCall{op, {a, random_of(DType::f32, {6, 5})}, {}});
          compared += compare_prim(base + " zero-dim CPU", OpCall{op, {a, random_of(dt, {})}, {}});
          break;
        case OpKind::Ternary:
          compared += compare_prim(base, OpCall{op, {cond, a, b}, {}});
          compared += compare_prim(base + " broadcast", OpCall{op, {cond, row, at}, {}});
          compared += compare_prim(base + " scalar", OpCall{op, {cond, a, Value(0.0)}, {}});
          break;
        case OpKind::Convert:
          for (DType to : kAll) {
            OpCall c{op, {at}, {}};
            c.attrs.dtype = to;
            compared += compare_prim(base + " to " + dtype_name(to), c);
          }
          break;
        case OpKind::Copy:
          compared += compare_prim(base + " transposed", OpCall{op, {at}, {}});
          break;
        default:
          continue;
      }
      checked += compared > before;  // a pair whose every input was refused checked nothing
    }
  }
  // Inputs an op refuses are not counted: the comparisons made, not the calls.
  MESSAGE(compared << " prim calls compared over " << checked << " (op, dtype) pairs");
  CHECK(checked > 100);
}

TEST_CASE("cuda: NaN and infinity follow the CPU in maximum, minimum and division") {
  SKIP_WITHOUT_GPU();
  Tensor a = Tensor::from_vector<float>({NAN, 1, -2, 0, INFINITY});
  Tensor b = Tensor::from_vector<float>({1, NAN, 3, 0, 1});
  for (OpId op : {OpId::maximum, OpId::minimum, OpId::div, OpId::eq, OpId::lt})
    compare_prim(op_name(op), OpCall{op, {a, b}, {}});
}

TEST_CASE("cuda: reductions match the CPU over any dims, keepdim, strided, with NaN") {
  SKIP_WITHOUT_GPU();
  manual_seed(4);
  for (DType dt : kAll) {
    Tensor x = random_of(dt, {7, 300, 3}).permute({2, 0, 1});  // [3, 7, 300], strided
    for (OpId op : {OpId::sum, OpId::amax, OpId::amin}) {
      for (std::vector<int64_t> dims : {std::vector<int64_t>{0}, {1}, {2}, {0, 2}, {0, 1, 2}})
        for (bool keep : {false, true}) {
          OpCall c{op, {x}, {}};
          c.attrs.ints = dims;
          c.attrs.flag = keep;
          compare_prim(std::string(op_name(op)) + " " + dtype_name(dt), c);
        }
    }
    for (OpId op : {OpId::argmax, OpId::argmin})
      for (int64_t d : {0, 1, 2}) {
        OpCall c{op, {x}, {}};
        c.attrs.ints = {d};
        compare_prim(std::string(op_name(op)) + " " + dtype_name(dt), c);
      }
  }
  Tensor n = Tensor::from_vector<float>({1, 5, NAN, 7, NAN, 2}, {2, 3});
  for (OpId op : {OpId::amax, OpId::argmax, OpId::argmin, OpId::sum}) {
    OpCall c{op, {n}, {}};
    c.attrs.ints = {1};
    compare_prim(std::string(op_name(op)) + " with NaN", c);
  }
  // A long row: the block-wide tree, and the double accumulator of f32 sums.
  Tensor big = Tensor::rand({1 << 20});
  check_close("sum of 2^20", big.to(kGPU).sum(), big.sum(), 1e-6);
}

TEST_CASE("cuda: matmul and linear through cuBLAS match the CPU (FP32, no TF32)") {
  SKIP_WITHOUT_GPU();
  manual_seed(5);
  for (DType dt : {DType::f32, DType::f64}) {
    auto r = [&](const Shape& s) { return Tensor::randn(s, dt); };
    const double tol = dt == DType::f32 ? 1e-4 : 1e-10;
    // The same views taken on each device, so cuBLAS sees the transposed layouts.
    auto both = [&](const std::string& label, const Tensor& a, const Tensor& b, bool ta = false, bool tb = false) {
      auto view = [](const Tensor& t, bool tr) { return tr ? t.t() : t; };
      check_close(label, matmul(view(a.to(kGPU), ta), view(b.to(kGPU), tb)), matmul(view(a, ta), view(b, tb)), tol,
                  tol);
    };
    both("2-D", r({33, 70}), r({70, 19}));
    both("a transposed", r({70, 33}), r({70, 19}), true, false);
    both("b transposed", r({33, 70}), r({19, 70}), false, true);
    both("both transposed", r({70, 33}), r({19, 70}), true, true);
    // Row-strided views (a slice) and a transposed slice, read in place.
    Tensor wide = r({33, 80}), wg = wide.to(kGPU);
    check_close("sliced", matmul(wg.narrow(1, 5, 70), wg.narrow(1, 0, 70).t()),
                matmul(wide.narrow(1, 5, 70), wide.narrow(1, 0, 70).t()), tol, tol);
    both("batched broadcast", r({4, 1, 8, 16}), r({3, 16, 5}));
    both("vector-matrix", r({16}), r({16, 5}));
    both("matrix-vector", r({8, 16}), r({16}));
    both("dot", r({16}), r({16}));
    Tensor x = r({2, 8, 784}), w = r({28, 784}), bias = r({28});
    check_close("linear 3-D with bias", linear(x.to(kGPU), w.to(kGPU), bias.to(kGPU)), linear(x, w, bias), tol, tol);
    check_close("linear without bias", linear(x[0].to(kGPU), w.to(kGPU)), linear(x[0], w), tol, tol);
  }
  // The checks above can fail: with TF32 allowed, the f32 operands are read
  // with 10 bits of mantissa and the product moves far past their tolerance.
  Tensor a = Tensor::randn({64, 256}), b = Tensor::randn({256, 64});
  cuda::set_allow_tf32(true);
  const double off = volt::testing::max_abs_diff(matmul(a.to(kGPU), b.to(kGPU)).to(kCPU), matmul(a, b));
  cuda::set_allow_tf32(false);
  MESSAGE("TF32 against FP32, largest difference: " << off);
  CHECK(off > 1e-3);
}

TEST_CASE("cuda: rand, randn and dropout masks are bit-identical to the CPU") {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::f32, DType::f64}) {
    manual_seed(11);
    Tensor skip = Tensor::rand({17});  // a non-zero offset
    Tensor cpu = Tensor::rand({1000, 37}, dt);
    manual_seed(11);
    skip = Tensor::rand({17}, DType::f32, kGPU);
    Tensor gpu = Tensor::rand({1000, 37}, dt, kGPU);
    CHECK(gpu.device() == kGPU);
    CHECK(gpu.to_vector<double>() == cpu.to_vector<double>());
  }
  manual_seed(12);
  Tensor x = Tensor::ones({8, 784});
  Tensor cpu = dropout(x, 0.1, true);
  manual_seed(12);
  Tensor gpu = dropout(x.to(kGPU), 0.1, true);
  CHECK(gpu.to_vector<float>() == cpu.to_vector<float>());
  manual_seed(13);
  Tensor n_cpu = Tensor::randn({100});
  manual_seed(13);
  CHECK(Tensor::randn({100}, DType::f32, kGPU).to_vector<float>() == n_cpu.to_vector<float>());
}

TEST_CASE("cuda: factories, copies both ways, views, pad and printing") {
  SKIP_WITHOUT_GPU();
  Tensor z = Tensor::full({3, 4}, 2.5, DType::f64, kGPU);
  check_close("full", z, Tensor::full({3, 4}, 2.5, DType::f64));
  check_close("arange", Tensor::arange(10, DType::i32, kGPU), Tensor::arange(10, DType::i32));
  // Copies into non-contiguous views, in both directions.
  Tensor a = Tensor::arange(24, DType::f32).reshape({4, 6});
  Tensor g = Tensor::zeros({6, 4}, DType::f32, kGPU);
  g.t().copy_(a);  // host -> strided device view
  check_close("copy_ to a device view", g, a.t().contiguous());
  Tensor h = Tensor::zeros({6, 4});
  h.t().copy_(g.t());  // strided device -> strided host
  check_close("copy_ to a host view", h, a.t().contiguous());
  Tensor s = Tensor::zeros({4, 6}, DType::f32, kGPU);
  s.narrow(1, 2, 3).copy_(add(s.narrow(1, 0, 3), 1.0));
  CHECK(s.sum().item<double>() == doctest::Approx(12.0));
  // Overlapping views of one storage go through a temporary.
  Tensor o = Tensor::arange(10, DType::f32).to(kGPU);
  o.narrow(0, 1, 9).copy_(o.narrow(0, 0, 9));
  CHECK(o.to_vector<float>() == std::vector<float>{0, 0, 1, 2, 3, 4, 5, 6, 7, 8});
  Tensor p = Tensor::arange(6, DType::f32).reshape({2, 3});
  check_close("pad", pad(p.to(kGPU), 1, 2, 1), pad(p, 1, 2, 1));
  check_close("select/expand", a.to(kGPU).select(1, 2).unsqueeze(1).expand({4, 3}).contiguous(),
              a.select(1, 2).unsqueeze(1).expand({4, 3}).contiguous());
  // Round trip through the device and every dtype.
  for (DType dt : kAll) {
    Tensor x = random_of(dt, {5, 3});
    check_close(std::string("round trip ") + dtype_name(dt), x.to(kGPU).to(kCPU), x);
  }
  std::string printed = to_string(Tensor::arange(3, DType::f32, kGPU));
  CHECK(printed == "tensor([0., 1., 2.], device='cuda:0')");
  CHECK(Tensor::ones({2}, DType::f32, kGPU).sum().item<float>() == 2.0f);
}

TEST_CASE("cuda: errors name the op and the devices") {
  SKIP_WITHOUT_GPU();
  Tensor g = Tensor::ones({3}, DType::f32, kGPU), c = Tensor::ones({3});
  CHECK_THROWS_WITH_AS(add(g, c), doctest::Contains("cuda:0"), Error);
  CHECK_THROWS_WITH_AS(Tensor::ones({2}, DType::f32, Device::cuda(99)), doctest::Contains("cuda:99"), Error);
  // Out of memory is an exception with the size asked for and the allocator's state.
  try {
    Tensor::empty({int64_t(1) << 48}, DType::f32, kGPU);
    FAIL("expected out of memory");
  } catch (const Error& e) {
    std::string w = e.what();
    CHECK(w.find("out of memory") != std::string::npos);
    CHECK(w.find("1125899906842624 bytes") != std::string::npos);
    CHECK(w.find("reserved") != std::string::npos);
  }
  CHECK(Tensor::ones({4}, DType::f32, kGPU).sum().item<float>() == 4.0f);  // still usable
}

TEST_CASE("cuda: the fused Adam and SGD match the CPU optimizers") {
  SKIP_WITHOUT_GPU();
  manual_seed(21);
  for (bool adam : {true, false}) {
    std::vector<Tensor> cpu_p, gpu_p;
    for (Shape s : {Shape{784, 784}, Shape{784}, Shape{10, 28}, Shape{10}}) {
      cpu_p.push_back(Tensor::randn(s).requires_grad_());
      gpu_p.push_back(cpu_p.back().detach().to(kGPU).requires_grad_());
    }
    std::unique_ptr<nn::Optimizer> oc, og;
    if (adam) {
      oc = std::make_unique<nn::Adam>(cpu_p, nn::AdamOptions{.lr = 1e-2, .weight_decay = 0.01});
      og = std::make_unique<nn::Adam>(gpu_p, nn::AdamOptions{.lr = 1e-2, .weight_decay = 0.01});
    } else {
      oc = std::make_unique<nn::SGD>(cpu_p, nn::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
      og = std::make_unique<nn::SGD>(gpu_p, nn::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
    }
    for (int step = 0; step < 5; ++step) {
      for (size_t i = 0; i < cpu_p.size(); ++i) {
        Tensor gr = Tensor::randn(cpu_p[i].sizes());
        cpu_p[i].set_grad(gr);
        gpu_p[i].set_grad(gr.to(kGPU));
      }
      oc->step();
      og->step();
    }
    for (size_t i = 0; i < cpu_p.size(); ++i)
      check_close(std::string(adam ? "Adam" : "SGD") + " parameter " + std::to_string(i), gpu_p[i].detach(),
                  cpu_p[i].detach(), 1e-6, 1e-7);
  }
}

TEST_CASE("cuda: the caching allocator reaches a steady state with no cudaMalloc") {
  SKIP_WITHOUT_GPU();
  manual_seed(0);
  auto net = std::make_shared<nn::MLP>(784, std::vector<int64_t>{784, 784, 784, 28, 10}, true, 0.1);
  net->to(kGPU);
  nn::Adam opt(net->parameters());
  nn::CrossEntropyLoss loss_fn;
  Tensor x = Tensor::rand({8, 784}, DType::f32, kGPU);
  Tensor y = Tensor::from_vector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7}).to(kGPU);
  auto step = [&] {
    Tensor loss = loss_fn((*net)(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  for (int i = 0; i < 3; ++i) step();
  cuda::synchronize(0);
  cuda::MemoryStats before = cuda::memory_stats(0);
  for (int i = 0; i < 10; ++i) step();
  cuda::MemoryStats after = cuda::memory_stats(0);
  MESSAGE("after warm-up: " << after.str());
  CHECK(after.malloc_calls == before.malloc_calls);
  CHECK(after.free_calls == before.free_calls);
  CHECK(after.peak >= after.allocated);
  CHECK(after.reserved >= after.allocated);
  CHECK(std::isfinite(step().item<double>()));
  cuda::empty_cache();
  CHECK(cuda::memory_stats(0).reserved == cuda::memory_stats(0).allocated);
}

TEST_CASE("cuda: jit training on the GPU (nvrtc + cublas) matches the CPU jit over 20 steps") {
  SKIP_WITHOUT_GPU();
  auto make = [] {
    manual_seed(0);
    return std::make_shared<nn::MLP>(784, std::vector<int64_t>{784, 784, 784, 28, 10}, true, 0.1);
  };
  auto cpu_net = make(), gpu_net = make();
  gpu_net->to(kGPU);
  auto jc = jit::jit(cpu_net), jg = jit::jit(gpu_net);
  nn::Adam oc(cpu_net->parameters()), og(gpu_net->parameters());
  nn::CrossEntropyLoss loss_fn;
  manual_seed(100);
  for (int step = 0; step < 20; ++step) {
    Tensor x = Tensor::rand({8, 784});
    Tensor y = Tensor::randint(0, 10, {8});
    PhiloxState rng = rng_state();
    Tensor lc = loss_fn(jc(x), y);
    set_rng_state(rng);  // both draw the same dropout masks
    Tensor lg = loss_fn(jg(x.to(kGPU)), y.to(kGPU));
    CHECK(lg.device() == kGPU);
    check_close("loss at step " + std::to_string(step), lg, lc, 1e-4, 1e-5);
    oc.zero_grad();
    og.zero_grad();
    lc.backward();
    lg.backward();
    oc.step();
    og.step();
  }
  // Adam divides each gradient element by its running magnitude: an element
  // whose gradient is rounding noise (a unit of a ReLU layer that is almost
  // never active) moves by up to lr a step in either direction, so a last-bit
  // difference between the devices (exp, a sum's order) can move it by up to
  // 20 lr in 20 steps.  Every element of all but at most one unit (a row of
  // a weight, an element of a bias) must agree to 1e-4.
  auto pc = cpu_net->parameters(), pg = gpu_net->parameters();
  for (size_t i = 0; i < pc.size(); ++i) {
    INFO("parameter " << i << " after 20 steps");
    const std::vector<double> g = pg[i].detach().to_vector<double>(), w = pc[i].detach().to_vector<double>();
    REQUIRE(g.size() == w.size());
    const size_t row = pc[i].dim() == 2 ? size_t(pc[i].sizes()[1]) : 1;
    std::set<size_t> units_off;
    double worst = 0;
    for (size_t j = 0; j < g.size(); ++j) {
      const double d = std::fabs(g[j] - w[j]);
      worst = std::max(worst, d);
      if (d > 1e-4 + 1e-4 * std::fabs(w[j])) units_off.insert(j / row);
    }
    CHECK(units_off.size() <= 1);
    CHECK(worst <= 20 * 1e-3);
  }
  std::string fwd = jit::last_traces(jg).back().str();
  CHECK(fwd.find("nvrtcFusion0") != std::string::npos);
  CHECK(fwd.find("cublas_linear") != std::string::npos);
  CHECK(fwd.find("cuda:0 f32[8, 784]") != std::string::npos);
  // The three 784-wide layers' regions (and their backward twins) share kernels.
  CHECK(jit::cuda::nvrtc_executor().kernel_stats().shared >= 2);
}

TEST_CASE("cuda: the MNIST training step's 10 fused regions build 4 kernels on the GPU, as on the CPU") {
  SKIP_WITHOUT_GPU();
  // A dropout probability no other case uses: none of these kernels is built yet.
  auto make = [] {
    manual_seed(5);
    return std::make_shared<nn::MLP>(784, std::vector<int64_t>{784, 784, 784, 28, 10}, true, 0.45);
  };
  auto cpu_net = make(), gpu_net = make();
  gpu_net->to(kGPU);
  // The GPU's regions as the CPU's: without the pass that moves the ReLU
  // into cuBLASLt's GEMM (jit/cuda/lt_activation.cpp), which the CPU has not.
  jit::JitOptions same_regions;
  same_regions.pipeline.without = {"cuBLASLt activation epilogue"};
  auto jc = jit::jit(cpu_net), jg = jit::jit(gpu_net, same_regions);
  Tensor x = Tensor::rand({8, 784});
  Tensor y = Tensor::from_vector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7});
  nn::CrossEntropyLoss loss_fn;
  const jit::KernelStats before = jit::cuda::nvrtc_executor().kernel_stats();
  PhiloxState rng = rng_state();
  Tensor lg = loss_fn(jg(x.to(kGPU)), y.to(kGPU));
  lg.backward();
  const jit::KernelStats after = jit::cuda::nvrtc_executor().kernel_stats();
  CHECK(jit::compile_stats(jg).fusions == 10);
  CHECK(after.kernels - before.kernels == 4);
  CHECK(after.shared - before.shared == 6);
  // Each of the 4 builds is in the kernel log that reports read (jit/inspect/report.h).
  std::set<std::string> logged;
  for (const jit::KernelLoad& l : jit::recent_kernel_loads())
    if (l.compiler == "NVRTC")
      for (const std::string& n : l.names) logged.insert(n);
  for (const auto& k : jit::last_kernels(jg)) CHECK(logged.count(k->symbol) == 1);
  // The GPU's regions have the keys the CPU's have: one code generator.
  set_rng_state(rng);
  Tensor lc = loss_fn(jc(x), y);
  lc.backward();
  std::set<std::string> gpu_keys, cpu_keys;
  for (const auto& k : jit::last_kernels(jg)) gpu_keys.insert(k->key);
  for (const auto& k : jit::last_kernels(jc)) cpu_keys.insert(k->key);
  CHECK(gpu_keys.size() == 4);
  CHECK(gpu_keys == cpu_keys);
  check_close("loss", lg, lc, 1e-4, 1e-5);
  auto pc = cpu_net->parameters(), pg = gpu_net->parameters();
  for (size_t i = 0; i < pc.size(); ++i)
    check_close("grad " + std::to_string(i), pg[i].grad(), pc[i].grad(), 1e-4, 1e-4);
}

// The kernel cache across processes: a second process compiles nothing.
TEST_CASE("cuda child: eager kernels on the GPU, reporting what was compiled" * doctest::skip()) {
  if (!std::getenv("VOLT_CUDA_CACHE_CHILD")) {
    MESSAGE("runs only as the child process of the kernel-cache test");
    return;
  }
  SKIP_WITHOUT_GPU();
  Tensor a = Tensor::rand({100}, DType::f32, kGPU);
  double v = exp(mul(a, 3.0)).sum().item<double>();
  cuda::CompileCounters c = cuda::compile_counters();
  std::printf("VOLT_CHILD compiled=%lld disk_hits=%lld value=%.6f\n", static_cast<long long>(c.compiled),
              static_cast<long long>(c.disk_hits), v);
}

TEST_CASE("cuda: kernels compiled by one process are loaded from disk by the next") {
  SKIP_WITHOUT_GPU();
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("volt_kernel_cache_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto run_child = [&] {
    std::string cmd = "VOLT_CUDA_CACHE_CHILD=1 VOLT_KERNEL_CACHE=" + dir.string() +
                      " /proc/" + std::to_string(::getpid()) + "/exe -ns -tc='cuda child*' 2>&1";
    std::string out;
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
      char buf[512];
      while (std::fgets(buf, sizeof buf, p)) out += buf;
      ::pclose(p);
    }
    long long compiled = -1, hits = -1;
    double value = 0;
    size_t at = out.find("VOLT_CHILD");
    if (at != std::string::npos)
      std::sscanf(out.c_str() + at, "VOLT_CHILD compiled=%lld disk_hits=%lld value=%lf", &compiled, &hits, &value);
    INFO(out);
    return std::array<long long, 2>{compiled, hits};
  };
  auto first = run_child();
  auto second = run_child();
  CHECK(first[0] >= 3);  // mul, exp, sum (and rand) compiled by NVRTC
  CHECK(second[0] == 0);
  CHECK(second[1] == first[0]);
  // Entries are whole files written by rename: no temporaries are left behind.
  int tmp = 0;
  for (const auto& e : fs::directory_iterator(dir)) tmp += e.path().string().find(".tmp") != std::string::npos;
  CHECK(tmp == 0);
  fs::remove_all(dir);
}

TEST_CASE("cuda: cross_entropy is one kernel each way, matches the CPU, and a bad target is reported at the next sync") {
  SKIP_WITHOUT_GPU();
  manual_seed(8);
  for (DType dt : {DType::f32, DType::f64}) {
    const std::string label = dtype_name(dt);
    INFO(label);
    const int64_t n = 300, c = 10;  // more rows than the forward kernel's 256 threads
    Tensor x = Tensor::randn({n, c}, dt) * 3.0;
    Tensor target = Tensor::randint(0, c, {n});
    Tensor xc = x.detach().requires_grad_(true);
    Tensor loss_cpu = cross_entropy(xc, target);
    loss_cpu.backward();

    Tensor xg = x.to(kGPU).requires_grad_(true);
    Tensor tg = target.to(kGPU);
    cross_entropy(xg, tg);  // compiles both kernels outside the counted region
    const cuda::LaunchCounts before = cuda::launch_counts();
    Tensor loss_gpu = cross_entropy(xg, tg);
    const cuda::LaunchCounts mid = cuda::launch_counts();
    loss_gpu.backward();
    CHECK(mid.kernels - before.kernels == 1);
    check_close("loss", loss_gpu.to(kCPU), loss_cpu, 1e-6, 1e-7);
    check_close("gradient", xg.grad().to(kCPU), xc.grad(), 1e-5, 1e-8);
    // A strided view and i32 classes go through the same kernel.
    Tensor xt = (Tensor::randn({c, n}, dt)).t();
    check_close("transposed", cross_entropy(xt.to(kGPU), tg.to(DType::i32)).to(kCPU), cross_entropy(xt, target),
                1e-6, 1e-7);
  }
  // A class index out of range: the kernel goes on (NaN) and records it, and the
  // next synchronisation reports it; the device is usable afterwards.
  Tensor x = Tensor::zeros({4, 3}, DType::f32, kGPU);
  Tensor bad = Tensor::from_vector<int64_t>({0, 1, 7, 2}).to(kGPU);
  Tensor loss = cross_entropy(x, bad);
  CHECK_THROWS_WITH_AS(loss.item<float>(), doctest::Contains("cross_entropy: target values must lie in [0, 3), got 7"),
                       Error);
  Tensor good = Tensor::from_vector<int64_t>({0, 1, 2, 2}).to(kGPU);
  CHECK(cross_entropy(x, good).item<float>() == doctest::Approx(std::log(3.0)));
}

TEST_CASE("cuda: launches and cuBLAS calls are counted") {
  SKIP_WITHOUT_GPU();
  const Device d = Device::cuda(0);
  Tensor a = Tensor::ones({64, 32}).to(d), b = Tensor::ones({32, 16}).to(d);
  Tensor warm = a * 2.0;  // compiles the kernel outside the counted region
  cuda::LaunchCounts before = cuda::launch_counts();
  Tensor c = a * 2.0;
  cuda::LaunchCounts mid = cuda::launch_counts();
  Tensor m = volt::matmul(a, b);
  cuda::LaunchCounts after = cuda::launch_counts();
  CHECK(mid.kernels > before.kernels);
  CHECK(mid.cublas_calls == before.cublas_calls);
  CHECK(after.cublas_calls - mid.cublas_calls == 1);
  CHECK(m.to(kCPU).to_vector<float>()[0] == 32.0f);
}

#endif  // VOLT_WITH_CUDA
