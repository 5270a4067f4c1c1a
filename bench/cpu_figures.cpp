// volt_bench's CPU figures (bench/cpu_figures.h).
#include "cpu_figures.h"

#include <immintrin.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <chrono>
#include <memory>
#include <thread>

#include "common.h"
#include <volt/data/dataloader.h>
#include <volt/data/dataset.h>
#include <volt/data/sampler.h>
#include <volt/jit/jit.h>
#include <volt/jit/step/step.h>
#include <volt/nn/functional.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/nn/optim.h>
#include <volt/tensor/cpu/gemm.h>
#include <volt/tensor/cpu/gemm_bf16.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

namespace volt::bench_cpu {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Each loop: `iters` rounds of 12 independent fused multiply-adds on 12
// accumulators (3 x the FMA latency of 4 cycles on two pipes), nothing from
// memory.  Returns the flops done.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) double fma_loop_avx512(int64_t iters) {
  __m512 acc[12], x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(0.9999999f);
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(float(i));
  for (int64_t n = 0; n < iters; ++n)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  __m512 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float v[16];
  _mm512_store_ps(v, s);
  volatile float sink = v[0];
  (void)sink;
  return double(iters) * 12 * 16 * 2;
}
__attribute__((target("avx2,fma"))) double fma_loop_avx2(int64_t iters) {
  __m256 acc[12], x = _mm256_set1_ps(1.0000001f), y = _mm256_set1_ps(0.9999999f);
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(float(i));
  for (int64_t n = 0; n < iters; ++n)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  alignas(32) float v[8];
  _mm256_store_ps(v, s);
  volatile float sink = v[0];
  (void)sink;
  return double(iters) * 12 * 8 * 2;
}
#endif

double fma_loop(int64_t iters) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (cpu::isa() == cpu::Isa::avx512) return fma_loop_avx512(iters);
  if (cpu::isa() == cpu::Isa::avx2) return fma_loop_avx2(iters);
#endif
  float acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = float(i);
  for (int64_t n = 0; n < iters; ++n)
    for (int i = 0; i < 12; ++i) acc[i] = std::fma(acc[i], 1.0000001f, 0.9999999f);
  volatile float sink = acc[0] + acc[11];
  (void)sink;
  return double(iters) * 12 * 2;
}

// The median of `reps` timings of f, each repeated until it takes >= 20 ms.
template <class F>
double median_seconds_per_call(const F& f, int reps = 7) {
  f();
  std::vector<double> per_call;
  for (int r = 0; r < reps; ++r) {
    int64_t calls = 0;
    const auto t0 = Clock::now();
    double s = 0;
    do {
      f();
      ++calls;
    } while ((s = seconds_since(t0)) < 0.02);
    per_call.push_back(s / double(calls));
  }
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

}  // namespace

namespace {

// The best of 4 rounds, every thread running `loop` (which returns the
// flops it did) at once: a busy neighbour only ever lowers a round, and a
// virtual CPU that was idle can take milliseconds to start.
double best_of_rounds(int threads, const std::function<double()>& loop) {
  double best = 0;
  for (int round = 0; round < 4; ++round) {
    std::vector<double> flops(size_t(threads), 0);
    const auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back([&, t] { flops[size_t(t)] = loop(); });
    flops[0] = loop();
    for (auto& th : pool) th.join();
    const double s = seconds_since(t0);
    double total = 0;
    for (double f : flops) total += f;
    best = std::max(best, total / s / 1e9);
  }
  return best;
}

}  // namespace

// Rounds of ~0.15 s each.
double fma_peak_gflops(int threads) {
  return best_of_rounds(threads, [] { return fma_loop(50'000'000); });
}

double bf16_dot_peak_gflops(int threads) {
  return best_of_rounds(threads, [] { return cpu::bf16_dot_loop(25'000'000); });
}

// Rounds of ~0.15 s each at 1.5 TFLOP/s a core.
double amx_bf16_peak_gflops(int threads) {
  return best_of_rounds(threads, [] { return cpu::bf16_amx_loop(3'500'000); });
}

Figure bf16_gemm(int64_t size, int threads, double dot_peak_gflops, double amx_peak_gflops) {
  const int before = cpu::num_threads();
  cpu::set_num_threads(threads);
  manual_seed(3);
  const Tensor a = Tensor::randn({size, size}, DType::bf16), b = Tensor::randn({size, size}, DType::bf16);
  const double s = median_seconds_per_call([&] { (void)matmul(a, b); }, 5);
  cpu::set_num_threads(before);
  const double gflops = 2.0 * double(size) * double(size) * double(size) / s / 1e9;
  return {"bf16_gemm",
          {{"size", double(size)}, {"threads", double(threads)}, {"ms", s * 1e3}, {"gflops", gflops},
           {"fraction_of_peak", dot_peak_gflops > 0 ? gflops / dot_peak_gflops : 0.0},
           {"fraction_of_amx_peak", amx_peak_gflops > 0 ? gflops / amx_peak_gflops : 0.0}},
          std::string("matmul of two bf16 (n, n), ") + cpu::bf16_gemm_name(cpu::bf16_gemm()) +
              " path; fraction_of_peak: of the vdpbf16ps loop, fraction_of_amx_peak: of the tdpbf16ps loop"};
}

