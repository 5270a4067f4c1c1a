// volt::dist's collectives on CUDA tensors through NCCL, loaded at run time
// (nn/parallel/nccl.h).  A volt built without CUDA never uses it.
#include <volt/nn/parallel/nccl.h>

#include <cstdlib>
#include <cstring>
#include <string>

#ifdef VOLT_WITH_CUDA
#include <dlfcn.h>

#include <volt/autograd/grad_mode.h>
#include <volt/tensor/cuda/runtime.h>
#include <volt/tensor/ops.h>
#endif

namespace volt::dist::nccl {

#ifndef VOLT_WITH_CUDA

bool used_for(const Device&) { return false; }
bool loaded() { return false; }
int version() { return 0; }
namespace {
[[noreturn]] void no_cuda(const char* op) { VOLT_FAIL(op, "volt was built without CUDA"); }
}  // namespace
void all_reduce(Tensor&, ReduceOp) { no_cuda("dist::all_reduce"); }
void broadcast(Tensor&, int) { no_cuda("dist::broadcast"); }
Tensor all_gather(const Tensor&) { no_cuda("dist::all_gather"); }
struct Pending {};
std::shared_ptr<Pending> all_reduce_async(Tensor&, ReduceOp) { no_cuda("dist::all_reduce_async"); }
bool test(Pending&) { return true; }
void wait(Pending&) {}

#else

namespace {

// ---------------------------------------------------------------- NCCL's C ABI
// The part of NCCL's documented C API that volt calls, declared here (no
// header at build time): the result, data type and reduction codes are NCCL's
// enum values; a unique id is 128 opaque bytes passed by value; a
// communicator is an opaque pointer.
struct UniqueId {
  char bytes[128];
};
using Comm = void*;
using Result = int;  // 0: success
constexpr int kInt32 = 2, kInt64 = 4, kFloat32 = 7, kFloat64 = 8;
constexpr int kSum = 0, kAvg = 4;   // ncclAvg: NCCL 2.10 and later
constexpr int kFirstWithAvg = 21000;  // version code of 2.10.0

struct Library {
  std::string why_not;  // empty when every function was found
  int version = 0;
  Result (*get_unique_id)(UniqueId*) = nullptr;
  Result (*comm_init_rank)(Comm*, int, UniqueId, int) = nullptr;
  Result (*comm_destroy)(Comm) = nullptr;
  Result (*all_reduce)(const void*, void*, size_t, int, int, Comm, cudaStream_t) = nullptr;
  Result (*broadcast)(const void*, void*, size_t, int, int, Comm, cudaStream_t) = nullptr;
  Result (*all_gather)(const void*, void*, size_t, int, Comm, cudaStream_t) = nullptr;
  const char* (*error_string)(Result) = nullptr;
  const char* (*last_error)(Comm) = nullptr;  // NCCL 2.13 and later; optional
  Result (*get_version)(int*) = nullptr;
};

template <typename F>
void bind(void* h, const char* name, F& f, std::string& missing) {
  f = reinterpret_cast<F>(dlsym(h, name));
  if (!f) missing += std::string(missing.empty() ? "" : ", ") + name;
}

const Library& library() {
  static const Library lib = [] {
    Library l;
    // Never closed: the communicator lives until exit.
    void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      l.why_not = e ? e : "libnccl.so.2 not found";
      return l;
    }
    std::string missing;
    bind(h, "ncclGetUniqueId", l.get_unique_id, missing);
    bind(h, "ncclCommInitRank", l.comm_init_rank, missing);
    bind(h, "ncclCommDestroy", l.comm_destroy, missing);
    bind(h, "ncclAllReduce", l.all_reduce, missing);
    bind(h, "ncclBroadcast", l.broadcast, missing);
    bind(h, "ncclAllGather", l.all_gather, missing);
    bind(h, "ncclGetErrorString", l.error_string, missing);
    bind(h, "ncclGetVersion", l.get_version, missing);
    l.last_error = reinterpret_cast<const char* (*)(Comm)>(dlsym(h, "ncclGetLastError"));
    if (!missing.empty()) {
      l.why_not = "libnccl.so.2 lacks " + missing;
      return l;
    }
    if (l.get_version(&l.version) != 0) l.version = 0;
    return l;
  }();
  return lib;
}

int rank_or_unknown() { return is_initialized() ? rank() : -1; }

void check(Result r, const char* call, Comm comm = nullptr) {
  if (r == 0) return;
  const Library& l = library();
  std::string msg = l.error_string(r);
  if (l.last_error) {
    const char* last = l.last_error(comm);
    if (last && *last) msg += std::string(": ") + last;
  }
  VOLT_FAIL(call, "failed on rank " << rank_or_unknown() << ": " << msg << " (NCCL error " << r << ")");
}

int nccl_type(const Tensor& t, const char* op) {
  switch (t.dtype()) {
    case DType::f32: return kFloat32;
    case DType::f64: return kFloat64;
    case DType::i32: return kInt32;
    case DType::i64: return kInt64;
    default: VOLT_FAIL(op, "expected a f32, f64, i32 or i64 tensor, got " << t.meta_str());
  }
}

// ---------------------------------------------------------------- the communicator
struct Communicator {
  Comm comm = nullptr;
  int device = -1;
};
Communicator g_comm;

void destroy_at_exit() {
  if (g_comm.comm) library().comm_destroy(g_comm.comm);
  g_comm.comm = nullptr;
}

// The communicator, created on `d` by the first collective (on every rank).
Comm communicator(const Device& d, const char* op) {
  if (g_comm.comm) {
    VOLT_CHECK(g_comm.device == d.index, op,
               "NCCL's communicator was created on cuda:" << g_comm.device << "; a collective on cuda:" << d.index
                                                          << " needs the same device (one GPU per rank)");
    return g_comm.comm;
  }
  const Library& l = library();
  // Rank 0's unique id, with its ncclGetUniqueId result, broadcast over MPI so
  // a failure there fails every rank rather than leaving them waiting.
  constexpr int kWords = sizeof(UniqueId) / sizeof(int32_t);
  Tensor word = Tensor::zeros({kWords + 1}, DType::i32, kCPU);
  UniqueId id{};
  if (rank() == 0) {
    const Result r = l.get_unique_id(&id);
    std::memcpy(word.raw_data(), id.bytes, sizeof id.bytes);
    word.data_ptr<int32_t>()[kWords] = r;
  }
  dist::broadcast(word, 0);
  if (const Result r = word.data_ptr<int32_t>()[kWords]; r != 0) {
    if (rank() == 0) check(r, "ncclGetUniqueId");
    VOLT_FAIL("ncclGetUniqueId", "failed on rank 0 (NCCL error " << r << "); no communicator on rank " << rank());
  }
  std::memcpy(id.bytes, word.raw_data(), sizeof id.bytes);
  cuda::DeviceGuard guard(d.index);
  Comm c = nullptr;
  check(l.comm_init_rank(&c, world_size(), id, rank()), "ncclCommInitRank");
  g_comm = {c, d.index};
  // Registered after MPI_Finalize's (dist::init), so it runs before it.
  std::atexit(destroy_at_exit);
  return c;
}

// The tensor NCCL works on: `t` when contiguous, else a contiguous copy
// whose result is copied back on the stream.
struct Operand {
  Tensor buf;
  bool copy_back = false;
  Operand(const Tensor& t, const char* op) {
    VOLT_CHECK(t.defined() && t.has_data() && t.device().is_cuda(), op,
               "expected a CUDA tensor with data, got " << (t.defined() ? t.meta_str() : "an undefined tensor"));
    nccl_type(t, op);
    if (t.is_contiguous()) {
      buf = t;
    } else {
      buf = t.contiguous();
      copy_back = true;
    }
  }
  void finish(Tensor& t) {
    if (copy_back) t.copy_(buf);
    else t.mark_modified();
  }
};

bool is_integer(DType d) { return d == DType::i32 || d == DType::i64; }

// Queues the all-reduce of `b` and, for a floating Average without ncclAvg,
// the division.  True when an integer Average's division is left to the host.
bool queue_all_reduce(Tensor& b, ReduceOp op, const char* name) {
  const Library& l = library();
  Comm c = communicator(b.device(), name);
  const bool avg = op == ReduceOp::Average;
  const bool native_avg = avg && !is_integer(b.dtype()) && l.version >= kFirstWithAvg;
  check(l.all_reduce(b.raw_data(), b.raw_data(), static_cast<size_t>(b.numel()), nccl_type(b, name),
                     native_avg ? kAvg : kSum, c, cuda::stream(b.device().index)),
        "ncclAllReduce", c);
  if (avg && !native_avg && !is_integer(b.dtype())) {
    NoGradGuard no_grad;
    b.copy_(div(b, Scalar(static_cast<double>(world_size()))));
  }
  return avg && is_integer(b.dtype());
}

void divide_through_host(Tensor& b) {
  Tensor h = b.to(kCPU).contiguous();
  if (h.is_same(b)) h = b.clone();
  divide_on_host(h, world_size());
  b.copy_(h.to(b.device()));
}

}  // namespace

