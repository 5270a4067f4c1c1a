// volt::dist — a process group over MPI, as torch.distributed's.
//
//   // mpirun -np 2 ./train
//   volt::dist::init();                        // from the environment mpirun sets
//   auto t = volt::Tensor::full({4}, volt::dist::rank() + 1.0);
//   volt::dist::all_reduce(t);                 // every rank: [3, 3, 3, 3]
//   volt::dist::all_reduce(t, volt::dist::ReduceOp::Average);  // [1.5, ...]
//
// One process group: every process mpirun started (MPI_COMM_WORLD).  Every
// rank must make the same collective calls in the same order.  Tensors of
// f32, f64, i32 and i64 on any device: CPU tensors are reduced where they
// live (contiguous ones in place) by MPI.  CUDA tensors go through NCCL when
// libnccl.so.2 loads at run time (dlopen; volt needs no NCCL to build) and
// VOLT_NCCL is not 0; otherwise, like any other device's, through a host
// buffer over MPI.  backend_name(device) says which.  On NCCL's path a
// collective is queued on volt's stream of the tensor's device and returns
// without waiting for the GPU: the kernels that read the tensor next follow
// it on that stream.  Its communicator is made by the first collective on a
// CUDA tensor (rank 0's NCCL unique id sent over MPI) on that tensor's
// device, the one device NCCL serves in this process: give each rank of a
// machine its own GPU (local_rank()).
//
// A failing MPI or NCCL call throws volt::Error naming the call, the rank and
// the library's message.  After init(), no rank waits forever in a collective
// for a rank that is gone: an exception that escapes main() on one rank ends
// every rank (MPI_Abort with the exception's message); a rank that returns
// from main (or calls exit), having caught an error or finished early, tells
// the others it left and waits for them to leave too, and a rank waiting over
// MPI in a collective that the departed rank never joins ends every rank with
// a message naming both.  (A collective queued on NCCL is not watched.)
//
// Without MPI (volt built with VOLT_MPI=OFF or no Open MPI found), init()
// throws and is_available() is false; everything else in volt works as before.
#pragma once
#include <memory>
#include <string>

#include <volt/tensor/tensor.h>

namespace volt::dist {

enum class ReduceOp { Sum, Average };

bool is_available();    // volt was built with MPI
bool is_initialized();
// MPI_Init_thread (funneled: MPI is called from the thread that called init);
// a second call does nothing.  MPI_Finalize runs at exit.
void init();
int rank();
int world_size();
// This rank's index among the ranks on its machine (MPI_COMM_TYPE_SHARED,
// found by init()): the GPU to give it, Device::cuda(local_rank() % count).
int local_rank();

void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum);  // in place, on every rank
void broadcast(Tensor& t, int root = 0);                  // root's value on every rank
void barrier();
// (world_size, *t.sizes()): rank r's tensor at index r, on every rank.
Tensor all_gather(const Tensor& t);

// A non-blocking all-reduce in flight.  wait() finishes it (applying
// Average's division); test() lets MPI make progress and says whether it is
// done.  The tensor must stay alive and untouched until then.  Over MPI
// (MPI_Iallreduce, as all_reduce() itself is) it matches an all_reduce() or
// an all_reduce_async() on the other ranks.  Through NCCL the all-reduce is
// queued on the stream with a CUDA event after it: wait() blocks until the
// GPU reaches the event (cudaEventSynchronize), test() asks (cudaEventQuery).
class Work {
 public:
  struct State;
  Work() = default;
  explicit Work(std::shared_ptr<State> s) : state_(std::move(s)) {}
  bool test();
  void wait();
  bool pending() const { return state_ != nullptr; }

 private:
  std::shared_ptr<State> state_;
};
Work all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::Sum);

// Ends every rank: prints `message` with this rank's number and calls MPI_Abort.
[[noreturn]] void abort(const std::string& message, int code = 1);

// The path collectives on tensors of `d` take: "nccl" for a CUDA device when
// NCCL is loaded and VOLT_NCCL is not 0 (read at each call; every rank must
// see the same), else "mpi" ("none" in a volt built without MPI).
std::string backend_name(const Device& d);
// libnccl.so.2 loaded at run time with every function volt calls, and its
// version code (21803 for NCCL 2.18.3; 0 when not loaded).  Average uses
// ncclAvg from 2.10 on for floating tensors, else a sum then a division.
bool nccl_loadable();
int nccl_version();

}  // namespace volt::dist
