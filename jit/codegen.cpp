#include <volt/jit/codegen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>
#include <unordered_map>

#include <volt/jit/codegen_detail.h>
#include <volt/jit/kernel_cache.h>
#include <volt/half_source.h>
#include <volt/math_functions_source.h>
#include <volt/philox_source.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/identifiers.h>

namespace volt::jit {

namespace detail {

// The C type a kernel computes a dtype in: bf16 and f16 in float (they are
// held as their bits in memory: memory_type).
std::string compute_type(DType t) { return is_half(t) ? std::string("float") : std::string(dtype_c_type(t)); }

std::string literal(const Scalar& s, DType t) {
  std::string c = compute_type(t);
  if (t == DType::b8) return s.value != 0 ? "true" : "false";
  // Infinities and NaN as expressions that host C++ and NVRTC both accept
  // (masks fill with -inf).
  if (is_floating(t) && std::isinf(s.value)) return "((" + c + ")(" + (s.value < 0 ? "-" : "") + "1.0 / 0.0))";
  if (is_floating(t) && std::isnan(s.value)) return "((" + c + ")(0.0 / 0.0))";
  if (is_floating(t)) return "((" + c + ")" + python_float_repr(s.value) + ")";
  return "((" + c + ")" + std::to_string(static_cast<long long>(s.value)) + "LL)";
}

// Index of element i of the region's shape in a (broadcast) input of shape `in`.
std::string index_expr(const Shape& in, const Shape& out, const std::string& var) {
  if (in == out) return var;
  if (shape_numel(in) == 1) return "0";
  Shape padded(out.size() - in.size(), 1);
  padded.insert(padded.end(), in.begin(), in.end());
  Shape ost = contiguous_strides(out), ist = contiguous_strides(padded);
  // Adjacent dims the input does not broadcast are read as one (size-1 dims
  // join them): a row value (16, 4, 128, 1) read across (16, 4, 128, 128)
  // is i / 128, a bias (512) across (2048, 512) is i % 512.
  std::string r;
  bool leading = true;  // no dim of size > 1 before this one
  for (size_t d = 0; d < out.size();) {
    if (padded[d] == 1) {
      leading = leading && out[d] == 1;
      ++d;
      continue;
    }
    size_t e = d;
    int64_t extent = out[d];
    while (e + 1 < out.size() && (padded[e + 1] != 1 || out[e + 1] == 1)) extent *= out[++e];
    std::string term = ost[e] == 1 ? var : "(" + var + " / " + std::to_string(ost[e]) + "LL)";
    if (!leading) term = "(" + term + " % " + std::to_string(extent) + "LL)";
    if (ist[e] != 1) term += " * " + std::to_string(ist[e]) + "LL";
    r += (r.empty() ? "" : " + ") + term;
    leading = false;
    d = e + 1;
  }
  return r.empty() ? "0" : r;
}

// The C expression one prim computes, from the op table's row.
std::string prim_expr(const OpCall& c, DType result, const NameFn& name, unsigned long long rng_shift) {
  if (c.op == OpId::uniform) {
    const bool f32 = c.attrs.dtype == DType::f32;
    return std::string(f32 ? "volt_uniform_range_f32" : "volt_uniform_range_f64") + "(rng_seed, rng_offset + " +
           std::to_string(c.attrs.offset - rng_shift) + "ULL, (unsigned long long)i, " +
           literal(c.attrs.a, c.attrs.dtype) + ", " + literal(c.attrs.b, c.attrs.dtype) + ")";
  }
  const OpKind kind = op_info(c.op).kind;
  // A bool converted to a number as a select of 1 or 0 (the same values):
  // GCC does not vectorise a cast from bool, which leaves the whole loop
  // around it scalar, a dropout's Philox draw included.
  if (kind == OpKind::Convert && c.args[0].is_tensor && c.args[0].tensor.dtype() == DType::b8 &&
      result != DType::b8) {
    const std::string t = compute_type(result);
    return "(" + name(c.args[0].tensor) + " ? (" + t + ")1 : (" + t + ")0)";
  }
  const DType cd = compute_dtype(c);  // the one rule, as the eager kernels
  std::vector<std::string> ops;
  for (size_t i = 0; i < c.args.size(); ++i) {
    DType want = cd;
    if (kind == OpKind::Ternary && i == 0) want = DType::b8;
    if (kind == OpKind::Convert) want = c.args[0].tensor.dtype();
    const Value& v = c.args[i];
    ops.push_back(v.is_tensor ? "((" + compute_type(want) + ")" + name(v.tensor) + ")" : literal(v.scalar, want));
  }
  return fill_op_expr(op_info(c.op).expr, ops, compute_type(result));
}

std::string memory_type(DType t) {
  if (is_half(t)) return "unsigned short";
  return t == DType::b8 ? std::string("unsigned char") : std::string(dtype_c_type(t));
}
std::string local_type(DType t) { return t == DType::b8 ? std::string("int") : compute_type(t); }

std::string load_value(DType t, const std::string& e) {
  if (!is_half(t)) return e;
  return (t == DType::bf16 ? "volt_bf16_to_f32(" : "volt_f16_to_f32(") + e + ")";
}
std::string store_value(DType t, const std::string& e) {
  if (!is_half(t)) return e;
  return (t == DType::bf16 ? "volt_f32_to_bf16(" : "volt_f32_to_f16(") + e + ")";
}
std::string round_value(DType t, const std::string& e) { return load_value(t, store_value(t, e)); }

void emit_pointers(std::ostream& os, const BoundSymbol& f, const NameFn& name, bool sums_first) {
  size_t k = 0;
  for (const Tensor& in : f.fusion_inputs) {
    if (sums_first && k == 0) {  // the first pointer: the f32 sums the value is rounded from
      os << "  const float* in_" << name(in) << " = (const float*)args[" << k++ << "];  // f32 sums, rounded to "
         << dtype_name(in.dtype()) << " on load\n";
      continue;
    }
    os << "  const " << memory_type(in.dtype()) << "* in_" << name(in) << " = (const " << memory_type(in.dtype())
       << "*)args[" << k++ << "];\n";
  }
  for (const Tensor& o : f.outputs)
    os << "  " << memory_type(o.dtype()) << "* out_" << name(o) << " = (" << memory_type(o.dtype()) << "*)args["
       << k++ << "];\n";
}

std::string load_input(const BoundSymbol& f, const Tensor& in, const std::string& e, bool sums_first) {
  const bool sums = sums_first && !f.fusion_inputs.empty() && id_of(in) == id_of(f.fusion_inputs.front());
  return sums ? round_value(in.dtype(), e) : load_value(in.dtype(), e);
}

}  // namespace detail

namespace {

using namespace detail;

// The kernel function of region `f`, its values named by `name`, its Philox
// counters less `rng_shift`.
std::string render(const BoundSymbol& f, const std::string& kernel_name, const NameFn& name,
                   unsigned long long rng_shift, bool sums_first) {
  if (is_row_region(f)) return render_rows(f, kernel_name, name, rng_shift, sums_first);
  const Shape& shape = f.subsymbols.front().outputs.front().sizes();
  std::ostringstream os;
  os << "VOLT_KERNEL(" << kernel_name << ") {\n";
  // Booleans are read and written as bytes (0 or 1) and held in the loop as
  // ints: GCC leaves a loop that loads, holds or stores a `bool` unvectorised
  // ("no vectype"), Philox draws and all.
  emit_pointers(os, f, name, sums_first);
  os << "  VOLT_LOOP(i, n) {\n";
  // bf16 and f16 are loaded into float, every prim's result in them rounded
  // as eager mode stores it, and stored as bits (tensor/half.inc).
  for (const Tensor& in : f.fusion_inputs) {
    const std::string load = "in_" + name(in) + "[" + index_expr(in.sizes(), shape) + "]";
    os << "    const " << local_type(in.dtype()) << " " << name(in) << " = " << load_input(f, in, load, sums_first)
       << ";\n";
  }
  for (const BoundSymbol& p : f.subsymbols) {
    const Tensor& out = p.outputs[0];
    const std::string e = "(" + compute_type(out.dtype()) + ")" + prim_expr(p.call, out.dtype(), name, rng_shift);
    os << "    const " << local_type(out.dtype()) << " " << name(out) << " = " << round_value(out.dtype(), e) << ";\n";
  }
  for (const Tensor& o : f.outputs)
    os << "    out_" << name(o) << "[i] = " << store_value(o.dtype(), name(o)) << ";\n";
  os << "  }\n}\n";
  return os.str();
}

// Host-side definitions of the two macros.  A host kernel computes elements
// [volt_begin, n); run_host_kernel splits a region over volt's threads, so
// the loop itself is only vectorised (`omp simd`, no threads of its own).
const char* kHostPrelude = R"volt(#define VOLT_HD
#define VOLT_PASTE2(a, b) a##b
#define VOLT_PASTE(a, b) VOLT_PASTE2(a, b)
#define VOLT_KERNEL(name) extern "C" void VOLT_PASTE(name, VOLT_KEY)(long long volt_begin, long long n, \
    void* const* args, unsigned long long rng_seed, unsigned long long rng_offset)
#define VOLT_LOOP(i, n) (void)rng_seed; (void)rng_offset; \
    _Pragma("omp simd") for (long long i = volt_begin; i < n; ++i)
)volt";

