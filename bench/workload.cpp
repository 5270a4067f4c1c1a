// The seed model and its batches as volt_bench holds them (bench/workload.h).
#include "workload.h"

#include <sys/wait.h>

#include <cstdio>
#include <sstream>

#include <volt/tensor/backend.h>
#include <volt/tensor/random.h>

namespace volt::benchmark {

using bench::kBatchesHeld;
using bench::kFeatures;

std::shared_ptr<nn::MLP> make_model(Device device) {
  manual_seed(0);
  auto net = std::make_shared<nn::MLP>(kFeatures, std::vector<int64_t>{784, 784, 784, 28, 10},
                                       /*bias=*/true, /*dropout=*/0.1);
  net->to(device);
  return net;
}

std::vector<Batch> synthetic_batches(int64_t batch, Device device) {
  std::vector<Batch> out;
  for (int k = 0; k < kBatchesHeld; ++k) {
    bench::RawBatch b = bench::synthetic_batch(batch, k);
    out.push_back({Tensor::from_vector<float>(b.x, {batch, kFeatures}).to(device),
                   Tensor::from_vector<int64_t>(b.y, {batch}).to(device)});
  }
  return out;
}

std::vector<Batch> mnist_batches(const data::MNIST& set, int64_t batch, Device device) {
  std::vector<Batch> out;
  for (int k = 0; k < kBatchesHeld; ++k) {
    std::vector<int64_t> idx(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i) idx[i] = (k * batch + i) % set.size();
    Tensor x = Tensor::empty({batch, kFeatures}, DType::f32), y = Tensor::empty({batch}, DType::i64);
    set.gather(idx, x, y);
    out.push_back({x.to(device), y.to(device)});
  }
  return out;
}

void synchronize(Device device) {
  if (Backend* b = backend_for(device.type)) b->synchronize();
}

bool cuda_usable() {
  return backend_for(DeviceType::CUDA) != nullptr && cuda::is_available();
}

std::vector<std::string> child_output_lines(const std::string& command) {
  std::vector<std::string> lines;
  FILE* p = ::popen(command.c_str(), "r");
  if (!p) return lines;
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int rc = ::pclose(p);
  if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
    std::fprintf(stderr, "volt_bench: %s failed\n", command.c_str());
    return lines;
  }
  std::stringstream ss(out);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  return lines;
}

std::string json_field(const std::string& line, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  const size_t at = line.find(k);
  if (at == std::string::npos) return "";
  size_t b = at + k.size(), e = b;
  if (line[b] == '"') e = line.find('"', ++b);
  else e = line.find_first_of(",}", b);
  return line.substr(b, e == std::string::npos ? std::string::npos : e - b);
}

}  // namespace volt::benchmark
