// Fills a kernel cache for a GPU that is not here: every kernel source found
// in SOURCES (the cuda_*.cu files a cache keeps beside its images) is compiled
// by NVRTC for compute capability CC into CACHE, under the name get_kernel
// looks for there.  NVRTC needs no GPU, so a machine with the toolkit packs a
// warm cache for a GPU node (tests/gpu/pack.sh), or the node fills its own
// on all cores before the first test (tests/gpu/check.sh).
//
//   precompile_kernels SOURCES CACHE CC [THREADS]
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <volt/tensor/cuda/nvrtc.h>
#include <volt/tensor/error.h>

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc < 4 || argc > 5) {
    std::cerr << "usage: precompile_kernels SOURCES CACHE CC [THREADS]\n";
    return 2;
  }
  const fs::path sources = argv[1], cache = argv[2];
  int cc = 0, threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  try {
    cc = std::stoi(argv[3]);
    if (argc == 5) threads = std::max(1, std::stoi(argv[4]));
  } catch (const std::exception&) {
    std::cerr << "precompile_kernels: CC and THREADS are numbers (CC: 90 for sm_90)\n";
    return 2;
  }
  std::error_code ec;
  if (!fs::is_directory(sources, ec)) {
    std::cerr << "precompile_kernels: " << sources << " is not a folder\n";
    return 2;
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(sources))
    if (e.path().extension() == ".cu" && e.path().filename().string().rfind("cuda_", 0) == 0) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::atomic<size_t> next{0}, done{0}, failed{0};
  std::mutex said;
  auto work = [&] {
    for (size_t i = next++; i < files.size(); i = next++) {
      std::ifstream in(files[i]);
      std::ostringstream ss;
      ss << in.rdbuf();
      try {
        volt::cuda::precompile(ss.str(), cc, cache);
        ++done;
      } catch (const std::exception& e) {
        ++failed;
        std::lock_guard<std::mutex> lock(said);
        std::cerr << "precompile_kernels: " << files[i].filename().string() << ": " << e.what() << "\n";
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work);
  for (std::thread& t : pool) t.join();
  std::cout << "precompile_kernels: " << done << " of " << files.size() << " kernels for sm_" << cc << " in "
            << cache.string() << " (" << volt::cuda::nvrtc_version() << ")" << (failed ? ", some failed" : "") << "\n";
  return failed ? 1 : 0;
}