// CUDA definitions of the same: one thread per element, grid-stride; the
// pointers come in a by-value table (kernel parameters live in constant
// memory, so a launch allocates nothing on the device).
const char* kCudaPrelude = R"volt(// volt fused-kernel prelude (CUDA)
#define VOLT_HD __device__
struct volt_args {
  void* p[VOLT_MAX_ARGS];
  __device__ void* operator[](int i) const { return p[i]; }
};
#define VOLT_KERNEL(name) extern "C" __global__ void name(long long n, volt_args args, \
    unsigned long long volt_rng_seed, unsigned long long volt_rng_offset)
// The table's last slot, when set, points at the Philox seed and offset in
// device memory (a captured CUDA graph: tensor/cuda/graph.h); the offset
// argument is then relative to the one stored there.
#define volt_rng_word ((const unsigned long long*)args.p[VOLT_MAX_ARGS - 1])
#define rng_seed (volt_rng_word ? volt_rng_word[0] : volt_rng_seed)
#define rng_offset ((volt_rng_word ? volt_rng_word[1] : 0ull) + volt_rng_offset)
#define VOLT_LOOP(i, n) \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (long long)blockDim.x * gridDim.x)
)volt";

}  // namespace

void run_host_kernel(const FusedKernel& kernel, long long n, void* const* args, unsigned long long rng_seed,
                     unsigned long long rng_offset) {
  // Below 64 Ki elements a second thread costs more than it saves.
  const int64_t grain = kernel.row_len > 0 ? std::max<int64_t>(1, 32768 / kernel.row_len) : 32768;
  cpu::parallel_for(n, grain, [&](int64_t begin, int64_t end) { kernel.fn(begin, end, args, rng_seed, rng_offset); });
}

