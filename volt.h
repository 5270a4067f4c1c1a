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

#include "tensor/tensor.h"
#include "tensor/factories.h"
#include "tensor/indexing.h"
#include "tensor/ops.h"
#include "tensor/random.h"
#include "autograd/grad_mode.h"
#include "nn/module.h"
#include "nn/linear.h"
#include "nn/conv.h"
#include "nn/activation.h"
#include "nn/sequential.h"
#include "nn/mlp.h"
#include "nn/loss.h"
#include "nn/functional.h"
#include "nn/optim.h"
#include "nn/lr_scheduler.h"
#include "nn/serialize.h"
#include "nn/checkpoint.h"
#include "data/dataset.h"
#include "data/dataloader.h"
#include "data/sampler.h"
#include "data/transforms.h"
#include "jit/jit.h"
#include "jit/step.h"
#include "jit/lazy/lazy.h"
