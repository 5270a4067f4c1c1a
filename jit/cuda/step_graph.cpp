#include <volt/jit/cuda/step_graph.h>

#include <cstdlib>
#include <iostream>
#include <limits>
#include <mutex>
#include <set>
#include <unordered_map>

#include <volt/jit/codegen.h>
#include <volt/jit/cuda/region_groups.h>
#include <volt/jit/step/collectives.h>
#include <volt/jit/executor.h>
#include <volt/jit/tracer.h>
#include <volt/tensor/cuda/backend.h>
#include <volt/tensor/cuda/graph.h>
#include <volt/tensor/cuda/nvrtc.h>
#include <volt/tensor/cuda/runtime.h>
#include <volt/tensor/custom_op.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include <volt/tensor/log.h>

namespace volt::jit::cuda {

namespace vc = volt::cuda;

namespace {

// nll_loss's target check and embedding's index check read their indices on
// the host, which a graph cannot do.  In a graph each becomes an op whose
// kernel notes an index out of range in the device's error word (runtime.h),
// with the check's kind (1: a class index, 2: an embedding row), reported
// with the eager check's message at the first synchronisation after the replay.
cudaKernel_t range_check_kernel(int dev) {
  return vc::cached_kernel("volt_index_range_check", dev, [] {
    return std::string(
        "extern \"C\" __global__ void volt_index_range_check(const long long* t, long long n, long long c,\n"
        "                                                    long long ignore, long long kind, long long* err) {\n"
        "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
        "       i += (long long)blockDim.x * gridDim.x) {\n"
        "    const long long k = t[i];\n"
        "    if ((k < 0 || k >= c) && k != ignore) { err[1] = k; err[2] = c; err[0] = kind; }\n"
        "  }\n"
        "}\n");
  });
}

// The device form of a host check named `host_name`, noting `kind`.
int64_t device_range_check(const std::string& host_name, long long kind) {
  static std::mutex mutex;
  static std::unordered_map<std::string, int64_t> ids;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = ids.find(host_name); it != ids.end()) return it->second;
  CustomOpDef def;
  def.name = host_name + "_on_device";
  def.meta = meta_like_first_argument(def.name);
  def.kernel = [kind](const std::vector<Value>& args) {
    const Tensor& index = args.at(0).tensor;
    const int dev = index.device().index;
    const Tensor t =
        vc::contiguous_on_device(index.dtype() == DType::i64 ? index : convert_element_type(index, DType::i64));
    cudaKernel_t k = range_check_kernel(dev);
    const void* tp = t.raw_data();
    long long n = t.numel(), c = static_cast<long long>(args.at(1).scalar.value), kd = kind;
    // cross_entropy's ignore_index (its third argument) is no error; embedding has none.
    long long ignore = args.size() > 2 ? static_cast<long long>(args.at(2).scalar.value)
                                       : std::numeric_limits<long long>::min();
    long long* err = vc::error_word(dev);
    void* params[] = {&tp, &n, &c, &ignore, &kd, &err};
    if (n > 0) vc::launch(k, dev, n, params);
    return std::vector<Tensor>{index};
  };
  const int64_t id = register_custom_op(std::move(def));
  ids[host_name] = id;
  return id;
}

// The host checks a graph replaces, and the kind each notes.
long long device_check_kind(const std::string& name) {
  if (name == "check_target_range") return 1;
  if (name == "check_embedding_index") return 2;
  return 0;
}

}  // namespace

bool has_device_check(const OpCall& call) {
  return call.op == OpId::custom && device_check_kind(op_name(call)) != 0;
}

OpCall device_check_call(const OpCall& call) {
  VOLT_CHECK(has_device_check(call), "device_check_call", "expected a host index check, got " << op_name(call));
  const std::string name = op_name(call);
  return custom_call(device_range_check(name, device_check_kind(name)), call.args);
}

