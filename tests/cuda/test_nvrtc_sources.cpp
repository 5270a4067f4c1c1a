// Every CUDA kernel source volt generates compiles with NVRTC to PTX for
// compute_80 and compute_90.  NVRTC needs no GPU, so this runs everywhere the
// toolkit is installed (and CI checks the one code generator without a GPU).
#include <doctest/doctest.h>

#ifdef VOLT_WITH_CUDA
#include <set>
#include <string>
#include <vector>

#include <volt/jit/codegen.h>
#include <volt/jit/cuda/executors.h>
#include <volt/jit/cuda/region_groups.h>
#include <volt/jit/jit.h>
#include <volt/nn/loss.h>
#include <volt/nn/mlp.h>
#include <volt/tensor/cuda/attention.h>
#include <volt/tensor/cuda/kernels.h>
#include <volt/tensor/cuda/nvrtc.h>
#include <volt/tensor/cuda/runtime.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

namespace {

const char* kArchs[] = {"compute_80", "compute_90"};
constexpr DType kAll[] = {DType::b8, DType::u8, DType::i32, DType::i64, DType::f32, DType::f64};

// The spec the backend would use for `call`, if the op accepts these operands.
bool add_spec(std::vector<cuda::ElementwiseSpec>& specs, const OpCall& call) {
  std::vector<TensorMeta> m;
  try {
    m = infer_meta(call);
  } catch (const Error&) {
    return false;  // the op rejects these dtypes on every device
  }
  for (bool strided : {false, true}) specs.push_back(cuda::elementwise_spec(call, m[0].dtype, strided));
  return true;
}

// Every (op, dtypes, scalar-or-tensor, contiguous-or-strided) the eager
// backend can be asked for, with a first operand of the dtypes `firsts`.
std::vector<cuda::ElementwiseSpec> every_elementwise_spec(
    std::set<std::string>* ops_seen, const std::vector<DType>& firsts = std::vector<DType>(std::begin(kAll), std::end(kAll))) {
  std::vector<cuda::ElementwiseSpec> specs;
  auto t = [](DType d) { return Value(Tensor::proxy({2, 3}, d, kCPU)); };
  for (int i = 0; i < static_cast<int>(OpId::kCount); ++i) {
    const OpId op = static_cast<OpId>(i);
    const OpKind kind = op_info(op).kind;
    bool any = false;
    for (DType a : firsts) {
      // The other operand (or the conversion's target): every dtype, the 16-bit ones with a 16-bit first.
      std::vector<DType> seconds(std::begin(kAll), std::end(kAll));
      if (is_half(a)) seconds.insert(seconds.end(), {DType::bf16, DType::f16});
      switch (kind) {
        case OpKind::Unary:
        case OpKind::Copy:
          any |= add_spec(specs, OpCall{op, {t(a)}, {}});
          break;
        case OpKind::Convert:
          for (DType b : seconds) {
            OpCall c{op, {t(a)}, {}};
            c.attrs.dtype = b;
            any |= add_spec(specs, c);
          }
          break;
        case OpKind::Binary:
        case OpKind::Compare:
          for (DType b : seconds) any |= add_spec(specs, OpCall{op, {t(a), t(b)}, {}});
          any |= add_spec(specs, OpCall{op, {t(a), Value(0.5)}, {}});
          any |= add_spec(specs, OpCall{op, {t(a), Value(2)}, {}});
          any |= add_spec(specs, OpCall{op, {Value(true), t(a)}, {}});
          break;
        case OpKind::Ternary:
          any |= add_spec(specs, OpCall{op, {t(DType::b8), t(a), t(a)}, {}});
          any |= add_spec(specs, OpCall{op, {t(DType::b8), t(a), Value(0.0)}, {}});
          break;
        default:
          break;
      }
    }
    if (any && ops_seen) ops_seen->insert(op_name(op));
  }
  return specs;
}

// One translation unit holding many kernels: one NVRTC run per architecture.
void compile_all(const std::vector<std::string>& bodies) {
  std::string src = cuda::prelude();
  for (const std::string& b : bodies) src += b + "\n";
  for (const char* arch : kArchs) {
    std::string ptx;
    CHECK_NOTHROW(ptx = cuda::compile_ptx(src, arch, /*fast_compile=*/true));
    CHECK(ptx.find(".entry") != std::string::npos);
  }
}

}  // namespace

