// VOLT_CPU_ISA picks the GEMM kernels once per process, so it is checked in
// child processes: this test binary run again with the variable set, each
// child reporting the set it uses and checking its products against the
// naive loop in double.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <unistd.h>

#include <volt/tensor/cpu/gemm.h>
#include <volt/tensor/ops.h>
#include "tests/tensor/reference.h"

using namespace volt;
using namespace volt::testing;

namespace {

// FNV-1a over the bytes of a float tensor's values.
uint64_t bits_hash(const Tensor& t) {
  uint64_t h = 1469598103934665603ull;
  for (float f : t.to_vector<float>()) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    for (int b = 0; b < 4; ++b) h = (h ^ ((u >> (8 * b)) & 0xffu)) * 1099511628211ull;
  }
  return h;
}

struct ChildRun {
  std::string out;
  int status = -1;
};

// This test binary once more, running only the child case below, with
// VOLT_CPU_ISA set to `value` (single quotes are not allowed in it).
ChildRun run_isa_child(const std::string& value) {
  const std::string cmd = "VOLT_CPU_ISA_CHILD=1 VOLT_CPU_ISA='" + value + "' /proc/" + std::to_string(::getpid()) +
                          "/exe -ns -tc='cpu isa child*' 2>&1";
  ChildRun r;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) r.out += buf;
    r.status = ::pclose(p);
  }
  return r;
}

std::string child_field(const std::string& out, const std::string& key) {
  const size_t at = out.find("VOLT_CHILD " + key + "=");
  if (at == std::string::npos) return "";
  const size_t from = at + 12 + key.size();
  return out.substr(from, out.find('\n', from) - from);
}

}  // namespace

TEST_CASE("cpu isa child: the kernels VOLT_CPU_ISA names, against the naive loop" * doctest::skip()) {
  if (!std::getenv("VOLT_CPU_ISA_CHILD")) {
    MESSAGE("runs only as the child process of the VOLT_CPU_ISA test");
    return;
  }
  // Packed (batch 64) and skinny (batch 8) products with bias, and the ReLU
  // epilogue, as a user's first call would run them.
  Tensor x = sample({64, 300}, DType::f32, 81), w = sample({45, 300}, DType::f32, 82);
  Tensor b = sample({45}, DType::f32, 83), xs = sample({8, 300}, DType::f32, 84);
  Tensor y, ys, yr = Tensor::zeros({64, 45}, DType::f32);
  try {
    y = linear(x, w, b);
  } catch (const Error& e) {
    std::printf("VOLT_CHILD error=%s\n", e.what());
    return;
  }
  ys = linear(xs, w, b);
  cpu_linear_relu(x, w, &b, yr);
  auto plus_bias = [](double p, double q) { return p + q; };
  const Ref want = ref_zip(ref_matmul(ref_of(x), ref_of(w.t())), ref_of(b), plus_bias);
  check_close("packed x W^T + b", y, want, 1e-4, 1e-4);
  check_close("skinny x W^T + b", ys, ref_zip(ref_matmul(ref_of(xs), ref_of(w.t())), ref_of(b), plus_bias), 1e-4,
              1e-4);
  check_close("relu(x W^T + b)", yr, ref_map(want, [](double v) { return volt::testing::relu_ref(v); }), 1e-4, 1e-4);
  std::printf("VOLT_CHILD isa=%s\nVOLT_CHILD bits=%016llx\n", cpu::isa_name(cpu::isa()),
              static_cast<unsigned long long>(bits_hash(y) ^ (bits_hash(ys) * 3) ^ (bits_hash(yr) * 7)));
}

TEST_CASE("VOLT_CPU_ISA: each instruction set is forced in a new process, same bits; a bad name is an error") {
  std::string bits;
  for (cpu::Isa isa : {cpu::Isa::generic, cpu::Isa::avx2, cpu::Isa::avx512}) {
    if (!cpu::isa_supported(isa)) continue;
    const ChildRun r = run_isa_child(cpu::isa_name(isa));
    INFO(cpu::isa_name(isa) << ":\n" << r.out);
    CHECK(r.status == 0);  // the child's checks against the naive loop passed
    CHECK(child_field(r.out, "isa") == cpu::isa_name(isa));
    const std::string got = child_field(r.out, "bits");
    CHECK(got.size() == 16);
    if (bits.empty()) bits = got;
    CHECK(got == bits);  // every set gives the same bits
  }
  // An instruction set this CPU lacks, where there is one.
  for (cpu::Isa isa : {cpu::Isa::avx2, cpu::Isa::avx512})
    if (!cpu::isa_supported(isa)) {
      const ChildRun r = run_isa_child(cpu::isa_name(isa));
      INFO(r.out);
      CHECK(child_field(r.out, "error").find("which this CPU does not have") != std::string::npos);
    }
  // A name volt does not know: the first product says so, naming the variable.
  const ChildRun r = run_isa_child("avx1024");
  INFO(r.out);
  const std::string err = child_field(r.out, "error");
  CHECK(err.find("VOLT_CPU_ISA") != std::string::npos);
  CHECK(err.find("expects avx512, avx2 or generic, got 'avx1024'") != std::string::npos);
  CHECK(child_field(r.out, "isa").empty());
}