namespace {

// Returns whether any check was moved onto the device (its kernel is then
// loaded before the capture starts).
bool use_device_checks(std::vector<BoundSymbol>& bsyms) {
  bool any = false;
  for (BoundSymbol& b : bsyms) {
    if (!b.is_fusion() && b.call.op == OpId::custom) {
      const std::string name = op_name(b.call);
      if (const long long kind = device_check_kind(name)) {
        b.call = custom_call(device_range_check(name, kind), b.call.args);
        any = true;
      }
    }
    any = use_device_checks(b.subsymbols) || any;
  }
  return any;
}

// Factories (arange) compute on the host and copy to the device, which a
// graph cannot record: they make the same values every step, so they run
// once, now, and their values become inputs of the program.
Trace hoist_factories(const Trace& t, std::vector<Tensor>& values) {
  Trace r = t;
  r.bsyms.clear();
  r.program = nullptr;
  for (const BoundSymbol& b : t.bsyms) {
    if ((b.is_fusion() && b.kernel) || dynamic_cast<const OperatorExecutor*>(b.executor)) {
      r.bsyms.push_back(b);
      continue;
    }
    const size_t first = r.bsyms.size();
    for (const BoundSymbol& p : flatten_to_prims(!b.is_fusion() ? std::vector<BoundSymbol>{b} : b.subsymbols)) {
      if (p.call.op != OpId::custom && tensor_args(p).empty() && op_info(p.call.op).kind != OpKind::Random) {
        NoGradGuard no_grad;
        std::vector<Tensor> made = run_eager(p.call);
        for (size_t i = 0; i < made.size(); ++i) {
          r.inputs.push_back(p.outputs.at(i));
          values.push_back(made[i]);
        }
        continue;
      }
      r.bsyms.push_back(p);
    }
    if (r.bsyms.size() > first) r.bsyms.back().del_after = b.del_after;
  }
  return r;
}

thread_local std::unordered_map<int64_t, Tensor>* t_donated = nullptr;

// The new state values a fused kernel can write over the old ones: made by
// an nvrtc fusion that reads the old value at the same element (same shape
// and dtype), with no one reading the old value, or a view of it, later.
std::unordered_map<int64_t, Tensor> donations(const Trace& t, const std::vector<Tensor>& state, size_t num_outputs,
                                              const std::vector<size_t>& updated_state) {
  std::unordered_map<int64_t, Tensor> r;
  std::unordered_map<int64_t, int> output_uses;
  for (const Tensor& o : t.outputs) ++output_uses[id_of(o)];
  for (size_t k = 0; k < updated_state.size(); ++k) {
    const Tensor& old = t.inputs.at(updated_state[k]);
    const Tensor& now = t.outputs.at(num_outputs + k);
    const int64_t old_id = id_of(old), new_id = id_of(now);
    if (output_uses[new_id] != 1 || now.sizes() != old.sizes() || now.dtype() != old.dtype()) continue;
    size_t maker = t.bsyms.size(), last_read = 0;
    bool viewed = false;
    for (size_t i = 0; i < t.bsyms.size(); ++i) {
      const BoundSymbol& b = t.bsyms[i];
      for (const Tensor& o : b.outputs)
        if (id_of(o) == new_id) maker = i;
      for (const BoundSymbol& p : flatten_to_prims({b}))
        for (const Tensor& a : tensor_args(p))
          if (id_of(a) == old_id) {
            last_read = i;
            // (a fused region stays whole here: it has no op of its own)
            viewed = viewed || (!p.is_fusion() && op_info(p.call.op).kind == OpKind::View);
          }
    }
    if (maker == t.bsyms.size() || viewed || last_read != maker) continue;
    const BoundSymbol& b = t.bsyms[maker];
    if (!b.is_fusion() || !b.kernel || b.subsymbols.empty() || b.kernel->row_len > 0) continue;
    bool reads_old = false;
    for (const Tensor& in : b.fusion_inputs) reads_old = reads_old || id_of(in) == old_id;
    // The element the kernel writes is the one it read: the region's extent
    // is the state's shape (a group's parts each have their own: the part
    // making the new value, which alone reads the old one, region_groups.h).
    const BoundSymbol* extent_of = &b.subsymbols.front();
    if (is_region_group(b))
      for (const BoundSymbol& p : b.subsymbols)
        for (const Tensor& o : p.outputs)
          if (id_of(o) == new_id) extent_of = &p;
    if (!reads_old || extent_of->outputs.front().sizes() != old.sizes()) continue;
    r[new_id] = state.at(updated_state[k]);
  }
  return r;
}

}  // namespace

Tensor* donated_output(int64_t id) {
  if (!t_donated) return nullptr;
  auto it = t_donated->find(id);
  return it == t_donated->end() ? nullptr : &it->second;
}

struct StepGraph::Impl {
  vc::Graph graph;
  int device = 0;
  std::vector<Tensor> static_args;  // the graph reads its arguments here
  std::vector<Tensor> outputs;      // and writes its outputs here
  std::vector<Tensor> constants;    // values of factories, made once
  Tensor rng_word;                  // i64[2]: Philox seed, offset
  uint64_t rng_total = 0;
  PhiloxState expected{~0ull, ~0ull};  // what the word holds when the next replay starts
};

std::string StepGraph::refusal(const Trace& trace) {
  for (const BoundSymbol& b : trace.bsyms)
    if (is_collective(b))
      return std::string("the step holds the collective ") + op_name(b.call) +
             ", and capturing collectives into a CUDA graph is pending a real multi-GPU test (over host buffers a "
             "collective copies to the host, which a capture refuses; NCCL inside a graph is untested)";
  return {};
}

bool StepGraph::applies(const Trace& trace, const std::vector<Tensor>& state, const std::vector<Tensor>& args) {
  if (state.empty() || !vc::is_available()) return false;
  const Device d = state.front().device();
  if (!d.is_cuda()) return false;
  for (const Tensor& t : state)
    if (t.device() != d || !t.is_contiguous()) return false;
  for (const Tensor& t : args)
    if (t.device() != d) return false;
  const std::string why = refusal(trace);
  if (why.empty()) return true;
  if (log_enabled("graph")) {
    static std::mutex mutex;
    static std::set<std::string> said;
    std::lock_guard<std::mutex> lock(mutex);
    if (said.insert(why).second)
      std::cerr << "volt.jit: the training step runs launch by launch, not as a CUDA graph: " << why << "\n";
  }
  return false;
}

