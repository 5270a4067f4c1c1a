#include <volt/jit/cuda/executors.h>

#include <algorithm>
#include <mutex>
#include <regex>
#include <unordered_map>

#include <volt/jit/cuda/step_graph.h>
#include <volt/jit/fusion.h>
#include <volt/tensor/cuda/backend.h>
#include <volt/tensor/cuda/graph.h>
#include <volt/tensor/cuda/nvrtc.h>
#include <volt/tensor/cuda/runtime.h>
#include <volt/tensor/identifiers.h>

namespace volt::jit::cuda {

namespace vc = volt::cuda;

namespace {

bool all_cuda(const BoundSymbol& p) {
  for (const Tensor& o : p.outputs)
    if (!o.device().is_cuda()) return false;
  for (const Value& v : p.call.args)
    if (v.is_tensor && v.tensor.defined() && !v.tensor.device().is_cuda()) return false;
  return true;
}

// What a compiled fusion needs at run time.
struct Compiled {
  std::shared_ptr<FusedKernel> pin;  // keeps the FusedKernel (the map's key) alive
  std::string source;                // the body with its Philox offsets relative to `base`
  unsigned long long base = 0;       // added to the program's offset at launch
  std::string key;                   // canonical_key of `source`
  cudaKernel_t kernel = nullptr;
};

}  // namespace

std::string relative_offsets(const std::string& src, unsigned long long* base) {
  static const std::string kMark = "rng_offset + ";
  std::vector<std::pair<size_t, size_t>> spans;  // digits of each constant
  unsigned long long lo = ~0ull;
  for (size_t at = src.find(kMark); at != std::string::npos; at = src.find(kMark, at + 1)) {
    size_t b = at + kMark.size(), e = b;
    while (e < src.size() && std::isdigit(static_cast<unsigned char>(src[e]))) ++e;
    if (e == b || src.compare(e, 3, "ULL") != 0) continue;
    spans.push_back({b, e});
    lo = std::min(lo, std::stoull(src.substr(b, e - b)));
  }
  *base = spans.empty() ? 0 : lo;
  std::string out;
  size_t prev = 0;
  for (auto [b, e] : spans) {
    out += src.substr(prev, b - prev) + std::to_string(std::stoull(src.substr(b, e - b)) - lo);
    prev = e;
  }
  return out + src.substr(prev);
}

namespace {

class NvrtcExecutor final : public FusionExecutor {
 public:
  NvrtcExecutor() : FusionExecutor("nvrtc", VOLT_VERSION) {}

  bool can_fuse(const BoundSymbol& p) const override {
    return p.call.op != OpId::custom && is_elementwise(p.call.op) && all_cuda(p);
  }
  std::string prefix() const override { return "nvrtcFusion"; }

  void generate(BoundSymbol& f, const ProxyNames& names) const override {
    // The body cpu-fusion writes, unchanged: one code generator for both devices.
    cpu_fusion_executor().generate(f, names);
    Compiled c;
    c.pin = f.kernel;
    c.source = relative_offsets(f.kernel->source, &c.base);
    c.key = canonical_key(c.source);
    std::lock_guard<std::mutex> lock(mutex_);
    compiled_[f.kernel.get()] = std::move(c);
  }

  bool compile(Trace& t) const override {
    if (!vc::is_available()) return false;
    for (BoundSymbol& b : t.bsyms) {
      if (b.executor != this || !b.kernel) continue;
      // The table's last slot is the Philox word (tensor/cuda/graph.h).
      if (b.fusion_inputs.size() + b.outputs.size() >= static_cast<size_t>(vc::kMaxKernelArgs)) continue;
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = compiled_.find(b.kernel.get());
      if (it == compiled_.end() || it->second.kernel) continue;
      const int dev = b.outputs.front().device().index;
      const std::string key = it->second.key + "@" + std::to_string(dev);
      if (auto k = by_key_.find(key); k != by_key_.end()) {
        it->second.kernel = k->second;  // an identical region compiled before
        ++stats_.shared;
        continue;
      }
      it->second.kernel = vc::get_kernel(cuda_source(it->second.source), b.kernel->name, dev);
      by_key_[key] = it->second.kernel;
      ++stats_.kernels;
    }
    return true;
  }