Figure bf16_gemm_shape(const std::string& what, int64_t m, int64_t k, int64_t n, const std::string& layout,
                       double amx_peak_gflops) {
  manual_seed(4);
  Tensor a, b;
  if (layout == "x W^T") a = Tensor::randn({m, k}, DType::bf16), b = Tensor::randn({n, k}, DType::bf16).t();
  else if (layout == "g^T x") a = Tensor::randn({k, m}, DType::bf16).t(), b = Tensor::randn({k, n}, DType::bf16);
  else a = Tensor::randn({m, k}, DType::bf16), b = Tensor::randn({k, n}, DType::bf16);
  const double s = median_seconds_per_call([&] { (void)matmul(a, b); }, 5);
  const double gflops = 2.0 * double(m) * double(k) * double(n) / s / 1e9;
  return {"bf16_gemm_shape",
          {{"m", double(m)}, {"k", double(k)}, {"n", double(n)}, {"threads", double(cpu::num_threads())},
           {"us", s * 1e6}, {"gflops", gflops},
           {"fraction_of_amx_peak", amx_peak_gflops > 0 ? gflops / amx_peak_gflops : 0.0}},
          what + ", " + layout + ", " + cpu::bf16_gemm_name(cpu::bf16_gemm()) + " path"};
}

std::vector<Figure> gemm_shapes(int64_t batch, double peak_gflops) {
  std::vector<Figure> out;
  const int threads = cpu::num_threads();
  for (auto [in, outf] : {std::pair<int64_t, int64_t>{784, 784}, {784, 28}, {28, 10}}) {
    manual_seed(1);
    Tensor x = Tensor::rand({batch, in}), w = Tensor::rand({outf, in}), b = Tensor::rand({outf}),
           g = Tensor::rand({batch, outf});
    struct Product {
      const char* name;
      std::function<Tensor()> run;
    };
    const Product products[] = {{"forward x W^T + b", [&] { return linear(x, w, b); }},
                                {"input grad g W", [&] { return matmul(g, w); }},
                                {"weight grad g^T x", [&] { return matmul(g.t(), x); }}};
    for (const Product& p : products) {
      const double s = median_seconds_per_call([&] { (void)p.run(); });
      const double gflops = 2.0 * double(batch) * double(in) * double(outf) / s / 1e9;
      out.push_back({"gemm_shape",
                     {{"batch", double(batch)}, {"in", double(in)}, {"out", double(outf)}, {"threads", double(threads)},
                      {"us", s * 1e6}, {"gflops", gflops}, {"fraction_of_peak", gflops / peak_gflops}},
                     std::string(p.name) + ", " + cpu::isa_name(cpu::isa()) + " kernels"});
    }
  }
  return out;
}

Figure fused_linear_layer(int64_t batch) {
  manual_seed(2);
  const double p = 0.1;
  Tensor x = Tensor::rand({batch, 784}).requires_grad_();
  Tensor w = mul(sub(Tensor::rand({784, 784}), 0.5), 0.07).requires_grad_();
  Tensor b = mul(sub(Tensor::rand({784}), 0.5), 0.07).requires_grad_();
  const Tensor g = Tensor::rand({batch, 784});
  auto fused = [&] { return nn::functional::linear_relu_dropout(x, w, b, p, true); };
  auto chain = [&] { return dropout(relu(linear(x, w, b)), p, true); };
  auto step = [&](const std::function<Tensor()>& f) {
    return [&f, &g] { f().backward(g); };
  };
  auto forward = [](const std::function<Tensor()>& f) {
    return [&f] {
      NoGradGuard no_grad;
      (void)f();
    };
  };
  const std::function<Tensor()> ff = fused, fc = chain;
  // Five turns of each, alternating; the medians of the turns' medians.
  std::vector<double> train_f, train_c, fwd_f, fwd_c;
  for (int turn = 0; turn < 5; ++turn) {
    train_f.push_back(median_seconds_per_call(step(ff), 3));
    train_c.push_back(median_seconds_per_call(step(fc), 3));
    fwd_f.push_back(median_seconds_per_call(forward(ff), 3));
    fwd_c.push_back(median_seconds_per_call(forward(fc), 3));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2] * 1e6;
  };
  const double tf = median(train_f), tc = median(train_c), ef = median(fwd_f), ec = median(fwd_c);
  return {"fused_linear_layer",
          {{"batch", double(batch)}, {"threads", double(cpu::num_threads())}, {"train_fused_us", tf},
           {"train_chain_us", tc}, {"train_chain_over_fused", tc / tf}, {"forward_fused_us", ef},
           {"forward_chain_us", ec}, {"forward_chain_over_fused", ec / ef}},
          "784 -> 784 linear, ReLU, dropout 0.1: linear_relu_dropout against the eager chain"};
}

