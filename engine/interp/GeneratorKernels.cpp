/// Ops that make tensors from attributes or shapes: Constant,
/// ConstantOfShape, Range, Shape, Size, EyeLike.
#include <cmath>

#include "KernelUtil.h"

namespace fusec::interp {
namespace {

void constant(KernelContext& ctx) {
  if (const Tensor* t = ctx.attrTensor("value")) return ctx.setOutput(0, *t);
  if (ctx.hasAttr("value_float")) return ctx.setOutput(0, Tensor::scalar(ctx.attrFloat("value_float", 0)));
  if (ctx.hasAttr("value_int")) return ctx.setOutput(0, Tensor::scalar(ctx.attrInt("value_int", 0)));
  if (ctx.hasAttr("value_floats")) {
    auto v = ctx.attrFloats("value_floats");
    return ctx.setOutput(0, Tensor::fromVector<float>({static_cast<int64_t>(v.size())}, v));
  }
  if (ctx.hasAttr("value_ints")) {
    auto v = ctx.attrInts("value_ints");
    return ctx.setOutput(0, Tensor::fromVector<int64_t>({static_cast<int64_t>(v.size())}, v));
  }
  ctx.fail("has no supported value attribute");
}

void constantOfShape(KernelContext& ctx) {
  Shape shape = intsOf(ctx.in(0));
  for (int64_t d : shape)
    if (d < 0) ctx.fail("shape has a negative dimension");
  Tensor fill = Tensor::scalar(0.f);
  if (const Tensor* t = ctx.attrTensor("value")) {
    if (t->numel() != 1) ctx.fail("attribute `value` must hold one element");
    fill = *t;
  }
  Tensor out(fill.dtype(), shape);
  const size_t es = dtypeSize(fill.dtype());
  for (int64_t i = 0; i < out.numel(); ++i) std::memcpy(out.raw() + i * es, fill.raw(), es);
  ctx.setOutput(0, std::move(out));
}

void range(KernelContext& ctx) {
  const Tensor& start = ctx.in(0);
  for (size_t i = 1; i < 3; ++i)
    if (ctx.in(i).dtype() != start.dtype()) ctx.fail("start, limit and delta must have one element type");
  dispatchNumeric(ctx, start.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T s = ctx.scalarIn<T>(0, "start"), l = ctx.scalarIn<T>(1, "limit"), d = ctx.scalarIn<T>(2, "delta");
    if (d == 0) ctx.fail("delta must not be 0");
    double count = std::ceil((static_cast<double>(l) - static_cast<double>(s)) / static_cast<double>(d));
    if (std::isnan(count) || count > 9.2e18) ctx.fail("a range of more elements than fit in 64 bits");
    int64_t n = std::max<int64_t>(0, static_cast<int64_t>(count));
    Tensor out(start.dtype(), {n});
    for (int64_t i = 0; i < n; ++i) out.data<T>()[i] = static_cast<T>(s + static_cast<T>(i) * d);
    ctx.setOutput(0, std::move(out));
  });
}

void shape(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const int64_t r = x.rank();
  int64_t start = ctx.attrInt("start", 0), end = ctx.attrInt("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, 0, r);
  std::vector<int64_t> dims(x.shape().begin() + start, x.shape().begin() + std::max(start, end));
  ctx.setOutput(0, Tensor::fromVector<int64_t>({static_cast<int64_t>(dims.size())}, dims));
}

void size(KernelContext& ctx) { ctx.setOutput(0, Tensor::scalar<int64_t>(ctx.in(0).numel())); }

void eyeLike(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  if (x.rank() != 2) ctx.fail("input must be a matrix");
  DType dt = ctx.hasAttr("dtype") ? static_cast<DType>(ctx.attrInt("dtype", 1)) : x.dtype();
  if (dtypeSize(dt) == 0) ctx.fail("dtype " + std::to_string(static_cast<int>(dt)) + " is not an element type fusec has");
  const int64_t k = ctx.attrInt("k", 0);
  Tensor eye(DType::Float32, x.shape());
  // Only the rows the diagonal crosses: i + k in [0, cols).
  const int64_t rows = x.dim(0), cols = x.dim(1);
  const int64_t first = k < 0 ? std::min(rows, -k) : 0;
  const int64_t last = k >= cols ? 0 : std::min(rows, cols - k);
  for (int64_t i = first; i < last; ++i) eye.data<float>()[i * cols + i + k] = 1.f;
  ctx.setOutput(0, dt == DType::Float32 ? eye : eye.castTo(dt));
}

}  // namespace

void registerGeneratorKernels(KernelRegistry& r) {
  r["Constant"] = constant;
  r["ConstantOfShape"] = constantOfShape;
  r["Range"] = range;
  r["Shape"] = shape;
  r["Size"] = size;
  r["EyeLike"] = eyeLike;
}

}  // namespace fusec::interp
