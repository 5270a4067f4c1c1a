// Lets a printed tensor show its grad_fn, as PyTorch's does: tensor(6., grad_fn=<sum_backward>).
#include <volt/autograd/node.h>

namespace volt::autograd {
namespace {

std::string node_name(const Node& node) { return node.name(); }

const bool installed = [] {
  set_grad_fn_namer(&node_name);
  return true;
}();

}  // namespace
}  // namespace volt::autograd
