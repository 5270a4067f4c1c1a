#include <volt/jit/interpreter.h>

#include <algorithm>
#include <memory>

#include <volt/jit/executor.h>

namespace volt::jit {

// A trace prepared for repeated runs: each step is one executor call.
struct Program {
  struct Step {
    BoundSymbol b;
    const Executor* executor;
    std::vector<int64_t> args, outs, del;  // proxy ids
  };
  std::vector<Step> steps;
  std::vector<int64_t> inputs, outputs;
  size_t slots = 0;
};

namespace {

std::shared_ptr<const Program> build_program(const Trace& t) {
  auto p = std::make_shared<Program>();
  int64_t max_id = -1;
  auto note = [&](const Tensor& x) {
    max_id = std::max(max_id, id_of(x));
    return id_of(x);
  };
  for (const Tensor& x : t.inputs) p->inputs.push_back(note(x));
  auto add = [&](const BoundSymbol& b, const Executor* ex) {
    Program::Step s{b, ex, {}, {}, {}};
    for (const Tensor& a : tensor_args(b)) s.args.push_back(note(a));
    for (const Tensor& o : b.outputs) s.outs.push_back(note(o));
    p->steps.push_back(std::move(s));
  };
  const Executor* eager = &eager_executor();
  for (const BoundSymbol& b : t.bsyms) {
    if (b.executor && b.executor != eager) {
      add(b, b.executor);  // a fusion region, or an op a user's executor runs
    } else {
      for (const BoundSymbol& prim : flatten_to_prims({b})) add(prim, eager);
    }
    for (const Tensor& d : b.del_after) p->steps.back().del.push_back(note(d));
  }
  for (const Tensor& o : t.outputs) p->outputs.push_back(note(o));
  p->slots = static_cast<size_t>(max_id + 1);
  return p;
}

}  // namespace

void prepare(Trace& t) { t.program = build_program(t); }

std::vector<Tensor> interpret(const Trace& trace, const std::vector<Tensor>& inputs,
                              const PhiloxState* rng_in, PhiloxState* rng_used) {
  VOLT_CHECK(inputs.size() == trace.inputs.size(), trace.name,
             "expected " << trace.inputs.size() << " inputs, got " << inputs.size());
  std::shared_ptr<const Program> prog = trace.program ? trace.program : build_program(trace);
  std::vector<Tensor> regs(prog->slots);
  for (size_t i = 0; i < inputs.size(); ++i) regs[static_cast<size_t>(prog->inputs[i])] = inputs[i];
  PhiloxState rng = rng_in ? *rng_in : trace.rng_total ? rng_reserve(trace.rng_total) : PhiloxState{};
  if (rng_used) *rng_used = rng;
  std::vector<Tensor> args;
  for (const Program::Step& s : prog->steps) {
    args.clear();
    for (int64_t id : s.args) {
      VOLT_CHECK(regs[static_cast<size_t>(id)].defined(), trace.name, "value used before it was computed");
      args.push_back(regs[static_cast<size_t>(id)]);
    }
    std::vector<Tensor> outs = s.executor->execute(s.b, args, rng);
    for (size_t i = 0; i < s.outs.size() && i < outs.size(); ++i) regs[static_cast<size_t>(s.outs[i])] = outs[i];
    for (int64_t id : s.del) regs[static_cast<size_t>(id)] = Tensor();
  }
  std::vector<Tensor> results;
  results.reserve(prog->outputs.size());
  for (int64_t id : prog->outputs) {
    VOLT_CHECK(regs[static_cast<size_t>(id)].defined(), trace.name, "output was never computed");
    results.push_back(regs[static_cast<size_t>(id)]);
  }
  return results;
}

}  // namespace volt::jit
