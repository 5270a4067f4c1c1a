// cudasim: streams (work queued and run at a synchronisation), events,
// stream capture and CUDA graphs.
#include "sim.h"

#include <chrono>
#include <cstdio>

namespace cudasim {

std::vector<std::unique_ptr<CUstream_st>>& streams() {
  static auto* s = new std::vector<std::unique_ptr<CUstream_st>>;
  return *s;
}

CUstream_st* default_stream(int device) {
  static std::vector<CUstream_st*> d;
  if (d.empty())
    for (int i = 0; i < sim_device_count(); ++i) {
      streams().push_back(std::make_unique<CUstream_st>());
      streams().back()->device = i;
      d.push_back(streams().back().get());
    }
  return d[static_cast<size_t>(device)];
}

CUstream_st* resolve(cudaStream_t s) { return s ? s : default_stream(t_device); }

void run_queue(CUstream_st* s) {
  if (s->queue.empty()) return;
  DeviceAccess access;
  std::vector<Work> q;
  q.swap(s->queue);
  for (Work& w : q) {
    g_running_kernel = w.what.c_str();
    w.run();
    g_running_kernel = nullptr;
  }
}

void run_all() {
  for (auto& s : streams()) run_queue(s.get());
}

// VOLT_CUDASIM_TRACE=1 prints every piece of work as it is queued: what a
// program asks of the GPU, launch by launch.
void enqueue(cudaStream_t s, std::string what, std::function<void()> run, cudaGraphNodeType type) {
  static const bool trace = env_int("VOLT_CUDASIM_TRACE", 0) != 0;
  CUstream_st* st = resolve(s);
  if (trace) std::fprintf(stderr, "cudasim: %s%s\n", st->capture ? "(captured) " : "", what.c_str());
  if (st->capture) {
    st->capture->nodes.push_back(std::make_unique<CUgraphNode_st>(CUgraphNode_st{{std::move(what), std::move(run), type}}));
    return;
  }
  if (type == cudaGraphNodeTypeKernel) ++g_counters.kernel_launches;
  if (type == cudaGraphNodeTypeMemcpy) ++g_counters.copies;
  st->queue.push_back({std::move(what), std::move(run), type});
}

// The stream that records now, if any (one at a time).
CUstream_st* capturing_stream() {
  for (auto& s : streams())
    if (s->capture) return s.get();
  return nullptr;
}

// A call the GPU refuses while `s` (or, for a null s, any stream) records:
// the capture is invalidated, as CUDA does.
bool refused_in_capture(CUstream_st* s) {
  CUstream_st* c = capturing_stream();
  if (!c || (s && s != c)) return false;
  c->capture_invalid = true;
  t_last_error = cudaErrorStreamCaptureUnsupported;
  return true;
}

}  // namespace cudasim

using namespace cudasim;

extern "C" {

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  default_stream(0);
  streams().push_back(std::make_unique<CUstream_st>());
  streams().back()->device = t_device;
  *s = streams().back().get();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (refused_in_capture(resolve(s))) return cudaErrorStreamCaptureUnsupported;
  ++g_counters.host_syncs;
  run_queue(resolve(s));
  return cudaSuccess;
}

// Events stamp the host's clock when the queue reaches them.
struct CUevent_st {
  CUstream_st* stream = nullptr;
  std::chrono::steady_clock::time_point at{};
  bool recorded = false;
};

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = new CUevent_st;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  if (event->stream) run_queue(event->stream);  // a queued record must not outlive it
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  event->stream = resolve(s);
  event->recorded = false;
  enqueue(s, "cudaEventRecord", [event] {
    event->at = std::chrono::steady_clock::now();
    event->recorded = true;
  }, cudaGraphNodeTypeEventRecord);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  if (refused_in_capture(event->stream)) return cudaErrorStreamCaptureUnsupported;
  ++g_counters.host_syncs;
  if (event->stream) run_queue(event->stream);
  return cudaSuccess;
}

// The simulated device runs a stream's queue only when the host waits for
// it, so a query stands for time passing: an event whose record has run is
// complete (as is one never recorded); otherwise the answer is "not ready",
// recorded as the last error (a caller that tolerates it clears it), and the
// device then runs the queue, so the next query finds the event complete.
// Refused while the event's stream records, as cudaEventSynchronize.
cudaError_t cudaEventQuery(cudaEvent_t event) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  if (refused_in_capture(event->stream)) return cudaErrorStreamCaptureUnsupported;
  if (!event->stream || event->recorded) return cudaSuccess;
  run_queue(event->stream);  // not a wait: the host goes on without it
  return fail(cudaErrorNotReady);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!start || !end) return fail(cudaErrorInvalidResourceHandle);
  if (!start->recorded || !end->recorded) return fail(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
  return cudaSuccess;
}

// ------------------------------------------------------------- graphs
cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  // The legacy default stream cannot record; nor can two streams at once here.
  if (!s || capturing_stream()) return fail(cudaErrorStreamCaptureUnsupported);
  s->capture = new CUgraph_st;
  s->capture_invalid = false;
  s->mode = mode;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus* status) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!status) return fail(cudaErrorInvalidValue);
  CUstream_st* st = resolve(s);
  *status = !st->capture ? cudaStreamCaptureStatusNone
            : st->capture_invalid ? cudaStreamCaptureStatusInvalidated
                                  : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!s || !graph) return fail(cudaErrorInvalidValue);
  if (!s->capture) return fail(cudaErrorIllegalState);
  std::unique_ptr<CUgraph_st> g(s->capture);
  s->capture = nullptr;
  *graph = nullptr;
  if (s->capture_invalid) return fail(cudaErrorStreamCaptureInvalidated);
  *graph = g.release();
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!graph || !count) return fail(cudaErrorInvalidValue);
  if (nodes)
    for (size_t i = 0; i < *count && i < graph->nodes.size(); ++i) nodes[i] = graph->nodes[i].get();
  *count = graph->nodes.size();
  return cudaSuccess;
}

cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, enum cudaGraphNodeType* type) {
  if (!node || !type) return fail(cudaErrorInvalidValue);
  *type = node->work.type;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!exec || !graph) return fail(cudaErrorInvalidValue);
  auto nodes = std::make_shared<std::vector<Work>>();
  for (const auto& n : graph->nodes) nodes->push_back(n->work);
  *exec = new CUgraphExec_st{std::move(nodes)};
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!exec) return fail(cudaErrorInvalidResourceHandle);
  if (resolve(s)->capture) return fail(cudaErrorStreamCaptureUnsupported);  // no child graphs here
  ++g_counters.graph_launches;
  std::shared_ptr<const std::vector<Work>> nodes = exec->nodes;
  for (const Work& w : *nodes) g_counters.graph_kernels += w.type == cudaGraphNodeTypeKernel;
  resolve(s)->queue.push_back({"graph of " + std::to_string(nodes->size()) + " nodes", [nodes] {
                                 for (const Work& w : *nodes) {
                                   g_running_kernel = w.what.c_str();
                                   w.run();
                                 }
                                 g_running_kernel = nullptr;
                               }, cudaGraphNodeTypeGraph});
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  delete exec;  // queued launches hold the nodes themselves
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  delete graph;
  return cudaSuccess;
}

}  // extern "C"
