// Delete-last-used: marks, after each bound symbol, the values used for the
// last time there (printed as `del [t3, t4]`), so the interpreter drops them
// and their memory goes back early.
#pragma once
#include <volt/jit/trace.h>

namespace volt::jit {

Trace del_last_used_pass(const Trace& t);

}  // namespace volt::jit
