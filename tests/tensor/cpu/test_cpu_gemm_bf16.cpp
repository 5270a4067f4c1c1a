// The bf16 GEMM (tensor/cpu/gemm_bf16.h) against an f64 reference at odd
// shapes and strides, on its amx and dpbf16 paths and on the f32 fallback;
// matmul and linear on bf16 tensors, with their gradients.
#include <doctest/doctest.h>
#include <signal.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <volt/tensor/cpu/gemm_amx.h>
#include <volt/tensor/cpu/gemm_bf16.h>
#include <volt/tensor/cpu/matmul_bf16.h>
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
  else MESSAGE("this CPU has no AVX512_BF16: the dpbf16 path of the bf16 GEMM is not tested");
  if (bf16_amx_supported()) p.push_back(Bf16Gemm::amx);
  else MESSAGE("AMX is not available (" << amx_unavailable_reason() << "): the amx path is not tested");
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

// A (rows, cols) matrix of random bf16 in a buffer, laid out row-major (0),
// transposed (1) or with both strides > 1 (2).
struct Strided {
  std::vector<BF16> data;
  int64_t rs = 0, cs = 0;
  Strided(int64_t rows, int64_t cols, int layout, std::mt19937& gen) {
    std::uniform_real_distribution<float> u(-1, 1);
    if (layout == 0) rs = cols, cs = 1;
    if (layout == 1) rs = 1, cs = rows;
    if (layout == 2) rs = 2 * cols + 3, cs = 2;
    data.resize(size_t(layout == 2 ? rows * rs : rows * cols));
    for (auto& x : data) x = BF16::from_float(u(gen));
  }
  double at(int64_t r, int64_t c) const { return data[size_t(r * rs + c * cs)].to_float(); }
};

// |c - A B| within (k + 1) units of 2^-24 of sum |a_i b_i|, against f64 sums;
// `scale` widens the bound (two f32 results compared with each other).
void check_strided(const std::vector<float>& c, const Strided& a, const Strided& b, int64_t m, int64_t k, int64_t n,
                   const std::vector<float>* other = nullptr) {
  int bad = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double p = a.at(i, kk) * b.at(kk, j);
        ref += p;
        mag += std::fabs(p);
      }
      const double tol = double(k + 1) * 0x1p-24 * mag + 1e-30;
      const double got = c[size_t(i * n + j)];
      const bool ok = other ? std::fabs(got - (*other)[size_t(i * n + j)]) <= 2 * tol : std::fabs(got - ref) <= tol;
      if (!ok && ++bad < 5)
        FAIL_CHECK("C[" << i << ", " << j << "] = " << got << ", f64 reference " << ref
                        << (other ? ", other path " + std::to_string((*other)[size_t(i * n + j)]) : std::string()));
    }
  CHECK(bad == 0);
}

// Each (m, k, n) on 1 and 2 threads, A and B in each of the first `layouts`
// of Strided's layouts, against f64 (the products over 2M multiply-adds in
// the first two layouts only); the thread count restored after.
void check_shapes(const std::vector<std::array<int64_t, 3>>& shapes, int layouts, std::mt19937& gen) {
  const int threads = num_threads();
  for (int t : {1, 2}) {
    set_num_threads(t);
    for (const auto& shape : shapes)
      for (int la = 0; la < layouts; ++la)
        for (int lb = 0; lb < layouts; ++lb) {
          const int64_t m = shape[0], k = shape[1], n = shape[2];
          if (m * k * n > 2'000'000 && (la == 2 || lb == 2)) continue;
          CAPTURE(t);
          CAPTURE(m);
          CAPTURE(k);
          CAPTURE(n);
          CAPTURE(la);
          CAPTURE(lb);
          const Strided a(m, k, la, gen), b(k, n, lb, gen);
          std::vector<float> c(size_t(m * n), NAN);
          gemm_bf16(a.data.data(), m, k, a.rs, a.cs, b.data.data(), n, b.rs, b.cs, c.data(), n);
          check_strided(c, a, b, m, k, n);
        }
  }
  set_num_threads(threads);
}

