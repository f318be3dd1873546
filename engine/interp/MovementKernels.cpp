/// Data movement: Reshape, Flatten, Transpose, Concat, Split, Slice, Gather,
/// GatherElements, Squeeze, Unsqueeze, Expand, Tile, Pad, Resize,
/// DepthToSpace, SpaceToDepth. Kernels that only move elements work on bytes,
/// so they accept every element type.
#include <algorithm>
#include <cmath>

#include "KernelUtil.h"

namespace fusec::interp {
namespace {

/// Operand i as integers, with a located error if it is not int32/int64.
std::vector<int64_t> intOperand(const KernelContext& ctx, size_t i) {
  DType t = ctx.in(i).dtype();
  if (t != DType::Int64 && t != DType::Int32)
    ctx.fail("operand " + std::to_string(i) + " must be int64, got `" + std::string(dtypeName(t)) + "`");
  return ctx.in(i).toInt64s();
}

namespace {

/// out[o] = in[i] over the output in row-major order, with the input read
/// through `strides` (the input's strides permuted). Where the output's
/// last axis is not the input's contiguous one, the two axes are walked in
/// square tiles, so both sides stay in cache (a 768 x 3072 weight
/// transposed element by element misses on every read).
template <class T>
void permuteInto(T* out, const T* in, const Shape& shape, const Shape& strides) {
  const size_t rank = shape.size();
  if (rank == 0) {
    out[0] = in[0];
    return;
  }
  const size_t last = rank - 1;
  // The output axis that walks the input contiguously (none for a size-1
  // or broadcast input axis: then any order is as good).
  size_t unit = last;
  for (size_t a = 0; a < rank; ++a)
    if (strides[a] == 1 && shape[a] > 1) unit = a;
  const Shape outStrides = stridesOf(shape);
  constexpr int64_t kTile = 32;
  const int64_t nl = shape[last], nu = unit == last ? 1 : shape[unit];
  // Every index of the other axes (an odometer), then the tiles.
  std::vector<int64_t> idx(rank, 0);
  int64_t inBase = 0, outBase = 0;
  while (true) {
    if (unit == last) {
      const T* src = in + inBase;
      T* dst = out + outBase;
      const int64_t s = strides[last];
      for (int64_t j = 0; j < nl; ++j) dst[j] = src[j * s];
    } else {
      const int64_t su = outStrides[unit], sl = strides[last];
      for (int64_t u0 = 0; u0 < nu; u0 += kTile)
        for (int64_t l0 = 0; l0 < nl; l0 += kTile) {
          const int64_t ue = std::min(nu, u0 + kTile), le = std::min(nl, l0 + kTile);
          for (int64_t u = u0; u < ue; ++u)
            for (int64_t l = l0; l < le; ++l) out[outBase + u * su + l] = in[inBase + u + l * sl];
        }
    }
    // Next index of the axes other than `last` and `unit`.
    size_t d = last;
    while (d-- > 0) {
      if (d == unit) continue;
      if (++idx[d] < shape[d]) {
        inBase += strides[d];
        outBase += outStrides[d];
        break;
      }
      inBase -= strides[d] * (shape[d] - 1);
      outBase -= outStrides[d] * (shape[d] - 1);
      idx[d] = 0;
    }
    if (d == SIZE_MAX) return;
  }
}

}  // namespace

Tensor transposeTensor(const Tensor& x, const std::vector<int64_t>& perm) {
  Shape outShape;
  for (int64_t p : perm) outShape.push_back(x.dim(p));
  Shape inStrides = stridesOf(x.shape());
  Shape strides;
  for (int64_t p : perm) strides.push_back(inStrides[static_cast<size_t>(p)]);
  Tensor out = Tensor::uninitialized(x.dtype(), outShape);  // every element is written below
  if (out.numel() == 0) return out;
  switch (dtypeSize(x.dtype())) {
    case 1: permuteInto(reinterpret_cast<uint8_t*>(out.raw()), reinterpret_cast<const uint8_t*>(x.raw()), outShape, strides); break;
    case 2: permuteInto(reinterpret_cast<uint16_t*>(out.raw()), reinterpret_cast<const uint16_t*>(x.raw()), outShape, strides); break;
    case 4: permuteInto(reinterpret_cast<uint32_t*>(out.raw()), reinterpret_cast<const uint32_t*>(x.raw()), outShape, strides); break;
    case 8: permuteInto(reinterpret_cast<uint64_t*>(out.raw()), reinterpret_cast<const uint64_t*>(x.raw()), outShape, strides); break;
    default: {
      const size_t es = dtypeSize(x.dtype());
      std::array<Shape, 1> st = {strides};
      forEachBroadcast<1>(outShape, st, [&](int64_t i, const std::array<int64_t, 1>& off) {
        std::memcpy(out.raw() + i * es, x.raw() + off[0] * es, es);
      });
    }
  }
  return out;
}

void reshape(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  std::vector<int64_t> shape = ctx.opset() < 5 ? ctx.attrInts("shape") : intOperand(ctx, 1);
  const bool allowZero = ctx.attrInt("allowzero", 0) != 0;
  int64_t inferred = -1, known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allowZero) {
      if (i >= static_cast<size_t>(x.rank())) ctx.fail("shape has 0 at position " + std::to_string(i) + " beyond the input rank");
      shape[i] = x.dim(static_cast<int64_t>(i));
    }
    if (shape[i] == -1) {
      if (inferred >= 0) ctx.fail("shape has more than one -1");
      inferred = static_cast<int64_t>(i);
    } else if (shape[i] < 0) {
      ctx.fail("shape has a negative dimension " + std::to_string(shape[i]));
    } else {
      known *= shape[i];
    }
  }
  if (inferred >= 0) {
    if (known == 0 || x.numel() % known != 0)
      ctx.fail("cannot reshape " + shapeToString(x.shape()) + " to " + shapeToString(shape));
    shape[static_cast<size_t>(inferred)] = x.numel() / known;
  }
  if (shapeNumel(shape) != x.numel())
    ctx.fail("cannot reshape " + shapeToString(x.shape()) + " (" + std::to_string(x.numel()) +
             " elements) to " + shapeToString(shape));
  ctx.setOutput(0, x.reshaped(shape));
}

