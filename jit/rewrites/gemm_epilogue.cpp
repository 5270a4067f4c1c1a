#include <volt/jit/rewrites/gemm_epilogue.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include <volt/jit/fusion.h>
#include <volt/jit/passes.h>
#include <volt/jit/pipeline.h>
#include <volt/tensor/cpu/gemm.h>
#include <volt/tensor/cpu/gemm_bf16.h>
#include <volt/tensor/cpu/matmul_bf16.h>
#include <volt/tensor/cpu/threads.h>

namespace volt::jit {

namespace {

// The product a GEMM epilogue can take: a matmul of two 2-D f32 CPU operands,
// or a linear (x W^T + bias) of an input of 2 or more dims, a 2-D weight and a
// bias or none, all f32 or all bf16 (a bf16 linear's region reads its f32
// sums and rounds them to bf16 as it loads them); or a matmul of two 2-D
// bf16 CPU operands keeping its f32 sums (out_dtype=f32: a weight's gradient
// under autocast, wide_matmul.h).
bool plain_gemm(const BoundSymbol& b) {
  if (b.is_fusion() || (b.call.op != OpId::matmul && b.call.op != OpId::linear) || b.outputs.size() != 1) return false;
  if (b.executor && b.executor != &eager_executor()) return false;  // another executor's product stays its own
  const std::vector<Tensor> args = tensor_args(b);
  const bool linear = b.call.op == OpId::linear;
  if (args.size() != 2 && !(linear && args.size() == 3)) return false;
  const bool low = linear && args[0].dtype() == DType::bf16;  // a bf16 linear: bf16 out
  const DType operand = (!linear && b.call.attrs.flag) || low ? DType::bf16 : DType::f32;
  const Tensor& out = b.outputs[0];
  for (const Tensor& t : {args[0], args[1], out})
    if (t.dim() < 2 || !t.device().is_cpu()) return false;
  if (args[1].dim() != 2 || out.dim() != args[0].dim() || (!linear && args[0].dim() != 2)) return false;
  if (args[0].dtype() != operand || args[1].dtype() != operand || out.dtype() != (low ? DType::bf16 : DType::f32))
    return false;
  if (linear && args.size() == 3) {
    const Tensor& bias = args[2];
    if (bias.dim() != 1 || bias.dtype() != operand || !bias.device().is_cpu() || bias.size(0) != args[1].size(0) ||
        bias.stride(0) != 1)
      return false;
  }
  return true;
}

// A bf16 linear: its region's kernel rounds the f32 sums on load.
bool rounds_on_load(const BoundSymbol& gemm) { return gemm.outputs[0].dtype() != DType::f32; }

// The shape a row region's reductions read (its rows are that shape's innermost dim).
const Shape& row_shape(const BoundSymbol& region) {
  for (const BoundSymbol& p : region.subsymbols)
    if (is_row_reduction(p)) return p.call.args[0].tensor.sizes();
  VOLT_FAIL(region.fusion_name, "is not a row region");
}

// The parts of a region that share no value it makes: union-find over its prims.
std::vector<int> components(const BoundSymbol& r) {
  const size_t n = r.subsymbols.size();
  std::vector<int> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int x) {
    while (parent[static_cast<size_t>(x)] != x) x = parent[static_cast<size_t>(x)] = parent[static_cast<size_t>(parent[static_cast<size_t>(x)])];
    return x;
  };
  std::unordered_map<int64_t, int> made_by;
  for (size_t i = 0; i < n; ++i) {
    for (const Tensor& a : tensor_args(r.subsymbols[i]))
      if (auto it = made_by.find(id_of(a)); it != made_by.end()) parent[static_cast<size_t>(find(static_cast<int>(i)))] = find(it->second);
    for (const Tensor& o : r.subsymbols[i].outputs) made_by[id_of(o)] = static_cast<int>(i);
  }
  std::vector<int> c(n);
  for (size_t i = 0; i < n; ++i) c[i] = find(static_cast<int>(i));
  return c;
}

// A region of `prims` (a part of `whole`): its inputs are what the prims read
// and do not make, its outputs what `whole` gives out of them.
BoundSymbol region_of(const BoundSymbol& whole, std::vector<BoundSymbol> prims, const std::string& name) {
  BoundSymbol f;
  f.kind = BoundSymbol::Kind::Fusion;
  f.executor = whole.executor;
  f.fusion_name = name;
  f.scope = prims.empty() ? whole.scope : prims.front().scope;
  std::unordered_set<int64_t> inside, seen;
  for (const BoundSymbol& p : prims) {
    for (const Tensor& a : tensor_args(p))
      if (!inside.count(id_of(a)) && seen.insert(id_of(a)).second) f.fusion_inputs.push_back(a);
    for (const Tensor& o : p.outputs) inside.insert(id_of(o));
  }
  for (const Tensor& o : whole.outputs)
    if (inside.count(id_of(o))) f.outputs.push_back(o);
  f.subsymbols = std::move(prims);
  return f;
}

// Below this many elements the product is not split (it stays in cache).
constexpr int64_t kWholeProduct = 1 << 15;
// Rows of a weight gradient made and updated together: a multiple of every
// GEMM kernel's tile height, and more than its small-m limit (16).
constexpr int64_t kRowChunk = 48;
// The deepest product (k: the batch, for a weight gradient) made in chunks.
constexpr int64_t kChunkDepth = 64;

}  // namespace

