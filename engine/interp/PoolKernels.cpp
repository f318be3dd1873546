/// Pooling: MaxPool (with Indices), AveragePool, GlobalAveragePool,
/// GlobalMaxPool, LpPool, over any number of spatial dims.
#include <algorithm>
#include <cmath>
#include <limits>

#include "KernelUtil.h"

namespace fusec::interp {
namespace {

enum class PoolKind { Max, Average, Lp };

void pool(KernelContext& ctx, PoolKind kind) {
  const Tensor& x = ctx.in(0);
  expectDType(ctx, 0, DType::Float32);
  if (x.rank() < 3) ctx.fail("input must have rank >= 3 (N, C, spatial...), got " + shapeToString(x.shape()));
  if (!ctx.hasAttr("kernel_shape")) ctx.fail("attribute `kernel_shape` is required");
  Shape kernel = ctx.attrInts("kernel_shape");
  Shape inSpatial(x.shape().begin() + 2, x.shape().end());
  if (kernel.size() != inSpatial.size())
    ctx.fail("`kernel_shape` has " + std::to_string(kernel.size()) + " dims but the input has " +
             std::to_string(inSpatial.size()) + " spatial dims");
  ConvGeometry g = convGeometry(ctx, inSpatial, kernel, ctx.attrInt("ceil_mode", 0) != 0);
  const bool includePad = ctx.attrInt("count_include_pad", 0) != 0;
  const double p = static_cast<double>(ctx.attrInt("p", 2));
  const bool columnMajor = ctx.attrInt("storage_order", 0) != 0;
  const int64_t NC = x.dim(0) * x.dim(1), P = g.outSize(), I = g.inSize();
  requireSteps(ctx, {NC, P, g.kernelSize()}, "pooling " + std::to_string(NC) + " channels");
  const size_t k = kernel.size();
  Shape outShape = {x.dim(0), x.dim(1)};
  outShape.insert(outShape.end(), g.out.begin(), g.out.end());
  Tensor y(DType::Float32, outShape);
  Tensor indices(DType::Int64, outShape);
  const Shape inStrides = stridesOf(inSpatial);
  // Column-major strides for storage_order = 1 indices.
  Shape colStrides(k, 1);
  for (size_t d = 1; d < k; ++d) colStrides[d] = colStrides[d - 1] * inSpatial[d - 1];
  for (int64_t nc = 0; nc < NC; ++nc) {
    const float* xc = x.data<float>() + nc * I;
    Shape o(k, 0);
    for (int64_t op = 0; op < P; ++op, nextIndex(o, g.out)) {
      double acc = kind == PoolKind::Max ? -std::numeric_limits<double>::infinity() : 0.0;
      int64_t best = -1, count = 0;
      Shape kidx(k, 0);
      do {
        int64_t off = 0, colOff = 0;
        bool inside = true, inPadded = true;
        for (size_t d = 0; d < k; ++d) {
          int64_t pos = o[d] * g.strides[d] - g.padBegin[d] + kidx[d] * g.dilations[d];
          inside &= pos >= 0 && pos < inSpatial[d];
          inPadded &= pos >= -g.padBegin[d] && pos < inSpatial[d] + g.padEnd[d];
          off += pos * inStrides[d];
          colOff += pos * colStrides[d];
        }
        if (inside) {
          double v = xc[off];
          if (kind == PoolKind::Max) {
            // A NaN in the window is the maximum, as numpy's max has it
            // (later elements never replace it: no comparison with NaN holds).
            if (v > acc || best < 0 || (std::isnan(v) && !std::isnan(acc))) {
              acc = v;
              best = columnMajor ? colOff : off;
            }
          } else if (kind == PoolKind::Lp) {
            acc += std::pow(std::abs(v), p);
          } else {
            acc += v;
          }
          ++count;
        } else if (inPadded && includePad) {
          ++count;
        }
      } while (nextIndex(kidx, kernel));
      float result;
      if (kind == PoolKind::Max) result = static_cast<float>(acc);
      else if (kind == PoolKind::Lp) result = static_cast<float>(std::pow(acc, 1.0 / p));
      else result = count ? static_cast<float>(acc / static_cast<double>(count)) : 0.f;
      y.data<float>()[nc * P + op] = result;
      indices.data<int64_t>()[nc * P + op] = best < 0 ? -1 : nc * I + best;
    }
  }
  ctx.setOutput(0, std::move(y));
  if (kind == PoolKind::Max && ctx.wantsOutput(1)) ctx.setOutput(1, std::move(indices));
}

void globalPool(KernelContext& ctx, PoolKind kind) {
  const Tensor& x = ctx.in(0);
  expectDType(ctx, 0, DType::Float32);
  if (x.rank() < 2) ctx.fail("input must have rank >= 2");
  const int64_t NC = x.dim(0) * x.dim(1);
  const int64_t S = NC ? x.numel() / NC : 0;
  Shape outShape = {x.dim(0), x.dim(1)};
  outShape.resize(static_cast<size_t>(x.rank()), 1);
  Tensor y(DType::Float32, outShape);
  const double p = static_cast<double>(ctx.attrInt("p", 2));
  for (int64_t nc = 0; nc < NC; ++nc) {
    const float* xc = x.data<float>() + nc * S;
    double acc = kind == PoolKind::Max ? -std::numeric_limits<double>::infinity() : 0.0;
    for (int64_t i = 0; i < S; ++i) {
      if (kind == PoolKind::Max) acc = std::isnan(acc) || acc > xc[i] ? acc : static_cast<double>(xc[i]);  // NaN wins
      else if (kind == PoolKind::Lp) acc += std::pow(std::abs(xc[i]), p);
      else acc += xc[i];
    }
    if (kind == PoolKind::Average) acc /= static_cast<double>(S);
    if (kind == PoolKind::Lp) acc = std::pow(acc, 1.0 / p);
    y.data<float>()[nc] = static_cast<float>(acc);
  }
  ctx.setOutput(0, std::move(y));
}

}  // namespace

void registerPoolKernels(KernelRegistry& r) {
  r["MaxPool"] = [](KernelContext& c) { pool(c, PoolKind::Max); };
  r["AveragePool"] = [](KernelContext& c) { pool(c, PoolKind::Average); };
  r["LpPool"] = [](KernelContext& c) { pool(c, PoolKind::Lp); };
  r["GlobalAveragePool"] = [](KernelContext& c) { globalPool(c, PoolKind::Average); };
  r["GlobalMaxPool"] = [](KernelContext& c) { globalPool(c, PoolKind::Max); };
  r["GlobalLpPool"] = [](KernelContext& c) { globalPool(c, PoolKind::Lp); };
}

}  // namespace fusec::interp
