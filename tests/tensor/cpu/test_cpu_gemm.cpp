// The CPU GEMM's own kernels against triple loops in double, on the layouts
// training produces: linear's x W^T (+ bias), the input gradient g W and the
// weight gradient g^T x, with sizes that leave partial register tiles in every
// direction.  Skinny kernels: few rows, or a short inner dimension (a batch of
// 8).  Packed kernels: larger products (a batch of 64 and up).
#include <doctest/doctest.h>

#include "sanitized.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>
#include <unistd.h>
#include <string>
#include <tuple>
#include <vector>

#include <volt/tensor/cpu/gemm.h>
#include <volt/tensor/cpu/contention.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/ops.h>
#include "tests/tensor/reference.h"

using namespace volt;
using namespace volt::testing;

TEST_CASE("skinny products: linear, input and weight gradients against loops") {
  const double tol = 1e-5;
  for (DType dt : {DType::f32, DType::f64})
    for (int64_t m : {1, 3, 8, 13, 16, 17})
      for (int64_t k : {1, 7, 16, 37})
        for (int64_t n : {1, 5, 16, 30}) {
          const std::string label = std::string(dtype_name(dt)) + " m=" + std::to_string(m) +
                                    " k=" + std::to_string(k) + " n=" + std::to_string(n);
          Tensor x = sample({m, k}, dt, 91), w = sample({n, k}, dt, 92), bias = sample({n}, dt, 93);
          Tensor g = sample({m, n}, dt, 94);
          Ref wt = ref_of(w.t());
          Ref plain = ref_matmul(ref_of(x), wt);
          check_close("x W^T " + label, linear(x, w), plain, tol, tol);
          check_close("x W^T + b " + label, linear(x, w, bias), ref_zip(plain, ref_of(bias), [](double p, double q) {
                        return p + q;
                      }),
                      tol, tol);
          check_close("g W " + label, matmul(g, w), ref_matmul(ref_of(g), ref_of(w)), tol, tol);
          check_close("g^T x " + label, matmul(g.t(), x), ref_matmul(ref_of(g.t()), ref_of(x)), tol, tol);
          // The same products on strided (non-contiguous) operands take the general path.
          check_close("strided g W " + label, matmul(strided(g), strided(w)), ref_matmul(ref_of(g), ref_of(w)), tol,
                      tol);
        }
}

TEST_CASE("skinny products: the seed model's shapes at batch 8") {
  // 784 = 49 full register tiles; 28 and 10 leave partial ones.
  for (auto [in, out] : {std::pair<int64_t, int64_t>{784, 784}, {784, 28}, {28, 10}}) {
    Tensor x = sample({8, in}, DType::f32, 95), w = sample({out, in}, DType::f32, 96);
    Tensor bias = sample({out}, DType::f32, 97), g = sample({8, out}, DType::f32, 98);
    const std::string label = std::to_string(in) + "->" + std::to_string(out);
    Ref plain = ref_matmul(ref_of(x), ref_of(w.t()));
    check_close("forward " + label, linear(x, w, bias),
                ref_zip(plain, ref_of(bias), [](double p, double q) { return p + q; }), 1e-4, 1e-4);
    check_close("input grad " + label, matmul(g, w), ref_matmul(ref_of(g), ref_of(w)), 1e-4, 1e-4);
    check_close("weight grad " + label, matmul(g.t(), x), ref_matmul(ref_of(g.t()), ref_of(x)), 1e-4, 1e-4);
  }
}

namespace {

// C = A B (+ bias) as one fused multiply-add chain per element, k ascending:
// the order the packed kernels promise, whatever the blocking and threads.
template <class T>
std::vector<T> fma_chain(const Tensor& a, const Tensor& b, const Tensor* bias) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  std::vector<T> av = a.to_vector<T>(), bv = b.to_vector<T>(), out(size_t(m * n));
  std::vector<T> biasv = bias ? bias->to_vector<T>() : std::vector<T>();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      T c = 0;
      for (int64_t p = 0; p < k; ++p) c = std::fma(av[size_t(i * k + p)], bv[size_t(p * n + j)], c);
      out[size_t(i * n + j)] = bias ? c + biasv[size_t(j)] : c;
    }
  return out;
}

