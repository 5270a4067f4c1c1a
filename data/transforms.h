// Transforms and views for image data.
//
//   volt::data::MNIST train(root, /*train=*/true, volt::data::Normalize({0.1307}, {0.3081}));
//   volt::data::ImageDataset images = volt::data::with_sample_shape(train, {1, 28, 28});
//   images.sample_shape();   // [1, 28, 28]: batches are (B, 1, 28, 28), as a CNN reads them
#pragma once
#include <vector>

#include <volt/data/dataset.h>

namespace volt::data {

// torchvision's Normalize: x -> (x - mean[c]) / std[c] for channel c, the
// channels being dim 1 of a batch (N, C, ...).  One mean and std apply to
// every element, whatever the shape (MNIST's (N, 784) images).
class Normalize {
 public:
  Normalize(std::vector<double> mean, std::vector<double> std);
  Tensor operator()(Tensor x) const;

 private:
  std::vector<double> mean_, std_;
};

// The same samples and targets, each sample seen as `sample_shape` (same
// number of elements); the data is shared, not copied.
TensorDataset with_sample_shape(const TensorDataset& d, const Shape& sample_shape);
// For images kept as u8 (MNIST): the pixels are shared, the transforms kept.
ImageDataset with_sample_shape(const ImageDataset& d, const Shape& sample_shape);

}  // namespace volt::data
