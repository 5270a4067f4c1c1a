#include <volt/jit/step/memory_plan.h>

#include <algorithm>
#include <limits>
#include <unordered_map>

#include <volt/jit/executor.h>
#include <volt/jit/fusion.h>
#include <volt/jit/rewrites/gemm_epilogue.h>
#include <volt/tensor/backend.h>
#include <volt/tensor/random.h>

namespace volt::jit {

namespace {

constexpr size_t kAlign = 64;
constexpr size_t kForever = std::numeric_limits<size_t>::max();

size_t aligned_bytes(const Tensor& t) {
  size_t n = static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
  return std::max<size_t>(kAlign, (n + kAlign - 1) / kAlign * kAlign);
}

// Where a GEMM epilogue region's GEMM writes: its f32 sums, whatever the
// product's type (a bf16 product is rounded as the region's kernel loads it).
// A region without a kernel that its fusion executor runs whole (a
// registered runner's: jit/rewrites/column_sum.h).
bool runs_whole(const BoundSymbol& b) {
  const FusionExecutor* fu = b.executor ? b.executor->fusion() : nullptr;
  return b.is_fusion() && !b.kernel && fu && fu->compiled(b);
}

Tensor gemm_sums(const BoundSymbol& region) {
  const Tensor& product = region.subsymbols.front().outputs.front();
  return Tensor::proxy(product.sizes(), DType::f32, product.device());
}

}  // namespace

struct MemoryPlan::Impl {
  enum class Kind { Prim, View, Fusion, Other };
  struct Step {
    Kind kind;
    BoundSymbol b;
    std::vector<int64_t> args, outs;
    std::vector<Tensor> out_buffers;      // Prim, Fusion: where each output goes (empty: donated)
    std::vector<Tensor> scratch;          // Fusion: a contiguous copy per input, when needed
    std::vector<int> donate_to;           // Fusion: per output, the state index it writes, or -1
    std::vector<Tensor> fresh;            // Prim, Fusion: per output allocated anew each run, its metadata
    size_t gemm = 0;                      // Fusion: a GEMM epilogue region's operands (its first args)
    Tensor product;                       // ... and where the GEMM writes its product
  };
  std::vector<Step> steps;
  std::vector<int64_t> inputs, outputs;
  std::vector<std::pair<size_t, int64_t>> copy_back;  // (state index, value id) not donated
  std::vector<Tensor> values;                          // by proxy id, reused run to run
  std::shared_ptr<Storage> arena;
  size_t arena_bytes = 0, donated = 0;
  std::vector<size_t> donated_state;
};

MemoryPlan::~MemoryPlan() = default;
size_t MemoryPlan::arena_bytes() const { return impl_->arena_bytes; }
bool MemoryPlan::in_arena(const Tensor& t) const { return t.defined() && t.impl()->storage == impl_->arena; }
size_t MemoryPlan::donated() const { return impl_->donated; }
const std::vector<size_t>& MemoryPlan::donated_state() const { return impl_->donated_state; }

MemoryPlan::MemoryPlan(const Trace& t, size_t num_state, size_t num_outputs, const std::vector<size_t>& updated_state,
                       bool outputs_in_arena)
    : impl_(std::make_unique<Impl>()) {
  Impl& P = *impl_;
  int64_t max_id = -1;
  auto note = [&](const Tensor& x) {
    max_id = std::max(max_id, id_of(x));
    return id_of(x);
  };
  for (const Tensor& x : t.inputs) P.inputs.push_back(note(x));
  std::unordered_map<int64_t, Tensor> meta;  // a proxy per value, for its metadata
  auto add = [&](Impl::Kind kind, const BoundSymbol& b) {
    Impl::Step s{kind, b, {}, {}, {}, {}, {}, {}};
    for (const Tensor& a : tensor_args(b)) s.args.push_back(note(a));
    for (const Tensor& o : b.outputs) {
      s.outs.push_back(note(o));
      meta[id_of(o)] = o;
    }
    P.steps.push_back(std::move(s));
  };
  for (const BoundSymbol& b : t.bsyms) {
    if (b.is_fusion() && b.kernel && b.kernel->fn) {  // a host kernel: run into the plan's buffers
      add(Impl::Kind::Fusion, b);
      P.steps.back().gemm = is_gemm_epilogue(b) ? gemm_operands(b) : 0;
    } else if (b.executor && b.executor != &eager_executor()) {
      if (!b.is_fusion() || b.kernel || runs_whole(b)) {
        add(Impl::Kind::Other, b);
        continue;
      }
      for (const BoundSymbol& p : flatten_to_prims(b.subsymbols))
        add(p.call.op == OpId::custom ? Impl::Kind::Other
            : op_info(p.call.op).kind == OpKind::View ? Impl::Kind::View : Impl::Kind::Prim, p);
    } else {
      for (const BoundSymbol& p : flatten_to_prims({b}))
        add(p.call.op == OpId::custom ? Impl::Kind::Other
            : op_info(p.call.op).kind == OpKind::View ? Impl::Kind::View : Impl::Kind::Prim, p);
    }
  }
  for (const Tensor& o : t.outputs) P.outputs.push_back(note(o));
  P.values.resize(static_cast<size_t>(max_id + 1));
  for (const auto& [id, m] : meta)
    VOLT_CHECK(m.device().is_cpu(), "memory plan", "plans CPU programs; " << m.meta_str() << " is not on the CPU");

  // Liveness: the last step reading each value, through views of it too.
  std::unordered_map<int64_t, size_t> last, def;
  for (size_t i = 0; i < P.steps.size(); ++i) {
    for (int64_t a : P.steps[i].args) last[a] = i;
    for (int64_t o : P.steps[i].outs) def[o] = i;
  }
  for (int64_t o : P.outputs) last[o] = kForever;
  for (size_t i = P.steps.size(); i-- > 0;) {
    const Impl::Step& s = P.steps[i];
    if (s.kind != Impl::Kind::View) continue;
    size_t l = last.count(s.outs[0]) ? last[s.outs[0]] : i;
    last[s.args[0]] = std::max(last.count(s.args[0]) ? last[s.args[0]] : i, l);
  }
  // Which values are views (of what), for donation and scratch decisions.
  std::unordered_map<int64_t, int64_t> root;
  for (const Impl::Step& s : P.steps)
    if (s.kind == Impl::Kind::View) root[s.outs[0]] = root.count(s.args[0]) ? root[s.args[0]] : s.args[0];
  auto root_of = [&](int64_t id) { return root.count(id) ? root[id] : id; };

  // Donation: a fused kernel writing a state's new value, reading the old one at the same
  // element for the last time (or not at all, after its last reader), writes into the state.
  std::unordered_map<int64_t, size_t> state_of_new;  // new value id -> state index
  for (size_t k = 0; k < updated_state.size(); ++k) state_of_new[P.outputs[num_outputs + k]] = updated_state[k];
  std::unordered_map<int64_t, int> output_uses;
  for (int64_t o : P.outputs) ++output_uses[o];
  std::unordered_map<int64_t, bool> donated_value;
  for (size_t i = 0; i < P.steps.size(); ++i) {
    Impl::Step& s = P.steps[i];
    s.donate_to.assign(s.outs.size(), -1);
    if (s.kind != Impl::Kind::Fusion || s.b.kernel->row_len > 0) continue;  // a row kernel reads in passes
    const Shape& shape = s.b.subsymbols.front().outputs.front().sizes();
    for (size_t j = 0; j < s.outs.size(); ++j) {
      auto it = state_of_new.find(s.outs[j]);
      if (it == state_of_new.end() || output_uses[s.outs[j]] != 1) continue;
      const size_t st = it->second;
      const int64_t old = P.inputs[st];
      const Tensor& m = meta[s.outs[j]];
      bool reads_old = false, other_view = false;
      for (size_t a = 0; a < s.args.size(); ++a) {
        if (s.args[a] == old) reads_old = true;
        else if (root_of(s.args[a]) == old) other_view = true;
      }
      if ((reads_old ? last[old] == i : !last.count(old) || last[old] < i) && !other_view && m.sizes() == shape &&
          t.inputs[st].sizes() == shape && t.inputs[st].dtype() == m.dtype()) {
        s.donate_to[j] = static_cast<int>(st);
        donated_value[s.outs[j]] = true;
        ++P.donated;
        P.donated_state.push_back(st);
      }
    }
  }
  for (size_t k = 0; k < updated_state.size(); ++k)
    if (!donated_value.count(P.outputs[num_outputs + k]))
      P.copy_back.emplace_back(updated_state[k], P.outputs[num_outputs + k]);

  // Buffers: what each Prim and Fusion output needs, and the scratch copies.
  struct Buffer {
    size_t bytes, from, to, offset = 0;
    Tensor like;
    Impl::Step* step;
    int out, scratch;  // which output, or which scratch input (-1 for none)
  };
  std::vector<Buffer> buffers;
  (void)num_state;
  for (size_t i = 0; i < P.steps.size(); ++i) {
    Impl::Step& s = P.steps[i];
    if (s.kind != Impl::Kind::Prim && s.kind != Impl::Kind::Fusion) continue;
    s.out_buffers.resize(s.outs.size());
    s.fresh.resize(s.outs.size());
    for (size_t j = 0; j < s.outs.size(); ++j) {
      if (s.donate_to[j] >= 0) continue;
      const Tensor& m = meta[s.outs[j]];
      if (!outputs_in_arena && output_uses.count(s.outs[j])) {
        s.fresh[j] = m;
        continue;
      }
      size_t to = last.count(s.outs[j]) ? last[s.outs[j]] : i;
      buffers.push_back({aligned_bytes(m), i, to, 0, m, &s, static_cast<int>(j), -1});
    }
    if (s.kind == Impl::Kind::Fusion && s.gemm)  // the product's sums: in cache while the step runs, free after it
      buffers.push_back({aligned_bytes(gemm_sums(s.b)), i, i, 0, gemm_sums(s.b), &s, -1, -2});
    if (s.kind == Impl::Kind::Fusion) {
      s.scratch.resize(s.args.size());
      for (size_t a = s.gemm; a < s.args.size(); ++a) {
        const int64_t id = s.args[a];
        const bool maybe_strided = root.count(id) || std::find(P.inputs.begin() + static_cast<std::ptrdiff_t>(num_state),
                                                               P.inputs.end(), id) != P.inputs.end();
        if (!maybe_strided) continue;
        const Tensor& m = meta.count(id) ? meta[id] : s.b.fusion_inputs[a];
        buffers.push_back({aligned_bytes(m), i, i, 0, m, &s, -1, static_cast<int>(a)});
      }
    }
  }
  // First fit by lifetime: a range is free again after the last step reading it.
  std::vector<size_t> order(buffers.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return buffers[a].from < buffers[b].from; });
  std::vector<size_t> placed;
  for (size_t bi : order) {
    Buffer& B = buffers[bi];
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t pj : placed) {
      const Buffer& Q = buffers[pj];
      if (Q.to >= B.from && B.to >= Q.from) busy.emplace_back(Q.offset, Q.offset + Q.bytes);
    }
    std::sort(busy.begin(), busy.end());
    size_t off = 0;
    for (const auto& [lo, hi] : busy) {
      if (off + B.bytes <= lo) break;
      off = std::max(off, hi);
    }
    B.offset = off;
    P.arena_bytes = std::max(P.arena_bytes, off + B.bytes);
    placed.push_back(bi);
  }
  P.arena = Storage::allocate(std::max<size_t>(P.arena_bytes, kAlign), kCPU);
  for (Buffer& B : buffers) {
    Tensor view = make_tensor(P.arena, B.like.sizes(), contiguous_strides(B.like.sizes()),
                              static_cast<int64_t>(B.offset / dtype_size(B.like.dtype())), B.like.dtype(),
                              B.like.device());
    if (B.out >= 0) B.step->out_buffers[static_cast<size_t>(B.out)] = view;
    else if (B.scratch == -2) B.step->product = view;
    else B.step->scratch[static_cast<size_t>(B.scratch)] = view;
  }
}