void flatten(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  int64_t axis = ctx.attrInt("axis", 1);
  if (axis < 0) axis += x.rank();
  if (axis < 0 || axis > x.rank()) ctx.fail("axis is out of range");
  int64_t outer = 1;
  for (int64_t a = 0; a < axis; ++a) outer *= x.dim(a);
  ctx.setOutput(0, x.reshaped({outer, outer ? x.numel() / outer : shapeNumel(Shape(x.shape().begin() + axis, x.shape().end()))}));
}

void transpose(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  std::vector<int64_t> perm = ctx.attrInts("perm");
  if (perm.empty())
    for (int64_t a = x.rank() - 1; a >= 0; --a) perm.push_back(a);
  if (static_cast<int64_t>(perm.size()) != x.rank()) ctx.fail("perm has the wrong length");
  std::vector<bool> seen(perm.size(), false);
  for (int64_t& p : perm) {
    p = normalizeAxis(ctx, p, x.rank());
    if (seen[static_cast<size_t>(p)]) ctx.fail("perm is not a permutation");
    seen[static_cast<size_t>(p)] = true;
  }
  ctx.setOutput(0, transposeTensor(x, perm));
}

void concat(KernelContext& ctx) {
  if (ctx.numInputs() == 0) ctx.fail("needs at least one operand");
  const Tensor& first = ctx.in(0);
  if (!ctx.hasAttr("axis")) ctx.fail("attribute `axis` is required");
  const int64_t axis = normalizeAxis(ctx, ctx.attrInt("axis", 0), first.rank());
  Shape outShape = first.shape();
  outShape[static_cast<size_t>(axis)] = 0;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const Tensor& x = ctx.in(i);
    if (x.dtype() != first.dtype()) ctx.fail("operands have different element types");
    bool ok = x.rank() == first.rank();
    for (int64_t a = 0; ok && a < x.rank(); ++a) ok = a == axis || x.dim(a) == first.dim(a);
    if (!ok) ctx.fail("operand shapes " + shapeToString(first.shape()) + " and " + shapeToString(x.shape()) + " differ off the concat axis");
    outShape[static_cast<size_t>(axis)] += x.dim(axis);
  }
  Tensor y(first.dtype(), outShape);
  int64_t outer = 1;
  for (int64_t a = 0; a < axis; ++a) outer *= outShape[static_cast<size_t>(a)];
  const size_t es = dtypeSize(first.dtype());
  const int64_t outRow = outer ? y.numel() / outer : 0;
  int64_t offset = 0;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const Tensor& x = ctx.in(i);
    const int64_t row = outer ? x.numel() / outer : 0;
    for (int64_t o = 0; row > 0 && o < outer; ++o)
      std::memcpy(y.raw() + (o * outRow + offset) * es, x.raw() + o * row * es, static_cast<size_t>(row) * es);
    offset += row;
  }
  ctx.setOutput(0, std::move(y));
}

