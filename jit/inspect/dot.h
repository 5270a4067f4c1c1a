// Traces and autograd graphs as pictures: Graphviz DOT text, and SVG where
// Graphviz's `dot` program is installed.
//
//   std::string d = volt::jit::last_traces(jm).back().to_dot();  // ops, fusions, saved values
//   std::string g = volt::jit::to_dot(loss);                      // the eager tape (like torchviz)
//   std::string svg = volt::jit::dot_to_svg(d);                   // "" when dot is missing
//
// In a trace's graph every bound symbol is a box (`t3 = volt.linear`), every
// input an ellipse, and an edge carries the value's name from the op that
// makes it to the ops that read it.  A fused region is a cluster (a filled
// frame named like the trace's fusion call, `cpuFusion0`) around its prims.
// Values saved for backward are orange notes: what an augmented forward
// returns for backward, or what a backward trace receives.  Given sections
// (forward, loss, backward, optimizer), each is a frame of its own.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <volt/jit/trace.h>

namespace volt::jit {

struct DotOptions {
  // The section of each top-level bound symbol, in order ("" or missing: none).
  std::vector<std::string> sections;
  // Printed above the graph.
  std::string title;
};

// The trace as a DOT digraph (Trace::to_dot() is this with no options).
std::string to_dot(const Trace& t, const DotOptions& options);

// The autograd graph behind `root` (its grad_fn and everything backward()
// would reach): one box per node (`mul_backward`), light blue leaves that
// receive a .grad, orange tensors a node saved, the root in green.  `named`
// gives leaves their names (a module's named_parameters()).
std::string to_dot(const Tensor& root, const std::vector<std::pair<std::string, Tensor>>& named = {});

// Runs Graphviz's `dot -Tsvg` (found on PATH, started without a shell) on
// the DOT text.  Empty when dot is not installed, failed or ran longer than
// timeout_seconds (then it is stopped: a graph of thousands of boxes, a
// compiled GPT step's, takes dot many minutes to lay out); `error` then says
// why.
std::string dot_to_svg(const std::string& dot, std::string* error = nullptr, double timeout_seconds = 60);
// Whether `dot` can be found on PATH.
bool graphviz_available();

// Text made safe inside a double-quoted DOT string (quotes, backslashes, newlines as \n).
std::string dot_escape(const std::string& s);

}  // namespace volt::jit
