// The lazy device: ops on tensors of Device::lazy() record a graph instead of
// running, and the graph runs when a value is needed.
//
//   auto t = volt::Tensor::ones({1}).to(volt::kLazy);
//   auto maybe = volt::Tensor::from_vector<bool>({true}).to(volt::kLazy);
//   auto r = maybe ? t + 2 : t;      // bool(maybe) reads a value: runs what it needs
//   std::cout << r;                  // tensor([3.], device='lazy'): runs r's graph
//   volt::lazy::mark_step();         // or: run every pending graph now (a training step)
//
// A recorded value is a node: an op, its operands (other nodes, device-data
// leaves, scalars) and its output's shape and dtype.  Running a graph lowers
// it to a jit Trace (jit/trace.h) and sends it through the jit's passes and
// executors (CSE, fusion into generated kernels, delete-last-used).  The
// compiled trace is cached under the graph's structure: ops, attributes,
// shapes, dtypes and how values are shared, but not the data of leaves and not
// the values of scalar operands, which are passed at run time.  A training
// loop therefore compiles its step once, and changing the learning rate (or
// Adam's bias correction, every step) does not recompile.
//
// Random draws (dropout) reserve their Philox counters from the global
// generator when they are recorded, exactly as eager mode does, so the lazy
// device draws the same masks as eager mode for the same seed, and the
// generator has already moved past a step's draws when mark_step() runs it.
// A graph passes its first draw's (seed, offset) at run time and the others
// relative to it, so the counters are not part of the cache key.
//
// VOLT_LOG=lazy prints each compile and why it did not hit the cache:
// the first op, operand shape or dtype, or attribute that differs from the
// last compiled graph (last_compile_reason() below).
//
// Eager autograd works on lazy tensors: backward() runs the VJP rules on lazy
// tensors, so the backward pass lands in the same graph.  In-place ops
// (optimizer steps, gradient accumulation) give the tensor a new pending value.
//
// A view of a lazy tensor sees later in-place writes to its base (reading it
// replays the view op on the base's new value), as shared storage would.
//
// mark_step() may hand its graph to a worker thread (see mark_step below): the
// graph's inputs are held until it is done and its outputs are new tensors, so
// nothing the program holds is written while it runs.
//
// Limits: one thread records; writing in place into a view of a lazy tensor is
// an error (its base would not see the write); a graph's random draws must all
// use one seed (call mark_step() before manual_seed()).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <volt/jit/trace.h>
#include <volt/tensor/tensor.h>

