// The CPU kernel of the fused softmax cross-entropy (forward and backward).
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include <volt/tensor/cpu/kernels.h>
#include <volt/tensor/cpu/threads.h>
#include <volt/tensor/cross_entropy.h>
#include <volt/tensor/op_exprs.h>
#include <volt/tensor/ops.h>

namespace volt {

// The row functions of softmax cross-entropy, shared with the CUDA kernels.
// exp is the one the CPU's other kernels call (tensor/math_functions.inc), so
// that this kernel and a decomposed log_softmax (the jit's row kernels) agree.
namespace ce {
template <class T>
inline auto exp(T x) { return op_exprs::volt_exp(x); }
using std::log;
#include <volt/tensor/cross_entropy.inc>
}  // namespace ce

namespace cpu {

// cross_entropy (logits, target) -> loss, or cross_entropy_backward
// (g, logits, target) -> gradient of the logits: one pass over the rows,
// rows split over the threads (each row's result is the same whoever runs it;
// the reduction adds the row losses in row order).
void cross_entropy_kernel(const OpCall& call, Tensor& out) {
  NoGradGuard no_grad;
  const size_t first = fused_logits_index(call.op);
  const bool backward = first == 1;
  const CrossEntropyOptions opt = cross_entropy_options(call.attrs);
  const Tensor x = call.args[first].tensor.contiguous();
  const Tensor& target = call.args[first + 1].tensor;
  const Tensor t = (target.dtype() == DType::i64 ? target : convert_element_type(target, DType::i64)).contiguous();
  const int64_t n = x.sizes()[0], c = x.sizes()[1];
  const int64_t* tp = static_cast<const int64_t*>(t.raw_data());
  const int64_t ignore = opt.ignore_index;
  int64_t count = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (tp[r] == ignore) continue;
    ++count;
    if (tp[r] >= 0 && tp[r] < c) continue;
    int64_t lo = tp[r], hi = tp[r];
    for (int64_t k = 0; k < n; ++k)
      if (tp[k] != ignore) lo = std::min(lo, tp[k]), hi = std::max(hi, tp[k]);
    VOLT_FAIL(op_name(call.op), "target values must lie in [0, " << c << "), got [" << lo << ", " << hi << "]");
  }
  const int64_t grain = std::max<int64_t>(1, 32768 / c);
  const double e = opt.label_smoothing;
  VOLT_DISPATCH_DTYPE(x.dtype(), [&] {
    if constexpr (std::is_floating_point_v<scalar_t>) {
      const scalar_t* xp = static_cast<const scalar_t*>(x.raw_data());
      scalar_t* o = static_cast<scalar_t*>(out.raw_data());
      if (!backward) {
        std::vector<double> rows(static_cast<size_t>(n), 0.0);
        cpu::parallel_for(n, grain, [&](int64_t b, int64_t end) {
          for (int64_t r = b; r < end; ++r)
            if (tp[r] != ignore) rows[r] = ce::volt_ce_row_loss(xp + r * c, c, tp[r], e);
        });
        if (opt.reduction == Reduction::None) {
          for (int64_t r = 0; r < n; ++r) o[r] = static_cast<scalar_t>(rows[r]);
          return;
        }
        double acc = 0;
        for (int64_t r = 0; r < n; ++r) acc += rows[r];
        o[0] = static_cast<scalar_t>(opt.reduction == Reduction::Sum ? acc : acc / static_cast<double>(count));
        return;
      }
      // The factor of each row: g (or g_i for None), over the rows counted for Mean.
      const Tensor& gt = call.args[0].tensor;
      Tensor gv;
      scalar_t scale = 0;
      if (opt.reduction == Reduction::None) {
        gv = (gt.dtype() == x.dtype() ? gt : convert_element_type(gt, x.dtype())).contiguous();
      } else {
        const scalar_t g = static_cast<scalar_t>(gt.item_double());
        scale = opt.reduction == Reduction::Sum ? g : static_cast<scalar_t>(g / static_cast<scalar_t>(count));
      }
      const scalar_t* gp = gv.defined() ? static_cast<const scalar_t*>(gv.raw_data()) : nullptr;
      cpu::parallel_for(n, grain, [&](int64_t b, int64_t end) {
        for (int64_t r = b; r < end; ++r) {
          if (tp[r] == ignore) {
            std::fill(o + r * c, o + (r + 1) * c, scalar_t(0));
            continue;
          }
          ce::volt_ce_row_grad(xp + r * c, c, tp[r], gp ? gp[r] : scale, e, o + r * c);
        }
      });
    }
  });
}

}  // namespace cpu
}  // namespace volt
