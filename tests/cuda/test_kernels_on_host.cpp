// The CUDA backend's generated kernels, run on the CPU.  The very sources the
// GPU compiles (prelude included) are built by the host C++ compiler behind a
// few definitions that make one "thread" walk the whole grid-stride loop, and
// are called with the parameter arrays the backend packs for cudaLaunchKernel
// (prepare_elementwise, prepare_reduce).  Every result is checked against the
// CPU backend, so the code generator, the operand packing (broadcast strides,
// scalars, strided outputs) and the kernels' semantics are tested without a GPU.
// (The block-wide tree of the reductions needs real threads: test_cuda_ops.cpp.)
#include <doctest/doctest.h>

#ifdef VOLT_WITH_CUDA
#include <dlfcn.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include <volt/jit/codegen.h>
#include <volt/jit/cuda/executors.h>
#include <volt/jit/jit.h>
#include <volt/nn/optim.h>
#include <volt/tensor/cuda/backend.h>
#include <volt/tensor/cuda/kernels.h>
#include <volt/tensor/cuda/nvrtc.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include <volt/math_functions_source.h>

using namespace volt;

namespace {

// What the CUDA built-ins mean when one host thread runs a block of one thread.
const char* kHostShim = R"volt(#include <cmath>
#include <cstddef>
#include <type_traits>
#include <utility>
#define __global__
#define __device__
#define __shared__ static
struct volt_dim3 { unsigned x, y, z; };
static const volt_dim3 threadIdx{0, 0, 0}, blockDim{1, 1, 1}, gridDim{1, 1, 1};
static volt_dim3 blockIdx{0, 0, 0};
static inline void __syncthreads() {}
extern "C" void volt_set_block(unsigned x, unsigned y) { blockIdx.x = x; blockIdx.y = y; }
// cudaLaunchKernel's convention: p[i] points at the value of parameter i.
template <class... A, std::size_t... I>
void volt_call_impl(void (*f)(A...), void** p, std::index_sequence<I...>) {
  f(*static_cast<std::remove_reference_t<A>*>(p[I])...);
}
template <class... A>
void volt_call(void (*f)(A...), void** p) { volt_call_impl(f, p, std::index_sequence_for<A...>{}); }
#define VOLT_WRAP(name) extern "C" void call_##name(void** p) { volt_call(name, p); }
)volt";

using Launch = void (*)(void**);

// Builds every kernel once with the host compiler and looks kernels up by name.
class HostKernels {
 public:
  void add(const std::string& name, const std::string& body) {
    if (bodies_.emplace(name, body).second) order_.push_back(name);
  }
  // `prelude`: the eager kernels' (cuda::prelude) or the jit's fused kernels' (jit::cuda_prelude).
  bool build(const std::string& prelude = cuda::prelude()) {
    namespace fs = std::filesystem;
    std::string src = std::string(kHostShim) + kMathFunctionsSource + prelude;
    for (const std::string& n : order_) src += bodies_[n] + "\nVOLT_WRAP(" + n + ")\n";
    // A fresh path each time: dlopen hands back an already loaded library by name.
    static int count = 0;
    dir_ = fs::temp_directory_path() /
           ("volt_host_kernels_" + std::to_string(::getpid()) + "_" + std::to_string(count++));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "k.cpp") << src;
    std::string cmd = std::string(VOLT_CXX_COMPILER) + " -std=c++17 -O1 -ffp-contract=off -shared -fPIC -w -o " +
                      (dir_ / "k.so").string() + " " + (dir_ / "k.cpp").string() + " 2>&1";
    std::string log;
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
      char buf[512];
      while (std::fgets(buf, sizeof buf, p)) log += buf;
      ::pclose(p);
    }
    handle_ = ::dlopen((dir_ / "k.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) MESSAGE("host compiler unusable: " << log.substr(0, 2000));
    return handle_ != nullptr;
  }
  Launch get(const std::string& name) const {
    return reinterpret_cast<Launch>(::dlsym(handle_, ("call_" + name).c_str()));
  }
  void set_block(unsigned x, unsigned y) const {
    reinterpret_cast<void (*)(unsigned, unsigned)>(::dlsym(handle_, "volt_set_block"))(x, y);
  }
  ~HostKernels() {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

 private:
  std::map<std::string, std::string> bodies_;
  std::vector<std::string> order_;
  std::filesystem::path dir_;
  void* handle_ = nullptr;
};

// bf16 and f16 included: loaded into float and rounded once on store, as the
// CPU backend computes them, so they match it bit for bit.
constexpr DType kAll[] = {DType::b8, DType::u8, DType::i32, DType::i64, DType::f32, DType::f64, DType::bf16, DType::f16};

Tensor random_of(DType dt, const Shape& shape) {
  if (is_floating(dt)) return add(mul(Tensor::rand(shape, DType::f64), 1.5), 0.5).to(dt);  // [0.5, 2)
  if (dt == DType::b8) return lt(Tensor::rand(shape), 0.5);
  return Tensor::randint(1, dt == DType::u8 ? 4 : 6, shape, dt);  // u8: no pow overflow
}

// got against want, elementwise; NaN matches NaN.
void check_same(const std::string& label, const Tensor& got, const Tensor& want, double rtol) {
  INFO(label);
  REQUIRE(got.sizes() == want.sizes());
  REQUIRE(got.dtype() == want.dtype());
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  size_t bad = g.size();
  for (size_t i = 0; i < g.size() && bad == g.size(); ++i)
    if (!(std::isnan(g[i]) && std::isnan(w[i])) && !(g[i] == w[i]) &&
        !(std::fabs(g[i] - w[i]) <= rtol * std::fabs(w[i])))
      bad = i;
  CHECK_MESSAGE(bad == g.size(), label << ": element " << bad << " got " << (bad < g.size() ? g[bad] : 0)
                                       << " want " << (bad < w.size() ? w[bad] : 0));
}

struct EwCase {
  std::string label;
  OpCall call;
  Tensor out, out_view;  // out_view: where the kernel writes (out or a strided view of it)
  std::unique_ptr<cuda::ElementwiseLaunch> launch;
};

}  // namespace

