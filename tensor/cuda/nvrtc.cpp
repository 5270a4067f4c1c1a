#include <volt/tensor/cuda/nvrtc.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include <xxhash.h>

#include <volt/tensor/cuda/libraries.h>
#include <volt/tensor/cuda/runtime.h>
#include <volt/half_source.h>
#include <volt/math_functions_source.h>
#include <volt/philox_source.h>
#include <volt/tensor/log.h>
#include <volt/tensor/private_files.h>

namespace volt::cuda {

namespace {

const char* kPrelude = R"volt(// volt CUDA prelude
#define VOLT_HD __device__
// Eager kernels: element offsets of up to 4 operands (the output first) of an
// up-to-8-dimensional broadcast, strided iteration.
struct volt_index {
  int ndim;
  long long size[8];
  long long stride[4][8];
};
static_assert(sizeof(volt_index) == 328, "volt_index must match the host's Index (tensor/cuda/backend.cpp)");
// Integer powers exactly, by squaring (CUDA's double pow may land one ulp
// under an exact integer, which the cast to an integer type then truncates).
// A negative exponent goes through double, as on the CPU: 1 and -1 stay
// exact, any other base gives a fraction whose cast is 0.
__device__ inline long long volt_ipow(long long a, long long b) {
  if (b < 0) return (long long)pow((double)a, (double)b);
  unsigned long long r = 1, x = (unsigned long long)a;
  for (unsigned long long e = (unsigned long long)b; e; e >>= 1, x *= x)
    if (e & 1) r *= x;
  return (long long)r;
}
__device__ inline void volt_offsets(const volt_index& ix, long long i, long long* off, int k) {
  for (int j = 0; j < k; ++j) off[j] = 0;
  for (int d = ix.ndim - 1; d >= 0; --d) {
    long long idx = i % ix.size[d];
    i /= ix.size[d];
    for (int j = 0; j < k; ++j) off[j] += idx * ix.stride[j][d];
  }
}
)volt";

uint64_t hash_text(const std::string& s) { return XXH3_64bits(s.data(), s.size()); }

// The host kernel cache's directory (jit/kernel_cache.h), used only when it
// is private to this user (tensor/private_files.h); else a mkdtemp directory
// of this process, said once.
std::filesystem::path cache_dir() {
  namespace fs = std::filesystem;
  const char* e = std::getenv("VOLT_KERNEL_CACHE");
  const char* home = std::getenv("HOME");
  const fs::path dir = e && *e ? fs::path(e) : fs::path(home && *home ? home : "/tmp") / ".cache/volt/kernels";
  std::string why;
  if (private_dir(dir, &why)) return dir;
  static const fs::path own = make_private_temp_dir(fs::temp_directory_path(), "volt-cuda-kernels-");
  static bool told = false;
  if (!told) std::cerr << "volt: the CUDA kernel cache directory " << dir << " " << why << "; using " << own << "\n";
  told = true;
  return own;
}

// Stores `bytes` at `file` through a fresh temporary name (mkstemp, no link
// followed) renamed into place; a failure only means the entry is not kept.
void store_file(const std::filesystem::path& file, const std::string& bytes) { write_file_replacing(file, bytes); }

struct Compiled {
  std::string code;  // CUBIN or PTX text
  std::string log;
};

// One NVRTC run; `get_cubin` asks for SASS (arch "sm_90"), else PTX ("compute_90").
Compiled run_nvrtc(const std::string& source, const std::string& arch, bool get_cubin, bool fast = false) {
  nvrtcProgram prog;
  VOLT_NVRTC_CHECK(nvrtc().nvrtcCreateProgram(&prog, source.c_str(), "volt_kernel.cu", 0, nullptr, nullptr));
  std::string arch_opt = "--gpu-architecture=" + arch;
  // --fmad=false: the CPU is built with -ffp-contract=off, so both devices round alike.
  const char* opts[] = {arch_opt.c_str(), "--std=c++17", "--fmad=false", "-default-device", "-Ofc=max"};
  nvrtcResult r = nvrtc().nvrtcCompileProgram(prog, fast ? 5 : 4, opts);
  Compiled c;
  size_t log_size = 0;
  nvrtc().nvrtcGetProgramLogSize(prog, &log_size);
  if (log_size > 1) {
    c.log.resize(log_size);
    nvrtc().nvrtcGetProgramLog(prog, c.log.data());
    c.log.resize(log_size - 1);
  }
  if (r != NVRTC_SUCCESS) {
    nvrtc().nvrtcDestroyProgram(&prog);
    std::ostringstream os;
    os << "NVRTC could not compile a generated kernel for " << arch << ": " << nvrtc().nvrtcGetErrorString(r) << "\n"
       << c.log << "\n--- source ---\n"
       << numbered(source);
    throw Error(os.str());
  }
  size_t size = 0;
  if (get_cubin) {
    VOLT_NVRTC_CHECK(nvrtc().nvrtcGetCUBINSize(prog, &size));
    c.code.resize(size);
    VOLT_NVRTC_CHECK(nvrtc().nvrtcGetCUBIN(prog, c.code.data()));
  } else {
    VOLT_NVRTC_CHECK(nvrtc().nvrtcGetPTXSize(prog, &size));
    c.code.resize(size);
    VOLT_NVRTC_CHECK(nvrtc().nvrtcGetPTX(prog, c.code.data()));
  }
  nvrtc().nvrtcDestroyProgram(&prog);
  return c;
}

// Whether this NVRTC can emit SASS for sm_<cc> (a GPU newer than the toolkit cannot).
bool nvrtc_knows(int cc) {
  int n = 0;
  try {
    if (nvrtc().nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS) return false;
  } catch (const Error&) {
    return false;  // no NVRTC to open
  }
  std::vector<int> archs(static_cast<size_t>(n));
  nvrtc().nvrtcGetSupportedArchs(archs.data());
  for (int a : archs)
    if (a == cc) return true;
  return false;
}

std::mutex g_mutex;
CompileCounters g_counters;
std::unordered_map<std::string, cudaLibrary_t> g_libraries;  // key -> loaded library
std::unordered_map<cudaKernel_t, std::string> g_kernel_names;  // for messages after a kernel failed

}  // namespace