bool is_gemm_epilogue(const BoundSymbol& b) {
  return b.is_fusion() && !b.subsymbols.empty() && plain_gemm(b.subsymbols.front());
}

size_t gemm_operands(const BoundSymbol& region) {
  VOLT_CHECK(is_gemm_epilogue(region), region.fusion_name, "is not a GEMM epilogue region");
  return tensor_args(region.subsymbols.front()).size();
}

namespace {

// The kernel over each finished block of C, row by row (its elements are
// counted row-major over the whole product, the Philox draws included).
struct BlockKernel {
  const FusedKernel* kernel;
  void* const* args;
  unsigned long long seed, offset;
  int64_t n;
};

// A thread's own copy of a kernel's pointers (reused: no allocation per chunk).
std::vector<void*>& chunk_args() {
  static thread_local std::vector<void*> args;
  return args;
}

void kernel_on_block(void* ctx, float*, int64_t, int64_t i0, int64_t j0, int64_t rows, int64_t cols) {
  const BlockKernel& k = *static_cast<const BlockKernel*>(ctx);
  for (int64_t i = i0; i < i0 + rows; ++i) k.kernel->fn(i * k.n + j0, i * k.n + j0 + cols, k.args, k.seed, k.offset);
}

}  // namespace

namespace {

// The product of a region's operands, any run of its rows at a time: the f32
// GEMM, or the bf16 one keeping its f32 sums (as the unfused matmul with
// out_dtype=f32 makes them, tensor/cpu/matmul_bf16.cpp).
struct Product {
  bool bf16 = false;
  const void* a = nullptr;
  const void* b = nullptr;
  int64_t m = 0, k = 0, n = 0, ars = 0, acs = 0, brs = 0, bcs = 0;
  cpu::GemmStore store;

  // Rows [i0, i0 + rows) into c (row stride n).
  void rows(int64_t i0, int64_t count, float* c) const {
    if (!bf16)
      return cpu::gemm_f32(static_cast<const float*>(a) + i0 * ars, count, k, ars, acs, static_cast<const float*>(b),
                           n, brs, bcs, c, n, store);
    const BF16* pa = static_cast<const BF16*>(a) + i0 * ars;
    cpu::gemm_bf16(pa, count, k, ars, acs, static_cast<const BF16*>(b), n, brs, bcs, c, n);
  }
};

// A bf16 linear's region: the GEMM's f32 sums with the bias added in f32, as
// the unfused linear makes them (tensor/cpu/matmul_bf16.h), then the kernel,
// which rounds each sum to bf16 as it loads it, where the linear would have
// stored it rounded and the region loaded it back: the same values.  (The
// bf16 GEMM has no store of its own to run the kernel in.)
void run_bf16_linear(const BoundSymbol& region, const Tensor* operands, float* product, void* const* args,
                     unsigned long long rng_seed, unsigned long long rng_offset) {
  const Tensor& x = operands[0];
  const Tensor& w = operands[1];
  const bool bias = gemm_operands(region) == 3;
  VOLT_CHECK(x.dim() >= 2 && w.dim() == 2 && x.dtype() == DType::bf16 && w.dtype() == DType::bf16 &&
                 x.size(-1) == w.size(1) && x.device().is_cpu() && w.device().is_cpu(),
             region.fusion_name,
             "expects a bf16 input (*, k) and a bf16 weight (n, k) on the CPU, got " << x.meta_str() << " and "
                                                                                      << w.meta_str());
  VOLT_CHECK(!bias || (operands[2].dim() == 1 && operands[2].dtype() == DType::bf16 && operands[2].size(0) == w.size(0)),
             region.fusion_name, "expects a bf16 bias of " << w.size(0) << ", got " << operands[2].meta_str());
  cpu::bf16_linear_sums(x, w, bias ? &operands[2] : nullptr, product);
  // An elementwise kernel runs over the product's elements, a row kernel (a
  // LayerNorm reading the product) over its rows of w.size(0).
  const int64_t rows = x.numel() / x.size(-1);
  run_host_kernel(*region.kernel, region.kernel->row_len > 0 ? rows : rows * w.size(0), args, rng_seed, rng_offset);
}

}  // namespace

