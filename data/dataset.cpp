#include <volt/data/dataset.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <volt/data/idx.h>
#include <volt/tensor/ops.h>

namespace volt::data {

// ---------------------------------------------------------------- TensorDataset

TensorDataset::TensorDataset(Tensor data, Tensor targets) {
  VOLT_CHECK(data.has_data() && targets.has_data(), "TensorDataset",
             "data and targets must be tensors with values, got "
                 << (data.defined() ? data.meta_str() : "undefined") << " and "
                 << (targets.defined() ? targets.meta_str() : "undefined"));
  VOLT_CHECK(data.dim() >= 1 && targets.dim() >= 1 && data.size(0) == targets.size(0),
             "TensorDataset",
             "data and targets need the same first dim (one row per sample), got "
                 << shape_str(data.sizes()) << " and " << shape_str(targets.sizes()));
  // Batches are gathered with memcpy from host memory, so keep one dense CPU copy.
  data_ = data.to(kCPU).contiguous();
  targets_ = targets.to(kCPU).contiguous();
}

Example TensorDataset::get(int64_t i) const {
  VOLT_CHECK(i >= 0 && i < size(), "TensorDataset::get",
             "index " << i << " is out of range for a dataset of " << size() << " samples");
  return {data_.select(0, i), targets_.select(0, i)};
}

namespace {

// Copies rows src[indices[b]] to dst[b]; src is (N, ...) and dst (B, ...), both contiguous.
void gather_rows(std::span<const int64_t> indices, const Tensor& src, Tensor& dst,
                 const char* what) {
  const int64_t n = src.size(0), b = static_cast<int64_t>(indices.size());
  VOLT_CHECK(dst.has_data() && dst.device().is_cpu() && dst.is_contiguous() &&
                 dst.dtype() == src.dtype() && dst.dim() == src.dim() && dst.size(0) == b &&
                 dst.numel() == (n ? src.numel() / n * b : 0),
             "TensorDataset::gather",
             what << " batch must be a contiguous cpu " << dtype_name(src.dtype()) << " tensor of "
                  << b << " rows shaped like " << src.meta_str() << ", got " << dst.meta_str());
  const size_t row_bytes = n ? src.numel() / n * dtype_size(src.dtype()) : 0;
  const auto* from = static_cast<const uint8_t*>(src.raw_data());
  auto* to = static_cast<uint8_t*>(dst.raw_data());
  for (int64_t r = 0; r < b; ++r) {
    const int64_t i = indices[r];
    VOLT_CHECK(i >= 0 && i < n, "TensorDataset::gather",
               "index " << i << " is out of range for a dataset of " << n << " samples");
    std::memcpy(to + r * row_bytes, from + i * row_bytes, row_bytes);
  }
}

}  // namespace

void TensorDataset::gather(std::span<const int64_t> indices, Tensor& data, Tensor& targets) const {
  gather_rows(indices, data_, data, "data");
  gather_rows(indices, targets_, targets, "targets");
}

// ---------------------------------------------------------------- ImageDataset

Transform normalize(double mean, double stddev) {
  return [mean, stddev](Tensor x) { return (x - mean) / stddev; };
}

ImageDataset::ImageDataset(Tensor pixels, Tensor targets, std::vector<Transform> transforms)
    : transforms_(std::move(transforms)) {
  VOLT_CHECK(pixels.has_data() && targets.has_data(), "ImageDataset",
             "pixels and targets must be tensors with values, got "
                 << (pixels.defined() ? pixels.meta_str() : "undefined") << " and "
                 << (targets.defined() ? targets.meta_str() : "undefined"));
  VOLT_CHECK(pixels.dtype() == DType::u8, "ImageDataset",
             "pixels must be u8 (converted to f32 per batch), got " << pixels.meta_str());
  VOLT_CHECK(pixels.dim() >= 1 && targets.dim() >= 1 && pixels.size(0) == targets.size(0), "ImageDataset",
             "pixels and targets need the same first dim (one row per sample), got "
                 << shape_str(pixels.sizes()) << " and " << shape_str(targets.sizes()));
  for (const Transform& t : transforms_) VOLT_CHECK(bool(t), "ImageDataset", "a transform is empty");
  pixels_ = pixels.to(kCPU).contiguous();
  targets_ = targets.to(kCPU).contiguous();
  // A transform that does not keep the batch's shape fails here, not mid-epoch.
  if (!transforms_.empty() && size() > 0) (void)get(0);
}

void ImageDataset::gather(std::span<const int64_t> indices, Tensor& data, Tensor& targets) const {
  const int64_t n = size(), b = static_cast<int64_t>(indices.size());
  const int64_t row = n ? pixels_.numel() / n : 0;
  Shape shape{b};
  for (int64_t d : sample_shape()) shape.push_back(d);
  VOLT_CHECK(data.has_data() && data.device().is_cpu() && data.is_contiguous() && data.dtype() == DType::f32 &&
                 data.sizes() == shape,
             "ImageDataset::gather",
             "data batch must be a contiguous cpu f32 tensor of shape " << shape_str(shape) << ", got "
                                                                         << data.meta_str());
  gather_rows(indices, targets_, targets, "targets");  // checks every index
  // Divide (not multiply by 1/255) so values equal torchvision's ToTensor bit for bit.
  float table[256];
  for (int p = 0; p < 256; ++p) table[p] = static_cast<float>(p) / 255.0f;
  const uint8_t* from = pixels_.data_ptr<uint8_t>();
  float* to = data.data_ptr<float>();
  for (int64_t r = 0; r < b; ++r) {
    const uint8_t* src = from + indices[r] * row;
    float* dst = to + r * row;
    for (int64_t k = 0; k < row; ++k) dst[k] = table[src[k]];
  }
  if (transforms_.empty()) return;
  Tensor x = data;
  for (const Transform& t : transforms_) {
    x = t(x);
    VOLT_CHECK(x.has_data() && x.sizes() == shape && is_floating(x.dtype()), "ImageDataset",
               "a transform must return a floating tensor shaped like its batch " << shape_str(shape)
                   << ", got " << (x.defined() ? x.meta_str() : "an undefined tensor"));
  }
  data.copy_(x.to(kCPU).to(DType::f32));
}

Example ImageDataset::get(int64_t i) const {
  VOLT_CHECK(i >= 0 && i < size(), "ImageDataset::get",
             "index " << i << " is out of range for a dataset of " << size() << " samples");
  Shape shape{1}, target{1};
  for (int64_t d : sample_shape()) shape.push_back(d);
  for (int64_t d : target_shape()) target.push_back(d);
  Tensor x = Tensor::empty(shape, DType::f32), y = Tensor::empty(target, target_dtype());
  gather(std::span<const int64_t>(&i, 1), x, y);
  return {x.select(0, 0), y.select(0, 0)};
}

Tensor ImageDataset::data() const {
  std::vector<int64_t> all(static_cast<size_t>(size()));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  Tensor x = Tensor::empty(pixels_.sizes(), DType::f32), y = Tensor::empty(targets_.sizes(), target_dtype());
  gather(all, x, y);
  return x;
}

ImageDataset ImageDataset::with_transform(Transform t) const {
  std::vector<Transform> ts = transforms_;
  ts.push_back(std::move(t));
  return ImageDataset(pixels_, targets_, std::move(ts));
}

ImageDataset ImageDataset::with_sample_shape(const Shape& sample_shape) const {
  Shape s{size()};
  s.insert(s.end(), sample_shape.begin(), sample_shape.end());
  VOLT_CHECK(shape_numel(s) == pixels_.numel(), "with_sample_shape",
             "samples of " << shape_str(this->sample_shape()) << " cannot be seen as " << shape_str(sample_shape));
  return ImageDataset(pixels_.reshape(s), targets_, transforms_);
}

// ---------------------------------------------------------------- MNIST

namespace {

// root/name, else root/name.gz: fetch_mnist.sh stores raw files, other tools keep .gz.
std::string find_file(const std::string& root, const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path raw = fs::path(root) / name, gz = fs::path(root) / (name + ".gz");
  if (fs::exists(raw)) return raw.string();
  if (fs::exists(gz)) return gz.string();
  VOLT_FAIL("MNIST", "neither " << raw.string() << " nor " << gz.string()
                                << " exists (`data/fetch_mnist.sh " << root << "` downloads MNIST there)");
}

ImageDataset load_mnist(const std::string& root, bool train, const Transform& transform) {
  const std::string prefix = train ? "train" : "t10k";
  IdxArray images = read_idx(find_file(root, prefix + "-images-idx3-ubyte"), 3);
  const IdxArray labels = read_idx(find_file(root, prefix + "-labels-idx1-ubyte"), 1);
  const int64_t n = images.dims[0];
  VOLT_CHECK(labels.dims[0] == n, "MNIST",
             images.path << " has " << n << " images but " << labels.path << " has "
                         << labels.dims[0] << " labels");
  const auto bad =
      std::find_if(labels.bytes.begin(), labels.bytes.end(), [](uint8_t c) { return c > 9; });
  VOLT_CHECK(bad == labels.bytes.end(), "MNIST",
             labels.path << ": label " << int(*bad) << " at index " << (bad - labels.bytes.begin())
                         << " is not a class in 0..9");
  Tensor pixels = to_tensor(images).reshape({n, n ? static_cast<int64_t>(images.bytes.size()) / n : 0});
  images.bytes = {};  // the tensor holds its own copy: free the file's bytes before going on
  std::vector<Transform> transforms;
  if (transform) transforms.push_back(transform);
  return ImageDataset(pixels, labels_to_int64(labels), std::move(transforms));
}

}  // namespace

MNIST::MNIST(const std::string& root, bool train, const Transform& transform)
    : ImageDataset(load_mnist(root, train, transform)), train_(train) {}

std::string mnist_root(bool fashion) {
  const char* dir = std::getenv("VOLT_DATA_DIR");
  if (dir && *dir && !fashion) return dir;
  const char* home = std::getenv("HOME");
  const std::string base = std::string(home && *home ? home : ".") + "/.cache/volt/";
  return base + (fashion ? "fashion-mnist" : "mnist");
}

}  // namespace volt::data
