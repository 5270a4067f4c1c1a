#include <volt/jit/cuda/executors.h>

#include <chrono>
#include <mutex>
#include <unordered_map>

#include <volt/jit/codegen.h>
#include <volt/jit/flash_attention.h>
#include <volt/jit/cuda/step_graph.h>
#include <volt/jit/fusion.h>
#include <volt/jit/kernel_cache.h>
#include <volt/tensor/cuda/backend.h>
#include <volt/tensor/cuda/graph.h>
#include <volt/tensor/cuda/nvrtc.h>
#include <volt/tensor/cuda/runtime.h>

namespace volt::jit::cuda {

namespace vc = volt::cuda;

namespace {

static_assert(kMaxKernelArgs == vc::kMaxKernelArgs, "the generated volt_args table matches KernelArgs");

bool all_cuda(const BoundSymbol& p) {
  for (const Tensor& o : p.outputs)
    if (!o.device().is_cuda()) return false;
  for (const Value& v : p.call.args)
    if (v.is_tensor && v.tensor.defined() && !v.tensor.device().is_cuda()) return false;
  return true;
}

class NvrtcExecutor final : public FusionExecutor {
 public:
  NvrtcExecutor() : FusionExecutor("nvrtc", VOLT_VERSION) {}

  bool can_fuse(const BoundSymbol& p) const override {
    return fusible_prim(p) && all_cuda(p);
  }
  std::string prefix() const override { return "nvrtcFusion"; }

  // Regions with equal keys (jit/codegen.h) share one kernel per device.
  bool compile(Trace& t) const override {
    if (!vc::is_available()) return false;
    std::lock_guard<std::mutex> lock(mutex_);
    for (BoundSymbol& b : t.bsyms) {
      if (b.executor != this || !b.kernel || b.kernel->device_fn) continue;
      // Too many pointers: runs prim by prim. The table's last slot is the
      // Philox word (tensor/cuda/graph.h).
      if (b.kernel->args >= kMaxKernelArgs) continue;
      const int dev = b.outputs.front().device().index;
      auto [it, fresh] = by_key_.try_emplace(b.kernel->key + "@" + std::to_string(dev), nullptr);
      if (fresh) {
        const std::string source = cuda_source(*b.kernel);
        const vc::CompileCounters before = vc::compile_counters();
        const auto t0 = std::chrono::steady_clock::now();
        try {
          it->second = vc::get_kernel(source, b.kernel->symbol, dev);
        } catch (...) {
          by_key_.erase(it);
          throw;
        }
        ++stats_.kernels;
        // For reports (jit/inspect/report.h): how this kernel was built.
        const vc::CompileCounters after = vc::compile_counters();
        KernelLoad load;
        load.names = {b.kernel->symbol};
        load.source = source;
        load.outcome = after.compiled > before.compiled    ? "compiled"
                       : after.disk_hits > before.disk_hits ? "disk cache"
                                                            : "loaded already";
        load.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        load.library = "cuda:" + std::to_string(dev);
        load.compiler = "NVRTC";
        note_kernel_load(std::move(load));
      } else {
        ++stats_.shared;
      }
      b.kernel->device_fn = it->second;
    }
    return true;
  }

  bool compiled(const BoundSymbol& f) const override { return f.kernel && f.kernel->device_fn; }

  std::vector<Tensor> run_fusion(const BoundSymbol& f, const std::vector<Tensor>& inputs,
                                 const PhiloxState& rng) const override {
    vc::KernelArgs table{};
    std::vector<Tensor> keep;
    keep.reserve(inputs.size());
    int k = 0;
    for (const Tensor& in : inputs) {
      VOLT_CHECK(in.device().is_cuda(), f.fusion_name, "expected CUDA tensors, got " << in.meta_str());
      keep.push_back(vc::contiguous_on_device(in));
      table.p[k++] = keep.back().raw_data();
    }
    std::vector<Tensor> outs;
    outs.reserve(f.outputs.size());
    for (const Tensor& o : f.outputs) {
      const Tensor* into = donated_output(id_of(o));  // a captured step's state
      outs.push_back(into ? *into : Tensor::empty(o.sizes(), o.dtype(), o.device()));
      table.p[k++] = outs.back().raw_data();
    }
    table.p[vc::kMaxKernelArgs - 1] = vc::rng_state_word();
    long long n = f.kernel->extent;
    unsigned long long seed = rng.seed, offset = rng.offset + f.kernel->rng_base;
    void* params[] = {&n, &table, &seed, &offset};
    const int dev = f.outputs.front().device().index;
    const auto fn = static_cast<cudaKernel_t>(f.kernel->device_fn);
    if (f.kernel->row_len > 0) {  // a block per row
      const unsigned threads = row_kernel_threads(f.kernel->row_len);
      vc::launch(fn, dev, n * threads, params, threads);
    } else {
      vc::launch(fn, dev, n, params);
    }
    return outs;
  }

  KernelStats kernel_stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

 private:
  mutable std::mutex mutex_;
  mutable std::unordered_map<std::string, cudaKernel_t> by_key_;  // key@device -> kernel
  mutable KernelStats stats_;
};

NvrtcExecutor& nvrtc_impl() {
  static NvrtcExecutor e;
  return e;
}

// linear/matmul run by cuBLAS (tensor/cuda/matmul.cpp) as ops of their own,
// so the trace says who runs them.
class CublasExecutor final : public OperatorExecutor {
 public:
  CublasExecutor() : OperatorExecutor("cublas", VOLT_VERSION) {
    for (OpId op : {OpId::linear, OpId::matmul}) {
      const std::string name = std::string("cublas_") + op_name(op);
      Symbol sym = register_operator(
          name, {.like = nullptr,
                 .meta = [op](const std::vector<Value>& args) { return infer_meta(OpCall{op, args, {}}); },
                 .fn = [op](const std::vector<Value>& args) { return run_prim(OpCall{op, args, {}}); },
                 .grad = nullptr});
      register_implementation(
          op, {.checker = [](const std::vector<Value>& args) {
                 for (const Value& v : args)
                   if (v.is_tensor && v.tensor.defined() && !v.tensor.device().is_cuda()) return false;
                 return true;
               },
               .execution_transform = [sym](const std::vector<Value>& args) { return sym.call(args); },
               .grad_transform = nullptr});
    }
  }
};

// Built in wherever volt was built with CUDA: they claim only CUDA tensors,
// which exist only where a GPU answers; asking the driver here, before main,
// would start CUDA in a static constructor (compute-sanitizer then refuses
// to attach).
struct Registrar {
  Registrar() {
    add_builtin_executor(cublas_executor());
    add_builtin_executor(nvrtc_executor());
    // flash stays first: it takes attention whole, which nvrtc and cublas
    // would otherwise open for its elementwise parts and its GEMMs.
    remove_builtin_executor(flash_executor());
    add_builtin_executor(flash_executor());
  }
} g_registrar;

}  // namespace

FusionExecutor& nvrtc_executor() { return nvrtc_impl(); }

OperatorExecutor& cublas_executor() {
  static CublasExecutor e;
  return e;
}

}  // namespace volt::jit::cuda
