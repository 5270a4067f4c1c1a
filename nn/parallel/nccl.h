// volt::dist's NCCL path (nn/parallel/dist_nccl.cpp), for dist_mpi.cpp: the
// collectives on CUDA tensors when libnccl.so.2 loads at run time.  Not a
// user API: users call volt::dist (dist.h), which picks this path by device.
//
// NCCL is opened with dlopen on first use; volt has no build-time dependency
// on it.  One communicator per process, created by the first collective on a
// CUDA tensor (every rank must make it, as every collective): rank 0's
// ncclGetUniqueId broadcast over MPI, then ncclCommInitRank on the tensor's
// device.  Collectives are queued on volt's stream of that device
// (cuda::stream), so they follow the kernels that produced the tensor and
// precede those that read it, without a host synchronisation.
#pragma once
#include <memory>
#include <string>

#include <volt/nn/parallel/dist.h>

namespace volt::dist::nccl {

// Tensors of `d` go through NCCL: a CUDA device, VOLT_NCCL is not "0" (read
// at each call) and libnccl.so.2 loaded with every function volt calls.
bool used_for(const Device& d);
// libnccl.so.2 loaded with every function volt calls (whatever VOLT_NCCL says).
bool loaded();
// NCCL's version code (NCCL_VERSION's: 21803 for 2.18.3), 0 when not loaded.
int version();

// The collectives of dist.h on one CUDA tensor with data (f32, f64, i32, i64).
void all_reduce(Tensor& t, ReduceOp op);
void broadcast(Tensor& t, int root);
Tensor all_gather(const Tensor& t);  // (world_size, *t.sizes()) on t's device

// A queued all-reduce: a CUDA event recorded after it on the stream.
struct Pending;
std::shared_ptr<Pending> all_reduce_async(Tensor& t, ReduceOp op);
bool test(Pending& p);  // cudaEventQuery
void wait(Pending& p);  // cudaEventSynchronize, then what is left to do on the host

// Divides a contiguous CPU tensor by n in place (C's division, truncating, for
// integers): Average's last step on MPI's path (dist_mpi.cpp).
void divide_on_host(Tensor& host, int n);

}  // namespace volt::dist::nccl
