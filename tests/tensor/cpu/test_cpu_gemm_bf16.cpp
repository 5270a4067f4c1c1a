// The bf16 GEMM (tensor/cpu/gemm_bf16.h) against an f64 reference at odd
// shapes and strides, on its dpbf16 path and on the f32 fallback; matmul and
// linear on bf16 tensors, with their gradients.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <volt/tensor/cpu/gemm_bf16.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/skip.h"

using namespace volt;
using namespace volt::cpu;

namespace {

// Sets the path for one scope.
struct PathGuard {
  Bf16Gemm prev = bf16_gemm();
  explicit PathGuard(Bf16Gemm p) { set_bf16_gemm(p); }
  ~PathGuard() { set_bf16_gemm(prev); }
};

std::vector<Bf16Gemm> paths() {
  std::vector<Bf16Gemm> p = {Bf16Gemm::f32};
  if (bf16_dot_supported()) p.push_back(Bf16Gemm::dpbf16);
  else MESSAGE("this CPU has no AVX512_BF16: only the f32 path of the bf16 GEMM is tested");
  return p;
}

// |got - ref| within f32 summation error: k units of 2^-24 on sum |a_i b_i|
// (the products of bf16 values are exact in f32 and f64).
void check_product(const std::vector<float>& c, const std::vector<BF16>& a, const std::vector<BF16>& b, int64_t m,
                   int64_t k, int64_t n, bool a_t, bool b_t) {
  int bad = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double x = a[a_t ? kk * m + i : i * k + kk].to_float(), y = b[b_t ? j * k + kk : kk * n + j].to_float();
        ref += x * y;
        mag += std::fabs(x * y);
      }
      if (std::fabs(double(c[i * n + j]) - ref) > double(k + 1) * 0x1p-24 * mag + 1e-30 && ++bad < 5)
        FAIL_CHECK("C[" << i << ", " << j << "] = " << c[i * n + j] << ", f64 reference " << ref);
    }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("bf16 GEMM: odd shapes and transposed operands against an f64 reference, both paths") {
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> u(-1, 1);
  const int64_t shapes[][3] = {{1, 1, 1}, {1, 7, 1}, {13, 37, 29}, {12, 2, 32}, {25, 1025, 33}, {3, 600, 70},
                               {100, 31, 1}, {1, 64, 100}, {47, 513, 65}};
  for (Bf16Gemm p : paths()) {
    PathGuard guard(p);
    CAPTURE(bf16_gemm_name(p));
    for (const auto& shape : shapes)
      for (int layout = 0; layout < 4; ++layout) {
        const int64_t m = shape[0], k = shape[1], n = shape[2];
        const bool a_t = layout & 1, b_t = layout & 2;
        CAPTURE(m);
        CAPTURE(k);
        CAPTURE(n);
        CAPTURE(layout);
        std::vector<BF16> a(size_t(m * k)), b(size_t(k * n));
        for (auto& x : a) x = BF16::from_float(u(gen));
        for (auto& x : b) x = BF16::from_float(u(gen));
        std::vector<float> c(size_t(m * n), NAN);
        gemm_bf16(a.data(), m, k, a_t ? 1 : k, a_t ? m : 1, b.data(), n, b_t ? 1 : n, b_t ? k : 1, c.data(), n);
        check_product(c, a, b, m, k, n, a_t, b_t);
      }
  }
}

TEST_CASE("bf16 GEMM: the dpbf16 path and the forced f32 fallback agree, at 1 and 2 threads") {
  if (!bf16_dot_supported()) {
    VOLT_SKIP("this CPU has no AVX512_BF16");
  }
  const int threads = num_threads();
  manual_seed(12);
  const Tensor a = randn({70, 515}, kBF16), b = randn({515, 130}, kBF16), x = randn({3, 5, 515}, kBF16);
  const Tensor bias = randn({130}, kBF16);
  for (int t : {1, 2}) {
    set_num_threads(t);
    Tensor c_dp, c_f32, l_dp, l_f32;
    {
      PathGuard g(Bf16Gemm::dpbf16);
      c_dp = matmul(a, b);
      l_dp = linear(x, b.t(), bias);
    }
    {
      PathGuard g(Bf16Gemm::f32);
      c_f32 = matmul(a, b);
      l_f32 = linear(x, b.t(), bias);
    }
    CHECK(c_dp.dtype() == kBF16);
    CHECK(l_dp.sizes() == Shape{3, 5, 130});
    // Sums in another order round apart by at most one bf16 unit (2^-7 relative).
    for (auto [dp, f] : {std::pair{c_dp, c_f32}, std::pair{l_dp, l_f32}}) {
      const std::vector<double> u = dp.to(kF64).to_vector<double>(), v = f.to(kF64).to_vector<double>();
      int bad = 0;
      for (size_t i = 0; i < u.size(); ++i) bad += std::fabs(u[i] - v[i]) > 0x1p-7 * std::fabs(v[i]) + 1e-3;
      CHECK(bad == 0);
    }
  }
  set_num_threads(threads);
}