bool loaded() { return library().why_not.empty(); }
int version() { return loaded() ? library().version : 0; }

bool used_for(const Device& d) {
  if (!d.is_cuda()) return false;
  const char* env = std::getenv("VOLT_NCCL");
  if (env && std::strcmp(env, "0") == 0) return false;
  return loaded();
}

void all_reduce(Tensor& t, ReduceOp op) {
  Operand o(t, "dist::all_reduce");
  cuda::DeviceGuard guard(t.device().index);
  if (queue_all_reduce(o.buf, op, "dist::all_reduce")) divide_through_host(o.buf);
  o.finish(t);
}

void broadcast(Tensor& t, int root) {
  Operand o(t, "dist::broadcast");
  cuda::DeviceGuard guard(t.device().index);
  Comm c = communicator(t.device(), "dist::broadcast");
  check(library().broadcast(o.buf.raw_data(), o.buf.raw_data(), static_cast<size_t>(o.buf.numel()),
                            nccl_type(t, "dist::broadcast"), root, c, cuda::stream(t.device().index)),
        "ncclBroadcast", c);
  o.finish(t);
}

Tensor all_gather(const Tensor& t) {
  Operand o(t, "dist::all_gather");
  cuda::DeviceGuard guard(t.device().index);
  Comm c = communicator(t.device(), "dist::all_gather");
  Shape shape = t.sizes();
  shape.insert(shape.begin(), world_size());
  Tensor out = Tensor::empty(shape, t.dtype(), t.device());
  check(library().all_gather(o.buf.raw_data(), out.raw_data(), static_cast<size_t>(o.buf.numel()),
                             nccl_type(t, "dist::all_gather"), c, cuda::stream(t.device().index)),
        "ncclAllGather", c);
  return out;
}

