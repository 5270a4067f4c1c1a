// Row kernels: a fused region whose prims include reductions over the
// innermost dim (a softmax, a LayerNorm, their gradients).  Every value of
// the region is either a *row* value (one per row: a reduction's result, or
// an elementwise prim of row values only) or an *element* value (one per
// element of the region's shape S).  The kernel takes one row at a time and
// walks it in passes: a reduction whose input needs the result of another
// reduction waits for the next pass, and the last pass writes the element
// outputs.  An element value a later pass needs again is recomputed from the
// inputs rather than stored: a row is in cache, arithmetic is cheap, and the
// kernel writes nothing but its outputs.
//
//   VOLT_ROW_KERNEL(volt_fused_...) {               // softmax over rows of 7
//     ...pointers...
//     VOLT_ROWS(r) {                                // host: this thread's rows; CUDA: a block's rows
//       float acc0 = volt_lowest<float>();
//       VOLT_COLS(j, 7LL, reduction(volt_max_f32 : acc0)) {   // pass 0
//         long long i = r * 7LL + j;
//         const float v0 = in_v0[i];
//         acc0 = volt_max(acc0, v0);
//       }
//       const float v1 = (float)VOLT_ROW_MAX(acc0);  // CUDA: the block's threads combine
//       double acc1 = 0;
//       VOLT_COLS(j, 7LL, reduction(+ : acc1)) { ... exp(v0 - v1) ... }   // pass 1
//       ...
//       VOLT_COLS(j, 7LL, ) { ... out_v5[i] = v5; }   // the last pass: the outputs
//
// Sums of floating values accumulate in f64, as the eager kernels' do.  bf16
// and f16 values (an autocast's converts around a LayerNorm or a softmax) are
// loaded into float, rounded after each prim and stored as bits, as in the
// elementwise kernels.
#include <algorithm>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <volt/jit/codegen.h>
#include <volt/jit/codegen_detail.h>

namespace volt::jit {

bool is_row_reduction(const BoundSymbol& p) {
  if (p.is_fusion()) return false;
  const OpId op = p.call.op;
  if (op != OpId::sum && op != OpId::amax && op != OpId::amin) return false;
  if (p.call.args.empty() || !p.call.args[0].is_tensor) return false;
  const Tensor& in = p.call.args[0].tensor;
  // bf16/f16 reductions run eagerly (computing in f32): a row kernel reduces
  // f32 or f64 only (its elementwise prims may read and make bf16/f16).
  if (!in.defined() || in.dim() == 0 || !is_floating(in.dtype()) || is_half(in.dtype()) || in.sizes().back() < 1)
    return false;
  const auto& dims = p.call.attrs.ints;
  // keepdim: the result is S with its innermost dim 1, which broadcasts back per row.
  return p.call.attrs.flag && dims.size() == 1 && dims[0] == in.dim() - 1 && p.outputs.size() == 1 &&
         p.outputs[0].dtype() == in.dtype();
}

bool is_row_region(const BoundSymbol& f) {
  if (!f.is_fusion()) return false;
  for (const BoundSymbol& p : f.subsymbols)
    if (is_row_reduction(p)) return true;
  return false;
}

unsigned row_kernel_threads(long long row_len) { return row_len >= 128 ? 128u : 32u; }

namespace detail {

namespace {

// What the kernel knows of each value of a row region.
struct RowValue {
  bool row = false;  // one per row (else one per element)
  int pass = 0;      // the first pass that can compute it (row values: that exist before it)
};

struct RowRegion {
  Shape shape;          // S: the reductions' input shape
  long long len = 0;    // the row length, S's innermost dim
  Shape row_shape;      // S with its innermost dim 1
  std::unordered_map<int64_t, RowValue> values;
};

bool row_input(const Shape& in, const RowRegion& R) {
  if (shape_numel(in) == 1) return true;
  return static_cast<int64_t>(in.size()) == static_cast<int64_t>(R.shape.size()) ? in.back() == 1
         : in.size() < R.shape.size() ? (in.empty() || in.back() == 1)
                                      : false;
}

RowRegion analyse(const BoundSymbol& f) {
  RowRegion R;
  for (const BoundSymbol& p : f.subsymbols)
    if (is_row_reduction(p)) {
      R.shape = p.call.args[0].tensor.sizes();
      break;
    }
  R.len = R.shape.back();
  R.row_shape = R.shape;
  R.row_shape.back() = 1;
  for (const Tensor& in : f.fusion_inputs) R.values[id_of(in)] = {row_input(in.sizes(), R), 0};
  for (const BoundSymbol& p : f.subsymbols) {
    RowValue v;
    if (is_row_reduction(p)) {
      v.row = true;
      v.pass = R.values.at(id_of(p.call.args[0].tensor)).pass + 1;
    } else {
      v.row = p.call.op != OpId::expand && p.call.op != OpId::uniform;
      for (const Tensor& a : tensor_args(p)) {
        const RowValue& in = R.values.at(id_of(a));
        v.row = v.row && in.row;
        v.pass = std::max(v.pass, in.pass);
      }
    }
    for (const Tensor& o : p.outputs) R.values[id_of(o)] = v;
  }
  return R;
}

// The accumulator of a reduction: f64 for sums (as the eager kernels), else the value's type.
std::string acc_type(const BoundSymbol& p) {
  return p.call.op == OpId::sum ? "double" : dtype_c_type(p.outputs[0].dtype());
}

// What it starts from: 0, or the extreme a max or min cannot return.
std::string acc_init(const BoundSymbol& p) {
  if (p.call.op == OpId::sum) return "0";
  return std::string(p.call.op == OpId::amax ? "volt_lowest<" : "volt_highest<") + acc_type(p) + ">()";
}

class RowRenderer {
 public:
  RowRenderer(const BoundSymbol& f, const NameFn& name, unsigned long long rng_shift, bool sums_first)
      : f_(f), name_(name), shift_(rng_shift), sums_first_(sums_first), R_(analyse(f)) {
    for (const Tensor& o : f.outputs) outputs_.insert(id_of(o));
    for (const Tensor& in : f.fusion_inputs) inputs_.insert(id_of(in));
  }

