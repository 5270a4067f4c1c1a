// A lazy graph in words, and why the lazy device compiled a graph: the first
// difference from the last one.
#include <volt/jit/lazy/describe.h>

#include <algorithm>
#include <sstream>
#include <unordered_map>

#include <volt/jit/lazy/internal.h>

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

// ------------------------------------------------------------ a graph in words

std::string attrs_str(const Node& n) {
  const Attrs& a = n.attrs;
  std::ostringstream os;
  const OpKind kind = op_info(n.op).kind;
  if (!a.ints.empty()) {
    os << (n.op == OpId::permute ? "order" : n.op == OpId::narrow ? "dim, start, length"
           : kind == OpKind::Reduce ? "dims" : kind == OpKind::View || kind == OpKind::Random ? "shape"
           : kind == OpKind::Window ? "window" : "ints")
       << "=" << shape_str(a.ints);
  }
  auto sep = [&] { return os.tellp() > 0 ? ", " : ""; };
  if (a.a != 0) os << sep() << "a=" << a.a;
  if (a.b != 0) os << sep() << "b=" << a.b;
  if (kind == OpKind::Convert || kind == OpKind::Random) os << sep() << "dtype=" << dtype_name(a.dtype);
  if (a.flag) os << sep() << (kind == OpKind::Reduce ? "keepdim" : "flag");
  return os.str();
}

// The graph in words, for the compile reason.
GraphDesc describe_graph(const Graph& g) {
  std::unordered_map<const Node*, int64_t> node_index;
  std::unordered_map<const LazyValue*, int64_t> leaf_index;
  for (size_t i = 0; i < g.nodes.size(); ++i) node_index[g.nodes[i]] = static_cast<int64_t>(i);
  for (size_t i = 0; i < g.leaves.size(); ++i) leaf_index[g.leaves[i].get()] = static_cast<int64_t>(i);
  auto value_desc = [&](const ValuePtr& v) {
    OperandDesc d;
    if (v->node) {
      d.kind = OperandDesc::Node;
      d.node = node_index.at(v->node.get());
      d.output = v->output;
    } else {
      d.kind = OperandDesc::Input;
      d.input = leaf_index.at(v.get());
      d.dtype = dtype_name(v->meta.dtype);
      d.shape = shape_str(v->meta.sizes);
    }
    return d;
  };
  GraphDesc desc;
  for (const Node* n : g.nodes) {
    NodeDesc nd;
    nd.op = op_name(n->op);
    for (const Operand& o : n->operands) {
      OperandDesc d;
      if (o.kind == Operand::Value) {
        d = value_desc(o.value);
      } else if (o.kind == Operand::Scalar && o.runtime) {
        d.kind = OperandDesc::RuntimeScalar;
        d.dtype = dtype_name(o.runtime_dtype);
      } else if (o.kind == Operand::Scalar) {
        d.kind = OperandDesc::Constant;
        d.constant = o.scalar.repr();
      }
      nd.operands.push_back(std::move(d));
    }
    nd.attrs = attrs_str(*n);
    for (const TensorMeta& m : n->outputs) nd.outputs.push_back(dtype_name(m.dtype) + shape_str(m.sizes));
    desc.nodes.push_back(std::move(nd));
  }
  for (const ValuePtr& r : g.roots) desc.roots.push_back(value_desc(r).str());
  return desc;
}

}  // namespace volt::lazy::detail