TEST_CASE("cuda kernels on the host: every elementwise op, packed as for the GPU, matches the CPU backend") {
  manual_seed(31);
  std::vector<EwCase> cases;
  HostKernels host;
  auto add_case = [&](const std::string& label, OpCall call, bool strided_out = false) {
    std::vector<TensorMeta> m;
    try {
      m = infer_meta(call);
    } catch (const Error&) {
      return;  // the op rejects these dtypes
    }
    EwCase c;
    c.label = label + (strided_out ? " (strided out)" : "");
    c.call = std::move(call);
    if (strided_out && m[0].sizes.size() == 2) {
      c.out = Tensor::zeros({m[0].sizes[1], m[0].sizes[0]}, m[0].dtype);
      c.out_view = c.out.t();
    } else {
      c.out = c.out_view = Tensor::zeros(m[0].sizes, m[0].dtype);
    }
    c.launch = std::make_unique<cuda::ElementwiseLaunch>(cuda::prepare_elementwise(c.call, c.out_view));
    host.add(cuda::elementwise_name(c.launch->spec), cuda::elementwise_source(c.launch->spec));
    cases.push_back(std::move(c));
  };
  for (int i = 0; i < static_cast<int>(OpId::kCount); ++i) {
    const OpId op = static_cast<OpId>(i);
    for (DType dt : kAll) {
      const std::string base = std::string(op_name(op)) + " " + dtype_name(dt);
      Tensor a = random_of(dt, {6, 5}), b = random_of(dt, {6, 5});
      Tensor at = random_of(dt, {5, 6}).t();
      Tensor row = random_of(dt, {5});
      Tensor cond = random_of(DType::b8, {6, 5});
      switch (op_info(op).kind) {
        case OpKind::Unary:
          add_case(base, OpCall{op, {a}, {}});
          add_case(base + " transposed", OpCall{op, {at}, {}}, true);
          break;
        case OpKind::Binary:
        case OpKind::Compare:
          add_case(base, OpCall{op, {a, b}, {}});
          add_case(base + " transposed", OpCall{op, {at, b}, {}}, true);
          add_case(base + " broadcast", OpCall{op, {row, a}, {}});
          add_case(base + " int scalar", OpCall{op, {a, Value(2)}, {}});
          add_case(base + " float scalar first", OpCall{op, {Value(1.5), at}, {}});
          add_case(base + " with f32", OpCall{op, {a, random_of(DType::f32, {6, 5})}, {}});
          add_case(base + " zero-dim CPU tensor", OpCall{op, {a, random_of(dt, {})}, {}});
          break;
        case OpKind::Ternary:
          add_case(base, OpCall{op, {cond, a, b}, {}});
          add_case(base + " broadcast", OpCall{op, {cond, row, at}, {}}, true);
          add_case(base + " scalar", OpCall{op, {cond.t().t(), a, Value(0.0)}, {}});
          break;
        case OpKind::Convert:
          for (DType to : kAll) {
            OpCall c{op, {at}, {}};
            c.attrs.dtype = to;
            add_case(base + " to " + dtype_name(to), c, to == DType::f32);
          }
          break;
        case OpKind::Copy:
          add_case(base + " transposed", OpCall{op, {at}, {}}, true);
          break;
        default:
          break;
      }
    }
  }
  MESSAGE(cases.size() << " cases");
  CHECK(cases.size() > 300);
  REQUIRE(host.build());
  for (EwCase& c : cases) {
    Launch f = host.get(cuda::elementwise_name(c.launch->spec));
    REQUIRE(static_cast<bool>(f));
    std::vector<void*> params = c.launch->params();
    f(params.data());
    Tensor want = run_prim(c.call)[0];
    // The host compiler runs the same libm as the CPU backend: equal, up to
    // rounding of the few expressions the two write differently.
    check_same(c.label, c.out_view, want, want.dtype() == DType::f32 ? 1e-6 : 1e-14);
  }
}

