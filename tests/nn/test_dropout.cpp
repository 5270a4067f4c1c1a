// Dropout: keep rate, exact 1/(1-p) scaling, eval is identity, seeded masks.
#include <doctest/doctest.h>

#include <volt/nn/activation.h>
#include <volt/nn/mlp.h>
#include <volt/tensor/dispatch.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>

using namespace volt;

TEST_CASE("Dropout keeps about 1-p of the elements, scaled by exactly 1/(1-p)") {
  for (double p : {0.1, 0.5}) {
    manual_seed(0);
    const int64_t n = 200000;
    Tensor x = Tensor::rand({n}) + 1.0;  // nonzero, so a zero means dropped
    nn::Dropout drop(p);
    auto xv = x.to_vector<float>();
    auto yv = drop(x).to_vector<float>();
    const float scale = static_cast<float>(1.0 / (1.0 - p));
    int64_t kept = 0;
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (yv[i] == 0.0f) continue;
      ++kept;
      if (yv[i] != xv[i] * scale) ++wrong;
    }
    CHECK(wrong == 0);
    // Binomial: the standard deviation of the fraction is below 0.0012 here.
    CHECK(double(kept) / n == doctest::Approx(1.0 - p).epsilon(0.01));
  }
}

TEST_CASE("Dropout in eval mode is the identity") {
  manual_seed(0);
  Tensor x = Tensor::randn({64, 32});
  nn::Dropout drop(0.3);
  drop.eval();
  CHECK(drop(x).to_vector<float>() == x.to_vector<float>());
  CHECK(nn::Dropout(0.0)(x).to_vector<float>() == x.to_vector<float>());
}

TEST_CASE("the same seed gives the same mask") {
  Tensor x = Tensor::ones({1000});
  nn::Dropout drop(0.5);
  manual_seed(123);
  auto a = drop(x).to_vector<float>();
  auto b = drop(x).to_vector<float>();
  manual_seed(123);
  auto c = drop(x).to_vector<float>();
  CHECK(a == c);
  CHECK(a != b);  // the generator moves on between calls
}

TEST_CASE("Dropout(p=1) drops everything") {
  nn::Dropout drop(1.0);
  for (float v : drop(Tensor::ones({100})).to_vector<float>()) CHECK(v == 0.0f);
}

TEST_CASE("an MLP in eval mode is deterministic, in train mode it is not") {
  manual_seed(0);
  nn::MLP net(16, {32, 8}, true, 0.5);
  Tensor x = Tensor::randn({4, 16});
  NoGradGuard no_grad;
  net.eval();
  CHECK(net(x).to_vector<float>() == net(x).to_vector<float>());
  net.train();
  CHECK(net(x).to_vector<float>() != net(x).to_vector<float>());
}

TEST_CASE("Dropout rejects p outside [0, 1]") {
  CHECK_THROWS_WITH_AS(nn::Dropout(1.5), doctest::Contains("p must be in [0, 1]"), volt::Error);
  CHECK_THROWS_WITH_AS(nn::Dropout(-0.1), doctest::Contains("p must be in [0, 1]"), volt::Error);
}
