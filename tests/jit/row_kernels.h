// How a trace that runs treats row reductions (jit/codegen_rows.cpp): its
// row regions, and the row reductions left to run on their own.
#pragma once
#include <utility>
#include <vector>

#include <volt/jit/codegen.h>
#include <volt/jit/trace.h>

namespace volt::testing {

inline std::pair<int, int> row_kernels(const jit::Trace& t) {
  int regions = 0, alone = 0;
  for (const jit::BoundSymbol& b : t.bsyms) {
    if (jit::is_row_region(b)) ++regions;
    if (!b.is_fusion())
      for (const jit::BoundSymbol& p : b.subsymbols.empty() ? std::vector<jit::BoundSymbol>{b} : b.subsymbols)
        alone += jit::is_row_reduction(p) ? 1 : 0;
  }
  return {regions, alone};
}

}  // namespace volt::testing