TEST_CASE("bf16 GEMM amx: odd shapes, transposed and strided operands, 1 and 2 threads, against f64") {
  if (!bf16_amx_supported()) {
    VOLT_SKIP("AMX is not available: " + amx_unavailable_reason());
  }
  PathGuard guard(Bf16Gemm::amx);
  std::mt19937 gen(21);
  // m, k, n: tails in every direction, full 32 x 32 blocks, several k-blocks
  // (k > 256) and two column blocks (n > 1024).
  check_shapes({{1, 1, 1},
                {7, 13, 5},
                {17, 33, 65},
                {100, 129, 31},
                {257, 64, 1000},
                {32, 32, 32},
                {64, 96, 48},
                {33, 31, 17},
                {16, 784, 16},
                {40, 600, 1100},
                {3, 1000, 2}},
               3, gen);
  // A row stride of C wider than n: the columns past n are left alone.
  const Strided a(45, 70, 0, gen), b(70, 37, 1, gen);
  std::vector<float> wide(size_t(45 * 40), -7.0f), c(size_t(45 * 37));
  gemm_bf16(a.data.data(), 45, 70, a.rs, a.cs, b.data.data(), 37, b.rs, b.cs, wide.data(), 40);
  int untouched = 0;
  for (int64_t i = 0; i < 45; ++i) {
    for (int64_t j = 0; j < 37; ++j) c[size_t(i * 37 + j)] = wide[size_t(i * 40 + j)];
    for (int64_t j = 37; j < 40; ++j) untouched += wide[size_t(i * 40 + j)] == -7.0f;
  }
  CHECK(untouched == 45 * 3);
  check_strided(c, a, b, 45, 70, 37);
}

TEST_CASE("bf16 GEMM amx: several column groups of B and k blocks with tails, against f64") {
  if (!bf16_amx_supported()) {
    VOLT_SKIP("AMX is not available: " + amx_unavailable_reason());
  }
  PathGuard guard(Bf16Gemm::amx);
  std::mt19937 gen(23);
  // The kernel packs B in column groups of about 1 MB with all of k (k = 1030:
  // 33 chunks of 32, 15 panels of 32 columns a group, so n = 500 makes 2
  // groups of 256 and 244 columns) and walks k in blocks whose last one is
  // short (1030 is no multiple of 32 or of a block); m of 1 row, of 33 (a
  // 1-row tail block), k of 1 across one wide group.
  check_shapes({{33, 1030, 500}, {1, 1030, 500}, {2, 1, 3000}, {48, 2100, 40}}, 2, gen);
}

TEST_CASE("bf16 GEMM amx: equal to the dpbf16 path within the order of summation") {
  if (!bf16_amx_supported() || !bf16_dot_supported()) {
    VOLT_SKIP("AMX or AVX512_BF16 is not available");
  }
  std::mt19937 gen(22);
  for (auto [m, k, n] : {std::array<int64_t, 3>{70, 515, 130}, {8, 784, 784}, {784, 8, 784}}) {
    for (int la = 0; la < 2; ++la) {
      CAPTURE(m);
      CAPTURE(k);
      CAPTURE(n);
      CAPTURE(la);
      const Strided a(m, k, la, gen), b(k, n, 1 - la, gen);
      std::vector<float> c_amx(size_t(m * n)), c_dp(size_t(m * n));
      {
        PathGuard g(Bf16Gemm::amx);
        gemm_bf16(a.data.data(), m, k, a.rs, a.cs, b.data.data(), n, b.rs, b.cs, c_amx.data(), n);
      }
      {
        PathGuard g(Bf16Gemm::dpbf16);
        gemm_bf16(a.data.data(), m, k, a.rs, a.cs, b.data.data(), n, b.rs, b.cs, c_dp.data(), n);
      }
      check_strided(c_amx, a, b, m, k, n, &c_dp);
    }
  }
}

