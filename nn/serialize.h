// Saving and loading a module's parameters and buffers as safetensors, under
// the dotted names PyTorch uses, so either side can read the other's file.
//
//   volt::nn::save(*net, "mlp.safetensors");
//   volt::nn::load(*net, "mlp.safetensors");  // every name, shape and dtype must match
//   # Python: net.load_state_dict(safetensors.torch.load_file("mlp.safetensors"))
//
// The format: 8 bytes little-endian N, N bytes of JSON
//   {"0.weight": {"dtype": "F32", "shape": [784, 784], "data_offsets": [0, 2458624]}, ...,
//    "__metadata__": {"format": "pt"}}
// then the tensors' raw little-endian bytes; offsets count from the end of the JSON.
#pragma once
#include <string>

#include <volt/nn/module.h>

namespace volt::nn {

void save(const Module& module, const std::string& path);

// What load found, as PyTorch's load_state_dict returns it.
struct LoadResult {
  std::vector<std::string> missing_keys;     // the module's names the file lacks
  std::vector<std::string> unexpected_keys;  // the file's names the module lacks
};
// Copies each tensor of the file into the module's parameter or buffer of the
// same name, in place (holders of the handles see the new values).  Nothing is
// changed unless the whole file checks out, and one error lists every misfit.
// With `strict` (PyTorch's default) missing and unexpected names are errors;
// without it they are only returned, and the names both have are loaded.  A
// wrong dtype or shape is an error either way.
LoadResult load(Module& module, const std::string& path, bool strict = true);

// The same format for any list of named tensors.
void save_tensors(const NamedTensors& tensors, const std::string& path);
// CPU tensors, in file order, each in the file's dtype (BF16 and F16 as bf16
// and f16); with widen_16bit, those two load as f32 instead (exactly).
NamedTensors load_tensors(const std::string& path, bool widen_16bit = false);

}  // namespace volt::nn