  std::string render(const std::string& kernel_name) {
    os_ << "VOLT_ROW_KERNEL(" << kernel_name << ") {\n";
    emit_pointers(os_, f_, name_, sums_first_);
    os_ << "  VOLT_ROWS(r) {\n";
    for (const Tensor& in : f_.fusion_inputs)
      if (row(in))
        os_ << "    const " << local_type(in.dtype()) << " " << name_(in) << " = "
            << load_input(f_, in, "in_" + name_(in) + "[" + index_expr(padded(in.sizes()), R_.row_shape, "r") + "]",
                          sums_first_)
            << ";\n";
    emit_row_prims(0);
    int last = -1;  // the pass that writes the element outputs
    for (const Tensor& o : f_.outputs)
      if (!row(o)) last = std::max(last, pass(o));
    int passes = last + 1;
    for (const BoundSymbol& p : f_.subsymbols)
      if (is_row_reduction(p)) passes = std::max(passes, pass(p.call.args[0].tensor) + 1);
    for (int k = 0; k < passes; ++k) emit_pass(k, k == passes - 1 && last >= 0);
    os_ << "  }\n}\n";
    return os_.str();
  }

 private:
  bool row(const Tensor& t) const { return R_.values.at(id_of(t)).row; }
  int pass(const Tensor& t) const { return R_.values.at(id_of(t)).pass; }
  bool made_here(const Tensor& t) const { return !inputs_.count(id_of(t)); }

  // An input's shape with the leading 1s of S's rank.
  Shape padded(const Shape& in) const {
    Shape p(R_.shape.size() > in.size() ? R_.shape.size() - in.size() : 0, 1);
    p.insert(p.end(), in.begin(), in.end());
    return p;
  }

  std::string define(const BoundSymbol& p) const {
    const Tensor& out = p.outputs[0];
    const std::string e = p.call.op == OpId::expand ? name_(p.call.args[0].tensor)
                                                    : prim_expr(p.call, out.dtype(), name_, shift_);
    // A bf16/f16 value is held in float, rounded as eager mode stores it.
    const std::string typed = is_half(out.dtype()) ? round_value(out.dtype(), "(float)" + e)
                                                   : "(" + std::string(dtype_c_type(out.dtype())) + ")" + e;
    return "const " + local_type(out.dtype()) + " " + name_(out) + " = " + typed + ";";
  }

  // The row prims (not reductions) that become computable after pass k - 1, in order.
  void emit_row_prims(int k) {
    for (const BoundSymbol& p : f_.subsymbols) {
      if (is_row_reduction(p) || !row(p.outputs[0]) || pass(p.outputs[0]) != k) continue;
      os_ << "    " << define(p) << "\n";
      store_row(p.outputs[0]);
    }
  }
  void store_row(const Tensor& v) {
    if (outputs_.count(id_of(v)))
      os_ << "    VOLT_ONCE out_" << name_(v) << "[r] = " << store_value(v.dtype(), name_(v)) << ";\n";
  }