/// Copies x[..., start + k*step, ...] along `axis` for k < count.
Tensor sliceAxis(const Tensor& x, int64_t axis, int64_t start, int64_t count, int64_t step = 1) {
  Shape outShape = x.shape();
  outShape[static_cast<size_t>(axis)] = count;
  Shape strides = stridesOf(x.shape());
  const int64_t base = start * strides[static_cast<size_t>(axis)];
  strides[static_cast<size_t>(axis)] *= step;
  std::array<Shape, 1> st = {strides};
  Tensor out(x.dtype(), outShape);
  const size_t es = dtypeSize(x.dtype());
  forEachBroadcast<1>(outShape, st, [&](int64_t i, const std::array<int64_t, 1>& off) {
    std::memcpy(out.raw() + i * es, x.raw() + (base + off[0]) * es, es);
  });
  return out;
}

void split(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const int64_t axis = normalizeAxis(ctx, ctx.attrInt("axis", 0), x.rank());
  const int64_t len = x.dim(axis);
  std::vector<int64_t> sizes = ctx.has(1) ? intOperand(ctx, 1) : ctx.attrInts("split");
  const int64_t parts = static_cast<int64_t>(ctx.numOutputs());
  if (parts == 0) ctx.fail("Split has no results");
  if (sizes.empty()) {
    const int64_t each = (len + parts - 1) / parts;
    for (int64_t p = 0; p < parts; ++p) sizes.push_back(std::min(each, len - std::min(len, p * each)));
  }
  if (static_cast<int64_t>(sizes.size()) != parts)
    ctx.fail("split has " + std::to_string(sizes.size()) + " sizes for " + std::to_string(parts) + " results");
  int64_t total = 0;
  for (int64_t s : sizes)
    if (s < 0 || __builtin_add_overflow(total, s, &total)) ctx.fail("split size " + std::to_string(s) + " is not a size");
  if (total != len) ctx.fail("split sizes sum to " + std::to_string(total) + ", axis has " + std::to_string(len));
  int64_t start = 0;
  for (int64_t p = 0; p < parts; ++p) {
    ctx.setOutput(static_cast<size_t>(p), sliceAxis(x, axis, start, sizes[static_cast<size_t>(p)]));
    start += sizes[static_cast<size_t>(p)];
  }
}

void slice(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (ctx.opset() < 10) {
    starts = ctx.attrInts("starts");
    ends = ctx.attrInts("ends");
    axes = ctx.attrInts("axes");
  } else {
    starts = intOperand(ctx, 1);
    ends = intOperand(ctx, 2);
    if (ctx.has(3)) axes = intOperand(ctx, 3);
    if (ctx.has(4)) steps = intOperand(ctx, 4);
  }
  if (starts.size() != ends.size()) ctx.fail("starts and ends have different lengths");
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size())
    ctx.fail("starts, ends, axes and steps must have the same length");
  Shape outShape = x.shape();
  Shape begin(static_cast<size_t>(x.rank()), 0), step(static_cast<size_t>(x.rank()), 1);
  std::vector<bool> seen(static_cast<size_t>(x.rank()), false);
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t a = normalizeAxis(ctx, axes[i], x.rank());
    if (seen[static_cast<size_t>(a)]) ctx.fail("axis " + std::to_string(a) + " is sliced twice");
    seen[static_cast<size_t>(a)] = true;
    const int64_t dim = x.dim(a), s = steps[i];
    if (s == 0) ctx.fail("step must not be 0");
    int64_t b = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t e = ends[i] < 0 ? ends[i] + dim : ends[i];
    int64_t count;
    if (s > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      count = e > b ? (e - b + s - 1) / s : 0;
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      count = b > e ? (b - e + (-s) - 1) / (-s) : 0;
    }
    begin[static_cast<size_t>(a)] = count ? b : 0;
    step[static_cast<size_t>(a)] = s;
    outShape[static_cast<size_t>(a)] = count;
  }
  Shape inStrides = stridesOf(x.shape());
  int64_t base = 0;
  Shape strides(inStrides.size());
  for (size_t d = 0; d < inStrides.size(); ++d) {
    base += begin[d] * inStrides[d];
    strides[d] = inStrides[d] * step[d];
  }
  Tensor out(x.dtype(), outShape);
  const size_t es = dtypeSize(x.dtype());
  std::array<Shape, 1> st = {strides};
  forEachBroadcast<1>(outShape, st, [&](int64_t i, const std::array<int64_t, 1>& off) {
    std::memcpy(out.raw() + i * es, x.raw() + (base + off[0]) * es, es);
  });
  ctx.setOutput(0, std::move(out));
}

