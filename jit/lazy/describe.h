// Why the lazy device compiled a graph (private to jit/lazy): a graph in plain
// words (ops, operand shapes and dtypes, attributes), and the first difference
// between the last compiled graph and a new one, as VOLT_LOG=lazy and
// lazy::last_compile_reason() report it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace volt::lazy::detail {

struct OperandDesc {
  enum Kind { Node, Input, RuntimeScalar, Constant, None } kind = None;
  int64_t node = -1;       // Node: which node's output (its index in the graph)
  int output = 0;          // Node: which output
  int64_t input = -1;      // Input: which graph input (d0, d1, ...)
  std::string dtype;       // Input, RuntimeScalar
  std::string shape;       // Input: "[64, 10]"
  std::string constant;    // Constant: its value as printed
  std::string str() const;  // "node 3", "input d0 f32[64, 10]", "a run-time f32 scalar", "2.5", "none"
};

struct NodeDesc {
  std::string op;
  std::vector<OperandDesc> operands;
  std::string attrs;                 // "dims=[1], keepdim" and the like; empty when none
  std::vector<std::string> outputs;  // "f32[64, 10]"
};

struct GraphDesc {
  std::vector<NodeDesc> nodes;  // in the graph's order
  std::vector<std::string> roots;  // the values computed: "node 12", "input d3"
};

// The first way `now` differs from `was`, in words: which op, which operand,
// and what changed (shape, dtype, the op itself, an attribute, the graph's size).
std::string compile_reason(const GraphDesc& was, const GraphDesc& now);

}  // namespace volt::lazy::detail
