// volt::dist over MPI (Open MPI from Debian's libopenmpi-dev); CUDA tensors
// through NCCL where it loads (nn/parallel/nccl.h).
#include <volt/nn/parallel/dist.h>

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <optional>
#include <string>

#include <volt/nn/parallel/nccl.h>

namespace volt::dist {

namespace {

bool g_init_here = false;  // volt called MPI_Init (and so calls MPI_Finalize)
int g_local_rank = -1;     // among the ranks on this machine, found by init()
std::terminate_handler g_previous_terminate = nullptr;

int rank_or_unknown() {
  int inited = 0;
  MPI_Initialized(&inited);
  int r = -1;
  if (inited) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  VOLT_FAIL(call, "failed on rank " << rank_or_unknown() << ": " << std::string(msg, static_cast<size_t>(len)));
}

void require_init(const char* op) {
  VOLT_CHECK(is_initialized(), op, "call volt::dist::init() first (and run under mpirun)");
}

MPI_Datatype mpi_type(const Tensor& t, const char* op) {
  switch (t.dtype()) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    default: VOLT_FAIL(op, "expected a f32, f64, i32 or i64 tensor, got " << t.meta_str());
  }
}

// The tensor MPI works on: `t` itself when it is a contiguous CPU tensor with
// data, else a contiguous host copy (written back by finish()).
struct HostBuffer {
  Tensor host;
  bool copy_back = false;
  HostBuffer(const Tensor& t, const char* op) {
    VOLT_CHECK(t.defined() && t.has_data(), op, "expected a tensor with data, got " << (t.defined() ? t.meta_str() : "an undefined tensor"));
    mpi_type(t, op);
    VOLT_CHECK(t.numel() <= std::numeric_limits<int>::max(), op, "tensor too large for one MPI message: " << t.meta_str());
    if (t.device().is_cpu() && t.is_contiguous()) {
      host = t;
    } else {
      host = t.to(kCPU).contiguous();
      if (host.is_same(t)) host = t.clone();
      copy_back = true;
    }
  }
  void finish(Tensor& t) {
    if (copy_back) t.copy_(host.to(t.device()));
    else t.mark_modified();
  }
};

bool via_nccl(const Tensor& t) { return t.defined() && nccl::used_for(t.device()); }

}  // namespace

void nccl::divide_on_host(Tensor& host, int n) {
  const int64_t k = host.numel();
  switch (host.dtype()) {
    case DType::f32: { float* p = host.data_ptr<float>(); for (int64_t i = 0; i < k; ++i) p[i] /= static_cast<float>(n); break; }
    case DType::f64: { double* p = host.data_ptr<double>(); for (int64_t i = 0; i < k; ++i) p[i] /= n; break; }
    case DType::i32: { int32_t* p = host.data_ptr<int32_t>(); for (int64_t i = 0; i < k; ++i) p[i] /= n; break; }
    case DType::i64: { int64_t* p = host.data_ptr<int64_t>(); for (int64_t i = 0; i < k; ++i) p[i] /= n; break; }
    default: break;
  }
}