template <class T>
void check_bitwise(const std::string& label, const Tensor& got, const std::vector<T>& want) {
  std::vector<T> g = got.to_vector<T>();
  REQUIRE(g.size() == want.size());
  int64_t differ = 0;
  for (size_t i = 0; i < g.size(); ++i) differ += std::memcmp(&g[i], &want[i], sizeof(T)) != 0;
  INFO(label);
  CHECK(differ == 0);
}

}  // namespace

TEST_CASE("packed products: every layout against loops, and bit for bit the fma chain") {
  // m and n leave partial panels (8 rows, 32 float or 16 double columns); k = 1100
  // takes two k-blocks, so the second continues from the first's partial sums.
  for (DType dt : {DType::f32, DType::f64})
    for (int64_t m : {17, 40, 103})
      for (int64_t k : {17, 64, 1100})
        for (int64_t n : {16, 33, 70}) {
          // Under the sanitizers the corners only: partial panels and two k-blocks still.
          if (volt::testing::kSanitized && (m == 40 || k == 64 || n == 33)) continue;
          // A chain of 1100 float roundings drifts by a few 1e-5 from the exact sum.
          const double tol = dt == DType::f32 && k > 64 ? 1e-4 : 1e-5;
          const std::string label = std::string(dtype_name(dt)) + " m=" + std::to_string(m) +
                                    " k=" + std::to_string(k) + " n=" + std::to_string(n);
          Tensor x = sample({m, k}, dt, 81), w = sample({n, k}, dt, 82), bias = sample({n}, dt, 83);
          Tensor g = sample({m, n}, dt, 84), xt = sample({k, m}, dt, 85);
          Ref plain = ref_matmul(ref_of(x), ref_of(w.t()));
          Tensor y = linear(x, w, bias);
          check_close("x W^T + b " + label, y, ref_zip(plain, ref_of(bias), [](double p, double q) {
                        return p + q;
                      }),
                      tol, tol);
          Ref gw = ref_matmul(ref_of(g), ref_of(w));
          check_close("g W " + label, matmul(g, w), gw, tol, tol);
          check_close("g W, g column-major " + label, matmul(transposed_layout(g), w), gw, tol, tol);
          // (k, m) stored, used transposed: A with unit row stride, as in g^T x.
          check_close("A^T B " + label, matmul(xt.t(), w.t()), ref_matmul(ref_of(xt.t()), ref_of(w.t())), tol, tol);
          check_close("strided " + label, matmul(strided(x), strided(w.t())), plain, tol, tol);
          // A broadcast (stride 0) row: every row of C the same.
          Tensor row = sample({1, k}, dt, 86).expand({m, k});
          check_close("broadcast A " + label, matmul(row, w.t()), ref_matmul(ref_of(row), ref_of(w.t())), tol, tol);
          if (dt == DType::f32)
            check_bitwise<float>("fma chain " + label, y, fma_chain<float>(x, w.t(), &bias));
          else
            check_bitwise<double>("fma chain " + label, matmul(x, w.t()), fma_chain<double>(x, w.t(), nullptr));
        }
}

TEST_CASE("packed products: the seed model's shapes at batch 64 and 256") {
  for (int64_t batch : {64, 256})
    for (auto [in, out] : {std::pair<int64_t, int64_t>{784, 784}, {784, 28}}) {
      if (volt::testing::kSanitized && batch == 256) continue;  // the loops' reference is slow there
      Tensor x = sample({batch, in}, DType::f32, 87), w = sample({out, in}, DType::f32, 88);
      Tensor bias = sample({out}, DType::f32, 89), g = sample({batch, out}, DType::f32, 90);
      const std::string label = std::to_string(batch) + ": " + std::to_string(in) + "->" + std::to_string(out);
      Ref plain = ref_matmul(ref_of(x), ref_of(w.t()));
      check_close("forward " + label, linear(x, w, bias),
                  ref_zip(plain, ref_of(bias), [](double p, double q) { return p + q; }), 1e-4, 1e-4);
      check_close("input grad " + label, matmul(g, w), ref_matmul(ref_of(g), ref_of(w)), 1e-4, 1e-4);
      check_close("weight grad " + label, matmul(g.t(), x), ref_matmul(ref_of(g.t()), ref_of(x)), 1e-4, 1e-4);
      check_bitwise<float>("weight grad chain " + label, matmul(g.t(), x), fma_chain<float>(g.t(), x, nullptr));
    }
}