struct Pending {
  Tensor target;
  Operand operand;
  bool divide_on_wait = false;
  cudaEvent_t event = nullptr;
  Pending(const Tensor& t, const char* op) : target(t), operand(t, op) {}
  Pending(const Pending&) = delete;
  Pending& operator=(const Pending&) = delete;
  ~Pending() {
    if (event) cudaEventDestroy(event);
  }
};

std::shared_ptr<Pending> all_reduce_async(Tensor& t, ReduceOp op) {
  auto p = std::make_shared<Pending>(t, "dist::all_reduce_async");
  cuda::DeviceGuard guard(t.device().index);
  p->divide_on_wait = queue_all_reduce(p->operand.buf, op, "dist::all_reduce_async");
  VOLT_CUDA_CHECK(cudaEventCreate(&p->event));
  VOLT_CUDA_CHECK(cudaEventRecord(p->event, cuda::stream(t.device().index)));
  return p;
}

bool test(Pending& p) {
  cuda::DeviceGuard guard(p.target.device().index);
  const cudaError_t e = cudaEventQuery(p.event);
  if (e == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: leave nothing for the next check to find
    return false;
  }
  VOLT_CUDA_CHECK(e);
  return true;
}

void wait(Pending& p) {
  cuda::DeviceGuard guard(p.target.device().index);
  VOLT_CUDA_CHECK(cudaEventSynchronize(p.event));
  if (p.divide_on_wait) divide_through_host(p.operand.buf);
  p.operand.finish(p.target);
}

#endif  // VOLT_WITH_CUDA

}  // namespace volt::dist::nccl
