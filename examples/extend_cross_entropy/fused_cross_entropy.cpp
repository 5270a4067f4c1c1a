#include "fused_cross_entropy.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include <volt/tensor/cpu/threads.h>
#ifdef VOLT_WITH_CUDA
#include <volt/tensor/cuda/nvrtc.h>
#endif

using namespace volt;

namespace fused_ce {

namespace {

// ---------------------------------------------------------------- the options

struct Options {
  Reduction reduction;
  int64_t ignore_index;
  double smoothing;
};

// args[first], [first + 1], [first + 2]: reduction (its int), ignore_index, label_smoothing.
Options options_at(const std::vector<Value>& args, size_t first) {
  return {static_cast<Reduction>(static_cast<int64_t>(args.at(first).scalar.value)),
          static_cast<int64_t>(args.at(first + 1).scalar.value), args.at(first + 2).scalar.value};
}

Shape loss_shape(const Tensor& logits, Reduction r) {
  return r == Reduction::None ? Shape{logits.sizes()[0]} : Shape{};
}

// ---------------------------------------------------------------- CPU rows

// exp(x) for x <= 0 (and a little above): 2^k * p(r), r = x - k ln 2 in
// [-ln2/2, ln2/2], p of degree 6 (relative error below 1e-7).  Branch-free,
// so the row loops below vectorise; below -87 it returns exp(-87) (1.6e-38),
// which changes no sum of f32 values that matter.
inline float exp_nonpos(float x) {
  x = x > -87.0f ? x : -87.0f;
  float k = x * 1.44269504f + 12582912.0f;  // round to nearest by the 1.5 * 2^23 trick
  k -= 12582912.0f;
  const float r = (x - k * 0.693145751953125f) - k * 1.428606765330187e-06f;
  const float p =
      1.0f + r * (1.0f + r * (0.5f + r * (0.16666667f + r * (0.041666668f + r * (0.008333334f + r * 0.0013888889f)))));
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

constexpr int64_t kBlock = 2048;  // floats per block: 8 KiB, read from memory once, swept twice in L1
constexpr int kLanes = 8;

// One row: its log-sum-exp and (for label smoothing) the sum of its logits.
// The row is read block by block; each block's max, then its sum of exp
// relative to that max, merged into the running (max, sum) in double.
[[gnu::target_clones("avx2", "default")]] void row_forward(const float* x, int64_t c, float* mlse, double* xsum) {
  double m = -std::numeric_limits<double>::infinity(), s = 0, xs = 0;
  bool nan = false;
  for (int64_t b = 0; b < c; b += kBlock) {
    const int64_t e = std::min(c, b + kBlock);
    float lane_max[kLanes], lane_sum[kLanes], lane_x[kLanes];
    for (int l = 0; l < kLanes; ++l) lane_max[l] = -std::numeric_limits<float>::infinity(), lane_sum[l] = 0, lane_x[l] = 0;
    int64_t j = b;
    for (; j + kLanes <= e; j += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        const float v = x[j + l];
        lane_max[l] = v > lane_max[l] ? v : lane_max[l];
        lane_x[l] += v;
      }
    float bm = -std::numeric_limits<float>::infinity();
    for (int l = 0; l < kLanes; ++l) bm = std::max(bm, lane_max[l]);
    for (int64_t k = j; k < e; ++k) bm = std::max(bm, x[k]), lane_x[0] += x[k];
    float bx = 0;
    for (int l = 0; l < kLanes; ++l) bx += lane_x[l];
    nan |= bx != bx;  // a NaN anywhere in the block (or an infinity of each sign)
    xs += bx;
    j = b;
    for (; j + kLanes <= e; j += kLanes)
      for (int l = 0; l < kLanes; ++l) lane_sum[l] += exp_nonpos(x[j + l] - bm);
    double bs = 0;
    for (int l = 0; l < kLanes; ++l) bs += lane_sum[l];
    for (int64_t k = j; k < e; ++k) bs += exp_nonpos(x[k] - bm);
    if (bm > m) {
      s = s * std::exp(m - bm) + bs;
      m = bm;
    } else if (bm > -std::numeric_limits<float>::infinity()) {
      s += bs * std::exp(bm - m);
    }
  }
  *mlse = nan ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(m + std::log(s));
  *xsum = xs;
}

// gx[j] = scale * (exp(x_j - mlse) - e/C), then the target's element minus scale * (1 - e).
[[gnu::target_clones("avx2", "default")]] void row_backward(const float* x, int64_t c, float mlse, float scale,
                                                            float off, float* gx) {
  for (int64_t j = 0; j < c; ++j) gx[j] = scale * (exp_nonpos(x[j] - mlse) - off);
}

void check_targets(const int64_t* t, int64_t n, int64_t c, int64_t ignore, const char* op) {
  for (int64_t r = 0; r < n; ++r)
    VOLT_CHECK(t[r] == ignore || (t[r] >= 0 && t[r] < c), op,
               "target " << t[r] << " of row " << r << " is not a class in [0, " << c << ") nor ignore_index "
                         << ignore);
}

std::vector<Tensor> forward_cpu(const Tensor& logits, const Tensor& target, const Options& o) {
  const Tensor x = logits.contiguous();
  const Tensor t = convert_element_type(target, DType::i64).contiguous();
  const int64_t n = x.sizes()[0], c = x.sizes()[1];
  const float* xp = x.data_ptr<float>();
  const int64_t* tp = t.data_ptr<int64_t>();
  check_targets(tp, n, c, o.ignore_index, "fused_cross_entropy");
  Tensor mlse = Tensor::empty({n}, DType::f32, kCPU);
  std::vector<double> rows(static_cast<size_t>(n), 0.0);
  float* mp = mlse.data_ptr<float>();
  cpu::parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      double xs = 0;
      row_forward(xp + r * c, c, mp + r, &xs);
      if (tp[r] == o.ignore_index) continue;
      // (1 - e) * (lse - x_t) + e/C * sum_j (lse - x_j)
      const double lse = mp[r];
      rows[r] = (1 - o.smoothing) * (lse - xp[r * c + tp[r]]) + o.smoothing * (lse - xs / static_cast<double>(c));
    }
  });
  Tensor loss = Tensor::empty(loss_shape(x, o.reduction), DType::f32, kCPU);
  float* lp = loss.data_ptr<float>();
  if (o.reduction == Reduction::None) {
    for (int64_t r = 0; r < n; ++r) lp[r] = static_cast<float>(rows[r]);
  } else {
    double total = 0, counted = 0;
    for (int64_t r = 0; r < n; ++r) total += rows[r], counted += tp[r] != o.ignore_index;
    lp[0] = static_cast<float>(o.reduction == Reduction::Sum ? total : total / counted);
  }
  return {loss, mlse};
}

