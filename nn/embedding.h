// volt::nn::Embedding — a table of learned vectors looked up by index.
//
//   auto wte = std::make_shared<volt::nn::Embedding>(256, 128);
//   volt::Tensor x = (*wte)(idx);  // idx: (B, T) integers in [0, 256) -> (B, T, 128)
//   std::cout << *wte;             // Embedding(256, 128)
//
// The weight (num_embeddings, embedding_dim) is drawn from N(0, 1) as in
// PyTorch; its gradient adds each output row's gradient into its index's row.
// With a padding_idx (LibTorch: Embedding(EmbeddingOptions(V, D).padding_idx(0))),
// that row starts at zeros and its gradient is always zero, so a padded
// position's row stays what it is; a negative padding_idx counts from the end.
#pragma once
#include <cstdint>
#include <optional>

#include <volt/nn/holder.h>
#include <volt/nn/module.h>
#include <volt/nn/parameter_field.h>

namespace volt::nn {

// LibTorch's builder: Embedding(EmbeddingOptions(V, D).padding_idx(0)).
class EmbeddingOptions {
 public:
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim) : num_(num_embeddings), dim_(embedding_dim) {}
  EmbeddingOptions& padding_idx(std::optional<int64_t> p) {
    padding_idx_ = p;
    return *this;
  }
  const std::optional<int64_t>& padding_idx() const { return padding_idx_; }
  int64_t num_embeddings() const { return num_; }
  int64_t embedding_dim() const { return dim_; }

 private:
  int64_t num_, dim_;
  std::optional<int64_t> padding_idx_;
};

class Embedding : public Module, public Holder<Embedding> {
 public:
  // Empty until assigned (nn/holder.h): Embedding wte{nullptr};
  explicit Embedding(std::nullptr_t) : Module("Embedding"), Holder<Embedding>(nullptr) {}
  using Holder<Embedding>::operator=;
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  explicit Embedding(const EmbeddingOptions& options);
  // A table that shares `weight` (V, D): a weight tied to another module's
  // (a language model's output projection) is one parameter under two names.
  explicit Embedding(const Tensor& weight);

  // index: (*) integers -> (*, embedding_dim)
  Tensor forward(const Tensor& index) override;
  std::string extra_repr() const override;  // "256, 128" or "256, 128, padding_idx=0"

  int64_t num_embeddings() const { return weight.size(0); }
  int64_t embedding_dim() const { return weight.size(1); }
  // The padding row, counted from the start (a negative one given is resolved), if any.
  std::optional<int64_t> padding_idx() const { return padding_idx_; }

  // (num_embeddings, embedding_dim): wte->weight or wte->weight() (nn/parameter_field.h)
  ParameterField weight;

 private:
  std::optional<int64_t> padding_idx_;
};

}  // namespace volt::nn
