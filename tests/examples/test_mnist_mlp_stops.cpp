// examples/mnist_mlp stops at the step that leaves a parameter NaN or
// infinite, naming the parameter, and trains on when every parameter stays
// finite.  Runs the program on a small synthetic MNIST.
#include <doctest/doctest.h>

#include "../data/idx_files.h"
#include "run_example.h"

#include <string>
#include <vector>

namespace {

using volt::test::contains;
using volt::test::idx_bytes;
using volt::test::TempDir;
using volt::test::write_raw;

// n images of varied pixels and labels 0..9 in turn.
void write_small_mnist(const TempDir& dir, uint32_t train, uint32_t test) {
  auto images = [](uint32_t n) {
    std::vector<uint8_t> px(size_t(n) * 28 * 28);
    for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>((i * 37 + i / 784 * 11) % 256);
    return px;
  };
  auto labels = [](uint32_t n) {
    std::vector<uint8_t> l(n);
    for (uint32_t i = 0; i < n; ++i) l[i] = static_cast<uint8_t>(i % 10);
    return l;
  };
  write_raw(dir / "train-images-idx3-ubyte", idx_bytes({train, 28, 28}, images(train)));
  write_raw(dir / "train-labels-idx1-ubyte", idx_bytes({train}, labels(train)));
  write_raw(dir / "t10k-images-idx3-ubyte", idx_bytes({test, 28, 28}, images(test)));
  write_raw(dir / "t10k-labels-idx1-ubyte", idx_bytes({test}, labels(test)));
}

}  // namespace

TEST_CASE("mnist_mlp: a step that makes a parameter infinite stops the run there, naming it") {
  TempDir dir;
  write_small_mnist(dir, 64, 16);
  // Adam's first update moves each weight with a gradient by about lr: 1e39
  // is past f32's largest value, so the first step makes those weights infinite
  // while its loss, computed before the update, was finite.
  auto r = volt::testing::run_example("mnist_mlp --eager --lr 1e39 --limit-steps 4 --data-dir " +
                                      dir.path.string());
  INFO(r.out);
  CHECK(r.status != 0);
  CHECK(contains(r.out, "became non-finite after step 1 of epoch 1; stopping"));
  CHECK(contains(r.out, "parameter "));
  CHECK_FALSE(contains(r.out, "loss became"));

  // The default learning rate keeps every parameter finite: all 4 steps run.
  r = volt::testing::run_example("mnist_mlp --eager --limit-steps 4 --data-dir " + dir.path.string());
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(contains(r.out, "epoch 1: 4 steps in"));
  CHECK_FALSE(contains(r.out, "non-finite"));
}