TEST_CASE("packed products: more than 4096 rows or columns run block by block") {
  for (auto [m, n] : {std::pair<int64_t, int64_t>{4105, 40}, {20, 4100}}) {
    const int64_t k = 18;
    Tensor x = sample({m, k}, DType::f32, 71), w = sample({n, k}, DType::f32, 72), bias = sample({n}, DType::f32, 73);
    const std::string label = "m=" + std::to_string(m) + " n=" + std::to_string(n);
    Tensor y = linear(x, w, bias);
    check_close("x W^T + b " + label, y,
                ref_zip(ref_matmul(ref_of(x), ref_of(w.t())), ref_of(bias), [](double p, double q) { return p + q; }),
                1e-5, 1e-5);
    check_bitwise<float>("fma chain " + label, y, fma_chain<float>(x, w.t(), &bias));
  }
}

// ---- every instruction set and thread count ----

namespace {

// Restores the kernel set and the thread count a test changed.
struct KernelScope {
  cpu::Isa isa = cpu::isa();
  int threads = cpu::num_threads();
  ~KernelScope() {
    cpu::set_isa(isa);
    cpu::set_num_threads(threads);
  }
};

std::vector<cpu::Isa> machine_isas() {
  std::vector<cpu::Isa> out;
  for (cpu::Isa i : {cpu::Isa::generic, cpu::Isa::avx2, cpu::Isa::avx512})
    if (cpu::isa_supported(i)) out.push_back(i);
  return out;
}

template <class T>
void check_same_bits(const std::string& label, const Tensor& got, const Tensor& want) {
  check_bitwise<T>(label, got, want.to_vector<T>());
}

}  // namespace

TEST_CASE("GEMM kernels: every instruction set this CPU has, 1-4 threads, the same bits") {
  KernelScope scope;
  const std::vector<cpu::Isa> isas = machine_isas();
  CHECK(isas.front() == cpu::Isa::generic);
  MESSAGE("instruction sets tested: " << isas.size() << " (best: " << std::string(cpu::isa_name(isas.back())) << ")");
  struct Case {
    int64_t m, k, n;
  };
  // Skinny (m <= 16 or k <= 16), packed with partial panels in every direction for
  // every tile shape (6, 8, 12 rows; 16, 32 columns), two k-blocks, and the seed
  // model's 784 x 784 at batch 64.
  const std::vector<Case> cases = {{1, 33, 7},   {7, 100, 45},  {16, 784, 28}, {19, 13, 50},  {37, 61, 33},
                                   {61, 130, 97}, {25, 1100, 18}, {64, 784, 784}, {100, 17, 129},
                                   // a weight gradient's chunk at batch 8 (g^T x: 8 deep), and x W^T
                                   // of one input feature (a short k with a bias, B's rows contiguous)
                                   {8, 100, 53},  {40, 1, 37}};
  for (DType dt : {DType::f32, DType::f64})
    for (const Case& cs : cases) {
      if (volt::testing::kSanitized && cs.k == 784 && cs.n == 784) continue;  // the other cases take the same paths
      const std::string shape = std::string(dtype_name(dt)) + " m=" + std::to_string(cs.m) +
                                " k=" + std::to_string(cs.k) + " n=" + std::to_string(cs.n);
      Tensor x = sample({cs.m, cs.k}, dt, 61), w = sample({cs.n, cs.k}, dt, 62), bias = sample({cs.n}, dt, 63);
      Tensor g = sample({cs.m, cs.n}, dt, 64), xt = sample({cs.k, cs.m}, dt, 65);
      // The reference run: baseline kernels, one thread.
      cpu::set_isa(cpu::Isa::generic);
      cpu::set_num_threads(1);
      const Tensor y0 = linear(x, w, bias), gw0 = matmul(g, w), atb0 = matmul(xt.t(), w.t());
      const Tensor st0 = matmul(strided(x), strided(w.t())), gx0 = matmul(g.t(), x);
      const double tol = dt == DType::f32 ? 2e-4 : 1e-9;
      check_close("x W^T + b " + shape, y0, ref_zip(ref_matmul(ref_of(x), ref_of(w.t())), ref_of(bias),
                                                    [](double p, double q) { return p + q; }),
                  tol, tol);
      check_close("A^T B " + shape, atb0, ref_matmul(ref_of(xt.t()), ref_of(w.t())), tol, tol);
      check_close("g^T x " + shape, gx0, ref_matmul(ref_of(g.t()), ref_of(x)), tol, tol);
      for (cpu::Isa isa : isas)
        for (int threads = 1; threads <= 4; ++threads) {
          if (volt::testing::kSanitized && threads != 1 && threads != 3) continue;
          cpu::set_isa(isa);
          cpu::set_num_threads(threads);
          const std::string label = shape + " " + cpu::isa_name(isa) + " threads=" + std::to_string(threads);
          if (dt == DType::f32) {
            check_same_bits<float>("x W^T + b " + label, linear(x, w, bias), y0);
            check_same_bits<float>("g W " + label, matmul(g, w), gw0);
            check_same_bits<float>("A^T B " + label, matmul(xt.t(), w.t()), atb0);
            check_same_bits<float>("strided " + label, matmul(strided(x), strided(w.t())), st0);
            check_same_bits<float>("g^T x " + label, matmul(g.t(), x), gx0);
          } else {
            check_same_bits<double>("x W^T + b " + label, linear(x, w, bias), y0);
            check_same_bits<double>("g W " + label, matmul(g, w), gw0);
            check_same_bits<double>("A^T B " + label, matmul(xt.t(), w.t()), atb0);
            check_same_bits<double>("strided " + label, matmul(strided(x), strided(w.t())), st0);
            check_same_bits<double>("g^T x " + label, matmul(g.t(), x), gx0);
          }
        }
    }
}

