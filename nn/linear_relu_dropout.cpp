// nn::functional::linear_relu_dropout: dropout(relu(linear(x, W, b)), p) as one
// op in eager mode on the CPU -- the bias and the ReLU in the GEMM's store, the
// dropout mask drawn in its epilogue (tensor/cpu/linear_dropout.cpp) -- with the
// eager dropout's draws, so it gives the chain's bits for the same generator
// state.  Its gradient reads only the output: y > 0 exactly where the element
// was kept and its pre-activation was positive, so dL/dz = g / (1 - p) there and
// 0 elsewhere, the mask never stored nor drawn again.  Under bf16 autocast on
// the CPU the linear runs as the chain's (a bf16 GEMM) and the ReLU and dropout
// of its output in one pass, load bf16, compute f32, store bf16, as the chain
// computes them on f32 copies (the same bits, without the copies).  Anywhere
// else (a tracer, another device, other dtypes, f16 autocast) it is the chain itself.
#include <volt/autograd/node.h>
#include <volt/nn/functional.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/cpu/gemm.h>
#include <volt/tensor/random.h>

namespace volt::nn::functional {

namespace {

bool on_cpu(const Tensor& t) { return t.defined() && t.has_data() && t.device().type == DeviceType::CPU; }

// Whether the fused kernel takes these operands (cpu_linear_relu_dropout's
// checks).  Not under autocast: there the chain's linear runs in the 16-bit
// type, which the fused f32 kernel would silently skip.
bool fusable(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (current_mode() != nullptr || autocast_dtype() || !on_cpu(x) || !on_cpu(w) || (b.defined() && !on_cpu(b)))
    return false;
  const DType dt = x.dtype();
  if ((dt != DType::f32 && dt != DType::f64) || w.dtype() != dt || (b.defined() && b.dtype() != dt)) return false;
  return x.dim() >= 1 && w.dim() == 2 && x.size(-1) == w.size(1) &&
         (!b.defined() || (b.dim() == 1 && b.size(0) == w.size(0)));
}

struct LinearReluDropoutNode final : autograd::Node {
  Tensor x, w, y;  // saved without history
  uint64_t x_version = 0, w_version = 0, y_version = 0;
  bool has_bias = false;
  double p = 0;

  std::vector<Tensor> apply(const Tensor& g) override {
    VOLT_CHECK(!released, "backward",
               "trying to backward through the graph a second time (through " << name()
                   << "); its saved tensors were freed. Pass retain_graph=true the first time");
    VOLT_CHECK(x.version() == x_version && w.version() == w_version && y.version() == y_version, "backward",
               "a tensor " << name() << " needs (its input, weight or output) was modified by an in-place "
                           << "operation. Write to a clone() instead, or before the tensor is used");
    // dropout's gradient (g / (1 - p), masked) then relu's (where the input > 0):
    // both are where the output > 0.
    Tensor gz;
    if (on_cpu(g) && g.dtype() == y.dtype() && g.sizes() == y.sizes()) {
      gz = Tensor::empty(y.sizes(), y.dtype(), y.device());
      cpu_relu_dropout_backward(y, g.contiguous(), p, gz);
    } else {
      gz = where(gt(y, 0.0), p > 0 ? mul(g, p < 1 ? 1.0 / (1.0 - p) : 0.0) : g, 0.0);
    }
    const int64_t in = w.size(1), out = w.size(0);
    Tensor g2 = gz.dim() == 2 ? gz : gz.reshape({-1, out});
    Tensor x2 = x.dim() == 2 ? x : x.reshape({-1, in});
    std::vector<Tensor> r(next.size());
    if (next[0].valid()) r[0] = matmul(gz, w);
    if (next[1].valid()) r[1] = matmul(g2.t(), x2);
    if (has_bias && next[2].valid()) r[2] = sum(g2, {0});
    return r;
  }
  std::string name() const override { return "linear_relu_dropout_backward"; }
  void release() override {
    released = true;
    x = w = y = Tensor();
  }
};

// Under bf16 autocast: the chain's ReLU and dropout of the bf16 linear's
// output in one pass (the chain runs each on f32 copies, rounded once: the
// same bits), its gradient likewise.
bool bf16_autocast_fusable(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (current_mode() != nullptr || autocast_dtype() != std::optional<DType>(DType::bf16) || !on_cpu(x) ||
      !on_cpu(w) || (b.defined() && !on_cpu(b)))
    return false;
  auto ok = [](const Tensor& t) { return t.dtype() == DType::f32 || t.dtype() == DType::bf16; };
  return ok(x) && ok(w) && (!b.defined() || ok(b));
}

struct ReluDropoutNode final : autograd::Node {
  Tensor y;  // saved without history
  uint64_t y_version = 0;
  double p = 0;

