#include <volt/tensor/cuda/kernels.h>

#include <sstream>

#include <volt/tensor/error.h>
#include <volt/tensor/identifiers.h>
#include <volt/cross_entropy_source.h>

namespace volt::cuda {

namespace {

std::string ct(DType t) { return dtype_c_type(t); }

// bf16 and f16 live in memory as their bits (unsigned short) and are computed
// in float: loaded and stored through tensor/half.inc's conversions, which
// the prelude carries.  Other dtypes are their C types throughout.
std::string mem(DType t) { return is_half(t) ? std::string("unsigned short") : ct(t); }
std::string calc(DType t) { return is_half(t) ? std::string("float") : ct(t); }
std::string load(DType t, const std::string& e) {
  if (!is_half(t)) return e;
  return std::string(t == DType::bf16 ? "volt_bf16_to_f32(" : "volt_f16_to_f32(") + e + ")";
}
// e (of C type float, or anything that converts to it) rounded once to t.
std::string store(DType t, const std::string& e) {
  if (!is_half(t)) return e;
  return std::string(t == DType::bf16 ? "volt_f32_to_bf16((float)(" : "volt_f32_to_f16((float)(") + e + "))";
}

// The dtype operand k is converted to before the expression sees it.
DType load_dtype(const ElementwiseSpec& s, size_t k) {
  OpKind kind = op_info(s.op).kind;
  if (kind == OpKind::Ternary && k == 0) return DType::b8;
  if (kind == OpKind::Convert) return s.operands[0].dtype;
  return s.compute;
}

}  // namespace

ElementwiseSpec elementwise_spec(const OpCall& call, DType out, bool strided) {
  ElementwiseSpec s;
  s.op = call.op;
  s.out = out;
  s.compute = compute_dtype(call);  // the one rule (tensor/meta.cpp)
  for (const Value& v : call.args) {
    bool scalar = !v.is_tensor || (v.tensor.device().is_cpu() && v.tensor.dim() == 0);
    s.operands.push_back({scalar, scalar ? s.compute : v.tensor.dtype()});
  }
  s.strided = strided;
  return s;
}

std::string elementwise_name(const ElementwiseSpec& s) {
  std::string n = std::string("volt_") + op_name(s.op) + "_" + dtype_name(s.out) + "_c" + dtype_name(s.compute);
  for (const EwOperand& o : s.operands) n += o.is_scalar ? std::string("_s") : std::string("_") + dtype_name(o.dtype);
  return n + (s.strided ? "_nd" : "_1d");
}

std::string elementwise_source(const ElementwiseSpec& s) {
  const OpInfo& info = op_info(s.op);
  VOLT_CHECK(info.expr && info.expr[0] != '\0', info.name, "has no scalar expression for a generated kernel");
  VOLT_CHECK(!s.operands.empty() && s.operands.size() <= 3, info.name,
             "expected 1 to 3 operands, got " << s.operands.size());
  std::ostringstream os;
  const std::string name = elementwise_name(s);
  os << "// " << info.name << ": out " << dtype_name(s.out) << ", computed in " << dtype_name(s.compute)
     << (s.strided ? ", any strides" : ", contiguous") << "\n";
  // A copy or a conversion of a 16-bit type to itself moves the bits (NaN payloads kept).
  const OpKind kind = info.kind;
  const bool bits = is_half(s.out) && (kind == OpKind::Copy || kind == OpKind::Convert) &&
                    !s.operands[0].is_scalar && s.operands[0].dtype == s.out;
  auto lt_of = [&](DType t) { return bits ? mem(t) : calc(t); };
  os << "extern \"C\" __global__ void " << name << "(long long n, volt_index ix, " << mem(s.out) << "* out";
  for (size_t k = 0; k < s.operands.size(); ++k) {
    if (s.operands[k].is_scalar) os << ", double s" << k;
    else os << ", const " << mem(s.operands[k].dtype) << "* in" << k;
  }
  os << ") {\n";
  os << "  typedef " << lt_of(s.out) << " R;\n";
  os << "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
     << "       i += (long long)blockDim.x * gridDim.x) {\n";
  if (s.strided) {
    os << "    long long off[4];\n";
    os << "    volt_offsets(ix, i, off, " << s.operands.size() + 1 << ");\n";
  } else {
    os << "    (void)ix;\n";
  }
  std::vector<std::string> names;
  for (size_t k = 0; k < s.operands.size(); ++k) {
    const std::string v(1, static_cast<char>('a' + k));
    const std::string lt = lt_of(load_dtype(s, k));
    names.push_back(v);
    if (s.operands[k].is_scalar) {
      os << "    const " << lt << " " << v << " = (" << lt << ")s" << k << ";\n";
    } else {
      const std::string at = "in" + std::to_string(k) + "[" +
                             (s.strided ? "off[" + std::to_string(k + 1) + "]" : std::string("i")) + "]";
      os << "    const " << lt << " " << v << " = (" << lt << ")" << (bits ? at : load(s.operands[k].dtype, at))
         << ";\n";
    }
  }
  std::string expr = fill_op_expr(info.expr, names, "R");  // R: a typedef; "unsigned char(1)" would not parse
  // Integer powers: CUDA has no pow(int, int); volt_ipow (the prelude) is exact.
  if (s.op == OpId::pow && !is_floating(s.compute)) expr = "volt_ipow((long long)a, (long long)b)";
  const std::string result = "(R)(" + expr + ")";
  os << "    out[" << (s.strided ? "off[0]" : "i") << "] = " << (bits ? result : store(s.out, result)) << ";\n";
  os << "  }\n}\n";
  return os.str();
}

// ---------------------------------------------------------------- reductions

std::string reduce_name(OpId op, DType in, DType out) {
  return std::string("volt_") + op_name(op) + "_" + dtype_name(in) + "_" + dtype_name(out);
}

std::string reduce_source(OpId op, DType in, DType out) {
  VOLT_CHECK(op_info(op).kind == OpKind::Reduce, op_name(op), "is not a reduction");
  const bool is_sum = op == OpId::sum;
  const bool is_arg = op == OpId::argmax || op == OpId::argmin;
  const bool is_max = op == OpId::amax || op == OpId::argmax;
  std::string acc = calc(in);
  if (is_sum) acc = is_floating(in) ? "double" : "long long";
  std::ostringstream os;
  os << "// " << op_name(op) << " over rows: x (rows, len) -> y (rows)\n";
  // Combines the partial result (b, bi) into (a, ai); an index < 0 marks "no element yet".
  os << "__device__ inline void volt_combine_" << reduce_name(op, in, out) << "(" << acc << "& a, long long& ai, "
     << acc << " b, long long bi) {\n";
  if (is_sum) {
    os << "  a += b; (void)ai; (void)bi;\n";
  } else {
    os << "  if (bi < 0) return;\n"
       << "  if (ai < 0) { a = b; ai = bi; return; }\n"
       << "  const bool an = a != a, bn = b != b;  // NaN wins, the first NaN for arg*\n"
       << "  if (an) { if (bn && bi < ai) ai = bi; return; }\n"
       << "  if (bn) { a = b; ai = bi; return; }\n"
       << "  if (b " << (is_max ? ">" : "<") << " a || (b == a && bi < ai)) { a = b; ai = bi; }\n";
  }
  os << "}\n";
  os << "extern \"C\" __global__ void " << reduce_name(op, in, out) << "(const " << mem(in) << "* x, "
     << mem(out) << "* y, long long rows, long long len, long long row_stride, long long elem_stride) {\n"
     << "  __shared__ " << acc << " sv[256];\n"
     << "  __shared__ long long si[256];\n"
     << "  const int t = threadIdx.x;\n"
     << "  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {\n"
     << "    const " << mem(in) << "* row = x + r * row_stride;\n"
     << "    " << acc << " a = (" << acc << ")0;\n"
     << "    long long ai = " << (is_sum ? "0" : "-1") << ";\n"
     << "    for (long long j = t; j < len; j += blockDim.x)\n"
     << "      volt_combine_" << reduce_name(op, in, out) << "(a, ai, (" << acc << ")"
     << load(in, "row[j * elem_stride]") << ", j);\n"
     << "    sv[t] = a;\n"
     << "    si[t] = ai;\n"
     << "    __syncthreads();\n"
     << "    for (int s = blockDim.x / 2; s > 0; s >>= 1) {\n"
     << "      if (t < s) volt_combine_" << reduce_name(op, in, out) << "(sv[t], si[t], sv[t + s], si[t + s]);\n"
     << "      __syncthreads();\n"
     << "    }\n"
     // A 16-bit sum (in double) goes through float, as the CPU's f32 sum it widens to.
     << "    if (t == 0) y[r] = "
     << (is_arg ? "(" + ct(out) + ")(si[0] < 0 ? 0 : si[0])" : store(out, "(" + calc(out) + ")sv[0]")) << ";\n"
     << "    __syncthreads();\n"
     << "  }\n"
     << "}\n";
  return os.str();
}

// ---------------------------------------------------------------- uniform, fill

std::string uniform_name(DType t) { return std::string("volt_uniform_") + dtype_name(t); }

std::string uniform_source(DType t) {
  VOLT_CHECK(t == DType::f32 || t == DType::f64 || is_half(t), "uniform",
             "expected f32, f64, bf16 or f16, got " << dtype_name(t));
  const std::string c = calc(t);
  // bf16/f16: the f32 draw rounded once, then clamped to [bottom, top], the
  // 16-bit values nearest lo and hi inside the range (volt::half_draw_bounds;
  // the host passes infinities when hi <= lo, as the CPU then clamps nothing).
  const std::string draw = std::string("volt_uniform_range_") + (is_half(t) ? "f32" : dtype_name(t)) +
                           "(seed, offset, (unsigned long long)i, lo, hi)";
  std::ostringstream os;
  os << "// element i of the draw (seed, offset): the CPU computes the very same expression\n"
     << "extern \"C\" __global__ void " << uniform_name(t) << "(" << mem(t)
     << "* out, long long n, unsigned long long seed, unsigned long long offset, " << c << " lo, " << c << " hi"
     << (is_half(t) ? ", float bottom, float top" : "") << ") {\n"
     << "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
     << "       i += (long long)blockDim.x * gridDim.x) {\n";
  if (is_half(t))
    os << "    float v = " << load(t, store(t, draw)) << ";\n"
       << "    v = v > top ? top : v < bottom ? bottom : v;\n"
       << "    out[i] = " << store(t, "v") << ";\n";
  else
    os << "    out[i] = " << draw << ";\n";
  os << "  }\n}\n";
  return os.str();
}

std::string fill_name(DType t) { return std::string("volt_fill_") + dtype_name(t); }

std::string fill_source(DType t) {
  const std::string c = mem(t);
  std::ostringstream os;
  os << "extern \"C\" __global__ void " << fill_name(t) << "(" << c << "* out, long long n, double value) {\n"
     << "  const " << c << " v = " << (is_half(t) ? store(t, "(float)value") : "(" + c + ")value") << ";\n"
     << "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
     << "       i += (long long)blockDim.x * gridDim.x)\n"
     << "    out[i] = v;\n"
     << "}\n";
  return os.str();
}

// ---------------------------------------------------------------- cross-entropy

std::string cross_entropy_name(DType t, bool backward) {
  return std::string("volt_cross_entropy_") + (backward ? "backward_" : "") + dtype_name(t);
}

std::string cross_entropy_source(DType t, bool backward) {
  VOLT_CHECK(t == DType::f32 || t == DType::f64, "cross_entropy", "expected f32 or f64 logits, got " << dtype_name(t));
  const std::string T = ct(t);
  std::ostringstream os;
  // The row functions with the CPU kernel's exp (volt_exp, tensor/math_functions.inc,
  // in the prelude), so that both devices compute the same losses.
  os << "#ifndef VOLT_CE_ROWS\n#define VOLT_CE_ROWS\nnamespace volt_ce {\n"
     << "template <class T> __device__ inline T exp(T x) { return volt_exp(x); }\n"
     << kCrossEntropySource << "\n}  // namespace volt_ce\nusing namespace volt_ce;\n#endif\n";
  // A bad class index: noted in the error word (kind 1, the value, the class count).
  os << "#ifndef VOLT_CE_TARGET_OK\n"
     << "#define VOLT_CE_TARGET_OK\n"
     << "__device__ inline bool volt_ce_target_ok(long long k, long long c, long long* err) {\n"
     << "  if (k >= 0 && k < c) return true;\n"
     << "  err[1] = k;\n"
     << "  err[2] = c;\n"
     << "  err[0] = 1;\n"
     << "  return false;\n"
     << "}\n"
     << "#endif\n";
  // reduction: 0 none (out[r] per row), 1 mean over the rows not ignored, 2 sum.
  if (!backward) {
    os << "// x (n, c), t (n) -> out (n) or out[0]; sums are taken in double in a fixed order\n"
       << "// (each thread's rows, then a tree over the block).\n"
       << "extern \"C\" __global__ void " << cross_entropy_name(t, false) << "(const " << T
       << "* x, const long long* t, long long n, long long c, " << T
       << "* out, long long* err, double nan, long long ignore, double smoothing, long long reduction) {\n"
       << "  __shared__ double part[256];\n"
       << "  __shared__ double counted[256];\n"
       << "  double acc = 0, k = 0;\n"
       << "  for (long long r = threadIdx.x; r < n; r += blockDim.x) {\n"
       << "    double l = 0;\n"
       << "    if (t[r] != ignore) {\n"
       << "      k += 1;\n"
       << "      l = volt_ce_target_ok(t[r], c, err) ? volt_ce_row_loss(x + r * c, c, t[r], smoothing) : nan;\n"
       << "    }\n"
       << "    if (reduction == 0) out[r] = (" << T << ")l;\n"
       << "    acc += l;\n"
       << "  }\n"
       << "  if (reduction == 0) return;\n"
       << "  part[threadIdx.x] = acc;\n"
       << "  counted[threadIdx.x] = k;\n"
       << "  __syncthreads();\n"
       << "  for (int s = blockDim.x / 2; s > 0; s >>= 1) {\n"
       << "    if ((int)threadIdx.x < s) {\n"
       << "      part[threadIdx.x] += part[threadIdx.x + s];\n"
       << "      counted[threadIdx.x] += counted[threadIdx.x + s];\n"
       << "    }\n"
       << "    __syncthreads();\n"
       << "  }\n"
       << "  if (threadIdx.x == 0) out[0] = (" << T << ")(reduction == 2 ? part[0] : part[0] / counted[0]);\n"
       << "}\n";
  } else {
    os << "// g () or (n), x (n, c), t (n) -> gx (n, c), one thread per row; count: the rows\n"
       << "// not ignored (read for mean only), or null: each thread counts them itself\n"
       << "extern \"C\" __global__ void " << cross_entropy_name(t, true) << "(const " << T << "* g, const " << T
       << "* x, const long long* t, long long n, long long c, " << T
       << "* gx, long long* err, double nan, long long ignore, double smoothing, long long reduction, "
          "const double* count) {\n"
       << "  double rows = 0;\n"
       << "  if (reduction == 1 && !count)\n"
       << "    for (long long q = 0; q < n; ++q) rows += t[q] != ignore ? 1.0 : 0.0;\n"
       << "  for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < n;\n"
       << "       r += (long long)blockDim.x * gridDim.x) {\n"
       << "    if (t[r] == ignore) {\n"
       << "      for (long long j = 0; j < c; ++j) gx[r * c + j] = (" << T << ")0;\n"
       << "      continue;\n"
       << "    }\n"
       << "    const " << T << " scale = reduction == 0 ? g[r] : reduction == 2 ? g[0] : (" << T << ")(g[0] / ("
       << T << ")(count ? count[0] : rows));\n"
       << "    if (volt_ce_target_ok(t[r], c, err)) {\n"
       << "      volt_ce_row_grad(x + r * c, c, t[r], scale, smoothing, gx + r * c);\n"
       << "    } else {\n"
       << "      for (long long j = 0; j < c; ++j) gx[r * c + j] = (" << T << ")nan;\n"
       << "    }\n"
       << "  }\n"
       << "}\n";
  }
  return os.str();
}

// ---------------------------------------------------------------- optimizers

std::string adam_name(DType t) { return std::string("volt_adam_") + dtype_name(t); }

std::string adam_source(DType t) {
  VOLT_CHECK(t == DType::f32 || t == DType::f64, "Adam", "expected f32 or f64 parameters, got " << dtype_name(t));
  const std::string T = ct(t);
  std::ostringstream os;
  os << "// Adam over a table of parameters: blockIdx.y picks the parameter; the rule\n"
     << "// and its evaluation order are nn/optim.cpp's CPU kernel.\n"
     << "struct volt_adam_slot_" << dtype_name(t) << " { " << T << "* p; const " << T << "* g; " << T << "* m; "
     << T << "* v; long long n; " << T << " neg_step_size; " << T << " bias_correction2_sqrt; };\n"
     << "struct volt_adam_table_" << dtype_name(t) << " { volt_adam_slot_" << dtype_name(t) << " s[24]; };\n"
     << "static_assert(sizeof(volt_adam_table_" << dtype_name(t) << ") == " << (t == DType::f32 ? 1152 : 1344)
     << ", \"the host's AdamTable (tensor/cuda/optim.cpp) has the same layout\");\n"
     << "extern \"C\" __global__ void " << adam_name(t) << "(volt_adam_table_" << dtype_name(t) << " table, " << T
     << " one_minus_beta1, " << T << " beta2, " << T << " one_minus_beta2, " << T << " weight_decay, " << T
     << " eps) {\n"
     << "  const volt_adam_slot_" << dtype_name(t) << " s = table.s[blockIdx.y];\n"
     << "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < s.n;\n"
     << "       i += (long long)blockDim.x * gridDim.x) {\n"
     << "    " << T << " gi = s.g[i];\n"
     << "    if (weight_decay != (" << T << ")0) gi += weight_decay * s.p[i];\n"
     << "    const " << T << " mi = s.m[i] + one_minus_beta1 * (gi - s.m[i]);\n"
     << "    const " << T << " vi = s.v[i] * beta2 + one_minus_beta2 * gi * gi;\n"
     << "    s.m[i] = mi;\n"
     << "    s.v[i] = vi;\n"
     << "    s.p[i] += s.neg_step_size * mi / (sqrt(vi) / s.bias_correction2_sqrt + eps);\n"
     << "  }\n"
     << "}\n";
  return os.str();
}

std::string sgd_name(DType t) { return std::string("volt_sgd_") + dtype_name(t); }

std::string sgd_source(DType t) {
  VOLT_CHECK(t == DType::f32 || t == DType::f64, "SGD", "expected f32 or f64 parameters, got " << dtype_name(t));
  const std::string T = ct(t);
  std::ostringstream os;
  os << "// SGD with momentum over a table of parameters (buf is null without momentum).\n"
     << "struct volt_sgd_slot_" << dtype_name(t) << " { " << T << "* p; const " << T << "* g; " << T
     << "* buf; long long n; int first_step; };\n"
     << "struct volt_sgd_table_" << dtype_name(t) << " { volt_sgd_slot_" << dtype_name(t) << " s[32]; };\n"
     << "static_assert(sizeof(volt_sgd_table_" << dtype_name(t) << ") == 1280"
     << ", \"the host's SgdTable (tensor/cuda/optim.cpp) has the same layout\");\n"
     << "extern \"C\" __global__ void " << sgd_name(t) << "(volt_sgd_table_" << dtype_name(t) << " table, " << T
     << " lr, " << T << " momentum, " << T << " weight_decay) {\n"
     << "  const volt_sgd_slot_" << dtype_name(t) << " s = table.s[blockIdx.y];\n"
     << "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < s.n;\n"
     << "       i += (long long)blockDim.x * gridDim.x) {\n"
     << "    " << T << " gi = s.g[i];\n"
     << "    if (weight_decay != (" << T << ")0) gi += weight_decay * s.p[i];\n"
     << "    if (s.buf) {\n"
     << "      s.buf[i] = s.first_step ? gi : momentum * s.buf[i] + gi;\n"
     << "      gi = s.buf[i];\n"
     << "    }\n"
     << "    s.p[i] += -lr * gi;\n"
     << "  }\n"
     << "}\n";
  return os.str();
}

}  // namespace volt::cuda
