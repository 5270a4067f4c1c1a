#include <volt/jit/trace.h>

#include <sstream>
#include <unordered_set>

#include <volt/tensor/cross_entropy.h>
#include <volt/tensor/custom_op.h>

namespace volt::jit {

std::string ProxyNames::name(const Tensor& t) const {
  int64_t id = t.impl()->proxy_id;
  if (id < 0 || id >= static_cast<int64_t>(names_.size())) return "<?>";
  return names_[id];
}

void ProxyNames::set(const Tensor& t, std::string name) { names_.at(t.impl()->proxy_id) = std::move(name); }

Tensor ProxyNames::make(const TensorMeta& m, const void* owner, std::string name) {
  Tensor p = Tensor::proxy(m.sizes, m.dtype, m.device);
  p.impl()->proxy_id = static_cast<int64_t>(names_.size());
  p.impl()->proxy_owner = owner;
  if (name.empty()) name = std::to_string(next_++).insert(0, 1, 't');
  names_.push_back(std::move(name));
  return p;
}

namespace {

std::string shape_tuple(const std::vector<int64_t>& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

std::string type_comment(const ProxyNames& names, const Tensor& t) {
  return names.name(t) + ": \"" + t.meta_str() + "\"";
}

// "prims.gt(t0, 0.0)" or "volt.linear(input, _0_weight, _0_bias)": prims
// under prims., volt's ops under volt. (as Thunder names torch's), operators
// registered by an executor under their own name.
// `scalar_names`: per argument, the name a saved scalar prints as ("" or
// missing: its literal value).
std::string call_str(const ProxyNames& names, const OpCall& c, bool prim_prefix,
                     const std::vector<std::string>& scalar_names = {}) {
  std::ostringstream os;
  const char* qualifier = c.op == OpId::custom ? "" : prim_prefix ? "prims." : "volt.";
  // The prim that makes a contiguous copy is what users call `contiguous`.
  os << qualifier << (c.op == OpId::copy ? std::string("contiguous") : op_name(c)) << "(";
  const Attrs& at = c.attrs;
  bool first = true;
  auto sep = [&] {
    if (!first) os << ", ";
    first = false;
  };
  const CustomOpDef* custom = c.op == OpId::custom ? &custom_op(at.custom) : nullptr;
  for (size_t i = 0; i < c.args.size(); ++i) {
    const Value& v = c.args[i];
    sep();
    if (custom && i < custom->arg_names.size() && !custom->arg_names[i].empty()) os << custom->arg_names[i] << "=";
    std::string shown = v.is_tensor                                         ? ""
                        : i < scalar_names.size() && !scalar_names[i].empty() ? scalar_names[i]
                        : custom && custom->scalar_repr                      ? custom->scalar_repr(i, v.scalar)
                                                                             : "";
    os << (v.is_tensor ? names.name(v.tensor) : shown.empty() ? v.scalar.repr() : shown);
  }
  switch (op_info(c.op).kind) {
    case OpKind::Convert: sep(); os << dtype_name(at.dtype); break;
    case OpKind::Matmul:
      if (c.op == OpId::matmul && at.flag) { sep(); os << "out_dtype=f32"; }
      break;
    case OpKind::Random:
      sep();
      os << shape_tuple(at.ints) << ", " << python_float_repr(at.a) << ", " << python_float_repr(at.b)
         << ", device=" << at.device.str() << ", dtype=" << dtype_name(at.dtype)
         << ", rng_offset=" << at.offset;
      break;
    case OpKind::Factory:
      sep();
      os << shape_tuple(at.ints) << ", " << python_float_repr(at.a);
      if (c.op == OpId::arange) os << ", step=" << python_float_repr(at.b);
      os << ", device=" << at.device.str()
         << ", dtype=" << dtype_name(at.dtype);
      break;
    case OpKind::View:
    case OpKind::Pad:
      sep();
      if (c.op == OpId::narrow || c.op == OpId::pad)
        os << at.ints[0] << ", " << at.ints[1] << ", " << at.ints[2];
      else os << shape_tuple(at.ints);
      break;
    case OpKind::Reduce: sep(); os << shape_tuple(at.ints) << ", keepdim=" << (at.flag ? "True" : "False"); break;
    case OpKind::Window:
      // {kh, kw, sh, sw, ph, pw, dh, dw}, then col2im's output height and width.
      if (at.ints.size() >= 8) {
        sep();
        os << "kernel_size=(" << at.ints[0] << ", " << at.ints[1] << "), stride=(" << at.ints[2] << ", " << at.ints[3]
           << "), padding=(" << at.ints[4] << ", " << at.ints[5] << "), dilation=(" << at.ints[6] << ", "
           << at.ints[7] << ")";
        if (at.ints.size() >= 10) os << ", output_size=(" << at.ints[8] << ", " << at.ints[9] << ")";
        if (c.op == OpId::convolution && at.flag) os << ", relu=True";
      }
      break;
    case OpKind::Composite:
      if (c.op == OpId::dropout) { sep(); os << python_float_repr(at.a); }
      if (c.op == OpId::softmax || c.op == OpId::log_softmax) { sep(); os << "dim=" << at.ints[0]; }
      if (c.op == OpId::mean || c.op == OpId::var) { sep(); os << shape_tuple(at.ints); }
      if (c.op == OpId::gelu && at.flag) { sep(); os << "approximate='tanh'"; }
      if (c.op == OpId::layer_norm) { sep(); os << "eps=" << python_float_repr(at.a); }
      if (c.op == OpId::embedding && !at.ints.empty()) { sep(); os << "padding_idx=" << at.ints[0]; }
      if (c.op == OpId::scaled_dot_product_attention || c.op == OpId::scaled_dot_product_attention_backward) {
        sep();
        os << "is_causal=" << (at.flag ? "True" : "False") << ", scale=" << python_float_repr(at.a)
           << ", dropout_p=" << python_float_repr(at.b);
      }
      if (c.op == OpId::cross_entropy || c.op == OpId::cross_entropy_backward || c.op == OpId::nll_loss) {
        // As PyTorch's keyword arguments, those that differ from the defaults.
        const CrossEntropyOptions o = cross_entropy_options(at), d;
        if (o.reduction != d.reduction) { sep(); os << "reduction='" << reduction_name(o.reduction) << "'"; }
        if (o.ignore_index != d.ignore_index) { sep(); os << "ignore_index=" << o.ignore_index; }
        if (o.label_smoothing != d.label_smoothing) { sep(); os << "label_smoothing=" << python_float_repr(o.label_smoothing); }
      }
      break;
    default: break;
  }
  os << ")";
  return os.str();
}

// A Python tuple: "()", "(a,)", "(a, b)".
std::string tuple_str(const ProxyNames& names, const std::vector<Tensor>& ts, size_t from, size_t to) {
  std::string r = "(";
  for (size_t i = from; i < to; ++i) r += (i > from ? ", " : "") + names.name(ts[i]);
  return r + (to - from == 1 ? ",)" : ")");
}

// One value by its name, several as a tuple.
std::string outputs_str(const ProxyNames& names, const std::vector<Tensor>& outs) {
  if (outs.size() == 1) return names.name(outs[0]);
  return tuple_str(names, outs, 0, outs.size());
}

// `used`: the proxies some top-level line reads or the trace returns.  An
// output of a multi-output line that nothing uses prints as `_`, and the part
// of the decomposition that only computes it is left out, as Thunder does.
void print_bsym(std::ostream& os, const ProxyNames& names, const BoundSymbol& b, int depth,
                const std::unordered_set<int64_t>* used = nullptr) {
  std::string indent(2 + 2 * depth, ' ');
  if (b.is_fusion()) {
    // A fusion returns a tuple, even of one value.
    os << indent << tuple_str(names, b.outputs, 0, b.outputs.size()) << " = " << b.fusion_name << "(";
    for (size_t i = 0; i < b.fusion_inputs.size(); ++i) os << (i ? ", " : "") << names.name(b.fusion_inputs[i]);
    os << ")\n";
    for (const BoundSymbol& s : b.subsymbols) print_bsym(os, names, s, depth + 1);
  } else {
  bool as_prim = b.call.op != OpId::custom && is_prim(b.call.op) && b.subsymbols.empty();
  std::unordered_set<int64_t> unused;
  if (used && b.outputs.size() > 1)
    for (const Tensor& o : b.outputs)
      if (!used->count(id_of(o))) unused.insert(id_of(o));
  std::string outs = outputs_str(names, b.outputs);
  if (!unused.empty()) {  // only multi-output lines have unused outputs
    outs = "(";
    for (const Tensor& o : b.outputs)
      outs += (outs.size() > 1 ? ", " : "") + (unused.count(id_of(o)) ? std::string("_") : names.name(o));
    outs += ")";
  }
  os << indent << (depth > 0 ? "# " : "") << outs << " = " << call_str(names, b.call, as_prim, b.scalar_names);
  if (b.outputs.size() == 1) os << "  # " << type_comment(names, b.outputs[0]);
  os << "\n";
  // An executor's own prim called at top level holds just itself: one line says it.
  const bool just_itself = b.call.op == OpId::custom && b.subsymbols.size() == 1 &&
                           b.subsymbols[0].call.op == OpId::custom && b.subsymbols[0].subsymbols.empty() &&
                           b.subsymbols[0].call.attrs.custom == b.call.attrs.custom;
  for (const BoundSymbol& s : b.subsymbols) {
    if (just_itself) break;
    bool only_unused = !s.outputs.empty();
    for (const Tensor& o : s.outputs) only_unused = only_unused && unused.count(id_of(o));
    if (!only_unused) print_bsym(os, names, s, depth + 1);
  }
  }
  if (!b.del_after.empty()) {
    os << indent << "del [";
    for (size_t i = 0; i < b.del_after.size(); ++i) os << (i ? ", " : "") << names.name(b.del_after[i]);
    os << "]\n";
  }
}

std::string names_list(const ProxyNames& names, const std::vector<Tensor>& ts, size_t from, size_t to) {
  std::string r;
  for (size_t i = from; i < to; ++i) r += (i > from ? ", " : "") + names.name(ts[i]);
  return r;
}

}  // namespace

std::string Trace::str() const {
  VOLT_CHECK(this->names, name, "a trace without its names table cannot print (set Trace::names where it is made)");
  const ProxyNames* names = this->names.get();
  std::ostringstream os;
  os << "# Constructed by " << provenance << " (took " << static_cast<long long>(millis)
     << " milliseconds)\n";
  if (kind == Kind::Backward) {
    // Saved values and cotangents arrive as two collections, unpacked first.
    os << "def " << name << "(saved_for_backward, cotangents):\n"
       << "  # saved_for_backward: \"Collection\"\n  # cotangents: \"Collection\"\n"
       << "  C0, C1, = saved_for_backward\n"
       << "  " << names_list(*names, inputs, split, inputs.size()) << ", = cotangents\n";
    if (split > 0) os << "  " << names_list(*names, inputs, 0, split) << ", = C0\n";
    if (!scalars.empty()) {
      os << " ";
      for (const NamedScalar& s : scalars) os << " " << s.name << ",";
      os << " = C1\n";
    }
  } else {
    os << "def " << name << "(" << names_list(*names, inputs, 0, inputs.size()) << "):\n";
  }
  for (const Tensor& t : inputs) os << "  # " << type_comment(*names, t) << "\n";
  // A guard names the lines that compute its value, so the comment reads
  // on its own: the trace's body never defines those values.
  for (const Guard& g : guards) {
    os << "  # guard: " << names->name(g.value) << ".item() == " << python_float_repr(g.expected)
       << " (other values trace again)" << (g.bsyms.empty() ? "" : ", where") << "\n";
    for (const BoundSymbol& b : g.bsyms)
      os << "  #   " << outputs_str(*names, b.outputs) << " = " << call_str(*names, b.call, true) << "\n";
  }
  std::unordered_set<int64_t> used;
  for (const BoundSymbol& b : bsyms)
    for (const Tensor& t : tensor_args(b)) used.insert(id_of(t));
  for (const Tensor& t : outputs) used.insert(id_of(t));
  for (const BoundSymbol& b : bsyms) print_bsym(os, *names, b, 0, &used);
  if (kind == Kind::AugmentedForward) {
    // Thunder's shape: the results, then what backward needs as two
    // collections, tensors (C0) and scalars (C1, by value).
    std::vector<Tensor> results(outputs.begin(), outputs.begin() + static_cast<std::ptrdiff_t>(split));
    std::string c1 = "(";
    for (size_t i = 0; i < scalars.size(); ++i) c1 += (i ? ", " : "") + scalars[i].value.repr();
    c1 += scalars.size() == 1 ? ",)" : ")";
    os << "  return {'output': " << outputs_str(*names, results) << ", 'flat_args': ["
       << names_list(*names, inputs, 0, inputs.size()) << "], 'flat_output': " << tuple_str(*names, outputs, 0, split)
       << "}, (" << tuple_str(*names, outputs, split, outputs.size()) << ", " << c1 << ")\n";
  } else {
    os << "  return " << outputs_str(*names, outputs) << "\n";
  }
  return os.str();
}

std::vector<BoundSymbol> flatten_to_prims(const std::vector<BoundSymbol>& bsyms) {
  std::vector<BoundSymbol> out;
  for (const BoundSymbol& b : bsyms) {
    if (b.subsymbols.empty() || b.is_fusion()) {
      BoundSymbol p = b;
      p.top_level_prim = false;
      out.push_back(std::move(p));
    } else {
      auto sub = flatten_to_prims(b.subsymbols);
      out.insert(out.end(), sub.begin(), sub.end());
    }
  }
  return out;
}

}  // namespace volt::jit

namespace volt::jit {

void substitute(std::vector<BoundSymbol>& bsyms, const std::unordered_map<int64_t, Tensor>& by_id) {
  auto fix = [&](Tensor& t) {
    if (!t.defined()) return;
    if (auto it = by_id.find(id_of(t)); it != by_id.end()) t = it->second;
  };
  for (BoundSymbol& b : bsyms) {
    for (Value& v : b.call.args)
      if (v.is_tensor) fix(v.tensor);
    for (Tensor& t : b.outputs) fix(t);
    for (Tensor& t : b.fusion_inputs) fix(t);
    for (Tensor& t : b.del_after) fix(t);
    substitute(b.subsymbols, by_id);
  }
}

void inline_saved_scalars(std::vector<BoundSymbol>& bsyms) {
  for (BoundSymbol& b : bsyms) {
    b.scalar_names.clear();
    inline_saved_scalars(b.subsymbols);
  }
}

std::vector<Tensor> tensor_args(const BoundSymbol& b) {
  if (b.is_fusion()) return b.fusion_inputs;
  std::vector<Tensor> r;
  for (const Value& v : b.call.args)
    if (v.is_tensor && v.tensor.defined()) r.push_back(v.tensor);
  return r;
}

}  // namespace volt::jit
