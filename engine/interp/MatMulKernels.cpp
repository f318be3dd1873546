/// Contractions: MatMul (numpy semantics, batch broadcasting), Gemm, and a
/// general Einsum (explicit or implicit output, ellipsis, diagonals).
#include <algorithm>
#include <map>

#include "KernelUtil.h"

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
  std::string eq;
  for (char c : ctx.attrString("equation", "")) if (c != ' ') eq += c;
  if (eq.empty()) ctx.fail("attribute `equation` is required");
  const size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != ctx.numInputs())
    ctx.fail("equation has " + std::to_string(terms.size()) + " operands but the node has " + std::to_string(ctx.numInputs()));
  // Expand "..." into letters '0'.. that cannot clash with user letters.
  size_t ellipsisRank = 0;
  for (size_t t = 0; t < terms.size(); ++t) {
    size_t pos = terms[t].find("...");
    if (pos == std::string::npos) continue;
    int64_t letters = static_cast<int64_t>(terms[t].size()) - 3;
    ellipsisRank = std::max<size_t>(ellipsisRank, static_cast<size_t>(ctx.in(t).rank() - letters));
  }
  auto expand = [&](std::string term, size_t rank) {
    size_t pos = term.find("...");
    if (pos == std::string::npos) return term;
    std::string dots;
    for (size_t i = ellipsisRank - rank; i < ellipsisRank; ++i) dots += static_cast<char>('0' + i);
    return term.replace(pos, 3, dots);
  };
  std::map<char, int64_t> sizes;
  std::map<char, int> counts;
  for (size_t t = 0; t < terms.size(); ++t) {
    const Tensor& x = ctx.in(t);
    expectDType(ctx, t, ctx.in(0).dtype());
    size_t pos = terms[t].find("...");
    size_t erank = pos == std::string::npos ? 0 : static_cast<size_t>(x.rank()) - (terms[t].size() - 3);
    terms[t] = expand(terms[t], erank);
    if (static_cast<int64_t>(terms[t].size()) != x.rank())
      ctx.fail("operand " + std::to_string(t) + " has rank " + std::to_string(x.rank()) + " but the equation gives it " + std::to_string(terms[t].size()) + " indices");
    for (size_t d = 0; d < terms[t].size(); ++d) {
      char c = terms[t][d];
      ++counts[c];
      int64_t n = x.dim(static_cast<int64_t>(d));
      auto [it, fresh] = sizes.emplace(c, n);
      if (!fresh && it->second != n) {
        if (c >= '0' && c <= '9' && (it->second == 1 || n == 1)) it->second = std::max(it->second, n);
        else ctx.fail(std::string("index `") + c + "` has sizes " + std::to_string(it->second) + " and " + std::to_string(n));
      }
    }
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    size_t pos = out.find("...");
    if (pos != std::string::npos) out = expand(out, ellipsisRank);
  } else {
    for (size_t i = 0; i < ellipsisRank; ++i) out += static_cast<char>('0' + i);
    for (auto [c, n] : counts)
      if (n == 1 && !(c >= '0' && c <= '9')) out += c;
  }
  for (char c : out)
    if (!sizes.count(c)) ctx.fail(std::string("output index `") + c + "` does not appear in any operand");
  std::string all = out;
  for (auto [c, n] : sizes)
    if (out.find(c) == std::string::npos) all += c;
  Shape allShape;
  for (char c : all) allShape.push_back(sizes[c]);
  Shape outShape(allShape.begin(), allShape.begin() + static_cast<int64_t>(out.size()));
  // Per operand, its stride along each letter of `all` (0 when absent or broadcast).
  std::vector<Shape> strides;
  for (size_t t = 0; t < terms.size(); ++t) {
    const Tensor& x = ctx.in(t);
    Shape own = stridesOf(x.shape());
    Shape s(all.size(), 0);
    for (size_t d = 0; d < terms[t].size(); ++d)
      if (x.dim(static_cast<int64_t>(d)) != 1) s[all.find(terms[t][d])] += own[d];
    strides.push_back(s);
  }
  const int64_t contracted = shapeNumel(Shape(allShape.begin() + static_cast<int64_t>(out.size()), allShape.end()));
  dispatchNumeric(ctx, ctx.in(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor y(ctx.in(0).dtype(), outShape);
    T* py = y.data<T>();
    Shape idx(all.size(), 0);
    const int64_t total = shapeNumel(allShape);
    for (int64_t i = 0; i < total; ++i) {
      double prod = 1;
      for (size_t t = 0; t < terms.size(); ++t) {
        int64_t off = 0;
        for (size_t d = 0; d < all.size(); ++d) off += idx[d] * strides[t][d];
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