TEST_CASE("nvrtc: every eager elementwise kernel source compiles for compute_80 and compute_90") {
  std::set<std::string> ops;
  std::vector<cuda::ElementwiseSpec> specs = every_elementwise_spec(&ops);
  // Every elementwise prim of the op table is covered.
  for (int i = 0; i < static_cast<int>(OpId::kCount); ++i) {
    OpKind k = op_info(static_cast<OpId>(i)).kind;
    if (k == OpKind::Unary || k == OpKind::Binary || k == OpKind::Compare || k == OpKind::Ternary ||
        k == OpKind::Convert || k == OpKind::Copy)
      CHECK_MESSAGE(ops.count(op_name(static_cast<OpId>(i))) == 1, op_name(static_cast<OpId>(i)));
  }
  std::set<std::string> names;
  std::vector<std::string> bodies;
  for (const auto& s : specs)
    if (names.insert(cuda::elementwise_name(s)).second) bodies.push_back(cuda::elementwise_source(s));
  MESSAGE(bodies.size() << " distinct elementwise kernels");
  CHECK(bodies.size() > 1000);
  compile_all(bodies);
}

TEST_CASE("nvrtc: reductions, Philox uniform, fill, cross-entropy and the fused optimizers compile") {
  std::vector<std::string> bodies;
  for (OpId op : {OpId::sum, OpId::amax, OpId::amin, OpId::argmax, OpId::argmin})
    for (DType in : kAll) {
      DType out = in;
      if (op == OpId::sum && is_integral(in, true)) out = DType::i64;
      if (op == OpId::argmax || op == OpId::argmin) out = DType::i64;
      bodies.push_back(cuda::reduce_source(op, in, out));
    }
  for (DType t : kAll) bodies.push_back(cuda::fill_source(t));
  for (DType t : {DType::f32, DType::f64}) {
    bodies.push_back(cuda::uniform_source(t));
    bodies.push_back(cuda::adam_source(t));
    bodies.push_back(cuda::sgd_source(t));
    bodies.push_back(cuda::cross_entropy_source(t, false));
    bodies.push_back(cuda::cross_entropy_source(t, true));
  }
  compile_all(bodies);
}

TEST_CASE("nvrtc: the bf16 and f16 kernels compile (elementwise with any other dtype, reductions, draws, fills)") {
  const std::vector<DType> halves{DType::bf16, DType::f16};
  std::set<std::string> ops;
  std::vector<cuda::ElementwiseSpec> specs = every_elementwise_spec(&ops, halves);
  // And every dtype converted into them.
  for (DType from : kAll)
    for (DType to : halves) {
      OpCall c{OpId::convert_element_type, {Value(Tensor::proxy({2, 3}, from, kCPU))}, {}};
      c.attrs.dtype = to;
      for (bool strided : {false, true}) specs.push_back(cuda::elementwise_spec(c, to, strided));
    }
  std::set<std::string> names;
  std::vector<std::string> bodies;
  for (const auto& s : specs)
    if (names.insert(cuda::elementwise_name(s)).second) bodies.push_back(cuda::elementwise_source(s));
  MESSAGE(bodies.size() << " distinct bf16/f16 elementwise kernels over " << ops.size() << " ops");
  CHECK(bodies.size() > 300);
  for (DType t : halves) {
    for (OpId op : {OpId::sum, OpId::amax, OpId::amin}) bodies.push_back(cuda::reduce_source(op, t, t));
    for (OpId op : {OpId::argmax, OpId::argmin}) bodies.push_back(cuda::reduce_source(op, t, DType::i64));
    bodies.push_back(cuda::uniform_source(t));
    bodies.push_back(cuda::fill_source(t));
  }
  compile_all(bodies);
  // The jit's fused kernels on bf16 and f16 (traced on the CPU: the source is
  // the same for both devices), with the conversions the CUDA source carries.
  for (DType t : halves) {
    auto f = jit::jit([](const std::vector<Tensor>& a) {
      return std::vector<Tensor>{add(mul(tanh(a[0]), a[1]), convert_element_type(exp(a[1]), DType::f32))};
    });
    f({Tensor::randn({4, 5}, t), Tensor::randn({4, 5}, t)});
    const auto kernels = jit::last_kernels(f);
    REQUIRE(kernels.size() == 1);
    const std::string src = jit::cuda_source(*kernels[0]);
    CHECK(src.find(t == DType::bf16 ? "volt_f32_to_bf16(" : "volt_f32_to_f16(") != std::string::npos);
    for (const char* arch : kArchs) CHECK_NOTHROW(cuda::compile_ptx(src, arch));
  }
}

TEST_CASE("nvrtc: the flash attention kernels compile (forward and both backward kernels, f32, f64, bf16, f16)") {
  std::vector<std::string> bodies;
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16})
    for (auto [e, ev] : {std::pair<int, int>{1, 1}, {5, 6}, {64, 64}, {128, 32}})
      for (auto w : {cuda::AttentionKernel::Forward, cuda::AttentionKernel::BackwardQuery,
                     cuda::AttentionKernel::BackwardKey})
        bodies.push_back(cuda::attention_source(t, e, ev, w));
  compile_all(bodies);
}

