// Chapter 7, the lazy device (docs/tutorial/07_lazy.md): ops on kLazy tensors
// record a graph; it is compiled through the jit's pipeline and run when a
// value is needed or at mark_step().
#include <iostream>
#include <string>

#include <volt/jit/lazy/lazy.h>
#include <volt/tensor/ops.h>

using namespace volt;

namespace {

// The counters, without the timings (they differ from run to run).
void counters() {
  for (const std::string& name : lazy::metrics::counter_names())
    if (name.rfind("Time.", 0) != 0) std::cout << "  " << name << ": " << lazy::metrics::counter_value(name) << "\n";
}

}  // namespace

int main() {
  lazy::metrics::reset();
  Tensor w = Tensor::from_vector<float>({1, 2, 3}).to(kLazy);
  Tensor x = Tensor::from_vector<float>({0.5f, -1, 2}).to(kLazy);
  Tensor y = relu(w * x + 1.0);  // recorded, not run
  std::cout << "y holds a value: " << std::boolalpha << lazy::has_value(y) << "\n";
  std::cout << "y's pending graph:\n" << lazy::dump(y);
  std::cout << "y = " << y << "\n";  // printing needs the value: the graph runs
  counters();

  // A training-like loop: the same graph each step compiles once.
  for (int step = 0; step < 3; ++step) {
    w = w - (w * x) * 0.1;
    lazy::mark_step();
  }
  std::cout << "\nafter 3 steps of w = w - (w * x) * 0.1 with mark_step(): w = " << w << "\n";
  counters();
  std::cout << "\nThe last compiled graph's traces:\n";
  for (const jit::Trace& t : lazy::last_compiled_traces()) std::cout << "  " << t.provenance << "\n";
  std::cout << lazy::last_compiled_traces().back().str();
  return 0;
}