std::vector<Figure> busy_machine(const std::string& what, int busy, int rounds,
                                 const std::function<double()>& cell) {
  std::vector<Figure> out;
  const int threads_before = cpu::num_threads();
  // Rounds of 1 and 2 threads interleaved, medians: one cell on a busy
  // machine swings with where the scheduler happens to put its threads.
  auto medians = [&](std::vector<double>* by_threads) {
    for (int r = 0; r < rounds; ++r)
      for (int t : {1, 2}) {
        cpu::set_num_threads(t);
        by_threads[t].push_back(cell());
      }
  };
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<double> quiet[3], loaded[3];
  medians(quiet);
  std::vector<pid_t> children;
  for (int i = 0; i < busy; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      volatile uint64_t spin = 0;
      for (;;) spin = spin + 1;  // a busy loop until killed
    }
    if (pid > 0) children.push_back(pid);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  medians(loaded);
  for (pid_t pid : children) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  cpu::set_num_threads(threads_before);
  const double ratio = median(loaded[2]) / median(loaded[1]);
  for (int t : {1, 2}) {
    const auto [lo, hi] = std::minmax_element(loaded[t].begin(), loaded[t].end());
    out.push_back({"busy_machine",
                   {{"threads", double(t)}, {"busy_processes", double(busy)}, {"rounds", double(rounds)},
                    {"quiet_steps_per_s", median(quiet[t])}, {"busy_steps_per_s", median(loaded[t])},
                    {"busy_min", *lo}, {"busy_max", *hi}, {"busy_2_over_1", ratio}},
                   what});
  }
  return out;
}

Figure mnist_epoch(const std::string& dir, const std::string& mode, int64_t batch) {
  manual_seed(0);
  data::MNIST train_set(dir, /*train=*/true);
  data::DataLoader loader(train_set, batch, data::RandomSampler(train_set.size(), 0));
  auto net = std::make_shared<nn::MLP>(784, std::vector<int64_t>{784, 784, 784, 28, 10}, /*bias=*/true,
                                       /*dropout=*/0.1);
  net->train();
  std::function<Tensor(const Tensor&)> model = [net](const Tensor& x) { return (*net)(x); };
  if (mode == "jit") {
    auto f = std::make_shared<jit::JitFunction>(jit::jit(net));
    model = [f](const Tensor& x) { return (*f)(x); };
  }
  nn::CrossEntropyLoss loss_fn;
  nn::Adam optimizer(net->parameters(), {.lr = 1e-3});
  auto body = [&](const Tensor& x, const Tensor& y) {
    Tensor loss = loss_fn(model(x), y);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    return loss;
  };
  std::unique_ptr<jit::CompiledStep> compiled;  // step: examples/mnist_mlp --jit step
  if (mode == "step") compiled = std::make_unique<jit::CompiledStep>(jit::compile_step(body, {.state = {*net, optimizer}}));
  const auto t0 = Clock::now();
  int64_t steps = 0;
  double loss_sum = 0;
  for (const auto& [x, y] : loader) {
    Tensor loss = compiled ? (*compiled)(x, y) : body(x, y);
    loss_sum += loss.item<double>();
    ++steps;
  }
  const double s = seconds_since(t0);
  // The test set's accuracy after the epoch, as the example evaluates it (eagerly).
  net->eval();
  data::MNIST test_set(dir, /*train=*/false);
  data::DataLoader test_loader(test_set, 1000);
  int64_t correct = 0, total = 0;
  {
    NoGradGuard no_grad;
    for (const auto& [x, y] : test_loader) {
      correct += static_cast<int64_t>(volt::eq((*net)(x).argmax(1), y).sum().item<double>());
      total += y.size(0);
    }
  }
  return {"mnist_epoch",
          {{"batch", double(batch)}, {"threads", double(cpu::num_threads())}, {"seconds", s},
           {"steps_per_s", double(steps) / s}, {"samples_per_s", double(steps * batch) / s},
           {"mean_loss", loss_sum / double(std::max<int64_t>(steps, 1))},
           {"test_accuracy", 100.0 * double(correct) / double(std::max<int64_t>(total, 1))}},
          mode + ", the whole training set, examples/mnist_mlp's loop (its first step includes the compile)"};
}

}  // namespace volt::bench_cpu
