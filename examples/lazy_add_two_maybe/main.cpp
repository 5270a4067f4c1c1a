// The lazy device's safety guarantee, from PyTorch's Lazy Tensor tutorial.
//
// add_two_maybe branches on the value of a tensor.  A trace recorded once (the
// jit.trace way: volt::jit::trace_function, then interpret to replay it) keeps
// the branch it saw and silently gives the wrong answer for the other input.
// The lazy device reads `maybe` when the branch needs it, so both inputs are
// right, and each branch is its own graph with its own cache entry.
#include <iostream>

#include <volt/jit/lazy/lazy.h>
#include <volt/jit/tracer.h>
#include <volt/tensor/ops.h>

using namespace volt;

Tensor add_two_maybe(const Tensor& t, const Tensor& maybe) {
  if (maybe) return t + 2.0;
  return t;
}

int run() {
  Tensor t = Tensor::ones({1});
  Tensor maybe_false = Tensor::from_vector<bool>({false});
  Tensor maybe_true = Tensor::from_vector<bool>({true});

  std::cout << "eager:\n"
            << "  add_two_maybe(t, false) = " << add_two_maybe(t, maybe_false) << "\n"
            << "  add_two_maybe(t, true)  = " << add_two_maybe(t, maybe_true) << "\n\n";

  // A one-shot trace with maybe = false.  The tracer cannot see a value read
  // outside its proxies, so the branch taken now is baked into the program.
  Tensor maybe = maybe_false;
  auto traced = jit::trace_function(
      [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{maybe.item<bool>() ? in[0] + 2.0 : in[0]};
      },
      {t}, {"t"});
  std::cout << "one-shot trace, recorded with maybe = false:\n" << traced.trace.str();
  Tensor good = jit::interpret(traced.trace, {t})[0];
  maybe = maybe_true;
  Tensor bad = jit::interpret(traced.trace, {t})[0];
  std::cout << "  replayed with maybe = false: " << good << "  (right)\n"
            << "  replayed with maybe = true:  " << bad << "  (WRONG: expected 3)\n\n";

  // The lazy device: the same function, inputs moved to kLazy.
  Tensor t_lazy = t.to(kLazy);
  Tensor r_false = add_two_maybe(t_lazy, maybe_false.to(kLazy));
  Tensor r_true = add_two_maybe(t_lazy, maybe_true.to(kLazy));
  std::cout << "lazy device:\n"
            << "  pending graph of add_two_maybe(t, true):\n" << lazy::dump(r_true)
            << "  add_two_maybe(t, false) = " << r_false << "\n"
            << "  add_two_maybe(t, true)  = " << r_true << "\n";
  // A condition that is itself pending: bool() runs its graph first.
  Tensor x = Tensor::from_vector<float>({-1.0f}).to(kLazy);
  std::cout << "  add_two_maybe(x, x > 0) with x = -1: " << add_two_maybe(x, x > 0.0) << "\n";
  std::cout << "  add_two_maybe(t, t > 0) with t = 1:  " << add_two_maybe(t_lazy, t_lazy > 0.0) << "\n\n";
  std::cout << "lazy counters:\n" << lazy::metrics::report();
  const bool ok = r_false.item<float>() == 1.0f && r_true.item<float>() == 3.0f;
  return ok ? 0 : 1;
}

int main() {
  try {
    return run();
  } catch (const Error& e) {
    std::cerr << "lazy_add_two_maybe: " << e.what() << "\n";
    return 1;
  }
}