void gather(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  std::vector<int64_t> idx = intOperand(ctx, 1);
  const Shape& idxShape = ctx.in(1).shape();
  const int64_t axis = normalizeAxis(ctx, ctx.attrInt("axis", 0), x.rank());
  const int64_t len = x.dim(axis);
  for (int64_t& i : idx) {
    if (i < -len || i >= len) ctx.fail("index " + std::to_string(i) + " is out of range for axis size " + std::to_string(len));
    if (i < 0) i += len;
  }
  Shape outShape(x.shape().begin(), x.shape().begin() + axis);
  outShape.insert(outShape.end(), idxShape.begin(), idxShape.end());
  outShape.insert(outShape.end(), x.shape().begin() + axis + 1, x.shape().end());
  int64_t outer = 1, inner = 1;
  for (int64_t a = 0; a < axis; ++a) outer *= x.dim(a);
  for (int64_t a = axis + 1; a < x.rank(); ++a) inner *= x.dim(a);
  const size_t es = dtypeSize(x.dtype());
  Tensor out(x.dtype(), outShape);
  const int64_t n = static_cast<int64_t>(idx.size());
  for (int64_t o = 0; inner > 0 && o < outer; ++o)
    for (int64_t j = 0; j < n; ++j)
      std::memcpy(out.raw() + ((o * n + j) * inner) * es, x.raw() + ((o * len + idx[j]) * inner) * es,
                  static_cast<size_t>(inner) * es);
  ctx.setOutput(0, std::move(out));
}

void gatherElements(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  std::vector<int64_t> idx = intOperand(ctx, 1);
  const Shape& idxShape = ctx.in(1).shape();
  if (static_cast<int64_t>(idxShape.size()) != x.rank()) ctx.fail("indices must have the rank of the data");
  const int64_t axis = normalizeAxis(ctx, ctx.attrInt("axis", 0), x.rank());
  const int64_t len = x.dim(axis);
  for (int64_t a = 0; a < x.rank(); ++a)
    if (a != axis && idxShape[static_cast<size_t>(a)] > x.dim(a))
      ctx.fail("indices have " + std::to_string(idxShape[static_cast<size_t>(a)]) + " entries along axis " +
               std::to_string(a) + ", where the data has " + std::to_string(x.dim(a)));
  Shape strides = stridesOf(x.shape());
  Shape walk = strides;
  walk[static_cast<size_t>(axis)] = 0;
  std::array<Shape, 1> st = {walk};
  const size_t es = dtypeSize(x.dtype());
  Tensor out(x.dtype(), idxShape);
  forEachBroadcast<1>(idxShape, st, [&](int64_t i, const std::array<int64_t, 1>& off) {
    int64_t k = idx[static_cast<size_t>(i)];
    if (k < -len || k >= len) ctx.fail("index " + std::to_string(k) + " is out of range");
    if (k < 0) k += len;
    std::memcpy(out.raw() + i * es, x.raw() + (off[0] + k * strides[static_cast<size_t>(axis)]) * es, es);
  });
  ctx.setOutput(0, std::move(out));
}

void squeeze(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  std::vector<int64_t> axes = ctx.has(1) ? intOperand(ctx, 1) : ctx.attrInts("axes");
  std::vector<bool> drop(static_cast<size_t>(x.rank()), false);
  if (axes.empty()) {
    for (int64_t a = 0; a < x.rank(); ++a) drop[static_cast<size_t>(a)] = x.dim(a) == 1;
  }
  for (int64_t a : axes) {
    int64_t n = normalizeAxis(ctx, a, x.rank());
    if (x.dim(n) != 1) ctx.fail("cannot squeeze axis " + std::to_string(a) + " of size " + std::to_string(x.dim(n)));
    drop[static_cast<size_t>(n)] = true;
  }
  Shape out;
  for (int64_t a = 0; a < x.rank(); ++a)
    if (!drop[static_cast<size_t>(a)]) out.push_back(x.dim(a));
  ctx.setOutput(0, x.reshaped(out));
}

void unsqueeze(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  std::vector<int64_t> axes = ctx.has(1) ? intOperand(ctx, 1) : ctx.attrInts("axes");
  const int64_t rank = x.rank() + static_cast<int64_t>(axes.size());
  std::vector<bool> inserted(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    int64_t n = normalizeAxis(ctx, a, rank);
    if (inserted[static_cast<size_t>(n)]) ctx.fail("axis " + std::to_string(a) + " is repeated");
    inserted[static_cast<size_t>(n)] = true;
  }
  Shape out;
  int64_t k = 0;
  for (int64_t a = 0; a < rank; ++a) out.push_back(inserted[static_cast<size_t>(a)] ? 1 : x.dim(k++));
  ctx.setOutput(0, x.reshaped(out));
}

void expand(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Shape shape = broadcastShapes(ctx, {x.shape(), intOperand(ctx, 1)});
  std::array<Shape, 1> st = {broadcastStrides(x.shape(), shape)};
  Tensor out(x.dtype(), shape);
  const size_t es = dtypeSize(x.dtype());
  forEachBroadcast<1>(shape, st, [&](int64_t i, const std::array<int64_t, 1>& off) {
    std::memcpy(out.raw() + i * es, x.raw() + off[0] * es, es);
  });
  ctx.setOutput(0, std::move(out));
}

