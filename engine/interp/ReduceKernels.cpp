/// Reductions: Reduce{Sum,Mean,Max,Min,Prod,L1,L2,LogSum,LogSumExp,SumSquare},
/// ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax, CumSum. Accumulation in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "KernelUtil.h"

namespace fusec::interp {
namespace {

enum class ReduceKind { Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare };

/// The axes to reduce, from the attribute (older opsets) or the second
/// operand; empty means all axes unless noop_with_empty_axes is set.
std::set<int64_t> reduceAxes(const KernelContext& ctx, int64_t rank, bool& noop) {
  std::vector<int64_t> axes;
  if (ctx.has(1)) axes = intsOf(ctx.in(1));
  else axes = ctx.attrInts("axes");
  noop = axes.empty() && ctx.attrInt("noop_with_empty_axes", 0) != 0;
  std::set<int64_t> out;
  for (int64_t a : axes) out.insert(normalizeAxis(ctx, a, rank));
  if (axes.empty())
    for (int64_t a = 0; a < rank; ++a) out.insert(a);
  return out;
}

void reduce(KernelContext& ctx, ReduceKind kind) {
  const Tensor& x = ctx.in(0);
  bool noop = false;
  std::set<int64_t> axes = reduceAxes(ctx, x.rank(), noop);
  if (noop) {
    ctx.setOutput(0, x);
    return;
  }
  const bool keepDims = ctx.attrInt("keepdims", 1) != 0;
  Shape kept = x.shape();
  for (int64_t a : axes) kept[static_cast<size_t>(a)] = 1;
  Shape outShape;
  for (int64_t a = 0; a < x.rank(); ++a)
    if (keepDims || !axes.count(a)) outShape.push_back(kept[static_cast<size_t>(a)]);
  const int64_t outN = shapeNumel(kept);
  int64_t count = 1;
  for (int64_t a : axes) count *= x.dim(a);
  double init = 0;
  if (kind == ReduceKind::Max) init = -std::numeric_limits<double>::infinity();
  if (kind == ReduceKind::Min) init = std::numeric_limits<double>::infinity();
  if (kind == ReduceKind::Prod) init = 1;
  if (count == 0 && (kind == ReduceKind::Max || kind == ReduceKind::Min) && !isFloatingPoint(x.dtype()))
    ctx.fail("reducing an empty integer tensor has no value");
  std::vector<double> acc(static_cast<size_t>(outN), init);
  // LogSumExp subtracts the max first for stability.
  std::vector<double> maxes;
  std::array<Shape, 1> strides = {broadcastStrides(kept, x.shape())};
  dispatchNumeric(ctx, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    if (kind == ReduceKind::LogSumExp) {
      maxes.assign(static_cast<size_t>(outN), -std::numeric_limits<double>::infinity());
      forEachBroadcast<1>(x.shape(), strides, [&](int64_t i, const std::array<int64_t, 1>& off) {
        maxes[off[0]] = std::max(maxes[off[0]], static_cast<double>(in[i]));
      });
    }
    forEachBroadcast<1>(x.shape(), strides, [&](int64_t i, const std::array<int64_t, 1>& off) {
      double v = static_cast<double>(in[i]);
      double& a = acc[static_cast<size_t>(off[0])];
      switch (kind) {
        case ReduceKind::Sum: case ReduceKind::Mean: case ReduceKind::LogSum: a += v; break;
        // A NaN is the extreme, as numpy's and PyTorch's max and min have it.
        case ReduceKind::Max: a = std::isnan(a) || a > v ? a : v; break;
        case ReduceKind::Min: a = std::isnan(a) || a < v ? a : v; break;
        case ReduceKind::Prod: a *= v; break;
        case ReduceKind::L1: a += std::abs(v); break;
        case ReduceKind::L2: case ReduceKind::SumSquare: a += v * v; break;
        // (Shifted by a finite max only: with inf among the values,
        // inf - inf would be NaN where log(sum(exp(x))) is inf or -inf.)
        case ReduceKind::LogSumExp: a += std::exp(std::isfinite(maxes[off[0]]) ? v - maxes[off[0]] : v); break;
      }
    });
    Tensor y(x.dtype(), outShape);
    T* out = y.data<T>();
    for (int64_t o = 0; o < outN; ++o) {
      double a = acc[static_cast<size_t>(o)];
      switch (kind) {
        case ReduceKind::Mean: a /= static_cast<double>(count); break;
        case ReduceKind::L2: a = std::sqrt(a); break;
        case ReduceKind::LogSum: a = std::log(a); break;
        case ReduceKind::LogSumExp: a = std::log(a) + (std::isfinite(maxes[o]) ? maxes[o] : 0.0); break;
        default: break;
      }
      out[o] = static_cast<T>(a);
    }
    ctx.setOutput(0, std::move(y));
  });
}

void argReduce(KernelContext& ctx, bool isMax) {
  const Tensor& x = ctx.in(0);
  const int64_t axis = normalizeAxis(ctx, ctx.attrInt("axis", 0), x.rank());
  const bool keepDims = ctx.attrInt("keepdims", 1) != 0;
  const bool last = ctx.attrInt("select_last_index", 0) != 0;
  const int64_t len = x.dim(axis);
  if (len == 0) ctx.fail("cannot take the arg of an empty axis");
  int64_t outer = 1, inner = 1;
  for (int64_t a = 0; a < axis; ++a) outer *= x.dim(a);
  for (int64_t a = axis + 1; a < x.rank(); ++a) inner *= x.dim(a);
  Shape outShape = x.shape();
  if (keepDims) outShape[static_cast<size_t>(axis)] = 1;
  else outShape.erase(outShape.begin() + axis);
  Tensor y(DType::Int64, outShape);
  dispatchNumeric(ctx, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t best = 0;
        T bestV = in[o * len * inner + i];
        for (int64_t k = 1; k < len; ++k) {
          T v = in[(o * len + k) * inner + i];
          bool better = isMax ? (last ? v >= bestV : v > bestV) : (last ? v <= bestV : v < bestV);
          if (better) {
            best = k;
            bestV = v;
          }
        }
        y.data<int64_t>()[o * inner + i] = best;
      }
  });
  ctx.setOutput(0, std::move(y));
}

