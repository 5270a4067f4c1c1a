// cuBLAS, cuBLASLt and NVRTC, opened on first use instead of linked.
//
// Linking libcublas makes every program that loads libvolt map and relocate
// about 200 MB of it at start (measured: an empty program linked with it has
// a peak RSS of 212 MB, 1 MB without), GPU or not, CUDA used or not.  So
// volt links the CUDA runtime only and opens these two libraries (dlopen) the
// first time a GPU matmul or a kernel compile needs them.
//
//   VOLT_CUBLAS_CHECK(cublas().cublasSgemm(h, ...));   // the library's own names and types
//
// A function already in the process (a program linked with the library, or a
// preloaded stand-in such as tests/cudasim) is used as it is.  A library that
// cannot be opened is a volt::Error naming it and what dlopen said.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <nvrtc.h>

namespace volt::cuda {

#define VOLT_CUBLAS_FUNCTIONS(X)                                                                      \
  X(cublasCreate_v2) X(cublasSetStream_v2) X(cublasSetWorkspace_v2) X(cublasSetMathMode)             \
  X(cublasGetStatusName) X(cublasGetStatusString) X(cublasSgemm_v2) X(cublasDgemm_v2)                \
  X(cublasSgemmStridedBatched) X(cublasDgemmStridedBatched)

// cuBLASLt: the GEMMs whose epilogue adds a bias (tensor/cuda/matmul_lt.cpp).
#define VOLT_CUBLASLT_FUNCTIONS(X)                                                                    \
  X(cublasLtCreate) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)                          \
  X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)      \
  X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                                \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)

#define VOLT_NVRTC_FUNCTIONS(X)                                                                       \
  X(nvrtcGetErrorString) X(nvrtcVersion) X(nvrtcGetNumSupportedArchs) X(nvrtcGetSupportedArchs)      \
  X(nvrtcCreateProgram) X(nvrtcDestroyProgram) X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize)      \
  X(nvrtcGetProgramLog) X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN) X(nvrtcGetPTXSize) X(nvrtcGetPTX)

#define VOLT_LIBRARY_MEMBER(f) decltype(&::f) f = nullptr;
// Members named as the functions, so that cublas_v2.h's macros
// (cublasSgemm -> cublasSgemm_v2) work on them too.
struct CublasApi {
  VOLT_CUBLAS_FUNCTIONS(VOLT_LIBRARY_MEMBER)
  // The two Ex GEMMs are overloaded in C++ (a wrapper taking the old
  // cudaDataType compute type): the C functions' types spelled out.
  cublasStatus_t (*cublasGemmEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                 const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                 cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  cublasStatus_t (*cublasGemmStridedBatchedEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                               const void*, const void*, cudaDataType, int, long long, const void*,
                                               cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                               long long, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
};
struct CublasLtApi {
  VOLT_CUBLASLT_FUNCTIONS(VOLT_LIBRARY_MEMBER)
};
struct NvrtcApi {
  VOLT_NVRTC_FUNCTIONS(VOLT_LIBRARY_MEMBER)
};
#undef VOLT_LIBRARY_MEMBER

// Opened once; throws volt::Error when the library or a function is missing.
const CublasApi& cublas();
// cuBLASLt is optional: null when it cannot be opened or lacks a function
// (GEMMs then take cuBLAS's plain path), or when VOLT_CUBLASLT=0.
const CublasLtApi* cublas_lt();
const NvrtcApi& nvrtc();

}  // namespace volt::cuda