void tile(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  std::vector<int64_t> reps = intOperand(ctx, 1);
  if (static_cast<int64_t>(reps.size()) != x.rank()) ctx.fail("repeats must have one value per input dim");
  Shape outShape;
  for (int64_t a = 0; a < x.rank(); ++a) {
    if (reps[static_cast<size_t>(a)] < 0) ctx.fail("repeats must be non-negative");
    int64_t n = 0;
    if (__builtin_mul_overflow(x.dim(a), reps[static_cast<size_t>(a)], &n)) ctx.fail("repeats overflow a dim");
    outShape.push_back(n);
  }
  Shape inStrides = stridesOf(x.shape()), outStrides = stridesOf(outShape);
  ctx.setOutput(0, gatherBytes(x, outShape, [&](int64_t i) {
    int64_t src = 0;
    for (size_t d = 0; d < outShape.size(); ++d) src += ((i / outStrides[d]) % outShape[d] % x.shape()[d]) * inStrides[d];
    return src;
  }));
}

void pad(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const int64_t r = x.rank();
  std::vector<int64_t> pads;
  Tensor fill(x.dtype(), {});
  if (ctx.opset() < 11) {
    pads = ctx.attrInts("pads");
    Tensor v = Tensor::scalar(ctx.attrFloat("value", 0.f));
    fill = v.castTo(x.dtype());
  } else {
    pads = intOperand(ctx, 1);
    if (ctx.has(2) && ctx.in(2).numel() > 0) {
      if (ctx.in(2).dtype() != x.dtype()) ctx.fail("constant_value must have the input's element type");
      fill = ctx.in(2).reshaped({});
    }
  }
  if (ctx.has(3)) {
    // opset 18 axes: pads name only these axes.
    std::vector<int64_t> axes = intOperand(ctx, 3);
    std::vector<int64_t> full(static_cast<size_t>(2 * r), 0);
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t a = normalizeAxis(ctx, axes[i], r);
      full[static_cast<size_t>(a)] = pads[i];
      full[static_cast<size_t>(a + r)] = pads[i + axes.size()];
    }
    pads = full;
  }
  if (static_cast<int64_t>(pads.size()) != 2 * r)
    ctx.fail("pads must have " + std::to_string(2 * r) + " values, got " + std::to_string(pads.size()));
  const std::string mode = ctx.attrString("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    ctx.fail("unknown pad mode `" + mode + "`");
  Shape outShape;
  for (int64_t a = 0; a < r; ++a) {
    int64_t n = 0;
    if (__builtin_add_overflow(x.dim(a), pads[static_cast<size_t>(a)], &n) ||
        __builtin_add_overflow(n, pads[static_cast<size_t>(a + r)], &n))
      ctx.fail("pads overflow a dim");
    if (n < 0) ctx.fail("pads make a dimension negative");
    outShape.push_back(n);
    if (mode != "constant" && x.dim(a) == 0 && n > 0) ctx.fail("cannot " + mode + "-pad an empty dimension");
  }
  Shape inStrides = stridesOf(x.shape()), outStrides = stridesOf(outShape);
  Tensor out(x.dtype(), outShape);
  const size_t es = dtypeSize(x.dtype());
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t src = 0;
    bool inside = true;
    for (int64_t a = 0; a < r; ++a) {
      const int64_t n = x.dim(a);
      int64_t p = (i / outStrides[static_cast<size_t>(a)]) % outShape[static_cast<size_t>(a)] - pads[static_cast<size_t>(a)];
      if (p < 0 || p >= n) {
        if (mode == "constant") {
          inside = false;
          break;
        }
        if (mode == "edge") p = std::clamp<int64_t>(p, 0, n - 1);
        else if (mode == "wrap") p = ((p % n) + n) % n;
        else if (n == 1) p = 0;
        else {  // reflect, without repeating the edge
          const int64_t period = 2 * (n - 1);
          p = ((p % period) + period) % period;
          if (p >= n) p = period - p;
        }
      }
      src += p * inStrides[static_cast<size_t>(a)];
    }
    std::memcpy(out.raw() + i * es, inside ? x.raw() + src * es : fill.raw(), es);
  }
  ctx.setOutput(0, std::move(out));
}

