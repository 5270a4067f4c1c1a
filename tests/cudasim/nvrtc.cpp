// cudasim: NVRTC.  A "compile" builds the CUDA C++ source with the host C++
// compiler, behind a shim that gives threadIdx, blockIdx, __syncthreads and
// __shared__ their meaning, into a shared library whose bytes are the "CUBIN".
#include "sim.h"

#include <volt/math_functions_source.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

namespace cudasim {

// The shim in front of every kernel source: CUDA's built-ins for one host
// thread, and per kernel an entry that copies the launch parameters (bind),
// runs one GPU thread (run) and frees the copy (release).
const char* const kKernelShim = R"sim(// cudasim kernel shim
#include <cmath>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
struct volt_sim_dim3 { unsigned x, y, z; };
extern "C" volt_sim_dim3 volt_sim_threadIdx, volt_sim_blockIdx, volt_sim_blockDim, volt_sim_gridDim;
extern "C" void volt_sim_syncthreads();
#define threadIdx volt_sim_threadIdx
#define blockIdx volt_sim_blockIdx
#define blockDim volt_sim_blockDim
#define gridDim volt_sim_gridDim
#define __syncthreads volt_sim_syncthreads
// The launch's parameter values, copied, and the kernel they are for.  The
// kernel is found by deduction, so a device function that shares its name
// (an overload with another signature) does not get in the way.
template <class... A> struct volt_sim_call {
  void (*f)(A...);
  std::tuple<std::decay_t<A>...> values;
  static void run(void* c) {
    auto* x = static_cast<volt_sim_call*>(c);
    std::apply(x->f, x->values);
  }
  static void release(void* c) { delete static_cast<volt_sim_call*>(c); }
};
template <class... A, std::size_t... I>
void* volt_sim_bind(void (*f)(A...), void** p, std::index_sequence<I...>) {
  return new volt_sim_call<A...>{f, {*static_cast<std::decay_t<A>*>(p[I])...}};
}
template <class... A>
void volt_sim_launch(void (*f)(A...), void** p, void** bound, void (**run)(void*), void (**release)(void*)) {
  *bound = volt_sim_bind(f, p, std::index_sequence_for<A...>{});
  *run = volt_sim_call<A...>::run;
  *release = volt_sim_call<A...>::release;
}
#define VOLT_SIM_EXPORT(name) extern "C" void volt_sim_entry_##name(void** p, void** bound, \
    void (**run)(void*), void (**release)(void*)) { volt_sim_launch(name, p, bound, run, release); }
)sim";

}  // namespace cudasim

using namespace cudasim;

namespace {

// VOLT_CXX, as for volt's CPU kernels, else the compiler this library was built with.
std::string host_compiler() {
  const char* cxx = std::getenv("VOLT_CXX");
  return cxx && *cxx ? cxx : VOLT_CUDASIM_CXX;
}

// Without this library's preload: the compiler is not a CUDA program, and an
// instrumented (sanitizer) build of it would fail the compiler's run.  The
// flags are the same for the prelude and every kernel, as a precompiled header needs.
std::string compiler_command(const std::string& cxx, const std::string& what, const std::string& log) {
  return "env -u LD_PRELOAD " + cxx + " -std=c++17 -O1 -ffp-contract=off -fno-math-errno -fPIC -w " + what + " > " +
         log + " 2>&1";
}

// The shim and the math functions are the same text in front of every kernel,
// and parsing them (the standard headers above all) was 40 % of a kernel's
// compile.  So they are written once per process and compiler as a header with
// its GCC precompiled form beside it (prelude.h.gch), which the compiler takes
// in place of the text when it fits, and ignores (reading the text) when not.
// Removed when the process that made them exits; a forked child reads them too.
struct Prelude {
  std::string dir;
  pid_t owner = 0;
  ~Prelude() {
    if (dir.empty() || ::getpid() != owner) return;
    for (const char* f : {"/prelude.h.gch", "/prelude.h", "/log.txt"}) std::remove((dir + f).c_str());
    ::rmdir(dir.c_str());
  }
};

std::string prelude_header(const std::string& cxx) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Prelude>> made;
  std::lock_guard<std::mutex> lock(mutex);
  auto& p = made[cxx];
  if (!p) {
    p = std::make_unique<Prelude>();
    char dir[] = "/tmp/volt_cudasim_prelude_XXXXXX";
    if (!::mkdtemp(dir)) return "";
    p->dir = dir;
    p->owner = ::getpid();
    std::ofstream(p->dir + "/prelude.h") << kKernelShim << volt::kMathFunctionsSource;
    const std::string header = p->dir + "/prelude.h";
    if (std::system(compiler_command(cxx, "-x c++-header -o " + header + ".gch " + header, p->dir + "/log.txt").c_str()) != 0)
      std::remove((header + ".gch").c_str());  // the text alone still serves
  }
  return p->dir.empty() ? "" : p->dir + "/prelude.h";
}

}  // namespace

struct _nvrtcProgram {
  std::string source, name, log, image;
};

