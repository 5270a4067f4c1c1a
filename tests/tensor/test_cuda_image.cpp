// The kernel cache hands a file's bytes to cudaLibraryLoadData, which takes no
// length: a damaged image (a header that promises more than the file holds)
// must be refused, not read past its end.  Runs on a GPU and on tests/cudasim.
#include <doctest/doctest.h>

#ifdef VOLT_WITH_CUDA
#include <cuda_runtime_api.h>

#include <string>

#include <volt/tensor/cuda/runtime.h>

TEST_CASE("cuda: a damaged kernel image is refused, not read past its end") {
  if (!volt::cuda::is_available()) {
    MESSAGE("skipped: no CUDA GPU or driver on this machine");
    return;
  }
  // The simulator's own header promising 100000 bytes, then 4; the header of
  // a real CUBIN alone; and nothing.
  const std::string images[] = {std::string("cudasim 100000 0\n7f454c46"), std::string("\x7f" "ELF\x02\x01\x01", 7),
                                std::string()};
  for (const std::string& img : images) {
    cudaLibrary_t lib = nullptr;
    CHECK(cudaLibraryLoadData(&lib, img.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0) != cudaSuccess);
    cudaGetLastError();
  }
}
#endif