std::shared_ptr<FusedKernel> generate_kernel(const BoundSymbol& f, const ProxyNames& names, bool sums_first) {
  VOLT_CHECK(!f.subsymbols.empty(), f.fusion_name, "a fusion region without prims");
  VOLT_CHECK(!sums_first || (!f.fusion_inputs.empty() && is_half(f.fusion_inputs.front().dtype())),
             f.fusion_name,
             "reads its first input as f32 sums rounded on load: a region whose first input is bf16 or f16 (got "
                 << (f.fusion_inputs.empty() ? std::string("no input") : f.fusion_inputs.front().meta_str()) << ")");
  // bf16 and f16: in elementwise prims of any region (host C++ and CUDA; a
  // row region's reductions read f32 or f64 only: is_row_reduction), no draws.
  for (const BoundSymbol& p : f.subsymbols) {
    auto refuse_half = [&](const Tensor& t) {
      VOLT_CHECK(!is_half(t.dtype()) || p.call.op != OpId::uniform, op_name(p.call.op),
                 "generated random draws in kernels do not compute on " << dtype_name(t.dtype())
                                                                        << " tensors yet (eager mode does)");
    };
    for (const Value& v : p.call.args)
      if (v.is_tensor && v.tensor.defined()) refuse_half(v.tensor);
    for (const Tensor& o : p.outputs) refuse_half(o);
  }
  auto k = std::make_shared<FusedKernel>();
  k->name = f.fusion_name;
  k->args = static_cast<long long>(f.fusion_inputs.size() + f.outputs.size());
  bool draws = false;
  unsigned long long base = ~0ull;
  for (const BoundSymbol& p : f.subsymbols)
    if (p.call.op == OpId::uniform) {
      draws = true;
      base = std::min<unsigned long long>(base, p.call.attrs.offset);
    }
  k->rng_base = draws ? base : 0;
  if (is_row_region(f)) {
    for (const BoundSymbol& p : f.subsymbols)
      if (is_row_reduction(p)) {
        const Tensor& in = p.call.args[0].tensor;
        k->row_len = in.sizes().back();
        k->extent = in.numel() / std::max<int64_t>(1, k->row_len);
        break;
      }
  } else {
    k->extent = static_cast<long long>(f.subsymbols.front().outputs.front().numel());
  }

  // Canonical names: v0, v1, ... in the order the region defines its values.
  std::unordered_map<int64_t, std::string> canon;
  auto define = [&](const Tensor& t) { canon.emplace(id_of(t), "v" + std::to_string(canon.size())); };
  for (const Tensor& in : f.fusion_inputs) define(in);
  for (const BoundSymbol& p : f.subsymbols)
    for (const Tensor& o : p.outputs) define(o);
  auto canonical = [&](const Tensor& t) { return canon.at(id_of(t)); };
  k->key = render(f, "fusion", canonical, k->rng_base, sums_first);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash_string(k->key)));
  k->symbol = std::string("volt_fused_") + hex;
  k->body = render(f, k->symbol, canonical, k->rng_base, sums_first);

  auto readable = [&](const Tensor& t) { return names.name(t); };
  const std::string extent = k->row_len > 0 ? std::to_string(k->extent) + " rows of " + std::to_string(k->row_len)
                                             : shape_str(f.subsymbols.front().outputs.front().sizes());
  k->source = "// " + f.fusion_name + ": " + extent +
              " (compiled as " + k->symbol + ")\n" + render(f, f.fusion_name, readable, 0, sums_first);
  return k;
}

