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
// (epoch, step, generator seed and offset, learning rate, and the size and
// hash of the two other files).  Each file is written beside its final name
// and renamed, trainer.json last, so a file is never seen half written; a
// crash between two renames leaves files of two saves side by side, which
// load_checkpoint refuses by their fingerprints rather than resume a mixed run.
// A load reads and checks everything (the model's names, shapes and dtypes,
// the optimizer's state and its range: nn/optim.h load_state_dict) before it
// assigns anything, so a failed load leaves the module and optimizer as they
// were.
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
