/// Contractions: MatMul (numpy semantics, batch broadcasting), Gemm, and a
/// general Einsum (explicit or implicit output, ellipsis, diagonals).
#include <algorithm>
#include <map>

#include "KernelUtil.h"
#include "fusec/engine/Einsum.h"

namespace fusec::interp {
namespace {

void matmul(KernelContext& ctx) {
  const Tensor& a0 = ctx.in(0);
  const Tensor& b0 = ctx.in(1);
  expectDType(ctx, 0, DType::Float32);
  expectDType(ctx, 1, DType::Float32);
  if (a0.rank() == 0 || b0.rank() == 0) ctx.fail("operands must have rank >= 1");
  // Rank-1 operands are promoted to matrices and the added dim removed after.
  Tensor a = a0.rank() == 1 ? a0.reshaped({1, a0.dim(0)}) : a0;
  Tensor b = b0.rank() == 1 ? b0.reshaped({b0.dim(0), 1}) : b0;
  const int64_t M = a.dim(a.rank() - 2), K = a.dim(a.rank() - 1);
  const int64_t K2 = b.dim(b.rank() - 2), N = b.dim(b.rank() - 1);
  if (K != K2)
    ctx.fail("inner dimensions differ: " + shapeToString(a0.shape()) + " x " + shapeToString(b0.shape()));
  Shape aBatch(a.shape().begin(), a.shape().end() - 2), bBatch(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcastShapes(ctx, {aBatch, bBatch});
  Shape outShape = batch;
  if (a0.rank() > 1) outShape.push_back(M);
  if (b0.rank() > 1) outShape.push_back(N);
  Tensor y(DType::Float32, outShape);
  if (shapeNumel(bBatch) == 1 && aBatch == batch) {
    // One B for every batch of A: one GEMM of all A's rows (a [seq, 1, d]
    // activation times a weight is not seq products of one row each).
    gemm(false, false, shapeNumel(batch) * M, N, K, 1.f, a.data<float>(), b.data<float>(), 0.f, y.data<float>());
    ctx.setOutput(0, std::move(y));
    return;
  }
  std::array<Shape, 2> strides = {broadcastStrides(aBatch, batch), broadcastStrides(bBatch, batch)};
  forEachBroadcast<2>(batch, strides, [&](int64_t i, const std::array<int64_t, 2>& off) {
    gemm(false, false, M, N, K, 1.f, a.data<float>() + off[0] * M * K, b.data<float>() + off[1] * K * N,
         0.f, y.data<float>() + i * M * N);
  });
  ctx.setOutput(0, std::move(y));
}

void gemmOp(KernelContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  expectDType(ctx, 0, DType::Float32);
  expectDType(ctx, 1, DType::Float32);
  if (a.rank() != 2 || b.rank() != 2) ctx.fail("A and B must be matrices");
  const bool tA = ctx.attrInt("transA", 0) != 0, tB = ctx.attrInt("transB", 0) != 0;
  const float alpha = ctx.attrFloat("alpha", 1.f), beta = ctx.attrFloat("beta", 1.f);
  const int64_t M = tA ? a.dim(1) : a.dim(0), K = tA ? a.dim(0) : a.dim(1);
  const int64_t K2 = tB ? b.dim(1) : b.dim(0), N = tB ? b.dim(0) : b.dim(1);
  if (K != K2) ctx.fail("inner dimensions differ: " + shapeToString(a.shape()) + " x " + shapeToString(b.shape()));
  Tensor y(DType::Float32, {M, N});
  float betaUsed = 0.f;
  if (ctx.has(2)) {
    const Tensor& c = ctx.in(2);
    expectDType(ctx, 2, DType::Float32);
    if (broadcastShapes(ctx, {c.shape(), {M, N}}) != Shape{M, N})
      ctx.fail("C of shape " + shapeToString(c.shape()) + " does not broadcast to " + shapeToString({M, N}));
    std::array<Shape, 1> strides = {broadcastStrides(c.shape(), {M, N})};
    forEachBroadcast<1>({M, N}, strides, [&](int64_t i, const std::array<int64_t, 1>& off) {
      y.data<float>()[i] = c.data<float>()[off[0]];
    });
    betaUsed = beta;
  }
  gemm(tA, tB, M, N, K, alpha, a.data<float>(), b.data<float>(), betaUsed, y.data<float>());
  ctx.setOutput(0, std::move(y));
}

void einsum(KernelContext& ctx) {
  std::vector<Shape> shapes;
  for (size_t t = 0; t < ctx.numInputs(); ++t) {
    expectDType(ctx, t, ctx.in(0).dtype());
    shapes.push_back(ctx.in(t).shape());
  }
  Expected<EinsumGeometry> geo = einsumGeometry(ctx.attrString("equation", ""), shapes);
  if (!geo) ctx.fail(geo.error().message);
  const std::vector<Shape>& strides = geo->strides;
  const Shape& allShape = geo->sizes;
  const Shape outShape = geo->outputShape();
  const size_t numLetters = allShape.size(), numTerms = shapes.size();
  const int64_t contracted = geo->contractedSize();
  dispatchNumeric(ctx, ctx.in(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor y(ctx.in(0).dtype(), outShape);
    T* py = y.data<T>();
    Shape idx(numLetters, 0);
    const int64_t total = shapeNumel(allShape);
    for (int64_t i = 0; i < total; ++i) {
      double prod = 1;
      for (size_t t = 0; t < numTerms; ++t) {
        int64_t off = 0;
        for (size_t d = 0; d < numLetters; ++d) off += idx[d] * strides[t][d];
        prod *= static_cast<double>(ctx.in(t).template data<T>()[off]);
      }
      py[i / std::max<int64_t>(contracted, 1)] = static_cast<T>(py[i / std::max<int64_t>(contracted, 1)] + prod);
      nextIndex(idx, allShape);
    }
    ctx.setOutput(0, std::move(y));
  });
}

}  // namespace

void registerMatMulKernels(KernelRegistry& r) {
  r["MatMul"] = matmul;
  r["Gemm"] = gemmOp;
  r["Einsum"] = einsum;
}

}  // namespace fusec::interp