std::vector<Tensor> MemoryPlan::run(const Trace& trace, const std::vector<Tensor>& inputs, const PhiloxState* rng_in) {
  Impl& P = *impl_;
  VOLT_CHECK(inputs.size() == P.inputs.size(), trace.name,
             "expected " << P.inputs.size() << " inputs, got " << inputs.size());
  std::vector<Tensor>& v = P.values;
  for (size_t i = 0; i < inputs.size(); ++i) v[static_cast<size_t>(P.inputs[i])] = inputs[i];
  const PhiloxState rng = rng_in ? *rng_in : trace.rng_total ? rng_reserve(trace.rng_total) : PhiloxState{};
  Backend* cpu = backend_for(DeviceType::CPU);
  std::vector<void*> ptrs;
  for (Impl::Step& s : P.steps) {
    switch (s.kind) {
      case Impl::Kind::Fusion: {
        ptrs.clear();
        if (s.gemm) ptrs.push_back(s.product.raw_data());
        for (size_t a = s.gemm; a < s.args.size(); ++a) {
          const Tensor& in = v[static_cast<size_t>(s.args[a])];
          if (in.is_contiguous() || a >= s.scratch.size() || !s.scratch[a].defined()) {
            VOLT_CHECK(in.is_contiguous(), s.b.fusion_name, "an input is not contiguous (" << in.meta_str() << ")");
            ptrs.push_back(in.raw_data());
          } else {
            cpu->copy(s.scratch[a], in);
            ptrs.push_back(s.scratch[a].raw_data());
          }
        }
        for (size_t j = 0; j < s.outs.size(); ++j) {
          Tensor& out = v[static_cast<size_t>(s.outs[j])];
          out = s.donate_to[j] >= 0   ? inputs[static_cast<size_t>(s.donate_to[j])]
                : s.fresh[j].defined() ? Tensor::empty(s.fresh[j].sizes(), s.fresh[j].dtype(), kCPU)
                                       : s.out_buffers[j];
          ptrs.push_back(out.raw_data());
        }
        if (s.gemm) {
          const Tensor operands[3] = {v[static_cast<size_t>(s.args[0])], v[static_cast<size_t>(s.args[1])],
                                      s.gemm > 2 ? v[static_cast<size_t>(s.args[2])] : Tensor()};
          run_gemm_epilogue(s.b, operands, s.product.data_ptr<float>(), ptrs.data(), rng.seed,
                            rng.offset + s.b.kernel->rng_base);
          break;
        }
        run_host_kernel(*s.b.kernel, s.b.kernel->extent, ptrs.data(), rng.seed, rng.offset + s.b.kernel->rng_base);
        break;
      }
      case Impl::Kind::Prim:
      case Impl::Kind::View:
      case Impl::Kind::Other: {
        if (s.b.is_fusion()) {  // a region its executor runs whole (no OpCall of its own)
          std::vector<Tensor> in;
          for (int64_t id : s.args) in.push_back(v[static_cast<size_t>(id)]);
          const std::vector<Tensor> outs = s.b.executor->execute(s.b, in, rng);
          for (size_t j = 0; j < s.outs.size() && j < outs.size(); ++j) v[static_cast<size_t>(s.outs[j])] = outs[j];
          break;
        }
        OpCall c = s.b.call;
        size_t k = 0;
        for (Value& a : c.args)
          if (a.is_tensor && a.tensor.defined()) a.tensor = v[static_cast<size_t>(s.args[k++])];
        if (op_info(c.op).kind == OpKind::Random) {
          c.attrs.seed = rng.seed;
          c.attrs.offset += rng.offset;
        }
        if (s.kind == Impl::Kind::Prim) {
          for (size_t j = 0; j < s.outs.size(); ++j)
            if (s.fresh[j].defined()) s.out_buffers[j] = Tensor::empty(s.fresh[j].sizes(), s.fresh[j].dtype(), kCPU);
          cpu->run(c, s.out_buffers);
          for (size_t j = 0; j < s.outs.size(); ++j) {
            v[static_cast<size_t>(s.outs[j])] = s.out_buffers[j];
            if (s.fresh[j].defined()) s.out_buffers[j] = Tensor();  // the caller's alone
          }
        } else {
          std::vector<Tensor> outs;
          if (s.kind == Impl::Kind::View || !s.b.executor) {
            outs = run_prim(c);
          } else {
            std::vector<Tensor> in;
            for (int64_t id : s.args) in.push_back(v[static_cast<size_t>(id)]);
            outs = s.b.executor->execute(s.b, in, rng);
          }
          for (size_t j = 0; j < s.outs.size() && j < outs.size(); ++j) v[static_cast<size_t>(s.outs[j])] = outs[j];
        }
        break;
      }
    }
  }
  for (const auto& [st, id] : P.copy_back) cpu->copy(inputs[st], v[static_cast<size_t>(id)]);
  std::vector<Tensor> results;
  results.reserve(P.outputs.size());
  for (int64_t id : P.outputs) results.push_back(v[static_cast<size_t>(id)]);
  for (Tensor& x : v) x = Tensor();
  return results;
}

}  // namespace volt::jit
