#include <volt/data/datasets.h>

#include <volt/data/transforms.h>

namespace volt::data::datasets {

MapDataset MapDataset::normalized(const std::vector<double>& mean, const std::vector<double>& stddev) const {
  return MapDataset(data_.with_transform(data::Normalize(mean, stddev)));
}

MNIST::MNIST(const std::string& root, Mode mode)
    : MapDataset(data::MNIST(root, mode == Mode::kTrain).with_sample_shape({1, 28, 28})), mode_(mode) {}

}  // namespace volt::data::datasets
