// The kernel cache hands a file's bytes to cudaLibraryLoadData, which takes no
// length: a damaged image (a header that promises more than the file holds)
// must be refused by volt before the loader sees it, not read past its end.
#include <doctest/doctest.h>

#ifdef VOLT_WITH_CUDA
#include <cuda_runtime_api.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include <volt/tensor/cuda/nvrtc.h>
#include <volt/tensor/cuda/runtime.h>

namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("cuda: a damaged kernel image is refused, not read past its end") {
  // The header of a real CUBIN alone, a file cut inside the magic, a fatbin's
  // magic, and nothing: volt's own check refuses each (no GPU needed).
  CHECK_FALSE(volt::cuda::loadable_image(std::string("\x7f" "ELF\x02\x01\x01", 7)));
  CHECK_FALSE(volt::cuda::loadable_image(std::string("\x7f" "E", 2)));
  CHECK_FALSE(volt::cuda::loadable_image(std::string("\x50\xed\x55\xba\x01\x00", 6)));
  CHECK_FALSE(volt::cuda::loadable_image(std::string()));
  CHECK(volt::cuda::loadable_image(std::string(".version 8.0\n.target sm_90\n")));
  if (!volt::cuda::is_simulated()) {
    // A real CUBIN from NVRTC (no GPU needed) passes whole and fails cut short.
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("volt_image_" + std::to_string(::getpid()));
    const std::string src = "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] += 1.0f; }\n";
    volt::cuda::precompile(src, 90, dir);
    const volt::cuda::CacheEntry e = volt::cuda::cache_entry(src, 90);
    const std::string image = read_file(dir / e.file);
    fs::remove_all(dir);
    REQUIRE(e.sass);
    REQUIRE(image.size() > 64);
    CHECK(volt::cuda::loadable_image(image));
    CHECK_FALSE(volt::cuda::loadable_image(image.substr(0, 64)));
    CHECK_FALSE(volt::cuda::loadable_image(image.substr(0, image.size() / 2)));
  }
  if (!volt::cuda::is_available()) {
    MESSAGE("the loader itself is skipped: no CUDA GPU or driver on this machine");
    return;
  }
  if (volt::cuda::is_simulated()) {
    // The simulator's loader refuses its own header promising more than follows.
    cudaLibrary_t lib = nullptr;
    const std::string img("cudasim 100000 0\n7f454c46");
    CHECK(cudaLibraryLoadData(&lib, img.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0) != cudaSuccess);
    cudaGetLastError();
  }
}
#endif
