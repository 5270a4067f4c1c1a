// "cuBLASLt bias gradient": a weight's gradient and its bias's gradient as
// one cuBLASLt GEMM (tensor/cuda/matmul_lt.cpp, CUBLASLT_EPILOGUE_BGRADB).
//
// A linear layer's backward on CUDA is, in the claimed trace,
//
//   t79 = volt.permute(t76, (1, 0))
//   t80 = cublas_matmul(t79, t31)          # the weight's gradient g^T x
//   t81 = volt.sum(t76, (0,), keepdim=False)   # the bias's: g summed over the batch
//
// a GEMM and a reduction kernel.  This pass makes the two one line,
//
//   (t80, t81) = cublas_matmul_bias_grad(t76, t31)
//
// whose GEMM writes the bias's gradient from its epilogue.  It applies to
// 2-D CUDA operands of one dtype, f32, bf16 or f16 (under autocast the
// layer's gradient g is 16-bit, and so are its weight's and bias's gradients
// before their casts back to f32), where cuBLASLt could be opened; a shape
// cuBLASLt's heuristic has no algorithm for runs as the two calls it
// replaced.  Its numbers are the sum over the batch either way (16-bit: in
// f32, rounded once), in another order of summation than the reduction
// kernel's.  (The forward's bias needs no pass:
// cublas_linear puts it in the GEMM's epilogue itself.)
#include <unordered_map>
#include <unordered_set>

#include <volt/jit/cuda/executors.h>
#include <volt/jit/passes.h>
#include <volt/jit/pipeline.h>
#include <volt/tensor/cuda/backend.h>
#include <volt/tensor/cuda/libraries.h>
#include <volt/tensor/ops.h>

