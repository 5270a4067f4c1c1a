// Executor management, as Thunder's thunder.extend: look executors up by name,
// list them, and choose the default ones every jit uses.
//
//   OperatorExecutor myex("myex", "0.1");
//   jit::register_executor(myex);
//   jit::get_executor("myex");              // &myex
//   jit::add_default_executor(myex);        // every jit made from now on tries it first
//   jit::remove_default_executor(myex);
//
// A jit runs with its own executors (JitOptions::executors) followed by the
// defaults in the order get_default_executors() gives them (eager is always
// there, last); the list is fixed when the jit is made.  An operator that an
// executor registered runs only under a jit that has that executor: otherwise
// compiling stops with an error naming the executor to add.
#pragma once
#include <string>
#include <vector>

#include <volt/jit/executor.h>

namespace volt::jit {

// The registered executor of that name (built-in ones included), or nullptr.
Executor* get_executor(const std::string& name);
// Every registered executor, the defaults first.
std::vector<Executor*> get_all_executors();
// The executors every jit uses after its own, in priority order.
std::vector<Executor*> get_default_executors();
// Makes `ex` a default, first in priority (and registers it).  An executor
// leaves the defaults when it is destroyed.
void add_default_executor(Executor& ex);
// Takes `ex` out of the defaults; eager, which runs whatever nobody claimed, stays.
void remove_default_executor(Executor& ex);

// What an implementation's checker and transforms receive for a call: its
// arguments, then the options volt keeps in the call's attributes, in the
// order the op's signature has them: cross_entropy(logits, target, reduction,
// ignore_index, label_smoothing), nll_loss(logp, target, reduction,
// ignore_index), cross_entropy_backward(g, logits, target, reduction,
// ignore_index, label_smoothing), scaled_dot_product_attention(q, k, v, causal,
// scale, dropout_p, rng_offset) and its backward (g, q, k, v, the same), with rng_offset where its dropout's draws start
// among the program's, embedding(weight, index, padding_idx) with padding_idx
// -1 when there is none.  Reduction is its int value (Reduction's).
std::vector<Value> executor_arguments(const OpCall& c);

// ---- used by OperatorExecutor and the claim pass

// Which executor registered custom op `id` (nullptr: none, e.g. volt's own).
void note_operator_owner(int64_t id, const Executor& ex);
const Executor* operator_owner(int64_t id);
// An executor being destroyed: its operators have no owner to run them any more.
void forget_operators_of(const Executor& ex);
// Fails, naming the executor to add, when the trace calls an operator whose
// executor is not in `executors`.
void check_operator_executors(const std::vector<BoundSymbol>& bsyms, const std::vector<Executor*>& executors);

}  // namespace volt::jit
