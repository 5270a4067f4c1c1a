#include <volt/data/transforms.h>

#include <volt/tensor/ops.h>

namespace volt::data {

Normalize::Normalize(std::vector<double> mean, std::vector<double> std) : mean_(std::move(mean)), std_(std::move(std)) {
  VOLT_CHECK(!mean_.empty() && mean_.size() == std_.size(), "Normalize",
             "expected one mean and one std per channel, got " << mean_.size() << " means and " << std_.size()
                                                               << " stds");
  for (double s : std_) VOLT_CHECK(s != 0, "Normalize", "std must not be 0");
}

Tensor Normalize::operator()(Tensor x) const {
  VOLT_CHECK(x.defined() && is_floating(x.dtype()), "Normalize",
             "expected a floating tensor, got " << (x.defined() ? x.meta_str() : std::string("an undefined tensor")));
  if (mean_.size() == 1) return (x - mean_[0]) / std_[0];
  const int64_t c = static_cast<int64_t>(mean_.size());
  VOLT_CHECK(x.dim() >= 2 && x.size(1) == c, "Normalize",
             "expected " << c << " channels in dim 1 of (N, C, ...), got " << x.meta_str());
  Shape s(static_cast<size_t>(x.dim() - 1), 1);
  s[0] = c;  // (C, 1, ..., 1) broadcasts against (N, C, ...)
  const Tensor m = Tensor::from_vector<double>(mean_, s).to(x.dtype()).to(x.device());
  const Tensor d = Tensor::from_vector<double>(std_, s).to(x.dtype()).to(x.device());
  return (x - m) / d;
}

TensorDataset with_sample_shape(const TensorDataset& d, const Shape& sample_shape) {
  Shape s{d.size()};
  s.insert(s.end(), sample_shape.begin(), sample_shape.end());
  VOLT_CHECK(shape_numel(s) == d.data().numel(), "with_sample_shape",
             "samples of " << shape_str(d.sample_shape()) << " cannot be seen as " << shape_str(sample_shape));
  return TensorDataset(d.data().reshape(s), d.targets());
}

ImageDataset with_sample_shape(const ImageDataset& d, const Shape& sample_shape) {
  return d.with_sample_shape(sample_shape);
}

}  // namespace volt::data