void run_gemm_epilogue(const BoundSymbol& region, const Tensor* operands, float* product, void* const* args,
                       unsigned long long rng_seed, unsigned long long rng_offset) {
  VOLT_CHECK(region.kernel && region.kernel->fn, region.fusion_name, "its kernel is not compiled");
  const BoundSymbol& gemm = region.subsymbols.front();
  const bool linear = gemm.call.op == OpId::linear;
  if (rounds_on_load(gemm)) return run_bf16_linear(region, operands, product, args, rng_seed, rng_offset);
  const DType operand = !linear && gemm.call.attrs.flag ? DType::bf16 : DType::f32;
  // A linear's input of more dims: its rows, one matrix.
  const Tensor a = operands[0].dim() > 2 ? operands[0].contiguous().reshape({-1, operands[0].size(-1)}) : operands[0];
  const Tensor& w = operands[1];
  VOLT_CHECK(a.dim() == 2 && w.dim() == 2 && a.dtype() == operand && w.dtype() == operand &&
                 a.size(1) == (linear ? w.size(1) : w.size(0)),
             region.fusion_name,
             "expects two " << dtype_name(operand) << " matrices that multiply" << (linear ? " (x W^T)" : "")
                            << ", got " << a.meta_str() << " and " << w.meta_str());
  Product p;
  p.bf16 = operand == DType::bf16;
  if (linear && gemm_operands(region) == 3) {
    const Tensor& bias = operands[2];
    VOLT_CHECK(bias.dim() == 1 && bias.dtype() == DType::f32 && bias.size(0) == w.size(0) && bias.is_contiguous(),
               region.fusion_name, "expects a contiguous f32 bias of " << w.size(0) << ", got " << bias.meta_str());
    p.store.bias = bias.data_ptr<float>();
  }
  const FusedKernel& kernel = *region.kernel;
  // B is the weight itself (matmul) or its transpose (linear's W^T).
  const int64_t m = a.size(0), k = a.size(1), n = linear ? w.size(0) : w.size(1);
  p.m = m, p.k = k, p.n = n, p.ars = a.stride(0), p.acs = a.stride(1);
  p.brs = linear ? w.stride(1) : w.stride(0), p.bcs = linear ? w.stride(0) : w.stride(1);
  p.a = a.raw_data(), p.b = w.raw_data();
  // A small product stays in cache anyway: the GEMM, then the kernel over all of it.
  // So does a bf16 one: made in chunks of rows (each chunk's sums the bits of
  // the whole product's) it measured slower than whole at batch 8 on the AMX
  // path, 48-row chunks by about 15 %, one chunk per thread by 0 to 8 %: each
  // call of the AMX GEMM configures and releases the tiles in every task and
  // packs its rows of A again, and the whole f32 product (784 x 784) stays in
  // the cores' L2 anyway.
  if (m * n <= kWholeProduct || m <= kRowChunk || p.bf16) {
    p.rows(0, m, product);
    run_host_kernel(kernel, m * n, args, rng_seed, rng_offset);
    return;
  }
  // A weight gradient at a small batch (a short k): chunks of rows, each made
  // by a GEMM of its own and updated at once while it is in the thread's
  // cache, every range of the kernel a whole run of rows.  Every chunk has
  // more rows than the GEMM's small-m limit, so each element is the same sum
  // over k, in the same order, as in one GEMM of all rows.
  const bool dots = p.acs == 1 && p.brs == 1 && p.bcs >= k;  // a layout gemm_f32 may take by dot products
  if (k <= kChunkDepth && !dots) {
    const int64_t chunks = m / kRowChunk;  // the last one takes the rest too
    const size_t nargs = static_cast<size_t>(kernel.args);  // the product, the inputs, the outputs
    cpu::parallel_tasks(chunks, [&](int64_t c) {
      const int64_t i0 = c * kRowChunk, rows = c + 1 == chunks ? m - i0 : kRowChunk;
      // The chunk's product goes to a buffer of the thread's own, used again
      // for every chunk: it stays in the core's cache, and the whole product
      // is never written back to memory.  The kernel reads element i of the
      // product at args[0][i], so args[0] is the buffer less the chunk's
      // first element (as an address: only [i0 n, (i0 + rows) n) is read).
      static thread_local std::vector<float> buffer;
      if (buffer.size() < static_cast<size_t>(rows * n)) buffer.resize(static_cast<size_t>(rows * n));
      p.rows(i0, rows, buffer.data());
      std::vector<void*>& local = chunk_args();
      local.assign(args, args + nargs);
      local[0] = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(buffer.data()) -
                                         static_cast<uintptr_t>(i0 * n) * sizeof(float));
      kernel.fn(i0 * n, (i0 + rows) * n, local.data(), rng_seed, rng_offset);
    });
    return;
  }
  // A layer's forward (a linear, deep and batched): the kernel in the GEMM's
  // own store, on each block of the output as it is finished (the ReLU and
  // dropout kernel touches three arrays, not the update's seven; measured no
  // slower than the two passes, and often a few per cent faster).
  BlockKernel on_block{&kernel, args, rng_seed, rng_offset, n};
  if (linear) {
    p.store.epilogue = {&kernel_on_block, &on_block};
    p.rows(0, m, product);
    return;
  }
  // A deep weight gradient (a large batch): each chunk would pack B again,
  // which measured slower than the two passes; so those.
  p.rows(0, m, product);
  run_host_kernel(kernel, m * n, args, rng_seed, rng_offset);
}