Tensor backward_cpu(const Tensor& g, const Tensor& logits, const Tensor& target, const Tensor& mlse_in,
                    const Options& o) {
  const Tensor x = logits.contiguous();
  const Tensor t = convert_element_type(target, DType::i64).contiguous();
  const Tensor mlse = mlse_in.contiguous();
  const Tensor gv = convert_element_type(g, DType::f32).contiguous();
  const int64_t n = x.sizes()[0], c = x.sizes()[1];
  const float* xp = x.data_ptr<float>();
  const int64_t* tp = t.data_ptr<int64_t>();
  const float* mp = mlse.data_ptr<float>();
  const float* gp = gv.data_ptr<float>();
  check_targets(tp, n, c, o.ignore_index, "fused_cross_entropy_backward");
  int64_t counted = 0;
  for (int64_t r = 0; r < n; ++r) counted += tp[r] != o.ignore_index;
  Tensor out = Tensor::empty({n, c}, DType::f32, kCPU);
  float* op = out.data_ptr<float>();
  const float off = static_cast<float>(o.smoothing / static_cast<double>(c));
  const float on = static_cast<float>(1.0 - o.smoothing);
  cpu::parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = op + r * c;
      if (tp[r] == o.ignore_index) {
        std::fill(row, row + c, 0.0f);
        continue;
      }
      const float scale = o.reduction == Reduction::None ? gp[r]
                          : o.reduction == Reduction::Sum ? gp[0]
                                                           : gp[0] / static_cast<float>(counted);
      if (std::isnan(mp[r])) {
        std::fill(row, row + c, std::numeric_limits<float>::quiet_NaN());
        continue;
      }
      row_backward(xp + r * c, c, mp[r], scale, off, row);
      row[tp[r]] -= scale * on;
    }
  });
  return out;
}

// ---------------------------------------------------------------- CUDA rows

