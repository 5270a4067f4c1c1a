// "cuBLASLt activation epilogue": a linear layer and the ReLU or tanh-GELU
// after it as one cuBLASLt GEMM (tensor/cuda/matmul_lt.cpp, the epilogues
// RELU_BIAS / GELU_BIAS / GELU_AUX_BIAS, or RELU / GELU / GELU_AUX for a
// linear without a bias).
//
// A hidden layer on CUDA is, in the trace of prims,
//
//   t3 = volt.linear(t0, t1, t2)       # cuBLAS: the GEMM, the bias in its epilogue
//   t4 = volt.relu(t3)                 # then a fused kernel: one more pass over t3
//
// and this pass makes the two one line,
//
//   t4 = cublas_linear_relu(t0, t1, t2)
//
// whose GEMM applies the activation to each value before it stores it.  It
// runs on the prims (PassStage::Prims), before the executors claim them and,
// in the module jit, before the grad pass, so the fused op's gradient is its
// own grad transform (registered on the cublas executor below):
//
//   - ReLU: the backward reads the output, whose sign is the pre-activation's
//     (relu(y) <= 0 exactly where y <= 0): dy = relu_backward(dout, out) =
//     where(out <= 0, 0, dout), then linear's own rule (dx = dy W,
//     dW = dy^T x, db = dy summed over the rows, which the pass "cuBLASLt
//     bias gradient" makes one GEMM).  The forward keeps nothing more than
//     its output for the backward.
//   - GELU: the backward needs the pre-activation.  Where a gradient is taken,
//     the grad transform's forward is cublas_linear_gelu_aux (GELU_AUX_BIAS),
//     which writes the pre-activation beside the output, and the backward
//     reads it: dy = gelu_tanh_backward(dout, pre) = dout gelu'(pre), in f32.
//     A trace without a gradient (inference, no_grad) keeps the one-output
//     cublas_linear_gelu.
//   relu_backward and gelu_tanh_backward are ops of elementwise prims that
//   read the gradient, so the backward's fused region computes them; the
//   forward gets no kernel for a mask.
//
//   (t4, t9) = cublas_linear_gelu_aux(t0, t1, t2)   # forward: t9 kept for backward
//   t12 = gelu_tanh_backward(t10, t9)               # backward, fused with what follows
//
// compile_step and the lazy device record the backward as prims (autograd's
// rules), so there the forward's relu is already its parts,
//
//   t4 = volt.le(t3, 0.0)              # the mask, which the backward reads too
//   t5 = volt.where(t4, 0.0, t3)
//
// and the pass takes that pair: t5 = cublas_linear_relu(...), and the mask,
// if still read, becomes le(t5, 0.0), moved to just before its first reader
// (the backward's where(t4, 0.0, g)), so that the backward's fused region
// makes it and the forward has no kernel left for the activation.  A
// returned mask stays where it was.  Their tanh GELU is its decomposition's
// nine prims on y (under autocast on convert(y, f32), cast back after), and
// the recorded backward reads y and inner values (tanh's output, y^2, ...):
//
//   (t14, t3) = cublas_linear_gelu_aux(t0, t1, t2)  # the cast back, and y
//   ...                                             # backward, then just before its first reader:
//   t4 = convert_element_type(t3, f32); t5 = mul(t4, t4); ...; t12 = mul(t4, 0.5)
//
// The fused line makes the chain's last value and y beside it (GELU_AUX);
// the inner values still read are made again from y by their own lines,
// moved to just before their first reader (the backward's fused region then
// makes them).  The AUX output is y as the unfused GEMM rounds it, so the
// backward computes what the unfused program's does.  On the lazy device an
// f32 op's scalars are run-time inputs (jit/lazy/record.cpp), so its f32
// GELU (autocast's included) cannot be told from another formula: not taken.
//
// What it takes:
//   - a linear of an input x (*, k) (leading dims flattened, as cublas_linear
//     does), a 2-D weight and a 1-D bias or none, all on one CUDA device and
//     of one dtype: f32, bf16 or f16;
//   - whose output is read by the activation alone (not returned, not read
//     by a guard, no other reader: else the pre-activation is still needed);
//   - relu, or gelu(x, "tanh").  cuBLASLt's GELU is the tanh approximation,
//     so the exact gelu(x) (erf, volt's default and the GPT's) is NOT taken.
//   - Under autocast (jit/autocast.cpp) a 16-bit layer's ReLU runs on its
//     output as it is, so it is taken as above.  Its GELU runs in f32
//     (tensor/autocast.h) and the next layer casts the result back:
//
//       t3 = volt.linear(t0, t1, t2)                        # bf16
//       t4 = prims.convert_element_type(t3, dtypes.float32)
//       t5 = volt.gelu(t4, approximate='tanh')              # f32
//       t6 = prims.convert_element_type(t5, dtypes.bfloat16)
//
//     and the pass makes the four lines t6 = cublas_linear_gelu(t0, t1, t2)
//     (cublas_linear_gelu_aux under grad), where each of t3, t4, t5 is read
//     by the next line alone and t6 is in the linear's dtype.  Its backward
//     is the one above: the AUX output is the bf16 pre-activation (t3, bit
//     for bit where the GEMM rounds as the unfused one does), and
//     gelu_tanh_backward converts it to f32 (t4), computes in f32 and rounds
//     the gradient once to bf16, as autograd's rules for the two casts and
//     the f32 gelu do.
// Where cuBLASLt cannot be opened (VOLT_CUBLASLT=0) the pass does nothing;
// where its heuristic has no algorithm for a shape at run time (or a pointer
// is not aligned), the op runs the two calls it replaced.
//
// Numbers: the activation is applied to the f32 sum (plus bias) before it is
// rounded once into the output's dtype.  For ReLU that is the unfused
// result bit for bit (rounding is monotone and keeps 0); GELU in bf16/f16 is
// rounded once rather than after its input too (the autocast form above
// rounds the pre-activation to bf16/f16, computes GELU in f32 and rounds
// again), so closer to the f32 result than the unfused layer: within one
// unit (one spacing of bf16/f16 at the larger of |pre-activation| and
// |result|) of the unfused program's, as the simulated GPU's tests measure
// against the CPU's autocast program (the worst case the two roundings and
// GELU's slope below 1.13 allow is 1.6 spacings).  One difference: volt's
// relu keeps a NaN, cuBLASLt's ReLU epilogue does not promise to.
#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include <volt/jit/cuda/executors.h>
#include <volt/jit/grad_transform.h>
#include <volt/jit/passes.h>
#include <volt/jit/pipeline.h>
#include <volt/tensor/cuda/backend.h>
#include <volt/tensor/cuda/libraries.h>
#include <volt/tensor/ops.h>

