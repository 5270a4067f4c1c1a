#include <volt/tensor/op_table.h>

#include <cstddef>

namespace volt {

namespace {
const OpInfo kOps[] = {
#define VOLT_OP_INFO(name, kind, ...) {#name, OpKind::kind, #__VA_ARGS__},
    VOLT_OPS(VOLT_OP_INFO)
#undef VOLT_OP_INFO
};
static_assert(sizeof(kOps) / sizeof(kOps[0]) == static_cast<size_t>(OpId::kCount));
}  // namespace

const OpInfo& op_info(OpId op) { return kOps[static_cast<size_t>(op)]; }

}  // namespace volt