#ifdef VOLT_WITH_CUDA
// One thread per row, each reading its row once (a running max and sum);
// a class out of range makes that row's values NaN.
const char* kCudaSource = R"(
extern "C" __global__ void fused_ce_forward(const float* x, const long long* t, long long n, long long c,
                                            long long ignore, double smoothing, float* rows, float* mlse) {
  for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < n; r += (long long)blockDim.x * gridDim.x) {
    const float* xr = x + r * c;
    float m = -1.0f / 0.0f;
    double s = 0, xs = 0;
    for (long long j = 0; j < c; ++j) {
      const float v = xr[j];
      if (v > m) {
        s = s * exp((double)(m - v)) + 1.0;
        m = v;
      } else {
        s += exp((double)(v - m));
      }
      xs += v;
    }
    const float lse = (float)(m + log(s));
    mlse[r] = lse;
    const long long k = t[r];
    if (k == ignore) { rows[r] = 0.0f; continue; }
    if (k < 0 || k >= c) { rows[r] = 0.0f / 0.0f; continue; }
    rows[r] = (float)((1.0 - smoothing) * ((double)lse - xr[k]) + smoothing * ((double)lse - xs / (double)c));
  }
}
extern "C" __global__ void fused_ce_backward(const float* g, const float* x, const long long* t, const float* mlse,
                                             long long n, long long c, long long ignore, double smoothing,
                                             long long reduction, const double* counted, float* gx) {
  for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < n; r += (long long)blockDim.x * gridDim.x) {
    const long long k = t[r];
    float* out = gx + r * c;
    if (k == ignore) { for (long long j = 0; j < c; ++j) out[j] = 0.0f; continue; }
    const float scale = reduction == 0 ? g[r] : reduction == 2 ? g[0] : (float)(g[0] / counted[0]);
    const float off = (float)(smoothing / (double)c), on = (float)(1.0 - smoothing);
    const float* xr = x + r * c;
    for (long long j = 0; j < c; ++j) out[j] = scale * (expf(xr[j] - mlse[r]) - off);
    if (k >= 0 && k < c) out[k] -= scale * on;
    else for (long long j = 0; j < c; ++j) out[j] = 0.0f / 0.0f;
  }
}
)";

std::vector<Tensor> forward_cuda(const Tensor& logits, const Tensor& target, const Options& o) {
  const Device dev = logits.device();
  const Tensor x = logits.contiguous();
  const Tensor t = convert_element_type(target, DType::i64).contiguous();
  long long n = x.sizes()[0], c = x.sizes()[1], ignore = o.ignore_index;
  double smoothing = o.smoothing;
  Tensor rows = Tensor::empty({n}, DType::f32, dev), mlse = Tensor::empty({n}, DType::f32, dev);
  const void* xp = x.raw_data();
  const void* tp = t.raw_data();
  void* rp = rows.raw_data();
  void* mp = mlse.raw_data();
  void* params[] = {&xp, &tp, &n, &c, &ignore, &smoothing, &rp, &mp};
  if (n > 0) cuda::launch(cuda::get_kernel(kCudaSource, "fused_ce_forward", dev.index), dev.index, n, params, 128);
  // The N row losses reduced with volt's own ops (N values, not N * C).
  if (o.reduction == Reduction::None) return {rows, mlse};
  Tensor total = sum(rows);
  if (o.reduction == Reduction::Sum) return {total, mlse};
  return {div(total, sum(convert_element_type(ne(t, Scalar(o.ignore_index)), DType::f32))), mlse};
}

Tensor backward_cuda(const Tensor& g, const Tensor& logits, const Tensor& target, const Tensor& mlse_in,
                     const Options& o) {
  const Device dev = logits.device();
  const Tensor x = logits.contiguous();
  const Tensor t = convert_element_type(target, DType::i64).contiguous();
  const Tensor mlse = mlse_in.contiguous();
  const Tensor gv = convert_element_type(g, DType::f32).contiguous();
  const Tensor counted = sum(convert_element_type(ne(t, Scalar(o.ignore_index)), DType::f64));
  long long n = x.sizes()[0], c = x.sizes()[1], ignore = o.ignore_index;
  long long reduction = static_cast<long long>(o.reduction);
  double smoothing = o.smoothing;
  Tensor out = Tensor::empty({n, c}, DType::f32, dev);
  const void* gp = gv.raw_data();
  const void* xp = x.raw_data();
  const void* tp = t.raw_data();
  const void* mp = mlse.raw_data();
  const void* cp = counted.raw_data();
  void* op = out.raw_data();
  void* params[] = {&gp, &xp, &tp, &mp, &n, &c, &ignore, &smoothing, &reduction, &cp, &op};
  if (n > 0) cuda::launch(cuda::get_kernel(kCudaSource, "fused_ce_backward", dev.index), dev.index, n, params, 128);
  return out;
}
#endif