Trace gemm_epilogue_pass(const Trace& t) {
  auto t0 = Clock::now();
  VOLT_CHECK(t.names, t.name, "the GEMM epilogue pass needs the trace's names table (Trace::names)");
  const ProxyNames& names = *t.names;
  std::unordered_map<int64_t, int> uses;
  std::unordered_map<int64_t, size_t> gemm_of;  // product id -> index of its matmul
  for (size_t i = 0; i < t.bsyms.size(); ++i) {
    for (const Tensor& a : tensor_args(t.bsyms[i])) ++uses[id_of(a)];
    if (plain_gemm(t.bsyms[i])) gemm_of[id_of(t.bsyms[i].outputs[0])] = i;
  }
  for (const Tensor& o : t.outputs) ++uses[id_of(o)];
  int next = 0;
  for (const BoundSymbol& b : t.bsyms)
    if (b.is_fusion() && b.executor == &cpu_fusion_executor()) {
      const std::string& n = b.fusion_name;
      const std::string prefix = cpu_fusion_executor().prefix();
      if (n.rfind(prefix, 0) == 0) next = std::max(next, std::stoi("0" + n.substr(prefix.size())) + 1);
    }

  // Which matmuls move into which region (by index), and the regions' new form.
  std::unordered_set<size_t> moved;
  std::unordered_map<size_t, std::vector<BoundSymbol>> replace;  // region index -> what takes its place
  for (size_t i = 0; i < t.bsyms.size(); ++i) {
    const BoundSymbol& r = t.bsyms[i];
    if (!r.is_fusion() || r.executor != &cpu_fusion_executor() || !r.kernel) continue;
    // A row region (a LayerNorm, say) is taken by a bf16 linear only, whose
    // product has the shape its rows are reduced over; an elementwise one by any.
    const bool rows = r.kernel->row_len > 0;
    const Shape& shape = rows ? row_shape(r) : r.subsymbols.front().outputs.front().sizes();
    const std::vector<int> comp = components(r);
    // The component reading each candidate product, and each component's products.
    std::map<int, std::vector<int64_t>> products;
    for (const Tensor& in : r.fusion_inputs) {
      auto g = gemm_of.find(id_of(in));
      if (g == gemm_of.end() || uses[id_of(in)] != 1 || in.sizes() != shape || moved.count(g->second)) continue;
      if (rows && !rounds_on_load(t.bsyms[g->second])) continue;
      std::unordered_set<int> readers;
      for (size_t k = 0; k < r.subsymbols.size(); ++k)
        for (const Tensor& a : tensor_args(r.subsymbols[k]))
          if (id_of(a) == id_of(in)) readers.insert(comp[k]);
      if (readers.size() == 1) products[*readers.begin()].push_back(id_of(in));
    }
    std::vector<BoundSymbol> out, rest;
    std::unordered_set<int> taken;
    for (auto& [c, ids] : products) {
      if (ids.size() != 1) continue;  // a part reading two products: left as it is
      const BoundSymbol& gemm = t.bsyms[gemm_of[ids[0]]];
      std::vector<BoundSymbol> part;
      for (size_t k = 0; k < r.subsymbols.size(); ++k)
        if (comp[k] == c) part.push_back(r.subsymbols[k]);
      // The region's inputs are the GEMM's operands, then the kernel's: a part
      // that reads an operand too is left as it is.
      std::unordered_set<int64_t> operands;
      for (const Tensor& o : tensor_args(gemm)) operands.insert(id_of(o));
      bool shares = false;
      for (const BoundSymbol& p : part)
        for (const Tensor& a : tensor_args(p)) shares = shares || operands.count(id_of(a)) > 0;
      if (shares || operands.size() != tensor_args(gemm).size()) continue;
      // A row region is taken whole (what another part of it would leave is
      // not always a region of its own: row values, their expands).
      if (rows && part.size() != r.subsymbols.size()) continue;
      taken.insert(c);
      // The update alone (the product an input) gives the kernel.
      // A region taken whole keeps its name; a part of one gets a new name.
      const bool whole = part.size() == r.subsymbols.size();
      BoundSymbol update = region_of(r, part, whole ? r.fusion_name : cpu_fusion_executor().prefix() + std::to_string(next));
      // The product is the kernel's first pointer (run_gemm_epilogue); the
      // others keep their order, which is also the order the region below reads them in.
      auto& ins = update.fusion_inputs;
      auto at = std::find_if(ins.begin(), ins.end(), [&](const Tensor& x) { return id_of(x) == ids[0]; });
      std::rotate(ins.begin(), at, at + 1);
      auto kernel = generate_kernel(update, names, rounds_on_load(gemm));
      BoundSymbol m = gemm;
      m.executor = nullptr;
      m.del_after.clear();
      part.insert(part.begin(), m);
      BoundSymbol e = region_of(r, std::move(part), update.fusion_name);
      e.kernel = std::move(kernel);
      if (!whole) ++next;
      moved.insert(gemm_of[ids[0]]);
      out.push_back(std::move(e));
    }
    if (out.empty()) continue;
    for (size_t k = 0; k < r.subsymbols.size(); ++k)
      if (!taken.count(comp[k])) rest.push_back(r.subsymbols[k]);
    if (!rest.empty()) {
      BoundSymbol left = region_of(r, std::move(rest), r.fusion_name);
      left.kernel = generate_kernel(left, names);
      out.push_back(std::move(left));
    }
    replace[i] = std::move(out);
  }

  Trace r = t;
  r.bsyms.clear();
  for (size_t i = 0; i < t.bsyms.size(); ++i) {
    if (moved.count(i)) continue;
    if (auto it = replace.find(i); it != replace.end()) {
      for (BoundSymbol& b : it->second) r.bsyms.push_back(std::move(b));
      continue;
    }
    r.bsyms.push_back(t.bsyms[i]);
  }
  r.provenance = "GEMM epilogues";
  r.millis = ms_since(t0);
  return r;
}

