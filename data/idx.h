// Reading IDX files, the format MNIST and Fashion-MNIST ship in.
//
//   auto images = volt::data::read_idx("/data/mnist/train-images-idx3-ubyte.gz", 3);
//   images.dims;                                     // {60000, 28, 28}
//   volt::Tensor x = volt::data::images_to_float(images);  // f32 (60000, 784) in [0, 1]
//
// An IDX file is a big-endian header — the magic 0x000008NN (u8 elements, NN
// dims), then NN u32 sizes — followed by exactly prod(sizes) bytes, row-major.
// Files may be raw or gzip-compressed; gzip is recognised by its magic bytes
// (1f 8b), so a `.gz` name is not required and a misnamed file still reads.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <volt/tensor/tensor.h>

namespace volt::data {

struct IdxArray {
  std::string path;            // where it was read from, for later error messages
  std::vector<int64_t> dims;   // e.g. {60000, 28, 28}
  std::vector<uint8_t> bytes;  // prod(dims) values, row-major
};

// Reads and validates an IDX file of u8 values.  expected_ndim > 0 also requires
// the magic 0x00000800 + expected_ndim (3 for images, 1 for labels).  Any
// problem — missing file, wrong magic, bad dims, truncated data, bytes after
// the data, corrupt gzip stream — is a volt::Error naming the path.
IdxArray read_idx(const std::string& path, int expected_ndim = 0);

// The values as stored: u8 with shape dims.
Tensor to_tensor(const IdxArray& a);
// Images (N, R, C) -> f32 (N, R*C), each pixel x / 255 so values lie in [0, 1].
Tensor images_to_float(const IdxArray& a);
// Labels (N) -> i64 (N): class indices in the dtype the losses take.
Tensor labels_to_int64(const IdxArray& a);

}  // namespace volt::data
