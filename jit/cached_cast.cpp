#include <volt/jit/cached_cast.h>

#include <unordered_set>

#include <volt/jit/passes.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/custom_op.h>
#include <volt/tensor/ops.h>

namespace volt::jit {

namespace {

DType low_of(const std::vector<Value>& v) { return static_cast<DType>(static_cast<int>(v.at(1).scalar.value)); }

// cached_cast(x, dtype): x's copy in `dtype`.
int64_t cached_cast_op() {
  static const int64_t id = register_custom_op(CustomOpDef{
      .name = "cached_cast",
      .decomposition = nullptr,  // none: the kernel reads the cast cache
      .meta = [](const std::vector<Value>& v) {
        const Tensor& x = v.at(0).tensor;
        return std::vector<TensorMeta>{{x.sizes(), low_of(v), x.device()}};
      },
      .kernel = [](const std::vector<Value>& v) {
        const Tensor& x = v.at(0).tensor;
        const DType low = low_of(v);
        if (autocast_caches(x)) return std::vector<Tensor>{autocast_cached_value(x, low)};
        Attrs at;
        at.dtype = low;
        return run_prim(OpCall{OpId::convert_element_type, {x}, at});
      },
      // The gradient of a cast is a cast back.
      .vjp = [](const std::vector<Value>& in, const std::vector<Tensor>& g) {
        return std::vector<Tensor>{g.at(0).to(in.at(0).tensor.dtype()), Tensor()};
      },
      .arg_names = {"", "dtype"},
      .scalar_repr = [](size_t i, const Scalar& s) {
        return i == 1 ? std::string(dtype_name(static_cast<DType>(static_cast<int>(s.value)))) : std::string();
      }});
  return id;
}

}  // namespace

bool is_cached_cast(const BoundSymbol& b) {
  return !b.is_fusion() && b.call.op == OpId::custom && b.call.attrs.custom == cached_cast_op();
}

Trace cached_casts_pass(const Trace& t, size_t num_params) {
  auto t0 = Clock::now();
  std::unordered_set<int64_t> params;
  for (size_t i = 0; i < num_params && i < t.inputs.size(); ++i)
    if (t.inputs[i].dtype() == DType::f32) params.insert(id_of(t.inputs[i]));
  Trace r = t;
  bool changed = false;
  for (BoundSymbol& b : r.bsyms) {
    const BoundSymbol* p = sole_prim(b);
    if (!p || p->call.op != OpId::convert_element_type || !is_half(p->call.attrs.dtype) ||
        !p->call.args.at(0).is_tensor || !params.count(id_of(p->call.args[0].tensor)))
      continue;
    BoundSymbol c;
    c.call = custom_call(cached_cast_op(), {p->call.args[0].tensor, static_cast<int64_t>(p->call.attrs.dtype)});
    c.outputs = b.outputs;  // the same value: its readers stay as they are
    c.top_level_prim = true;
    c.scope = b.scope;
    b = std::move(c);
    changed = true;
  }
  if (!changed) return t;
  r.provenance = "Cached parameter casts";
  r.millis = ms_since(t0);
  return r;
}

}  // namespace volt::jit