TEST_CASE("GEMM kernels: packed products are the fma chain on every instruction set") {
  KernelScope scope;
  for (cpu::Isa isa : machine_isas())
    for (int threads : {1, 3}) {
      cpu::set_isa(isa);
      cpu::set_num_threads(threads);
      for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{29, 45, 70}, {256, 784, 784}, {40, 1100, 33}}) {
        if (volt::testing::kSanitized && (threads == 1 || n == 784)) continue;  // the reference chain is slow there
        const std::string label = std::string(cpu::isa_name(isa)) + " threads=" + std::to_string(threads) +
                                   " m=" + std::to_string(m) + " k=" + std::to_string(k) + " n=" + std::to_string(n);
        Tensor x = sample({m, k}, DType::f32, 51), w = sample({n, k}, DType::f32, 52), b = sample({n}, DType::f32, 53);
        check_bitwise<float>("fma chain " + label, linear(x, w, b), fma_chain<float>(x, w.t(), &b));
      }
    }
}

TEST_CASE("cpu_linear_relu: bias and ReLU in the GEMM's store equal relu(linear) bit for bit") {
  KernelScope scope;
  for (cpu::Isa isa : machine_isas())
    for (DType dt : {DType::f32, DType::f64})
      for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{8, 784, 784}, {3, 5, 7}, {70, 50, 45}, {20, 9, 40}}) {
        cpu::set_isa(isa);
        cpu::set_num_threads(2);
        const std::string label = std::string(cpu::isa_name(isa)) + " " + dtype_name(dt) + " m=" + std::to_string(m) +
                                  " k=" + std::to_string(k) + " n=" + std::to_string(n);
        Tensor x = sample({m, k}, dt, 41), w = sample({n, k}, dt, 42), b = sample({n}, dt, 43);
        Tensor out = Tensor::zeros({m, n}, dt), out_nb = Tensor::zeros({m, n}, dt);
        cpu_linear_relu(x, w, &b, out);
        cpu_linear_relu(x, w, nullptr, out_nb);
        Tensor want = relu(linear(x, w, b)), want_nb = relu(linear(x, w));
        if (dt == DType::f32) {
          check_same_bits<float>("with bias " + label, out, want);
          check_same_bits<float>("no bias " + label, out_nb, want_nb);
        } else {
          check_same_bits<double>("with bias " + label, out, want);
          check_same_bits<double>("no bias " + label, out_nb, want_nb);
        }
        // Some outputs are clamped, some are not: the ReLU did something.
        const std::vector<double> v = out.to_vector<double>();
        CHECK(std::count(v.begin(), v.end(), 0.0) > 0);
        CHECK(std::count_if(v.begin(), v.end(), [](double e) { return e > 0; }) > 0);
      }
  Tensor x = sample({4, 6}, DType::f32, 44), w = sample({3, 5}, DType::f32, 45);
  Tensor out = Tensor::zeros({4, 3}, DType::f32);
  CHECK_THROWS_WITH_AS(cpu_linear_relu(x, w, nullptr, out), doctest::Contains("linear_relu"), Error);
}

