// The volt port of a LibTorch MNIST CNN (tests/port/volt/mnist_cnn.cpp), built
// here as it is, trained for a few batches on a small synthetic MNIST; and the
// check that the port is the LibTorch program renamed (check_renames.sh).
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#define main port_mnist_cnn_main
#include "port/volt/mnist_cnn.cpp"
#undef main

#include "data/idx_files.h"

namespace {
// n images whose label decides which rows are bright, so a CNN can learn it.
void write_synthetic_mnist(const volt::test::TempDir& dir, const std::string& prefix, uint32_t n) {
  std::vector<uint8_t> pixels(static_cast<size_t>(n) * 784, 0), labels(n);
  for (uint32_t i = 0; i < n; ++i) {
    labels[i] = static_cast<uint8_t>(i % 10);
    for (uint32_t r = 2 * labels[i]; r < 2 * labels[i] + 8; ++r)
      for (uint32_t c = 4; c < 24; ++c) pixels[i * 784 + r * 28 + c] = static_cast<uint8_t>(200 + (i + c) % 50);
  }
  volt::test::write_raw(dir / (prefix + "-images-idx3-ubyte"), volt::test::idx_bytes({n, 28, 28}, pixels));
  volt::test::write_raw(dir / (prefix + "-labels-idx1-ubyte"), volt::test::idx_bytes({n}, labels));
}
}  // namespace

TEST_CASE("the volt port of the LibTorch MNIST CNN trains on a small MNIST") {
  volt::test::TempDir dir;
  write_synthetic_mnist(dir, "train", 256);
  write_synthetic_mnist(dir, "t10k", 100);
  std::string root = dir.path.string(), epochs = "2", batches = "4";
  std::vector<char*> argv{const_cast<char*>("mnist_cnn"), root.data(), epochs.data(), batches.data(), nullptr};
  CHECK(port_mnist_cnn_main(4, argv.data()) == 0);
  // Bad data is a volt::Error naming what is missing, not a crash.
  std::string nowhere = (dir.path / "nowhere").string();
  std::vector<char*> bad{const_cast<char*>("mnist_cnn"), nowhere.data(), epochs.data(), nullptr};
  CHECK_THROWS_AS(port_mnist_cnn_main(3, bad.data()), volt::Error);
}

TEST_CASE("each LibTorch program in tests/port/libtorch ports by the renames alone") {
  const std::string script = std::string(VOLT_SOURCE_DIR) + "/tests/port/check_renames.sh >/dev/null";
  CHECK(std::system(script.c_str()) == 0);
}
