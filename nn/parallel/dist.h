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
// live (contiguous ones in place), others through a host buffer.
//
// A failing MPI call throws volt::Error naming the call, the rank and MPI's
// message.  After init(), an exception that escapes main() on one rank ends
// every rank (MPI_Abort with the exception's message), so the others never
// wait forever in a collective for a rank that is gone.
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

void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum);  // in place, on every rank
void broadcast(Tensor& t, int root = 0);                  // root's value on every rank
void barrier();
// (world_size, *t.sizes()): rank r's tensor at index r, on every rank.
Tensor all_gather(const Tensor& t);

// A non-blocking all-reduce (MPI_Iallreduce) in flight.  wait() finishes it
// (applying Average's division); test() lets MPI make progress and says
// whether it is done.  The tensor must stay alive and untouched until then.
// As in MPI, it matches only a non-blocking all-reduce on the other ranks,
// never a blocking all_reduce().
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

// Whether NCCL (libnccl.so.2) could be loaded at run time (dlopen).  volt
// does not use it yet: CUDA tensors are reduced through host buffers over MPI
// whether it is there or not.
bool nccl_loadable();

}  // namespace volt::dist
