#include <volt/tensor/cuda/libraries.h>

#include <dlfcn.h>

#include <cstdlib>

#include <initializer_list>
#include <string>
#include <vector>

#include <volt/tensor/error.h>

namespace volt::cuda {
namespace {

// One library: its functions from the process when there, else from the file.
class Library {
 public:
  Library(const char* what, std::initializer_list<const char*> files)
      : what_(what), files_(files.begin(), files.end()) {}

  template <class F>
  void get(F& f, const char* name) {
    void* p = dlsym(RTLD_DEFAULT, name);
    if (p == nullptr) p = dlsym(open(), name);
    VOLT_CHECK(p != nullptr, "cuda", what_ << " has no function " << name << " (" << opened_ << ")");
    f = reinterpret_cast<F>(p);
  }

 private:
  void* open() {
    if (handle_ != nullptr) return handle_;
    std::string tried;
    for (const std::string& file : files_) {
      if (file.empty()) continue;
      handle_ = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle_ != nullptr) {
        opened_ = file;
        return handle_;
      }
      const char* why = dlerror();
      tried += std::string(tried.empty() ? "" : "; ") + (why ? std::string(why) : file);
    }
    VOLT_FAIL("cuda", "cannot open " << what_ << ", which a CUDA build needs on the GPU: " << tried);
  }

  const char* what_;
  std::vector<std::string> files_;  // copied: an initializer list's array dies with its expression
  void* handle_ = nullptr;
  std::string opened_ = "found in the process";
};

}  // namespace

// The library's soname for this toolkit, then the file the build found.
const CublasApi& cublas() {
  static const CublasApi api = [] {
    CublasApi a;
    Library lib("cuBLAS", {VOLT_CUBLAS_SONAME, VOLT_CUBLAS_FILE});
#define VOLT_RESOLVE(f) lib.get(a.f, #f);
    VOLT_CUBLAS_FUNCTIONS(VOLT_RESOLVE)
    VOLT_RESOLVE(cublasGemmEx)
    VOLT_RESOLVE(cublasGemmStridedBatchedEx)
    return a;
  }();
  return api;
}

// The toolkit's cuBLASLt sits beside its cuBLAS: the same names with "Lt".
std::string lt_name(std::string f) {
  const size_t at = f.rfind("libcublas");
  if (at != std::string::npos) f.insert(at + 9, "Lt");
  return f;
}

const CublasLtApi* cublas_lt() {
  static const CublasLtApi* api = []() -> const CublasLtApi* {
    const char* e = std::getenv("VOLT_CUBLASLT");
    if (e && std::string(e) == "0") return nullptr;
    static CublasLtApi a;
    try {
      const std::string soname = lt_name(VOLT_CUBLAS_SONAME), file = lt_name(VOLT_CUBLAS_FILE);
      Library lib("cuBLASLt", {soname.c_str(), file.c_str()});
      VOLT_CUBLASLT_FUNCTIONS(VOLT_RESOLVE)
    } catch (const Error&) {
      return nullptr;  // optional: the plain cuBLAS path serves
    }
    return &a;
  }();
  return api;
}

const NvrtcApi& nvrtc() {
  static const NvrtcApi api = [] {
    NvrtcApi a;
    Library lib("NVRTC", {VOLT_NVRTC_SONAME, VOLT_NVRTC_FILE});
    VOLT_NVRTC_FUNCTIONS(VOLT_RESOLVE)
#undef VOLT_RESOLVE
    return a;
  }();
  return api;
}

}  // namespace volt::cuda