TEST_CASE("bf16 matmul and linear: one rounding of the f32 sums, batched, vectors, gradients") {
  manual_seed(13);
  const Tensor a = randn({2, 9, 17}, kBF16), b = randn({17, 11}, kBF16), v = randn({17}, kBF16);
  for (Bf16Gemm p : paths()) {
    PathGuard guard(p);
    CAPTURE(bf16_gemm_name(p));
    // The f64 product of the same values, rounded to bf16: within one bf16 unit.
    auto close = [](const Tensor& got, const Tensor& ref64) {
      REQUIRE(got.dtype() == kBF16);
      REQUIRE(got.sizes() == ref64.sizes());
      const std::vector<double> g = got.to(kF64).to_vector<double>(), r = ref64.to_vector<double>();
      for (size_t i = 0; i < g.size(); ++i) CHECK(std::fabs(g[i] - r[i]) <= 0x1p-8 * std::fabs(r[i]) + 1e-4);
    };
    close(matmul(a, b), matmul(a.to(kF64), b.to(kF64)));
    close(matmul(v, b), matmul(v.to(kF64), b.to(kF64)));
    close(matmul(a, v), matmul(a.to(kF64), v.to(kF64)));
    close(linear(a, b.t()), linear(a.to(kF64), b.t().to(kF64)));
    Tensor w = b.t().contiguous().requires_grad_(), x = a.clone().requires_grad_();
    sum(linear(x, w)).backward();
    CHECK(w.grad().dtype() == kBF16);
    close(w.grad(), matmul(ones({11, 18}, kF64), a.to(kF64).reshape({18, 17})));
    close(x.grad(), matmul(ones({2, 9, 11}, kF64), w.detach().to(kF64)));
  }
  CHECK_THROWS_WITH_AS(matmul(a, b.to(kF32)), doctest::Contains("matmul"), volt::Error);
}

TEST_CASE("bf16 GEMM child: runs on the path VOLT_BF16_GEMM names" * doctest::skip()) {
  const char* want = std::getenv("VOLT_TEST_BF16_PATH");
  if (!want) return;  // only as the child of the next case
  manual_seed(14);
  const Tensor a = randn({19, 45}, kBF16), b = randn({45, 23}, kBF16);
  const Tensor c = matmul(a, b), ref = matmul(a.to(kF64), b.to(kF64));
  CHECK(bf16_gemm_name(bf16_gemm()) == std::string(want));
  const std::vector<double> g = c.to(kF64).to_vector<double>(), r = ref.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) CHECK(std::fabs(g[i] - r[i]) <= 0x1p-8 * std::fabs(r[i]) + 1e-4);
  (void)matmul(b.t(), a.t());  // a second product: still one log line
}

TEST_CASE("bf16 GEMM: VOLT_BF16_GEMM forces the path, VOLT_LOG=gemm names it once, a bad value is an error") {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  auto run = [&](const std::string& value) {
    const std::string cmd = "VOLT_TEST_BF16_PATH=" + value + " VOLT_BF16_GEMM=" + value + " VOLT_LOG=gemm '" + self +
                            "' -ns '-tc=bf16 GEMM child*' 2>&1";
    std::string out;
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
      char buf[4096];
      for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
      ::pclose(p);
    }
    return out;
  };
  auto count = [](const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
  };
  std::vector<std::string> values = {"f32"};
  if (bf16_dot_supported()) values.push_back("dpbf16");
  for (const std::string& v : values) {
    CAPTURE(v);
    const std::string out = run(v);
    CHECK_MESSAGE(out.find("Status: SUCCESS") != std::string::npos, out);
    CHECK_MESSAGE(count(out, "volt: bf16 GEMM: " + v + " (") == 1, out);
    CHECK_MESSAGE(count(out, "volt: bf16 GEMM:") == 1, out);
  }
  const std::string bad = run("avx");
  CHECK_MESSAGE(bad.find("VOLT_BF16_GEMM: expects f32 or dpbf16, got 'avx'") != std::string::npos, bad);
  CHECK(bad.find("Status: SUCCESS") == std::string::npos);
}