  // Pass k: the element values its reductions read (and, in the last pass,
  // the outputs), then the reductions' results and the row values they allow.
  void emit_pass(int k, bool writes_outputs) {
    std::vector<const BoundSymbol*> reductions;
    std::unordered_set<int64_t> need;
    for (const BoundSymbol& p : f_.subsymbols)
      if (is_row_reduction(p) && pass(p.call.args[0].tensor) == k) {
        reductions.push_back(&p);
        need.insert(id_of(p.call.args[0].tensor));
      }
    if (writes_outputs)
      for (const Tensor& o : f_.outputs)
        if (!row(o)) need.insert(id_of(o));
    if (need.empty()) return;
    // What those need, back to the inputs (a row value is at hand already).
    std::vector<const BoundSymbol*> body;
    for (auto it = f_.subsymbols.rbegin(); it != f_.subsymbols.rend(); ++it) {
      const BoundSymbol& p = *it;
      if (is_row_reduction(p) || row(p.outputs[0]) || !need.count(id_of(p.outputs[0]))) continue;
      body.push_back(&p);
      for (const Tensor& a : tensor_args(p)) need.insert(id_of(a));
    }
    std::reverse(body.begin(), body.end());
    std::string clauses;
    for (const BoundSymbol* p : reductions) {
      const std::string acc = "acc_" + name_(p->outputs[0]);
      const std::string t = acc_type(*p);
      os_ << "    " << t << " " << acc << " = " << acc_init(*p) << ";\n";
      clauses += p->call.op == OpId::sum ? " reduction(+ : " + acc + ")"
                                         : std::string(" reduction(volt_") + (p->call.op == OpId::amax ? "max" : "min") +
                                               "_" + dtype_name(p->outputs[0].dtype()) + " : " + acc + ")";
    }
    const std::string len = std::to_string(R_.len) + "LL";
    os_ << "    VOLT_COLS(j, " << len << "," << clauses << ") {\n";
    os_ << "      long long i = r * " << len << " + j;\n";
    for (const Tensor& in : f_.fusion_inputs)
      if (!row(in) && need.count(id_of(in)))
        os_ << "      const " << local_type(in.dtype()) << " " << name_(in) << " = "
            << load_input(f_, in, "in_" + name_(in) + "[" + element_index(in.sizes()) + "]", sums_first_) << ";\n";
    for (const BoundSymbol* p : body) os_ << "      " << define(*p) << "\n";
    for (const BoundSymbol* p : reductions) {
      const std::string acc = "acc_" + name_(p->outputs[0]), v = name_(p->call.args[0].tensor);
      if (p->call.op == OpId::sum) os_ << "      " << acc << " += (double)" << v << ";\n";
      else os_ << "      " << acc << " = volt_" << (p->call.op == OpId::amax ? "max" : "min") << "(" << acc << ", " << v << ");\n";
    }
    if (writes_outputs)
      for (const Tensor& o : f_.outputs)
        if (!row(o)) os_ << "      out_" << name_(o) << "[i] = " << store_value(o.dtype(), name_(o)) << ";\n";
    os_ << "    }\n";
    for (const BoundSymbol* p : reductions) {
      const Tensor& out = p->outputs[0];
      const char* combine = p->call.op == OpId::sum ? "VOLT_ROW_SUM" : p->call.op == OpId::amax ? "VOLT_ROW_MAX" : "VOLT_ROW_MIN";
      os_ << "    const " << local_type(out.dtype()) << " " << name_(out) << " = (" << dtype_c_type(out.dtype()) << ")"
          << combine << "(acc_" << name_(out) << ");\n";
      store_row(out);
    }
    emit_row_prims(k + 1);
  }

  std::string element_index(const Shape& in) const {
    const Shape p = padded(in);
    if (p == R_.shape) return "i";
    if (p.back() != R_.len) return index_expr(in, R_.shape, "i");
    // Contiguous along the row: its row's start (loop-invariant), then j.
    Shape rows = p;
    rows.back() = 1;
    const std::string start = index_expr(rows, R_.row_shape, "r");
    return start == "0" ? "j" : "(" + start + ") * " + std::to_string(R_.len) + "LL + j";
  }