void resize(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  expectDType(ctx, 0, DType::Float32);
  const int64_t r = x.rank();
  const std::string mode = ctx.attrString("mode", "nearest");
  if (mode != "nearest" && mode != "linear") ctx.unsupported("mode `" + mode + "` is not supported (nearest and linear are)");
  const std::string ctm = ctx.attrString("coordinate_transformation_mode", ctx.opset() < 11 ? "asymmetric" : "half_pixel");
  const std::string nearestMode = ctx.attrString("nearest_mode", ctx.opset() < 11 ? "floor" : "round_prefer_floor");
  const float extrapolation = ctx.attrFloat("extrapolation_value", 0.f);
  std::vector<float> scales, roi;
  Shape outShape;
  const size_t scalesIdx = ctx.opset() < 11 ? 1 : 2;
  if (ctx.opset() >= 11 && ctx.has(3) && ctx.in(3).numel() > 0) {
    outShape = intOperand(ctx, 3);
    if (static_cast<int64_t>(outShape.size()) != r) ctx.fail("sizes must have one value per dim");
    for (int64_t a = 0; a < r; ++a)
      scales.push_back(static_cast<float>(outShape[static_cast<size_t>(a)]) / static_cast<float>(x.dim(a)));
  } else if (ctx.has(scalesIdx) && ctx.in(scalesIdx).numel() > 0) {
    scales = ctx.in(scalesIdx).toFloats();
    if (static_cast<int64_t>(scales.size()) != r) ctx.fail("scales must have one value per dim");
    for (float s : scales)
      if (!(s > 0) || !std::isfinite(s)) ctx.fail("scales must be positive finite numbers");
    for (int64_t a = 0; a < r; ++a) {
      const double n = std::floor(static_cast<double>(x.dim(a)) * scales[static_cast<size_t>(a)]);
      if (n > 9.2e18) ctx.fail("scales give a dim past 64 bits");
      outShape.push_back(static_cast<int64_t>(n));
    }
  } else {
    ctx.fail("one of scales and sizes is required");
  }
  if (ctx.opset() >= 11 && ctx.has(1) && ctx.in(1).numel() > 0) roi = ctx.in(1).toFloats();
  if (ctm == "tf_crop_and_resize" && static_cast<int64_t>(roi.size()) != 2 * r)
    ctx.fail("tf_crop_and_resize needs an roi with " + std::to_string(2 * r) + " values");
  // Source coordinate of output index o along axis a; nullopt outside the crop.
  auto source = [&](int64_t a, int64_t o, bool& outside) -> double {
    const double in = static_cast<double>(x.dim(a)), out = static_cast<double>(outShape[static_cast<size_t>(a)]);
    const double s = scales[static_cast<size_t>(a)];
    const double xo = static_cast<double>(o);
    outside = false;
    if (ctm == "half_pixel") return (xo + 0.5) / s - 0.5;
    if (ctm == "pytorch_half_pixel") return out > 1 ? (xo + 0.5) / s - 0.5 : 0.0;
    // The scaled (fractional) output length, as ONNX's reference uses it.
    if (ctm == "align_corners") return out == 1 ? 0.0 : xo * (in - 1) / (s * in - 1);
    if (ctm == "asymmetric") return xo / s;
    if (ctm == "tf_half_pixel_for_nn") return (xo + 0.5) / s;
    if (ctm == "tf_crop_and_resize") {
      const double b = roi[static_cast<size_t>(a)], e = roi[static_cast<size_t>(a + r)];
      double v = out > 1 ? b * (in - 1) + xo * (e - b) * (in - 1) / (out - 1) : 0.5 * (b + e) * (in - 1);
      outside = v < 0 || v > in - 1;
      return v;
    }
    ctx.fail("unknown coordinate_transformation_mode `" + ctm + "`");
  };
  auto nearest = [&](double v, int64_t n) {
    double f = std::floor(v);
    int64_t k;
    if (nearestMode == "floor") k = static_cast<int64_t>(f);
    else if (nearestMode == "ceil") k = static_cast<int64_t>(std::ceil(v));
    else if (v - f == 0.5) k = static_cast<int64_t>(nearestMode == "round_prefer_ceil" ? f + 1 : f);
    else k = static_cast<int64_t>(std::round(v));
    return std::clamp<int64_t>(k, 0, n - 1);
  };
  // The result first: its size is checked before anything scales with it.
  Tensor y(DType::Float32, outShape);
  // Per axis and output index: up to two source indices with weights.
  struct Tap { int64_t lo, hi; double w; bool outside; };
  std::vector<std::vector<Tap>> taps(static_cast<size_t>(r));
  for (int64_t a = 0; a < r; ++a) {
    const int64_t n = x.dim(a);
    for (int64_t o = 0; o < outShape[static_cast<size_t>(a)]; ++o) {
      bool outside = false;
      double v = source(a, o, outside);
      if (mode == "nearest") {
        int64_t k = nearest(v, n);
        taps[static_cast<size_t>(a)].push_back({k, k, 0.0, outside});
      } else {
        v = std::clamp(v, 0.0, static_cast<double>(n - 1));
        int64_t lo = static_cast<int64_t>(std::floor(v));
        int64_t hi = std::min(lo + 1, n - 1);
        taps[static_cast<size_t>(a)].push_back({lo, hi, v - static_cast<double>(lo), outside});
      }
    }
  }
  Shape inStrides = stridesOf(x.shape());
  Shape idx(static_cast<size_t>(r), 0);
  const float* in = x.data<float>();
  for (int64_t i = 0; i < y.numel(); ++i, nextIndex(idx, outShape)) {
    bool outside = false;
    for (int64_t a = 0; a < r; ++a) outside |= taps[static_cast<size_t>(a)][static_cast<size_t>(idx[static_cast<size_t>(a)])].outside;
    if (outside) {
      y.data<float>()[i] = extrapolation;
      continue;
    }
    // Sum over the 2^r corners (weights are 0 for nearest's second corner).
    double acc = 0;
    for (int64_t corner = 0; corner < (int64_t{1} << r); ++corner) {
      double w = 1;
      int64_t off = 0;
      for (int64_t a = 0; a < r && w != 0; ++a) {
        const Tap& t = taps[static_cast<size_t>(a)][static_cast<size_t>(idx[static_cast<size_t>(a)])];
        bool high = (corner >> a) & 1;
        w *= high ? t.w : 1.0 - t.w;
        off += (high ? t.hi : t.lo) * inStrides[static_cast<size_t>(a)];
      }
      if (w != 0) acc += w * in[off];
    }
    y.data<float>()[i] = static_cast<float>(acc);
  }
  ctx.setOutput(0, std::move(y));
}

