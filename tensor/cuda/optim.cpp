#include <volt/tensor/cuda/optim.h>

#include <algorithm>

#include <volt/tensor/cuda/backend.h>
#include <volt/tensor/cuda/kernels.h>
#include <volt/tensor/cuda/runtime.h>

namespace volt::cuda {

namespace {

// Host mirrors of the kernels' parameter tables (tensor/cuda/kernels.cpp).
template <class T>
struct AdamSlotRaw {
  T* p;
  const T* g;
  T* m;
  T* v;
  long long n;
  T neg_step_size;
  T bias_correction2_sqrt;
};
template <class T>
struct AdamTable {
  AdamSlotRaw<T> s[24];
};
// The kernels' sources assert the same sizes (tensor/cuda/kernels.cpp).
static_assert(sizeof(AdamTable<float>) == 1152 && sizeof(AdamTable<double>) == 1344);

template <class T>
struct SgdSlotRaw {
  T* p;
  const T* g;
  T* buf;
  long long n;
  int first_step;
};
template <class T>
struct SgdTable {
  SgdSlotRaw<T> s[32];
};
static_assert(sizeof(SgdTable<float>) == 1280 && sizeof(SgdTable<double>) == 1280);

void check_slot(const Tensor& p, const Tensor& other, const char* op, const char* what) {
  VOLT_CHECK(other.device() == p.device() && other.dtype() == p.dtype() && other.sizes() == p.sizes() &&
                 other.is_contiguous(),
             op, what << " must be a contiguous " << p.meta_str() << ", got " << other.meta_str());
}

// Calls f(first, count) on runs of at most `chunk` slots with one device and dtype.
template <class S, class F>
void for_each_group(const std::vector<S>& slots, size_t chunk, F f) {
  size_t i = 0;
  while (i < slots.size()) {
    size_t j = i + 1;
    while (j < slots.size() && j - i < chunk && slots[j].p.device() == slots[i].p.device() &&
           slots[j].p.dtype() == slots[i].p.dtype())
      ++j;
    f(i, j - i);
    i = j;
  }
}

dim3 grid_for(long long max_n, size_t count, int dev) {
  long long x = std::max<long long>(1, (max_n + 255) / 256);
  x = std::min<long long>(x, static_cast<long long>(multiprocessor_count(dev)) * 8);
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(count));
}

template <class T>
void adam_group(const std::vector<AdamSlot>& slots, size_t first, size_t count, double beta1, double beta2,
                double eps, double wd) {
  const Device d = slots[first].p.device();
  const DType dt = slots[first].p.dtype();
  AdamTable<T> table{};
  long long max_n = 0;
  for (size_t k = 0; k < count; ++k) {
    const AdamSlot& s = slots[first + k];
    table.s[k] = {static_cast<T*>(s.p.raw_data()), static_cast<const T*>(s.g.raw_data()),
                  static_cast<T*>(s.m.raw_data()),  static_cast<T*>(s.v.raw_data()),
                  s.p.numel(),                      static_cast<T>(-s.step_size),
                  static_cast<T>(s.bias_correction2_sqrt)};
    max_n = std::max<long long>(max_n, s.p.numel());
  }
  // The constants are computed in double and rounded once, as the CPU kernel does.
  T one_minus_beta1 = static_cast<T>(1.0 - beta1), b2 = static_cast<T>(beta2),
    one_minus_beta2 = static_cast<T>(1.0 - beta2), weight_decay = static_cast<T>(wd), e = static_cast<T>(eps);
  cudaKernel_t k = cached_kernel(adam_name(dt), d.index, [&] { return adam_source(dt); });
  void* params[] = {&table, &one_minus_beta1, &b2, &one_minus_beta2, &weight_decay, &e};
  launch(k, d.index, grid_for(max_n, count, d.index), dim3(256), params);
}

template <class T>
void sgd_group(const std::vector<SGDSlot>& slots, size_t first, size_t count, double lr, double momentum,
               double wd) {
  const Device d = slots[first].p.device();
  const DType dt = slots[first].p.dtype();
  SgdTable<T> table{};
  long long max_n = 0;
  for (size_t k = 0; k < count; ++k) {
    const SGDSlot& s = slots[first + k];
    table.s[k] = {static_cast<T*>(s.p.raw_data()), static_cast<const T*>(s.g.raw_data()),
                  s.buf.defined() ? static_cast<T*>(s.buf.raw_data()) : nullptr, s.p.numel(),
                  s.first_step ? 1 : 0};
    max_n = std::max<long long>(max_n, s.p.numel());
  }
  T l = static_cast<T>(lr), mom = static_cast<T>(momentum), weight_decay = static_cast<T>(wd);
  cudaKernel_t k = cached_kernel(sgd_name(dt), d.index, [&] { return sgd_source(dt); });
  void* params[] = {&table, &l, &mom, &weight_decay};
  launch(k, d.index, grid_for(max_n, count, d.index), dim3(256), params);
}

}  // namespace

void fused_adam(const std::vector<AdamSlot>& slots, double beta1, double beta2, double eps, double weight_decay) {
  for (const AdamSlot& s : slots) {
    check_device(s.p.device(), "Adam");
    VOLT_CHECK(s.p.dtype() == DType::f32 || s.p.dtype() == DType::f64, "Adam",
               "expected f32 or f64 parameters, got " << s.p.meta_str());
    VOLT_CHECK(s.p.is_contiguous(), "Adam", "expected a contiguous parameter, got " << s.p.meta_str());
    check_slot(s.p, s.g, "Adam", "the gradient");
    check_slot(s.p, s.m, "Adam", "exp_avg");
    check_slot(s.p, s.v, "Adam", "exp_avg_sq");
  }
  for_each_group(slots, 24, [&](size_t first, size_t count) {
    if (slots[first].p.dtype() == DType::f32) adam_group<float>(slots, first, count, beta1, beta2, eps, weight_decay);
    else adam_group<double>(slots, first, count, beta1, beta2, eps, weight_decay);
  });
}

void fused_sgd(const std::vector<SGDSlot>& slots, double lr, double momentum, double weight_decay) {
  for (const SGDSlot& s : slots) {
    check_device(s.p.device(), "SGD");
    VOLT_CHECK(s.p.dtype() == DType::f32 || s.p.dtype() == DType::f64, "SGD",
               "expected f32 or f64 parameters, got " << s.p.meta_str());
    VOLT_CHECK(s.p.is_contiguous(), "SGD", "expected a contiguous parameter, got " << s.p.meta_str());
    check_slot(s.p, s.g, "SGD", "the gradient");
    if (s.buf.defined()) check_slot(s.p, s.buf, "SGD", "the momentum buffer");
  }
  for_each_group(slots, 32, [&](size_t first, size_t count) {
    if (slots[first].p.dtype() == DType::f32) sgd_group<float>(slots, first, count, lr, momentum, weight_decay);
    else sgd_group<double>(slots, first, count, lr, momentum, weight_decay);
  });
}

}  // namespace volt::cuda