TEST_CASE("skinny kernels: a bias and the ReLU in the store, and partial column tiles, are the fma chain") {
  // gemm_f32 with its store on the three layouts the skinny kernels take (a
  // short k with B's rows contiguous, few rows against a long k, and A's rows
  // against B's columns), every instruction set: each element the chain of
  // fused multiply-adds from zero (dot products: the kernel's lane sums),
  // then + bias, then max(., 0).
  KernelScope scope;
  struct Case {
    int64_t m, k, n;
    bool b_rows;  // B's rows contiguous (else its columns)
  };
  for (const Case cs : {Case{37, 8, 45, true}, Case{5, 13, 70, true}, Case{7, 40, 37, true}, Case{16, 300, 33, true},
                        Case{8, 53, 9, false}}) {
    Tensor a = sample({cs.m, cs.k}, DType::f32, 71), bt = sample({cs.k, cs.n}, DType::f32, 72);
    Tensor bias = sample({cs.n}, DType::f32, 73);
    // The same B as (k, n) with rows contiguous, or as its transpose's storage.
    const Tensor b_store = cs.b_rows ? bt : bt.t().contiguous();
    const std::vector<float> av = a.to_vector<float>(), bv = bt.to_vector<float>(), biasv = bias.to_vector<float>();
    std::vector<float> want(size_t(cs.m * cs.n));
    for (int64_t i = 0; i < cs.m; ++i)
      for (int64_t j = 0; j < cs.n; ++j) {
        float acc = 0;
        for (int64_t p = 0; p < cs.k; ++p) acc = std::fma(av[size_t(i * cs.k + p)], bv[size_t(p * cs.n + j)], acc);
        const float v = acc + biasv[size_t(j)];
        want[size_t(i * cs.n + j)] = volt::testing::relu_ref(v);
      }
    std::vector<float> first;
    for (cpu::Isa isa : machine_isas())
      for (int threads : {1, 2}) {
        cpu::set_isa(isa);
        cpu::set_num_threads(threads);
        const std::string label = std::string(cpu::isa_name(isa)) + " threads=" + std::to_string(threads) +
                                  " m=" + std::to_string(cs.m) + " k=" + std::to_string(cs.k) +
                                  " n=" + std::to_string(cs.n);
        cpu::GemmStore store;
        store.bias = bias.data_ptr<float>();
        store.relu = true;
        std::vector<float> c(size_t(cs.m * cs.n), -1.0f);
        const float* pb = b_store.data_ptr<float>();
        if (cs.b_rows)
          cpu::gemm_f32(a.data_ptr<float>(), cs.m, cs.k, cs.k, 1, pb, cs.n, cs.n, 1, c.data(), cs.n, store);
        else
          cpu::gemm_f32(a.data_ptr<float>(), cs.m, cs.k, cs.k, 1, pb, cs.n, 1, cs.k, c.data(), cs.n, store);
        INFO(label);
        if (cs.b_rows) {
          CHECK(std::memcmp(c.data(), want.data(), c.size() * sizeof(float)) == 0);
        } else {  // the dot-product kernel sums in lanes: against the first run, and close to the chain
          if (first.empty()) first = c;
          CHECK(std::memcmp(c.data(), first.data(), c.size() * sizeof(float)) == 0);
          for (size_t e = 0; e < c.size(); ++e) CHECK(std::fabs(c[e] - want[e]) < 1e-4);
        }
      }
  }
}

