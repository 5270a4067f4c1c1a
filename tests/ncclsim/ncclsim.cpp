// ncclsim: a test double of NCCL, for volt's tests on machines without GPUs
// or NCCL.  It is not NCCL and is never installed.
//
// Built as libnccl.so.2 in the build tree only (build/tests/ncclsim/), it
// defines the part of NCCL's documented C API that volt calls, with NCCL's
// signatures and enum values, so volt's run-time loader (dlopen of
// "libnccl.so.2", nn/parallel/dist_nccl.cpp) takes it for the real library
// when its folder is on LD_LIBRARY_PATH.  The collectives are carried out
// over MPI between the ranks mpirun started (the program must have called
// MPI_Init; volt::dist::init does), on GPU memory of the simulated device of
// tests/cudasim (preloaded as well): each call reads its input with a copy to
// the host on the given stream (which first runs the work queued before it),
// combines the ranks' values with MPI, and queues the copy of the result back
// on that stream.  So results arrive in stream order as with NCCL, but the
// call itself returns only once every rank has made it (NCCL would queue it
// and return), and a collective on a stream that is being captured into a
// CUDA graph is refused (NCCL would be recorded into the graph).
//
//   ncclGetUniqueId     an id made of a marker, the host's pid, a clock and a count
//   ncclCommInitRank    every rank of MPI_COMM_WORLD at once; checks that all
//                       ranks passed the same id and distinct ranks 0..n-1
//   ncclAllReduce       sum, prod, max, min; avg (sum, then divide by n) only
//                       when the reported version is 2.10 or later, as NCCL
//   ncclBroadcast, ncclAllGather, ncclCommDestroy, ncclGetVersion,
//   ncclGetErrorString, ncclGetLastError
//
// Counters, for tests that must know NCCL was really called:
// volt_ncclsim_counters(out, n) writes up to n of: ncclGetUniqueId,
// ncclCommInitRank, ncclCommDestroy, ncclAllReduce, ncclBroadcast,
// ncclAllGather calls, and all-reduces with ncclAvg; it returns how many.
//
// Environment: VOLT_NCCLSIM_VERSION (the version code ncclGetVersion reports,
// in NCCL's scheme: 21803 for 2.18.3, the default; 2807 for 2.8.7), VOLT_NCCLSIM_FAIL (the name of a call that
// then fails with ncclInvalidUsage, to test error reports), VOLT_NCCLSIM_LOG=1
// (prints each call on stderr).
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

#define SIM_EXPORT extern "C" __attribute__((visibility("default")))

// NCCL's types as its API documents them: results, data types and
// reductions are C enums (ints); the unique id is 128 bytes.
extern "C" {
struct ncclsim_id {
  char internal[128];
};
struct ncclsim_comm;
}

namespace {

enum Result : int {
  kSuccess = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
};
enum RedOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };

constexpr char kMarker[] = "volt-ncclsim";

struct Counters {
  long long unique_ids = 0, comm_inits = 0, comm_destroys = 0, all_reduces = 0, broadcasts = 0, all_gathers = 0,
            averages = 0;
} g_counters;

thread_local std::string t_last_error;

int reported_version() {
  const char* v = std::getenv("VOLT_NCCLSIM_VERSION");
  return v && *v ? std::atoi(v) : 21803;
}

// Every call starts here: logs it, and fails it when VOLT_NCCLSIM_FAIL names it.
bool enter(const char* call) {
  const char* log = std::getenv("VOLT_NCCLSIM_LOG");
  if (log && std::strcmp(log, "1") == 0) std::fprintf(stderr, "ncclsim: %s\n", call);
  const char* fail = std::getenv("VOLT_NCCLSIM_FAIL");
  if (fail && std::strcmp(fail, call) == 0) {
    t_last_error = std::string("ncclsim: ") + call + " fails on request (VOLT_NCCLSIM_FAIL)";
    return false;
  }
  return true;
}

Result fail(Result r, const std::string& why) {
  t_last_error = "ncclsim: " + why;
  return r;
}

