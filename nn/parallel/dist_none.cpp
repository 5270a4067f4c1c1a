// volt::dist in a volt built without MPI: every collective says so.
#include <volt/nn/parallel/dist.h>

#include <cstdio>
#include <cstdlib>

namespace volt::dist {

namespace {
[[noreturn]] void unavailable(const char* op) {
  VOLT_FAIL(op, "volt was built without MPI (install libopenmpi-dev and configure with -DVOLT_MPI=ON)");
}
}  // namespace

bool is_available() { return false; }
bool is_initialized() { return false; }
void init() { unavailable("dist::init"); }
int rank() { unavailable("dist::rank"); }
int world_size() { unavailable("dist::world_size"); }
int local_rank() { unavailable("dist::local_rank"); }
void all_reduce(Tensor&, ReduceOp) { unavailable("dist::all_reduce"); }
void broadcast(Tensor&, int) { unavailable("dist::broadcast"); }
void barrier() { unavailable("dist::barrier"); }
Tensor all_gather(const Tensor&) { unavailable("dist::all_gather"); }
Work all_reduce_async(Tensor&, ReduceOp) { unavailable("dist::all_reduce_async"); }
bool Work::test() { return true; }
void Work::wait() {}

void abort(const std::string& message, int code) {
  std::fprintf(stderr, "volt::dist: %s\n", message.c_str());
  std::_Exit(code);
}

std::string backend_name(const Device&) { return "none"; }
bool nccl_loadable() { return false; }
int nccl_version() { return 0; }

}  // namespace volt::dist