extern "C" {

const char* nvrtcGetErrorString(nvrtcResult r) {
  switch (r) {
    case NVRTC_SUCCESS: return "NVRTC_SUCCESS";
    case NVRTC_ERROR_INVALID_INPUT: return "NVRTC_ERROR_INVALID_INPUT";
    case NVRTC_ERROR_INVALID_PROGRAM: return "NVRTC_ERROR_INVALID_PROGRAM";
    case NVRTC_ERROR_COMPILATION: return "NVRTC_ERROR_COMPILATION";
    default: return "NVRTC_ERROR_INTERNAL_ERROR";
  }
}

// Version 0.h, h a hash of the kernel shim and the math functions: volt's kernel cache keys on this,
// so a real NVRTC's entries and those of an older shim are never loaded.
nvrtcResult nvrtcVersion(int* major, int* minor) {
  unsigned h = 2166136261u;
  for (const char* text : {kKernelShim, volt::kMathFunctionsSource})
    for (const char* c = text; *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 16777619u;
  *major = 0;
  *minor = static_cast<int>(h % 1000000);
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetNumSupportedArchs(int* n) {
  *n = 1;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetSupportedArchs(int* archs) {
  archs[0] = 90;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcCreateProgram(nvrtcProgram* prog, const char* src, const char* name, int num_headers, const char* const*,
                               const char* const*) {
  if (!prog || !src || num_headers != 0) return NVRTC_ERROR_INVALID_INPUT;
  *prog = new _nvrtcProgram{src, name ? name : "default_program", "", ""};
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram* prog) {
  if (!prog || !*prog) return NVRTC_ERROR_INVALID_PROGRAM;
  delete *prog;
  *prog = nullptr;
  return NVRTC_SUCCESS;
}

// Builds the source with the host compiler into a shared library.
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int, const char* const*) {
  if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
  // The kernels: extern "C" __global__ functions, also those declared through a
  // macro whose first argument is the name (VOLT_KERNEL(name)).
  std::set<std::string> names;
  std::vector<std::string> order;
  std::istringstream lines(prog->source);
  std::string line;
  static const std::regex direct(R"(__global__\s+void\s+([A-Za-z_]\w*)\s*\()");
  static const std::regex macro(R"(^\s*[A-Z_]+KERNEL\(([A-Za-z_]\w*)\))");
  while (std::getline(lines, line)) {
    if (line.find("#define") != std::string::npos) continue;
    std::smatch m;
    if (std::regex_search(line, m, direct) || std::regex_search(line, m, macro))
      if (names.insert(m[1]).second) order.push_back(m[1]);
  }
  // The prelude (shim and math functions) comes precompiled where it could be;
  // else as text, the same program either way.
  const std::string cxx = host_compiler(), header = prelude_header(cxx);
  std::string src = header.empty() ? std::string(kKernelShim) + volt::kMathFunctionsSource
                                   : "#include \"" + header + "\"\n";
  src += "#line 1 \"volt_kernel.cu\"\n" + prog->source + "\n";
  for (const std::string& n : order) src += "VOLT_SIM_EXPORT(" + n + ")\n";

  char dir[] = "/tmp/volt_cudasim_build_XXXXXX";
  if (!::mkdtemp(dir)) return NVRTC_ERROR_INTERNAL_ERROR;
  const std::string d = dir, cpp = d + "/kernel.cpp", so = d + "/kernel.so", log = d + "/log.txt";
  std::ofstream(cpp) << src;
  const std::string cmd = compiler_command(cxx, "-shared -o " + so + " " + cpp, log);
  const int rc = std::system(cmd.c_str());
  std::ifstream lf(log);
  std::stringstream ls;
  ls << lf.rdbuf();
  prog->log = ls.str();
  if (rc == 0) {
    std::ifstream in(so, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    const std::string lib = bytes.str();
    const bool barriers = prog->source.find("__syncthreads") != std::string::npos;
    static const char kHex[] = "0123456789abcdef";
    std::string hex;
    hex.reserve(2 * lib.size());
    for (unsigned char b : lib) {
      hex += kHex[b >> 4];
      hex += kHex[b & 15];
    }
    prog->image = "cudasim " + std::to_string(lib.size()) + " " + (barriers ? "1" : "0") + "\n" + hex;
  }
  std::remove(cpp.c_str());
  std::remove(so.c_str());
  std::remove(log.c_str());
  ::rmdir(dir);
  return rc == 0 ? NVRTC_SUCCESS : NVRTC_ERROR_COMPILATION;
}

nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t* size) {
  if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
  *size = prog->log.size() + 1;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char* log) {
  if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
  std::memcpy(log, prog->log.c_str(), prog->log.size() + 1);
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t* size) {
  if (!prog || prog->image.empty()) return NVRTC_ERROR_INVALID_PROGRAM;
  *size = prog->image.size();
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char* cubin) {
  if (!prog || prog->image.empty()) return NVRTC_ERROR_INVALID_PROGRAM;
  std::memcpy(cubin, prog->image.data(), prog->image.size());
  return NVRTC_SUCCESS;
}

// The simulated device runs "CUBIN" only; PTX is the same image.
nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t* size) { return nvrtcGetCUBINSize(prog, size); }
nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char* ptx) { return nvrtcGetCUBIN(prog, ptx); }

}  // extern "C"