// Bytes of one element, and the MPI type for reductions (null: bytes only).
bool describe(int type, size_t* bytes, MPI_Datatype* mpi) {
  switch (type) {
    case 0: *bytes = 1; *mpi = MPI_INT8_T; return true;    // ncclInt8
    case 1: *bytes = 1; *mpi = MPI_UINT8_T; return true;   // ncclUint8
    case 2: *bytes = 4; *mpi = MPI_INT32_T; return true;   // ncclInt32
    case 3: *bytes = 4; *mpi = MPI_UINT32_T; return true;  // ncclUint32
    case 4: *bytes = 8; *mpi = MPI_INT64_T; return true;   // ncclInt64
    case 5: *bytes = 8; *mpi = MPI_UINT64_T; return true;  // ncclUint64
    case 6: *bytes = 2; *mpi = MPI_DATATYPE_NULL; return true;  // ncclFloat16
    case 7: *bytes = 4; *mpi = MPI_FLOAT; return true;     // ncclFloat32
    case 8: *bytes = 8; *mpi = MPI_DOUBLE; return true;    // ncclFloat64
    case 9: *bytes = 2; *mpi = MPI_DATATYPE_NULL; return true;  // ncclBfloat16
    default: return false;
  }
}

template <typename T>
void divide(void* p, size_t n, int by) {
  T* x = static_cast<T*>(p);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<T>(x[i] / static_cast<T>(by));
}

// Device memory of the (simulated) GPU to the host, after the stream's earlier work.
Result to_host(std::vector<char>& host, const void* dev, size_t bytes, cudaStream_t s, const char* what) {
  host.resize(bytes);
  if (bytes == 0) return kSuccess;
  const cudaError_t e = cudaMemcpyAsync(host.data(), dev, bytes, cudaMemcpyDeviceToHost, s);
  if (e != cudaSuccess)
    return fail(kInvalidArgument, std::string(what) + " is not GPU memory of " + std::to_string(bytes) + " bytes (" +
                                      cudaGetErrorString(e) + ")");
  return kSuccess;
}

Result to_device(void* dev, const std::vector<char>& host, cudaStream_t s, const char* what) {
  if (host.empty()) return kSuccess;
  const cudaError_t e = cudaMemcpyAsync(dev, host.data(), host.size(), cudaMemcpyHostToDevice, s);
  if (e != cudaSuccess)
    return fail(kInvalidArgument, std::string(what) + " is not GPU memory of " + std::to_string(host.size()) +
                                      " bytes (" + cudaGetErrorString(e) + ")");
  return kSuccess;
}

// A collective needs the ranks now: it cannot be recorded into a CUDA graph here.
Result refuse_capture(cudaStream_t s, const char* call) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &status) == cudaSuccess && status == cudaStreamCaptureStatusNone) return kSuccess;
  return fail(kInvalidUsage, std::string(call) + ": the simulation cannot capture a collective in a CUDA graph");
}

Result mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return kSuccess;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return fail(kSystemError, std::string(call) + " failed: " + std::string(msg, static_cast<size_t>(len)));
}

}  // namespace

struct ncclsim_comm {
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0, size = 0, device = 0;
};

SIM_EXPORT int volt_ncclsim_counters(long long* out, int n) {
  const long long all[] = {g_counters.unique_ids, g_counters.comm_inits,  g_counters.comm_destroys,
                           g_counters.all_reduces, g_counters.broadcasts, g_counters.all_gathers,
                           g_counters.averages};
  int k = 0;
  for (; k < n && k < static_cast<int>(sizeof all / sizeof all[0]); ++k) out[k] = all[k];
  return k;
}

SIM_EXPORT const char* ncclGetErrorString(int result) {
  switch (result) {
    case kSuccess: return "no error";
    case kUnhandledCudaError: return "unhandled cuda error";
    case kSystemError: return "unhandled system error";
    case kInternalError: return "internal error";
    case kInvalidArgument: return "invalid argument";
    case kInvalidUsage: return "invalid usage";
    default: return "unknown result code";
  }
}

SIM_EXPORT const char* ncclGetLastError(ncclsim_comm*) { return t_last_error.c_str(); }

SIM_EXPORT int ncclGetVersion(int* version) {
  if (!enter("ncclGetVersion")) return kInvalidUsage;
  if (!version) return fail(kInvalidArgument, "ncclGetVersion: null pointer");
  *version = reported_version();
  return kSuccess;
}

SIM_EXPORT int ncclGetUniqueId(ncclsim_id* id) {
  if (!enter("ncclGetUniqueId")) return kInvalidUsage;
  if (!id) return fail(kInvalidArgument, "ncclGetUniqueId: null pointer");
  ++g_counters.unique_ids;
  std::memset(id->internal, 0, sizeof id->internal);
  std::memcpy(id->internal, kMarker, sizeof kMarker);
  const long long stamp[3] = {static_cast<long long>(::getpid()),
                              static_cast<long long>(std::chrono::steady_clock::now().time_since_epoch().count()),
                              g_counters.unique_ids};
  std::memcpy(id->internal + 32, stamp, sizeof stamp);
  return kSuccess;
}

