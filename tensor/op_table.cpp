#include <volt/tensor/op_table.h>

#include <cstddef>

#include <volt/tensor/error.h>

namespace volt {

namespace {
const OpInfo kOps[] = {
#define VOLT_OP_INFO(name, kind, ...) {#name, OpKind::kind, #__VA_ARGS__},
    VOLT_OPS(VOLT_OP_INFO)
#undef VOLT_OP_INFO
};
static_assert(sizeof(kOps) / sizeof(kOps[0]) == static_cast<size_t>(OpId::kCount));
}  // namespace

const OpInfo& op_info(OpId op) {
  // kCount is what an OpCall names before it is set (a fused region's call is unused).
  VOLT_CHECK(op < OpId::kCount, "op_table", "an OpCall naming no op (id " << static_cast<int>(op) << ")");
  return kOps[static_cast<size_t>(op)];
}

}  // namespace volt
