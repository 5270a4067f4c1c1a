// cached_cast: a parameter's cast under autocast, served from the cast cache.
//
// After the autocast transform a jitted module's trace converts every f32
// parameter to the low type on every call:
//
//   t3 = volt.convert_element_type(_0_weight, bf16)   # t3: "cpu bf16[784, 784]"
//
// The pass "Cached parameter casts" turns each such line whose argument is a
// parameter (an input the jit captured from the module) into
//
//   t3 = cached_cast(_0_weight, dtype=bf16)           # t3: "cpu bf16[784, 784]"
//
// which, when it runs, hands out the parameter's copy from the cast cache of
// eager autocast (tensor/autocast.h): made once per value of the parameter,
// keyed on its storage, layout and version, so any write to the parameter
// (an in-place op, copy_, mark_modified) makes the next call cast again, and
// written by Adam/AdamW in the pass that updates the weight, so the next
// call casts nothing.  A tensor the cache does not keep (a parameter that
// does not require grad, one on another device, a call made inside another
// trace) is cast as convert_element_type would cast it.  Its gradient is a
// cast back, as the cast's.
#pragma once
#include <vector>

#include <volt/jit/trace.h>

namespace volt::jit {

// The trace with the casts of its first `num_params` inputs to bf16/f16
// served from the cache (or the trace as it is, when it has none).
Trace cached_casts_pass(const Trace& t, size_t num_params);

// Whether `b` is a cached_cast line.
bool is_cached_cast(const BoundSymbol& b);

}  // namespace volt::jit
