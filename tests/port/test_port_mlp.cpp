// The volt port of a LibTorch MLP program (tests/port/volt/mlp.cpp), built here
// as it is and run: it trains, saves, loads and returns 0 only when the loss
// fell and the reloaded model gives the same logits.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#define main port_mlp_main
#include "port/volt/mlp.cpp"
#undef main

#include "data/idx_files.h"

TEST_CASE("the volt port of the LibTorch MLP trains, saves and reloads") {
  volt::test::TempDir dir;
  std::string steps = "150", path = dir / "mlp.safetensors";
  std::vector<char*> argv{const_cast<char*>("mlp"), steps.data(), path.data(), nullptr};
  CHECK(port_mlp_main(3, argv.data()) == 0);
  CHECK(std::filesystem::exists(path));
}
