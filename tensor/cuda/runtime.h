// The CUDA runtime as volt uses it: checked calls, one stream per device, the
// cuBLAS handle.  Only cudart is linked (never libcuda), so a CUDA build starts
// on a machine without a driver and is_available() simply says false there.
//
//   if (volt::cuda::is_available()) {
//     auto x = volt::Tensor::rand({8, 784}, volt::DType::f32, volt::Device::cuda(0));
//     std::cout << x.sum();   // tensor(3141.5927, device='cuda:0')
//   }
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <sstream>
#include <string>

#include <volt/tensor/device.h>
#include <volt/tensor/error.h>

namespace volt::cuda {

[[noreturn]] void fail_cuda(cudaError_t e, const char* expr, const char* file, int line);
// Errors a failed kernel leaves behind: every later call returns them, so a
// message names them as an earlier kernel's, never as the call's own fault.
bool is_sticky(cudaError_t e);
// "" for other errors; else what happened and the last kernel launched.
std::string sticky_note(cudaError_t e);
// The name of the last kernel launched (launch() in nvrtc.h notes it).
void note_kernel_launch(const std::string* name);
std::string last_kernel_launched();
[[noreturn]] void fail_cublas(cublasStatus_t s, const char* expr, const char* file, int line);
[[noreturn]] void fail_nvrtc(nvrtcResult r, const char* expr, const char* file, int line);

// Each names the failing call, the file and line, and the library's own message.
#define VOLT_CUDA_CHECK(expr)                                                            \
  do {                                                                                   \
    cudaError_t volt_e_ = (expr);                                                        \
    if (volt_e_ != cudaSuccess) ::volt::cuda::fail_cuda(volt_e_, #expr, __FILE__, __LINE__); \
  } while (0)
#define VOLT_CUBLAS_CHECK(expr)                                                                  \
  do {                                                                                           \
    cublasStatus_t volt_s_ = (expr);                                                             \
    if (volt_s_ != CUBLAS_STATUS_SUCCESS) ::volt::cuda::fail_cublas(volt_s_, #expr, __FILE__, __LINE__); \
  } while (0)
#define VOLT_NVRTC_CHECK(expr)                                                                 \
  do {                                                                                         \
    nvrtcResult volt_r_ = (expr);                                                              \
    if (volt_r_ != NVRTC_SUCCESS) ::volt::cuda::fail_nvrtc(volt_r_, #expr, __FILE__, __LINE__); \
  } while (0)

// Makes `index` the current device for the scope (and checks it exists).
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

// The one stream of a device: every kernel, copy and GEMM on that device runs
// on it, in order, so the caching allocator may hand a freed block to the next
// request without waiting.
cudaStream_t stream(int device);
// Whether the CUDA runtime in this process is tests/cudasim's simulated GPU.
bool is_simulated();
// One line on the devices: each one's name, compute capability, multiprocessors
// and memory, driver and runtime versions; or why there is none.
std::string describe_devices();
// Waits for the device's stream, then reports any error a kernel recorded.
void synchronize(int device);

// The error word of a device: four long longs in host memory that kernels
// write (mapped, pinned) when they find bad input they cannot stop on, such as
// a class index out of range.  The GPU keeps going (the result is NaN) and
// check_kernel_errors(), called by synchronize(), turns the record into an
// exception that names the op, at the first synchronisation after the kernel.
// Word 0 is the kind (0: none, 1: cross_entropy's target, 2: embedding's index),
// 1 and 2 the details.
long long* error_word(int device);
void check_kernel_errors(int device);
// Whether volt has set the device up (its stream and cuBLAS handle exist).
bool is_initialized(int device);
// Compute capability as a number: 80 for sm_80, 90 for sm_90.
int compute_capability(int device);
int multiprocessor_count(int device);
cublasHandle_t cublas_handle(int device);
// The workspace given to the device's cuBLAS handle, also lent to cuBLASLt's
// GEMMs (tensor/cuda/matmul_lt.cpp): both run on the device's one stream.
void* cublas_workspace(int device, size_t* bytes);

// FP32 GEMMs use full FP32 by default; TF32 tensor cores only when asked.
void set_allow_tf32(bool on);
bool allow_tf32();

void check_device(const Device& d, const char* op);

// The work volt has queued on the GPUs since the process started: kernel
// launches (every kernel goes through launch() in nvrtc.h) and cuBLAS calls
// (one each, whatever cuBLAS launches inside).  Read around a training step,
// they say how many launches the step costs, the figure that bounds a small
// step's speed.
struct LaunchCounts {
  int64_t kernels = 0;
  int64_t cublas_calls = 0;
};
LaunchCounts launch_counts();
void count_kernel_launch();
void count_cublas_call();

}  // namespace volt::cuda
