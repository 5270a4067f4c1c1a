// Grad mode lives at the dispatch point (tensor/dispatch.h); these are the names
// autograd users reach for.
#pragma once
#include <volt/tensor/dispatch.h>

namespace volt {
using NoGrad = NoGradGuard;
}  // namespace volt
