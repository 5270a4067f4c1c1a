#include <volt/tensor/cuda/runtime.h>

#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cstring>
#include <iostream>
#include <mutex>
#include <vector>

#include <volt/tensor/cuda/libraries.h>

namespace volt::cuda {

namespace {
std::atomic<const std::string*> g_last_kernel{nullptr};
}  // namespace

void note_kernel_launch(const std::string* name) { g_last_kernel.store(name, std::memory_order_relaxed); }

std::string last_kernel_launched() {
  const std::string* n = g_last_kernel.load(std::memory_order_relaxed);
  return n ? *n : std::string();
}

bool is_sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorIllegalInstruction:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

std::string sticky_note(cudaError_t e) {
  if (!is_sticky(e)) return {};
  std::string k = last_kernel_launched();
  return std::string("; a kernel failed before this call (the error is sticky: this process can no longer use the "
                     "GPU)") +
         (k.empty() ? "" : ", the last kernel launched was " + k);
}

void fail_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  cudaGetLastError();  // clear a sticky non-fatal error so the next call is not blamed for it
  std::ostringstream os;
  os << "CUDA error " << cudaGetErrorName(e) << " (" << cudaGetErrorString(e) << ") in " << expr << " at "
     << file << ":" << line << sticky_note(e);
  throw Error(os.str());
}

void fail_cublas(cublasStatus_t s, const char* expr, const char* file, int line) {
  std::ostringstream os;
  os << "cuBLAS error " << cublas().cublasGetStatusName(s) << " (" << cublas().cublasGetStatusString(s) << ") in " << expr
     << " at " << file << ":" << line;
  throw Error(os.str());
}

void fail_nvrtc(nvrtcResult r, const char* expr, const char* file, int line) {
  std::ostringstream os;
  os << "NVRTC error " << nvrtc().nvrtcGetErrorString(r) << " in " << expr << " at " << file << ":" << line;
  throw Error(os.str());
}

namespace {

constexpr int kMaxDevices = 16;

struct PerDevice {
  std::once_flag once;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  int cc = 0, sms = 0;
  long long* error_host = nullptr;    // the error word, in mapped pinned host memory
  long long* error_device = nullptr;  // the same memory as the device addresses it
  void* cublas_workspace = nullptr;
  std::atomic<bool> ready{false};  // set up (is_initialized)
};

// cuBLAS's advice for Hopper (32 MiB); older GPUs need less.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

std::array<PerDevice, kMaxDevices>& devices() {
  static std::array<PerDevice, kMaxDevices> d;
  return d;
}

bool g_allow_tf32 = false;

// Sets up a device's stream and cuBLAS handle the first time it is used.
// cuBLAS's math: TF32 only when asked for, and never a split-k sum kept in a
// 16-bit output's type (its default allows that: on an H200 small bf16 GEMMs
// were 4 units from f64 with it); the sums stay f32, as volt's GEMMs promise.
cublasMath_t math_mode(bool tf32) {
  return static_cast<cublasMath_t>((tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) |
                                   CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
}

PerDevice& per_device(int index) {
  VOLT_CHECK(index >= 0 && index < device_count() && index < kMaxDevices, "cuda",
             "device cuda:" << index << " does not exist (" << device_count() << " CUDA devices)");
  PerDevice& d = devices()[index];
  std::call_once(d.once, [&] {
    DeviceGuard g(index);
    VOLT_CUDA_CHECK(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking));
    VOLT_CUBLAS_CHECK(cublas().cublasCreate(&d.cublas));
    VOLT_CUBLAS_CHECK(cublas().cublasSetStream(d.cublas, d.stream));
    VOLT_CUBLAS_CHECK(cublas().cublasSetMathMode(d.cublas, math_mode(g_allow_tf32)));
    // A workspace of cuBLAS's own, given once: a GEMM recorded into a CUDA
    // graph must not ask for memory while the graph is captured.
    VOLT_CUDA_CHECK(cudaMalloc(&d.cublas_workspace, kCublasWorkspaceBytes));
    VOLT_CUBLAS_CHECK(cublas().cublasSetWorkspace(d.cublas, d.cublas_workspace, kCublasWorkspaceBytes));
    int major = 0, minor = 0;
    VOLT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index));
    VOLT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index));
    VOLT_CUDA_CHECK(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, index));
    d.cc = major * 10 + minor;
    d.ready.store(true);
  });
  return d;
}

}  // namespace

namespace {

// cudaGetDeviceCount's answer, asked once.  No driver or no device means none,
// quietly; any other error (a driver that is there but refuses) also means
// none, but is kept and said once, so a machine with a GPU never passes its
// CUDA tests as skips without a word.
struct CountAnswer {
  int count = 0;
  cudaError_t error = cudaSuccess;
};

const CountAnswer& count_answer() {
  static const CountAnswer a = [] {
    CountAnswer r;
    r.error = cudaGetDeviceCount(&r.count);
    if (r.error != cudaSuccess) {
      cudaGetLastError();
      r.count = 0;
      if (r.error != cudaErrorNoDevice && r.error != cudaErrorInsufficientDriver)
        std::cerr << "volt: CUDA is not usable, cudaGetDeviceCount said " << cudaGetErrorName(r.error) << " ("
                  << cudaGetErrorString(r.error) << "); running without a GPU\n";
    }
    return r;
  }();
  return a;
}

}  // namespace

