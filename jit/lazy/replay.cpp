// A CUDA graph of the lazy device run as a captured CUDA graph
// (jit/cuda/step_graph.h, the compiled step's replay), so that a training
// loop's mark_step allocates nothing per step (jit/lazy/internal.h lists the
// functions).
//
// The first run of a cached graph is interpreted (it loads the kernels and
// the libraries' handles); the second is captured and every later one
// replayed.  The capture takes the graph's inputs as the compiled step does:
//   state  the leaves a root is written into (as the CPU plan's donation:
//          no one can read their old values any more), updated where they
//          live, and the runtime scalars, read from a block of the capture's
//          own that one copy fills each run;
//   args   the other leaves, copied into the graph's buffers each run.
// A replay needs the same donations and the state in the same buffers as its
// capture; else the graph is captured again (a few times, then interpreted).
//
// The roots not written into a leaf live in the graph's memory, which the
// next replay overwrites.  The lazy values get them through storages lent
// for one run: when the next run finds one still held (a program keeps last
// step's loss), it first moves that value into memory of its own (one
// allocation and one device copy), so a held value never changes.
#include <algorithm>
#include <iostream>
#include <unordered_map>
#include <unordered_set>

#include <volt/jit/lazy/internal.h>
#include <volt/tensor/log.h>
#include <volt/tensor/storage.h>
#ifdef VOLT_WITH_CUDA
#include <cuda_runtime_api.h>

#include <volt/jit/cuda/step_graph.h>
#include <volt/tensor/cuda/runtime.h>
#endif