namespace {

// cpu-fusion runs a GEMM epilogue region here: the product first, then the
// region's kernel in its store.  inputs: the product's operands, then the region's.
std::vector<Tensor> run_region(const BoundSymbol& f, const std::vector<Tensor>& inputs, const PhiloxState& rng) {
  std::vector<Tensor> keep;
  std::vector<void*> ptrs;
  Tensor product = Tensor::empty(f.subsymbols.front().outputs.front().sizes(), DType::f32, kCPU);
  ptrs.push_back(product.raw_data());
  const size_t operands = gemm_operands(f);
  VOLT_CHECK(inputs.size() >= operands, f.fusion_name, "expects its product's " << operands << " operands first");
  for (size_t i = operands; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    VOLT_CHECK(in.device().is_cpu(), f.fusion_name, "expected CPU tensors, got " << in.meta_str());
    keep.push_back(in.is_contiguous() ? in : in.contiguous());
    ptrs.push_back(keep.back().raw_data());
  }
  std::vector<Tensor> outs;
  for (const Tensor& o : f.outputs) {
    outs.push_back(Tensor::empty(o.sizes(), o.dtype(), o.device()));
    ptrs.push_back(outs.back().raw_data());
  }
  run_gemm_epilogue(f, inputs.data(), product.data_ptr<float>(), ptrs.data(), rng.seed,
                    rng.offset + f.kernel->rng_base);
  return outs;
}

const bool g_gemm_epilogue_registered = [] {
  register_pass({"GEMM epilogues", PassStage::Regions, /*rewrite=*/true, /*opt_in=*/false,
                 [](std::vector<Trace>& traces) { traces.push_back(gemm_epilogue_pass(traces.back())); }});
  register_region_runner({is_gemm_epilogue, run_region});
  return true;
}();

}  // namespace

}  // namespace volt::jit