namespace volt::jit::cuda {

namespace vc = volt::cuda;

namespace {

enum class Act { relu, gelu, gelu_aux };

bool lt_dtype(DType t) { return t == DType::f32 || is_half(t); }

// x (*, k), w (n, k), bias (n) or none -> the output's sizes (*, n).
Shape out_sizes(const Tensor& x, const Tensor& w) {
  Shape s = x.sizes();
  s.back() = w.size(0);
  return s;
}

std::vector<TensorMeta> act_meta(const std::vector<Value>& args, const char* name, bool aux) {
  VOLT_CHECK((args.size() == 2 || args.size() == 3) && args[0].is_tensor && args[1].is_tensor &&
                 (args.size() == 2 || args[2].is_tensor),
             name, "expected (x, weight) or (x, weight, bias), tensors");
  const Tensor& x = args[0].tensor;
  const Tensor& w = args[1].tensor;
  const Tensor bias = args.size() == 3 ? args[2].tensor : Tensor();
  const bool ok = x.defined() && w.defined() && x.dim() >= 2 && w.dim() == 2 && lt_dtype(x.dtype()) &&
                  w.dtype() == x.dtype() && x.device().is_cuda() && w.device() == x.device() &&
                  x.size(-1) == w.size(1) &&
                  (!bias.defined() || (bias.dim() == 1 && bias.dtype() == x.dtype() && bias.device() == x.device() &&
                                       bias.size(0) == w.size(0)));
  VOLT_CHECK(ok, name,
             "expected x (*, k), a weight (n, k) and a bias (n) or none, of one dtype (f32, bf16 or f16) on one "
             "CUDA device, got "
                 << x.meta_str() << ", " << w.meta_str() << (bias.defined() ? ", " + bias.meta_str() : std::string()));
  const TensorMeta m{out_sizes(x, w), x.dtype(), x.device()};
  return aux ? std::vector<TensorMeta>{m, m} : std::vector<TensorMeta>{m};
}

// act(x W^T + bias) (and, for gelu_aux, x W^T + bias itself): one cuBLASLt
// call, or the linear and the activation where cuBLASLt declines the case.
std::vector<Tensor> run_act(const std::vector<Value>& args, Act act) {
  NoGradGuard no_grad;
  const Tensor& x = args.at(0).tensor;
  const Tensor& w = args.at(1).tensor;
  const Tensor bias = args.size() == 3 ? args[2].tensor : Tensor();
  const bool aux = act == Act::gelu_aux;
  const Shape sizes = out_sizes(x, w);
  Tensor out = Tensor::empty(sizes, x.dtype(), x.device());
  Tensor pre = aux ? Tensor::empty(sizes, x.dtype(), x.device()) : Tensor();
  if (out.numel() > 0 && x.size(-1) > 0) {
    const int64_t n = w.size(0);
    Tensor x2 = x.dim() == 2 ? x : vc::contiguous_on_device(x).reshape({-1, x.size(-1)});
    Tensor o2 = out.reshape({-1, n});
    Tensor p2 = aux ? pre.reshape({-1, n}) : Tensor();
    const vc::LtActivation a = act == Act::relu ? vc::LtActivation::relu : vc::LtActivation::gelu_tanh;
    if (vc::cublaslt_linear_bias(x2, w, bias, o2, a, aux ? &p2 : nullptr)) {
      return aux ? std::vector<Tensor>{out, pre} : std::vector<Tensor>{out};
    }
  }
  // The two calls the pass replaced.
  Tensor y = volt::linear(x, w, bias);
  Tensor z = act == Act::relu ? volt::relu(y) : volt::gelu(y, "tanh");
  return aux ? std::vector<Tensor>{z, y} : std::vector<Tensor>{z};
}

// d gelu_tanh(y) / dy times g, in f32 and returned in y's dtype:
// (0.5 (1 + t) + 0.5 y (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 y^2)) g,
// t = tanh(sqrt(2/pi) (y + 0.044715 y^3)).
Tensor gelu_tanh_grad(const Tensor& g, const Tensor& pre) {
  const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
  const Tensor y = pre.dtype() == DType::f32 ? pre : convert_element_type(pre, DType::f32);
  const Tensor g32 = g.dtype() == DType::f32 ? g : convert_element_type(g, DType::f32);
  const Tensor y2 = mul(y, y);
  const Tensor t = tanh(mul(add(y, mul(mul(y2, y), c)), k));
  const Tensor left = mul(add(t, 1.0), 0.5);
  const Tensor right = mul(mul(mul(y, 0.5), sub(1.0, mul(t, t))), mul(add(mul(y2, 3.0 * c), 1.0), k));
  const Tensor gy = mul(g32, add(left, right));
  return gy.dtype() == pre.dtype() ? gy : convert_element_type(gy, pre.dtype());
}

// The activations' backward as ops of their own, (g, the forward value) ->
// the pre-activation's gradient, written with elementwise prims (so the
// backward's fused region takes them).  One op reading the gradient: the
// grad transform puts all of it in the backward, where a mask or gelu'(y)
// made from the forward value alone would be a forward kernel of its own.
Symbol backward_op(const char* name, Tensor (*rule)(const Tensor&, const Tensor&)) {
  CustomOpDef def;
  def.name = name;
  def.decomposition = [rule](const std::vector<Value>& a) {
    return std::vector<Tensor>{rule(a.at(0).tensor, a.at(1).tensor)};
  };
  return Symbol(register_custom_op(std::move(def)));
}

// where(out <= 0, 0, g): relu(y) <= 0 exactly where y <= 0.
Tensor relu_grad(const Tensor& g, const Tensor& out) { return where(le(out, 0.0), 0.0, g); }

// linear's input gradients from dy, its output's (autograd's rule for linear).
void put_linear_grads(const std::vector<Value>& v, const Tensor& gy) {
  const Tensor& x = v[0].tensor;
  const Tensor& w = v[1].tensor;
  const Tensor g2 = gy.dim() == 2 ? gy : gy.reshape({-1, w.size(0)});
  const Tensor x2 = x.dim() == 2 ? x : x.reshape({-1, w.size(1)});
  std::vector<Tensor> in{x, w}, grads{matmul(gy, w), matmul(g2.t(), x2)};
  if (v.size() == 3) {
    in.push_back(v[2].tensor);
    grads.push_back(sum(g2, {0}));
  }
  put_grads(in, grads);
}

struct Symbols {
  Symbol relu, gelu, gelu_aux;
};

const Symbols& symbols() {
  static const Symbols s = [] {
    OperatorExecutor& ex = cublas_executor();
    Symbols r;
    r.relu = ex.register_operator(
        "cublas_linear_relu", {.meta = [](const std::vector<Value>& a) { return act_meta(a, "cublas_linear_relu", false); },
                               .fn = [](const std::vector<Value>& a) { return run_act(a, Act::relu); }});
    r.gelu = ex.register_operator(
        "cublas_linear_gelu", {.meta = [](const std::vector<Value>& a) { return act_meta(a, "cublas_linear_gelu", false); },
                               .fn = [](const std::vector<Value>& a) { return run_act(a, Act::gelu); }});
    r.gelu_aux = ex.register_operator(
        "cublas_linear_gelu_aux",
        {.meta = [](const std::vector<Value>& a) { return act_meta(a, "cublas_linear_gelu_aux", true); },
         .fn = [](const std::vector<Value>& a) { return run_act(a, Act::gelu_aux); }});
    static const Symbol relu_backward = backward_op("relu_backward", relu_grad);
    static const Symbol gelu_backward = backward_op("gelu_tanh_backward", gelu_tanh_grad);
    // ReLU's backward from the output it returns anyway.
    const Symbol relu = r.relu, aux = r.gelu_aux;
    ex.register_implementation(relu, {.grad_transform = [relu](const std::vector<Value>& v) {
                                 Tensor out = relu.call(v)[0];
                                 put_linear_grads(v, relu_backward(get_grad(out), out)[0]);
                                 return std::vector<Tensor>{out};
                               }});
    // GELU's from the pre-activation the forward then writes beside its output.
    ex.register_implementation(r.gelu, {.grad_transform = [aux](const std::vector<Value>& v) {
                                 std::vector<Tensor> fwd = aux.call(v);
                                 put_linear_grads(v, gelu_backward(get_grad(fwd[0]), fwd[1])[0]);
                                 return std::vector<Tensor>{fwd[0]};
                               }});
    return r;
  }();
  return s;
}

// The linear prim of a top-level line the pass may take: CUDA operands of one
// dtype the epilogues take, x at least 2-D, a 2-D weight, a 1-D bias or none.
const BoundSymbol* lt_linear(const BoundSymbol& b) {
  const BoundSymbol* p = sole_prim(b);
  if (!p || p->call.op != OpId::linear || (p->call.args.size() != 2 && p->call.args.size() != 3)) return nullptr;
  for (const Value& v : p->call.args)
    if (!v.is_tensor || !v.tensor.defined()) return nullptr;
  const Tensor& x = p->call.args[0].tensor;
  const Tensor& w = p->call.args[1].tensor;
  const Tensor& y = p->outputs[0];
  if (!x.device().is_cuda() || !lt_dtype(x.dtype()) || x.dim() < 2 || w.dim() != 2 || w.dtype() != x.dtype() ||
      y.dtype() != x.dtype() || w.device() != x.device())
    return nullptr;
  if (p->call.args.size() == 3) {
    const Tensor& bias = p->call.args[2].tensor;
    if (bias.dim() != 1 || bias.dtype() != x.dtype() || bias.device() != x.device()) return nullptr;
  }
  return p;
}

// The GELU of a 16-bit layer under autocast (tensor/autocast.h runs gelu in
// f32), from the line `up` that reads the linear's output y:
//   y32 = convert_element_type(y, f32)     # up
//   z32 = gelu(y32, approximate='tanh')    # act
//   z   = convert_element_type(z32, bf16)  # down: y's dtype (the next layer's cast)
// each value read by the next line alone, none returned or read by a guard.
struct AutocastGelu {
  size_t act = 0, down = 0;
};

// The one top-level line reading `id` (none where it is pinned or read elsewhere).
std::optional<size_t> sole_reader(const std::unordered_map<int64_t, std::vector<size_t>>& readers,
                                  const std::unordered_set<int64_t>& pinned, int64_t id) {
  auto it = readers.find(id);
  if (pinned.count(id) || it == readers.end() || it->second.size() != 1) return std::nullopt;
  return it->second[0];
}

bool is_convert(const BoundSymbol* p, int64_t from, DType to) {
  return p && p->call.op == OpId::convert_element_type && p->call.attrs.dtype == to && p->call.args.size() == 1 &&
         p->call.args[0].is_tensor && p->call.args[0].tensor.defined() && id_of(p->call.args[0].tensor) == from &&
         p->outputs[0].dtype() == to;
}

std::optional<AutocastGelu> autocast_gelu(const Trace& t,
                                          const std::unordered_map<int64_t, std::vector<size_t>>& readers,
                                          const std::unordered_set<int64_t>& pinned, const Tensor& y, size_t up) {
  if (!is_half(y.dtype()) || !is_convert(sole_prim(t.bsyms[up]), id_of(y), DType::f32)) return std::nullopt;
  const int64_t y32 = id_of(t.bsyms[up].outputs[0]);
  const std::optional<size_t> act = sole_reader(readers, pinned, y32);
  if (!act) return std::nullopt;
  const BoundSymbol& g = t.bsyms[*act];
  // tanh only: never the exact (erf) gelu.
  if (g.is_fusion() || g.executor || g.outputs.size() != 1 || g.call.op != OpId::gelu || !g.call.attrs.flag ||
      g.call.args.size() != 1 || !g.call.args[0].is_tensor || id_of(g.call.args[0].tensor) != y32)
    return std::nullopt;
  const std::optional<size_t> down = sole_reader(readers, pinned, id_of(g.outputs[0]));
  if (!down || !is_convert(sole_prim(t.bsyms[*down]), id_of(g.outputs[0]), y.dtype())) return std::nullopt;
  return AutocastGelu{*act, *down};
}

// The fused line: `sym` on the linear's arguments, making `out`.
BoundSymbol fused(const Symbol& sym, const BoundSymbol& line, const BoundSymbol& lin, const Tensor& out) {
  BoundSymbol f;
  f.call = custom_call(sym.id(), lin.call.args);
  f.outputs = {out};
  f.top_level_prim = true;
  f.scope = line.scope;
  return f;
}

// What the pass does to a trace: lines replaced, dropped, and put before others.
struct Rewrite {
  std::unordered_map<size_t, BoundSymbol> replace;  // line -> its new form
  std::unordered_set<size_t> drop;
  std::unordered_map<size_t, std::vector<BoundSymbol>> before;  // line -> lines to put before it
};

using Readers = std::unordered_map<int64_t, std::vector<size_t>>;  // value -> the top-level lines reading it

// The recorded ReLU (mask, select) after linear line i: one cublas_linear_relu.
bool take_recorded_relu(const Trace& t, Readers& readers, const std::unordered_set<int64_t>& pinned, size_t i,
                        Rewrite& w) {
  const BoundSymbol& lin = *lt_linear(t.bsyms[i]);
  const int64_t y = id_of(lin.outputs[0]);
  const std::optional<RecordedRelu> rr = recorded_relu(t, readers[y], y);
  if (!rr) return false;
  const size_t g = rr->mask, s = rr->select;
  const Tensor& mask = t.bsyms[g].outputs[0];
  const Tensor& out = t.bsyms[s].outputs[0];
  w.replace[i] = fused(symbols().relu, t.bsyms[i], lin, out);
  w.drop.insert(s);
  // The mask from the output, if anything still reads it: just before its
  // first reader (the backward's where), whose fused region then makes
  // it, rather than a forward kernel of its own; where it is returned,
  // where it was.
  w.drop.insert(g);
  size_t first = t.bsyms.size();
  for (size_t k : readers[id_of(mask)])
    if (k != s) first = std::min(first, k);
  if (first == t.bsyms.size() && !pinned.count(id_of(mask))) return true;
  BoundSymbol m;
  m.call = sole_prim(t.bsyms[g])->call;
  m.call.args[0] = Value(out);
  m.outputs = {mask};
  m.top_level_prim = true;
  m.scope = t.bsyms[g].scope;
  w.before[pinned.count(id_of(mask)) ? g : first].push_back(std::move(m));
  return true;
}

// An argument pattern: a value (id >= 0) or a literal scalar.
struct Arg {
  int64_t id = -1;
  double c = 0;
};
Arg val(const Tensor& v) { return {id_of(v), 0}; }
Arg lit(double c) { return {-1, c}; }

// The first top-level line reading `from` whose sole prim is op(args).
std::optional<size_t> line_of(const Trace& t, Readers& readers, int64_t from, OpId op, const std::vector<Arg>& args) {
  for (size_t k : readers[from]) {
    const BoundSymbol* p = sole_prim(t.bsyms[k]);
    if (!p || p->call.op != op || p->call.args.size() != args.size()) continue;
    bool ok = true;
    for (size_t a = 0; a < args.size() && ok; ++a) {
      const Value& v = p->call.args[a];
      ok = args[a].id >= 0 ? v.is_tensor && v.tensor.defined() && id_of(v.tensor) == args[a].id
                           : !v.is_tensor && v.scalar.value == args[a].c;
    }
    if (ok) return k;
  }
  return std::nullopt;
}

// gelu(x, "tanh") as compile_step and the lazy device record it: its
// decomposition (tensor/transformer_ops.cpp) on x, nine prims,
//   a = x x;  b = a x;  c = b 0.044715;  d = x + c;  e = d sqrt(2/pi);
//   th = tanh(e);  p = th + 1;  h = x 0.5;  out = h p
// and, under autocast, x = convert(y, f32) before them and convert(out, y's
// dtype) after.  The chain's lines in trace order and the line making the
// value the fused line takes over (the cast back, or out).
struct RecordedGelu {
  std::vector<size_t> lines;
  size_t last = 0;
};

std::optional<RecordedGelu> recorded_gelu(const Trace& t, Readers& readers, const std::unordered_set<int64_t>& pinned,
                                          const Tensor& y) {
  RecordedGelu r;
  Tensor x = y;
  if (is_half(y.dtype()))
    for (size_t k : readers[id_of(y)])
      if (is_convert(sole_prim(t.bsyms[k]), id_of(y), DType::f32)) {
        r.lines.push_back(k);
        x = t.bsyms[k].outputs[0];
        break;
      }
  const double k = std::sqrt(2.0 / M_PI);
  std::optional<size_t> a, b, c, d, e, th, p, h, out;
  auto made = [&](const std::optional<size_t>& line) { return val(t.bsyms[*line].outputs[0]); };
  if (!(a = line_of(t, readers, id_of(x), OpId::mul, {val(x), val(x)})) ||
      !(b = line_of(t, readers, id_of(x), OpId::mul, {made(a), val(x)})) ||
      !(c = line_of(t, readers, made(b).id, OpId::mul, {made(b), lit(0.044715)})) ||
      !(d = line_of(t, readers, id_of(x), OpId::add, {val(x), made(c)})) ||
      !(e = line_of(t, readers, made(d).id, OpId::mul, {made(d), lit(k)})) ||
      !(th = line_of(t, readers, made(e).id, OpId::tanh, {made(e)})) ||
      !(p = line_of(t, readers, made(th).id, OpId::add, {made(th), lit(1.0)})) ||
      !(h = line_of(t, readers, id_of(x), OpId::mul, {val(x), lit(0.5)})) ||
      !(out = line_of(t, readers, made(h).id, OpId::mul, {made(h), made(p)})))
    return std::nullopt;
  for (const std::optional<size_t>& l : {a, b, c, d, e, th, p, h, out}) r.lines.push_back(*l);
  r.last = *out;
  const Tensor& z = t.bsyms[*out].outputs[0];
  if (z.dtype() != y.dtype()) {
    // In f32 under autocast: its one reader casts it back to y's dtype.
    const std::optional<size_t> down = sole_reader(readers, pinned, id_of(z));
    if (!down || !is_convert(sole_prim(t.bsyms[*down]), id_of(z), y.dtype())) return std::nullopt;
    r.lines.push_back(*down);
    r.last = *down;
  }
  std::sort(r.lines.begin(), r.lines.end());
  return r;
}

// The recorded tanh GELU after linear line i: the fused line makes the
// chain's last value and, where anything else reads y or an inner value (the
// backward does), y beside it (GELU_AUX).  The inner values still read are
// made again from y by their own lines (y itself, bit for bit as the unfused
// GEMM rounds it), moved to just before their first reader: the backward
// computes as the unfused program did, and its fused region makes them.
bool take_recorded_gelu(const Trace& t, Readers& readers, const std::unordered_set<int64_t>& pinned, size_t i,
                        Rewrite& w) {
  const BoundSymbol& lin = *lt_linear(t.bsyms[i]);
  const Tensor& y = lin.outputs[0];
  const std::optional<RecordedGelu> g = recorded_gelu(t, readers, pinned, y);
  if (!g) return false;
  const std::unordered_set<size_t> chain(g->lines.begin(), g->lines.end());
  for (size_t l : g->lines)
    if (l != g->last && pinned.count(id_of(t.bsyms[l].outputs[0]))) return false;
  auto read_outside = [&](int64_t id) {
    for (size_t k : readers[id])
      if (!chain.count(k)) return true;
    return false;
  };
  // The chain's lines whose values are read outside it, and the lines they read.
  std::unordered_set<size_t> again;
  for (size_t l = g->lines.size(); l-- > 0;) {
    const size_t line = g->lines[l];
    if (line == g->last) continue;
    bool needed = read_outside(id_of(t.bsyms[line].outputs[0]));
    for (size_t r : readers[id_of(t.bsyms[line].outputs[0])]) needed = needed || again.count(r);
    if (needed) again.insert(line);
  }
  size_t first = t.bsyms.size();
  for (size_t line : again)
    for (size_t k : readers[id_of(t.bsyms[line].outputs[0])])
      if (!chain.count(k)) first = std::min(first, k);
  const bool aux = !again.empty() || read_outside(id_of(y));
  BoundSymbol f = fused(aux ? symbols().gelu_aux : symbols().gelu, t.bsyms[i], lin, t.bsyms[g->last].outputs[0]);
  if (aux) f.outputs.push_back(y);
  w.replace[i] = std::move(f);
  for (size_t line : g->lines) {
    w.drop.insert(line);
    if (again.count(line)) w.before[first].push_back(t.bsyms[line]);
  }
  return true;
}

void activation_pass(std::vector<Trace>& traces) {
  auto t0 = Clock::now();
  const Trace& t = traces.back();
  Readers readers;
  const std::unordered_set<int64_t> pinned = pinned_values(t);  // returned, or read by a guard
  std::vector<size_t> linears;
  for (size_t i = 0; i < t.bsyms.size(); ++i) {
    for (const Tensor& a : tensor_args(t.bsyms[i])) readers[id_of(a)].push_back(i);
    if (lt_linear(t.bsyms[i])) linears.push_back(i);
  }
  // Only a trace with such a linear opens the library (it is large).
  if (linears.empty() || !vc::cublas_lt()) return;

  Rewrite w;
  for (size_t i : linears) {
    const BoundSymbol& lin = *lt_linear(t.bsyms[i]);
    const int64_t y = id_of(lin.outputs[0]);
    const std::vector<size_t>& rs = readers[y];
    if (pinned.count(y) || rs.empty()) continue;
    if (rs.size() == 1) {
      const BoundSymbol& r = t.bsyms[rs[0]];
      if (r.is_fusion() || r.executor || r.outputs.size() != 1) continue;
      if (r.call.op == OpId::relu) {
        w.replace[i] = fused(symbols().relu, t.bsyms[i], lin, r.outputs[0]);
        w.drop.insert(rs[0]);
        continue;
      }
      if (r.call.op == OpId::gelu && r.call.attrs.flag) {  // tanh only: never the exact (erf) gelu
        w.replace[i] = fused(symbols().gelu, t.bsyms[i], lin, r.outputs[0]);
        w.drop.insert(rs[0]);
        continue;
      }
      if (const std::optional<AutocastGelu> a = autocast_gelu(t, readers, pinned, lin.outputs[0], rs[0])) {
        // Under autocast: the cast back's output, in the linear's dtype.
        w.replace[i] = fused(symbols().gelu, t.bsyms[i], lin, t.bsyms[a->down].outputs[0]);
        for (size_t d : {rs[0], a->act, a->down}) w.drop.insert(d);
        continue;
      }
    }
    if (!take_recorded_relu(t, readers, pinned, i, w)) (void)take_recorded_gelu(t, readers, pinned, i, w);
  }
  if (w.replace.empty()) return;
  Trace r = t;
  r.bsyms.clear();
  for (size_t j = 0; j < t.bsyms.size(); ++j) {
    if (auto it = w.before.find(j); it != w.before.end())
      for (BoundSymbol& b : it->second) r.bsyms.push_back(std::move(b));
    if (w.drop.count(j)) continue;
    auto it = w.replace.find(j);
    r.bsyms.push_back(it != w.replace.end() ? it->second : t.bsyms[j]);
  }
  r.provenance = "cuBLASLt activation epilogue";
  r.millis = ms_since(t0);
  traces.push_back(std::move(r));
}

// On the prims, before claim (and in the module jit before the grad pass,
// which then takes the fused ops' grad transforms).
const bool g_lt_activation_registered = [] {
  register_pass({"cuBLASLt activation epilogue", PassStage::Prims, /*rewrite=*/true, /*opt_in=*/false,
                 activation_pass});
  return true;
}();

}  // namespace

}  // namespace volt::jit::cuda
