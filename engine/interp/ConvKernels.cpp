/// Conv and ConvTranspose over any number of spatial dims, by im2col/col2im
/// and the shared GEMM. Padding follows ONNX: explicit `pads` (begins, then
/// ends) or `auto_pad` SAME_UPPER / SAME_LOWER / VALID.
#include <algorithm>

#include "KernelUtil.h"

namespace fusec::interp {

std::vector<int64_t> attrOr(const KernelContext& ctx, const char* name, size_t n, int64_t def) {
  std::vector<int64_t> v = ctx.attrInts(name, std::vector<int64_t>(n, def));
  if (v.size() != n)
    ctx.fail("attribute `" + std::string(name) + "` must have " + std::to_string(n) + " values");
  return v;
}

ConvGeometry convGeometry(const KernelContext& ctx, const Shape& inSpatial, const Shape& kernel,
                          bool ceilMode) {
  Expected<WindowGeometry> g = windowGeometry(ctx.node(), inSpatial, kernel, ceilMode);
  if (!g) ctx.fail(g.error().message);
  // Every output position visits the whole window.
  requireSteps(ctx, {checkedNumel(g->out), checkedNumel(g->kernel)},
               "a window of " + shapeToString(g->kernel) + " over an output of " + shapeToString(g->out));
  return std::move(g.value());
}

bool nextIndex(Shape& idx, const Shape& shape) {
  for (size_t d = shape.size(); d-- > 0;) {
    if (++idx[d] < shape[d]) return true;
    idx[d] = 0;
  }
  return false;
}

namespace {

/// col[(c*K + kk) * P + p] = x[c, o(p)*s - pad + kk*d] or 0 outside.
void im2col(const float* x, int64_t channels, const ConvGeometry& g, float* col) {
  const size_t k = g.in.size();
  const int64_t P = g.outSize(), K = g.kernelSize();
  const int64_t last = static_cast<int64_t>(k) - 1;
  const int64_t outLast = k ? g.out[last] : 1;
  const Shape inStrides = stridesOf(g.in);
  Shape outerOut = g.out;
  if (k) outerOut[last] = 1;
  for (int64_t c = 0; c < channels; ++c) {
    const float* xc = x + c * g.inSize();
    Shape kidx(k, 0);
    for (int64_t kk = 0; kk < K; ++kk, nextIndex(kidx, g.kernel)) {
      float* row = col + (c * K + kk) * P;
      Shape oidx(k, 0);
      int64_t p = 0;
      do {
        // Offset and validity of all dims but the last.
        int64_t base = 0;
        bool valid = true;
        for (size_t d = 0; d + 1 < k; ++d) {
          int64_t pos = oidx[d] * g.strides[d] - g.padBegin[d] + kidx[d] * g.dilations[d];
          valid &= pos >= 0 && pos < g.in[d];
          base += pos * inStrides[d];
        }
        if (!valid) {
          std::fill(row + p, row + p + outLast, 0.f);
        } else if (k == 0) {
          row[p] = xc[base];
        } else {
          const int64_t s = g.strides[last], off = kidx[last] * g.dilations[last] - g.padBegin[last];
          for (int64_t o = 0; o < outLast; ++o) {
            int64_t pos = o * s + off;
            row[p + o] = (pos >= 0 && pos < g.in[last]) ? xc[base + pos] : 0.f;
          }
        }
        p += outLast;
      } while (nextIndex(oidx, outerOut));
    }
  }
}

/// The adjoint of im2col: y[c, o(p)*s - pad + kk*d] += col[(c*K + kk) * P + p].
/// Here `g.out` is the conv-transpose input grid and `g.in` its output grid.
void col2im(const float* col, int64_t channels, const ConvGeometry& g, float* y) {
  const size_t k = g.in.size();
  const int64_t P = g.outSize(), K = g.kernelSize();
  const Shape inStrides = stridesOf(g.in);
  for (int64_t c = 0; c < channels; ++c) {
    float* yc = y + c * g.inSize();
    Shape kidx(k, 0);
    for (int64_t kk = 0; kk < K; ++kk, nextIndex(kidx, g.kernel)) {
      const float* row = col + (c * K + kk) * P;
      Shape oidx(k, 0);
      int64_t p = 0;
      do {
        int64_t off = 0;
        bool valid = true;
        for (size_t d = 0; d < k; ++d) {
          int64_t pos = oidx[d] * g.strides[d] - g.padBegin[d] + kidx[d] * g.dilations[d];
          valid &= pos >= 0 && pos < g.in[d];
          off += pos * inStrides[d];
        }
        if (valid) yc[off] += row[p];
        ++p;
      } while (nextIndex(oidx, g.out));
    }
  }
}

void conv(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  expectDType(ctx, 0, DType::Float32);
  expectDType(ctx, 1, DType::Float32);
  if (x.rank() < 3) ctx.fail("input must have rank >= 3 (N, C, spatial...), got " + shapeToString(x.shape()));
  if (w.rank() != x.rank()) ctx.fail("weight rank " + std::to_string(w.rank()) + " differs from input rank " + std::to_string(x.rank()));
  const int64_t N = x.dim(0), C = x.dim(1), M = w.dim(0);
  const int64_t group = ctx.attrInt("group", 1);
  if (group <= 0 || C % group != 0 || M % group != 0)
    ctx.fail("group " + std::to_string(group) + " does not divide channels " + std::to_string(C) + " and " + std::to_string(M));
  if (w.dim(1) != C / group)
    ctx.fail("weight shape " + shapeToString(w.shape()) + " does not match " + std::to_string(C) +
             " input channels in " + std::to_string(group) + " groups");
  Shape inSpatial(x.shape().begin() + 2, x.shape().end());
  Shape kernel(w.shape().begin() + 2, w.shape().end());
  if (ctx.hasAttr("kernel_shape") && ctx.attrInts("kernel_shape") != kernel)
    ctx.fail("attribute `kernel_shape` does not match the weight shape");
  ConvGeometry g = convGeometry(ctx, inSpatial, kernel, false);
  const float* bias = nullptr;
  if (ctx.has(2)) {
    expectDType(ctx, 2, DType::Float32);
    if (ctx.in(2).numel() != M) ctx.fail("bias must have " + std::to_string(M) + " values");
    bias = ctx.in(2).data<float>();
  }

  Shape outShape = {N, M};
  outShape.insert(outShape.end(), g.out.begin(), g.out.end());
  Tensor y(DType::Float32, outShape);
  const int64_t Cg = C / group, Mg = M / group, K = Cg * g.kernelSize(), P = g.outSize();
  const bool pointwise = g.kernelSize() == 1 &&
                         std::all_of(g.strides.begin(), g.strides.end(), [](int64_t s) { return s == 1; }) &&
                         std::all_of(g.padBegin.begin(), g.padBegin.end(), [](int64_t p) { return p == 0; }) &&
                         g.out == g.in;
  std::vector<float> col(pointwise ? 0 : static_cast<size_t>(K * P));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t gi = 0; gi < group; ++gi) {
      const float* xg = x.data<float>() + (n * C + gi * Cg) * g.inSize();
      const float* src = xg;
      if (!pointwise) {
        im2col(xg, Cg, g, col.data());
        src = col.data();
      }
      float* yg = y.data<float>() + (n * M + gi * Mg) * P;
      gemm(false, false, Mg, P, K, 1.f, w.data<float>() + gi * Mg * K, src, 0.f, yg);
      if (bias)
        for (int64_t m = 0; m < Mg; ++m)
          for (int64_t p = 0; p < P; ++p) yg[m * P + p] += bias[gi * Mg + m];
    }
  }
  ctx.setOutput(0, std::move(y));
}

