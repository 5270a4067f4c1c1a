#include <volt/tensor/cuda/conv.h>

#include <limits>
#include <sstream>

#include <volt/tensor/conv.h>
#include <volt/tensor/cuda/backend.h>

namespace volt::cuda {

namespace {

// The geometry every window kernel takes after its pointers, in this order.
const char* kGeometry =
    "long long n, long long H, long long W, long long OH, long long OW, long long kh, long long kw, "
    "long long sh, long long sw, long long ph, long long pw, long long dh, long long dw";

// The first maximal element of window (oh, ow) in plane xp (a NaN counts as
// maximal), as the CPU's window_argmax; -1 for a window without elements.
const char* kArgmax =
    "  long long best = -1; WT bv = (WT)0;\n"
    "  for (long long i = 0; i < kh; ++i) {\n"
    "    const long long ih = oh * sh - ph + i * dh;\n"
    "    if (ih < 0 || ih >= H) continue;\n"
    "    for (long long j = 0; j < kw; ++j) {\n"
    "      const long long iw = ow * sw - pw + j * dw;\n"
    "      if (iw < 0 || iw >= W) continue;\n"
    "      const WT v = xp[ih * W + iw];\n"
    "      if (best < 0 || v > bv || v != v) {\n"
    "        best = ih * W + iw; bv = v;\n"
    "        if (v != v) { i = kh; break; }\n"
    "      }\n"
    "    }\n"
    "  }\n";

}  // namespace

std::string window_name(OpId op, DType t) { return std::string("volt_") + op_name(op) + "_" + dtype_name(t); }

std::string window_source(OpId op, DType t) {
  VOLT_CHECK(t == DType::f32 || t == DType::f64, op_name(op), "expected f32 or f64, got " << dtype_name(t));
  const std::string T = dtype_c_type(t);
  std::ostringstream os;
  os << "#define WT " << T << "\n";
  const std::string loop = "  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n;\n"
                           "       e += (long long)blockDim.x * gridDim.x) {\n";
  switch (op) {
    case OpId::im2col:
      // cols (N, C*kh*kw, OH*OW): element e = ((p * kh*kw + r) * OH*OW + l).
      os << "extern \"C\" __global__ void " << window_name(op, t) << "(const WT* x, WT* cols, " << kGeometry
         << ") {\n"
         << loop << "    const long long L = OH * OW, l = e % L, r = (e / L) % (kh * kw), p = e / (L * kh * kw);\n"
         << "    const long long ih = (l / OW) * sh - ph + (r / kw) * dh, iw = (l % OW) * sw - pw + (r % kw) * dw;\n"
         << "    cols[e] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? x[(p * H + ih) * W + iw] : (WT)0;\n"
         << "  }\n}\n";
      break;
    case OpId::col2im:
      // x (N, C, H, W): element e gathers the column entries read from it, in (i, j) order.
      os << "extern \"C\" __global__ void " << window_name(op, t) << "(const WT* cols, WT* x, " << kGeometry
         << ") {\n"
         << loop << "    const long long w = e % W, h = (e / W) % H, p = e / (H * W), L = OH * OW;\n"
         << "    WT acc = (WT)0;\n"
         << "    for (long long i = 0; i < kh; ++i) {\n"
         << "      const long long a = h + ph - i * dh;\n"
         << "      if (a < 0 || a % sh != 0 || a / sh >= OH) continue;\n"
         << "      for (long long j = 0; j < kw; ++j) {\n"
         << "        const long long b = w + pw - j * dw;\n"
         << "        if (b < 0 || b % sw != 0 || b / sw >= OW) continue;\n"
         << "        acc += cols[(p * kh * kw + i * kw + j) * L + (a / sh) * OW + b / sw];\n"
         << "      }\n"
         << "    }\n"
         << "    x[e] = acc;\n"
         << "  }\n}\n";
      break;
    case OpId::max_pool2d:
      os << "extern \"C\" __global__ void " << window_name(op, t) << "(const WT* x, WT* y, " << kGeometry
         << ", double neg_inf) {\n"
         << loop << "    const long long ow = e % OW, oh = (e / OW) % OH, p = e / (OH * OW);\n"
         << "    const WT* xp = x + p * H * W;\n"
         << kArgmax << "    y[e] = best < 0 ? (WT)neg_inf : xp[best];\n"
         << "  }\n}\n";
      break;
    case OpId::max_pool2d_backward:
      // gx (N, C, H, W): element e sums the gradients of the windows whose first
      // maximum it is, in (oh, ow) order as the CPU adds them.
      os << "extern \"C\" __global__ void " << window_name(op, t) << "(const WT* gy, const WT* x, WT* gx, "
         << kGeometry << ") {\n"
         << loop << "    const long long w = e % W, h = (e / W) % H, p = e / (H * W);\n"
         << "    const WT* xp = x + p * H * W;\n"
         << "    WT acc = (WT)0;\n"
         << "    for (long long oh = 0; oh < OH; ++oh) {\n"
         << "      const long long a = h + ph - oh * sh;\n"
         << "      if (a < 0 || a > (kh - 1) * dh) continue;\n"
         << "      for (long long ow = 0; ow < OW; ++ow) {\n"
         << "        const long long b = w + pw - ow * sw;\n"
         << "        if (b < 0 || b > (kw - 1) * dw) continue;\n"
         << "        {\n" << kArgmax
         << "        if (best == h * W + w) acc += gy[(p * OH + oh) * OW + ow];\n"
         << "        }\n"
         << "      }\n"
         << "    }\n"
         << "    gx[e] = acc;\n"
         << "  }\n}\n";
      break;
    default: VOLT_FAIL(op_name(op), "is not a window op");
  }
  os << "#undef WT\n";
  return os.str();
}

void run_window(const OpCall& call, const Tensor& out) {
  NoGradGuard no_grad;
  if (call.op == OpId::convolution || call.op == OpId::convolution_grad_input ||
      call.op == OpId::convolution_grad_weight) {
    // im2col / col2im above and cuBLAS's matmul, on the device.
    Tensor r = convolution_by_parts(call);
    Tensor(out).copy_(r);
    return;
  }
  const Window2d win = Window2d::from_ints(call.attrs.ints);
  const Tensor in = contiguous_on_device(call.args.back().tensor);
  const int dev = out.device().index;
  const DType t = out.dtype();
  // The image side: the input of im2col and the pools, the output of col2im.
  const Tensor& image = call.op == OpId::col2im ? out : in;
  long long H = image.size(2), W = image.size(3);
  long long OH = win.out_size(0, H, op_name(call.op)), OW = win.out_size(1, W, op_name(call.op));
  long long kh = win.kernel[0], kw = win.kernel[1], sh = win.stride[0], sw = win.stride[1];
  long long ph = win.padding[0], pw = win.padding[1], dh = win.dilation[0], dw = win.dilation[1];
  long long n = out.numel();
  cudaKernel_t k = cached_kernel(window_name(call.op, t), dev, [&] { return window_source(call.op, t); });
  void* ip = in.raw_data();
  void* op = out.raw_data();
  double neg_inf = -std::numeric_limits<double>::infinity();
  if (call.op == OpId::max_pool2d_backward) {
    const Tensor gy = contiguous_on_device(call.args[0].tensor);
    void* gp = gy.raw_data();
    void* params[] = {&gp, &ip, &op, &n, &H, &W, &OH, &OW, &kh, &kw, &sh, &sw, &ph, &pw, &dh, &dw};
    launch(k, dev, n, params);
    return;
  }
  void* params[] = {&ip, &op, &n, &H, &W, &OH, &OW, &kh, &kw, &sh, &sw, &ph, &pw, &dh, &dw, &neg_inf};
  launch(k, dev, n, params);
}

}  // namespace volt::cuda
