// A compiled training step (jit/step/step.h) on a GPU: captured once into a CUDA
// graph and replayed by one launch per step.
//
// The capture runs the step's final trace once under stream capture, with
// the state tensors where they live, the arguments in static buffers of the
// graph's own, and the new state values written over the old ones by the
// fused kernels that make them where that is safe (they read the old value
// at the same element, for the last time), else copied back inside the graph.  Everything else the trace allocates comes from the graph's
// private pool, so its addresses stay valid replay after replay.  The Philox
// seed and offset live in a device word that the fused kernels read; a last
// node of the graph advances the offset by what one step draws, so every
// replay draws fresh dropout masks, the same ones the CPU step draws at the
// same point of the generator.  Per replay the host only copies the
// arguments into their buffers and launches: no allocation, no wait.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <volt/jit/trace.h>
#include <volt/tensor/random.h>

namespace volt::jit::cuda {

class StepGraph {
 public:
  // `state`, `args` and `constants` in the trace's input order; the trace's
  // outputs: the step's `num_outputs` outputs, the new value of each
  // `updated_state` entry, then the gradients.  Throws a volt::Error naming
  // what cannot be captured.
  StepGraph(const Trace& trace, const std::vector<Tensor>& state, const std::vector<Tensor>& args,
            const std::vector<Tensor>& constants, size_t num_outputs, const std::vector<size_t>& updated_state);
  ~StepGraph();
  // One step: the arguments copied into the graph's buffers, one launch.
  // Returns the step's outputs and the gradients (tensors of the graph,
  // overwritten by the next replay).  The step's random draws start at `rng`
  // when given (counters its caller reserved already, as the lazy device
  // does when it records), else at counters reserved now from the global
  // generator, as an eager step would draw them.
  std::vector<Tensor> run(const std::vector<Tensor>& args, const PhiloxState* rng = nullptr);

  // The tensors run() returns (the graph's memory), before any replay.
  const std::vector<Tensor>& outputs() const;

  size_t kernel_nodes() const;
  size_t memcpy_nodes() const;

  // Whether a step with this trace, state and arguments is captured: one CUDA
  // device for all of them, and nothing in the trace that refusal() names.
  // With VOLT_LOG=graph a CUDA step that is not captured for refusal()'s
  // reason says so on stderr (once per reason).
  static bool applies(const Trace& trace, const std::vector<Tensor>& state, const std::vector<Tensor>& args);
  // Why a step with this trace runs launch by launch, "" if nothing in it
  // prevents a capture.  A collective (dist.all_reduce_mean of a data-parallel
  // step) does: over host buffers it copies to the host, which a capture
  // refuses, and NCCL inside a graph awaits a test on real GPUs.
  static std::string refusal(const Trace& trace);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// While a step is captured: the state tensor a fused kernel writes the value
// `id` into (a new parameter or moment made from the old one at the same
// element, its last reader: written in place, as the CPU plan's donation),
// or null for a buffer of its own.
Tensor* donated_output(int64_t id);

// The device form of a host-side index check (nll_loss's target check,
// embedding's index check): an op whose kernel notes an index out of range
// in the device's error word, reported with the host check's message at the
// next synchronisation, so the host need not wait to read the indices.
// `call` must be such a check (has_device_check); the result takes its arguments.
bool has_device_check(const OpCall& call);
OpCall device_check_call(const OpCall& call);

}  // namespace volt::jit::cuda