enum class SoftmaxKind { Softmax, LogSoftmax, Hardmax };

void softmax(KernelContext& ctx, SoftmaxKind kind) {
  const Tensor& x = ctx.in(0);
  expectDType(ctx, 0, DType::Float32);
  const bool legacy = ctx.opset() < 13;  // opset < 13 flattens to 2-D at `axis`
  const int64_t axis = x.rank() == 0 ? 0 : normalizeAxis(ctx, ctx.attrInt("axis", legacy ? 1 : -1), x.rank());
  int64_t outer = 1, len = 1, inner = 1;
  for (int64_t a = 0; a < x.rank(); ++a) {
    if (a < axis) outer *= x.dim(a);
    else if (a == axis || legacy) len *= x.dim(a);
    else inner *= x.dim(a);
  }
  Tensor y(DType::Float32, x.shape());
  const float* in = x.data<float>();
  float* out = y.data<float>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return (o * len + k) * inner + i; };
      double mx = -std::numeric_limits<double>::infinity();
      int64_t arg = 0;
      for (int64_t k = 0; k < len; ++k)
        if (in[at(k)] > mx) {
          mx = in[at(k)];
          arg = k;
        }
      if (kind == SoftmaxKind::Hardmax) {
        for (int64_t k = 0; k < len; ++k) out[at(k)] = k == arg ? 1.f : 0.f;
        continue;
      }
      double sum = 0;
      for (int64_t k = 0; k < len; ++k) sum += std::exp(in[at(k)] - mx);
      for (int64_t k = 0; k < len; ++k) {
        double shifted = in[at(k)] - mx;
        out[at(k)] = static_cast<float>(kind == SoftmaxKind::Softmax ? std::exp(shifted) / sum
                                                                     : shifted - std::log(sum));
      }
    }
  ctx.setOutput(0, std::move(y));
}

void cumSum(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  std::vector<int64_t> axisV = intsOf(ctx.in(1));
  if (axisV.size() != 1) ctx.fail("axis must be a scalar");
  const int64_t axis = normalizeAxis(ctx, axisV[0], x.rank());
  const bool exclusive = ctx.attrInt("exclusive", 0) != 0;
  const bool reverse = ctx.attrInt("reverse", 0) != 0;
  int64_t outer = 1, inner = 1;
  const int64_t len = x.dim(axis);
  for (int64_t a = 0; a < axis; ++a) outer *= x.dim(a);
  for (int64_t a = axis + 1; a < x.rank(); ++a) inner *= x.dim(a);
  dispatchNumeric(ctx, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor y(x.dtype(), x.shape());
    const T* in = x.data<T>();
    T* out = y.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        T acc = 0;
        for (int64_t s = 0; s < len; ++s) {
          int64_t k = reverse ? len - 1 - s : s;
          int64_t idx = (o * len + k) * inner + i;
          if (exclusive) {
            out[idx] = acc;
            acc = static_cast<T>(acc + in[idx]);
          } else {
            acc = static_cast<T>(acc + in[idx]);
            out[idx] = acc;
          }
        }
      }
    ctx.setOutput(0, std::move(y));
  });
}

}  // namespace

void registerReduceKernels(KernelRegistry& r) {
  const std::pair<const char*, ReduceKind> kinds[] = {
      {"ReduceSum", ReduceKind::Sum},       {"ReduceMean", ReduceKind::Mean},
      {"ReduceMax", ReduceKind::Max},       {"ReduceMin", ReduceKind::Min},
      {"ReduceProd", ReduceKind::Prod},     {"ReduceL1", ReduceKind::L1},
      {"ReduceL2", ReduceKind::L2},         {"ReduceLogSum", ReduceKind::LogSum},
      {"ReduceLogSumExp", ReduceKind::LogSumExp}, {"ReduceSumSquare", ReduceKind::SumSquare},
  };
  for (auto [name, kind] : kinds) r[name] = [kind = kind](KernelContext& c) { reduce(c, kind); };
  r["ArgMax"] = [](KernelContext& c) { argReduce(c, true); };
  r["ArgMin"] = [](KernelContext& c) { argReduce(c, false); };
  r["Softmax"] = [](KernelContext& c) { softmax(c, SoftmaxKind::Softmax); };
  r["LogSoftmax"] = [](KernelContext& c) { softmax(c, SoftmaxKind::LogSoftmax); };
  r["Hardmax"] = [](KernelContext& c) { softmax(c, SoftmaxKind::Hardmax); };
  r["CumSum"] = cumSum;
}

}  // namespace fusec::interp
