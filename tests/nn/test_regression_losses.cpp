// volt::nn::MSELoss, SmoothL1Loss and BCEWithLogitsLoss, built with LibTorch's
// option builders, and the functional forms give what the ops of
// tensor/losses.h give for the same options (the ops' rules are checked in
// tests/tensor/test_losses.cpp).
#include <doctest/doctest.h>

#include <volt/nn/regression_loss.h>
#include <volt/tensor/ops.h>
#include "tests/tensor/reference.h"

using namespace volt;
using volt::testing::sample;

TEST_CASE("nn::MSELoss, SmoothL1Loss and BCEWithLogitsLoss with LibTorch's builders equal the ops") {
  Tensor x = sample({5}, DType::f32, 10), y = sample({5}, DType::f32, 11), labels = (y > 0.0).to(DType::f32);
  nn::MSELoss mse;
  nn::SmoothL1Loss smooth(nn::SmoothL1LossOptions().beta(0.25).reduction(kSum));
  nn::BCEWithLogitsLoss bce(nn::BCEWithLogitsLossOptions().pos_weight(Tensor::full({1}, 3.0)));
  CHECK(mse(x, y).item<float>() == mse_loss(x, y).item<float>());
  CHECK(smooth(x, y).item<float>() == smooth_l1_loss(x, y, kSum, 0.25).item<float>());
  CHECK(smooth->forward(x, y).item<float>() == smooth(x, y).item<float>());
  CHECK(bce(x, labels).item<float>() ==
        binary_cross_entropy_with_logits(x, labels, {.pos_weight = Tensor::full({1}, 3.0)}).item<float>());
  namespace F = nn::functional;
  CHECK(F::mse_loss(x, y, F::MSELossFuncOptions(kSum)).item<float>() == mse_loss(x, y, kSum).item<float>());
  CHECK(F::smooth_l1_loss(x, y, F::SmoothL1LossFuncOptions().beta(0.25)).item<float>() ==
        smooth_l1_loss(x, y, kMean, 0.25).item<float>());
  CHECK(F::smooth_l1_loss(x, y, {}, 2.0).item<float>() == smooth_l1_loss(x, y, kMean, 2.0).item<float>());
  CHECK(F::binary_cross_entropy_with_logits(x, labels).item<float>() ==
        binary_cross_entropy_with_logits(x, labels).item<float>());
  CHECK_THROWS_WITH_AS(mse.forward(x), doctest::Contains("MSELoss: takes two inputs"), Error);
}