// ---------------------------------------------------------------- what the executor claims

// f32 logits (N, C), integer targets (N), on the CPU (or CUDA in a CUDA
// build), label smoothing in [0, 1]; every reduction and ignore_index.
bool supported(const std::vector<Value>& v) {
  if (v.size() != 5 || !v[0].is_tensor || !v[1].is_tensor) return false;
  const Tensor& x = v[0].tensor;
  const Tensor& t = v[1].tensor;
  bool device_ok = x.device().is_cpu();
#ifdef VOLT_WITH_CUDA
  device_ok |= x.device().is_cuda();
#endif
  return device_ok && x.dtype() == DType::f32 && x.dim() == 2 && x.sizes()[1] > 0 && t.dim() == 1 &&
         t.sizes()[0] == x.sizes()[0] && is_integral(t.dtype()) && t.device() == x.device() &&
         v[4].scalar.value >= 0.0 && v[4].scalar.value <= 1.0;
}

}  // namespace

std::vector<Tensor> forward_impl(const std::vector<Value>& v) {
  const Options o = options_at(v, 2);
#ifdef VOLT_WITH_CUDA
  if (v[0].tensor.device().is_cuda()) return forward_cuda(v[0].tensor, v[1].tensor, o);
#endif
  return forward_cpu(v[0].tensor, v[1].tensor, o);
}

std::vector<Tensor> backward_impl(const std::vector<Value>& v) {
  const Options o = options_at(v, 4);
#ifdef VOLT_WITH_CUDA
  if (v[1].tensor.device().is_cuda()) return {backward_cuda(v[0].tensor, v[1].tensor, v[2].tensor, v[3].tensor, o)};
#endif
  return {backward_cpu(v[0].tensor, v[1].tensor, v[2].tensor, v[3].tensor, o)};
}

FusedCrossEntropy::FusedCrossEntropy() {
  // Traces print the reduction by name, as PyTorch's keyword.
  auto reduction_repr = [](size_t reduction_index) {
    return [reduction_index](size_t i, const Scalar& s) -> std::string {
      if (i != reduction_index) return "";
      return std::string("'") + reduction_name(static_cast<Reduction>(static_cast<int64_t>(s.value))) + "'";
    };
  };
  forward = executor.register_operator(
      "fused_cross_entropy",
      {.meta =
           [](const std::vector<Value>& v) {
             const Tensor& x = v[0].tensor;
             const Options o = options_at(v, 2);
             return std::vector<TensorMeta>{{loss_shape(x, o.reduction), DType::f32, x.device()},
                                            {Shape{x.sizes()[0]}, DType::f32, x.device()}};
           },
       .fn = forward_impl,
       .scalar_repr = reduction_repr(2)});
  backward = executor.register_operator(
      "fused_cross_entropy_backward",
      {.meta =
           [](const std::vector<Value>& v) {
             const Tensor& x = v[1].tensor;
             return std::vector<TensorMeta>{{x.sizes(), DType::f32, x.device()}};
           },
       .fn = backward_impl,
       .arg_names = {"", "", "target", "max_log_sum_exp", "reduction", "ignore_index", "label_smoothing"},
       .scalar_repr = reduction_repr(4)});

  // cross_entropy(logits, target, reduction, ignore_index, label_smoothing) -> loss
  auto run_fused = [this](const std::vector<Value>& v) {
    return std::vector<Tensor>{forward(v[0], v[1], v[2], v[3], v[4])[0]};
  };
  // The forward keeps each row's log-sum-exp; the backward starts from it.
  auto grad = [this](const std::vector<Value>& v) {
    Tensor logits = v[0].tensor, target = v[1].tensor;
    std::vector<Tensor> fwd = forward(logits, target, v[2], v[3], v[4]);
    Tensor g = jit::get_grad(fwd[0]);
    Tensor logits_grad = backward(g, logits, target, fwd[1], v[2], v[3], v[4])[0];
    jit::put_grads({logits}, {logits_grad});
    return std::vector<Tensor>{fwd[0]};
  };
  executor.register_implementation(OpId::cross_entropy,
                                   {.checker = supported, .execution_transform = run_fused, .grad_transform = grad});
}

}  // namespace fused_ce