namespace {

// Whether a kernel converts bf16/f16 (tensor/half.inc's functions).
bool uses_half(const FusedKernel& k) {
  return k.body.find("volt_f32_to_") != std::string::npos || k.body.find("_to_f32(") != std::string::npos;
}

}  // namespace

std::string host_source(const std::vector<const FusedKernel*>& kernels) {
  std::string s = "#include <cmath>\n" + std::string(kMathFunctionsSource) + kHostPrelude + host_row_prelude() +
                  kPhiloxSource + "\n";
  // The bf16/f16 conversions only where a kernel uses them: other sources,
  // and the kernel cache's keys for them, stay as they were.
  for (const FusedKernel* k : kernels)
    if (uses_half(*k)) {
      s += std::string(kHalfSource) + "\n";
      break;
    }
  for (const FusedKernel* k : kernels) s += k->body + "\n";
  return s;
}

const std::string& cuda_prelude() {
  static const std::string p = "#define VOLT_MAX_ARGS " + std::to_string(kMaxKernelArgs) + "\n" +
                               kMathFunctionsSource + "\n" + kCudaPrelude +
                               cuda_row_prelude() + kPhiloxSource + "\n";
  return p;
}

std::string cuda_source(const FusedKernel& k) {
  // As on the host: the conversions (as __device__ functions) only where used.
  return cuda_prelude() + (uses_half(k) ? std::string(kHalfSource) + "\n" : std::string()) + k.body;
}

std::string kernel_source(const BoundSymbol& region) { return region.kernel ? region.kernel->source : ""; }

}  // namespace volt::jit
