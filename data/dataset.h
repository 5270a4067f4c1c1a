// Datasets: N samples, each a fixed-shape row of data plus a target.
//
//   volt::data::MNIST train(volt::data::mnist_root(), /*train=*/true,
//                           volt::data::normalize(0.1307, 0.3081));
//   train.size();                  // 60000
//   auto [image, label] = train.get(0);
//   image.sizes();                 // [784]
//   label.item<int64_t>();         // 5
//
// The DataLoader (data/dataloader.h) only needs the Dataset interface below,
// so an in-memory TensorDataset and MNIST (an ImageDataset, kept as u8 and
// converted per batch) batch the same way.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <volt/tensor/tensor.h>

namespace volt::data {

struct Example {
  Tensor data;    // (*sample_shape)
  Tensor target;  // (*target_shape); 0-d for a class index
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Shape sample_shape() const = 0;            // one sample, e.g. [784]
  virtual Shape target_shape() const { return {}; }  // one target; [] for a class index
  virtual DType data_dtype() const { return DType::f32; }
  virtual DType target_dtype() const { return DType::i64; }
  // Copies samples indices[b] into row b of data (B, *sample_shape) and targets
  // (B, *target_shape), both contiguous CPU tensors the caller allocated: a batch
  // is filled in place, with no per-sample tensors.
  virtual void gather(std::span<const int64_t> indices, Tensor& data, Tensor& targets) const = 0;
};

// Samples are the rows of data (N, ...), targets the rows of targets (N, ...).
// Both are kept as contiguous CPU tensors; a copy of the dataset shares them.
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor data, Tensor targets);

  int64_t size() const override { return data_.size(0); }
  Shape sample_shape() const override { return {data_.sizes().begin() + 1, data_.sizes().end()}; }
  Shape target_shape() const override {
    return {targets_.sizes().begin() + 1, targets_.sizes().end()};
  }
  DType data_dtype() const override { return data_.dtype(); }
  DType target_dtype() const override { return targets_.dtype(); }
  void gather(std::span<const int64_t> indices, Tensor& data, Tensor& targets) const override;

  Example get(int64_t i) const;  // views into the stored tensors
  const Tensor& data() const { return data_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor data_, targets_;
};

// Applied to each batch of samples (B, *sample_shape) after it is gathered; it
// returns a tensor of the same shape.  An elementwise transform (normalize())
// gives the values it would give on the whole dataset, bit for bit.
using Transform = std::function<Tensor(Tensor)>;

// x -> (x - mean) / stddev, torchvision's Normalize for one channel.
Transform normalize(double mean, double stddev);

// Images kept as stored: u8 pixels (N, *sample_shape), 1 byte per pixel.  A
// batch is converted when it is gathered — each pixel p to the f32 p / 255
// (torchvision's ToTensor, in [0, 1]), then the transforms in order — so
// there is never an f32 copy of the whole set.  Copies share the pixels.
class ImageDataset : public Dataset {
 public:
  ImageDataset(Tensor pixels, Tensor targets, std::vector<Transform> transforms = {});

  int64_t size() const override { return pixels_.size(0); }
  Shape sample_shape() const override { return {pixels_.sizes().begin() + 1, pixels_.sizes().end()}; }
  Shape target_shape() const override {
    return {targets_.sizes().begin() + 1, targets_.sizes().end()};
  }
  DType target_dtype() const override { return targets_.dtype(); }
  void gather(std::span<const int64_t> indices, Tensor& data, Tensor& targets) const override;

  Example get(int64_t i) const;  // sample i converted (a fresh f32 tensor) and its target
  // Every sample converted and transformed, f32 (N, *sample_shape): a copy of
  // the whole set at 4 bytes per pixel, made on each call (batches never make it).
  Tensor data() const;
  const Tensor& pixels() const { return pixels_; }  // u8 (N, *sample_shape), as stored
  const Tensor& targets() const { return targets_; }
  const std::vector<Transform>& transforms() const { return transforms_; }

  // The same pixels (shared), with t applied after the transforms already here.
  ImageDataset with_transform(Transform t) const;
  // The same pixels (shared) with each sample seen as sample_shape (same numel).
  ImageDataset with_sample_shape(const Shape& sample_shape) const;

 private:
  Tensor pixels_, targets_;
  std::vector<Transform> transforms_;
};

// MNIST or Fashion-MNIST (same file names and format) from `root`, which holds
//   train-images-idx3-ubyte, train-labels-idx1-ubyte,
//   t10k-images-idx3-ubyte,  t10k-labels-idx1-ubyte
// raw or with a `.gz` suffix.  Samples are f32 [784] with pixels in [0, 1]
// before the transform (applied per batch); pixels() is u8 (N, 784) and
// targets() i64 (N) with classes 0..9.
class MNIST : public ImageDataset {
 public:
  MNIST(const std::string& root, bool train, const Transform& transform = {});
  bool train() const { return train_; }

 private:
  bool train_;
};

// Where data/fetch_mnist.sh puts the files by default: MNIST in $VOLT_DATA_DIR
// if set, else ~/.cache/volt/mnist; Fashion-MNIST in ~/.cache/volt/fashion-mnist.
std::string mnist_root(bool fashion = false);

}  // namespace volt::data
