#include <volt/data/datasets.h>

#include <volt/data/transforms.h>

namespace volt::data::datasets {

MapDataset MapDataset::normalized(const std::vector<double>& mean, const std::vector<double>& stddev) const {
  const Tensor x = data::Normalize(mean, stddev)(data_.data());
  return MapDataset(TensorDataset(x, data_.targets()));
}

MNIST::MNIST(const std::string& root, Mode mode)
    : MapDataset(with_sample_shape(data::MNIST(root, mode == Mode::kTrain), {1, 28, 28})), mode_(mode) {}

}  // namespace volt::data::datasets