  const BoundSymbol& f_;
  const NameFn& name_;
  unsigned long long shift_;
  bool sums_first_;  // the first input is read as f32 sums and rounded on load (generate_kernel)
  RowRegion R_;
  std::unordered_set<int64_t> outputs_, inputs_;
  std::ostringstream os_;
};

}  // namespace

std::string render_rows(const BoundSymbol& f, const std::string& kernel_name, const NameFn& name,
                        unsigned long long rng_shift, bool sums_first) {
  return RowRenderer(f, name, rng_shift, sums_first).render(kernel_name);
}

// Shared by both devices: the extremes a max or min starts from, and
// NaN-propagating max and min (a NaN anywhere in a row makes its amax NaN, as
// the eager kernels do).
#define VOLT_ROW_COMMON                                                                           \
  "template <class T> VOLT_HD inline T volt_lowest() { return (T)(-1.0 / 0.0); }\n"              \
  "template <class T> VOLT_HD inline T volt_highest() { return (T)(1.0 / 0.0); }\n"              \
  "template <class T> VOLT_HD inline T volt_max(T a, T b) { return (b != b || b > a) ? b : a; }\n" \
  "template <class T> VOLT_HD inline T volt_min(T a, T b) { return (b != b || b < a) ? b : a; }\n"

const char* host_row_prelude() {
  // A host row kernel takes rows [volt_begin, rows) (run_host_kernel splits
  // them over volt's threads); a pass over a row is one vectorised loop,
  // its reductions OpenMP simd reductions (max and min as declared ones, NaN-aware).
  return "#define VOLT_ROW_KERNEL(name) extern \"C\" void VOLT_PASTE(name, VOLT_KEY)(long long volt_begin, \\\n"
         "    long long rows, void* const* args, unsigned long long rng_seed, unsigned long long rng_offset)\n"
         "#define VOLT_ROWS(r) (void)rng_seed; (void)rng_offset; for (long long r = volt_begin; r < rows; ++r)\n"
         "#define VOLT_PRAGMA(x) _Pragma(#x)\n"
         "#define VOLT_COLS(j, len, ...) VOLT_PRAGMA(omp simd __VA_ARGS__) for (long long j = 0; j < (len); ++j)\n"
         "#define VOLT_ROW_SUM(a) (a)\n"
         "#define VOLT_ROW_MAX(a) (a)\n"
         "#define VOLT_ROW_MIN(a) (a)\n"
         "#define VOLT_ONCE\n" VOLT_ROW_COMMON
         "#pragma omp declare reduction(volt_max_f32 : float : omp_out = volt_max(omp_out, omp_in)) "
         "initializer(omp_priv = volt_lowest<float>())\n"
         "#pragma omp declare reduction(volt_max_f64 : double : omp_out = volt_max(omp_out, omp_in)) "
         "initializer(omp_priv = volt_lowest<double>())\n"
         "#pragma omp declare reduction(volt_min_f32 : float : omp_out = volt_min(omp_out, omp_in)) "
         "initializer(omp_priv = volt_highest<float>())\n"
         "#pragma omp declare reduction(volt_min_f64 : double : omp_out = volt_min(omp_out, omp_in)) "
         "initializer(omp_priv = volt_highest<double>())\n";
}

const char* cuda_row_prelude() {
  // A CUDA row kernel: a block per row (grid-stride over rows), its threads
  // striding over the row; the block combines its threads' partial results
  // in shared memory (blockDim.x is a power of two, at most 128).
  return "#define VOLT_ROW_KERNEL(name) extern \"C\" __global__ void name(long long rows, volt_args args, \\\n"
         "    unsigned long long volt_rng_seed, unsigned long long volt_rng_offset)\n"
         "#define VOLT_ROWS(r) for (long long r = blockIdx.x; r < rows; r += gridDim.x)\n"
         "#define VOLT_COLS(j, len, ...) for (long long j = threadIdx.x; j < (len); j += blockDim.x)\n"
         "#define VOLT_ONCE if (threadIdx.x == 0)\n" VOLT_ROW_COMMON
         "template <class T, class F> __device__ T volt_block_combine(T v, F f) {\n"
         "  __shared__ T part[128];\n"
         "  part[threadIdx.x] = v;\n"
         "  __syncthreads();\n"
         "  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {\n"
         "    if (threadIdx.x < s) part[threadIdx.x] = f(part[threadIdx.x], part[threadIdx.x + s]);\n"
         "    __syncthreads();\n"
         "  }\n"
         "  const T r = part[0];\n"
         "  __syncthreads();\n"
         "  return r;\n"
         "}\n"
         "template <class T> struct volt_add_op { __device__ T operator()(T a, T b) const { return a + b; } };\n"
         "template <class T> struct volt_max_op { __device__ T operator()(T a, T b) const { return volt_max(a, b); } };\n"
         "template <class T> struct volt_min_op { __device__ T operator()(T a, T b) const { return volt_min(a, b); } };\n"
         "#define VOLT_ROW_SUM(a) volt_block_combine(a, volt_add_op<decltype(a)>())\n"
         "#define VOLT_ROW_MAX(a) volt_block_combine(a, volt_max_op<decltype(a)>())\n"
         "#define VOLT_ROW_MIN(a) volt_block_combine(a, volt_min_op<decltype(a)>())\n";
}

}  // namespace detail

}  // namespace volt::jit
