// Why the lazy device compiled a graph: the first difference from the last one.
#include <volt/jit/lazy/describe.h>

#include <algorithm>

namespace volt::lazy::detail {

std::string OperandDesc::str() const {
  switch (kind) {
    case Node: return "node " + std::to_string(node) + (output ? " output " + std::to_string(output) : "");
    case Input: return "input d" + std::to_string(input) + " " + dtype + shape;
    case RuntimeScalar: return "a run-time " + dtype + " scalar";
    case Constant: return constant;
    case None: return "none";
  }
  return "?";
}

namespace {

std::string where(const NodeDesc& n, size_t i) { return n.op + " (node " + std::to_string(i) + ")"; }

// How operand k of node i changed, or empty when it did not.
std::string operand_change(const NodeDesc& n, size_t i, size_t k, const OperandDesc& was, const OperandDesc& now) {
  const std::string head = where(n, i) + ": operand " + std::to_string(k) + " ";
  if (was.kind == now.kind && was.kind == OperandDesc::Input) {
    if (was.shape == now.shape && was.dtype == now.dtype)
      return was.input == now.input ? ""
                                    : head + "is input d" + std::to_string(now.input) + ", was d" +
                                          std::to_string(was.input) + " (the graph shares its inputs differently)";
    if (was.shape == now.shape) return head + "has dtype " + now.dtype + ", was " + was.dtype;
    if (was.dtype == now.dtype) return head + "has shape " + now.shape + ", was " + was.shape;
    return head + "is " + now.dtype + now.shape + ", was " + was.dtype + was.shape;
  }
  if (was.kind == now.kind && was.kind == OperandDesc::RuntimeScalar) {
    return was.dtype == now.dtype ? "" : head + "is a run-time " + now.dtype + " scalar, was " + was.dtype;
  }
  const std::string a = was.str(), b = now.str();
  return a == b ? "" : head + "is " + b + ", was " + a;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

}  // namespace

std::string compile_reason(const GraphDesc& was, const GraphDesc& now) {
  const size_t common = std::min(was.nodes.size(), now.nodes.size());
  for (size_t i = 0; i < common; ++i) {
    const NodeDesc &a = was.nodes[i], &b = now.nodes[i];
    if (a.op != b.op) return "node " + std::to_string(i) + " is " + b.op + ", was " + a.op;
    if (a.operands.size() != b.operands.size())
      return where(b, i) + " takes " + std::to_string(b.operands.size()) + " operands, was " +
             std::to_string(a.operands.size());
    for (size_t k = 0; k < a.operands.size(); ++k)
      if (std::string c = operand_change(b, i, k, a.operands[k], b.operands[k]); !c.empty()) return c;
    if (a.attrs != b.attrs)
      return where(b, i) + ": " + (b.attrs.empty() ? "no attributes" : b.attrs) + ", was " +
             (a.attrs.empty() ? "no attributes" : a.attrs);
    if (a.outputs != b.outputs) return where(b, i) + ": output " + join(b.outputs) + ", was " + join(a.outputs);
  }
  if (was.nodes.size() != now.nodes.size())
    return "the graph has " + std::to_string(now.nodes.size()) + " nodes, was " + std::to_string(was.nodes.size()) +
           " (the first " + std::to_string(common) + " agree)";
  if (was.roots.size() != now.roots.size())
    return "the graph computes " + std::to_string(now.roots.size()) + " values, was " + std::to_string(was.roots.size());
  if (was.roots != now.roots) return "the graph computes " + join(now.roots) + ", was " + join(was.roots);
  return "the same graph as the last compiled one (it was dropped from the cache, or the cache was cleared)";
}

}  // namespace volt::lazy::detail