TEST_CASE("thread pool: every task runs once, nested regions run serially, bad counts fail") {
  KernelScope scope;
  for (int threads : {1, 2, 4}) {
    cpu::set_num_threads(threads);
    CHECK(cpu::num_threads() == threads);
    for (int64_t tasks : {0, 1, 7, 1000}) {
      std::vector<std::atomic<int>> hits(size_t(tasks) + 1);
      cpu::parallel_tasks(tasks, [&](int64_t t) {
        hits[size_t(t)].fetch_add(1);
        // A region inside a task: serial, still complete.
        cpu::parallel_tasks(3, [&](int64_t) { hits[size_t(tasks)].fetch_add(1); });
      });
      for (int64_t t = 0; t < tasks; ++t) CHECK(hits[size_t(t)].load() == 1);
      CHECK(hits[size_t(tasks)].load() == 3 * tasks);
    }
    std::vector<int> covered(100003, 0);
    cpu::parallel_for(int64_t(covered.size()), 1000, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) covered[size_t(i)] += 1;
    });
    CHECK(std::count(covered.begin(), covered.end(), 1) == int64_t(covered.size()));
  }
  CHECK_THROWS_WITH_AS(cpu::set_num_threads(0), doctest::Contains("set_num_threads"), Error);
}

TEST_CASE("thread pool: back-to-back regions of different sizes each run exactly their own tasks") {
  // A worker still leaving one region must not run a task of the next one
  // (with the next one's function but the previous one's count, or twice).
  KernelScope scope;
  cpu::set_num_threads(3);
  int64_t wrong = 0;
  for (int r = 0; r < 3000; ++r) {
    const int64_t tasks = r % 3 == 0 ? 2 : (r % 3 == 1 ? 41 : 7);
    std::vector<std::atomic<int>> hits(static_cast<size_t>(tasks));
    const int tag = r;
    std::atomic<int> bad_tag{0};
    cpu::parallel_tasks(tasks, [&, tag](int64_t t) {
      if (tag != r) bad_tag.fetch_add(1);
      hits[size_t(t)].fetch_add(1);
    });
    for (auto& h : hits) wrong += h.load() != 1;
    wrong += bad_tag.load();
  }
  CHECK(wrong == 0);
}

TEST_CASE("thread pool: while other threads take every core, a region runs on its caller alone") {
  // The policy (tensor/cpu/contention.h) on a clock and a load the test sets:
  // looks 20 ms apart, two in a row believed.
  using Clock = cpu::detail::Contention::Clock;
  using std::chrono::milliseconds;
  int others = 64;  // other processes' runnable threads
  cpu::detail::Contention c(2, [&](int) { return others; });
  Clock::time_point t = Clock::now();
  auto next = [&](int ms) { return t += milliseconds(ms); };
  CHECK(c.threads_for(2, 1, next(0)) == 2);   // one look at a busy machine is not believed
  CHECK(!c.busy());
  CHECK(c.threads_for(2, 1, next(5)) == 2);   // no new look within 20 ms
  CHECK(c.threads_for(2, 1, next(25)) == 1);  // the second look agrees: the caller alone
  CHECK(c.busy());
  CHECK(c.threads_for(2, 1, next(30)) == 1);
  others = 1;                                 // one core left free by the others
  CHECK(c.threads_for(2, 1, next(30)) == 1);  // one spare core
  others = 0;
  CHECK(c.threads_for(2, 1, next(30)) == 2);  // the cores free again: one look suffices
  CHECK(!c.busy());
  // With 8 threads wanted on 2 cores and 1 other thread: one spare core.
  others = 1;
  c.threads_for(8, 1, next(30));
  CHECK(c.threads_for(8, 1, next(30)) == 1);
  others = 0;
  c.threads_for(8, 1, next(30));
  CHECK(c.threads_for(8, 1, next(30)) == 8);

  // Stragglers: a region whose caller waited > 1 ms, longer than its work,
  // twice within 200 ms, runs the next ones alone for 20 ms, then probes;
  // a slow probe doubles the period.
  auto region = [&](int work_us, int wait_us) {
    const Clock::time_point start = t, done = t + std::chrono::microseconds(work_us);
    t = done + std::chrono::microseconds(wait_us);
    c.judge(start, done, t);
  };
  region(100, 5000);
  CHECK(c.threads_for(2, 1, next(1)) == 2);   // one slow region is not enough
  region(100, 5000);
  CHECK(c.threads_for(2, 1, next(1)) == 1);   // the second, within 200 ms: alone
  CHECK(c.threads_for(2, 1, next(10)) == 1);
  CHECK(c.threads_for(2, 1, next(15)) == 2);  // 20 ms later: a probe
  region(100, 5000);                          // the probe is slow: 40 ms alone
  CHECK(c.threads_for(2, 1, next(35)) == 1);
  CHECK(c.threads_for(2, 1, next(10)) == 2);
  region(5000, 2000);                         // a wait shorter than the work is not slow
  CHECK(c.threads_for(2, 1, next(1)) == 2);
  region(100, 5000);
  t += milliseconds(300);
  region(100, 5000);                          // two slow regions 300 ms apart: not a pattern
  CHECK(c.threads_for(2, 1, next(1)) == 2);
}