SIM_EXPORT int ncclCommInitRank(ncclsim_comm** comm, int nranks, ncclsim_id id, int rank) {
  if (!enter("ncclCommInitRank")) return kInvalidUsage;
  if (!comm) return fail(kInvalidArgument, "ncclCommInitRank: null communicator pointer");
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) return fail(kInvalidUsage, "the simulated NCCL runs only in a program that called MPI_Init (under mpirun)");
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  // Collective over the world from here on: every rank gets the same verdict.
  auto* c = new ncclsim_comm;
  if (Result r = mpi(MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &c->mpi), "MPI_Comm_split"); r != kSuccess) {
    delete c;
    return r;
  }
  std::vector<char> ids(sizeof id.internal * static_cast<size_t>(world));
  std::vector<int> ranks(static_cast<size_t>(world)), sizes(static_cast<size_t>(world));
  Result r = mpi(MPI_Allgather(id.internal, sizeof id.internal, MPI_CHAR, ids.data(), sizeof id.internal, MPI_CHAR,
                               c->mpi),
                 "MPI_Allgather");
  if (r == kSuccess) r = mpi(MPI_Allgather(&rank, 1, MPI_INT, ranks.data(), 1, MPI_INT, c->mpi), "MPI_Allgather");
  if (r == kSuccess) r = mpi(MPI_Allgather(&nranks, 1, MPI_INT, sizes.data(), 1, MPI_INT, c->mpi), "MPI_Allgather");
  for (int i = 0; r == kSuccess && i < world; ++i) {
    if (std::memcmp(ids.data() + i * sizeof id.internal, kMarker, sizeof kMarker) != 0)
      r = fail(kInvalidArgument, "ncclCommInitRank: rank " + std::to_string(ranks[i]) +
                                     " passed an id that no ncclGetUniqueId made");
    else if (std::memcmp(ids.data() + i * sizeof id.internal, ids.data(), sizeof id.internal) != 0)
      r = fail(kInvalidArgument, "ncclCommInitRank: the ranks passed different unique ids");
    else if (sizes[i] != world)
      r = fail(kInvalidArgument, "ncclCommInitRank: nranks " + std::to_string(sizes[i]) +
                                     " differs from the " + std::to_string(world) + " processes mpirun started");
    else if (ranks[i] != i)
      r = fail(kInvalidArgument, "ncclCommInitRank: the ranks must be 0.." + std::to_string(world - 1) +
                                     " once each");
  }
  if (r != kSuccess) {
    MPI_Comm_free(&c->mpi);
    delete c;
    return r;
  }
  c->rank = rank;
  c->size = world;
  cudaGetDevice(&c->device);
  ++g_counters.comm_inits;
  *comm = c;
  return kSuccess;
}

SIM_EXPORT int ncclCommDestroy(ncclsim_comm* comm) {
  if (!enter("ncclCommDestroy")) return kInvalidUsage;
  if (!comm) return fail(kInvalidArgument, "ncclCommDestroy: null communicator");
  ++g_counters.comm_destroys;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm->mpi);
  delete comm;
  return kSuccess;
}