namespace {

// An exception escaping main() on one rank ends all of them.
void terminate_with_abort() {
  std::string what = "terminate called without an active exception";
  if (auto e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
      what = "an exception that is not a std::exception";
    }
  }
  abort(what, 1);
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

bool is_available() { return true; }

bool is_initialized() {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  return inited && !finalized;
}

void init() {
  if (is_initialized()) return;
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  // Failures come back as codes that volt turns into exceptions.
  check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  // The ranks that share this machine's memory: a collective, so here, where every rank is.
  MPI_Comm node = MPI_COMM_NULL;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  check(MPI_Comm_rank(node, &g_local_rank), "MPI_Comm_rank");
  check(MPI_Comm_free(&node), "MPI_Comm_free");
  if (!g_init_here) {
    g_init_here = true;
    std::atexit(finalize_at_exit);
    g_previous_terminate = std::set_terminate(terminate_with_abort);
  }
}

int rank() {
  require_init("dist::rank");
  int r = 0;
  check(MPI_Comm_rank(MPI_COMM_WORLD, &r), "MPI_Comm_rank");
  return r;
}

int local_rank() {
  require_init("dist::local_rank");
  return g_local_rank;
}

int world_size() {
  require_init("dist::world_size");
  int n = 0;
  check(MPI_Comm_size(MPI_COMM_WORLD, &n), "MPI_Comm_size");
  return n;
}

void all_reduce(Tensor& t, ReduceOp op) {
  require_init("dist::all_reduce");
  if (via_nccl(t)) return nccl::all_reduce(t, op);
  HostBuffer b(t, "dist::all_reduce");
  check(MPI_Allreduce(MPI_IN_PLACE, b.host.raw_data(), static_cast<int>(b.host.numel()), mpi_type(t, "dist::all_reduce"),
                      MPI_SUM, MPI_COMM_WORLD),
        "MPI_Allreduce");
  if (op == ReduceOp::Average) nccl::divide_on_host(b.host, world_size());
  b.finish(t);
}

void broadcast(Tensor& t, int root) {
  require_init("dist::broadcast");
  const int n = world_size();
  VOLT_CHECK(root >= 0 && root < n, "dist::broadcast", "root " << root << " is not a rank of " << n);
  if (via_nccl(t)) return nccl::broadcast(t, root);
  HostBuffer b(t, "dist::broadcast");
  check(MPI_Bcast(b.host.raw_data(), static_cast<int>(b.host.numel()), mpi_type(t, "dist::broadcast"), root, MPI_COMM_WORLD),
        "MPI_Bcast");
  b.finish(t);
}

void barrier() {
  require_init("dist::barrier");
  check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

Tensor all_gather(const Tensor& t) {
  require_init("dist::all_gather");
  if (via_nccl(t)) return nccl::all_gather(t);
  HostBuffer b(t, "dist::all_gather");
  Shape shape = t.sizes();
  shape.insert(shape.begin(), world_size());
  Tensor out = Tensor::empty(shape, t.dtype(), kCPU);
  const int count = static_cast<int>(t.numel());
  const MPI_Datatype type = mpi_type(t, "dist::all_gather");
  check(MPI_Allgather(b.host.raw_data(), count, type, out.raw_data(), count, type, MPI_COMM_WORLD), "MPI_Allgather");
  return t.device().is_cpu() ? out : out.to(t.device());
}

// One of: an MPI request on a host buffer, or an all-reduce queued on NCCL.
struct Work::State {
  Tensor target;
  ReduceOp op = ReduceOp::Sum;
  std::optional<HostBuffer> buffer;
  MPI_Request request = MPI_REQUEST_NULL;
  std::shared_ptr<nccl::Pending> queued;
};

Work all_reduce_async(Tensor& t, ReduceOp op) {
  require_init("dist::all_reduce_async");
  auto s = std::make_shared<Work::State>();
  s->target = t;
  s->op = op;
  if (via_nccl(t)) {
    s->queued = nccl::all_reduce_async(t, op);
    return Work(std::move(s));
  }
  s->buffer.emplace(t, "dist::all_reduce_async");
  check(MPI_Iallreduce(MPI_IN_PLACE, s->buffer->host.raw_data(), static_cast<int>(s->buffer->host.numel()),
                       mpi_type(t, "dist::all_reduce_async"), MPI_SUM, MPI_COMM_WORLD, &s->request),
        "MPI_Iallreduce");
  return Work(std::move(s));
}

bool Work::test() {
  if (!state_) return true;
  if (state_->queued) return nccl::test(*state_->queued);
  int done = 0;
  check(MPI_Test(&state_->request, &done, MPI_STATUS_IGNORE), "MPI_Test");
  return done != 0;
}

void Work::wait() {
  if (!state_) return;
  std::shared_ptr<State> s = std::move(state_);
  if (s->queued) return nccl::wait(*s->queued);
  check(MPI_Wait(&s->request, MPI_STATUS_IGNORE), "MPI_Wait");
  if (s->op == ReduceOp::Average) nccl::divide_on_host(s->buffer->host, world_size());
  s->buffer->finish(s->target);
}

void abort(const std::string& message, int code) {
  std::fprintf(stderr, "volt::dist: rank %d ends every rank: %s\n", rank_or_unknown(), message.c_str());
  std::fflush(stderr);
  if (is_initialized()) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

std::string backend_name(const Device& d) { return nccl::used_for(d) ? "nccl" : "mpi"; }

bool nccl_loadable() { return nccl::loaded(); }

int nccl_version() { return nccl::version(); }

}  // namespace volt::dist