void depthToSpace(KernelContext& ctx, bool toSpace) {
  const Tensor& x = ctx.in(0);
  if (x.rank() != 4) ctx.fail("input must have rank 4");
  const int64_t b = ctx.attrInt("blocksize", 0);
  if (b <= 0) ctx.fail("attribute `blocksize` must be positive");
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  if (toSpace) {
    if (C % (b * b)) ctx.fail("channels must be divisible by blocksize squared");
    const bool crd = ctx.attrString("mode", "DCR") == "CRD";
    Tensor t = crd ? x.reshaped({N, C / (b * b), b, b, H, W}) : x.reshaped({N, b, b, C / (b * b), H, W});
    Tensor y = crd ? transposeTensor(t, {0, 1, 4, 2, 5, 3}) : transposeTensor(t, {0, 3, 4, 1, 5, 2});
    ctx.setOutput(0, y.reshaped({N, C / (b * b), H * b, W * b}));
  } else {
    if (H % b || W % b) ctx.fail("spatial dims must be divisible by blocksize");
    Tensor t = x.reshaped({N, C, H / b, b, W / b, b});
    ctx.setOutput(0, transposeTensor(t, {0, 3, 5, 1, 2, 4}).reshaped({N, C * b * b, H / b, W / b}));
  }
}

}  // namespace

/// Writes `value` over `out`'s element `at` as ScatterND and
/// ScatterElements do: replaced (`reduction` none), or combined with what
/// is there (add, mul, max, min).
void scatterInto(KernelContext& ctx, Tensor& out, int64_t at, const Tensor& updates, int64_t from,
                 const std::string& reduction) {
  const size_t es = dtypeSize(out.dtype());
  if (reduction == "none") {
    std::memcpy(out.raw() + at * es, updates.raw() + from * es, es);
    return;
  }
  dispatchNumeric(ctx, out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T& o = out.data<T>()[at];
    const T u = updates.data<T>()[from];
    if (reduction == "add") o = static_cast<T>(o + u);
    else if (reduction == "mul") o = static_cast<T>(o * u);
    else if (reduction == "max") o = std::max(o, u);
    else if (reduction == "min") o = std::min(o, u);
    else ctx.fail("reduction `" + reduction + "` is not one of none, add, mul, max, min");
  });
}

/// ScatterND: the data with the slices that `indices` (its last dim: how
/// many leading dims of the data each index names) point at replaced by
/// (or combined with) the slices of `updates`.
void scatterND(KernelContext& ctx) {
  const Tensor& data = ctx.in(0);
  const Tensor& updates = ctx.in(2);
  const std::vector<int64_t> idx = intOperand(ctx, 1);
  const Shape& is = ctx.in(1).shape();
  if (is.empty()) ctx.fail("indices must have at least one dim");
  const auto k = static_cast<size_t>(is.back());
  if (k < 1 || k > data.shape().size()) ctx.fail("indices' last dim must be between 1 and the data's rank");
  if (updates.dtype() != data.dtype()) ctx.fail("updates must have the data's element type");
  Shape expect(is.begin(), is.end() - 1);
  expect.insert(expect.end(), data.shape().begin() + static_cast<std::ptrdiff_t>(k), data.shape().end());
  if (updates.shape() != expect)
    ctx.fail("updates have shape " + shapeToString(updates.shape()) + ", not " + shapeToString(expect));
  const Shape strides = stridesOf(data.shape());
  const int64_t slice = strides[k - 1];  // the elements of data.shape[k:]
  const int64_t count = static_cast<int64_t>(idx.size() / k);
  Tensor out = data;
  const std::string reduction = ctx.attrString("reduction", "none");
  for (int64_t s = 0; s < count; ++s) {
    int64_t at = 0;
    for (size_t d = 0; d < k; ++d) {
      int64_t i = idx[static_cast<size_t>(s) * k + d];
      const int64_t len = data.shape()[d];
      if (i < -len || i >= len) ctx.fail("index " + std::to_string(i) + " is out of range for a dim of " + std::to_string(len));
      if (i < 0) i += len;
      at += i * strides[d];
    }
    for (int64_t e = 0; e < slice; ++e) scatterInto(ctx, out, at + e, updates, s * slice + e, reduction);
  }
  ctx.setOutput(0, std::move(out));
}