int device_count() { return count_answer().count; }

bool is_simulated() { return ::dlsym(RTLD_DEFAULT, "volt_cudasim_counters") != nullptr; }

std::string describe_devices() {
  const CountAnswer& a = count_answer();
  std::ostringstream os;
  if (a.error != cudaSuccess) {
    os << "no CUDA device: cudaGetDeviceCount said " << cudaGetErrorName(a.error) << " (" << cudaGetErrorString(a.error)
       << ")";
    return os.str();
  }
  if (is_simulated()) os << "simulated GPU (tests/cudasim), ";
  os << a.count << " CUDA device" << (a.count == 1 ? "" : "s");
  for (int i = 0; i < a.count; ++i) {
    os << (i ? "; " : ": ") << "cuda:" << i << " ";
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) == cudaSuccess) {
      os << p.name << " (sm_" << p.major << p.minor << ", " << p.multiProcessorCount << " SMs, "
         << (p.totalGlobalMem >> 20) << " MiB)";
      continue;
    }
    cudaGetLastError();  // (the simulator answers attributes only)
    int major = 0, minor = 0, sms = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, i);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, i);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, i);
    cudaGetLastError();
    os << "(sm_" << major << minor << ", " << sms << " SMs)";
  }
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess && cudaRuntimeGetVersion(&runtime) == cudaSuccess)
    os << "; driver API " << driver / 1000 << "." << driver % 1000 / 10 << ", runtime " << runtime / 1000 << "."
       << runtime % 1000 / 10;
  else
    cudaGetLastError();
  return os.str();
}

bool is_available() { return device_count() > 0; }

DeviceGuard::DeviceGuard(int index) {
  VOLT_CUDA_CHECK(cudaGetDevice(&prev_));
  if (prev_ != index) VOLT_CUDA_CHECK(cudaSetDevice(index));
}
DeviceGuard::~DeviceGuard() {
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur != prev_ && prev_ >= 0) cudaSetDevice(prev_);
}

cudaStream_t stream(int device) { return per_device(device).stream; }
cublasHandle_t cublas_handle(int device) { return per_device(device).cublas; }
void* cublas_workspace(int device, size_t* bytes) {
  *bytes = kCublasWorkspaceBytes;
  return per_device(device).cublas_workspace;
}
int compute_capability(int device) { return per_device(device).cc; }
bool is_initialized(int device) {
  return device >= 0 && device < kMaxDevices && devices()[device].ready.load();
}
int multiprocessor_count(int device) { return per_device(device).sms; }

long long* error_word(int device) {
  PerDevice& d = per_device(device);
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (!d.error_device) {
    DeviceGuard g(device);
    void* host = nullptr;
    void* dev = nullptr;
    VOLT_CUDA_CHECK(cudaHostAlloc(&host, 4 * sizeof(long long), cudaHostAllocMapped));
    std::memset(host, 0, 4 * sizeof(long long));
    VOLT_CUDA_CHECK(cudaHostGetDevicePointer(&dev, host, 0));
    d.error_host = static_cast<long long*>(host);
    d.error_device = static_cast<long long*>(dev);
  }
  return d.error_device;
}

void check_kernel_errors(int device) {
  PerDevice& d = per_device(device);
  if (!d.error_host) return;
  volatile long long* w = d.error_host;
  if (w[0] == 0) return;
  const long long kind = w[0], value = w[1], classes = w[2];
  w[0] = 0;
  w[1] = 0;
  w[2] = 0;
  VOLT_CHECK(kind != 1, "cross_entropy",
             "target values must lie in [0, " << classes << "), got " << value << " (found by a kernel on cuda:"
                                              << device << ", reported at the first synchronisation after it)");
  VOLT_CHECK(kind != 2, "embedding",
             "index out of range: indices must lie in [0, " << classes << "), got " << value
                                                             << " (found by a kernel on cuda:" << device
                                                             << ", reported at the first synchronisation after it)");
  VOLT_FAIL("cuda", "a kernel on cuda:" << device << " recorded error " << kind);
}

void synchronize(int device) {
  VOLT_CUDA_CHECK(cudaStreamSynchronize(stream(device)));
  check_kernel_errors(device);
}

void set_allow_tf32(bool on) {
  g_allow_tf32 = on;
  for (int i = 0; i < device_count() && i < kMaxDevices; ++i)
    if (devices()[i].cublas)
      VOLT_CUBLAS_CHECK(cublas().cublasSetMathMode(devices()[i].cublas, math_mode(on)));
}
bool allow_tf32() { return g_allow_tf32; }

void check_device(const Device& d, const char* op) {
  VOLT_CHECK(d.is_cuda(), op, "expected a CUDA tensor, got device " << d.str());
  VOLT_CHECK(d.index >= 0 && d.index < device_count(), op,
             "device " << d.str() << " does not exist (" << device_count() << " CUDA devices on this machine)");
}

namespace {
std::atomic<int64_t> g_kernel_launches{0}, g_cublas_calls{0};
}  // namespace

void count_kernel_launch() { g_kernel_launches.fetch_add(1, std::memory_order_relaxed); }
void count_cublas_call() { g_cublas_calls.fetch_add(1, std::memory_order_relaxed); }
LaunchCounts launch_counts() { return {g_kernel_launches.load(), g_cublas_calls.load()}; }

}  // namespace volt::cuda