  std::vector<Tensor> apply(const Tensor& g) override {
    VOLT_CHECK(!released, "backward",
               "trying to backward through the graph a second time (through " << name()
                   << "); its saved tensors were freed. Pass retain_graph=true the first time");
    VOLT_CHECK(y.version() == y_version, "backward",
               "the output " << name() << " needs was modified by an in-place operation. Write to a clone() "
                             << "instead, or before the tensor is used");
    if (on_cpu(g) && g.dtype() == y.dtype() && g.sizes() == y.sizes()) {
      Tensor gz = Tensor::empty(y.sizes(), y.dtype(), y.device());
      cpu_relu_dropout_backward(y, g.contiguous(), p, gz);
      return {gz};
    }
    return {where(gt(y, 0.0), p > 0 ? mul(g, p < 1 ? 1.0 / (1.0 - p) : 0.0) : g, 0.0)};
  }
  std::string name() const override { return "relu_dropout_backward"; }
  void release() override {
    released = true;
    y = Tensor();
  }
};

// dropout(relu(z), p) of the bf16 product z.
Tensor relu_dropout_bf16(const Tensor& z, double p) {
  if (!on_cpu(z) || z.dtype() != DType::bf16 || !z.is_contiguous()) return volt::dropout(volt::relu(z), p, p > 0);
  Tensor out = Tensor::empty(z.sizes(), z.dtype(), z.device());
  // The counters the chain's dropout would reserve, at the same point of the program.
  const PhiloxState rng = p > 0 ? rng_reserve(static_cast<uint64_t>(out.numel())) : PhiloxState{};
  cpu_relu_dropout_bf16(z, p, rng, out);
  if (grad_enabled() && z.requires_grad()) {
    auto node = std::make_shared<ReluDropoutNode>();
    node->next = {autograd::edge_for(z)};
    node->y = out.detach();
    node->y_version = out.version();
    node->p = p;
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace

Tensor linear_relu_dropout(const Tensor& x, const Tensor& weight, const Tensor& bias, double p, bool training) {
  VOLT_CHECK(p >= 0 && p <= 1, "linear_relu_dropout", "probability has to be between 0 and 1, got " << p);
  // bf16 autocast: the linear as the chain runs it (a bf16 GEMM on the weights'
  // cached casts), then its ReLU and dropout in one pass.
  if (bf16_autocast_fusable(x, weight, bias))
    return relu_dropout_bf16(volt::linear(x, weight, bias), training ? p : 0.0);
  if (!fusable(x, weight, bias)) return volt::dropout(volt::relu(volt::linear(x, weight, bias)), p, training);
  const double p_now = training ? p : 0.0;
  Shape shape = x.sizes();
  shape.back() = weight.size(0);
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  // The counters the chain's dropout would reserve, at the same point of the program.
  const PhiloxState rng = p_now > 0 ? rng_reserve(static_cast<uint64_t>(out.numel())) : PhiloxState{};
  cpu_linear_relu_dropout(x, weight, bias.defined() ? &bias : nullptr, p_now, rng, out);
  const bool wants_grad =
      grad_enabled() && (x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()));
  if (wants_grad) {
    auto node = std::make_shared<LinearReluDropoutNode>();
    node->next = {autograd::edge_for(x), autograd::edge_for(weight),
                  bias.defined() ? autograd::edge_for(bias) : autograd::Edge{}};
    node->x = x.detach();
    node->w = weight.detach();
    node->y = out.detach();
    node->x_version = x.version();
    node->w_version = weight.version();
    node->y_version = out.version();
    node->has_bias = bias.defined();
    node->p = p_now;
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace volt::nn::functional
