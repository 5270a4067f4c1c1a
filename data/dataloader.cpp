#include <volt/data/dataloader.h>

#include <algorithm>

namespace volt::data {

DataLoader::DataLoader(const Dataset& dataset, int64_t batch_size, std::shared_ptr<Sampler> sampler,
                       bool drop_last)
    : dataset_(dataset),
      batch_size_(batch_size),
      sampler_(sampler ? std::move(sampler) : std::make_shared<SequentialSampler>(dataset.size())),
      drop_last_(drop_last) {
  VOLT_CHECK(batch_size > 0, "DataLoader", "batch_size must be positive, got " << batch_size);
  // A sampler built for another dataset would silently skip samples or run out of range.
  VOLT_CHECK(sampler_->size() == dataset.size(), "DataLoader",
             "the sampler draws from " << sampler_->size() << " indices but the dataset has "
                                       << dataset.size() << " samples");
}

int64_t DataLoader::size() const {
  const int64_t n = sampler_->epoch_length();
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

Batch DataLoader::make_batch(std::span<const int64_t> indices) const {
  const auto b = static_cast<int64_t>(indices.size());
  Shape data_shape{b}, target_shape{b};
  for (int64_t d : dataset_.sample_shape()) data_shape.push_back(d);
  for (int64_t d : dataset_.target_shape()) target_shape.push_back(d);
  Batch batch{Tensor::empty(data_shape, dataset_.data_dtype()),
              Tensor::empty(target_shape, dataset_.target_dtype())};
  dataset_.gather(indices, batch.data, batch.target);
  return batch;
}

DataLoader::Iterator DataLoader::begin() {
  auto order = std::make_shared<const std::vector<int64_t>>(sampler_->next_epoch());
  return Iterator(this, std::move(order), 0);
}

DataLoader::Iterator::Iterator(const DataLoader* loader,
                               std::shared_ptr<const std::vector<int64_t>> order, int64_t index)
    : loader_(loader), order_(std::move(order)), index_(index) {
  if (order_) load();
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  ++index_;
  load();
  return *this;
}

void DataLoader::Iterator::load() {
  if (index_ >= loader_->size()) {
    batch_ = {};  // past the end: drop the last batch's tensors
    return;
  }
  const int64_t bs = loader_->batch_size_, n = static_cast<int64_t>(order_->size());
  const int64_t start = index_ * bs, count = std::min(bs, n - start);
  batch_ = loader_->make_batch(std::span<const int64_t>(order_->data() + start, count));
}

}  // namespace volt::data
