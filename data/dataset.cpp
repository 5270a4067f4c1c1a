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

// ---------------------------------------------------------------- MNIST

Transform normalize(double mean, double stddev) {
  return [mean, stddev](Tensor x) { return (x - mean) / stddev; };
}

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

TensorDataset load_mnist(const std::string& root, bool train, const Transform& transform) {
  const std::string prefix = train ? "train" : "t10k";
  const IdxArray images = read_idx(find_file(root, prefix + "-images-idx3-ubyte"), 3);
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

  Tensor x = images_to_float(images);  // (N, R*C) in [0, 1]
  if (transform) {
    x = transform(x);
    VOLT_CHECK(x.has_data() && x.dim() >= 1 && x.size(0) == n, "MNIST",
               "the transform must return one row per image ("
                   << n << " rows), got " << (x.defined() ? x.meta_str() : "an undefined tensor"));
  }
  return TensorDataset(x, labels_to_int64(labels));
}

}  // namespace

MNIST::MNIST(const std::string& root, bool train, const Transform& transform)
    : TensorDataset(load_mnist(root, train, transform)), train_(train) {}

std::string mnist_root(bool fashion) {
  const char* dir = std::getenv("VOLT_DATA_DIR");
  if (dir && *dir && !fashion) return dir;
  const char* home = std::getenv("HOME");
  const std::string base = std::string(home && *home ? home : ".") + "/.cache/volt/";
  return base + (fashion ? "fashion-mnist" : "mnist");
}

}  // namespace volt::data