  std::vector<Tensor> run(const BoundSymbol& f, const std::vector<Tensor>& inputs,
                          const PhiloxState& rng) const override {
    cudaKernel_t kernel = nullptr;
    unsigned long long base = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (auto it = compiled_.find(f.kernel.get()); it != compiled_.end()) {
        kernel = it->second.kernel;
        base = it->second.base;
      }
    }
    if (!kernel) return run_prims(f, inputs, rng);
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
    long long n = static_cast<long long>(f.subsymbols.front().outputs.front().numel());
    unsigned long long seed = rng.seed, offset = rng.offset + base;
    void* params[] = {&n, &table, &seed, &offset};
    vc::launch(kernel, f.outputs.front().device().index, n, params);
    return outs;
  }

 private:
  // Without a compiled kernel (too many arguments): the region's prims one by one.
  static std::vector<Tensor> run_prims(const BoundSymbol& f, const std::vector<Tensor>& inputs,
                                       const PhiloxState& rng) {
    std::unordered_map<int64_t, Tensor> regs;
    for (size_t i = 0; i < inputs.size(); ++i) regs[id_of(f.fusion_inputs[i])] = inputs[i];
    for (const BoundSymbol& p : f.subsymbols) {
      OpCall c = p.call;
      for (Value& v : c.args)
        if (v.is_tensor && v.tensor.defined()) v.tensor = regs.at(id_of(v.tensor));
      if (op_info(c.op).kind == OpKind::Random) {
        c.attrs.seed = rng.seed;
        c.attrs.offset += rng.offset;
      }
      std::vector<Tensor> outs = run_eager(c);
      for (size_t i = 0; i < outs.size(); ++i) regs[id_of(p.outputs[i])] = outs[i];
    }
    std::vector<Tensor> r;
    for (const Tensor& o : f.outputs) r.push_back(regs.at(id_of(o)));
    return r;
  }

  mutable std::mutex mutex_;
  mutable std::unordered_map<const FusedKernel*, Compiled> compiled_;
  mutable std::unordered_map<std::string, cudaKernel_t> by_key_;
  mutable NvrtcStats stats_;
  friend NvrtcStats volt::jit::cuda::nvrtc_stats();
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

// Added to the jit's built-in executors only where a GPU answers.
struct Registrar {
  Registrar() {
    if (!vc::is_available()) return;
    add_builtin_executor(cublas_executor());
    add_builtin_executor(nvrtc_executor());
  }
} g_registrar;

}  // namespace

FusionExecutor& nvrtc_executor() { return nvrtc_impl(); }

OperatorExecutor& cublas_executor() {
  static CublasExecutor e;
  return e;
}

NvrtcStats nvrtc_stats() {
  std::lock_guard<std::mutex> lock(nvrtc_impl().mutex_);
  return nvrtc_impl().stats_;
}

std::string cuda_source(const std::string& body) { return vc::prelude() + body; }

std::string canonical_key(const std::string& src) {
  // The kernel's name, and every value the body declares, in order of
  // appearance, become "fusion", v0, v1, ... (in_X and out_X follow X).
  std::unordered_map<std::string, std::string> rename;
  static const std::regex kernel_name(R"(VOLT_KERNEL\((\w+)\))");
  static const std::regex declared(R"(const (?:unsigned char|long long|bool|int|float|double)\*? (\w+) = )");
  std::smatch m;
  if (std::regex_search(src, m, kernel_name)) rename[m[1].str()] = "fusion";
  for (auto it = std::sregex_iterator(src.begin(), src.end(), declared); it != std::sregex_iterator(); ++it) {
    std::string n = (*it)[1].str();
    for (const char* p : {"in_", "out_"})
      if (n.rfind(p, 0) == 0) n = n.substr(std::string(p).size());
    if (!rename.count(n)) rename[n] = "v" + std::to_string(rename.size());
  }
  // Output pointers are declared without const.
  static const std::regex out_ptr(R"(\* out_(\w+) = )");
  for (auto it = std::sregex_iterator(src.begin(), src.end(), out_ptr); it != std::sregex_iterator(); ++it)
    if (!rename.count((*it)[1].str())) rename[(*it)[1].str()] = "v" + std::to_string(rename.size());
  return map_identifiers(src, [&](std::string id) {
    std::string prefix;
    for (const char* p : {"in_", "out_"})
      if (id.rfind(p, 0) == 0 && rename.count(id.substr(std::string(p).size()))) {
        prefix = p;
        id = id.substr(prefix.size());
      }
    auto it = rename.find(id);
    return prefix + (it != rename.end() ? it->second : id);
  });
}

}  // namespace volt::jit::cuda
