// The lazy device's state, its public API (lazy.h) and its metrics.  The
// files beside this one are listed in internal.h.
#include <volt/jit/lazy/lazy.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <thread>

#include <sched.h>

#include <volt/jit/kernel_cache.h>
#include <volt/jit/lazy/internal.h>
#include <volt/tensor/backend.h>
#include <volt/tensor/cpu/threads.h>

namespace volt::lazy {

namespace detail {

Device backend_from_env() {
  const char* e = std::getenv("VOLT_LAZY_BACKEND");
  if (!e || !*e) return kCPU;
  std::string s = e;
  VOLT_CHECK(s == "cpu" || s == "cuda", "VOLT_LAZY_BACKEND", "expected cpu or cuda, got '" << s << "'");
  VOLT_CHECK(s == "cpu" || cuda::is_available(), "VOLT_LAZY_BACKEND",
             "cuda is not available (no CUDA backend in this build, or no GPU); use cpu");
  return s == "cpu" ? kCPU : Device::cuda(0);
}

std::set<std::string> fallback_from_env() {
  std::set<std::string> r;
  const char* e = std::getenv("VOLT_LAZY_FORCE_FALLBACK");
  if (!e) return r;
  std::stringstream ss(e);
  std::string name;
  while (std::getline(ss, name, ','))
    if (!name.empty()) r.insert(name);
  return r;
}

AsyncMode async_from_env() {
  const char* e = std::getenv("VOLT_LAZY_ASYNC");
  if (!e || !*e) return AsyncMode::Auto;
  std::string s = e;
  VOLT_CHECK(s == "0" || s == "1" || s == "auto", "VOLT_LAZY_ASYNC", "expected 0, 1 or auto, got '" << s << "'");
  return s == "auto" ? AsyncMode::Auto : s == "1" ? AsyncMode::On : AsyncMode::Off;
}

bool memory_plan_from_env() {
  const char* e = std::getenv("VOLT_LAZY_MEMORY_PLAN");
  if (!e || !*e) return true;
  std::string s = e;
  VOLT_CHECK(s == "0" || s == "1", "VOLT_LAZY_MEMORY_PLAN", "expected 0 or 1, got '" << s << "'");
  return s == "1";
}

// The cores this process may run on.
int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

bool async_now() {
  switch (S().async) {
    case AsyncMode::On: return true;
    case AsyncMode::Off: return false;
    case AsyncMode::Auto: break;
  }
  static const int cores = usable_cores();
  return cpu::num_threads() < cores;
}

State& S() {
  static State s;
  return s;
}

void count(const std::string& name, int64_t by) { S().counters[name] += by; }

// Constructed after State (first used by a run), so destroyed before it: its
// destructor lets queued runs finish while everything they use still exists.
detail::Runner& runner() {
  S();
  static detail::Runner r;
  return r;
}

}  // namespace detail

using namespace detail;

// ------------------------------------------------------------ public API

void mark_step() {
  count("MarkStep");
  run_live(Reason::MarkStep);
}

void wait_device_ops() {
  count("Time.wait_us", runner().wait_all());
  if (std::exception_ptr e = runner().take_error()) std::rethrow_exception(e);
  if (S().backend.is_cpu()) return;
  if (Backend* be = backend_for(S().backend.type)) be->synchronize();
}

void sync(const std::vector<Tensor>& tensors) {
  std::vector<ValuePtr> values;
  for (const Tensor& t : tensors)
    if (t.defined() && t.device().is_lazy()) values.push_back(current(*state_of(t)));
  run_graph(values, Reason::ValueNeeded);
  for (const ValuePtr& v : values) settle(*v);
}

void set_async(bool on) { S().async = on ? AsyncMode::On : AsyncMode::Off; }
void set_async_mode(AsyncMode mode) { S().async = mode; }
AsyncMode async_mode() { return S().async; }
bool async() { return async_now(); }
void set_memory_plan(bool on) { S().memory_plan = on; }
bool memory_plan() { return S().memory_plan; }

void set_backend(Device device) {
  VOLT_CHECK(device.is_cpu() || device.is_cuda(), "lazy::set_backend",
             "expected cpu or cuda, got " << device.str());
  VOLT_CHECK(device.is_cpu() || cuda::is_available(), "lazy::set_backend",
             "device " << device.str() << " is not available (no CUDA backend in this build, or no GPU)");
  if (device == S().backend) return;
  run_live(Reason::MarkStep);  // pending graphs finish where they were recorded for
  wait_device_ops();
  S().backend = device;
  clear_cache();  // compiled graphs are for one device
}
Device backend() { return S().backend; }

void set_cache_size(size_t entries) {
  State& s = S();
  s.cache_capacity = entries;
  while (s.cache.size() > s.cache_capacity) {
    s.cache.erase(s.lru.back()->key);
    s.lru.pop_back();
  }
}
size_t cache_size() { return S().cache_capacity; }
size_t cache_entries() { return S().cache.size(); }
void clear_cache() {
  S().cache.clear();
  S().lru.clear();
}

void set_graph_size_limit(size_t nodes) {
  VOLT_CHECK(nodes > 0, "lazy::set_graph_size_limit", "expected at least one node");
  S().size_limit = nodes;
}
size_t graph_size_limit() { return S().size_limit; }

void set_forced_fallback(const std::vector<std::string>& op_names) {
  S().forced_fallback = std::set<std::string>(op_names.begin(), op_names.end());
}

static std::vector<ValuePtr> values_for_hash(const std::vector<Tensor>& tensors) {
  std::vector<ValuePtr> v;
  for (const Tensor& t : tensors) {
    VOLT_CHECK(t.defined() && t.device().is_lazy(), "lazy::graph_hash",
               "expected lazy tensors, got " << (t.defined() ? t.meta_str() : std::string("undefined")));
    v.push_back(current(*state_of(t)));
  }
  return v;
}

uint64_t graph_hash(const std::vector<Tensor>& tensors) {
  return jit::hash_string(build_graph(values_for_hash(tensors)).key);
}

std::string dump(const Tensor& t) {
  Graph g = build_graph(values_for_hash({t}));
  auto names = std::make_shared<jit::ProxyNames>();
  std::string s = lower(g, names).str();
  // Runtime scalars are inputs of the graph; show this run's values.
  for (size_t i = 0; i < g.scalars.size(); ++i)
    s += (i ? ", s" : "# runtime scalars: s") + std::to_string(i) + " = " + g.scalars[i]->scalar.repr();
  return g.scalars.empty() ? s : s + "\n";
}

const std::vector<jit::Trace>& last_compiled_traces() {
  static const std::vector<jit::Trace> none;
  return S().last_compiled ? S().last_compiled->traces : none;
}

std::string last_compile_reason() { return S().last_reason; }

bool has_value(const Tensor& t) {
  VOLT_CHECK(t.defined() && t.device().is_lazy(), "lazy::has_value", "expected a lazy tensor");
  return current(*state_of(t))->node == nullptr;
}

namespace metrics {

// The step runner's execution time joins the counters when they are read.
static void absorb_runner_time() {
  if (int64_t us = runner().take_execute_us()) count("Time.execute_us", us);
  if (int64_t n = take_donated()) count("Plan.donated", n);
}

std::vector<std::string> counter_names() {
  absorb_runner_time();
  std::vector<std::string> r;
  for (const auto& [name, v] : S().counters)
    if (v != 0) r.push_back(name);
  if (S().nodes_recorded) r.push_back("NodesRecorded");
  std::sort(r.begin(), r.end());
  return r;
}

int64_t counter_value(const std::string& name) {
  absorb_runner_time();
  if (name == "NodesRecorded") return S().nodes_recorded;
  auto it = S().counters.find(name);
  return it == S().counters.end() ? 0 : it->second;
}

std::string report() {
  std::ostringstream os;
  for (const std::string& n : counter_names()) os << n << ": " << counter_value(n) << "\n";
  return os.str();
}

void reset() {
  runner().take_execute_us();
  take_donated();
  S().counters.clear();
  S().nodes_recorded = 0;
}

}  // namespace metrics

}  // namespace volt::lazy
