// The tracer: a dispatch mode that records every op called on proxies.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include <volt/jit/interpreter.h>  // interpret, prepare: what runs a trace
#include <volt/jit/trace.h>
#include <volt/tensor/random.h>

namespace volt::jit {

struct TraceResult {
  std::shared_ptr<ProxyNames> names;
  Trace trace;
};

// Runs fn on proxies standing for `inputs` (same metadata) with the given names
// and records what it does.
// `captured` are tensors fn reaches by itself (a module's parameters): they
// become named inputs too, placed first, and are replaced by proxies whenever
// an op receives them.
TraceResult trace_function(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                           const std::vector<Tensor>& inputs, const std::vector<std::string>& names,
                           const std::vector<Tensor>& captured = {},
                           const std::vector<std::string>& captured_names = {});

// Records what fn does to existing proxies of `names`: flat prims in order, or
// with flatten=false the ops as called, their decompositions as subsymbols.
std::vector<BoundSymbol> record(ProxyNames& names, const std::function<void()>& fn, bool flatten = true);

}  // namespace volt::jit