TEST_CASE("bf16 GEMM: the amx and dpbf16 paths and the forced f32 fallback agree, at 1 and 2 threads") {
  std::vector<Bf16Gemm> fast;
  if (bf16_dot_supported()) fast.push_back(Bf16Gemm::dpbf16);
  if (bf16_amx_supported()) fast.push_back(Bf16Gemm::amx);
  if (fast.empty()) {
    VOLT_SKIP("this CPU has neither AVX512_BF16 nor AMX");
  }
  const int threads = num_threads();
  manual_seed(12);
  const Tensor a = randn({70, 515}, kBF16), b = randn({515, 130}, kBF16), x = randn({3, 5, 515}, kBF16);
  const Tensor bias = randn({130}, kBF16);
  for (Bf16Gemm p : fast)
    for (int t : {1, 2}) {
      CAPTURE(bf16_gemm_name(p));
      CAPTURE(t);
      set_num_threads(t);
      Tensor c_fast, c_f32, l_fast, l_f32;
      {
        PathGuard g(p);
        c_fast = matmul(a, b);
        l_fast = linear(x, b.t(), bias);
      }
      {
        PathGuard g(Bf16Gemm::f32);
        c_f32 = matmul(a, b);
        l_f32 = linear(x, b.t(), bias);
      }
      CHECK(c_fast.dtype() == kBF16);
      CHECK(l_fast.sizes() == Shape{3, 5, 130});
      // Sums in another order round apart by at most one bf16 unit (2^-7 relative).
      for (auto [dp, f] : {std::pair{c_fast, c_f32}, std::pair{l_fast, l_f32}}) {
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

namespace {

// The bf16 GEMM's own sums (gemm_bf16, called here) plus the bias in f32,
// each rounded by the scalar rule: what a bf16 linear stores, bit for bit.
std::vector<uint16_t> linear_bits_ref(const Tensor& x2, const Tensor& w, const Tensor* bias, std::vector<float>& sums) {
  const int64_t m = x2.size(0), k = x2.size(1), n = w.size(0);
  sums.assign(static_cast<size_t>(m * n), 0.0f);
  gemm_bf16(static_cast<const BF16*>(x2.raw_data()), m, k, k, 1, static_cast<const BF16*>(w.raw_data()), n, 1, k,
            sums.data(), n);
  std::vector<uint16_t> bits(sums.size());
  const BF16* b = bias ? static_cast<const BF16*>(bias->raw_data()) : nullptr;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float& s = sums[static_cast<size_t>(i * n + j)];
      if (b) s += b[j].to_float();
      bits[static_cast<size_t>(i * n + j)] = BF16::from_float(s).bits;
    }
  return bits;
}

std::vector<uint16_t> bits_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const uint16_t*>(c.raw_data());
  return std::vector<uint16_t>(p, p + c.numel());
}

}  // namespace

TEST_CASE("bf16 linear: bias added and rows rounded in one parallel pass, bit for bit the sums rounded") {
  const int threads = num_threads();
  manual_seed(14);
  // 600 rows of 130: enough elements for the rows to be split between threads.
  const Tensor x = randn({4, 150, 70}, kBF16), w = randn({130, 70}, kBF16), bias = randn({130}, kBF16);
  const Tensor x2 = x.reshape({600, 70});
  for (Bf16Gemm p : paths())
    for (int t : {1, 2}) {
      PathGuard guard(p);
      set_num_threads(t);
      CAPTURE(bf16_gemm_name(p));
      CAPTURE(t);
      std::vector<float> ref_sums;
      const std::vector<uint16_t> with_bias = linear_bits_ref(x2, w, &bias, ref_sums);
      const Tensor y = linear(x, w, bias);
      REQUIRE(y.sizes() == Shape{4, 150, 130});
      CHECK(bits_of(y) == with_bias);
      // The epilogue's f32 sums: the same additions, not rounded.
      std::vector<float> sums(ref_sums.size());
      bf16_linear_sums(x, w, &bias, sums.data());
      CHECK(sums == ref_sums);
      const std::vector<uint16_t> without = linear_bits_ref(x2, w, nullptr, ref_sums);
      CHECK(bits_of(linear(x, w)) == without);
      CHECK(bits_of(matmul(x2, w.t())) == without);
    }
  set_num_threads(threads);
}

TEST_CASE("bf16 GEMM child: runs on the path VOLT_BF16_GEMM names" * doctest::skip()) {
  const char* want = std::getenv("VOLT_TEST_BF16_PATH");
  if (!want) return;  // only as the child of the next case
  // Linux refuses AMX's 8 KiB of tile state to a process with a signal stack
  // too small to hold it: an OS that says no.
  static char small_stack[8192];
  if (std::getenv("VOLT_TEST_SMALL_ALTSTACK")) {
    stack_t ss{};
    ss.ss_sp = small_stack;
    ss.ss_size = sizeof small_stack;
    REQUIRE(sigaltstack(&ss, nullptr) == 0);
  }
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
  // The child case in a process of its own, expecting path `want`; `value`
  // for VOLT_BF16_GEMM ("" leaves it unset).
  auto run = [&](const std::string& value, const std::string& want, bool small_altstack = false) {
    std::string cmd = "VOLT_TEST_BF16_PATH=" + want + " VOLT_LOG=gemm ";
    if (!value.empty()) cmd += "VOLT_BF16_GEMM=" + value + " ";
    if (small_altstack) cmd += "VOLT_TEST_SMALL_ALTSTACK=1 ";
    cmd += "'" + self + "' -ns '-tc=bf16 GEMM child*' 2>&1";
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
  const bool amx = bf16_amx_supported(), dot = bf16_dot_supported();
  std::vector<std::string> values = {"f32"};
  if (dot) values.push_back("dpbf16");
  if (amx) values.push_back("amx");
  values.push_back("");  // the default: the fastest this machine has
  for (const std::string& v : values) {
    const std::string want = !v.empty() ? v : amx ? "amx" : dot ? "dpbf16" : "f32";
    CAPTURE(v);
    const std::string out = run(v, want);
    CHECK_MESSAGE(out.find("Status: SUCCESS") != std::string::npos, out);
    CHECK_MESSAGE(count(out, "volt: bf16 GEMM: " + want + " (") == 1, out);
    CHECK_MESSAGE(count(out, "volt: bf16 GEMM:") == 1, out);
    CHECK_MESSAGE(count(out, "volt: AMX not used") == 0, out);
  }
  const std::string bad = run("avx", "avx");
  CHECK_MESSAGE(bad.find("VOLT_BF16_GEMM: expects amx, dpbf16 or f32, got 'avx'") != std::string::npos, bad);
  CHECK(bad.find("Status: SUCCESS") == std::string::npos);
  if (!amx) {
    const std::string forced = run("amx", "amx");
    CHECK_MESSAGE(forced.find("VOLT_BF16_GEMM: asks for amx, which is not available") != std::string::npos, forced);
    CHECK(forced.find("Status: SUCCESS") == std::string::npos);
    CHECK_THROWS_WITH_AS(set_bf16_gemm(Bf16Gemm::amx), doctest::Contains("amx path is not available"), volt::Error);
    return;
  }
  // An OS that refuses the tiles: the default falls back to dpbf16 and says
  // why once; forcing amx is an error that says why.
  const std::string fallback = dot ? "dpbf16" : "f32";
  const std::string refused = run("", fallback, true);
  CHECK_MESSAGE(refused.find("Status: SUCCESS") != std::string::npos, refused);
  CHECK_MESSAGE(count(refused, "volt: AMX not used: the OS refused the AMX tile data") == 1, refused);
  CHECK_MESSAGE(count(refused, "volt: bf16 GEMM: " + fallback + " (") == 1, refused);
  const std::string forced = run("amx", "amx", true);
  CHECK_MESSAGE(forced.find("VOLT_BF16_GEMM: asks for amx, which is not available: the OS refused") !=
                    std::string::npos,
                forced);
  CHECK(forced.find("Status: SUCCESS") == std::string::npos);
}