const std::string& prelude() {
  static const std::string p = std::string(kMathFunctionsSource) + "\n" + kPrelude + kPhiloxSource + "\n" + kHalfSource + "\n";
  return p;
}

std::string numbered(const std::string& source) {
  std::istringstream is(source);
  std::ostringstream os;
  std::string line;
  for (int n = 1; std::getline(is, line); ++n) {
    std::string num = std::to_string(n);
    os << std::string(num.size() < 4 ? 4 - num.size() : 0, ' ') << num << "  " << line << "\n";
  }
  return os.str();
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  VOLT_NVRTC_CHECK(nvrtc().nvrtcVersion(&major, &minor));
  return "NVRTC " + std::to_string(major) + "." + std::to_string(minor);
}

std::string compile_ptx(const std::string& source, const std::string& arch, bool fast_compile) {
  return run_nvrtc(source, arch, false, fast_compile).code;
}

CacheEntry cache_entry(const std::string& source, int cc) {
  CacheEntry c;
  c.sass = nvrtc_knows(cc);
  c.arch = (c.sass ? "sm_" : "compute_") + std::to_string(cc);
  std::ostringstream key;
  key << std::hex << hash_text(source) << "_" << c.arch << "_" << hash_text(nvrtc_version() + " volt " VOLT_VERSION);
  c.key = key.str();
  c.file = "cuda_" + c.key + (c.sass ? ".cubin" : ".ptx");
  return c;
}

namespace {

uint64_t read_le(const std::string& b, size_t at, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; ++i) v |= uint64_t(static_cast<unsigned char>(b[at + i])) << (8 * i);
  return v;
}

}  // namespace

bool loadable_image(const std::string& image) {
  if (image.empty()) return false;
  // A fatbin promises sizes in its header; volt never writes one.
  if (image.size() >= 4 && read_le(image, 0, 4) == 0xBA55ED50u) return false;
  const std::string elf("\x7f" "ELF");
  // (a file cut inside the magic is a damaged ELF image too)
  if (elf.compare(0, std::min(image.size(), elf.size()), image, 0, elf.size()) != 0)
    return true;  // text (PTX; the simulator's images): the string's own NUL ends it
  // A 64-bit little-endian ELF whose header, program and section tables lie inside it.
  if (image.size() < 64 || image[4] != 2 || image[5] != 1) return false;
  const uint64_t phoff = read_le(image, 0x20, 8), shoff = read_le(image, 0x28, 8);
  const uint64_t phsize = read_le(image, 0x36, 2) * read_le(image, 0x38, 2);
  const uint64_t shsize = read_le(image, 0x3A, 2) * read_le(image, 0x3C, 2);
  const uint64_t n = image.size();
  return phoff <= n && phsize <= n - phoff && shoff <= n && shsize <= n - shoff;
}

