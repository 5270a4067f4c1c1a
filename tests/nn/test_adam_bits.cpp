// The CPU Adam kernel (blocks, vector sqrt, one parallel loop over all
// parameters) against the update rule of nn/optim.h written as a plain float
// loop: equal to the bit, on sizes that end in partial blocks and vectors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include <volt/nn/optim.h>
#include <volt/tensor/tensor.h>

using namespace volt;

// volt itself is built with -ffp-contract=off; the reference below must not
// fuse a multiply and an add either, or it would round differently.
#pragma GCC optimize("fp-contract=off")

TEST_CASE("Adam's CPU kernel equals the scalar rule to the bit") {
  for (double wd : {0.0, 0.01}) {
    const std::vector<int64_t> sizes = {1, 17, 1024, 3001};  // 3001 = 2 blocks + 953
    std::vector<Tensor> params;
    std::vector<std::vector<float>> p_ref, m_ref, v_ref;
    for (size_t s = 0; s < sizes.size(); ++s) {
      std::vector<float> init(sizes[s]);
      for (int64_t i = 0; i < sizes[s]; ++i) init[i] = std::sin(0.37f * i + s);
      params.push_back(Tensor::from_vector<float>(init));
      p_ref.push_back(init);
      m_ref.emplace_back(sizes[s], 0.0f);
      v_ref.emplace_back(sizes[s], 0.0f);
    }
    const nn::AdamOptions o{.lr = 1e-2, .weight_decay = wd};
    nn::Adam opt(params, o);
    for (int step = 1; step <= 3; ++step) {
      for (size_t s = 0; s < sizes.size(); ++s) {
        std::vector<float> g(sizes[s]);
        for (int64_t i = 0; i < sizes[s]; ++i) g[i] = std::cos(0.11f * i * step + s) * 1e-3f * (i % 7);
        params[s].set_grad(Tensor::from_vector<float>(g));
        // The rule, with the constants rounded from double once as the kernel does.
        const float c1 = float(1.0 - o.beta1), b2 = float(o.beta2), c2 = float(1.0 - o.beta2);
        const float neg_step = float(-o.lr / (1.0 - std::pow(o.beta1, step)));
        const float bc2 = float(std::sqrt(1.0 - std::pow(o.beta2, step)));
        const float eps = float(o.eps), decay = float(wd);
        for (int64_t i = 0; i < sizes[s]; ++i) {
          float gi = g[i];
          if (decay != 0.0f) gi = gi + decay * p_ref[s][i];
          float& m = m_ref[s][i];
          float& v = v_ref[s][i];
          m = m + c1 * (gi - m);
          v = v * b2 + (c2 * gi) * gi;
          p_ref[s][i] = p_ref[s][i] + (neg_step * m) / (std::sqrt(v) / bc2 + eps);
        }
      }
      opt.step();
    }
    for (size_t s = 0; s < sizes.size(); ++s) {
      CAPTURE(wd);
      CAPTURE(sizes[s]);
      CHECK(params[s].to_vector<float>() == p_ref[s]);
      CHECK(opt.exp_avg(s).to_vector<float>() == m_ref[s]);
      CHECK(opt.exp_avg_sq(s).to_vector<float>() == v_ref[s]);
    }
  }
}