TEST_CASE("nvrtc: the jit's fused kernels of the MLP training step compile with the CUDA prelude") {
  manual_seed(0);
  auto net = std::make_shared<nn::MLP>(784, std::vector<int64_t>{784, 784, 784, 28, 10}, true, 0.1);
  auto jm = jit::jit(net);
  nn::CrossEntropyLoss loss_fn;
  Tensor x = Tensor::rand({8, 784});
  Tensor y = Tensor::from_vector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7});
  Tensor loss = loss_fn(jm(x), y);
  loss.backward();
  std::vector<std::shared_ptr<const jit::FusedKernel>> kernels = jit::last_kernels(jm);
  REQUIRE(kernels.size() == 10);  // five regions forward, five backward
  std::set<std::string> keys;
  std::set<unsigned long long> bases;
  std::vector<std::string> distinct;
  for (const auto& k : kernels) {
    bases.insert(k->rng_base);
    if (keys.insert(k->key).second) distinct.push_back(jit::cuda_source(*k));
  }
  // The hidden layers' regions (three 784 wide, one 28 wide) differ only in
  // names, Philox offsets and length, none of which is in the kernel: forward
  // and backward each have one kernel for the four, and one for the last layer.
  CHECK(keys.size() == 4);
  CHECK(bases.count(6272) == 1);  // the second layer's mask starts 8 * 784 counters in
  bool has_uniform = false;
  for (const std::string& src : distinct) {
    has_uniform |= src.find("volt_uniform_range_f32") != std::string::npos;
    for (const char* arch : kArchs) CHECK_NOTHROW(cuda::compile_ptx(src, arch));
  }
  CHECK(has_uniform);  // dropout's mask is drawn inside a fused kernel
}

// A group of regions launched as one kernel (jit/cuda/region_groups.h): the
// parts' kernels, made by the one code generator, as device functions of it.
TEST_CASE("nvrtc: a group of the MLP step's regions compiles as one kernel") {
  manual_seed(0);
  auto net = std::make_shared<nn::MLP>(784, std::vector<int64_t>{784, 28, 10}, true, 0.1);
  auto jm = jit::jit(net);
  nn::CrossEntropyLoss loss_fn;
  Tensor loss = loss_fn(jm(Tensor::rand({8, 784})), Tensor::from_vector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7}));
  loss.backward();
  std::vector<std::shared_ptr<const jit::FusedKernel>> kernels = jit::last_kernels(jm);
  REQUIRE(kernels.size() >= 2);
  // Each part's arguments in a table of their own, one after the other; two
  // parts with the same kernel are one device function.
  std::vector<jit::cuda::GroupPart> parts;
  int next = 0;
  for (const auto& k : {kernels[0], kernels[1], kernels[0]}) {
    jit::cuda::GroupPart p{k.get(), {}};
    for (long long j = 0; j < k->args; ++j) p.slots.push_back(next++);
    parts.push_back(p);
  }
  REQUIRE(next < jit::kMaxKernelArgs);
  const jit::FusedKernel g = jit::cuda::group_kernel(parts, "nvrtcFusion0_2");
  CHECK(g.symbol.rfind("volt_group_", 0) == 0);
  CHECK(g.extent == std::max(kernels[0]->extent, kernels[1]->extent));
  const std::string src = jit::cuda_prelude() + g.body;
  for (const char* arch : kArchs) {
    std::string ptx;
    CHECK_NOTHROW(ptx = cuda::compile_ptx(src, arch));
    CHECK(ptx.find(".entry " + g.symbol) != std::string::npos);
  }
  // The key names every part's kernel and its place in the table.
  parts[2].slots[0] = next;
  CHECK(jit::cuda::group_kernel(parts, "nvrtcFusion0_2").key != g.key);
}

TEST_CASE("nvrtc: a failing source is reported with NVRTC's log and numbered lines") {
  std::string src = "extern \"C\" __global__ void broken(float* x) {\n  x[0] = undefined_name;\n}\n";
  try {
    cuda::compile_ptx(src, "compute_80");
    FAIL("expected an error");
  } catch (const Error& e) {
    std::string what = e.what();
    CHECK(what.find("undefined_name") != std::string::npos);
    CHECK(what.find("   2    x[0] = undefined_name;") != std::string::npos);
  }
}

TEST_CASE("cuda: a CUDA build starts and answers without a GPU") {
  const bool available = cuda::is_available();
  CHECK(cuda::device_count() >= 0);
  CHECK(available == (cuda::device_count() > 0));
  if (!available) {
    MESSAGE("no CUDA GPU or driver on this machine: CUDA tensors must fail with a clear error");
    CHECK_THROWS_WITH_AS(Tensor::zeros({2}, DType::f32, Device::cuda(0)),
                         doctest::Contains("cuda:0"), Error);
  }
}

#endif  // VOLT_WITH_CUDA
