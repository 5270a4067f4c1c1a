// Checkpoints that resume a run exactly: the parameters (a safetensors file
// PyTorch reads), the optimizer's state, the global random generator, and where
// in the data the run was.
//
//   nn::save_checkpoint(dir, *net, opt, {.epoch = 2, .step = 1500});
//   ...  // later, in a new process, after building the same net and optimizer:
//   nn::TrainingPosition at = nn::load_checkpoint(dir, *net, opt);
//   sampler.set_epoch(at.epoch - 1);   // the epoch's data order again
//   // skip at.step batches of that epoch, then train on as before
//
// dir/model.safetensors, dir/optimizer.safetensors and dir/trainer.json
// (epoch, step, generator seed and offset, learning rate).  Each file is
// written beside its final name and renamed, so a crash leaves the previous
// checkpoint whole.
#pragma once
#include <cstdint>
#include <string>

#include <volt/nn/module.h>
#include <volt/nn/optim.h>

namespace volt::nn {

struct TrainingPosition {
  int64_t epoch = 1;  // the epoch the run was in (from 1)
  int64_t step = 0;   // training steps already taken in that epoch
};

void save_checkpoint(const std::string& dir, const Module& module, const Optimizer& optimizer,
                     const TrainingPosition& position);
// Loads all of it (the module strictly) and sets the global generator back.
TrainingPosition load_checkpoint(const std::string& dir, Module& module, Optimizer& optimizer);

}  // namespace volt::nn
