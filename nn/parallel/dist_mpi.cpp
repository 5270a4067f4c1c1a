// volt::dist over MPI (Open MPI from Debian's libopenmpi-dev); CUDA tensors
// through NCCL where it loads (nn/parallel/nccl.h).
#include <volt/nn/parallel/dist.h>

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <volt/nn/parallel/nccl.h>

namespace volt::dist {

namespace {

bool g_init_here = false;  // volt called MPI_Init (and so calls MPI_Finalize)
int g_local_rank = -1;     // among the ranks on this machine, found by init()
std::terminate_handler g_previous_terminate = nullptr;

// Leaving main.  A rank that returns from main (or calls exit) tells every
// other rank so on a communicator of its own (g_exit_comm, a copy of the
// world), then waits in a barrier there until every rank has left too.  A rank
// waiting in a collective watches for such notices: one from a rank that has
// left means the collective can never finish, and it ends every rank
// (MPI_Abort) with a message instead of waiting forever.
MPI_Comm g_exit_comm = MPI_COMM_NULL;
constexpr int kLeftTag = 7301;
std::vector<bool> g_heard;  // the ranks whose notice this rank has received
int g_gone = -1;            // a rank known to have left main, or -1

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

// Receives the notices that have arrived; a rank that has left, or -1.
int rank_that_left() {
  if (g_exit_comm == MPI_COMM_NULL) return -1;  // MPI was set up by the program, not by init()
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kLeftTag, g_exit_comm, &flag, &st);
    if (!flag) break;
    int who = 0;
    MPI_Recv(&who, 1, MPI_INT, st.MPI_SOURCE, kLeftTag, g_exit_comm, MPI_STATUS_IGNORE);
    g_heard[static_cast<size_t>(st.MPI_SOURCE)] = true;
    if (g_gone < 0) g_gone = st.MPI_SOURCE;
  }
  return g_gone;
}

// Waits for a collective's request, watching for ranks that left main.  A
// notice may come from a rank that took part and then left, so the
// collective gets two more seconds to finish before every rank is ended.
void wait_watching(MPI_Request& request, const char* op) {
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> deadline;
  for (unsigned spins = 0;; ++spins) {
    int done = 0;
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    if ((spins & 63) != 63) continue;
    if (!deadline && rank_that_left() >= 0) deadline = Clock::now() + std::chrono::seconds(2);
    if (deadline && Clock::now() > *deadline)
      abort("rank " + std::to_string(g_gone) + " left main (returned or exited) while this rank waited in " + op +
                ", which needs every rank",
            1);
    std::this_thread::yield();
  }
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

// At exit: the notice to every other rank, then the barrier of leaving.
void leave() {
  int me = 0, n = 1;
  MPI_Comm_rank(g_exit_comm, &me);
  MPI_Comm_size(g_exit_comm, &n);
  std::vector<MPI_Request> sent;
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    sent.emplace_back();
    MPI_Isend(&me, 1, MPI_INT, r, kLeftTag, g_exit_comm, &sent.back());
  }
  MPI_Request all_left = MPI_REQUEST_NULL;
  MPI_Ibarrier(g_exit_comm, &all_left);
  for (int done = 0; !done; std::this_thread::yield()) MPI_Test(&all_left, &done, MPI_STATUS_IGNORE);
  for (int r = 0; r < n; ++r)  // every rank sent its notice before the barrier
    if (r != me && !g_heard[static_cast<size_t>(r)]) {
      int who = 0;
      MPI_Recv(&who, 1, MPI_INT, r, kLeftTag, g_exit_comm, MPI_STATUS_IGNORE);
    }
  MPI_Waitall(static_cast<int>(sent.size()), sent.data(), MPI_STATUSES_IGNORE);
  MPI_Comm_free(&g_exit_comm);
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (g_exit_comm != MPI_COMM_NULL) leave();
  MPI_Finalize();
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
  check(MPI_Comm_dup(MPI_COMM_WORLD, &g_exit_comm), "MPI_Comm_dup");
  int n = 1;
  check(MPI_Comm_size(MPI_COMM_WORLD, &n), "MPI_Comm_size");
  g_heard.assign(static_cast<size_t>(n), false);
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
  MPI_Request r = MPI_REQUEST_NULL;
  check(MPI_Iallreduce(MPI_IN_PLACE, b.host.raw_data(), static_cast<int>(b.host.numel()),
                       mpi_type(t, "dist::all_reduce"), MPI_SUM, MPI_COMM_WORLD, &r),
        "MPI_Iallreduce");
  wait_watching(r, "dist::all_reduce");
  if (op == ReduceOp::Average) nccl::divide_on_host(b.host, world_size());
  b.finish(t);
}

void broadcast(Tensor& t, int root) {
  require_init("dist::broadcast");
  const int n = world_size();
  VOLT_CHECK(root >= 0 && root < n, "dist::broadcast", "root " << root << " is not a rank of " << n);
  if (via_nccl(t)) return nccl::broadcast(t, root);
  HostBuffer b(t, "dist::broadcast");
  MPI_Request r = MPI_REQUEST_NULL;
  check(MPI_Ibcast(b.host.raw_data(), static_cast<int>(b.host.numel()), mpi_type(t, "dist::broadcast"), root,
                   MPI_COMM_WORLD, &r),
        "MPI_Ibcast");
  wait_watching(r, "dist::broadcast");
  b.finish(t);
}

void barrier() {
  require_init("dist::barrier");
  MPI_Request r = MPI_REQUEST_NULL;
  check(MPI_Ibarrier(MPI_COMM_WORLD, &r), "MPI_Ibarrier");
  wait_watching(r, "dist::barrier");
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
  MPI_Request r = MPI_REQUEST_NULL;
  check(MPI_Iallgather(b.host.raw_data(), count, type, out.raw_data(), count, type, MPI_COMM_WORLD, &r),
        "MPI_Iallgather");
  wait_watching(r, "dist::all_gather");
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
  wait_watching(s->request, "dist::all_reduce_async's wait");
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