namespace volt::jit::cuda {

namespace vc = volt::cuda;

namespace {

bool lt_cuda_2d(const Tensor& t) {
  return t.defined() && t.dim() == 2 && (t.dtype() == DType::f32 || is_half(t.dtype())) && t.device().is_cuda();
}

// g (m, n), x (m, k) -> (g^T x (n, k), g summed over its rows (n)).
std::vector<Tensor> bias_grad_impl(const std::vector<Value>& args) {
  const Tensor& g = args.at(0).tensor;
  const Tensor& x = args.at(1).tensor;
  Tensor dw = Tensor::empty({g.size(1), x.size(1)}, g.dtype(), g.device());
  Tensor db = Tensor::empty({g.size(1)}, g.dtype(), g.device());
  if (vc::cublaslt_matmul_bias_grad(g, x, dw, db)) return {dw, db};
  return {volt::matmul(g.t(), x), volt::sum(g, {0})};
}

std::vector<TensorMeta> bias_grad_meta(const std::vector<Value>& args) {
  VOLT_CHECK(args.size() == 2 && args[0].is_tensor && args[1].is_tensor, "cublas_matmul_bias_grad",
             "expected (g, x), two tensors");
  const Tensor& g = args[0].tensor;
  const Tensor& x = args[1].tensor;
  VOLT_CHECK(lt_cuda_2d(g) && lt_cuda_2d(x) && g.dtype() == x.dtype() && g.device() == x.device() &&
                 g.size(0) == x.size(0),
             "cublas_matmul_bias_grad",
             "expected g (m, n) and x (m, k) of one dtype (f32, bf16 or f16) on one CUDA device, got "
                 << g.meta_str() << " and " << x.meta_str());
  return {{{g.size(1), x.size(1)}, g.dtype(), g.device()}, {{g.size(1)}, g.dtype(), g.device()}};
}

const Symbol& bias_grad_symbol() {
  static const Symbol s = cublas_executor().register_operator(
      "cublas_matmul_bias_grad", {.like = nullptr, .meta = bias_grad_meta, .fn = bias_grad_impl, .grad = nullptr});
  return s;
}

bool is_cublas_matmul(const BoundSymbol& b) {
  return !b.is_fusion() && b.executor == &cublas_executor() && b.call.op == OpId::custom &&
         Symbol(b.call.attrs.custom).name() == "cublas_matmul" && b.outputs.size() == 1 && b.call.args.size() == 2 &&
         b.call.args[0].is_tensor && b.call.args[1].is_tensor;
}

// sum(g, (0,)) of a 2-D CUDA g into a vector of g's dtype.
bool is_batch_sum(const BoundSymbol& b) {
  return !b.is_fusion() && b.call.op == OpId::sum && b.outputs.size() == 1 && !b.call.args.empty() &&
         b.call.args[0].is_tensor && lt_cuda_2d(b.call.args[0].tensor) && b.call.attrs.ints == std::vector<int64_t>{0} &&
         !b.call.attrs.flag && b.outputs[0].dtype() == b.call.args[0].tensor.dtype();
}

bool is_transpose_of(const BoundSymbol& b, int64_t g) {
  return !b.is_fusion() && b.call.op == OpId::permute && b.call.attrs.ints == std::vector<int64_t>{1, 0} &&
         !b.call.args.empty() && b.call.args[0].is_tensor && id_of(b.call.args[0].tensor) == g;
}

void bias_grad_pass(std::vector<Trace>& traces) {
  auto t0 = Clock::now();
  const Trace& t = traces.back();
  std::unordered_map<int64_t, size_t> def;  // value -> the line making it
  std::unordered_map<int64_t, std::vector<size_t>> readers;
  std::unordered_map<int64_t, size_t> batch_sum;  // g -> the line summing it over the batch
  bool any = false;
  for (size_t i = 0; i < t.bsyms.size(); ++i) {
    const BoundSymbol& b = t.bsyms[i];
    for (const Tensor& o : b.outputs) def[id_of(o)] = i;
    for (const Tensor& a : tensor_args(b)) readers[id_of(a)].push_back(i);
    if (is_batch_sum(b)) batch_sum.emplace(id_of(b.call.args[0].tensor), i);
    any = any || is_cublas_matmul(t.bsyms[i]);
  }
  // Only a trace with a cuBLAS GEMM opens the library (it is large).
  if (!any || batch_sum.empty() || !vc::cublas_lt()) return;
  std::unordered_set<int64_t> returned;
  for (const Tensor& o : t.outputs) returned.insert(id_of(o));
  for (const Guard& gd : t.guards) returned.insert(id_of(gd.value));

  std::unordered_map<size_t, BoundSymbol> replace;
  std::unordered_set<size_t> drop;
  for (size_t j = 0; j < t.bsyms.size(); ++j) {
    const BoundSymbol& m = t.bsyms[j];
    if (!is_cublas_matmul(m) || replace.count(j)) continue;
    const Tensor& gt = m.call.args[0].tensor;
    const Tensor& x = m.call.args[1].tensor;
    auto d = def.find(id_of(gt));
    if (d == def.end() || !lt_cuda_2d(x) || !lt_cuda_2d(m.outputs[0]) || x.dtype() != gt.dtype() ||
        m.outputs[0].dtype() != gt.dtype())
      continue;
    const BoundSymbol& perm = t.bsyms[d->second];
    if (perm.call.op != OpId::permute || perm.is_fusion() || perm.call.args.empty() || !perm.call.args[0].is_tensor)
      continue;
    const Tensor& g = perm.call.args[0].tensor;
    if (!is_transpose_of(perm, id_of(g))) continue;
    auto s = batch_sum.find(id_of(g));
    if (s == batch_sum.end() || drop.count(s->second) || replace.count(s->second)) continue;
    // One line at the earlier of the two: its operands must exist there.
    const size_t at = std::min(j, s->second);
    auto dx = def.find(id_of(x));
    if (dx != def.end() && dx->second >= at) continue;
    BoundSymbol f;
    f.call.op = OpId::custom;
    f.call.attrs.custom = bias_grad_symbol().id();
    f.call.args = {Value(g), Value(x)};
    f.outputs = {m.outputs[0], t.bsyms[s->second].outputs[0]};
    f.executor = &cublas_executor();
    f.scope = m.scope;
    replace[at] = std::move(f);
    drop.insert(std::max(j, s->second));
    // The transpose goes too when the GEMM was its one reader.
    if (readers[id_of(gt)].size() == 1 && !returned.count(id_of(gt))) drop.insert(d->second);
  }
  if (replace.empty()) return;
  Trace r = with_replaced(t, replace, drop);
  r.provenance = "cuBLASLt bias gradient";
  r.millis = ms_since(t0);
  traces.push_back(std::move(r));
}

// After fusion, before the kernels are compiled: the lines it joins are
// cuBLAS's and eager's, which fusion leaves as they are.
const bool g_lt_epilogue_registered = [] {
  register_pass({"cuBLASLt bias gradient", PassStage::Regions, /*rewrite=*/true, /*opt_in=*/false, bias_grad_pass});
  return true;
}();

}  // namespace

}  // namespace volt::jit::cuda
