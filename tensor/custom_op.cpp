#include <volt/tensor/custom_op.h>

#include <deque>
#include <mutex>

namespace volt {

namespace {
// A deque keeps references stable while later ops are registered.
std::deque<CustomOpDef>& registry() {
  static std::deque<CustomOpDef> r;
  return r;
}
std::mutex g_mutex;
}  // namespace

CustomOpDef::MetaFn meta_like_first_argument(std::string op) {
  return [op = std::move(op)](const std::vector<Value>& args) {
    VOLT_CHECK(!args.empty() && args[0].is_tensor && args[0].tensor.defined(), op,
               "expected a defined tensor as the first argument (the output is shaped like it)");
    const Tensor& t = args[0].tensor;
    return std::vector<TensorMeta>{{t.sizes(), t.dtype(), t.device()}};
  };
}

int64_t register_custom_op(CustomOpDef def) {
  VOLT_CHECK(!def.name.empty(), "register_custom_op", "an op needs a name");
  VOLT_CHECK(def.decomposition || def.meta, def.name,
             "an op needs either a decomposition (written with volt ops) or a meta function");
  std::lock_guard<std::mutex> lock(g_mutex);
  registry().push_back(std::move(def));
  return static_cast<int64_t>(registry().size()) - 1;
}

const CustomOpDef& custom_op(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  VOLT_CHECK(id >= 0 && id < static_cast<int64_t>(registry().size()), "custom",
             "no custom op with id " << id);
  return registry()[static_cast<size_t>(id)];
}

OpCall custom_call(int64_t id, std::vector<Value> args) {
  OpCall c{OpId::custom, std::move(args), {}};
  c.attrs.custom = id;
  return c;
}

const char* op_name(const OpCall& call) {
  return call.op == OpId::custom ? custom_op(call.attrs.custom).name.c_str() : op_name(call.op);
}

bool is_prim(const OpCall& call) {
  return call.op == OpId::custom ? !custom_op(call.attrs.custom).decomposition : is_prim(call.op);
}

}  // namespace volt
