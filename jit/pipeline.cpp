#include <volt/jit/pipeline.h>

#include <volt/jit/check.h>
#include <volt/jit/rewrites/conv_relu.h>
#include <volt/jit/del_last_used.h>
#include <volt/jit/fusion.h>
#include <volt/jit/rewrites/gemm_epilogue.h>
#include <volt/jit/passes.h>
#include <volt/jit/interpreter.h>

namespace volt::jit {

void compile_pipeline(std::vector<Trace>& list, ProxyNames& names, const std::vector<Executor*>& executors) {
  conv_relu_pass(list);
  list.push_back(claim_pass(list.back(), names, executors));
  list.push_back(fusion_pass(list.back()));
  // The elementwise work after a CPU matmul or linear in that GEMM's store.
  Trace fused = gemm_epilogue_pass(list.back());
  auto c0 = Clock::now();
  compile_fusions(fused);
  fused.millis += ms_since(c0);
  list.push_back(std::move(fused));
  list.push_back(del_last_used_pass(list.back()));
  prepare(list.back());
  for (const Trace& t : list) check_trace(t);
}

}  // namespace volt::jit