TEST_CASE("thread pool: the load file's runnable count, less volt's own threads") {
  const std::string load = "/tmp/volt-test-loadavg-" + std::to_string(::getpid());
  std::ofstream(load) << "0.50 0.40 0.30 7/500 12345\n";
  CHECK(cpu::detail::runnable_from_load_file(load, 2) == 5);
  CHECK(cpu::detail::runnable_from_load_file(load, 9) == 0);
  std::ofstream(load) << "garbage\n";
  CHECK(cpu::detail::runnable_from_load_file(load, 1) == -1);
  std::remove(load.c_str());
  CHECK(cpu::detail::runnable_from_load_file(load, 1) == -1);
}

TEST_CASE("GEMM packing: every instruction set's panels equal the copying loop") {
  KernelScope scope;
  // A (rows x cols) matrix with a row stride wider than its rows; rows past
  // `live` must come out as zeros, k not a multiple of 16 leaves a masked strip.
  const int64_t rows = 40, cols = 37, ld = 45;
  std::vector<float> x(size_t(rows * ld));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 97) * 0.25f - 7.0f;
  for (cpu::Isa isa : machine_isas()) {
    cpu::set_isa(isa);
    const cpu::GemmKernels<float>& ker = cpu::gemm_kernels_f32();
    for (int R : {6, 12, 16, 32})
      for (int64_t live : {int64_t(1), int64_t(R) - 1, int64_t(R)})
        for (int64_t kc : {1, 16, 17, 37}) {
          const std::string label = std::string(cpu::isa_name(isa)) + " R=" + std::to_string(R) +
                                    " live=" + std::to_string(live) + " kc=" + std::to_string(kc);
          // pack_rows: dst[kk R + r] = x[r ld + kk]; also with row stride 0 (a broadcast row).
          for (int64_t rs : {ld, int64_t(0)}) {
            std::vector<float> got(size_t(kc * R), -1.0f), want(size_t(kc * R));
            for (int64_t kk = 0; kk < kc; ++kk)
              for (int64_t r = 0; r < R; ++r) want[size_t(kk * R + r)] = r < live ? x[size_t(r * rs + kk)] : 0.0f;
            ker.pack_rows(x.data(), live, kc, rs, R, got.data());
            INFO("pack_rows " << label << " rs=" << rs);
            CHECK(got == want);
          }
          // pack_cols: dst[kk R + r] = x[kk ld + r] (live <= 37 columns of a row).
          if (live <= cols) {
            std::vector<float> got(size_t(kc * R), -1.0f), want(size_t(kc * R));
            for (int64_t kk = 0; kk < kc; ++kk)
              for (int64_t r = 0; r < R; ++r) want[size_t(kk * R + r)] = r < live ? x[size_t(kk * ld + r)] : 0.0f;
            ker.pack_cols(x.data(), live, kc, ld, R, got.data());
            INFO("pack_cols " << label);
            CHECK(got == want);
          }
        }
  }
}