TEST_CASE("cuda kernels on the host: reductions, uniform, fill and the fused optimizers") {
  manual_seed(32);
  HostKernels host;
  struct RCase {
    std::string label;
    OpCall call;
    Tensor out, rows;
    cuda::ReduceLaunch r;
  };
  std::vector<RCase> rcases;
  auto add_reduce = [&](const std::string& label, OpId op, const Tensor& x, std::vector<int64_t> dims, bool keep) {
    OpCall c{op, {x}, {}};
    c.attrs.ints = std::move(dims);
    c.attrs.flag = keep;
    std::vector<TensorMeta> m = infer_meta(c);
    RCase rc{label, c, Tensor::zeros(m[0].sizes, m[0].dtype), Tensor(), {}};
    rc.r = cuda::prepare_reduce(c, rc.out);
    rc.rows = rc.r.rows_view.contiguous();  // what contiguous_on_device does on the GPU
    CHECK(rc.r.block >= 32);
    CHECK(rc.r.block <= 256);
    CHECK((rc.r.block & (rc.r.block - 1)) == 0);
    host.add(cuda::reduce_name(op, x.dtype(), m[0].dtype), cuda::reduce_source(op, x.dtype(), m[0].dtype));
    rcases.push_back(std::move(rc));
  };
  for (DType dt : kAll) {
    Tensor x = random_of(dt, {7, 30, 3}).permute({2, 0, 1});  // [3, 7, 30], strided
    for (OpId op : {OpId::sum, OpId::amax, OpId::amin})
      for (std::vector<int64_t> dims : {std::vector<int64_t>{0}, {1}, {2}, {0, 2}, {0, 1, 2}, {}})
        for (bool keep : {false, true}) add_reduce(std::string(op_name(op)) + " " + dtype_name(dt), op, x, dims, keep);
    for (OpId op : {OpId::argmax, OpId::argmin})
      for (int64_t d : {0, 1, 2}) add_reduce(std::string(op_name(op)) + " " + dtype_name(dt), op, x, {d}, false);
    add_reduce(std::string("sum of a zero-dim ") + dtype_name(dt), OpId::sum, random_of(dt, {}), {}, false);
  }
  Tensor nan = Tensor::from_vector<float>({1, 5, NAN, 7, NAN, 2, 3, 3, 1}, {3, 3});
  for (OpId op : {OpId::amax, OpId::amin, OpId::argmax, OpId::argmin, OpId::sum})
    add_reduce(std::string(op_name(op)) + " with NaN and ties", op, nan, {1}, false);

  for (DType t : {DType::f32, DType::f64}) {
    host.add(cuda::adam_name(t), cuda::adam_source(t));
    host.add(cuda::sgd_name(t), cuda::sgd_source(t));
  }
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16}) host.add(cuda::uniform_name(t), cuda::uniform_source(t));
  for (DType t : kAll) host.add(cuda::fill_name(t), cuda::fill_source(t));
  REQUIRE(host.build());

  int in_place_cases = 0;
  for (RCase& c : rcases) {
    Launch f = host.get(cuda::reduce_name(c.call.op, c.call.args[0].tensor.dtype(), c.out.dtype()));
    REQUIRE(static_cast<bool>(f));
    void* xp = c.rows.raw_data();
    void* yp = c.out.raw_data();
    long long row_stride = c.r.len, elem_stride = 1;  // the contiguous copy's
    void* params[] = {&xp, &yp, &c.r.rows, &c.r.len, &row_stride, &elem_stride};
    f(params);
    Tensor want = run_prim(c.call)[0];
    check_same(c.label, c.out, want, 1e-6);
    if (c.r.in_place) {  // and reading the input where it lies, as the GPU does then
      Tensor again = Tensor::zeros(c.out.sizes(), c.out.dtype());
      void* xq = c.r.rows_view.raw_data();
      void* yq = again.raw_data();
      void* in_place[] = {&xq, &yq, &c.r.rows, &c.r.len, &c.r.row_stride, &c.r.elem_stride};
      f(in_place);
      check_same(c.label + " (in place)", again, want, 1e-6);
      ++in_place_cases;
    }
  }
  CHECK(in_place_cases > 0);

  // uniform: the same bits as the CPU for the same (seed, offset); bf16 and
  // f16 over a range whose top the rounded draws would reach, then clamp.
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    const double lo = is_half(t) ? 0.0 : -1, hi = is_half(t) ? 1.0 : 3;
    Tensor got = Tensor::zeros({1000}, t);
    void* o = got.raw_data();
    long long n = 1000;
    unsigned long long seed = 0x1234567890ull, offset = 6272;
    float lo32 = static_cast<float>(lo), hi32 = static_cast<float>(hi), bottom = 0, top = 0;
    double lo64 = lo, hi64 = hi;
    if (is_half(t)) cuda::half_bounds(t, lo, hi, bottom, top);
    void* params[] = {&o, &n, &seed, &offset, t == DType::f64 ? static_cast<void*>(&lo64) : &lo32,
                      t == DType::f64 ? static_cast<void*>(&hi64) : &hi32, &bottom, &top};
    host.get(cuda::uniform_name(t))(params);
    Tensor want = uniform_philox({1000}, lo, hi, t, kCPU, seed, offset);
    CHECK(got.to_vector<double>() == want.to_vector<double>());
    if (is_half(t)) CHECK(got.to_vector<double>() != Tensor::zeros({1000}, t).to_vector<double>());
  }

  for (DType t : kAll) {
    Tensor got = Tensor::zeros({37}, t);
    void* o = got.raw_data();
    long long n = 37;
    double v = 3.0;
    void* params[] = {&o, &n, &v};
    host.get(cuda::fill_name(t))(params);
    check_same(std::string("fill ") + dtype_name(t), got, Tensor::full({37}, 3.0, t), 0);
  }

  // Adam, one step from zero moments, against nn::Adam on the CPU.  The table
  // mirrors tensor/cuda/optim.cpp's (its size is asserted on both sides).
  {
    struct Slot {
      float *p;
      const float* g;
      float *m, *v;
      long long n;
      float neg_step_size, bias_correction2_sqrt;
    };
    struct Table {
      Slot s[24];
    } table{};
    std::vector<Tensor> ps{Tensor::randn({50}), Tensor::randn({7, 3})}, gs{Tensor::randn({50}), Tensor::randn({7, 3})};
    std::vector<Tensor> mine, ms, vs;
    const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
    for (size_t i = 0; i < ps.size(); ++i) {
      mine.push_back(ps[i].clone());
      ms.push_back(Tensor::zeros(ps[i].sizes()));
      vs.push_back(Tensor::zeros(ps[i].sizes()));
      table.s[i] = {mine[i].data_ptr<float>(), gs[i].data_ptr<float>(), ms[i].data_ptr<float>(), vs[i].data_ptr<float>(),
                    mine[i].numel(), static_cast<float>(-lr / (1 - b1)), static_cast<float>(std::sqrt(1 - b2))};
    }
    float omb1 = static_cast<float>(1 - b1), fb2 = static_cast<float>(b2), omb2 = static_cast<float>(1 - b2),
          fwd = static_cast<float>(wd), feps = static_cast<float>(eps);
    void* params[] = {&table, &omb1, &fb2, &omb2, &fwd, &feps};
    for (unsigned y = 0; y < ps.size(); ++y) {  // blockIdx.y picks the parameter
      host.set_block(0, y);
      host.get(cuda::adam_name(DType::f32))(params);
    }
    host.set_block(0, 0);
    std::vector<Tensor> ref;
    for (size_t i = 0; i < ps.size(); ++i) {
      ref.push_back(ps[i].clone().requires_grad_());
      ref.back().set_grad(gs[i]);
    }
    nn::Adam opt(ref, {.lr = lr, .beta1 = b1, .beta2 = b2, .eps = eps, .weight_decay = wd});
    opt.step();
    for (size_t i = 0; i < ps.size(); ++i) {
      check_same("Adam parameter " + std::to_string(i), mine[i], ref[i].detach(), 1e-6);
      check_same("Adam exp_avg " + std::to_string(i), ms[i], opt.exp_avg(i), 1e-6);
    }
  }
  // SGD with momentum and weight decay, two steps, against nn::SGD.
  {
    struct Slot {
      double *p;
      const double* g;
      double* buf;
      long long n;
      int first_step;
    };
    struct Table {
      Slot s[32];
    } table{};
    Tensor p = Tensor::randn({40}, DType::f64), g = Tensor::randn({40}, DType::f64);
    Tensor mine = p.clone(), buf = Tensor::zeros({40}, DType::f64);
    double lr = 0.1, mom = 0.9, wd = 0.01;
    void* params[] = {&table, &lr, &mom, &wd};
    Tensor ref = p.clone().requires_grad_();
    nn::SGD opt({ref}, {.lr = lr, .momentum = mom, .weight_decay = wd});
    for (int step = 0; step < 2; ++step) {
      table.s[0] = {mine.data_ptr<double>(), g.data_ptr<double>(), buf.data_ptr<double>(), 40, step == 0};
      host.get(cuda::sgd_name(DType::f64))(params);
      ref.set_grad(g);
      opt.step();
    }
    check_same("SGD parameter", mine, ref.detach(), 1e-14);
  }
}

