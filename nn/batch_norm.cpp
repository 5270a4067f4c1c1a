#include <volt/nn/batch_norm.h>

#include <volt/tensor/dispatch.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/scalar.h>

namespace volt::nn {

namespace {
const char* py_bool(bool b) { return b ? "True" : "False"; }
}  // namespace

// ---------------------------------------------------------------- Dropout2d

Dropout2d::Dropout2d(double p) : Module("Dropout2d"), p_(p) {
  VOLT_CHECK(p >= 0.0 && p <= 1.0, "Dropout2d", "p must be in [0, 1], got " << p);
}

Tensor Dropout2d::forward(const Tensor& x) {
  VOLT_CHECK(x.dim() == 3 || x.dim() == 4, "Dropout2d",
             "expected (N, C, H, W) or (C, H, W), got " << shape_str(x.sizes()));
  VOLT_CHECK(is_floating(x.dtype()), "Dropout2d", "expected a floating tensor, got " << x.meta_str());
  if (!is_training() || p_ == 0.0) return x;
  // One draw per channel: (N, C, 1, 1) or (C, 1, 1), broadcast over the plane.
  Shape mask_shape = x.sizes();
  for (int64_t d = x.dim() - 2; d < x.dim(); ++d) mask_shape[static_cast<size_t>(d)] = 1;
  if (p_ == 1.0) return mul(x, Tensor::zeros(mask_shape, x.dtype(), x.device()));
  const Tensor keep = lt(Tensor::rand(mask_shape, x.dtype(), x.device()), Value(1.0 - p_));
  return mul(x, mul(keep.to(x.dtype()), Value(1.0 / (1.0 - p_))));
}

std::string Dropout2d::extra_repr() const { return "p=" + python_float_repr(p_) + ", inplace=False"; }

// ---------------------------------------------------------------- BatchNorm

BatchNorm::BatchNorm(const char* name, int64_t num_features, BatchNormOptions options, int min_dim, int max_dim)
    : Module(name), name_(name), num_features_(num_features), options_(options), min_dim_(min_dim), max_dim_(max_dim) {
  VOLT_CHECK(num_features > 0, name, "num_features must be positive, got " << num_features);
  VOLT_CHECK(options.eps > 0, name, "eps must be positive, got " << options.eps);
  VOLT_CHECK(options.momentum >= 0 && options.momentum <= 1, name,
             "momentum must be in [0, 1], got " << options.momentum);
  if (options.affine) {
    weight_ = register_parameter("weight", Tensor::ones({num_features}));
    bias_ = register_parameter("bias", Tensor::zeros({num_features}));
  }
  if (options.track_running_stats) {
    running_mean_ = register_buffer("running_mean", Tensor::zeros({num_features}));
    running_var_ = register_buffer("running_var", Tensor::ones({num_features}));
    num_batches_tracked_ = register_buffer("num_batches_tracked", Tensor::zeros({}, DType::i64));
  }
}

Tensor BatchNorm::forward(const Tensor& x) {
  VOLT_CHECK(x.dim() >= min_dim_ && x.dim() <= max_dim_ && x.size(1) == num_features_, name_,
             "expected " << (min_dim_ == max_dim_ ? "(N, C, H, W)" : "(N, C) or (N, C, L)") << " with C = "
                         << num_features_ << ", got " << shape_str(x.sizes()));
  VOLT_CHECK(is_floating(x.dtype()), name_, "expected a floating tensor, got " << x.meta_str());
  std::vector<int64_t> dims{0};  // every dim but the channels
  Shape channel_shape(static_cast<size_t>(x.dim()), 1);  // (1, C, 1, ...)
  channel_shape[1] = num_features_;
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  const int64_t per_channel = x.numel() / num_features_;

  Tensor mean, var;
  if (is_training() || !options_.track_running_stats) {
    VOLT_CHECK(per_channel > 1, name_,
               "expected more than 1 value per channel when training, got input " << shape_str(x.sizes()));
    mean = x.mean(dims);
    const Tensor centred = sub(x, mean.reshape(channel_shape));
    var = mul(centred, centred).mean(dims);  // biased, as the normalisation uses
    if (is_training() && options_.track_running_stats) {
      NoGradGuard no_grad;
      const double m = options_.momentum;
      const double unbias = static_cast<double>(per_channel) / static_cast<double>(per_channel - 1);
      running_mean_.copy_(add(mul(running_mean_, Value(1.0 - m)), mul(mean.detach(), Value(m))));
      running_var_.copy_(add(mul(running_var_, Value(1.0 - m)), mul(var.detach(), Value(m * unbias))));
      num_batches_tracked_.add_(1.0);
    }
  } else {
    mean = running_mean_;
    var = running_var_;
  }
  Tensor y = div(sub(x, mean.reshape(channel_shape)), sqrt(add(var.reshape(channel_shape), Value(options_.eps))));
  if (options_.affine) y = add(mul(y, weight_.reshape(channel_shape)), bias_.reshape(channel_shape));
  return y;
}

std::string BatchNorm::extra_repr() const {
  return std::to_string(num_features_) + ", eps=" + python_float_repr(options_.eps) +
         ", momentum=" + python_float_repr(options_.momentum) + ", affine=" + py_bool(options_.affine) +
         ", track_running_stats=" + py_bool(options_.track_running_stats);
}

}  // namespace volt::nn
