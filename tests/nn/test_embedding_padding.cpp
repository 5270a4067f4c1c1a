// embedding's padding_idx against PyTorch's documented rule: the padding row
// takes part in the forward as any row, its gradient is always zero, the
// module starts it at zeros, and a negative padding_idx counts from the end.
// The gradient's reference is a plain scatter-add loop; the jit, a compiled
// step and the lazy device are compared with eager mode (tests/tensor/modes.h).
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include <volt/jit/jit.h>
#include <volt/nn/adamw.h>
#include <volt/nn/embedding.h>
#include <volt/nn/functional.h>
#include <volt/tensor/ops.h>
#include "tests/error_of.h"
#include "tests/tensor/modes.h"

using namespace volt;
using volt::testing::check_modes;
using volt::testing::error_of;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

bool matches(double got, double want) { return std::abs(got - want) <= 1e-12 * (1 + std::abs(want)); }

// The weight's gradient of sum(embedding(w, idx) * g) by a loop: row idx[i]
// gets g's row i added, except the padding row, which gets nothing.
std::vector<double> scatter_add(const std::vector<int64_t>& idx, const std::vector<double>& g, int64_t rows,
                                int64_t dim, int64_t padding_idx) {
  std::vector<double> r(static_cast<size_t>(rows * dim), 0.0);
  for (size_t i = 0; i < idx.size(); ++i)
    if (idx[i] != padding_idx)
      for (int64_t d = 0; d < dim; ++d) r[idx[i] * dim + d] += g[i * dim + d];
  return r;
}

}  // namespace

TEST_CASE("embedding padding_idx: the row is looked up, its gradient is zero, in every mode") {
  manual_seed(4);
  const int64_t rows = 5, dim = 3;
  const Tensor w = Tensor::randn({rows, dim}, DType::f64);  // the padding row is not zero: it is still returned
  const std::vector<int64_t> idx{2, 0, 2, 4, 1, 2};
  const Tensor index = Tensor::from_vector<int64_t>(idx, {2, 3});
  const Tensor g = Tensor::randn({2, 3, dim}, DType::f64);
  for (int64_t p : {2, 0, 4}) {
    INFO("padding_idx " << p);
    Tensor leaf = w.clone().requires_grad_();
    Tensor y = embedding(leaf, index, p);
    const std::vector<double> table = w.to_vector<double>(), got = y.to_vector<double>();
    for (size_t i = 0; i < idx.size(); ++i)
      for (int64_t d = 0; d < dim; ++d) CHECK(got[i * dim + d] == table[idx[i] * dim + d]);
    sum(mul(y, g)).backward();
    const std::vector<double> want = scatter_add(idx, g.to_vector<double>(), rows, dim, p);
    const std::vector<double> grad = leaf.grad().to_vector<double>();
    for (size_t k = 0; k < want.size(); ++k) CHECK(matches(grad[k], want[k]));
    check_modes([p](const std::vector<Tensor>& a) { return embedding(a[0], a[1], p); }, {w, index}, 1e-12);
  }
  // Without padding_idx (or a negative one, as torch::embedding) every row gets its gradient.
  Tensor leaf = w.clone().requires_grad_();
  sum(mul(embedding(leaf, index, -1), g)).backward();
  const std::vector<double> all = scatter_add(idx, g.to_vector<double>(), rows, dim, -1);
  const std::vector<double> grad = leaf.grad().to_vector<double>();
  for (size_t k = 0; k < all.size(); ++k) CHECK(matches(grad[k], all[k]));
}

TEST_CASE("embedding padding_idx: the trace prints it, and its gradient's mask is an op of the decomposition") {
  const Tensor w = Tensor::randn({4, 2}).requires_grad_();
  const Tensor index = Tensor::from_vector<int64_t>({0, 3, 1});
  auto f = jit::jit([](const std::vector<Tensor>& a) { return std::vector<Tensor>{embedding(a[0], a[1], 3)}; });
  sum(f({w, index}).at(0)).backward();
  const std::string fwd = jit::last_traces(f).front().str();
  INFO(fwd);
  CHECK(has(fwd, "embedding(t_0, t_1, padding_idx=3)"));
  CHECK(has(fwd, "zero_padding_grad("));
  CHECK(w.grad().to_vector<float>()[6] == 0.0f);  // row 3
  CHECK(w.grad().to_vector<float>()[0] == 1.0f);  // row 0
  // Out of range for the table: an error naming embedding.
  CHECK(has(error_of([&] { embedding(w, index, 4); }), "embedding: padding_idx 4 is out of range"));
}

TEST_CASE("nn::Embedding with padding_idx: zeros at the start, untouched by AdamW, counted from the end when negative") {
  manual_seed(5);
  nn::Embedding e(nn::EmbeddingOptions(6, 4).padding_idx(-1));
  REQUIRE(e.padding_idx().has_value());
  CHECK(*e.padding_idx() == 5);
  CHECK(e.extra_repr() == "6, 4, padding_idx=5");
  const std::vector<float> start = e.weight.to_vector<float>();
  for (int64_t d = 0; d < 4; ++d) CHECK(start[5 * 4 + d] == 0.0f);
  int64_t nonzero = 0;
  for (int64_t k = 0; k < 5 * 4; ++k) nonzero += start[k] != 0.0f;
  CHECK(nonzero == 20);  // the other rows are drawn
  // Weight decay and Adam's update leave a row whose gradient is always zero where it is.
  nn::AdamW opt(e.parameters(), {.lr = 0.1, .weight_decay = 0.1});
  const Tensor index = Tensor::from_vector<int64_t>({5, 1, 5, 2, 5});
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    sum(mul(e.forward(index), e.forward(index))).backward();
    opt.step();
  }
  const std::vector<float> after = e.weight.to_vector<float>();
  for (int64_t d = 0; d < 4; ++d) CHECK(after[5 * 4 + d] == 0.0f);
  for (int64_t d = 0; d < 4; ++d) CHECK(after[1 * 4 + d] != start[1 * 4 + d]);
  for (int64_t d = 0; d < 4; ++d) CHECK(after[0 * 4 + d] != start[0 * 4 + d]);  // weight decay alone moves row 0
  // LibTorch's bounds: [-num_embeddings, num_embeddings).
  CHECK(has(error_of([] { nn::Embedding(nn::EmbeddingOptions(6, 4).padding_idx(6)); }),
            "Embedding: padding_idx must lie in [-6, 6)"));
  CHECK(has(error_of([] { nn::Embedding(nn::EmbeddingOptions(6, 4).padding_idx(-7)); }), "padding_idx must lie"));
  CHECK(!nn::Embedding(6, 4).padding_idx().has_value());
}

TEST_CASE("nn::functional::embedding: LibTorch's argument order and a padding_idx counted from the end") {
  namespace F = nn::functional;
  const Tensor w = Tensor::randn({4, 2}, DType::f64);
  const Tensor index = Tensor::from_vector<int64_t>({3, 1, 3});
  Tensor leaf = w.clone().requires_grad_();
  Tensor y = F::embedding(index, leaf, F::EmbeddingFuncOptions().padding_idx(-1));
  CHECK(y.to_vector<double>() == embedding(w, index).to_vector<double>());
  sum(y).backward();
  CHECK(leaf.grad().to_vector<double>() == std::vector<double>{0, 0, 1, 1, 0, 0, 0, 0});
  CHECK(has(error_of([&] { F::embedding(index, w, F::EmbeddingFuncOptions().padding_idx(-5)); }),
            "embedding: padding_idx must lie in [-4, 4)"));
}