StepGraph::StepGraph(const Trace& trace, const std::vector<Tensor>& state, const std::vector<Tensor>& args,
                     const std::vector<Tensor>& constants, size_t num_outputs,
                     const std::vector<size_t>& updated_state)
    : impl_(std::make_unique<Impl>()) {
  Impl& G = *impl_;
  G.device = state.front().device().index;
  G.rng_total = trace.rng_total;
  // A random prim outside a fused kernel would bake its draw into the graph.
  for (const BoundSymbol& b : trace.bsyms) {
    if (!b.is_fusion() || !b.kernel)
      for (const BoundSymbol& p : flatten_to_prims(!b.is_fusion() ? std::vector<BoundSymbol>{b} : b.subsymbols))
        VOLT_CHECK(op_info(p.call.op).kind != OpKind::Random, "compile_step",
                   "cannot capture the step in a CUDA graph: " << op_name(p.call)
                                                               << " runs outside a fused kernel");
  }
  std::vector<Tensor> hoisted;
  Trace program = hoist_factories(trace, hoisted);
  if (use_device_checks(program.bsyms)) range_check_kernel(G.device);
  for (const Tensor& a : args) G.static_args.push_back(Tensor::empty(a.sizes(), a.dtype(), a.device()));
  if (G.rng_total) G.rng_word = Tensor::zeros({2}, DType::i64, state.front().device());
  std::vector<Tensor> inputs = state;
  inputs.insert(inputs.end(), G.static_args.begin(), G.static_args.end());
  inputs.insert(inputs.end(), constants.begin(), constants.end());
  inputs.insert(inputs.end(), hoisted.begin(), hoisted.end());
  G.constants = hoisted;
  std::unordered_map<int64_t, Tensor> donated = donations(program, state, num_outputs, updated_state);
  struct Donating {
    explicit Donating(std::unordered_map<int64_t, Tensor>* m) { t_donated = m; }
    ~Donating() { t_donated = nullptr; }
  };
  G.graph.capture(G.device, [&] {
    NoGradGuard no_grad;
    Donating donating(&donated);
    vc::RngWordScope word(G.rng_total ? G.rng_word.raw_data() : nullptr);
    const PhiloxState relative{0, 0};  // offsets relative to the word's
    std::vector<Tensor> outs = interpret(program, inputs, &relative);
    for (size_t k = 0; k < updated_state.size(); ++k) {
      Tensor s = state[updated_state[k]];
      if (outs[num_outputs + k].raw_data() != s.raw_data()) s.copy_(outs[num_outputs + k]);  // not donated
    }
    if (G.rng_total) vc::advance_rng_offset(G.rng_word.raw_data(), G.rng_total, G.device);
    for (size_t k = 0; k < outs.size(); ++k)
      if (k < num_outputs || k >= num_outputs + updated_state.size()) G.outputs.push_back(outs[k]);
  });
}

StepGraph::~StepGraph() = default;

std::vector<Tensor> StepGraph::run(const std::vector<Tensor>& args, const PhiloxState* rng) {
  Impl& G = *impl_;
  VOLT_CHECK(args.size() == G.static_args.size(), "compile_step",
             "the graph takes " << G.static_args.size() << " arguments, got " << args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const Tensor& a = args[i];
    Tensor& to = G.static_args[i];
    VOLT_CHECK(a.sizes() == to.sizes() && a.dtype() == to.dtype() && a.device() == to.device(), "compile_step",
               "argument " << i << " is " << a.meta_str() << ", the graph was captured for " << to.meta_str());
    if (a.is_same(to)) continue;
    if (a.is_contiguous())  // one copy node's worth, no kernel
      VOLT_CUDA_CHECK(cudaMemcpyAsync(to.raw_data(), a.raw_data(), static_cast<size_t>(a.numel()) * dtype_size(a.dtype()),
                                      cudaMemcpyDeviceToDevice, vc::stream(G.device)));
    else
      to.copy_(a);
  }
  if (G.rng_total) {
    // The generator moves on as if the step ran eagerly; the word is written
    // only when someone else drew or reseeded since the last replay.
    const PhiloxState r = rng ? *rng : rng_reserve(G.rng_total);
    if (r.seed != G.expected.seed || r.offset != G.expected.offset) {
      static thread_local unsigned long long host[2];
      host[0] = r.seed;
      host[1] = r.offset;
      VOLT_CUDA_CHECK(cudaMemcpyAsync(G.rng_word.raw_data(), host, sizeof host, cudaMemcpyHostToDevice,
                                      vc::stream(G.device)));
    }
    G.expected = {r.seed, r.offset + G.rng_total};
  }
  G.graph.launch();
  return G.outputs;
}

const std::vector<Tensor>& StepGraph::outputs() const { return impl_->outputs; }
size_t StepGraph::kernel_nodes() const { return impl_->graph.kernel_nodes(); }
size_t StepGraph::memcpy_nodes() const { return impl_->graph.memcpy_nodes(); }

}  // namespace volt::jit::cuda
