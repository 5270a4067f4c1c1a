// The trace IR: what the jit records when it runs a function on proxies.
//
// A Trace is a Python-looking program: a signature of named proxies, a list of
// bound symbols (one op applied to proxies and scalars, with the prims it
// decomposes into as subsymbols), and its outputs.  Printing follows
// Lightning Thunder's traces:
//
//   def computation(input, _0_weight, _0_bias):
//     # input: "cpu f32[8, 784]"
//     t0 = linear(input, _0_weight, _0_bias)  # t0: "cpu f32[8, 784]"
//       # t0 = prims.linear(input, _0_weight, _0_bias)  # t0: "cpu f32[8, 784]"
//     return t0
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <volt/tensor/dispatch.h>

namespace volt::jit {

// One recorded op.  Arguments and outputs are proxy tensors (Tensor::proxy),
// identified by their proxy_id; scalars stay scalars.
struct FusedKernel;  // jit/codegen.h
class Executor;      // jit/executor.h

struct BoundSymbol {
  OpCall call;
  std::vector<Tensor> outputs;
  std::vector<BoundSymbol> subsymbols;  // the decomposition (prims under an op)
  bool top_level_prim = false;          // a prim the user called directly

  // What it is: an op (`call`, with its decomposition in subsymbols), or a
  // fused region (`cpuFusion0(inputs) -> outputs`, made by the fusion pass,
  // jit/fusion.h), which has no op of its own: its prims are its subsymbols,
  // its inputs fusion_inputs, its kernel `kernel`; `call` is unused.
  enum class Kind { Op, Fusion };
  Kind kind = Kind::Op;
  bool is_fusion() const { return kind == Kind::Fusion; }

  // A fused region's name, inputs and generated kernel (jit/codegen.h).
  std::string fusion_name;
  std::vector<Tensor> fusion_inputs;
  std::shared_ptr<FusedKernel> kernel;

  std::vector<Tensor> del_after;  // values last used here (the delete-last-used pass)
  // Per argument, the name a scalar saved for backward prints as (`f0`), or
  // "" for a literal; empty when the line reads none (jit/grad.cpp).
  std::vector<std::string> scalar_names;
  const Executor* executor = nullptr;  // who runs it (the claim pass)
  // The module path it was called under ("transformer.h.0.attn"; "" outside
  // every module; tensor/scope.h); a backward line has its forward line's, a
  // fused region its first prim's.  Not printed: the report groups by it.
  std::string scope;
};

// A value read while tracing (item(), a bool): the trace is valid only while
// that value stays the same.  `bsyms` compute it from the trace's inputs.
struct Guard {
  std::vector<BoundSymbol> bsyms;
  Tensor value;     // the proxy whose value was read
  double expected;  // what it was when the trace was made
};

// A scalar a backward reads from its forward (a dropout's scale): the
// augmented forward returns its value in the second saved collection (C1),
// the backward unpacks it under `name` and reads it there.
struct NamedScalar {
  std::string name;
  Scalar value;
};

struct Program;  // a trace prepared for repeated runs (jit/interpreter.cpp)
class ProxyNames;

struct Trace {
  std::string name = "computation";
  std::string provenance;  // "# Constructed by ..." line
  double millis = 0;
  std::vector<Tensor> inputs;
  std::vector<BoundSymbol> bsyms;
  std::vector<Tensor> outputs;
  uint64_t rng_total = 0;  // Philox counters the program draws per call
  std::vector<Guard> guards;

  // How the signature prints.  Plain: def computation(inputs).  Augmented
  // forward: the first `split` outputs are the results, the rest saved for
  // backward.  Backward: the first `split` inputs are the saved values, the
  // rest the cotangents.
  enum class Kind { Plain, AugmentedForward, Backward };
  Kind kind = Kind::Plain;
  size_t split = 0;
  // Augmented forward and backward: the scalars saved for backward (C1).
  std::vector<NamedScalar> scalars;

  std::shared_ptr<const Program> program;  // built on first run
  // The names of its proxies, shared by every trace a pass makes from it.
  std::shared_ptr<const ProxyNames> names;

  std::string str() const;
  // The trace as a Graphviz DOT graph (jit/inspect/dot.h).
  std::string to_dot() const;
};

// The names of proxies: inputs keep the names they were given, the rest are t0, t1, ...
class ProxyNames {
 public:
  std::string name(const Tensor& t) const;
  void set(const Tensor& t, std::string name);
  // A new proxy, named `name`, or tN (the next free number) when name is empty.
  Tensor make(const TensorMeta& m, const void* owner, std::string name = {});
  // How many proxies it names: the id the next one gets.
  int64_t size() const { return static_cast<int64_t>(names_.size()); }

 private:
  std::vector<std::string> names_;
  int64_t next_ = 0;
};

// The id a proxy has in its trace.
inline int64_t id_of(const Tensor& t) { return t.impl()->proxy_id; }

// Flattens each bound symbol to the prims it stands for.
std::vector<BoundSymbol> flatten_to_prims(const std::vector<BoundSymbol>& bsyms);

// Replaces proxies by id everywhere in the bound symbols (arguments, outputs,
// fusion inputs and outputs, subsymbols).
void substitute(std::vector<BoundSymbol>& bsyms, const std::unordered_map<int64_t, Tensor>& by_id);

// Forgets the names of saved scalars (BoundSymbol::scalar_names): each reads
// its literal value again, as where a backward is spliced into the program
// that computes those scalars, with no C1 between them.
void inline_saved_scalars(std::vector<BoundSymbol>& bsyms);

// The tensor arguments of a bound symbol (a fusion's inputs for a fusion).
std::vector<Tensor> tensor_args(const BoundSymbol& b);

}  // namespace volt::jit
