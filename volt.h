// volt — everything a training program needs, in one include (as <torch/torch.h>).
//
//   #include <volt/volt.h>
//   using namespace volt;
//   int main() {
//     manual_seed(0);
//     auto net = std::make_shared<nn::MLP>(784, std::vector<int64_t>{128, 10});
//     Tensor loss = nn::functional::cross_entropy((*net)(randn({8, 784})), randint(0, 10, {8}));
//     loss.backward();
//   }
//
// The parts can be included one by one instead: <volt/tensor/tensor.h>,
// <volt/nn/linear.h>, <volt/jit/jit.h>, ...
#pragma once

#include <volt/tensor/tensor.h>
#include <volt/tensor/factories.h>
#include <volt/tensor/indexing.h>
#include <volt/tensor/ops.h>
#include <volt/tensor/random.h>
#include <volt/tensor/sampling.h>
#include <volt/tensor/autocast.h>
#include <volt/tensor/losses.h>
#include <volt/autograd/grad_mode.h>
#include <volt/nn/module.h>
#include <volt/nn/linear.h>
#include <volt/nn/conv.h>
#include <volt/nn/activation.h>
#include <volt/nn/batch_norm.h>
#include <volt/nn/sequential.h>
#include <volt/nn/mlp.h>
#include <volt/nn/embedding.h>
#include <volt/nn/layer_norm.h>
#include <volt/nn/init.h>
#include <volt/nn/container.h>
#include <volt/nn/gpt.h>
#include <volt/nn/loss.h>
#include <volt/nn/regression_loss.h>
#include <volt/nn/functional.h>
#include <volt/nn/optim.h>
#include <volt/nn/adamw.h>
#include <volt/nn/rmsprop.h>
#include <volt/nn/clip_grad.h>
#include <volt/nn/lr_scheduler.h>
#include <volt/nn/lr_schedule.h>
#include <volt/nn/serialize.h>
#include <volt/nn/checkpoint.h>
#include <volt/nn/amp.h>
#include <volt/nn/save_load.h>
#include <volt/data/dataset.h>
#include <volt/data/dataloader.h>
#include <volt/data/sampler.h>
#include <volt/data/transforms.h>
#include <volt/data/datasets.h>
#include <volt/data/text.h>
#include <volt/jit/jit.h>
#include <volt/jit/autocast.h>
#include <volt/jit/step/step.h>
#include <volt/jit/lazy/lazy.h>