namespace volt::lazy::detail {

#ifndef VOLT_WITH_CUDA

struct Replay {};
void attach_replay(Entry&) {}
bool run_replayed(Entry&, const std::vector<Tensor>&, const ScalarSlots&, const PhiloxState&, const std::vector<int>&,
                  const std::vector<bool>&, long, std::vector<Tensor>&) {
  return false;
}

#else

namespace vc = volt::cuda;

namespace {

constexpr int kMaxCaptures = 4;  // then the graph is interpreted

// What one capture made; the storages it lends keep it alive.
struct Captured {
  std::unique_ptr<jit::cuda::StepGraph> graph;
  Tensor scalars;  // i64[n] on the device: the runtime scalars' slots
};

}  // namespace

struct Replay {
  int runs = 0, captures = 0;
  std::shared_ptr<Captured> captured;
  std::vector<int> donate;                // per root: the leaf it is written into, or -1
  std::vector<size_t> state, args;        // leaf indices, in the capture's input order
  std::vector<const void*> state_data;    // per state leaf: its buffer
  std::vector<int> output_of;             // per root not written into a leaf: its graph output
  std::vector<Tensor> outputs;            // the graph's outputs, as run() returns them
  std::vector<size_t> block_of;           // per graph output: its block in `lent`
  std::vector<std::shared_ptr<Storage>> lent;  // the graph's memory, lent to the lazy values
  std::unordered_set<int> vetoed;         // leaves an output views: never written into
};

void attach_replay(Entry& e) { e.replay = std::make_shared<Replay>(); }

namespace {

// Captures the graph for these inputs and donations (throws what StepGraph
// throws).  Returns the leaves whose memory an output of the graph views:
// a new value written there would change that output (the capture is then
// not used, and those leaves are no longer written into).
std::vector<size_t> capture(Replay& r, const jit::Trace& t, const std::vector<Tensor>& leaves, const ScalarSlots& slots,
                            const std::vector<int>& donate) {
  r.captured.reset();
  r.lent.clear();
  r.outputs.clear();
  r.block_of.clear();
  ++r.captures;
  count("Replay.captured");
  auto c = std::make_shared<Captured>();
  const Device dev = S().backend;
  const size_t n = slots.bits.size();
  r.donate = donate;
  r.state.clear();
  r.args.clear();
  r.state_data.clear();
  std::vector<int> state_index(leaves.size(), -1);
  for (int l : donate)
    if (l >= 0) {
      state_index[static_cast<size_t>(l)] = static_cast<int>(r.state.size());
      r.state.push_back(static_cast<size_t>(l));
      r.state_data.push_back(leaves[static_cast<size_t>(l)].raw_data());
    }
  for (size_t l = 0; l < leaves.size(); ++l)
    if (state_index[l] < 0) r.args.push_back(l);
  // Inputs: the state leaves, the scalars (state read where it lives), the other leaves.
  jit::Trace p = t;
  p.program = nullptr;
  p.inputs.clear();
  std::vector<Tensor> state, args;
  for (size_t l : r.state) p.inputs.push_back(t.inputs[l]), state.push_back(leaves[l]);
  if (n) c->scalars = Tensor::empty({static_cast<int64_t>(n)}, DType::i64, dev);
  for (size_t i = 0; i < n; ++i) {
    const DType d = slots.dtypes[i];
    p.inputs.push_back(t.inputs[leaves.size() + i]);
    state.push_back(make_tensor(c->scalars.impl_ptr()->storage, {}, {}, static_cast<int64_t>(8 * i / dtype_size(d)), d, dev));
  }
  for (size_t l : r.args) p.inputs.push_back(t.inputs[l]), args.push_back(leaves[l]);
  VOLT_CHECK(!state.empty(), "lazy", "a graph without state or runtime scalars is interpreted, not captured");
  // Outputs: the roots that stay outputs, then the new values written into the state.
  p.outputs.clear();
  r.output_of.assign(donate.size(), -1);
  std::vector<size_t> updated;
  for (size_t j = 0; j < donate.size(); ++j)
    if (donate[j] < 0) r.output_of[j] = static_cast<int>(p.outputs.size()), p.outputs.push_back(t.outputs[j]);
  const size_t num_outputs = p.outputs.size();
  for (size_t j = 0; j < donate.size(); ++j)
    if (donate[j] >= 0) {
      p.outputs.push_back(t.outputs[j]);
      updated.push_back(static_cast<size_t>(state_index[static_cast<size_t>(donate[j])]));
    }
  c->graph = std::make_unique<jit::cuda::StepGraph>(p, state, args, std::vector<Tensor>{}, num_outputs, updated);
  std::vector<size_t> viewed;
  std::unordered_map<const Storage*, size_t> block;
  r.outputs = c->graph->outputs();
  for (const Tensor& o : r.outputs) {
    const std::shared_ptr<Storage>& s = o.impl_ptr()->storage;
    for (size_t k = 0; k < r.state.size(); ++k)
      if (s->data == leaves[r.state[k]].impl_ptr()->storage->data) viewed.push_back(r.state[k]);
    auto [it, fresh] = block.try_emplace(s.get(), r.lent.size());
    if (fresh) {
      // Lent out without a deleter of its own: the memory is the capture's,
      // kept alive as long as anyone holds a storage lent from it.
      auto w = std::make_shared<Storage>();
      w->data = s->data;
      w->nbytes = s->nbytes;
      w->device = s->device;
      w->deleter = [keep = c](void*) {};
      r.lent.push_back(std::move(w));
    }
    r.block_of.push_back(it->second);
  }
  if (viewed.empty()) r.captured = c;
  return viewed;
}

// Moves a lent value to memory of its own: whoever holds the storage keeps
// the value; `w` becomes a new storage over the graph's memory.
void move_out(std::shared_ptr<Storage>& w, int device) {
  std::shared_ptr<Storage> own = Storage::allocate(w->nbytes, w->device);
  VOLT_CUDA_CHECK(cudaMemcpyAsync(own->data, w->data, w->nbytes, cudaMemcpyDeviceToDevice, vc::stream(device)));
  std::swap(w->data, own->data);
  std::swap(w->deleter, own->deleter);
  w = std::move(own);
  count("Replay.kept");
}

// Before a replay overwrites the graph's memory: a value lent by the last
// run that someone still holds moves to memory of its own.  Held only by
// leaves of this run that nothing else reads (a value fed back, as
// h = f(h)), it stays: the run copies those into its buffers first.
void keep_held(Replay& r, int device, const std::vector<Tensor>& leaves, const std::vector<bool>& unread, long handles) {
  for (std::shared_ptr<Storage>& w : r.lent) {
    const long held = w.use_count() - 1;
    if (held == 0) continue;
    std::unordered_set<const TensorImpl*> by_run;
    for (size_t a : r.args) {
      const std::shared_ptr<TensorImpl>& x = leaves[a].impl_ptr();
      if (a < unread.size() && unread[a] && x->storage == w && x.use_count() == handles) by_run.insert(x.get());
    }
    if (static_cast<long>(by_run.size()) < held) move_out(w, device);
  }
}

}  // namespace

bool run_replayed(Entry& e, const std::vector<Tensor>& leaves, const ScalarSlots& slots, const PhiloxState& rng,
                  const std::vector<int>& donate_in, const std::vector<bool>& unread, long handles,
                  std::vector<Tensor>& out) {
  Replay& r = *e.replay;
  const jit::Trace& t = e.traces.back();
  if (++r.runs == 1 || r.captures >= kMaxCaptures) return false;  // the first run loads what the capture needs
  const Device dev = S().backend;
  std::vector<int> donate = donate_in;
  if (donate.size() != t.outputs.size()) donate.assign(t.outputs.size(), -1);
  for (const Tensor& l : leaves)
    if (!l.device().is_cuda() || l.device() != dev) return false;
  for (int& l : donate) {
    if (l < 0) continue;
    const Tensor& x = leaves.at(static_cast<size_t>(l));
    // An old value in the graph's memory (a step that could not write it in
    // place, because someone held the value before it): moved out once, so
    // that the new value can be written over it again from now on.
    for (std::shared_ptr<Storage>& w : r.lent)
      if (w == x.impl_ptr()->storage && w.use_count() == 2 && x.impl_ptr().use_count() == handles) move_out(w, dev.index);
    const std::shared_ptr<TensorImpl>& impl = x.impl_ptr();
    if (r.vetoed.count(l) || !x.is_contiguous() || !impl->storage || impl->storage.use_count() != 1 ||
        impl.use_count() != handles)
      l = -1;
  }
  bool same = r.captured && donate == r.donate;
  for (size_t k = 0; same && k < r.state.size(); ++k) same = leaves[r.state[k]].raw_data() == r.state_data[k];
  if (!same) {
    if (r.captures >= kMaxCaptures) return false;
    if (log_enabled("lazy")) {
      auto written = [](const std::vector<int>& d) { return std::count_if(d.begin(), d.end(), [](int l) { return l >= 0; }); };
      std::cerr << "volt.lazy: capturing the graph as a CUDA graph ("
                << (!r.captured      ? std::string(r.captures ? "the last capture was not used" : "its second run")
                    : donate != r.donate ? "roots written into leaves: " + std::to_string(written(donate)) + ", were " +
                                               std::to_string(written(r.donate))
                                         : std::string("a leaf written into is not where it was"))
                << ")\n";
    }
    try {
      const std::vector<size_t> viewed = capture(r, t, leaves, slots, donate);
      if (log_enabled("lazy"))
        std::cerr << "volt.lazy: captured: " << r.state.size() << " leaves written in place, " << r.args.size()
                  << " copied in each run, " << slots.bits.size() << " runtime scalars, " << r.outputs.size()
                  << " outputs in the graph's memory\n";
      for (size_t l : viewed) r.vetoed.insert(static_cast<int>(l));
      if (!viewed.empty()) return false;  // captured again at the next run, without those
    } catch (const Error& err) {
      r.captures = kMaxCaptures;
      r.captured.reset();
      if (log_enabled("lazy")) std::cerr << "volt.lazy: the graph is interpreted, not captured: " << err.what() << "\n";
      return false;
    }
  }
  Captured& c = *r.captured;
  keep_held(r, dev.index, leaves, unread, handles);
  if (!slots.bits.empty())
    VOLT_CUDA_CHECK(cudaMemcpyAsync(c.scalars.raw_data(), slots.bits.data(), 8 * slots.bits.size(),
                                    cudaMemcpyHostToDevice, vc::stream(dev.index)));
  std::vector<Tensor> args;
  args.reserve(r.args.size());
  for (size_t l : r.args) args.push_back(leaves[l]);
  c.graph->run(args, &rng);
  count("Replay.launched");
  out.assign(donate.size(), Tensor());
  for (size_t j = 0; j < donate.size(); ++j) {
    if (donate[j] >= 0) {
      out[j] = leaves[static_cast<size_t>(donate[j])];  // holds the new value now
      continue;
    }
    const Tensor& o = r.outputs[static_cast<size_t>(r.output_of[j])];
    out[j] = make_tensor(r.lent[r.block_of[static_cast<size_t>(r.output_of[j])]], o.sizes(), o.strides(),
                         o.impl_ptr()->offset, o.dtype(), o.device());
  }
  return true;
}

#endif  // VOLT_WITH_CUDA

}  // namespace volt::lazy::detail
