#include <volt/nn/embedding.h>

#include <volt/tensor/indexing.h>
#include <volt/tensor/ops.h>

namespace volt::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim) : Module("Embedding") {
  VOLT_CHECK(num_embeddings > 0 && embedding_dim > 0, "Embedding",
             "sizes must be positive, got num_embeddings=" << num_embeddings
                                                           << ", embedding_dim=" << embedding_dim);
  NoGradGuard no_grad;
  weight = register_parameter("weight", Tensor::randn({num_embeddings, embedding_dim}));
}

Embedding::Embedding(const EmbeddingOptions& options)
    : Embedding(options.num_embeddings(), options.embedding_dim()) {
  if (!options.padding_idx()) return;
  const int64_t n = options.num_embeddings(), p = *options.padding_idx();
  VOLT_CHECK(p >= -n && p < n, "Embedding",
             "padding_idx must lie in [-" << n << ", " << n << ") for num_embeddings=" << n << ", got " << p);
  padding_idx_ = p < 0 ? p + n : p;
  NoGradGuard no_grad;
  weight.index_put_({*padding_idx_}, 0.0);
}

Embedding::Embedding(const Tensor& shared) : Module("Embedding") {
  VOLT_CHECK(shared.defined() && shared.dim() == 2, "Embedding",
             "a shared weight must be 2-D (num_embeddings, embedding_dim), got "
                 << (shared.defined() ? shared.meta_str() : std::string("an undefined tensor")));
  weight = register_parameter("weight", shared, shared.requires_grad());
}

Tensor Embedding::forward(const Tensor& index) { return volt::embedding(weight, index, padding_idx_.value_or(-1)); }

std::string Embedding::extra_repr() const {
  return std::to_string(num_embeddings()) + ", " + std::to_string(embedding_dim()) +
         (padding_idx_ ? ", padding_idx=" + std::to_string(*padding_idx_) : std::string());
}

}  // namespace volt::nn