void convTranspose(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  expectDType(ctx, 0, DType::Float32);
  expectDType(ctx, 1, DType::Float32);
  if (x.rank() < 3 || w.rank() != x.rank()) ctx.fail("input and weight must have the same rank >= 3");
  const int64_t N = x.dim(0), C = x.dim(1);
  const int64_t group = ctx.attrInt("group", 1);
  if (group <= 0 || C % group != 0 || w.dim(0) != C)
    ctx.fail("weight shape " + shapeToString(w.shape()) + " does not match " + std::to_string(C) + " input channels");
  const int64_t Mg = w.dim(1), M = Mg * group, Cg = C / group;
  const size_t k = static_cast<size_t>(x.rank() - 2);
  Shape inSpatial(x.shape().begin() + 2, x.shape().end());
  Shape kernel(w.shape().begin() + 2, w.shape().end());
  Expected<WindowGeometry> tg = transposedWindowGeometry(ctx.node(), inSpatial, kernel);
  if (!tg) ctx.fail(tg.error().message);
  const Shape &strides = tg->strides, &dilations = tg->dilations, &outSpatial = tg->out;
  Shape pads = tg->padBegin;
  pads.insert(pads.end(), tg->padEnd.begin(), tg->padEnd.end());
  // The transpose scatters over an un-padded output grid, then crops the pads.
  ConvGeometry g;
  g.kernel = kernel;
  g.strides = strides;
  g.dilations = dilations;
  g.out = inSpatial;
  g.in.resize(k);
  g.padBegin.assign(k, 0);
  g.padEnd.assign(k, 0);
  for (size_t i = 0; i < k; ++i)
    g.in[i] = strides[i] * (inSpatial[i] - 1) + (kernel[i] - 1) * dilations[i] + 1;
  const int64_t Kg = g.kernelSize(), Pin = g.outSize(), Pfull = g.inSize();
  Shape outShape = {N, M};
  outShape.insert(outShape.end(), outSpatial.begin(), outSpatial.end());
  Tensor y(DType::Float32, outShape);
  std::vector<float> col(static_cast<size_t>(Mg * Kg * Pin));
  std::vector<float> full(static_cast<size_t>(Mg * Pfull));
  const Shape fullStrides = stridesOf(g.in);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t gi = 0; gi < group; ++gi) {
      const float* xg = x.data<float>() + (n * C + gi * Cg) * Pin;
      const float* wg = w.data<float>() + gi * Cg * Mg * Kg;
      // col[Mg*Kg, Pin] = W_g^T [Mg*Kg, Cg] * X_g [Cg, Pin]
      gemm(true, false, Mg * Kg, Pin, Cg, 1.f, wg, xg, 0.f, col.data());
      std::fill(full.begin(), full.end(), 0.f);
      col2im(col.data(), Mg, g, full.data());
      float* yg = y.data<float>() + (n * M + gi * Mg) * shapeNumel(outSpatial);
      const Shape outStrides = stridesOf(outSpatial);
      for (int64_t m = 0; m < Mg; ++m) {
        Shape idx(k, 0);
        const int64_t P = shapeNumel(outSpatial);
        const float bias = ctx.has(2) ? ctx.in(2).data<float>()[gi * Mg + m] : 0.f;
        for (int64_t p = 0; p < P; ++p) {
          // Positions past the scattered grid (negative end pads) hold only the bias.
          int64_t off = 0;
          bool inside = true;
          for (size_t d = 0; d < k; ++d) {
            const int64_t pos = idx[d] + pads[d];
            inside &= pos >= 0 && pos < g.in[d];
            off += pos * fullStrides[d];
          }
          yg[m * P + p] = (inside ? full[m * Pfull + off] : 0.f) + bias;
          nextIndex(idx, outSpatial);
        }
      }
    }
  }
  ctx.setOutput(0, std::move(y));
}

}  // namespace

void registerConvKernels(KernelRegistry& r) {
  r["Conv"] = conv;
  r["ConvTranspose"] = convTranspose;
}

}  // namespace fusec::interp