/// ScatterElements (and its old name Scatter): out[..., indices[i], ...] =
/// updates[i] along `axis`, indices and updates of one shape.
void scatterElements(KernelContext& ctx) {
  const Tensor& data = ctx.in(0);
  const Tensor& updates = ctx.in(2);
  const std::vector<int64_t> idx = intOperand(ctx, 1);
  const Shape& is = ctx.in(1).shape();
  if (is != updates.shape()) ctx.fail("indices and updates must have one shape");
  if (static_cast<int64_t>(is.size()) != data.rank()) ctx.fail("indices must have the rank of the data");
  if (updates.dtype() != data.dtype()) ctx.fail("updates must have the data's element type");
  const int64_t axis = normalizeAxis(ctx, ctx.attrInt("axis", 0), data.rank());
  for (int64_t a = 0; a < data.rank(); ++a)
    if (a != axis && is[static_cast<size_t>(a)] > data.dim(a)) ctx.fail("indices have more entries than the data along axis " + std::to_string(a));
  const Shape strides = stridesOf(data.shape());
  Shape walk = strides;
  walk[static_cast<size_t>(axis)] = 0;
  std::array<Shape, 1> st = {walk};
  const int64_t len = data.dim(axis);
  Tensor out = data;
  const std::string reduction = ctx.attrString("reduction", "none");
  forEachBroadcast<1>(is, st, [&](int64_t i, const std::array<int64_t, 1>& off) {
    int64_t k = idx[static_cast<size_t>(i)];
    if (k < -len || k >= len) ctx.fail("index " + std::to_string(k) + " is out of range");
    if (k < 0) k += len;
    scatterInto(ctx, out, off[0] + k * strides[static_cast<size_t>(axis)], updates, i, reduction);
  });
  ctx.setOutput(0, std::move(out));
}

/// Trilu: the upper (or lower) triangle of each matrix of the last two
/// dims, from diagonal k; zero elsewhere.
void trilu(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  if (x.rank() < 2) ctx.fail("input must have at least two dims");
  int64_t k = 0;
  if (ctx.has(1)) {
    const std::vector<int64_t> kv = intOperand(ctx, 1);
    if (kv.size() != 1) ctx.fail("k must hold one element");
    k = kv[0];
  }
  const bool upper = ctx.attrInt("upper", 1) != 0;
  const int64_t rows = x.dim(x.rank() - 2), cols = x.dim(x.rank() - 1);
  Tensor out(x.dtype(), x.shape());  // zero-filled
  const size_t es = dtypeSize(x.dtype());
  for (int64_t i = 0; i < out.numel(); ++i) {
    const int64_t c = i % cols, r = (i / cols) % rows;
    const bool keep = upper ? (c - r >= k) : (c - r <= k);
    if (keep) std::memcpy(out.raw() + i * es, x.raw() + i * es, es);
  }
  ctx.setOutput(0, std::move(out));
}

void registerMovementKernels(KernelRegistry& r) {
  r["ScatterND"] = scatterND;
  r["ScatterElements"] = scatterElements;
  r["Scatter"] = scatterElements;
  r["Trilu"] = trilu;
  r["Reshape"] = reshape;
  r["Flatten"] = flatten;
  r["Transpose"] = transpose;
  r["Concat"] = concat;
  r["Split"] = split;
  r["Slice"] = slice;
  r["Gather"] = gather;
  r["GatherElements"] = gatherElements;
  r["Squeeze"] = squeeze;
  r["Unsqueeze"] = unsqueeze;
  r["Expand"] = expand;
  r["Tile"] = tile;
  r["Pad"] = pad;
  r["Resize"] = resize;
  r["DepthToSpace"] = [](KernelContext& c) { depthToSpace(c, true); };
  r["SpaceToDepth"] = [](KernelContext& c) { depthToSpace(c, false); };
}

}  // namespace fusec::interp
