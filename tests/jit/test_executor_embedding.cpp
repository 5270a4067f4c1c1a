// A user executor that claims embedding receives its padding_idx (after the
// weight and the index), so a grad transform it supplies can keep the padding
// row's gradient zero, as eager does.
#include <doctest/doctest.h>

#include <vector>

#include <volt/jit/executor_registry.h>
#include <volt/jit/grad_transform.h>
#include <volt/jit/jit.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include "tests/tensor/reference.h"

using namespace volt;
using jit::OperatorExecutor;
using volt::testing::max_abs_diff;

namespace {

// The gradient of embedding's weight from plain ops: one-hot rows times g,
// the padding row (if any) left out.
Tensor weight_grad(const Tensor& weight, const Tensor& index, int64_t padding_idx, const Tensor& g) {
  const int64_t V = weight.sizes()[0], D = weight.sizes()[1];
  Tensor rows = Tensor::arange(static_cast<double>(V), DType::i64).reshape({1, V});
  Tensor onehot = eq(index.reshape({-1, 1}), rows);
  if (padding_idx >= 0) onehot = logical_and(onehot, ne(rows, Value(Scalar(padding_idx))));
  return matmul(convert_element_type(onehot, weight.dtype()).t(), g.reshape({-1, D}));
}

}  // namespace

TEST_CASE("a user executor's grad transform for embedding gets padding_idx: the padding row's gradient stays zero") {
  OperatorExecutor ex("emb_padding", "0.1");
  std::vector<size_t> sizes;
  std::vector<double> paddings;
  ex.register_implementation(OpId::embedding, {.grad_transform = [&](const std::vector<Value>& v) {
                                                 sizes.push_back(v.size());
                                                 const int64_t padding_idx = static_cast<int64_t>(v.at(2).scalar.value);
                                                 paddings.push_back(static_cast<double>(padding_idx));
                                                 Tensor fwd = embedding(v[0].tensor, v[1].tensor, padding_idx);
                                                 jit::put_grad(v[0].tensor, weight_grad(v[0].tensor, v[1].tensor, padding_idx,
                                                                                        jit::get_grad(fwd)));
                                                 return std::vector<Tensor>{fwd};
                                               }});
  manual_seed(3);
  Tensor w = Tensor::randn({5, 3}), c = Tensor::randn({2, 4, 3});
  Tensor index = Tensor::from_vector<int64_t>({0, 2, 0, 4, 1, 0, 3, 2}, {2, 4});
  for (int64_t padding_idx : {0, -1}) {
    CAPTURE(padding_idx);
    auto f = jit::jit(
        [padding_idx](const std::vector<Tensor>& x) {
          return std::vector<Tensor>{sum(embedding(x[0], x[1], padding_idx) * x[2])};
        },
        {.executors = {ex}});
    Tensor leaf = w.clone().requires_grad_(), eager_leaf = w.clone().requires_grad_();
    f({leaf, index, c})[0].backward();
    sum(embedding(eager_leaf, index, padding_idx) * c).backward();
    REQUIRE(leaf.grad().defined());
    CHECK(max_abs_diff(leaf.grad(), eager_leaf.grad()) < 1e-6);
    if (padding_idx == 0) CHECK(leaf.grad().index_select(0, Tensor::zeros({1}, DType::i64)).abs().sum().item<float>() == 0);
    REQUIRE_FALSE(sizes.empty());
    CHECK(sizes.back() == 3);
    CHECK(paddings.back() == static_cast<double>(padding_idx));
  }
}
