#include <volt/nn/parallel/all_reduce_op.h>

#include <cstring>

#include <volt/autograd/grad_mode.h>
#include <volt/nn/parallel/dist.h>
#include <volt/tensor/custom_op.h>

namespace volt::dist {

namespace {

const char* kName = "dist.all_reduce_mean";

std::vector<Tensor> tensors_of(const std::vector<Value>& args) {
  std::vector<Tensor> ts;
  for (const Value& v : args) {
    VOLT_CHECK(v.is_tensor && v.tensor.defined(), kName, "expects tensors only");
    ts.push_back(v.tensor);
  }
  VOLT_CHECK(!ts.empty(), kName, "expects at least one tensor");
  for (const Tensor& t : ts)
    VOLT_CHECK(t.dtype() == ts[0].dtype(), kName,
               "expects tensors of one dtype, got " << ts[0].meta_str() << " and " << t.meta_str());
  return ts;
}

std::vector<TensorMeta> meta(const std::vector<Value>& args) {
  std::vector<TensorMeta> out;
  for (const Tensor& t : tensors_of(args)) out.push_back({t.sizes(), t.dtype(), t.device()});
  return out;
}

// With NCCL: one flat buffer on the tensors' GPU, every copy queued on its stream.
std::vector<Tensor> reduce_on_device(const std::vector<Tensor>& ts) {
  NoGradGuard no_grad;
  int64_t total = 0;
  for (const Tensor& t : ts) total += t.numel();
  Tensor flat = Tensor::empty({total}, ts[0].dtype(), ts[0].device());
  int64_t at = 0;
  for (const Tensor& t : ts) {
    flat.narrow(0, at, t.numel()).copy_(t.reshape({-1}));
    at += t.numel();
  }
  all_reduce(flat, ReduceOp::Average);
  std::vector<Tensor> out;
  at = 0;
  for (const Tensor& t : ts) {
    out.push_back(flat.narrow(0, at, t.numel()).reshape(t.sizes()).clone());
    at += t.numel();
  }
  return out;
}

// ts: tensors of any shapes -> the same shapes, averaged over the ranks.
std::vector<Tensor> kernel(const std::vector<Value>& args) {
  std::vector<Tensor> ts = tensors_of(args);
  bool one_gpu = backend_name(ts[0].device()) == "nccl";
  for (const Tensor& t : ts) one_gpu = one_gpu && t.device() == ts[0].device();
  if (one_gpu) return reduce_on_device(ts);
  int64_t total = 0;
  for (const Tensor& t : ts) total += t.numel();
  const size_t item = dtype_size(ts[0].dtype());
  Tensor flat = Tensor::empty({total}, ts[0].dtype(), kCPU);
  char* p = static_cast<char*>(flat.raw_data());
  for (const Tensor& t : ts) {
    Tensor h = t.to(kCPU).contiguous();
    std::memcpy(p, h.raw_data(), static_cast<size_t>(h.numel()) * item);
    p += static_cast<size_t>(h.numel()) * item;
  }
  all_reduce(flat, ReduceOp::Average);
  std::vector<Tensor> out;
  p = static_cast<char*>(flat.raw_data());
  for (const Tensor& t : ts) {
    Tensor o = Tensor::empty(t.sizes(), t.dtype(), kCPU);
    std::memcpy(o.raw_data(), p, static_cast<size_t>(t.numel()) * item);
    p += static_cast<size_t>(t.numel()) * item;
    out.push_back(t.device().is_cpu() ? o : o.to(t.device()));
  }
  return out;
}

}  // namespace

int64_t all_reduce_mean_op() {
  static const int64_t id = [] {
    CustomOpDef def;
    def.name = kName;
    def.meta = meta;
    def.kernel = kernel;
    def.collective = true;
    return register_custom_op(std::move(def));
  }();
  return id;
}

std::vector<Tensor> all_reduce_mean(const std::vector<Tensor>& tensors) {
  std::vector<Value> args;
  for (const Tensor& t : tensors) args.emplace_back(t);
  return dispatch(custom_call(all_reduce_mean_op(), std::move(args)));
}

}  // namespace volt::dist