TEST_CASE("cuda kernels on the host: a jit fusion through VOLT_KERNEL/VOLT_LOOP and the argument table") {
  // x -> dropout(relu(2x + 1)) twice, each with its own draw: two regions of one shape.
  auto fn = [](const std::vector<Tensor>& in) {
    Tensor h = dropout(relu(add(mul(in[0], 2.0), 1.0)), 0.25, true);
    Tensor y = matmul(h, in[1]);
    return std::vector<Tensor>{dropout(relu(y), 0.5, true)};
  };
  auto jf = jit::jit(fn, {"x", "w"});
  manual_seed(77);
  Tensor x = Tensor::randn({16, 24}), w = Tensor::randn({24, 24});
  set_rng_state({99, 1000});
  Tensor want = jf({x, w}).at(0);
  std::vector<std::shared_ptr<const jit::FusedKernel>> kernels = jit::last_kernels(jf);
  REQUIRE(kernels.size() == 2);
  HostKernels host;
  std::vector<unsigned long long> bases;
  for (const auto& k : kernels) {
    bases.push_back(k->rng_base);
    host.add(k->symbol, k->body);  // the function NVRTC compiles, under its own name
  }
  CHECK(bases[0] == 0);
  CHECK(bases[1] == 16 * 24);  // the second draw starts after the first
  REQUIRE(host.build(jit::cuda_prelude()));
  // Regions in order, as the nvrtc executor launches them: inputs then outputs in the table.
  cuda::KernelArgs table{};
  Tensor h = Tensor::empty({16, 24});
  table.p[0] = x.data_ptr<float>();
  table.p[1] = h.data_ptr<float>();
  long long n = 16 * 24;
  unsigned long long seed = 99, offset = 1000 + bases[0];
  void* params[] = {&n, &table, &seed, &offset};
  host.get(kernels[0]->symbol)(params);
  Tensor y = matmul(h, w), got = Tensor::empty({16, 24});
  table.p[0] = y.data_ptr<float>();
  table.p[1] = got.data_ptr<float>();
  offset = 1000 + bases[1];
  host.get(kernels[1]->symbol)(params);
  check_same("jit fusions run through the CUDA macros", got, want, 1e-5);
}
#endif  // VOLT_WITH_CUDA
