// Dynamic loss scaling for f16 training (bf16, with f32's exponent range,
// needs none), in the manner of PyTorch's GradScaler:
//
//   volt::amp::GradScaler scaler;                 // scale 65536, grows after 2000 clean steps
//   volt::AutocastGuard amp(volt::kF16);
//   Tensor loss = cross_entropy(net(x), y);
//   opt.zero_grad();
//   scaler.scale(loss).backward();                // gradients of loss * scale
//   scaler.step(opt);                             // unscales; skipped if a gradient is Inf/NaN
//   scaler.update();                              // halves the scale after a skip, or grows it
//
// f16's smallest normal is 6e-5: small gradients of a loss flush to zero in
// f16.  Scaling the loss scales every gradient by the same factor, so they
// stay representable; step() divides them back (by a power of two: exact)
// before the optimizer sees them.  An overflow (Inf or NaN in any gradient)
// skips that optimizer step, leaving the parameters bit for bit as they were,
// and update() halves the scale; after growth_interval steps in a row with no
// overflow it doubles it.  It works wherever gradients land in .grad: eager
// mode, the module jit (volt::jit::jit) and the lazy device.  A compiled step
// (compile_step) runs its optimizer inside the program and cannot skip it;
// use bf16 there.
#pragma once
#include <cstdint>

#include <volt/nn/optim.h>
#include <volt/tensor/tensor.h>

namespace volt::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  // Off: scale() returns the loss, step() just steps, update() does nothing.
  bool enabled = true;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss times the current scale (a floating tensor).
  Tensor scale(const Tensor& loss) const;
  // Divides every gradient of opt's parameters by the scale, once per step
  // (call it before clipping gradients), and notes whether any is Inf/NaN.
  void unscale(nn::Optimizer& opt);
  // Unscales (if unscale was not called), then runs opt.step() unless a
  // gradient overflowed.  Returns whether the optimizer stepped.
  bool step(nn::Optimizer& opt);
  // After step(): halves the scale if this step overflowed, else counts a
  // clean step and grows the scale after growth_interval of them in a row.
  void update();

  double get_scale() const { return scale_; }
  // Clean steps since the last overflow or growth.
  int64_t growth_tracker() const { return clean_steps_; }
  // Whether the last unscale found an Inf or NaN gradient.
  bool found_inf() const { return found_inf_; }
  bool is_enabled() const { return options_.enabled; }

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t clean_steps_ = 0;
  bool unscaled_ = false;   // this step's gradients were divided already
  bool stepped_ = false;    // step() ran since the last update()
  bool found_inf_ = false;
};

}  // namespace volt::amp
