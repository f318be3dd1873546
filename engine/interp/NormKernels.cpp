/// Normalizations: BatchNormalization (inference), InstanceNormalization,
/// LayerNormalization. Statistics are accumulated in double.
#include <cmath>

#include "KernelUtil.h"

namespace fusec::interp {
namespace {

/// Reads a per-channel parameter operand that must hold C values.
const float* channelParam(const KernelContext& ctx, size_t i, int64_t C, const char* what) {
  expectDType(ctx, i, DType::Float32);
  if (ctx.in(i).numel() != C)
    ctx.fail(std::string(what) + " must have " + std::to_string(C) + " values, got " +
             shapeToString(ctx.in(i).shape()));
  return ctx.in(i).data<float>();
}

void batchNorm(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  expectDType(ctx, 0, DType::Float32);
  if (x.rank() < 2) ctx.fail("input must have rank >= 2");
  const int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<int64_t>(1, N * C);
  const float* scale = channelParam(ctx, 1, C, "scale");
  const float* bias = channelParam(ctx, 2, C, "bias");
  const float* mean = channelParam(ctx, 3, C, "mean");
  const float* var = channelParam(ctx, 4, C, "variance");
  const double eps = ctx.attrFloat("epsilon", 1e-5f);
  // The statistics normalized with, in double: the batch's are not
  // rounded to float first (near a large offset, a mean rounded at the
  // offset's ulp would move every deviation by it).
  std::vector<double> useMean(mean, mean + C), useVar(var, var + C);
  if (ctx.attrInt("training_mode", 0) != 0) {
    // Training mode: normalize with the batch statistics (biased variance)
    // and return the updated running statistics as results 1 and 2.
    const double momentum = ctx.attrFloat("momentum", 0.9f);
    Tensor runMean(DType::Float32, {C}), runVar(DType::Float32, {C});
    const double count = static_cast<double>(N * S);
    for (int64_t c = 0; c < C; ++c) {
      double sum = 0, sq = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t s = 0; s < S; ++s) sum += x.data<float>()[(n * C + c) * S + s];
      const double m = sum / count;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t s = 0; s < S; ++s) {
          const double d = x.data<float>()[(n * C + c) * S + s] - m;
          sq += d * d;
        }
      useMean[c] = m;
      useVar[c] = sq / count;
      runMean.data<float>()[c] = static_cast<float>(mean[c] * momentum + m * (1 - momentum));
      runVar.data<float>()[c] = static_cast<float>(var[c] * momentum + static_cast<float>(useVar[c]) * (1 - momentum));
    }
    ctx.setOutput(1, std::move(runMean));
    ctx.setOutput(2, std::move(runVar));
  }
  Tensor y(DType::Float32, x.shape());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const double a = scale[c] / std::sqrt(useVar[c] + eps);
      const double m = useMean[c];
      const float* in = x.data<float>() + (n * C + c) * S;
      float* out = y.data<float>() + (n * C + c) * S;
      for (int64_t s = 0; s < S; ++s) out[s] = static_cast<float>((in[s] - m) * a + bias[c]);
    }
  ctx.setOutput(0, std::move(y));
}

void instanceNorm(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  expectDType(ctx, 0, DType::Float32);
  if (x.rank() < 3) ctx.fail("input must have rank >= 3");
  const int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<int64_t>(1, N * C);
  const float* scale = channelParam(ctx, 1, C, "scale");
  const float* bias = channelParam(ctx, 2, C, "bias");
  const double eps = ctx.attrFloat("epsilon", 1e-5f);
  Tensor y(DType::Float32, x.shape());
  for (int64_t nc = 0; nc < N * C; ++nc) {
    const float* in = x.data<float>() + nc * S;
    float* out = y.data<float>() + nc * S;
    double sum = 0, sq = 0;
    for (int64_t s = 0; s < S; ++s) sum += in[s];
    const double mean = sum / static_cast<double>(S);
    for (int64_t s = 0; s < S; ++s) sq += (in[s] - mean) * (in[s] - mean);
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(S) + eps);
    const int64_t c = nc % C;
    for (int64_t s = 0; s < S; ++s) out[s] = static_cast<float>((in[s] - mean) * inv * scale[c] + bias[c]);
  }
  ctx.setOutput(0, std::move(y));
}

void layerNorm(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  expectDType(ctx, 0, DType::Float32);
  const int64_t axis = normalizeAxis(ctx, ctx.attrInt("axis", -1), x.rank());
  const double eps = ctx.attrFloat("epsilon", 1e-5f);
  Shape normShape(x.shape().begin() + axis, x.shape().end());
  const int64_t inner = shapeNumel(normShape), outer = inner ? x.numel() / inner : 0;
  // Scale and bias broadcast (unidirectionally) to the normalized shape.
  auto param = [&](size_t i) -> std::vector<float> {
    std::vector<float> v(static_cast<size_t>(inner), i == 1 ? 1.f : 0.f);
    if (!ctx.has(i)) return v;
    const Tensor& t = ctx.in(i);
    expectDType(ctx, i, DType::Float32);
    if (broadcastShapes(ctx, {t.shape(), normShape}) != normShape)
      ctx.fail("operand " + std::to_string(i) + " shape " + shapeToString(t.shape()) +
               " does not broadcast to " + shapeToString(normShape));
    std::array<Shape, 1> strides = {broadcastStrides(t.shape(), normShape)};
    forEachBroadcast<1>(normShape, strides, [&](int64_t k, const std::array<int64_t, 1>& off) {
      v[static_cast<size_t>(k)] = t.data<float>()[off[0]];
    });
    return v;
  };
  std::vector<float> scale = param(1), bias = param(2);
  Shape statShape(x.shape().begin(), x.shape().begin() + axis);
  statShape.resize(static_cast<size_t>(x.rank()), 1);
  Tensor y(DType::Float32, x.shape()), meanT(DType::Float32, statShape), invT(DType::Float32, statShape);
  for (int64_t o = 0; o < outer; ++o) {
    const float* in = x.data<float>() + o * inner;
    float* out = y.data<float>() + o * inner;
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < inner; ++i) sum += in[i];
    const double mean = sum / static_cast<double>(inner);
    for (int64_t i = 0; i < inner; ++i) sq += (in[i] - mean) * (in[i] - mean);
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(inner) + eps);
    for (int64_t i = 0; i < inner; ++i)
      out[i] = static_cast<float>((in[i] - mean) * inv * scale[i] + bias[i]);
    meanT.data<float>()[o] = static_cast<float>(mean);
    invT.data<float>()[o] = static_cast<float>(inv);
  }
  ctx.setOutput(0, std::move(y));
  ctx.setOutput(1, std::move(meanT));
  ctx.setOutput(2, std::move(invT));
}

}  // namespace

void registerNormKernels(KernelRegistry& r) {
  r["BatchNormalization"] = batchNorm;
  r["InstanceNormalization"] = instanceNorm;
  r["LayerNormalization"] = layerNorm;
}

}  // namespace fusec::interp