namespace volt::lazy {

// Cuts the trace: the pending graph of every live lazy tensor starts running,
// and recording goes on into a new graph.  On the CPU, with asynchronous steps
// (async() below), the graph runs on the lazy device's worker thread while the
// program records the next step (on CUDA its kernels are queued on the
// stream); reading one of its values
// (item(), printing, to(kCPU)) waits for it.  An error inside such a run is
// thrown by the next read of its values or by wait_device_ops().
void mark_step();
// Waits for every graph still running; throws the first error among them not
// yet thrown by a read.
void wait_device_ops();
// Runs the pending graphs of these tensors (one graph for all of them) and
// waits for their values.
void sync(const std::vector<Tensor>& tensors);

// Whether mark_step() returns before its graph has run on the CPU.  Off,
// mark_step() runs the graph before it returns, on the recording thread.
// Auto (the default) is on only when this process may run on more cores than
// the compute threads use (volt::cpu::num_threads()): the worker's kernels then
// do not share cores with the recording thread.  With every core computing, as with 2 threads on 2 cores, the step
// ran 14-17 % slower on the worker thread than on the recording thread, and
// recording (well under 1 ms a step) leaves nothing to overlap.
// VOLT_LAZY_ASYNC=0|1|auto at start-up sets the mode.
enum class AsyncMode { Auto, On, Off };
void set_async(bool on);  // On or Off
void set_async_mode(AsyncMode mode);
AsyncMode async_mode();
bool async();  // the mode as it applies now (Auto resolved)

// Whether a mark_step's graph on the CPU runs from a memory plan
// (jit/step/memory_plan.h, one per compiled graph): its intermediates live in an
// arena reused step to step, and a new value of a tensor (a parameter, an
// optimizer's moment) is written into the buffer of the old value it replaces
// when nothing else can read that old value any more (no other lazy tensor
// holds it, no pending node outside the graph reads it, no other tensor
// shares its memory), as a compiled step updates its state in place.  On by
// default; VOLT_LAZY_MEMORY_PLAN=0|1 at start-up sets it.  The metric
// Plan.donated counts the new values written in place.  A plan's arena (the
// peak of its graph's intermediates) lives as long as the compiled graph stays
// in the cache: a program making many different step graphs bounds that
// memory with set_cache_size, or turns plans off.
// On CUDA the plan is a CUDA graph (jit/cuda/step_graph.h): a mark_step graph
// is interpreted on its first run, captured on its second and replayed by one
// launch after that.  A tensor's new value is written over the old value it
// replaces (the value the tensor held before its in-place writes) under the
// same rule; the other outputs live in the graph's memory, and a value of the
// last run that the program still holds when the graph replays is first moved
// to memory of its own.  So a training step allocates nothing in the graph.
// The metrics Replay.captured, Replay.launched and Replay.kept (values moved
// out) count it.
void set_memory_plan(bool on);
bool memory_plan();

// Where lazy graphs run: the CPU (default) or CUDA where that backend is built
// and a GPU is present.  VOLT_LAZY_BACKEND=cpu|cuda sets it at start-up.
void set_backend(Device device);
Device backend();

// The compiled-graph cache (least recently used graphs are dropped).
void set_cache_size(size_t entries);  // default 1024
size_t cache_size();
size_t cache_entries();
void clear_cache();

// A graph with more pending nodes than this is cut and run (counted as
// RunGraph.size_limit).  Default 100000.
void set_graph_size_limit(size_t nodes);
size_t graph_size_limit();

// Ops that always fall back to eager execution, by op name ("argmax"); also
// VOLT_LAZY_FORCE_FALLBACK=op1,op2.  Custom ops (tensor/custom_op.h) always do.
void set_forced_fallback(const std::vector<std::string>& op_names);

// The cache key of the graph that would compute these tensors now, hashed.
// Tensors that already hold data hash by shape and dtype alone.
uint64_t graph_hash(const std::vector<Tensor>& tensors);
// The pending graph of t, lowered to a trace and printed in the trace format.
std::string dump(const Tensor& t);
// The traces the last compiled graph went through (lowered, CSE, fusion, ...).
const std::vector<jit::Trace>& last_compiled_traces();
// Why the last graph was compiled: "the first graph", or its first difference
// from the graph compiled before it, in words ("mul (node 3): operand 0 has
// shape [32, 10], was [64, 10]"); VOLT_LOG=lazy prints it with each compile.
std::string last_compile_reason();
// Whether t holds its value (true) or a pending node (false).
bool has_value(const Tensor& t);

namespace metrics {
// Counters: CachedCompile, UncachedCompile, MarkStep, RunGraph.<reason>
// (value_needed, mark_step, size_limit, fallback), Fallback.<op> (an op with
// no lowering that cut the graph to run), DataOp.<op> (one whose inputs all
// held their values, so it cut nothing),
// Transfer.to_lazy, Transfer.to_host, NodesRecorded, and times in
// microseconds: Time.sync_us (hash, lookup, compile and run or hand over),
// Time.compile_us, Time.execute_us (running graphs, on either thread),
// Time.wait_us (the recording thread waiting for mark_step's runs).
std::vector<std::string> counter_names();  // sorted; only counters that are nonzero
int64_t counter_value(const std::string& name);  // 0 for an unknown counter
std::string report();  // one "name: value" line per counter
void reset();
}  // namespace metrics

}  // namespace volt::lazy
