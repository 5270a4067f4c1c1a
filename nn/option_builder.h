// The setter/getter pair of LibTorch's option builders (nn/optim_options.h,
// nn/adamw.h): a builder holds the plain options struct as o_; a setter
// returns the builder (so calls chain), a getter reads the value.
#pragma once

#define VOLT_OPTION(Builder, name)                  \
  Builder& name(double v) {                         \
    o_.name = v;                                    \
    return *this;                                   \
  }                                                 \
  double name() const { return o_.name; }