void precompile(const std::string& source, int cc, const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  const CacheEntry c = cache_entry(source, cc);
  const fs::path file = dir / c.file;
  std::error_code ec;
  if (fs::exists(fs::symlink_status(file, ec))) return;
  const std::string code = run_nvrtc(source, c.arch, c.sass).code;
  std::string why;
  VOLT_CHECK(private_dir(dir, &why), "nvrtc", "the kernel cache directory " << dir.string() << " " << why);
  store_file(file, code);
  VOLT_CHECK(fs::is_regular_file(fs::symlink_status(file, ec)), "nvrtc",
             "could not write the kernel cache file " << file.string());
  store_file(dir / ("cuda_" + c.key + ".cu"), source);
}

cudaKernel_t get_kernel(const std::string& source, const std::string& name, int device) {
  const CacheEntry entry = cache_entry(source, compute_capability(device));
  const bool sass = entry.sass;
  const std::string& arch = entry.arch;
  std::ostringstream key;
  key << entry.key;

  std::lock_guard<std::mutex> lock(g_mutex);
  cudaLibrary_t lib = nullptr;
  if (auto it = g_libraries.find(key.str()); it != g_libraries.end()) {
    ++g_counters.memory_hits;
    lib = it->second;
  } else {
    namespace fs = std::filesystem;
    fs::path dir = cache_dir();
    fs::path file = dir / entry.file;
    auto compile_and_store = [&] {
      auto t0 = std::chrono::steady_clock::now();
      std::string code = run_nvrtc(source, arch, sass).code;
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      g_counters.compile_ms += ms;
      ++g_counters.compiled;
      // VOLT_LOG=cuda names each NVRTC compile; cuda-source adds the source.
      if (log_enabled("cuda") || log_enabled("cuda-source")) {
        std::cerr << "volt.cuda: NVRTC compiled " << name << " for " << arch << " in " << ms << " ms\n";
        if (log_enabled("cuda-source")) std::cerr << numbered(source);
      }
      // Renamed into place: readers see the whole file or none.
      store_file(file, code);
      // The source beside it, for reading and debugging.
      store_file(dir / ("cuda_" + key.str() + ".cu"), source);
      return code;
    };
    DeviceGuard g(device);
    std::string code;
    // Only a regular file of this user, never through a link; anything else
    // there is compiled afresh (and replaced).
    if (!read_own_file(file, &code)) code.clear();
    bool loaded = false;
    if (!code.empty() && loadable_image(code)) {
      // A damaged entry (a disk error, another volt's file) is compiled again.
      loaded = cudaLibraryLoadData(&lib, code.data(), nullptr, nullptr, 0, nullptr, nullptr, 0) == cudaSuccess;
      if (loaded) ++g_counters.disk_hits;
      else cudaGetLastError();
    }
    if (!loaded) {
      code = compile_and_store();
      VOLT_CUDA_CHECK(cudaLibraryLoadData(&lib, code.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
    }
    g_libraries[key.str()] = lib;
  }
  cudaKernel_t k = nullptr;
  cudaError_t e = cudaLibraryGetKernel(&k, lib, name.c_str());
  if (e != cudaSuccess) {
    cudaGetLastError();
    VOLT_FAIL("nvrtc", "the compiled source has no kernel named '" << name << "' (" << cudaGetErrorString(e)
                                                                    << ")\n--- source ---\n"
                                                                    << numbered(source));
  }
  g_kernel_names.try_emplace(k, name);
  return k;
}

CompileCounters compile_counters() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_counters;
}

void launch(cudaKernel_t k, int device, long long n, void** args, unsigned block) {
  if (n <= 0) return;
  long long blocks = (n + block - 1) / block;
  // A few waves of the GPU; kernels loop over the rest.
  long long cap = static_cast<long long>(multiprocessor_count(device)) * 32;
  if (blocks > cap) blocks = cap;
  launch(k, device, dim3(static_cast<unsigned>(blocks)), dim3(block), args, 0);
}

void launch(cudaKernel_t k, int device, dim3 grid, dim3 block, void** args, size_t shared_bytes) {
  DeviceGuard g(device);
  count_kernel_launch();
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_kernel_names.find(k);
    note_kernel_launch(it == g_kernel_names.end() ? nullptr : &it->second);
  }
  VOLT_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(k), grid, block, args, shared_bytes, stream(device)));
}

}  // namespace volt::cuda