SIM_EXPORT int ncclAllReduce(const void* send, void* recv, size_t count, int type, int op, ncclsim_comm* comm,
                             cudaStream_t stream) {
  if (!enter("ncclAllReduce")) return kInvalidUsage;
  if (!comm) return fail(kInvalidArgument, "ncclAllReduce: null communicator");
  if (Result r = refuse_capture(stream, "ncclAllReduce"); r != kSuccess) return r;
  size_t item = 0;
  MPI_Datatype mt = MPI_DATATYPE_NULL;
  if (!describe(type, &item, &mt)) return fail(kInvalidArgument, "ncclAllReduce: unknown data type " + std::to_string(type));
  if (mt == MPI_DATATYPE_NULL) return fail(kInvalidArgument, "ncclAllReduce: the simulation reduces no 16-bit floats");
  if (op == kAvg && reported_version() < 21000)
    return fail(kInvalidArgument, "ncclAllReduce: ncclAvg needs NCCL 2.10 or later (this reports " +
                                      std::to_string(reported_version()) + ")");
  MPI_Op mop = op == kSum || op == kAvg ? MPI_SUM : op == kProd ? MPI_PROD : op == kMax ? MPI_MAX : op == kMin ? MPI_MIN
                                                                                                     : MPI_OP_NULL;
  if (mop == MPI_OP_NULL) return fail(kInvalidArgument, "ncclAllReduce: unknown reduction " + std::to_string(op));
  if (count > static_cast<size_t>(INT32_MAX)) return fail(kInvalidArgument, "ncclAllReduce: count too large for the simulation");
  ++g_counters.all_reduces;
  if (op == kAvg) ++g_counters.averages;
  std::vector<char> host;
  if (Result r = to_host(host, send, count * item, stream, "ncclAllReduce's sendbuff"); r != kSuccess) return r;
  if (Result r = mpi(MPI_Allreduce(MPI_IN_PLACE, host.data(), static_cast<int>(count), mt, mop, comm->mpi),
                     "MPI_Allreduce");
      r != kSuccess)
    return r;
  if (op == kAvg) {
    switch (type) {
      case 0: divide<int8_t>(host.data(), count, comm->size); break;
      case 1: divide<uint8_t>(host.data(), count, comm->size); break;
      case 2: divide<int32_t>(host.data(), count, comm->size); break;
      case 3: divide<uint32_t>(host.data(), count, comm->size); break;
      case 4: divide<int64_t>(host.data(), count, comm->size); break;
      case 5: divide<uint64_t>(host.data(), count, comm->size); break;
      case 7: divide<float>(host.data(), count, comm->size); break;
      case 8: divide<double>(host.data(), count, comm->size); break;
      default: break;
    }
  }
  return to_device(recv, host, stream, "ncclAllReduce's recvbuff");
}

SIM_EXPORT int ncclBroadcast(const void* send, void* recv, size_t count, int type, int root, ncclsim_comm* comm,
                             cudaStream_t stream) {
  if (!enter("ncclBroadcast")) return kInvalidUsage;
  if (!comm) return fail(kInvalidArgument, "ncclBroadcast: null communicator");
  if (Result r = refuse_capture(stream, "ncclBroadcast"); r != kSuccess) return r;
  size_t item = 0;
  MPI_Datatype mt = MPI_DATATYPE_NULL;
  if (!describe(type, &item, &mt)) return fail(kInvalidArgument, "ncclBroadcast: unknown data type " + std::to_string(type));
  if (root < 0 || root >= comm->size)
    return fail(kInvalidArgument, "ncclBroadcast: root " + std::to_string(root) + " is not a rank");
  if (count * item > static_cast<size_t>(INT32_MAX)) return fail(kInvalidArgument, "ncclBroadcast: too large for the simulation");
  ++g_counters.broadcasts;
  std::vector<char> host(count * item);
  if (comm->rank == root)  // only the root's sendbuff is read, as in NCCL
    if (Result r = to_host(host, send, count * item, stream, "ncclBroadcast's sendbuff"); r != kSuccess) return r;
  if (Result r = mpi(MPI_Bcast(host.data(), static_cast<int>(host.size()), MPI_BYTE, root, comm->mpi), "MPI_Bcast");
      r != kSuccess)
    return r;
  return to_device(recv, host, stream, "ncclBroadcast's recvbuff");
}

SIM_EXPORT int ncclAllGather(const void* send, void* recv, size_t count, int type, ncclsim_comm* comm,
                             cudaStream_t stream) {
  if (!enter("ncclAllGather")) return kInvalidUsage;
  if (!comm) return fail(kInvalidArgument, "ncclAllGather: null communicator");
  if (Result r = refuse_capture(stream, "ncclAllGather"); r != kSuccess) return r;
  size_t item = 0;
  MPI_Datatype mt = MPI_DATATYPE_NULL;
  if (!describe(type, &item, &mt)) return fail(kInvalidArgument, "ncclAllGather: unknown data type " + std::to_string(type));
  const size_t bytes = count * item;
  if (bytes * static_cast<size_t>(comm->size) > static_cast<size_t>(INT32_MAX))
    return fail(kInvalidArgument, "ncclAllGather: too large for the simulation");
  ++g_counters.all_gathers;
  std::vector<char> mine, all(bytes * static_cast<size_t>(comm->size));
  if (Result r = to_host(mine, send, bytes, stream, "ncclAllGather's sendbuff"); r != kSuccess) return r;
  if (Result r = mpi(MPI_Allgather(mine.data(), static_cast<int>(bytes), MPI_BYTE, all.data(), static_cast<int>(bytes),
                                   MPI_BYTE, comm->mpi),
                     "MPI_Allgather");
      r != kSuccess)
    return r;
  return to_device(recv, all, stream, "ncclAllGather's recvbuff");
}
